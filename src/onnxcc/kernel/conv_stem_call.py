"""The small-input-channel conv call (an image stem's: at most 4 input channels): the same
sizes and buffers as the implicit-GEMM conv call (kernel/conv_call.py, its contract, with Q
`pack_w_planar`'s K = (kh, c, kw)), but a callee of its own, codegen/cpu/conv_stem.py,
specialized by its name on what the lowering knows statically: the input channels, the
kernel's extents, the strides and the fused 2x2 MaxPool. Two departures from the contract:
P is the planar input [N, C, H, W] itself, unpadded (the net's NCHW input where the conv's
channels-last X is its transpose, else a planar copy of X): the callee masks the padding
off its loads; and the window sizes it has no use for, the kernel and strides being in its
name, carry the input's geometry instead: s0 and s1 the top and left pads, l the width W,
tb the height H (ss0 = W, ss1 = H W, sp = C H W, ta = SH W as the contract reads them).

    call onnxcc_f32stem_c{C}k{KH}x{KW}s{SH}x{SW}p{POOL}(<conv_call.Sizes>; <conv_call.Buffers>) -> C

Output pixels sit in the vector lanes there (16 consecutive ones of a row), so each tap is a
contiguous load of the planar copy times a broadcast weight, and no half-empty panel of
output channels is computed; the conv call's `res` (a residual) and `c0` (a Concat slice)
are never set for it (ops/conv_implicit.py routes those to the GEMM call)."""

from __future__ import annotations

import re
from dataclasses import dataclass

PREFIX = "onnxcc_f32stem_"
"""every stem callee's name starts so"""
MAX_CIN = 4
"""input channels, at most"""
MAX_K = 7
"""kernel extent per axis, at most"""
STRIDES = (1, 2)
"""strides per axis it is built for"""

_NAME = re.compile(r"onnxcc_f32stem_c(\d+)k(\d+)x(\d+)s(\d+)x(\d+)p([01])")


@dataclass(frozen=True)
class StemSpec:
    """What a stem callee is specialized on."""

    cin: int
    kh: int
    kw: int
    sh: int
    sw: int
    pool: bool
    """a 2x2 stride-2 MaxPool fused after the activation (conv_call's pool = 4)"""

    @property
    def callee(self) -> str:
        return f"{PREFIX}c{self.cin}k{self.kh}x{self.kw}s{self.sh}x{self.sw}p{int(self.pool)}"

    def supported(self) -> bool:
        return (1 <= self.cin <= MAX_CIN and 1 <= self.kh <= MAX_K and 1 <= self.kw <= MAX_K
                and self.sh in STRIDES and self.sw in STRIDES)


def parse(name: str) -> StemSpec | None:
    """the spec a callee name encodes, or None for another call's name"""
    m = _NAME.fullmatch(name)
    if m is None:
        return None
    cin, kh, kw, sh, sw, pool = (int(g) for g in m.groups())
    return StemSpec(cin, kh, kw, sh, sw, bool(pool))


__all__ = ["MAX_CIN", "MAX_K", "PREFIX", "STRIDES", "StemSpec", "parse"]
