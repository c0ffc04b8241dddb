"""The Winograd conv call: a dense f32 3x3 stride-1 conv as F(2x2, 3x3) (Lavin & Gray), with
the sizes and buffers of kernel/conv_call.py's contract (the window sizes of a 3x3 stride-1
window read from a padded channels-last P: ta = WP*C, tb = C, sp = HP*WP*C), a callee of its
own, codegen/cpu/conv_wino.py, named by its input and output channels:

    call onnxcc_f32wino_c{C}m{M}(<conv_call.Sizes>; <conv_call.Buffers>) -> C

P's extent is (oh + 2) x (ow + 2) pixels (a 3x3 stride-1 window: HP = OH + 2 whatever the
pads were); 2x2 output tiles read 4x4 input tiles 2 pixels apart. Q holds two packings of
the weights: first U = G g G^T per (tap position p of the 4x4 tile, panel of NR output
channels) as [16, panels, C, NR] (`pack_u`), then the direct weights of conv_call.pack_w,
which the callee uses for any block of tiles where the transformed input is not finite (an
Inf or NaN in the input, or an overflow in its transform): Winograd's sums mix a tile's
pixels (an Inf input gives NaN where the direct conv gives +-Inf, which a Relu would not
clear), so such a block is computed directly and the answer is the direct conv's.

Error: each transform is a short sum of +-1 and +-1/2 multiples, exact in the weights' G
(halves) up to one rounding per element, so y's error is that of the direct sum times a small
constant (B^T d B sums 4 elements, A^T m A 9): a few ulp x C of the sum of |products|,
against the direct conv's ~C*9 ulp; tests/kernel/test_conv_wino_call.py measures it against
float64. F(4x4, 3x3) (transforms of +-1/4..+-8) is not used."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from .conv_call import NR, pack_w, panels

PREFIX = "onnxcc_f32wino_"
"""every Winograd callee's name starts so"""
MIN_CHANNELS = 16
"""input and output channels, at least: at 16 the Winograd call already took 0.63x the GEMM
call's time (benchmarks/conv_wino_channels.py, 1x56x56, one thread); at 8 and 12 channels
that net's convs do not reach the channels-last region at all, so fewer was not measured"""
MAX_CHANNELS = 128
"""input and output channels, at most: a block's transformed tiles and products live on the
stack (2 x 16 x TILES x 128 floats = 196 KiB)"""
TILES = 12
"""output tiles per block: the GEMM micro-kernel's rows (12 x 2 vectors of accumulators)"""

BT = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], np.float64)
G = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]], np.float64)
AT = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], np.float64)

_NAME = re.compile(r"onnxcc_f32wino_c(\d+)m(\d+)")


@dataclass(frozen=True)
class WinoSpec:
    """What a Winograd callee is specialized on."""

    cin: int
    cout: int

    @property
    def callee(self) -> str:
        return f"{PREFIX}c{self.cin}m{self.cout}"

    def supported(self) -> bool:
        return MIN_CHANNELS <= self.cin <= MAX_CHANNELS and MIN_CHANNELS <= self.cout <= MAX_CHANNELS


def parse(name: str) -> WinoSpec | None:
    """the spec a callee name encodes, or None for another call's name"""
    m = _NAME.fullmatch(name)
    return None if m is None else WinoSpec(int(m.group(1)), int(m.group(2)))


def transform_w(w: np.ndarray) -> np.ndarray:
    """U = G g G^T of conv weights [M, C, 3, 3] as [4, 4, C, M] (computed in float64)"""
    return np.einsum("ak,mckl,bl->abcm", G, np.asarray(w, np.float64), G)


def pack_u(w: np.ndarray) -> np.ndarray:
    """U as [16, panels(M), C, NR] f32, zero past M"""
    u = transform_w(w).reshape(16, w.shape[1], w.shape[0])
    mo = w.shape[0]
    full = np.zeros((16, u.shape[1], panels(mo) * NR), np.float32)
    full[:, :, :mo] = u
    return np.ascontiguousarray(full.reshape(16, u.shape[1], panels(mo), NR).transpose(0, 2, 1, 3))


def pack_q(w: np.ndarray) -> np.ndarray:
    """the call's Q: pack_u's U, then conv_call.pack_w's direct weights, flat"""
    return np.concatenate([pack_u(w).reshape(-1), pack_w(w).reshape(-1)])


def reference(x: np.ndarray, w: np.ndarray, dtype=np.float32) -> np.ndarray:
    """F(2x2, 3x3) of a padded channels-last map x [N, OH + 2, OW + 2, C] with weights [M, C, 3,
    3] in `dtype` arithmetic: y [N, OH, OW, M] (the callee's algorithm, as numpy)"""
    n, hp, wp, c = x.shape
    oh, ow = hp - 2, wp - 2
    th, tw = -(-oh // 2), -(-ow // 2)
    xp = np.zeros((n, 2 * th + 2, 2 * tw + 2, c), dtype)
    xp[:, :hp, :wp] = x
    d = np.stack([np.stack([xp[:, r:r + 2 * th:2, s:s + 2 * tw:2] for s in range(4)], 3) for r in range(4)], 3)
    bt = BT.astype(dtype)
    v = np.einsum("ar,nhwrsc,bs->nhwabc", bt, d, bt)  # [N, TH, TW, 4, 4, C]
    u = transform_w(w).astype(dtype)
    m = np.einsum("nhwabc,abcm->nhwabm", v, u)
    at = AT.astype(dtype)
    y = np.einsum("ia,nhwabm,jb->nhiwjm", at, m, at).reshape(n, 2 * th, 2 * tw, -1)
    return y[:, :oh, :ow]


__all__ = ["MAX_CHANNELS", "MIN_CHANNELS", "PREFIX", "TILES", "WinoSpec", "pack_q", "pack_u", "parse", "reference",
           "transform_w"]
