"""A seeded ONNX model mutator and a forked, time-limited runner for the reliability suite.

`mutants(models, n, seed)` yields (model name, kind, seed, bytes) round-robin over the
mutation kinds; the same seed always gives the same mutants. `in_child(fn)` runs fn in a
forked child with a time limit, so a crash (a signal) or a hang is observed, not suffered.
"""

from __future__ import annotations

import json
import os
import random
import select
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import onnx
from onnx import AttributeProto as A

MODELS_DIR = Path(__file__).resolve().parents[2] / "models"

#: ops a node may be swapped for
SWAP_OPS = ("Add", "Relu", "MatMul", "Reshape", "Concat", "Gather", "Transpose", "Softmax", "Conv", "Slice",
            "Split", "Scan", "If", "Loop", "ReduceSum", "Cast", "Shape", "Expand", "Where", "Identity",
            "LayerNormalization", "Gemm", "Squeeze", "Unsqueeze", "Pad", "TopK", "NonZero", "Resize",
            "Range", "ConstantOfShape", "Tile", "Einsum", "BatchNormalization", "MaxPool", "Flatten")


def _graphs(g: onnx.GraphProto) -> Iterator[onnx.GraphProto]:
    yield g
    for n in g.node:
        for a in n.attribute:
            if a.type == A.GRAPH:
                yield from _graphs(a.g)
            elif a.type == A.GRAPHS:
                for sg in a.graphs:
                    yield from _graphs(sg)


def _nodes(m: onnx.ModelProto) -> list[onnx.NodeProto]:
    return [n for g in _graphs(m.graph) for n in g.node]


def _value_infos(m: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    return [vi for g in _graphs(m.graph) for vi in (*g.input, *g.output, *g.value_info)]


def _names(m: onnx.ModelProto) -> list[str]:
    out = []
    for g in _graphs(m.graph):
        out += [vi.name for vi in g.input] + [t.name for t in g.initializer]
        out += [o for n in g.node for o in n.output if o]
    return out


# ---- the mutations: each changes `m` in place (or returns new bytes), or returns False ----------

def drop_input(m, rng):
    nodes = [n for n in _nodes(m) if len(n.input)]
    if not nodes:
        return False
    n = rng.choice(nodes)
    i = rng.randrange(len(n.input))
    if rng.random() < 0.5:
        del n.input[i]
    else:
        n.input[i] = ""
    return True


def drop_node(m, rng):
    gs = [g for g in _graphs(m.graph) if len(g.node)]
    if not gs:
        return False
    g = rng.choice(gs)
    del g.node[rng.randrange(len(g.node))]
    return True


def attr_type(m, rng):
    attrs = [a for n in _nodes(m) for a in n.attribute if a.type != A.GRAPH]
    if not attrs:
        return False
    a = rng.choice(attrs)
    old = a.type
    for f in ("i", "f", "s", "t"):
        a.ClearField(f)
    for f in ("ints", "floats", "strings", "tensors"):
        a.ClearField(f)
    choice = rng.choice(["STRINGS", "FLOAT", "INTS", "STRING", "INT", "FLOATS", "TENSOR", "bogus"])
    if choice == "STRINGS":
        a.type, a.strings[:] = A.STRINGS, [b"1", b"x"]
    elif choice == "FLOAT":
        a.type, a.f = A.FLOAT, rng.choice([1.5, 2.0, float("nan")])
    elif choice == "INTS":
        a.type, a.ints[:] = A.INTS, [1, 2]
    elif choice == "STRING":
        a.type, a.s = A.STRING, b"x"
    elif choice == "INT":
        a.type, a.i = A.INT, 1
    elif choice == "FLOATS":
        a.type, a.floats[:] = A.FLOATS, [0.5]
    elif choice == "TENSOR":
        a.type = A.TENSOR
        a.t.CopyFrom(onnx.helper.make_tensor("t", onnx.TensorProto.FLOAT, [2], [1.0, 2.0]))
    else:
        a.type = A.UNDEFINED
    return a.type != old or choice == "FLOAT"


def attr_value(m, rng):
    attrs = [a for n in _nodes(m) for a in n.attribute if a.type in (A.INT, A.INTS, A.FLOAT, A.FLOATS, A.STRING)]
    if not attrs:
        return False
    a = rng.choice(attrs)
    big = [-1, 0, 1, 2, 3, -3, 7, 2**31, 2**40, -(2**63), 2**63 - 1]
    if a.type == A.INT:
        a.i = rng.choice(big)
    elif a.type == A.INTS:
        vals = list(a.ints)
        op = rng.randrange(4)
        if op == 0 and vals:
            vals[rng.randrange(len(vals))] = rng.choice(big)
        elif op == 1:
            vals.append(rng.choice(big))
        elif op == 2 and vals:
            vals.pop()
        else:
            vals = [-v for v in vals] or [5]
        a.ints[:] = vals
    elif a.type == A.FLOAT:
        a.f = rng.choice([float("nan"), float("inf"), -1.0, 0.0, 1e30])
    elif a.type == A.FLOATS:
        a.floats[:] = [rng.choice([float("nan"), -1.0, 0.0])] * max(1, len(a.floats) + rng.choice([-1, 0, 1]))
    else:
        a.s = rng.choice([b"bogus", b"", b"\xff\xfe"])
    return True


def elem_type(m, rng):
    targets = [vi.type.tensor_type for vi in _value_infos(m) if vi.type.HasField("tensor_type")]
    inits = [t for g in _graphs(m.graph) for t in g.initializer]
    if rng.random() < 0.3 and inits:
        t = rng.choice(inits)
        t.data_type = rng.choice([0, 99, 6, 7, 10, 11, 9])
        return True
    if not targets:
        return False
    rng.choice(targets).elem_type = rng.choice([0, 99, 2, 3, 6, 7, 9, 10, 11, 16, 8])
    return True


def dims(m, rng):
    vis = [vi for vi in _value_infos(m) if vi.type.HasField("tensor_type")]
    if not vis:
        return False
    tt = rng.choice(vis).type.tensor_type
    op = rng.randrange(5)
    if op == 0 or not len(tt.shape.dim):
        tt.shape.dim.add().dim_value = rng.choice([1, 3, 0])
    elif op == 1:
        d = rng.choice(tt.shape.dim)
        d.dim_value = rng.choice([-5, 0, 1, 7, 2**40, 2**62])
    elif op == 2:
        d = rng.choice(tt.shape.dim)
        d.dim_param = rng.choice(["", "N", "q + 1", "2*q", "-1", "floor", "a b"])
    elif op == 3:
        tt.ClearField("shape")
    else:
        del tt.shape.dim[rng.randrange(len(tt.shape.dim))]
    return True


def init_dims(m, rng):
    inits = [t for g in _graphs(m.graph) for t in g.initializer]
    if not inits:
        return False
    t = rng.choice(inits)
    op = rng.randrange(3)
    if op == 0 and len(t.dims):
        t.dims[rng.randrange(len(t.dims))] = rng.choice([-1, -7, 0, 2**40])
    elif op == 1:
        t.dims.append(rng.choice([2, 3]))
    else:
        t.dims[:] = list(t.dims)[:-1] if len(t.dims) else [5]
    return True


def dup_name(m, rng):
    names = _names(m)
    if len(names) < 2:
        return False
    g = m.graph
    op = rng.randrange(4)
    if op == 0 and len(g.output) >= 2:
        g.output[1].name = g.output[0].name  # two graph outputs of one name
        return True
    if op == 1 and len(g.initializer) and len(g.input):
        g.input[0].name = rng.choice(g.initializer).name  # an input named like an initializer
        return True
    nodes = [n for n in _nodes(m) if len(n.output)]
    if not nodes:
        return False
    n = rng.choice(nodes)
    n.output[rng.randrange(len(n.output))] = rng.choice(names)
    return True


def swap_op(m, rng):
    nodes = _nodes(m)
    if not nodes:
        return False
    n = rng.choice(nodes)
    n.op_type = rng.choice([o for o in SWAP_OPS if o != n.op_type])
    return True


def versions(m, rng):
    if rng.random() < 0.5:
        m.ir_version = rng.choice([0, 1, 3, 4, 99])
    else:
        ops = [o for o in m.opset_import if o.domain in ("", "ai.onnx")]
        if not ops:
            return False
        ops[0].version = rng.choice([0, 1, 6, 7, 10, 99])
    return True


def value_info(m, rng):
    """A value_info entry whose type conflicts with what the node makes."""
    nodes = [n for n in _nodes(m) if len(n.output) and n.output[0]]
    if not nodes:
        return False
    n = rng.choice(nodes)
    vi = m.graph.value_info.add()
    vi.name = n.output[0]
    shape = rng.choice([[1], [2, 3], [], [7, 7, 7, 7]])
    vi.type.CopyFrom(onnx.helper.make_tensor_type_proto(rng.choice([1, 7, 9, 0]), shape))
    return True


def empty_graph(m, rng):
    g = m.graph
    op = rng.randrange(3)
    if op == 0:
        g.ClearField("node")
    elif op == 1:
        g.ClearField("output")
    else:
        g.ClearField("node")
        g.ClearField("output")
        g.ClearField("input")
        g.ClearField("initializer")
    return True


PROTO_MUTATIONS: dict[str, Callable] = {
    "drop_input": drop_input, "drop_node": drop_node, "attr_type": attr_type, "attr_value": attr_value,
    "elem_type": elem_type, "dims": dims, "init_dims": init_dims, "dup_name": dup_name, "swap_op": swap_op,
    "versions": versions, "value_info": value_info, "empty_graph": empty_graph,
}
BYTE_MUTATIONS = ("truncate", "flip_bytes")
KINDS = (*PROTO_MUTATIONS, *BYTE_MUTATIONS)


def mutate(data: bytes, kind: str, rng: random.Random) -> bytes | None:
    """One mutant of the serialized model, or None when the kind does not apply to it."""
    if kind == "truncate":
        return data[:rng.randrange(1, len(data))]
    if kind == "flip_bytes":
        b = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        return bytes(b)
    m = onnx.load_from_string(data)
    if not PROTO_MUTATIONS[kind](m, rng):
        return None
    return m.SerializeToString()


def mutants(models: list[str], n: int, seed: int, kinds=KINDS) -> Iterator[tuple[str, str, int, bytes]]:
    """n mutants, round-robin over kinds and models: (model, kind, mutant seed, bytes)."""
    data = {name: (MODELS_DIR / name).read_bytes() for name in models}
    k = made = 0
    while made < n:
        kind, name = kinds[k % len(kinds)], models[(k // len(kinds)) % len(models)]
        s = seed * 1_000_003 + k
        k += 1
        out = mutate(data[name], kind, random.Random(s))
        if out is None:
            if k > 50 * n:
                return
            continue
        made += 1
        yield name, kind, s, out


# ---- the forked runner ------------------------------------------------------------------------

def in_child(fn: Callable[[], dict], timeout: float) -> dict:
    """fn() in a forked child: its dict, or {"outcome": "crash", "signal": ...} / {"outcome": "hang"}."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        os.close(r)
        try:
            res = fn()
        except BaseException as e:  # anything fn did not handle is a finding
            res = {"outcome": "exception", "detail": f"{type(e).__name__}: {e}"[:500]}
        try:
            os.write(w, json.dumps(res, default=str).encode())
        finally:
            os._exit(0)
    os.close(w)
    chunks, deadline = [], time.monotonic() + timeout
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return {"outcome": "hang", "detail": f"no answer in {timeout:.0f} s"}
            ready, _, _ = select.select([r], [], [], left)
            if ready:
                b = os.read(r, 1 << 16)
                if not b:
                    break
                chunks.append(b)
    finally:
        os.close(r)
    _, status = os.waitpid(pid, 0)
    if os.WIFSIGNALED(status):
        return {"outcome": "crash", "detail": f"signal {os.WTERMSIG(status)}"}
    try:
        return json.loads(b"".join(chunks))
    except ValueError:
        return {"outcome": "crash", "detail": f"child exited {os.WEXITSTATUS(status)} without an answer"}
