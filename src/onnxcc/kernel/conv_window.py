"""Window mode of a conv GEMM: B read in place from a zero-padded copy of the input.

A conv's GEMM reads B(k = (c, kh, kw), j = (oh, ow)) = X[n, c, sy*oh + dy*kh + ey,
sx*ow + dx*kw + ex] (through the padding select). Packing it (im2col) writes K x N floats
per call, 9x the input for a 3x3 conv. Window mode instead copies the input once into
padded planes and lets the micro-kernel read B's rows straight from them.

The copy splits each channel into sy x sx phase planes (a stride-1 conv has one):
Xp[bb][c][py][px][r][q] = B's input at position (y, x) = (r*sy + py + ey, q*sx + px + ex),
zero past the box the conv reads. Then tap k = (c, kh, kw) of output (oh, ow) is at
plane (c, (dy*kh) % sy, (dx*kw) % sx), row oh + (dy*kh) // sy, column ow + (dx*kw) // sx:
element off[k] + oh*X + ow of the copy, where X is a phase plane's width. Columns are
counted over that grid (X per output row, the last X - OW of each row computed and
dropped), so a tile is nr consecutive floats of each of its K rows, and tiles run across
output rows and stay full whatever the width.

The match is syntactic and exact: each of the two position index expressions of B's one
input load must be affine (s*o + d*k + e, integer s, d, e) and B must use (oh, kh) and
(ow, kw) only through them; then B is a function `tap` of (batch vars, plane vars, Y, X),
which the copy evaluates, guards and all, at every position of the box the conv reads."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import sympy

from onnxcc.ir import Dim, DType, canon

from .expr import Binary, Check, Const, Expr, Load, Var, free_vars, transform, walk

POS_Y, POS_X = "win.y", "win.x"
"""the vars `ConvWindow.tap` reads its two input positions from"""
MAX_STRIDE = 4
"""strides served in window mode (the copy holds sy x sx phase planes per channel)"""
MAX_K = 4096
"""longest contraction served in window mode: K is one block (no k blocking, the whole
A panel of mr x K floats from L1/L2) and its offset table lives on the task's stack"""


@dataclass(frozen=True, eq=False)
class ConvWindow:
    tap: Expr
    """B with its two positions replaced by Var(POS_Y), Var(POS_X)"""
    plane_vars: tuple[str, ...]
    """the reduce vars that are no kernel offset (a conv's input channel), in reduce order"""
    plane_exts: tuple[int, ...]
    ky: str | None
    """the reduce var of the kernel's row offset (None: the kernel is one row high)"""
    kx: str | None
    sy: int
    dy: int
    ey: int
    """position y = sy*oh + dy*ky + ey"""
    sx: int
    dx: int
    ex: int
    """position x = sx*ow + dx*kx + ex"""
    y_ext: Dim
    """rows of a phase plane: OH + (dy*(KH - 1)) // sy"""
    x_ext: Dim
    """columns of a phase plane (and grid columns per output row): OW + (dx*(KW - 1)) // sx"""
    y_hull: Dim
    """the rows the conv reads: sy*(OH - 1) + dy*(KH - 1) + 1 (the copy is zero past them)"""
    x_hull: Dim
    source: str | None = None
    """the buffer B reads, when it already is the padded planes (`in_place_source`): then
    there is no copy, and tiles read it in place"""

    @property
    def channels(self) -> int:
        out = 1
        for e in self.plane_exts:
            out *= e
        return out

    @property
    def planes(self) -> int:
        """phase planes of one batch in the copy"""
        return self.channels * self.sy * self.sx

    def describe(self) -> str:
        return f"window y={self.sy}*o+{self.dy}*k{self.ey:+d} x={self.sx}*o+{self.dx}*k{self.ex:+d}"


def _affine(e: Expr) -> dict[str | None, int] | None:
    """`e` as {var: coefficient, None: constant} when it is an integer affine form of vars."""
    if isinstance(e, Var):
        return {e.name: 1}
    if isinstance(e, Const) and isinstance(e.value, int) and not isinstance(e.value, bool):
        return {None: e.value}
    if isinstance(e, Binary) and e.op in ("add", "sub", "mul"):
        a, b = _affine(e.a), _affine(e.b)
        if a is None or b is None:
            return None
        if e.op == "mul":
            if set(a) == {None}:
                a, b = b, a
            if set(b) != {None}:
                return None
            return {k: v * b[None] for k, v in a.items()}
        sign = 1 if e.op == "add" else -1
        out = dict(a)
        for k, v in b.items():
            out[k] = out.get(k, 0) + sign * v
        return {k: v for k, v in out.items() if v or k is None}
    return None


def match_conv_window(b: Expr, n_vars: tuple[str, ...], reduce_vars: list[tuple[str, int | None]],
                      batch_vars: tuple[str, ...], ext: dict[str, Dim]) -> ConvWindow | None:
    """The window reading of a GEMM's B (see the module doc), or None."""
    if len(n_vars) != 2 or b.dtype is not DType.f32 or any(k is None for _, k in reduce_vars):
        return None
    kext = {v: int(k) for v, k in reduce_vars}  # type: ignore[arg-type]
    kk = 1
    for k in kext.values():
        kk *= k
    if kk > MAX_K or any(isinstance(n, Check) for n in walk(b)):
        return None
    loads = [n for n in walk(b) if isinstance(n, Load) and free_vars(n) & set(n_vars)]
    if len(loads) != 1 or loads[0].dtype is not DType.f32:
        return None
    pos = []
    for o in n_vars:
        idx = [i for i in loads[0].indices if o in free_vars(i)]
        aff = _affine(idx[0]) if len(idx) == 1 else None
        if aff is None:
            return None
        s, e = aff.pop(o, 0), aff.pop(None, 0)
        if s < 1 or len(aff) > 1:
            return None
        k, d = next(iter(aff.items())) if aff else (None, 0)
        if k is not None and (k not in kext or d < 1):
            return None
        pos.append((idx[0], s, k, d, e))
    (py, sy, ky, dy, ey), (px, sx, kx, dx, ex) = pos
    if sx > MAX_STRIDE or sy > MAX_STRIDE or py == px or (ky is not None and ky == kx):
        return None
    tap = transform(b, lambda n: Var(POS_Y) if n == py else Var(POS_X) if n == px else None)
    plane = tuple(v for v in kext if v not in (ky, kx))
    if not free_vars(tap) <= set(plane) | set(batch_vars) | {POS_Y, POS_X}:
        return None  # (oh, kh) or (ow, kw) used outside the positions: not a window
    kh, kw = (kext[ky] if ky else 1), (kext[kx] if kx else 1)
    oh, ow = ext[n_vars[0]], ext[n_vars[1]]
    return ConvWindow(tap=tap, plane_vars=plane, plane_exts=tuple(kext[v] for v in plane), ky=ky, kx=kx,
                      sy=sy, dy=dy, ey=ey, sx=sx, dx=dx, ex=ex, y_ext=canon(oh + dy * (kh - 1) // sy),
                      x_ext=canon(ow + dx * (kw - 1) // sx), y_hull=canon(sy * (oh - 1) + dy * (kh - 1) + 1),
                      x_hull=canon(sx * (ow - 1) + dx * (kw - 1) + 1))


def tap_offset(w: ConvWindow, plane: int, kh: int, kw: int, x_ext: int, y_ext: int) -> int:
    """Where tap (plane, kh, kw) of output (0, 0) is in one batch's copy (see the module doc)."""
    ty, tx = w.dy * kh, w.dx * kw
    phase_plane = (plane * w.sy + ty % w.sy) * w.sx + tx % w.sx
    return phase_plane * y_ext * x_ext + (ty // w.sy) * x_ext + tx // w.sx


def window_offsets(w: ConvWindow, reduce_vars: list[tuple[str, int]], x_ext: int, y_ext: int) -> list[int]:
    """off[k] for every flat k (row-major over the reduce vars), for static extents: the
    reference the emitted table follows (tests)."""
    import itertools

    names = [v for v, _ in reduce_vars]
    out = []
    for ix in itertools.product(*(range(e) for _, e in reduce_vars)):
        val = dict(zip(names, ix))
        plane = 0
        for v, e in zip(w.plane_vars, w.plane_exts):
            plane = plane * e + val[v]
        out.append(tap_offset(w, plane, val.get(w.ky, 0) if w.ky else 0, val.get(w.kx, 0) if w.kx else 0,
                              x_ext, y_ext))
    return out


def in_place_source(w: ConvWindow, batch_vars: tuple[str, ...], batch_exts: Sequence[Dim],
                    shape_of: Callable[[str], Sequence[Dim]]) -> str | None:
    """The buffer a window may read in place instead of a padded copy: `tap` is a plain
    load X[batch vars..., plane var, Y, X] with no offsets or guards, over an X whose dims
    are exactly (batch extents..., planes, y_ext, x_ext) (so X's layout is the copy's), and
    the grid has no padding columns (no kernel width), so no tile reads past X's end."""
    t = w.tap
    if not isinstance(t, Load) or w.kx is not None or w.ex or w.ey or len(w.plane_vars) != 1 or w.sx * w.sy != 1:
        return None
    if [i.name if isinstance(i, Var) else None for i in t.indices] != [*batch_vars, w.plane_vars[0], POS_Y, POS_X]:
        return None
    want = [*batch_exts, w.planes, w.y_ext, w.x_ext]
    shape = list(shape_of(t.buffer))
    if len(shape) != len(want) or any(sympy.sympify(a) != sympy.sympify(b) for a, b in zip(shape, want)):
        return None
    return t.buffer
