"""Old ai.onnx opsets (1 .. 12) -> the forms the importer takes (opset 13 and later).

`upgrade(proto, opset, what)` runs before the import of a model older than TARGET_OPSET:

  1. every node whose op has a RULE here, keyed by (op_type, since_version of its schema at
     the model's opset), is set aside: moved into the domain `onnxcc.compat.v<since>` so
     that onnx's version converter passes it through untouched;
  2. `onnx.version_converter` upgrades the rest of the model to TARGET_OPSET. Measured on
     the old-opset node tests, onnx's model sets and per-op probes against onnxruntime, its
     adapters are exact for the other ops (Slice-1, Pad-2, Clip-6, TopK-1, Split/Squeeze/
     Unsqueeze/Reduce* attributes -> inputs, Dropout, Softmax/LogSoftmax, ...);
  3. the importer hands each set-aside node to `convert(node, b)`, whose rule emits the
     node's meaning in the importer's ops, with the operand types known.

The rules are the ops where the converter fails or changes the meaning:
  - PRelu-1/6: a 1-D slope is per channel (axis 1), not numpy-broadcast from the right;
  - Softmax/LogSoftmax/Hardmax-1/11: `axis` coerces the input to 2-D (the converter gets
    Hardmax wrong; the three share one rule);
  - BatchNormalization-1/6/7: `spatial=0` (per-activation statistics) fails in the converter;
    `is_test` / `consumed_inputs` are dropped (inference, like onnxruntime);
  - Upsample-1/7/9 and Resize-10 (the same op as Upsample-9): the converter turns them into
    Resize-13 with half-pixel coordinates, which is wrong for `linear`; they become
    `onnx.Upsample(x, scales)` with `mode`;
  - Scan-8 (batch axis first, optional sequence_lens): a Scan over the batch whose body is a
    Scan-9 over time; sequence_lens is refused;
  - Add/Sub/Mul/Div/Pow/And/Or/Xor/Equal/Greater/Less before opset 7: `broadcast` / `axis`;
  - Split-1, Tile-1, Cast-1 (string `to`), Pad-1 (`paddings`): the converter has no adapter.
LSTM-1, GRU-1/3, RNN-1 and (Global)LpPool-1 have neither an adapter nor a rule: refused.
A model the converter cannot upgrade, or whose inputs / outputs it would change, is one
ImportError_ line.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import numpy as np
import onnx
from onnx import helper

from ..errors import ImportError_, UnsupportedOp
from ..ir import DType
from ..ops import get_opdef

#: the ai.onnx opset old models are upgraded to (the oldest the importer's ops follow)
TARGET_OPSET = 13
#: set-aside nodes live in `COMPAT_DOMAIN.v<since_version>`
COMPAT_DOMAIN = "onnxcc.compat"

_ATTR = onnx.AttributeProto
_ONNX_DOMAINS = ("", "ai.onnx")
_COMPAT = re.compile(re.escape(COMPAT_DOMAIN) + r"\.v(\d+)$")

Rule = Callable  # (node: onnx.NodeProto, b: GraphBuilder, since: int) -> list[Value]
#: (op_type, since_version) -> rule
RULES: dict[tuple[str, int], Rule] = {}


def rule(op_type: str, *since: int):
    def deco(fn):
        for v in since:
            RULES[(op_type, v)] = fn
        return fn

    return deco


# ---- the upgrade -------------------------------------------------------------------------------

def upgrade(proto: onnx.ModelProto, opset: int, what: str) -> onnx.ModelProto:
    """`proto` (ai.onnx `opset` < TARGET_OPSET) upgraded to TARGET_OPSET, RULES nodes set aside."""
    model = onnx.ModelProto()
    model.CopyFrom(proto)
    used: set[int] = set()
    _set_aside(model.graph, opset, used, what)
    for v in sorted(used):
        model.opset_import.append(helper.make_opsetid(f"{COMPAT_DOMAIN}.v{v}", 1))
    try:
        from onnx import version_converter

        out = version_converter.convert_version(model, TARGET_OPSET)
    except Exception as e:
        raise ImportError_(f"{what}: cannot upgrade ai.onnx opset {opset} to {TARGET_OPSET}: "
                           f"{_converter_message(e)}") from None
    for kind, a, b in (("inputs", model.graph.input, out.graph.input),
                       ("outputs", model.graph.output, out.graph.output)):
        if len(a) != len(b) or not all(_same_signature(x, y) for x, y in zip(a, b)):
            raise ImportError_(f"{what}: upgrading ai.onnx opset {opset} to {TARGET_OPSET} changes the "
                               f"graph's {kind}; onnxcc cannot import this model")
    return out


def _set_aside(g: onnx.GraphProto, opset: int, used: set[int], what: str) -> None:
    for node in g.node:
        if node.domain in _ONNX_DOMAINS:
            since = _since(node.op_type, opset)
            if since is not None and (node.op_type, since) in RULES:
                node.domain = f"{COMPAT_DOMAIN}.v{since}"
                used.add(since)
                # the converter does not look inside a set-aside node: upgrade its bodies here
                for a in node.attribute:
                    if a.type == _ATTR.GRAPH:
                        a.g.CopyFrom(_upgrade_body(a.g, opset, what))
                continue
        for a in node.attribute:
            if a.type == _ATTR.GRAPH:
                _set_aside(a.g, opset, used, what)
            elif a.type == _ATTR.GRAPHS:
                for sg in a.graphs:
                    _set_aside(sg, opset, used, what)


def _upgrade_body(g: onnx.GraphProto, opset: int, what: str) -> onnx.GraphProto:
    """A set-aside node's subgraph, upgraded on its own (its free variables become inputs)."""
    from .onnx_import import free_vars  # here: onnx_import imports this module

    body = onnx.GraphProto()
    body.CopyFrom(g)
    free = free_vars(body)
    for n in free:
        body.input.append(onnx.ValueInfoProto(name=n))
    model = helper.make_model(body, opset_imports=[helper.make_opsetid("", opset)])
    out = upgrade(model, opset, what).graph
    # the free variables go back to being captures
    keep = [vi for vi in out.input if vi.name not in free]
    del out.input[:]
    out.input.extend(keep)
    return out


def _since(op_type: str, opset: int) -> int | None:
    try:
        return onnx.defs.get_schema(op_type, opset, "").since_version
    except onnx.defs.SchemaError:
        return None


def _same_signature(a: onnx.ValueInfoProto, b: onnx.ValueInfoProto) -> bool:
    """Same name, and what `a` declares (element type, rank, fixed dims) `b` still declares
    (the converter's shape inference may fill in what `a` leaves open)."""
    if a.name != b.name:
        return False
    if a.type.WhichOneof("value") is None:  # untyped: anything the converter infers is fine
        return True
    if not a.type.HasField("tensor_type"):
        return a.type == b.type
    ta, tb = a.type.tensor_type, b.type.tensor_type
    if ta.elem_type and ta.elem_type != tb.elem_type:
        return False
    if not ta.HasField("shape"):
        return True
    if not tb.HasField("shape") or len(ta.shape.dim) != len(tb.shape.dim):
        return False
    return all(not da.HasField("dim_value") or (db.HasField("dim_value") and da.dim_value == db.dim_value)
               for da, db in zip(ta.shape.dim, tb.shape.dim))


def _converter_message(e: BaseException) -> str:
    s = " ".join(str(e).split()) or type(e).__name__
    # the C++ converter prefixes its message with a source location and the failed assertion
    m = re.search(r"failed: (.*)$", s)
    return (m.group(1) if m else s)[:300]


def compat_since(domain: str) -> int | None:
    """The since_version of a set-aside node's domain, None for any other domain."""
    m = _COMPAT.fullmatch(domain)
    return int(m.group(1)) if m else None


def convert(node: onnx.NodeProto, b, since: int) -> list:
    """Import one set-aside node through its rule."""
    return RULES[(node.op_type, since)](node, b, since)


# ---- helpers -------------------------------------------------------------------------------------

def _unsupported(node, b, why: str) -> UnsupportedOp:
    return UnsupportedOp(node.op_type, "", b.loc, why)


def _emit(node, b, name: str, operands, attrs=None, n_results: int = 1):
    if get_opdef(name) is None:
        raise _unsupported(node, b, f"{name} (the form it imports as) is not available")
    return b.emit(name, operands, attrs or {}, n_results)


def _i64(values) -> np.ndarray:
    return np.array(list(values), dtype=np.int64)


def _outputs(node) -> int:
    """How many outputs the node has (trailing unused ones dropped)."""
    outs = list(node.output)
    while outs and not outs[-1]:
        outs.pop()
    return len(outs)


# ---- the rules -----------------------------------------------------------------------------------

@rule("PRelu", 1, 6)
def _prelu(node, b, since):
    """A 1-D slope is per channel (axis 1) before opset 7: unsqueeze it to [C, 1, ..., 1]."""
    x, slope = b.inputs(node)[:2]
    attrs = b.attrs(node)
    attrs.pop("consumed_inputs", None)
    if slope.type.rank == 1 and x.type.rank > 2 and slope.type.shape[0] != 1:
        axes = b.const(_i64(range(1, x.type.rank - 1)))
        (slope,) = _emit(node, b, "onnx.Unsqueeze", [slope, axes])
    return _emit(node, b, "onnx.PRelu", [x, slope], attrs)


@rule("Softmax", 1, 11)
@rule("LogSoftmax", 1, 11)
@rule("Hardmax", 1, 11)
def _coerced_2d(node, b, since):
    """Before opset 13 `axis` splits the input into [prod(d[:axis]), prod(d[axis:])] and the op
    runs over the second dim: flatten, run over the last axis, reshape back."""
    (x,) = b.inputs(node)[:1]
    axis = int(b.attrs(node).get("axis", 1))
    r = x.type.rank
    name = f"onnx.{node.op_type}"
    if r == 0:
        raise _unsupported(node, b, "a rank-0 input")
    if not -r <= axis <= r - 1:
        raise _unsupported(node, b, f"axis {axis} is out of range for rank {r}")
    axis %= r
    if axis == r - 1:  # the one-axis form already
        return _emit(node, b, name, [x], {"axis": -1})
    (flat,) = _emit(node, b, "onnx.Flatten", [x], {"axis": axis})
    (y,) = _emit(node, b, name, [flat], {"axis": -1})
    (shape,) = _emit(node, b, "onnx.Shape", [x])
    return _emit(node, b, "onnx.Reshape", [y, shape])


@rule("BatchNormalization", 1, 6, 7)
def _batch_norm_old(node, b, since):
    """Inference form. `spatial=0` (opset < 9) normalizes per activation: scale, bias, mean and
    var are shaped like one sample, so the formula is elementwise with numpy broadcasting."""
    ins = b.inputs(node)
    if len(ins) != 5 or any(v is None for v in ins):
        raise _unsupported(node, b, f"takes 5 inputs, has {len(ins)}")
    if _outputs(node) > 1:
        raise _unsupported(node, b, f"the training outputs (mean, var, saved_*) of BatchNormalization-"
                                    f"{since}")
    attrs = b.attrs(node)
    eps = float(attrs.get("epsilon", 1e-5))
    x, scale, bias, mean, var = ins
    if int(attrs.get("spatial", 1)) == 1:
        return _emit(node, b, "onnx.BatchNormalization", ins, {"epsilon": eps})
    if x.type.dtype not in (DType.f16, DType.f32, DType.f64):
        raise _unsupported(node, b, f"dtype {x.type.dtype.value}")
    eps_c = b.const(np.array(eps, dtype=x.type.dtype.np))
    (d,) = _emit(node, b, "onnx.Sub", [x, mean])
    (v,) = _emit(node, b, "onnx.Add", [var, eps_c])
    (s,) = _emit(node, b, "onnx.Sqrt", [v])
    (n,) = _emit(node, b, "onnx.Div", [d, s])
    (m,) = _emit(node, b, "onnx.Mul", [n, scale])
    return _emit(node, b, "onnx.Add", [m, bias])


@rule("Upsample", 1, 7, 9, 10)  # 10: deprecated, but exporters wrote it with 9's meaning
@rule("Resize", 10)
def _upsample(node, b, since):
    """-> onnx.Upsample(x, scales) with `mode`: Upsample-1's height/width_scale and Upsample-7's
    `scales` attribute become a constant input; Resize-10 is Upsample-9 under a new name."""
    ins = b.inputs(node)
    attrs = b.attrs(node)
    mode = attrs.get("mode", "nearest")
    if mode == "bilinear":  # Upsample-1's name for it
        mode = "linear"
    x = ins[0]
    if since == 1:
        scales = [1.0] * x.type.rank
        scales[-2:] = [float(attrs.get("height_scale", 1.0)), float(attrs.get("width_scale", 1.0))]
        s = b.const(np.array(scales, dtype=np.float32))
    elif since == 7:
        if "scales" not in attrs:
            raise ImportError_(f'{b.imp.what}: node "{b.loc}" (Upsample-7) has no scales attribute')
        s = b.const(np.array(attrs["scales"], dtype=np.float32))
    else:
        if len(ins) < 2 or ins[1] is None:
            raise ImportError_(f'{b.imp.what}: node "{b.loc}" ({node.op_type}-{since}) has no scales input')
        s = ins[1]
    return _emit(node, b, "onnx.Upsample", [x, s], {"mode": mode})


@rule("Scan", 8)
def _scan8(node, b, since):
    """Scan-8 (every input batched on axis 0, scan axis 1) = a Scan-9 over the batch whose body
    runs the original body as a Scan-9 over time, per sample."""
    ins = list(node.input)
    if ins and ins[0]:
        raise _unsupported(node, b, "Scan-8 with sequence_lens")
    ins = ins[1:]
    attrs = {a.name: a for a in node.attribute}
    body = attrs["body"].g if "body" in attrs else None
    if body is None:
        raise ImportError_(f'{b.imp.what}: node "{b.loc}" (Scan) has no body')
    n_scan = int(attrs["num_scan_inputs"].i) if "num_scan_inputs" in attrs else 0
    n_out = len(body.output)
    directions = list(attrs["directions"].ints) if "directions" in attrs else []
    inner_ins = [f"{b.loc}/s{i}" for i in range(len(ins))]
    inner_outs = [f"{b.loc}/o{i}" for i in range(n_out)]
    inner_kw = {"body": body, "num_scan_inputs": n_scan}
    if directions:
        inner_kw["scan_input_directions"] = directions
    inner = helper.make_node("Scan", inner_ins, inner_outs, name=f"{b.loc}/time", **inner_kw)
    outer_body = helper.make_graph(
        [inner], f"{body.name}_batch", [onnx.ValueInfoProto(name=n) for n in inner_ins],
        [onnx.ValueInfoProto(name=n) for n in inner_outs])
    outer = helper.make_node("Scan", ins, list(node.output), name=b.loc, body=outer_body,
                             num_scan_inputs=len(ins))
    return b.generic(outer, "onnx.Scan")


@rule("Add", 1, 6)
@rule("Sub", 1, 6)
@rule("Mul", 1, 6)
@rule("Div", 1, 6)
@rule("Pow", 1)
@rule("And", 1)
@rule("Or", 1)
@rule("Xor", 1)
@rule("Equal", 1)
@rule("Greater", 1)
@rule("Less", 1)
def _legacy_broadcast(node, b, since):
    """Before opset 7 `broadcast=1` lays B's dims onto A's starting at `axis` (default: the
    trailing dims, which is numpy's rule): unsqueeze B's trailing dims, then broadcast."""
    a, y = b.inputs(node)[:2]
    attrs = b.attrs(node)
    attrs.pop("consumed_inputs", None)
    bcast, axis = int(attrs.pop("broadcast", 0)), attrs.pop("axis", None)
    if bcast and axis is not None:
        axis = int(axis) % max(a.type.rank, 1)
        trailing = a.type.rank - axis - y.type.rank
        if trailing < 0:
            raise _unsupported(node, b, f"broadcast axis {axis} leaves no room for B of rank {y.type.rank}")
        if trailing:
            axes = b.const(_i64(range(y.type.rank, y.type.rank + trailing)))
            (y,) = _emit(node, b, "onnx.Unsqueeze", [y, axes])
    elif not bcast and a.type.shape != y.type.shape:
        raise _unsupported(node, b, f"broadcast=0 with shapes {a.type} and {y.type}")
    return _emit(node, b, f"onnx.{node.op_type}", [a, y], attrs)


def _const_value(v) -> np.ndarray | None:
    """The value of a Value made by an inline cc.const, else None."""
    op = getattr(v, "owner", None)
    if getattr(op, "name", None) == "cc.const" and isinstance(op.attrs.get("value"), np.ndarray):
        return op.attrs["value"]
    return None


@rule("Split", 1)
def _split1(node, b, since):
    """Split-1: the sizes come from the `split` attribute or a second input (the converter has
    no adapter for it) -> Split(x, split) with equal parts when neither is given."""
    ins = b.inputs(node)
    attrs = b.attrs(node)
    x = ins[0]
    split = ins[1] if len(ins) > 1 and ins[1] is not None else None
    if split is None and "split" in attrs:
        split = b.const(_i64(attrs["split"]))
    operands = [x] if split is None else [x, split]
    return _emit(node, b, "onnx.Split", operands, {"axis": int(attrs.get("axis", 0))}, _outputs(node))


@rule("Tile", 1)
def _tile1(node, b, since):
    """Tile-1 repeats one axis (`tiles` times along `axis`, both scalar inputs) -> Tile(x, repeats)."""
    x, tiles, axis = [*b.inputs(node), None, None][:3]
    t, a = (_const_value(v) if v is not None else None for v in (tiles, axis))
    if t is None or a is None or t.size != 1 or a.size != 1:
        raise _unsupported(node, b, "Tile-1 with tiles / axis computed at run time")
    repeats = [1] * x.type.rank
    repeats[int(a.reshape(())) % x.type.rank] = int(t.reshape(()))
    return _emit(node, b, "onnx.Tile", [x, b.const(_i64(repeats))])


@rule("Cast", 1)
def _cast1(node, b, since):
    """Cast-1 names the target type as a string ("FLOAT", "INT64", ...)."""
    (x,) = b.inputs(node)[:1]
    to = b.attrs(node).get("to")
    if isinstance(to, str):
        try:
            to = onnx.TensorProto.DataType.Value(to.upper())
        except ValueError:
            raise _unsupported(node, b, f"unknown target type {to!r}") from None
    return _emit(node, b, "onnx.Cast", [x], {"to": int(to)})


@rule("Pad", 1)
def _pad1(node, b, since):
    """Pad-1: `paddings` (laid out like Pad-2's `pads`) and `value` attributes -> Pad(x, pads, value)."""
    (x,) = b.inputs(node)[:1]
    attrs = b.attrs(node)
    pads = b.const(_i64(attrs.get("paddings", [0] * (2 * x.type.rank))))
    mode = attrs.get("mode", "constant")
    operands = [x, pads]
    if mode == "constant":
        operands.append(b.const(np.array(attrs.get("value", 0.0), dtype=x.type.dtype.np)))
    return _emit(node, b, "onnx.Pad", operands, {"mode": mode})
