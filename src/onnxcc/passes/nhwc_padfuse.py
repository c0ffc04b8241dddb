"""Moves a channels-last conv's zero padding into the conv that produces its input: the
producer (a cc.conv_nhwc that runs as the implicit-GEMM call) writes its result into the
interior of a zero-padded map (`out_pads`, the call zeroes the border), and the reader's
pads become 0, so it reads its windows in place and the padded copy of the map (a read and
a write of the whole map per padded conv, 5% of benchmarks/convnets.py's resnet at 4x224x224)
is not made. The reader's result is unchanged: its windows over the zero border are the
windows it read from its padded copy before.

A conv that reads the map as its residual (cc.conv_nhwc `residual`) reads its interior
(`residual_pads`): a ResNet block's input is read by its first conv and by its Add.

Run by nhwc-region after its rewrite, only where the backend runs the call (its `dense`
option): without the call the producer would make the same copy itself (ops/conv_nhwc.py's
fallback), and a depthwise reader that guarded its taps instead of copying would pay it."""

from __future__ import annotations

from ..ir import DType, Module, Op, TensorType, Value, canon
from ..ops.conv_implicit import PLANAR_MAX_CIN
from ..ops.conv_nhwc import conv_attrs, out_pads
from .canonicalize import const_value


def _moved_pads(reader: Op) -> list[int] | None:
    """the reader's pads as (top, left, bottom, right) where they can move (explicit,
    non-negative ints, not all 0), else None"""
    if reader.name != "cc.conv_nhwc" or reader.attrs.get("auto_pad", "NOTSET") != "NOTSET":
        return None
    pads = reader.attrs.get("pads") or [0, 0, 0, 0]
    if len(pads) != 4 or not all(isinstance(p, int) and p >= 0 for p in pads) or not any(pads):
        return None
    return [pads[0], pads[1], pads[2], pads[3]]  # ONNX order: begins (h, w), then ends (h, w)


def _writes_padded(producer: Op, module: Module) -> bool:
    """Whether `producer` can write its result zero-padded in its call's stores: a dense f32
    conv of constant weights that takes the call (ops/conv_nhwc.py: a Relu, a pool, a
    residual or a window; a bare 1x1 is a GEMM instead), with no out pads yet."""
    attrs = producer.attrs
    if producer.name != "cc.conv_nhwc" or producer.results[0].type.dtype is not DType.f32:
        return False
    if any(out_pads(attrs)) or int(attrs.get("group", 1)) != 1:
        return False
    w = producer.operands[1]
    if w.type.rank != 4 or const_value(w, module) is None:
        return False
    win = conv_attrs(attrs, w.type.shape[2:])
    pointwise = win["kernel"] == [1, 1] and win["strides"] == [1, 1]
    return bool(attrs.get("relu") or attrs.get("pool") or attrs.get("residual")) or not pointwise


def _readers(v: Value) -> tuple[Op, list[Op]] | None:
    """(the one conv that reads `v` as its input, with pads that can move; the convs that read
    it as their residual, reading its interior through `residual_pads`), or None where any
    other op reads it (a Relu, a pool, the graph's output, a second windowed conv: each
    would need the unpadded map or other pads)"""
    windowed, residual = [], []
    for use in v.uses:
        op = use.op
        if op.name != "cc.conv_nhwc":
            return None
        if use.index == 0 and _moved_pads(op) is not None:
            windowed.append(op)
        elif op.attrs.get("residual") and use.index == len(op.operands) - 1 and not any(
                out_pads(op.attrs, "residual_pads")):
            residual.append(op)
        else:
            return None
    return (windowed[0], residual) if len(windowed) == 1 else None


def fuse_padded_outputs(module: Module) -> bool:
    """Every cc.conv_nhwc (of each function's body) whose result one conv reads with pads
    (and any others only as their residual) writes it padded; True if any did."""
    changed = False
    for fn in module.functions.values():
        for producer in fn.body.ops:
            if not _writes_padded(producer, module):
                continue
            x = producer.results[0]
            found = _readers(x)
            cin = x.type.shape[3]
            if found is None or x.type.rank != 4 or (isinstance(cin, int) and cin <= PLANAR_MAX_CIN):
                continue  # (a few channels: the reader's planar copy, ops/conv_implicit.py, stays)
            reader, residual = found
            pads = _moved_pads(reader)
            assert pads is not None
            top, left, bottom, right = pads
            producer.attrs["out_pads"] = [top, left, bottom, right]
            n, h, w, c = x.type.shape
            x.type = TensorType(x.type.dtype, (n, canon(h + top + bottom), canon(w + left + right), c))
            reader.attrs["pads"] = [0, 0, 0, 0]
            for op in residual:
                op.attrs["residual_pads"] = [top, left, bottom, right]
            changed = True
    return changed


__all__ = ["fuse_padded_outputs"]
