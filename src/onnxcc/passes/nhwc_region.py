"""nhwc-region: chains of mobile-net convs run channels-last, converted once at each end.

A mobile net's block is 1x1 expand -> activation -> depthwise kxk -> activation -> 1x1
project (-> residual Add). In NCHW the depthwise conv vectorises along an output row,
mostly masked lanes on the late stages' 7x7 and 14x14 planes, and a channel-blocked copy
per layer (ops/conv_blocked.py) costs two copies per conv. Channels-last, every depthwise
tap is a whole vector of channels and a 1x1 conv is one GEMM over all pixels with the
constant weight as B; so the whole chain is moved:

- a *region* is a connected set of ops, joined through the 4-D tensors they pass on, each
  of which can run channels-last: a 2-D f32 Conv with constant weights that is depthwise
  or has one group (`cc.conv_nhwc`, ops/conv_nhwc.py), a unary elementwise op (ReLU,
  Clip, HardSwish, HardSigmoid, Sigmoid, ...), a binary elementwise op (Add, Mul, Sub, Div)
  whose operands are 4-D or constants (SiLU's x * sigmoid(x), a residual Add, an SE
  block's scale);
- with the `dense` option (on by default) also a dense kxk conv of at least `DENSE_MIN_COUT`
  output channels (`STEM_MIN_COUT` for a stem of fewer than 16 input channels), which
  lowers to one implicit GEMM call (ops/conv_implicit.py) where the backend has it; a Relu
  that alone reads such a conv's result is folded into it (cc.conv_nhwc's `relu`, applied
  in the call's stores), and so is a 2x2 stride-2 MaxPool that alone reads it (`pool`: the
  stores max each window's 4 pixels), and a residual Add of it (`residual`, with the Relu
  that alone reads the sum); a Concat along channels (axis 3 channels-last) and a 2-D MaxPool
  without Indices or AveragePool (ops/pool_nhwc.py), so a squeezenet's Fire modules
  (squeeze 1x1 -> expand 1x1 | expand 3x3 -> Concat) and the pools between them are one
  region;
- a region is rewritten only when it holds a depthwise conv or a dense one (that is what
  pays for the conversions), `min_convs` convs in all and `CONVS_PER_CONVERSION` convs per
  layout change of a whole feature map, a dense conv counting `DENSE_WEIGHT`; a value from
  outside read only by dense convs is no change (each conv's padded copy transposes it), and
  an image stem (at most 4 input channels, read from a planar padded copy; 16, 32 or 48
  outputs) or a stem whose result reaches a dense conv joins from `DENSE_STEM_MIN_COUT`
  outputs, so a short plain chain (3 -> 16 -> 32 convs with pools) or a mobile net is one
  region from its input;
- inside it every 4-D value has the permuted type [N, H, W, C]; a 4-D operand from outside
  enters through one `onnx.Transpose` (perm 0 2 3 1) per value, a constant operand is
  permuted at compile time, and a value read outside (or returned) leaves through one
  `onnx.Transpose` (perm 0 3 1 2), which fusion folds into its readers.

Rank-0 operands (Clip's bounds, a scalar) stay as they are. An AveragePool joins where
its divisor is the constant window size (cc.avgpool_nhwc); GlobalAveragePool, GlobalMaxPool
and a ReduceMean over H, W join as cc.global_*pool_nhwc, whose [N, 1, 1, C]
result leaves the region without a feature-map conversion (a net's head no longer counts one
against the region; a ReduceMean that drops its dims, mnasnet's `x.mean([2, 3])`, leaves as a
Reshape to [N, C], its C static). Everything else (other pooling, other Concats, Reshape, grouped convs)
is outside: where it reads a region value it gets the NCHW one back. The rewrite is exact (the same sums in the same
order per tap; the GEMM paths sum a conv as the NCHW path does, up to f32 reassociation).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from ..ir import Block, DType, Module, Op, TensorType, Value, WeightRef
from ..ops.conv_deadtaps import MIN_REGIME_EXTENT
from ..ops.conv_implicit import PLANAR_MAX_CIN
from ..ops.conv_nhwc import POOL, TO_NHWC, conv_attrs, is_depthwise
from ..ops.convt_nhwc import pixel_shuffle_convt
from ..ops.pool_nhwc import avg_constant_divisor
from ..ops.resize import channels_last_resize
from .base import ModulePass, PassContext, register_pass
from .canonicalize import const_value
from .layout_region import RegionFinder, RegionRewriter, permuted, rewrite_regions
from .nhwc_padfuse import fuse_padded_outputs

UNARY = frozenset({
    "onnx.Relu", "onnx.Clip", "onnx.HardSwish", "onnx.HardSigmoid", "onnx.Sigmoid", "onnx.Tanh",
    "onnx.LeakyRelu", "onnx.Elu", "onnx.Selu", "onnx.Softplus", "onnx.Identity", "onnx.Neg", "onnx.Abs",
    "onnx.Erf", "onnx.Gelu", "onnx.Mish",
})
"""elementwise ops of one 4-D operand (further operands rank 0): layout does not matter"""

CONVS_PER_CONVERSION = 3
"""a region is taken with at least this many convs per layout change of a whole feature
map: shufflenet's branches (1x1 -> 3x3 depthwise -> 1x1, one change in and one out) ran
slower channels-last at 4x224x224 (8.1 -> 9.0-9.6 ms per run in kernels), mobile nets'
long chains (one change in, one out, one per SE block's pooling) faster"""

DENSE_WEIGHT = 2
"""a dense kxk conv counts as this many convs against the layout changes: its implicit GEMM
does k*k times the work of a 1x1 conv of its channels per pixel, while a change is one copy.
Measured (1 thread, CPU clock, against onnxruntime): the plain net of benchmarks/convnets.py
(3 -> 16 -> 32 3x3 convs, pools, one change out to its global pool) 1.84x -> 1.66x at
224x224, 1.57x -> 1.12x at 32x32 as a region; its resnet block (two 32 -> 32 3x3 convs, a
full-map change in for the residual Add and one out), taken with weight 3, ran slower at
224x224 (b=4 20.9 -> 25.0 ms), so weight 2 keeps two changes for two dense convs out"""

BINARY = frozenset({"onnx.Add", "onnx.Mul", "onnx.Sub", "onnx.Div"})
"""broadcasting elementwise ops: fine channels-last when both operands are permuted alike"""


def _conv_kind(op: Op, module: Module) -> str | None:
    """'dw' (depthwise), 'gemm' (1x1, one group), 'dense' (kxk, one group) or None for a Conv
    that cannot go channels-last."""
    if op.name != "onnx.Conv" or len(op.results) != 1 or op.attrs.get("absent"):
        return None
    if not 2 <= len(op.operands) <= 3:
        return None
    x, w = op.operands[0], op.operands[1]
    t = op.results[0].type
    if t.dtype is not DType.f32 or t.rank != 4 or x.type.rank != 4 or t.has_unknown:
        return None
    if const_value(w, module) is None or not all(isinstance(d, int) for d in w.type.shape):
        return None
    if len(op.operands) == 3 and const_value(op.operands[2], module) is None:
        return None
    win = conv_attrs(op.attrs, w.type.shape[2:])
    group = win["group"]
    if group == 1:
        return "gemm" if win["kernel"] == [1, 1] else "dense"
    if isinstance(x.type.shape[1], int) and x.type.shape[1] == group and is_depthwise(group, w.type.shape):
        return "dw"
    return None


def _upsample_convt(op: Op, module: Module) -> bool:
    """a U-Net's upsampling ConvTranspose (kernel == stride, no pads; ops/convt_nhwc.py) of f32
    with constant weights and bias: channels-last it is one GEMM storing Y in place, so a
    decoder's upsample -> Concat with the skip -> convs needs no layout change"""
    if len(op.results) != 1 or not 2 <= len(op.operands) <= 3 or op.attrs.get("absent"):
        return False
    x, w, t = op.operands[0], op.operands[1], op.results[0].type
    if t.dtype is not DType.f32 or t.rank != 4 or x.type.rank != 4 or t.has_unknown:
        return False
    if any(const_value(v, module) is None for v in op.operands[1:]):
        return False
    return pixel_shuffle_convt(op.attrs, w.type.shape)


def _channel_concat(op: Op) -> bool:
    """a Concat along the channel axis of 4-D values (axis 1 or -3): channels-last it is the
    same Concat along axis 3"""
    return op.attrs.get("axis") in (1, -3) and op.results[0].type.rank == 4


DENSE_MIN_COUT = 16
"""a dense kxk conv joins a region from this many output channels: its implicit GEMM's
columns are the output channels, 32 per packed panel (kernel/conv_call.py), with a 12x16
micro-kernel for a panel of 16. Was 32; at 16 a U-Net's full-resolution 32 -> 16 and
16 -> 16 convs join its region (benchmarks/convnets.py `unet`, 1 thread, CPU clock, against
onnxruntime: 1.43x -> 1.07x at 1x256x256, 1.07x -> 0.95x at 1x128x128)"""
STEM_MIN_COUT = 64
"""a dense conv of fewer than 16 input channels (a stem: K = 9 * 3) joins from this many
output channels, whose input rows then serve two panels (smaller stems: DENSE_STEM_MIN_COUT).
Measured before the planar stem copy (its channels-last copy was scalar code; 1 thread,
CPU clock, against onnxruntime): squeezenet's 3 -> 64 stem in its region 8.6 -> 7.4 ms at
224x224; torchvision mobilenet_v2's 3 -> 32 stem 1.24x -> 1.29x at 224x224 and 1.06x ->
1.16x at 96x128; benchmarks/convnets.py's mobile net with a 3 -> 16 stem 1.43x -> 1.72x"""


DENSE_STEM_MIN_COUT = 16
"""an image stem (at most PLANAR_MAX_CIN input channels, whose windows the conv call reads
from a planar padded copy of the input, contiguous along W: ops/conv_implicit.py) of a whole
number of 16-channel vectors joins from this many output channels: benchmarks/convnets.py's
mobile net (3 -> 16 stride-2 stem, then depthwise blocks) 0.68 -> 0.57 ms at 224x224 and
0.70 -> 0.56 ms at 4x112x112 (1 thread, CPU clock; the NCHW stem's result entered the region
through a transposing padded copy); zoo (1 thread, CPU clock, against onnxruntime) mnasnet0_5
0.99x -> 0.77x, mobilenet_v3_small 0.44x -> 0.40x, lraspp_mobilenet_v3 0.92x -> 0.81x,
mobilenet_v2 0.70x -> 0.64x; shufflenet_v2_x0_5's 3 -> 24 stem took its first block into a
region and ran 0.49x -> 0.70x, so 24 (a masked half vector) stays out. A stem
of 5 to 15 input channels joins from this many outputs where its result reaches a dense
conv (through Relus and pools): outside, its NCHW result would enter the region through
the next conv's padded copy, a transposing gather per pooled pixel of every channel (27% of the plain net
of benchmarks/convnets.py at 224x224); inside, only its 3-channel input is converted, in the
stem's own padded copy. Measured on that net (1 thread, CPU clock) 4.8 -> 3.5 ms per run
at 224x224; such a stem before a depthwise conv keeps STEM_MIN_COUT (see above)"""


def _feeds_dense(op: Op, module: Module) -> bool:
    """whether `op`'s result reaches a dense conv that pays (`_dense_pays`) as its input, through
    a chain of unary ops and plain pools; the chain's values may have other readers too (a
    residual Add reading a stem's Relu: benchmarks/convnets.py's resnet net, whose stem outside
    the region entered it twice, through the conv's padded copy and the Add's transposing read)"""
    v = op.results[0]
    for _ in range(8):
        nxt = None
        for u in v.uses:
            user = u.op
            if user.name == "onnx.Conv":
                if u.index == 0 and _conv_kind(user, module) == "dense" and _dense_pays(user, module):
                    return True
            elif nxt is None and (user.name in UNARY or (user.name == "onnx.MaxPool" and _plain_maxpool(user))):
                nxt = user.results[0]
        if nxt is None:
            return False
        v = nxt
    return False


def _dense_pays(op: Op, module: Module) -> bool:
    cin, cout = op.operands[0].type.shape[1], op.results[0].type.shape[1]
    if not (isinstance(cin, int) and isinstance(cout, int)):
        return False
    # a widely dilated conv (DeepLab's ASPP at 12 / 24 / 36) reads only padding with its outer
    # taps on planes up to its dilation; the NCHW lowering drops those taps (ops/conv_deadtaps.py,
    # per plane-size interval when H / W are symbolic), the implicit GEMM would run them all
    dilations = op.attrs.get("dilations") or []
    if any(int(d) >= MIN_REGIME_EXTENT for d in dilations):
        return False
    if cin < 16 and DENSE_STEM_MIN_COUT <= cout < STEM_MIN_COUT:
        return (cin <= PLANAR_MAX_CIN and cout % 16 == 0) or _feeds_dense(op, module)
    return cout >= DENSE_MIN_COUT and (cin >= 16 or cout >= STEM_MIN_COUT)


def _plain_maxpool(op: Op) -> bool:
    """a 2-D MaxPool without Indices (cc.maxpool_nhwc, ops/pool_nhwc.py), or a 2-D
    AveragePool"""
    ks = op.attrs.get("kernel_shape")
    return len(op.results) == 1 and ks is not None and len(ks) == 2 and int(op.attrs.get("storage_order", 0)) == 0


GLOBAL_POOLS = {"onnx.GlobalAveragePool": "cc.global_avgpool_nhwc", "onnx.GlobalMaxPool": "cc.global_maxpool_nhwc",
                "onnx.ReduceMean": "cc.global_avgpool_nhwc"}
"""ops that pool a 4-D value over H and W into [N, C, 1, 1] (ops/pool_nhwc.py): inside a region
their reduction loads a vector of channels per step and their [N, 1, 1, C] result leaves the
region without moving a feature map"""


def _global_pool(op: Op, module: Module) -> str | None:
    """the channels-last op for a global pool over H, W of a 4-D value (a ReduceMean over axes
    2, 3 too, keeping its dims or, with a static C, dropping them), or None"""
    kind = GLOBAL_POOLS.get(op.name)
    if kind is None or len(op.results) != 1 or op.operands[0].type.rank != 4:
        return None
    if op.name == "onnx.ReduceMean":
        if not int(op.attrs.get("keepdims", 1)) and not isinstance(op.operands[0].type.shape[1], int):
            return None  # its [N, C] exit is a Reshape by a constant shape
        if len(op.operands) > 1:
            axes = const_value(op.operands[1], module)
            if axes is None:
                return None
            axes = [int(a) for a in np.asarray(axes).reshape(-1)]
        else:
            axes = list(op.attrs.get("axes") or [])
        if sorted(a % 4 for a in axes) != [2, 3] or len(axes) != 2:
            return None
    elif len(op.operands) != 1:
        return None
    return kind


def _kept_dims(t: TensorType, op: Op) -> TensorType:
    """`t`, or for a ReduceMean's [N, C] without its dims the [N, C, 1, 1] it pools into
    (its channels-last twin [N, 1, 1, C] holds the same elements in the same order)"""
    if t.rank == 4:
        return t
    x = op.operands[0].type
    return TensorType(t.dtype, (x.shape[0], x.shape[1], 1, 1))


def _known_dims(v: Value) -> list | None:
    """The dims a folded shape value holds (a `cc.dims`: torch's interpolate(size=...))"""
    owner = v.owner
    return list(owner.attrs["dims"]) if isinstance(owner, Op) and owner.name == "cc.dims" else None


def _rank0(v: Value) -> bool:
    return v.type.rank == 0


class _Finder(RegionFinder):
    """The regions of one block: the ops that may run channels-last, joined through 4-D values."""

    def __init__(self, block: Block, module: Module, dense: bool):
        self.dense = dense
        super().__init__(block, module)

    def links(self, op: Op) -> list[int]:
        return [k for k, v in enumerate(op.operands) if v.type.rank == 4]

    def eligible(self, op: Op) -> bool:
        kind = _conv_kind(op, self.module)
        if kind is not None:
            return kind != "dense" or (self.dense and _dense_pays(op, self.module))
        if op.name == "onnx.ConvTranspose":
            return _upsample_convt(op, self.module)
        if len(op.results) != 1 or op.regions:
            return False
        t = op.results[0].type
        if op.name == "onnx.Resize":  # a decoder's upsampling (its roi is often `absent`)
            return (t.rank == 4 and t.dtype is DType.f32 and not t.has_unknown and op.operands[0].type.rank == 4
                    and channels_last_resize(op, self.constant, _known_dims) is not None)
        if t.rank == 2 and op.name == "onnx.ReduceMean":  # keepdims 0: [N, C], leaving as a Reshape
            return t.dtype is DType.f32 and not t.has_unknown and _global_pool(op, self.module) is not None
        if t.rank != 4 or t.dtype is not DType.f32 or t.has_unknown or op.attrs.get("absent"):
            return False
        if op.name in UNARY:
            return op.operands[0].type.rank == 4 and all(_rank0(v) for v in op.operands[1:])
        if op.name in BINARY and len(op.operands) == 2:
            return all(v.type.rank == 4 or self.constant(v) is not None for v in op.operands)
        if op.name == "onnx.MaxPool":
            return _plain_maxpool(op) and op.operands[0].type.rank == 4
        if op.name == "onnx.AveragePool":
            return _plain_maxpool(op) and avg_constant_divisor(op.attrs) and op.operands[0].type.rank == 4
        if op.name == "onnx.Concat":
            return _channel_concat(op) and all(v.type.rank == 4 and self.constant(v) is None for v in op.operands)
        return _global_pool(op, self.module) is not None

    def constant(self, v: Value) -> np.ndarray | None:
        return const_value(v, self.module)

    def regions(self, min_convs: int, per_conversion: int) -> list[list[Op]]:
        out = []
        for ops in self.groups():
            kinds = [_conv_kind(op, self.module) if op.name == "onnx.Conv" else None for op in ops]
            convs = sum(k is not None for k in kinds)
            weight = convs + (DENSE_WEIGHT - 1) * kinds.count("dense")
            paying = "dw" in kinds or "dense" in kinds  # a dense kind is only eligible with `dense`
            if paying and convs >= min_convs and weight >= per_conversion * self.conversions(ops):
                out.append(ops)
        return out

    def dense_only(self, v: Value, members: set[int]) -> bool:
        """whether the region reads `v` only as the input of dense convs (each makes a padded
        channels-last copy of its input, which takes the layout change for free)"""
        inside = [u for u in v.uses if id(u.op) in members]
        return bool(inside) and all(
            u.index == 0 and _conv_kind(u.op, self.module) == "dense" for u in inside)

    def conversions(self, ops: list[Op]) -> int:
        """The layout changes of whole feature maps the region would need: 4-D values from
        outside that it reads and values of its own read outside, not counting [N, C, 1, 1]
        ones (an SE block's pooled vector) and constants."""
        members = {id(op) for op in ops}
        seen: set[int] = set()
        n = 0
        for op in ops:
            ins = op.operands[:1] if op.name in ("onnx.Conv", "onnx.ConvTranspose") else op.operands
            crossing = [v for v in ins if not (isinstance(v.owner, Op) and id(v.owner) in members)]
            if any(id(u.op) not in members for u in op.results[0].uses):
                crossing.append(op.results[0])
            for v in crossing:
                if id(v) in seen or v.type.rank != 4 or self.constant(v) is not None:
                    continue
                if v.owner is not op and self.dense_only(v, members):
                    continue  # transposed in the padded copy its dense convs make anyway
                seen.add(id(v))
                n += not (v.type.shape[2] == 1 and v.type.shape[3] == 1)
        return n


def _folded_relus(ops: list[Op], module: Module) -> dict[int, Op]:
    """The region's Relus whose operand is a dense conv's result read by nothing else: the
    conv's implicit GEMM applies them in its stores (cc.conv_nhwc's `relu`). In a region
    without a depthwise conv (squeezenet, inception) also a 1x1 conv's, which then takes the
    same call: squeezenet 1.06x -> 0.91x onnxruntime at 64x64, equal at 96x80 and 224x224;
    a mobile net's region keeps its 1x1 GEMMs (mnasnet measured within noise either way)."""
    members = {id(op) for op in ops}
    kinds = {"dense"} if any(_conv_kind(op, module) == "dw" for op in ops) else {"dense", "gemm"}
    out = {}
    for op in ops:
        if op.name != "onnx.Relu" or not isinstance(op.operands[0].owner, Op):
            continue
        conv = op.operands[0].owner
        if id(conv) in members and _conv_kind(conv, module) in kinds and len(conv.results[0].uses) == 1:
            out[id(op)] = conv
    return out


def _pool2(op: Op) -> bool:
    """a MaxPool of a 2x2 window at stride 2, floor mode, without padding or dilation: what a
    dense conv's `pool` attribute folds in (ops/conv_nhwc.py)"""
    a = op.attrs
    return (op.name == "onnx.MaxPool" and len(op.results) == 1 and list(a.get("kernel_shape") or []) == [POOL, POOL]
            and list(a.get("strides") or []) == [POOL, POOL] and not any(a.get("pads") or [])
            and list(a.get("dilations") or [1, 1]) == [1, 1] and not int(a.get("ceil_mode", 0))
            and a.get("auto_pad", "NOTSET") in ("NOTSET", "VALID") and not int(a.get("storage_order", 0)))


def _folded_pools(ops: list[Op], module: Module, relus: dict[int, Op]) -> dict[int, Op]:
    """The region's 2x2 stride-2 MaxPools whose operand is a dense conv's result (or its folded
    Relu's) read by nothing else: the conv's implicit GEMM maxes each window's 4 pixels in its
    stores (cc.conv_nhwc's `pool`), so the full-size map is neither written nor read back.
    benchmarks/convnets.py's plain net (3 -> 16 -> 32 convs, each Relu -> MaxPool 2x2)."""
    members = {id(op) for op in ops}
    out = {}
    for op in ops:
        src = op.operands[0].owner if op.operands else None
        if not (_pool2(op) and isinstance(src, Op) and len(src.results[0].uses) == 1):
            continue
        conv = relus.get(id(src), src)
        if id(conv) in members and conv.name == "onnx.Conv" and _conv_kind(conv, module) == "dense" and (
                conv is src or len(conv.results[0].uses) == 1):
            out[id(op)] = conv
    return out


@dataclass(frozen=True)
class _Residual:
    """a residual Add folded into the dense conv one of its operands is (cc.conv_nhwc's
    `residual`), with the Relu after it where that alone reads the sum"""

    conv: Op
    add: Op
    other: Value
    """the Add's other operand: the conv's last operand"""
    relu: Op | None


def _folded_residuals(ops: list[Op], module: Module, taken: set[int]) -> list[_Residual]:
    """The region's Adds of two values of one type, one a dense conv's result read by nothing
    else (its ReLU and pool not folded: `taken`), the other made in the region before that
    conv: the conv's stores add it (and apply the Relu that alone reads the sum), so neither
    the conv's result nor the sum is a separate pass over memory. benchmarks/convnets.py's
    resnet net."""
    members = {id(op) for op in ops}
    block = ops[0].parent
    order = {id(op): k for k, op in enumerate(block.ops)} if block is not None else {}
    out = []
    for add in ops:
        if add.name != "onnx.Add" or len(add.operands) != 2 or add.operands[0].type != add.operands[1].type:
            continue
        if add.operands[0].type != add.results[0].type:
            continue
        for k in (0, 1):
            conv, other = add.operands[k].owner, add.operands[1 - k]
            if not (isinstance(conv, Op) and id(conv) in members and id(conv) not in taken
                    and _conv_kind(conv, module) == "dense" and len(conv.results[0].uses) == 1):
                continue
            src = other.owner
            if not (isinstance(src, Op) and id(src) in members and order[id(src)] < order[id(conv)]):
                continue  # made outside the region, or after the conv: not there when the conv runs
            uses = add.results[0].uses
            relu = uses[0].op if len(uses) == 1 and uses[0].op.name == "onnx.Relu" else None
            out.append(_Residual(conv, add, other, relu if relu is not None and id(relu) in members else None))
            break
    return out


class _Rewriter(RegionRewriter):
    """Rewrites one region of a block (its ops in block order), folding a dense conv's Relu,
    2x2 MaxPool and residual Add into its stores."""

    def __init__(self, block: Block, module: Module, ops: list[Op]):
        super().__init__(block, module, ops)
        self.folded = _folded_relus(ops, module)  # id(Relu) -> the dense conv it is folded into
        self.relu_convs = {id(c) for c in self.folded.values()}
        self.pools = _folded_pools(ops, module, self.folded)  # id(MaxPool) -> the dense conv it is folded into
        self.pool_types = {id(conv): pool.results[0].type for pool in ops
                           if (conv := self.pools.get(id(pool))) is not None}  # id(conv) -> its pooled type
        self.residuals = {id(r.conv): r for r in _folded_residuals(ops, module,
                                                                   self.relu_convs | set(self.pool_types))}
        self.absorbed = {**self.folded, **self.pools}  # id(op) -> the conv whose result is op's
        for r in self.residuals.values():  # the Add (and its Relu) too
            self.absorbed.update({id(r.add): r.conv, **({id(r.relu): r.conv} if r.relu is not None else {})})

    def rewrite(self, op: Op) -> None:
        if op.name == "onnx.Resize":
            return self.resize(op)
        pooled = _global_pool(op, self.module)
        ins = op.operands[:1] if pooled else op.operands  # a ReduceMean's axes are the op's now
        operands = [self.operand(v, op) for v in ins]
        rt = permuted(_kept_dims(op.results[0].type, op))
        folded = self.absorbed.get(id(op))
        if folded is not None:  # the conv's stores apply it
            self.new[id(op.results[0])] = self.new[id(folded.results[0])]
            return
        if pooled:
            new = Op(pooled, operands, [rt], {}, loc=op.loc, result_names=[op.results[0].name])
        elif op.name == "onnx.Conv":
            attrs = {k: v for k, v in op.attrs.items() if k != "absent"}
            if id(op) in self.relu_convs:
                attrs["relu"] = 1
            if id(op) in self.pool_types:
                attrs["pool"] = POOL
                rt = permuted(self.pool_types[id(op)])
            res = self.residuals.get(id(op))
            if res is not None:
                if len(operands) < 3:  # the residual is the last operand: a zero bias before it
                    operands.append(self.const(np.zeros(rt.shape[3], np.float32), op, "bias"))
                operands.append(self.new[id(res.other)])
                attrs["residual"] = 1
                if res.relu is not None:
                    attrs["relu"] = 1
            new = Op("cc.conv_nhwc", operands, [rt], attrs, loc=op.loc, result_names=[op.results[0].name])
        elif op.name == "onnx.ConvTranspose":
            new = Op("cc.convt_nhwc", operands, [rt], dict(op.attrs), loc=op.loc, result_names=[op.results[0].name])
        elif op.name in ("onnx.MaxPool", "onnx.AveragePool"):
            kind = "cc.maxpool_nhwc" if op.name == "onnx.MaxPool" else "cc.avgpool_nhwc"
            new = Op(kind, operands, [rt], dict(op.attrs), loc=op.loc, result_names=[op.results[0].name])
        else:
            attrs = dict(op.attrs)
            if op.name == "onnx.Concat":
                attrs["axis"] = 3
            new = Op(op.name, operands, [rt], attrs, loc=op.loc, result_names=[op.results[0].name])
        self.block.insert_before(op, new)
        self.new[id(op.results[0])] = new.results[0]

    def resize(self, op: Op) -> None:
        """The same Resize on the channels-last input, its scales or sizes permuted alike."""
        found = channels_last_resize(op, lambda v: const_value(v, self.module), _known_dims)
        assert found is not None  # eligible() checked
        k, arg = found
        operands = list(op.operands)
        operands[0] = self.operand(op.operands[0], op)
        if isinstance(arg, np.ndarray):
            operands[k] = self.const(arg, op, "scales")
        else:
            sizes = Op("cc.dims", (), [TensorType(DType.i64, (4,))], {"dims": arg}, loc=op.loc)
            self.block.insert_before(op, sizes)
            operands[k] = sizes.results[0]
        new = Op(op.name, operands, [permuted(op.results[0].type)], dict(op.attrs), loc=op.loc,
                 result_names=[op.results[0].name])
        self.block.insert_before(op, new)
        self.new[id(op.results[0])] = new.results[0]

    def const(self, arr: np.ndarray, anchor: Op, name: str = "c") -> Value:
        value: object = arr
        if arr.size > 64:
            key, k = f"{name}_nhwc", 0
            while key in self.module.weights:
                k += 1
                key = f"{name}_nhwc_{k}"
            self.module.weights[key] = arr
            value = WeightRef(key)
        c = Op("cc.const", (), [TensorType(DType.from_np(arr.dtype), arr.shape)], {"value": value}, loc=anchor.loc)
        self.block.insert_before(anchor, c)
        return c.results[0]

    def operand(self, v: Value, user: Op) -> Value:
        if id(v) in self.new:
            return self.new[id(v)]
        if v.type.rank == 0 or (user.name in ("onnx.Conv", "onnx.ConvTranspose") and v is not user.operands[0]):
            return v  # weights, bias and scalar bounds keep their layout
        if v.type.rank == 4 and const_value(v, self.module) is None:
            return super().operand(v, user)
        return self.permuted_const(v, user)

    def permuted_const(self, v: Value, user: Op) -> Value:
        """A constant operand of a binary op, broadcast to rank 4 and permuted."""
        arr = const_value(v, self.module)
        assert arr is not None  # eligible() checked
        arr = np.ascontiguousarray(arr.reshape((1,) * (4 - arr.ndim) + arr.shape).transpose(TO_NHWC))
        return self.const(arr, user, v.name or "c")

    def plane_shape(self, arr: np.ndarray, op: Op, anchor: Op) -> Value:
        return self.const(arr, anchor, "unit_plane")


def nhwc_regions(module: Module, min_convs: int = 2, dense: bool = True,
                 per_conversion: int = CONVS_PER_CONVERSION) -> bool:
    changed = rewrite_regions(module, lambda block: _Finder(block, module, dense).regions(min_convs, per_conversion),
                              _Rewriter)
    # a conv's padding written by the call producing its input (only where the call runs)
    return (changed and dense and fuse_padded_outputs(module)) or changed


@register_pass
@dataclass(frozen=True)
class NhwcRegionPass(ModulePass):
    """Run chains of depthwise / 1x1 / dense convs and the elementwise ops between them
    channels-last (cc.conv_nhwc), with one layout conversion at each end of a chain."""

    name: ClassVar[str] = "nhwc-region"
    min_convs: int = 2
    """a region needs this many convs (one of them depthwise)"""
    dense: bool = True
    """whether dense kxk convs (of at least DENSE_MIN_COUT output channels) join a region
    (as implicit GEMM calls, ops/conv_implicit.py; without the call, GEMMs whose A is
    packed per call)"""

    convs_per_conversion: int = CONVS_PER_CONVERSION
    """a region needs this many convs per layout change of a whole feature map"""

    def run(self, module: Module, ctx: PassContext) -> bool:
        return nhwc_regions(module, self.min_convs, self.dense, self.convs_per_conversion)
