"""Which outputs of a kernel program may alias which inputs: the in-place proof.

The dispatcher serves a call whose output k aliases input i exactly (same bytes, same
shape) only with a version for which `in_place_pairs` returned (k, i). The proof is
conservative, over the program's statements in order:

- every statement is a plain `Compute` (control flow would hide the order of accesses);
- the output is written by exactly one compute W, into the buffer itself (no view), over
  the output's own shape, with no reduction in W's body (a reduction may keep partial results in the output while it
  still reads the input);
- W reads the input only at W's own index (element e of the output depends on element e of
  the input alone, so each element is read before the same element is written, and no
  other element's read can see a write);
- no statement after W reads the input, and no view of the input or the output exists;
- the two have the same dtype (whole bytes) and the same shape.

Anything else is not proved, and the dispatcher keeps refusing the overlap.
"""

from __future__ import annotations

from onnxcc.ir import canon

from .expr import Const, Load, Reduce, walk
from .program import Compute, KernelProgram


def _at_own_index(c: Compute, load: Load) -> bool:
    """The load reads the element W writes: index k is W's var k (or 0 where that extent is 1)."""
    if len(load.indices) != len(c.vars):
        return False
    for idx, (v, extent) in zip(load.indices, c.vars, strict=True):
        if idx == v:
            continue
        if isinstance(idx, Const) and idx.value == 0 and canon(extent) == 1:
            continue
        return False
    return True


def _safe(p: KernelProgram, out: str, inp: str) -> bool:
    o, x = p.buffers[out], p.buffers[inp]
    if o.dtype != x.dtype or o.dtype.bits < 8 or o.shape != x.shape:
        return False
    if any(b.alias_of is not None and p.root(b.name) in (out, inp) for b in p.buffers.values()):
        return False
    if not all(type(s) is Compute for s in p.body):
        return False
    writers = [k for k, s in enumerate(p.body) if isinstance(s, Compute) and s.out == out]
    if len(writers) != 1:
        return False
    w = writers[0]
    c = p.body[w]
    assert isinstance(c, Compute)
    if tuple(canon(d) for d in c.extents) != o.shape:  # W must cover the output exactly, once
        return False
    nodes = list(walk(c.body))
    if any(isinstance(e, Reduce) for e in nodes):
        return False
    if not all(_at_own_index(c, e) for e in nodes if isinstance(e, Load) and e.buffer == inp):
        return False
    if any(isinstance(e, Load) and e.buffer == out for e in nodes):
        return False
    return not any(inp in s.reads() for s in p.body[w + 1:])


def in_place_pairs(p: KernelProgram) -> list[tuple[int, int]]:
    """(output index, input index) pairs the program computes correctly in place."""
    return [(k, i) for k, out in enumerate(p.outputs) for i, inp in enumerate(p.inputs) if _safe(p, out, inp)]
