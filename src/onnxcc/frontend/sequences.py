"""Sequences and optionals, resolved while importing: the IR never holds one.

A sequence whose length the compile knows is a Python list of tensor Values (`SeqVal`), an
optional is `OptVal` (absent, or a tensor / SeqVal); the importer's scope maps ONNX names
to them as it maps tensors to Values. Each sequence op is resolved when its node is
imported: SequenceAt / Insert / Erase pick list items at positions whose values shape
inference knows, SplitToSequence becomes one Split, ConcatFromSequence a Concat, SequenceMap
and a Loop that carries or reads a sequence are unrolled (their trip counts must be known),
an If over sequences is inlined when its condition is known, else it yields the elements as
tensors (both branches must give the same structure).

What decides a structure must be known at compile time. A graph input's value takes the
value the compile was given (ValueDependentError names the inputs when none was: the
callers of build_for_inputs retry), an input dim likewise (DimDependentError); @main is then
guarded on them. Anything else unknown is refused by node name.

Graph inputs of these types take their structure from the caller (`structure`: input name
-> spec, io_structure.py); each element becomes a tensor parameter `NAME.K`. Graph outputs
are flattened the same way; `module.attrs["input_structure"]` / `["output_structure"]`
record both for NAME.json and the loader.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx

from ..errors import ImportError_, UnsupportedOp
from ..io_structure import Spec, flat_names, parse_spec
from ..ir import DType, TensorType, Value

#: the most iterations a Loop over sequences is unrolled to
MAX_UNROLL = 1024


@dataclass
class SeqVal:
    """A sequence of known length: its element tensors, in order."""

    dtype: DType
    items: list[Value]


@dataclass
class OptVal:
    """An optional: `value` None when absent, else a tensor Value or a SeqVal."""

    value: Value | SeqVal | None
    #: what it would hold (for messages): "tensor" or "sequence"
    kind: str = "tensor"


@dataclass
class StackedSeq:
    """A sequence whose length only a symbol tells: a Loop's appended elements, stacked along
    a new axis 0 of `value` (a scan output). ConcatFromSequence and SequenceLength read it;
    every other sequence op refuses it (`_seq`)."""

    dtype: DType
    value: Value


Item = Value | SeqVal | OptVal | StackedSeq

SEQUENCE_OPS = ("SequenceEmpty", "SequenceConstruct", "SequenceAt", "SequenceInsert", "SequenceErase",
                "SequenceLength", "SplitToSequence", "ConcatFromSequence", "SequenceMap", "Optional",
                "OptionalHasElement", "OptionalGetElement")


def is_structured(t: onnx.TypeProto) -> bool:
    return t.WhichOneof("value") in ("sequence_type", "optional_type")


# ---- graph inputs and outputs ------------------------------------------------------------------

def input_item(imp, vi: onnx.ValueInfoProto, spec_text: str | None, add_arg) -> Item:
    """The Item for a sequence / optional graph input, its tensors made parameters by
    `add_arg(type, name)`."""
    kind = vi.type.WhichOneof("value")
    if spec_text is None:
        what = "a sequence" if kind == "sequence_type" else "an optional"
        hint = "seq:N" if kind == "sequence_type" else "none, some or some:seq:N"
        flag = f"--input-structure {vi.name}={hint.split()[0].rstrip(',')}"
        raise ImportError_(f'{imp.what}: input "{vi.name}" is {what}: the compile needs its structure '
                           f'(input_structure={{"{vi.name}": "{hint}"}}, {flag}, or onnxcc run with --inputs)')
    sp = parse_spec(spec_text, vi.name)
    t = vi.type
    if kind == "optional_type":
        if not sp.optional:
            raise ImportError_(f'{imp.what}: input "{vi.name}" is an optional; its structure is none, some or '
                               f"some:seq:N, not {spec_text!r}")
        t = t.optional_type.elem_type
        inner = "sequence" if t.WhichOneof("value") == "sequence_type" else "tensor"
        if not sp.present:
            return OptVal(None, inner)
        if (inner == "sequence") != (sp.length is not None):
            raise ImportError_(f'{imp.what}: input "{vi.name}" is an optional {inner}; {spec_text!r} does not fit')
        return OptVal(_present_item(imp, vi.name, t, sp, add_arg), inner)
    if sp.optional or sp.length is None:
        raise ImportError_(f'{imp.what}: input "{vi.name}" is a sequence; its structure is seq:N, not {spec_text!r}')
    return _present_item(imp, vi.name, t, sp, add_arg)


def _present_item(imp, name: str, t: onnx.TypeProto, sp: Spec, add_arg) -> Value | SeqVal:
    if sp.length is None:
        return add_arg(_tensor_type(imp, name, t.tensor_type, None, name), name)
    et = t.sequence_type.elem_type
    if et.WhichOneof("value") != "tensor_type":
        raise ImportError_(f'{imp.what}: input "{name}": sequences of {et.WhichOneof("value")} are not supported')
    dt = imp.dtype(et.tensor_type.elem_type, f'input "{name}"')
    items = []
    for k, arg in enumerate(flat_names(name, sp)):
        rank = sp.ranks[k] if sp.ranks is not None else None
        items.append(add_arg(_tensor_type(imp, arg, et.tensor_type, rank, name, k), arg))
    return SeqVal(dt, items)


def _tensor_type(imp, arg: str, tt: onnx.TypeProto.Tensor, rank: int | None, name: str,
                 k: int | None = None) -> TensorType:
    """An element's type: the declared dims, each unknown one a symbol of this element's own
    (the elements of a sequence need not share a shape: element k's `N` is `N_k`)."""
    dt = imp.dtype(tt.elem_type, f'input "{name}"')
    if tt.HasField("shape"):
        dims = list(tt.shape.dim)
        if rank is not None and rank != len(dims):
            raise ImportError_(f'{imp.what}: input "{name}": element {arg!r} has rank {rank}, the model declares '
                               f"{len(dims)}")

        def hint(i, d) -> str:
            return f"{d.dim_param}_{k}" if d.dim_param and k is not None else f"{arg}_d{i}"

        return TensorType(dt, tuple(int(d.dim_value) if d.HasField("dim_value") and d.dim_value >= 0 else
                                    imp.module.symbols.fresh(_sym(hint(i, d)), origin=f'input "{arg}" dim {i}')
                                    for i, d in enumerate(dims)))
    if rank is None:
        raise ImportError_(f'{imp.what}: input "{name}": the model gives its elements no shape; the structure '
                           "must give their ranks (seq:N:ranks=R0,R1,...)")
    return TensorType(dt, tuple(imp.module.symbols.fresh(_sym(f"{arg}_d{i}"), origin=f'input "{arg}" dim {i}')
                                for i in range(rank)))


def _sym(s: str) -> str:
    import re

    out = re.sub(r"[^A-Za-z0-9_]", "_", s)
    return out if out and not out[0].isdigit() else "d" + out


def flatten_output(name: str, item: Item, where: str) -> tuple[str, list[tuple[str, Value]]]:
    """(spec text, [(C name, Value)]) of one graph output."""
    if isinstance(item, Value):
        return "tensor", [(name, item)]
    if isinstance(item, SeqVal):
        sp = Spec(False, True, len(item.items), tuple(v.type.rank for v in item.items))
        return sp.text(), list(zip(flat_names(name, sp), item.items))
    if isinstance(item, StackedSeq):  # its elements would be C tensors NAME.0 .. NAME.K-1: K unknown
        raise ImportError_(f"{where}: a sequence that a Loop appends to a number of times only the run tells "
                           "cannot be a graph output (the C ABI flattens a sequence into a known number of "
                           "tensors); only ConcatFromSequence and SequenceLength read one")
    inner = item.value
    if inner is None:
        return "none", []
    if isinstance(inner, Value):
        return "some", [(name, inner)]
    if isinstance(inner, SeqVal):
        sp = Spec(True, True, len(inner.items), tuple(v.type.rank for v in inner.items))
        return sp.text(), list(zip(flat_names(name, sp), inner.items))
    raise ImportError_(f"{where}: an optional of an optional is not supported")


#: the input slots whose values decide a structure, per op
_VALUE_SLOTS = {"SequenceAt": (1,), "SequenceInsert": (2,), "SequenceErase": (1,), "SplitToSequence": (1,),
                "Loop": (0, 1), "If": (0,)}


def structure_inputs(g: onnx.GraphProto, inputs: set[str]) -> list[str]:
    """Graph inputs (of `inputs`) read where a value may decide a sequence's structure: the
    positions and split sizes of sequence ops, Loop trip counts and conditions, If
    conditions, in the graph and its subgraphs."""
    out: list[str] = []

    def walk(graph):
        for n in graph.node:
            if n.domain not in ("", "ai.onnx"):
                continue
            slots = [n.input[k] for k in _VALUE_SLOTS.get(n.op_type, ()) if k < len(n.input)]
            out.extend(x for x in slots if x in inputs and x not in out)
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    walk(a.g)

    walk(g)
    return out


# ---- nodes ---------------------------------------------------------------------------------------

def wants(b, node: onnx.NodeProto) -> bool:
    """Whether this node is resolved here: a sequence / optional op, or Identity / If / Loop
    over sequences or optionals."""
    if node.op_type in SEQUENCE_OPS and node.domain in ("", "ai.onnx"):
        return True
    if any(not isinstance(b.scope.get(n), (Value, type(None))) for n in node.input if n):
        return True
    from .onnx_import import free_vars

    for a in node.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            if node.op_type in ("If", "Loop") and any(is_structured(o.type) for o in a.g.output):
                return True
            if any(not isinstance(b.scope.get(n), (Value, type(None))) for n in free_vars(a.g)):
                return True
    return False


def convert(b, node: onnx.NodeProto) -> list[Item]:
    ins: list[Item | None] = [b.scope[n] if n else None for n in node.input]
    for n in node.input:
        if n and n not in b.scope:
            b.lookup(n, f'node "{b.loc}" ({node.op_type})')  # the importer's "not defined" error
    fn = _HANDLERS.get(node.op_type) if node.domain in ("", "ai.onnx") else None
    if fn is None:
        raise UnsupportedOp(node.op_type, node.domain, b.loc, f"{node.op_type} over a sequence or optional "
                            "(an input, or a value its subgraph reads) is not supported")
    # a TYPE_PROTO attribute (Optional's `type`) only types what is known here anyway
    attrs = {a.name: b.imp.attr(a, node, b.loc) for a in node.attribute
             if a.type not in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.TYPE_PROTO)}
    return fn(b, node, ins, attrs)


def refuse(b, node, why: str):
    return UnsupportedOp(node.op_type, node.domain, b.loc, why)


class DataCondition(UnsupportedOp):
    """A Loop being unrolled whose body's condition depends on data: a tensor Loop is then
    kept as a loop instead (onnx_import; ops/loop_carried.py compiles it)."""


def _seq(b, node, x, k: int = 0) -> SeqVal:
    if isinstance(x, StackedSeq):
        raise refuse(b, node, f"input {k} is a sequence a Loop appended to a run-dependent number of times; only "
                     "ConcatFromSequence and SequenceLength take one")
    if not isinstance(x, SeqVal):
        raise refuse(b, node, f"input {k} must be a sequence")
    return x


def _tensor(b, node, x, k: int) -> Value:
    if not isinstance(x, Value):
        raise refuse(b, node, f"input {k} must be a tensor")
    return x


def known_ints(b, v: Value) -> list[int] | None:
    """The value of a small integer / bool tensor when the compile knows it (a constant, or
    what shape inference tracked)."""
    from ..ir import OpResult

    got = b.imp.values.get(v)
    if got is None and isinstance(v, OpResult) and v.op.name in ("onnx.Identity", "onnx.Not"):
        # a loop body's `cond_out = Identity(cond_in)`; `Not(OptionalHasElement(x))`
        inner = known_ints(b, v.op.operands[0])
        if inner is None or v.op.name == "onnx.Identity":
            return inner
        return [int(not x) for x in inner]
    if got is None and isinstance(v, OpResult) and v.op.name == "cc.const":
        got = v.op.attrs.get("value")
        if not isinstance(got, np.ndarray):
            return None
    if got is None:
        return None
    out = []
    for x in np.asarray(got, dtype=object).reshape(-1).tolist():
        if isinstance(x, (bool, int, np.integer, np.bool_)) or getattr(x, "is_Integer", False):
            out.append(int(x))
        else:
            return None
    return out


def need_ints(b, node, named: list[tuple[Value, str]], decides: str = "a sequence's structure") -> list[list[int]]:
    """The known values of `named` [(value, what it is)]. A graph input among them takes the
    value the compile was given for it (a value version: the dispatcher checks it), else
    ValueDependentError names every such input (onnxcc run, the Session and the conformance
    harness retry with the values they hold); anything else unknown is refused by name."""
    from ..errors import ValueDependentError
    from ..ir import BlockArg

    out, missing = [], []
    for v, what in named:
        got = known_ints(b, v)
        if got is None and isinstance(v, BlockArg) and v.block is b.imp.main_block:
            got = b.imp.input_value(v.name)
            if got is None:
                missing.append(v.name)
                continue
        if got is None:
            raise refuse(b, node, f"{what} depends on data the compile does not know; it decides {decides}, "
                         "which must be known at compile time")
        out.append(got)
    if missing:
        # every input that may decide a structure, so one retry with values builds (those
        # a value version cannot hold are set aside by the caller)
        missing += [n for n in b.imp.structure_inputs if n not in missing and n not in b.imp.input_values]
        which = ", ".join(f'"{n}"' for n in missing)
        flags = " ".join(f"--specialize-value {n}=V" for n in missing)
        raise ValueDependentError(
            f'node "{b.loc}" ({node.op_type}): {decides} depends on the value of input'
            f"{'s' if len(missing) > 1 else ''} {which}: compile versions for given values with {flags} "
            "(onnxcc run --inputs does it from the inputs it is given)", missing, b.imp.input_names)
    return out


def fixed_dim(b, node, d, what: str) -> int:
    """A symbolic dim a sequence's length hangs on, fixed at compile time: an input's dim
    the compile was given a value for (`specialize` with one value: @main is guarded on it),
    else DimDependentError naming the input and axis (the callers of build_for_inputs retry
    with the dim of the input they hold); a dim that is no input's is refused."""
    from ..errors import DimDependentError

    name = str(d)
    if name in b.imp.dim_values:
        v = b.imp.dim_values[name]
        b.imp.fixed_dims[name] = v
        return v
    for p in (b.imp.main_block.args if b.imp.main_block is not None else []):
        if d in p.type.shape:
            axis = list(p.type.shape).index(d)
            raise DimDependentError(
                f'node "{b.loc}" ({node.op_type}): {what} has length {name} (input "{p.name}" dim {axis}), and a '
                f"sequence's length would depend on it: compile for given values with --specialize {name}=V "
                "(onnxcc run --inputs does it from the inputs it is given)", [(p.name, axis, name)],
                b.imp.input_names)
    raise refuse(b, node, f"{what} has length {name}, not known at compile time: a sequence's length would "
                 "depend on it")


def _position(b, node, v: Value | None, n: int, default: int, insert: bool = False) -> int:
    if v is None:
        return default
    got = need_ints(b, node, [(v, "the position")])[0]
    if len(got) != 1:
        raise refuse(b, node, f"the position must be one number, got {len(got)}")
    p = got[0]
    hi = n if insert else n - 1
    if not -n <= p <= hi:
        raise refuse(b, node, f"position {p} is out of range for a sequence of {n}")
    return p + n if p < 0 else p


def _const(b, arr) -> Value:
    return b.const(np.asarray(arr))


def _sequence_empty(b, node, ins, attrs):
    dt = b.imp.dtype(int(attrs.get("dtype", onnx.TensorProto.FLOAT)), f'node "{b.loc}" (SequenceEmpty)')
    return [SeqVal(dt, [])]


def _sequence_construct(b, node, ins, attrs):
    items = [_tensor(b, node, x, k) for k, x in enumerate(ins)]
    if not items:
        raise refuse(b, node, "SequenceConstruct needs at least one input")
    if len({v.type.dtype for v in items}) != 1:
        raise refuse(b, node, "the inputs' element types differ")
    return [SeqVal(items[0].type.dtype, items)]


def _sequence_at(b, node, ins, attrs):
    s = _seq(b, node, ins[0])
    if not s.items:
        raise refuse(b, node, "SequenceAt of an empty sequence")
    return [s.items[_position(b, node, _tensor(b, node, ins[1], 1), len(s.items), 0)]]


def _sequence_insert(b, node, ins, attrs):
    s = _seq(b, node, ins[0])
    t = _tensor(b, node, ins[1], 1)
    if t.type.dtype != s.dtype:
        raise refuse(b, node, f"inserting a {t.type.dtype.value} tensor into a sequence of {s.dtype.value}")
    n = len(s.items)
    p = _position(b, node, ins[2] if len(ins) > 2 else None, n, n, insert=True)
    return [SeqVal(s.dtype, s.items[:p] + [t] + s.items[p:])]


def _sequence_erase(b, node, ins, attrs):
    s = _seq(b, node, ins[0])
    n = len(s.items)
    if not n:
        raise refuse(b, node, "SequenceErase of an empty sequence")
    p = _position(b, node, ins[1] if len(ins) > 1 else None, n, n - 1)
    return [SeqVal(s.dtype, s.items[:p] + s.items[p + 1:])]


def _sequence_length(b, node, ins, attrs):
    if isinstance(ins[0], StackedSeq):
        shape = b.emit("onnx.Shape", [ins[0].value], {"start": 0, "end": 1})[0]
        return b.emit("onnx.Squeeze", [shape, _const(b, np.array([0], np.int64))])
    return [_const(b, np.int64(len(_seq(b, node, ins[0]).items)))]


def _concat_stacked(b, node, st: StackedSeq, attrs):
    """ConcatFromSequence of stacked elements v[i]: with new_axis, axis 0 moved to `axis`;
    without, moved next to `axis` and merged into it (a Reshape)."""
    v = st.value
    new_axis = bool(int(attrs.get("new_axis", 0)))
    r = v.type.rank if new_axis else v.type.rank - 1  # the result's rank
    axis = int(attrs.get("axis", 0))
    if not -r <= axis < r:
        raise refuse(b, node, f"axis {axis} out of range for rank {r}")
    axis %= r
    if axis:
        perm = [*range(1, axis + 1), 0, *range(axis + 1, v.type.rank)]
        v = b.emit("onnx.Transpose", [v], {"perm": perm})[0]
    if new_axis:
        return [v]
    parts = [_const(b, np.array([-1], np.int64))]
    if axis:
        parts.insert(0, b.emit("onnx.Shape", [v], {"start": 0, "end": axis})[0])
    if axis + 2 < v.type.rank:
        parts.append(b.emit("onnx.Shape", [v], {"start": axis + 2})[0])
    shape = parts[0] if len(parts) == 1 else b.emit("onnx.Concat", parts, {"axis": 0})[0]
    return b.emit("onnx.Reshape", [v, shape])


def _concat_from_sequence(b, node, ins, attrs):
    if isinstance(ins[0], StackedSeq):
        return _concat_stacked(b, node, ins[0], attrs)
    s = _seq(b, node, ins[0])
    if not s.items:
        raise refuse(b, node, "ConcatFromSequence of an empty sequence")
    axis = int(attrs.get("axis", 0))
    items = s.items
    if int(attrs.get("new_axis", 0)):
        r = items[0].type.rank + 1
        if not -r <= axis < r:
            raise refuse(b, node, f"axis {axis} out of range for rank {r}")
        ax = _const(b, np.array([axis % r], np.int64))
        items = [b.emit("onnx.Unsqueeze", [v, ax])[0] for v in items]
    return b.emit("onnx.Concat", items, {"axis": axis})


def _split_to_sequence(b, node, ins, attrs):
    x = _tensor(b, node, ins[0], 0)
    r = x.type.rank
    axis = int(attrs.get("axis", 0))
    if not -r <= axis < r:
        raise refuse(b, node, f"axis {axis} out of range for rank {r}")
    axis %= r
    n = x.type.shape[axis]
    split = ins[1] if len(ins) > 1 else None
    keep = int(attrs.get("keepdims", 1))
    if split is not None and _tensor(b, node, split, 1).type.rank == 1:
        # the sizes give the length; Split checks at run time that they add up to the axis
        sizes = need_ints(b, node, [(split, "the split sizes")])[0]
        if any(k < 0 for k in sizes) or (isinstance(n, int) and sum(sizes) != n):
            raise refuse(b, node, f"split sizes {sizes} do not add up to the axis length {n}")
        keep = 1  # keepdims applies only without `split`
    else:
        if not isinstance(n, int):
            n = fixed_dim(b, node, n, "the split axis")
        if split is None:
            sizes = [1] * n
        else:
            k = need_ints(b, node, [(split, "the split size")])[0][0]
            if k <= 0:
                raise refuse(b, node, f"split {k} must be positive")
            sizes = [min(k, n - s) for s in range(0, n, k)]
            keep = 1
    if not sizes:
        return [SeqVal(x.type.dtype, [])]
    parts = b.emit("onnx.Split", [x, _const(b, np.array(sizes, np.int64))], {"axis": axis}, len(sizes))
    if not keep:
        axes = _const(b, np.array([axis], np.int64))
        parts = [b.emit("onnx.Squeeze", [v, axes])[0] for v in parts]
    return [SeqVal(x.type.dtype, parts)]


def _optional(b, node, ins, attrs):
    if ins and ins[0] is not None:
        v = ins[0]
        if isinstance(v, OptVal):
            raise refuse(b, node, "an optional of an optional is not supported")
        return [OptVal(v, "sequence" if isinstance(v, SeqVal) else "tensor")]
    return [OptVal(None)]


def _optional_has_element(b, node, ins, attrs):
    x = ins[0] if ins else None
    has = x is not None and not (isinstance(x, OptVal) and x.value is None)
    return [_const(b, np.bool_(has))]


def _optional_get_element(b, node, ins, attrs):
    x = ins[0] if ins else None
    if isinstance(x, OptVal):
        if x.value is None:
            raise refuse(b, node, "the optional is empty (known at compile time)")
        return [x.value]
    if x is None:
        raise refuse(b, node, "OptionalGetElement needs an input")
    return [x]


def _identity(b, node, ins, attrs):
    return [ins[0]]


# ---- subgraphs: SequenceMap, Loop, If --------------------------------------------------------------

def can_unroll(b, node) -> bool:
    """Whether a Loop's trip count and condition are constants or graph inputs (whose values
    a build can be given): then `unroll_loop` can unroll it."""
    from ..ir import BlockArg

    for n in list(node.input[:2]):
        if not n:
            continue
        v = b.scope.get(n)
        if not isinstance(v, Value):
            return False
        if known_ints(b, v) is None and not (isinstance(v, BlockArg) and v.block is b.imp.main_block):
            return False
    return True


def unroll_loop(b, node) -> list[Item]:
    """A tensor Loop whose carried value changes shape from one iteration to the next (a
    Slice at the iteration number grows or shrinks it): unrolled like a Loop over sequences,
    each iteration with its number a constant, so every shape is known. Its trip count and
    condition must be known: a graph input's value given to the compile (a value version,
    ValueDependentError names them otherwise) or a constant."""
    ins: list[Item | None] = [b.scope[n] if n else None for n in node.input]
    return _loop(b, node, ins, {}, "a Loop whose carried value changes shape across iterations")


def run_inline(b, g: onnx.GraphProto, binds: dict, tag: str) -> list[Item]:
    """Import subgraph `g` into b's own block (unrolled / inlined), its inputs bound to
    `binds`; the outer names stay visible. Returns its outputs."""
    from .onnx_import import GraphBuilder

    scope = dict(b.scope)
    scope.update(binds)
    sub = GraphBuilder(b.imp, b.block, scope, prefix=f"{b.loc}/{tag}/")
    parent_loc = b.loc
    sub.build(g)
    b.loc = parent_loc
    return [sub.scope[o.name] if o.name in sub.scope else sub.lookup(o.name, f'node "{parent_loc}" subgraph output')
            for o in g.output]


def _graph(b, node, key: str) -> onnx.GraphProto:
    for a in node.attribute:
        if a.name == key and a.type == onnx.AttributeProto.GRAPH:
            return a.g
    raise ImportError_(f'{b.imp.what}: node "{b.loc}" ({node.op_type}) has no {key!r} graph')


def _sequence_map(b, node, ins, attrs):
    g = _graph(b, node, "body")
    s0 = _seq(b, node, ins[0])
    n = len(s0.items)
    for k, x in enumerate(ins):
        if isinstance(x, SeqVal) and len(x.items) != n:
            raise refuse(b, node, f"input {k} is a sequence of {len(x.items)}, input 0 of {n}")
    if len(g.input) != len(ins):
        raise ImportError_(f'{b.imp.what}: node "{b.loc}" (SequenceMap): body takes {len(g.input)} inputs, '
                           f"the node gives {len(ins)}")
    per: list[list[Value]] = [[] for _ in g.output]
    for i in range(n):
        binds = {vi.name: (x.items[i] if isinstance(x, SeqVal) else x) for vi, x in zip(g.input, ins)}
        outs = run_inline(b, g, binds, f"map{i}")
        for j, o in enumerate(outs):
            per[j].append(_tensor(b, node, o, j))
    out = []
    for j, o in enumerate(g.output):
        if per[j]:
            out.append(SeqVal(per[j][0].type.dtype, per[j]))
        else:
            tt = o.type.tensor_type if o.type.HasField("tensor_type") else o.type.sequence_type.elem_type.tensor_type
            out.append(SeqVal(b.imp.dtype(tt.elem_type, f'node "{b.loc}" output {j}'), []))
    return out


_SEQ_LOOP = "a Loop over sequences"


def _seq_loop(b, node, ins, attrs):
    """A Loop over sequences: unrolled; one whose condition turns out to depend on data and
    whose sequences are only appended to is kept as a tensor Loop (`_appended_loop`)."""
    mark, saved = len(b.block.ops), list(b.module.constraints)
    try:
        return _loop(b, node, ins, attrs)
    except DataCondition:
        kept = _appended_loop(b, node, ins, mark, saved)
        if kept is None:
            raise
        return kept


def _appended_loop(b, node, ins, mark: int, saved: list) -> list[Item] | None:
    """A Loop whose sequences start empty and are only appended to, each by one SequenceInsert
    at the end (`out = SequenceInsert(seq, x)`, nothing else reading either), stays a tensor
    Loop: the partial unrolling is dropped, every such x becomes a scan output, and the
    sequence a `StackedSeq` of it. None when the loop is not of that form."""
    from .onnx_import import free_vars

    g = _graph(b, node, "body")
    state = ins[2:]
    seqs = [k for k, x in enumerate(state) if isinstance(x, SeqVal)]
    n = len(state)
    if not seqs or len(g.input) != 2 + n or any(x is not None and not isinstance(x, Value) for x in ins[:2]) \
            or any(not isinstance(x, (Value, SeqVal)) for x in state) or any(state[k].items for k in seqs):
        return None
    nested = {v for nd in g.node for a in nd.attribute if a.type == onnx.AttributeProto.GRAPH for v in free_vars(a.g)}
    inserts: dict[int, onnx.NodeProto] = {}
    for k in seqs:
        arg, out = g.input[2 + k].name, g.output[1 + k].name
        users = [nd for nd in g.node if arg in nd.input or out in nd.input]
        if len(users) != 1 or arg in nested or out in nested:
            return None
        nd = users[0]
        if nd.op_type != "SequenceInsert" or list(nd.input) != [arg, nd.input[1]] or list(nd.output) != [out]:
            return None
        inserts[k] = nd
    for op in reversed(b.block.ops[mark:]):  # the partial unrolling
        op.erase()
    b.module.constraints[:] = saved
    body = onnx.GraphProto()
    body.CopyFrom(g)
    del body.node[:], body.input[:], body.output[:]
    picks = [nd for nd in g.node if all(nd is not x for x in inserts.values())]
    elems = [f"{g.output[1 + k].name}.elem" for k in seqs]
    picks += [onnx.helper.make_node("Identity", [inserts[k].input[1]], [e]) for k, e in zip(seqs, elems)]
    body.node.extend(picks)
    body.input.extend([g.input[0], g.input[1], *(g.input[2 + k] for k in range(n) if k not in inserts)])
    body.output.extend([g.output[0], *(g.output[1 + k] for k in range(n) if k not in inserts),
                        *g.output[1 + n:], *(onnx.helper.make_empty_tensor_value_info(e) for e in elems)])
    outs = list(node.output) + [""] * (len(g.output) - 1 - len(node.output))
    stacked = [f"{node.name or b.loc}/stacked{k}" for k in seqs]
    loop = onnx.helper.make_node("Loop", [*node.input[:2], *(node.input[2 + k] for k in range(n) if k not in inserts)],
                                 [*(outs[k] for k in range(n) if k not in inserts), *outs[n:], *stacked],
                                 name=node.name, body=body)
    results = b.generic(loop, "onnx.Loop")
    kept = iter(results)
    tensors = [next(kept) for k in range(n) if k not in inserts]
    scans = [next(kept) for _ in outs[n:]]
    stacks = {k: StackedSeq(state[k].dtype, next(kept)) for k in seqs}
    it = iter(tensors)
    return [stacks[k] if k in stacks else next(it) for k in range(n)] + scans


def _loop(b, node, ins, attrs, kind: str = _SEQ_LOOP):
    """Unroll a Loop into b's block (`kind` says why it is unrolled, for the refusals)."""
    g = _graph(b, node, "body")
    m = ins[0] if ins else None
    c = ins[1] if len(ins) > 1 else None
    state: list[Item] = [x for x in ins[2:]]
    if any(x is None for x in state):
        raise refuse(b, node, "an absent loop-carried input")
    # a Loop over sequences is unrolled: its trip count and first condition must be known
    named = [(_tensor(b, node, x, k), what) for k, (x, what) in enumerate(((m, "the trip count"),
                                                                            (c, "the condition"))) if x is not None]
    got = need_ints(b, node, named, "a sequence's structure" if kind == _SEQ_LOOP else
                    f"how often {kind} runs (it is unrolled)")
    trip = cond = None
    if m is not None:
        trip = got.pop(0)[0]
    if c is not None:
        cond = bool(got.pop(0)[0])
    if trip is None and cond is None:
        raise refuse(b, node, f"{kind} without a trip count or condition never stops")
    n_state = len(state)
    if len(g.input) != 2 + n_state:
        raise ImportError_(f'{b.imp.what}: node "{b.loc}" (Loop): body takes {len(g.input)} inputs, expected '
                           f"2 + {n_state}")
    scans: list[list[Value]] = [[] for _ in range(len(g.output) - 1 - n_state)]
    i = 0
    while (trip is None or i < trip) and (cond is None or cond):
        if i >= MAX_UNROLL:
            raise refuse(b, node, f"{kind} is unrolled, up to {MAX_UNROLL} iterations")
        binds = {g.input[0].name: _const(b, np.int64(i)), g.input[1].name: _const(b, np.bool_(True))}
        binds.update({vi.name: x for vi, x in zip(g.input[2:], state)})
        outs = run_inline(b, g, binds, f"iter{i}")
        got = known_ints(b, _tensor(b, node, outs[0], 0))
        if got is None:
            raise DataCondition(node.op_type, node.domain, b.loc, f"the body's condition in iteration {i} depends "
                                f"on data the compile does not know; {kind} is unrolled, so when it stops must "
                                "be known")
        cond = bool(got[0])
        state = outs[1:1 + n_state]
        for j, o in enumerate(outs[1 + n_state:]):
            scans[j].append(_tensor(b, node, o, 1 + n_state + j))
        i += 1
    out = list(state)
    zero = None
    for j, vals in enumerate(scans):
        if not vals:
            raise refuse(b, node, f"scan output {j} of {kind} that runs no iteration")
        zero = zero or _const(b, np.array([0], np.int64))
        out.append(b.emit("onnx.Concat", [b.emit("onnx.Unsqueeze", [v, zero])[0] for v in vals], {"axis": 0})[0])
    return out


def _if(b, node, ins, attrs):
    c = _tensor(b, node, ins[0], 0)
    got = known_ints(b, c)
    if got is None and _differ(b, node):
        got = need_ints(b, node, [(c, "the condition")])[0]
    if got is not None:
        key = "then_branch" if got[0] else "else_branch"
        return run_inline(b, _graph(b, node, key), {}, key)
    from .onnx_import import free_vars

    branches = [_graph(b, node, k) for k in ("then_branch", "else_branch")]
    caps: list[str] = []
    for g in branches:
        caps += [n for n in free_vars(g) if n not in caps]
    if any(not isinstance(b.scope.get(n), Value) for n in caps):
        raise refuse(b, node, "a branch reads a sequence or optional from outside while the condition depends "
                     "on data; not supported")
    cap_values = [b.scope[n] for n in caps]
    regions, shapes = [], []
    for g in branches:
        region, shape = _flat_branch(b, node, g, cap_values, caps)
        regions.append(region)
        shapes.append(shape)
    if shapes[0] != shapes[1]:
        # the condition decides the structure: known for a graph input given a value, else refused
        got = need_ints(b, node, [(c, f"the condition (the branches give {_show(shapes[0])} and "
                                      f"{_show(shapes[1])})")])[0]
        key = "then_branch" if got[0] else "else_branch"
        return run_inline(b, _graph(b, node, key), {}, key)
    flat = b.emit("onnx.If", [c, *cap_values], {}, sum(_count(s) for s in shapes[0]), regions=regions)
    return _rebuild(shapes[0], flat)


def _differ(b, node) -> bool:
    """Whether the branches declare differently structured outputs (an empty optional in
    one, a value in the other): then the condition itself decides the structure."""
    outs = [[o.type for o in _graph(b, node, k).output] for k in ("then_branch", "else_branch")]
    for t, e in zip(*outs):
        if t.WhichOneof("value") != e.WhichOneof("value"):
            return True
    for k in ("then_branch", "else_branch"):
        g = _graph(b, node, k)
        made = {o for n in g.node if n.op_type == "Optional" and not n.input for o in n.output}
        if any(o.name in made for o in g.output):
            return True  # a branch that yields an empty optional
    return False


def _flat_branch(b, node, g, cap_values, cap_names):
    from ..ir import Block, Op, Region
    from .onnx_import import GraphBuilder

    block = Block([v.type for v in cap_values], cap_names)
    sub = GraphBuilder(b.imp, block, dict(zip(cap_names, block.args)), prefix=b.loc + "/")
    parent_loc = b.loc
    sub.build(g)
    b.loc = parent_loc
    outs = [sub.lookup(o.name, f'node "{parent_loc}" subgraph output') for o in g.output]
    shape = [_shape_of(x) for x in outs]
    block.append(Op("yield", [v for x in outs for v in _leaves(x)]))
    return Region([block]), shape


def _shape_of(x: Item):
    if isinstance(x, Value):
        return ("t", x.type.dtype)
    if isinstance(x, SeqVal):
        return ("seq", x.dtype, len(x.items))
    return ("opt", None if x.value is None else _shape_of(x.value))


def _leaves(x: Item) -> list[Value]:
    if isinstance(x, Value):
        return [x]
    if isinstance(x, SeqVal):
        return list(x.items)
    return [] if x.value is None else _leaves(x.value)


def _count(s) -> int:
    if s[0] == "t":
        return 1
    if s[0] == "seq":
        return s[2]
    return 0 if s[1] is None else _count(s[1])


def _rebuild(shapes, flat: list[Value]) -> list[Item]:
    out, k = [], 0

    def one(s):
        nonlocal k
        if s[0] == "t":
            k += 1
            return flat[k - 1]
        if s[0] == "seq":
            k += s[2]
            return SeqVal(s[1], flat[k - s[2]:k])
        return OptVal(None if s[1] is None else one(s[1]))

    for s in shapes:
        out.append(one(s))
    return out


def _show(shape) -> str:
    def one(s):
        if s[0] == "t":
            return "tensor"
        if s[0] == "seq":
            return f"sequence of {s[2]}"
        return "empty optional" if s[1] is None else f"optional {one(s[1])}"

    return ", ".join(one(s) for s in shape)


_HANDLERS = {
    "SequenceEmpty": _sequence_empty, "SequenceConstruct": _sequence_construct, "SequenceAt": _sequence_at,
    "SequenceInsert": _sequence_insert, "SequenceErase": _sequence_erase, "SequenceLength": _sequence_length,
    "ConcatFromSequence": _concat_from_sequence, "SplitToSequence": _split_to_sequence,
    "SequenceMap": _sequence_map, "Optional": _optional, "OptionalHasElement": _optional_has_element,
    "OptionalGetElement": _optional_get_element, "Identity": _identity, "Loop": _seq_loop, "If": _if,
}
