"""qnhwc-region: chains of quantized convs run channels-last, converted once at each end.

The 8-bit conv kernels read their input channels-last: the VNNI GEMM (ops/int8_gemm.py) reads
each window from a padded [N, H, W, C] copy, the depthwise kernel (ops/int8_depthwise.py)
takes a vector of channels per tap. In NCHW every QLinearConv transposed its input into that
copy and its result back (squeezenet's Fire modules: most of the run was those copies). This
pass moves the whole chain instead, the 8-bit analogue of nhwc-region (passes/nhwc_region.py):

- a *region* is a connected set of ops, joined through the 4-D tensors they pass on, each of
  which can run channels-last: a 2-D QLinearConv with constant weights (and bias and zero
  points) that is depthwise, or of one group where the backend runs the VNNI GEMM (the
  `dense` option; the weights minus their zero point fit s8 and the window holds at least
  MIN_K elements) -> cc.qlinearconv_nhwc (ops/int8_nhwc.py); a QLinearAdd / QLinearMul of
  two 4-D values; a QLinearConcat along channels (axis 3 channels-last); an 8-bit 2-D MaxPool
  (cc.maxpool_nhwc); a QLinearGlobalAveragePool (its own `channels_last = 1` form, whose
  [N, 1, 1, C] result leaves as a Reshape view); the 8-bit Relu / Clip qdq-fuse leaves after
  a conv, and QLinearLeakyRelu / QLinearSigmoid;
- a region is rewritten when it holds `min_convs` convs: each conv outside converts its input
  and output anyway, so one conversion in and one out never cost more than that;
- inside it every 4-D value has the permuted type [N, H, W, C]; a 4-D value from outside
  enters through one `onnx.Transpose` (perm 0 2 3 1) and a value read outside (or returned)
  leaves through one `onnx.Transpose` (perm 0 3 1 2), which fusion folds into its readers.

The rewrite is exact: the same integer sums and the same requantization per element.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..ir import Block, DType, Module, Op, TensorType, Value
from ..ops import onnx_inputs
from ..ops.int8_gemm import MIN_K, PACK_MAX_CIN
from .base import ModulePass, PassContext, register_pass
from .canonicalize import const_value, new_const
from .layout_region import RegionFinder, RegionRewriter, permuted, rewrite_regions

_INT8 = (DType.u8, DType.i8)
MS = "com.microsoft."
ELEMENTWISE = frozenset({MS + "QLinearAdd", MS + "QLinearMul", MS + "QLinearLeakyRelu", MS + "QLinearSigmoid",
                         "onnx.Relu", "onnx.Clip"})
"""ops whose 4-D operands and result may all be permuted alike (their other operands are
scales, zero points and bounds of one element)"""


def _int8_4d(t: TensorType) -> bool:
    return t.rank == 4 and t.dtype in _INT8 and not t.has_unknown


def _one_element(v: Value | None) -> bool:
    return v is None or all(isinstance(d, int) and d == 1 for d in v.type.shape)


def _operand(op: Op, k: int) -> Value | None:
    """QLinearConv's ONNX input k (None where absent)"""
    ins = onnx_inputs(op, list(op.operands))
    return ins[k] if k < len(ins) else None


def conv_fits(op: Op, module: Module, dense: bool) -> bool:
    """a 2-D QLinearConv that cc.qlinearconv_nhwc runs on an integer kernel: depthwise, or of
    one group on the VNNI GEMM (`dense`)"""
    x, w = op.operands[0], _operand(op, 3)
    if w is None or not (_int8_4d(x.type) and _int8_4d(op.results[0].type) and w.type.rank == 4):
        return False
    if not all(isinstance(d, int) for d in w.type.shape):
        return False
    xz, wz, b = _operand(op, 2), _operand(op, 5), _operand(op, 8)
    if not _one_element(xz) or any(v is not None and const_value(v, module) is None for v in (xz, wz, b)):
        return False
    wd = const_value(w, module)
    if wd is None:
        return False
    group, (mo, cg, kh, kw) = int(op.attrs.get("group", 1)), w.type.shape
    if group > 1:
        return x.type.shape[1] == group and cg == 1 and mo % group == 0
    if not dense or cg * kh * kw < MIN_K:
        return False
    zd = np.zeros(1, np.int64) if wz is None else np.asarray(const_value(wz, module), np.int64).reshape(-1)
    wi = np.asarray(wd, np.int64) - (zd[0] if zd.size == 1 else zd.reshape(-1, 1, 1, 1))
    return bool(wi.min() >= -128 and wi.max() <= 127)  # the GEMM's folded weights (int8_gemm.py)


def features(op: Op) -> list[int]:
    """the operand positions that are feature maps (permuted inside a region)"""
    if op.name == "onnx.QLinearConv":
        return [0]
    return [k for k, v in enumerate(op.operands) if v.type.rank == 4]


class _Finder(RegionFinder):
    """The regions of one block: the ops that may run channels-last, joined through their
    feature maps."""

    def __init__(self, block: Block, module: Module, dense: bool):
        self.dense = dense
        super().__init__(block, module)

    def links(self, op: Op) -> list[int]:
        return features(op)

    def eligible(self, op: Op) -> bool:
        if len(op.results) != 1 or op.regions or not _int8_4d(op.results[0].type):
            return False
        if op.name == "onnx.QLinearConv":
            return conv_fits(op, self.module, self.dense)
        feats = features(op)
        if not feats or any(const_value(op.operands[k], self.module) is not None for k in feats):
            return False
        if any(not _one_element(v) for k, v in enumerate(op.operands) if k not in feats):
            return False
        if op.name in ELEMENTWISE:
            return True
        if op.name == "onnx.MaxPool":
            ks = op.attrs.get("kernel_shape")
            return ks is not None and len(ks) == 2 and int(op.attrs.get("storage_order", 0)) == 0
        if op.name == MS + "QLinearConcat":
            return op.attrs.get("axis") in (1, -3)
        if op.name == MS + "QLinearGlobalAveragePool":
            return not op.attrs.get("channels_last")
        return False

    def regions(self, min_convs: int) -> list[list[Op]]:
        return [ops for ops in self.groups() if sum(op.name == "onnx.QLinearConv" for op in ops) >= min_convs]


NEW_NAMES = {"onnx.QLinearConv": "cc.qlinearconv_nhwc", "onnx.MaxPool": "cc.maxpool_nhwc"}


class _Rewriter(RegionRewriter):
    """Rewrites one region of a block (its ops in block order)."""

    def rewrite(self, op: Op) -> None:
        feats = features(op)
        attrs = dict(op.attrs)
        if self.stem(op):
            feats, attrs["nchw_input"] = [], 1
        operands = [self.operand(v, op) if k in feats else v for k, v in enumerate(op.operands)]
        if op.name == MS + "QLinearConcat":
            attrs["axis"] = 3
        elif op.name == MS + "QLinearGlobalAveragePool":
            attrs["channels_last"] = 1
        new = Op(NEW_NAMES.get(op.name, op.name), operands, [permuted(op.results[0].type)], attrs, loc=op.loc,
                 result_names=[op.results[0].name])
        self.block.insert_before(op, new)
        self.new[id(op.results[0])] = new.results[0]

    def stem(self, op: Op) -> bool:
        """a conv of one group reading a value from outside of at most PACK_MAX_CIN channels
        (an image): it reads it in NCHW, packed per pixel in its own padded copy"""
        x = op.operands[0]
        return (op.name == "onnx.QLinearConv" and int(op.attrs.get("group", 1)) == 1 and id(x) not in self.new
                and isinstance(x.type.shape[1], int) and x.type.shape[1] <= PACK_MAX_CIN)

    def plane_shape(self, arr: np.ndarray, op: Op, anchor: Op) -> Value:
        shape = new_const(TensorType(DType.i64, (4,)), arr, op.loc)
        self.block.insert_before(anchor, shape)
        return shape.results[0]


def qnhwc_regions(module: Module, min_convs: int = 2, dense: bool = True) -> bool:
    return rewrite_regions(module, lambda block: _Finder(block, module, dense).regions(min_convs), _Rewriter)


@register_pass
@dataclass(frozen=True)
class QnhwcRegionPass(ModulePass):
    """Run chains of quantized convs (QLinearConv) and the 8-bit ops between them channels-last
    (cc.qlinearconv_nhwc), with one layout conversion at each end of a chain."""

    name: ClassVar[str] = "qnhwc-region"
    min_convs: int = 2
    """a region needs this many convs"""
    dense: bool = True
    """whether convs of one group join a region (on the VNNI GEMM; the recipe turns this off on
    a backend without it, where they keep their NCHW paths)"""

    def run(self, module: Module, ctx: PassContext) -> bool:
        return qnhwc_regions(module, self.min_convs, self.dense)
