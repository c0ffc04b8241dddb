"""Small LLVM IR integer and pointer helpers the GEMM codegen files share (unsigned
min/max, ceil division, flagged add/mul that fold identities, row-major unflattening, f32
element pointers)."""

from __future__ import annotations

from collections.abc import Sequence

from llvmlite import ir

from ..llvm.exprs import F32
from ..llvm.helpers import i64


def umin(b: ir.IRBuilder, x: ir.Value, y: ir.Value, name: str) -> ir.Value:
    return b.select(b.icmp_unsigned("<", x, y, name=f"{name}.lt"), x, y, name=name)


def umax(b: ir.IRBuilder, x: ir.Value, y: ir.Value, name: str) -> ir.Value:
    return b.select(b.icmp_unsigned(">", x, y, name=f"{name}.gt"), x, y, name=name)


def ceildiv(b: ir.IRBuilder, x: ir.Value, d: int, name: str) -> ir.Value:
    return b.udiv(b.add(x, i64(d - 1), name=f"{name}.up"), i64(d), name=name)


def ceildiv_v(b: ir.IRBuilder, x: ir.Value, d: ir.Value, name: str) -> ir.Value:
    """ceil(x / d) for d >= 1."""
    return b.udiv(b.add(x, b.sub(d, i64(1), name=f"{name}.d1"), name=f"{name}.up"), d, name=name)


def mul(b: ir.IRBuilder, x: ir.Value, y: ir.Value | int, name: str) -> ir.Value:
    if isinstance(y, int):
        if y == 1:
            return x
        y = i64(y)
    return b.mul(x, y, name=name, flags=("nuw", "nsw"))


def add(b: ir.IRBuilder, x: ir.Value, y: ir.Value | int, name: str) -> ir.Value:
    if isinstance(y, int):
        if y == 0:
            return x
        y = i64(y)
    return b.add(x, y, name=name, flags=("nuw", "nsw"))


def product(b: ir.IRBuilder, xs: Sequence[ir.Value], name: str) -> ir.Value:
    out: ir.Value = i64(1)
    for x in xs:
        out = x if isinstance(out, ir.Constant) and out.constant == 1 else mul(b, out, x, name)
    return out


def unflatten(b: ir.IRBuilder, flat: ir.Value, exts: Sequence[ir.Value], names: Sequence[str]
               ) -> dict[str, ir.Value]:
    """Row-major indices of `flat` in a box of extents `exts` (all >= 1)."""
    if not names:
        return {}
    if len(names) == 1:
        return {names[0]: flat}
    out: dict[str, ir.Value] = {}
    rest = flat
    for n, e in zip(reversed(names[1:]), reversed(exts[1:])):
        out[n] = b.urem(rest, e, name=n)
        rest = b.udiv(rest, e, name=f"{n}.rest")
    out[names[0]] = rest
    return out


def f32_ptr(b: ir.IRBuilder, base: ir.Value, offset: ir.Value | int, name: str) -> ir.Value:
    off = i64(offset) if isinstance(offset, int) else offset
    return b.gep(base, [off], inbounds=True, name=name, source_etype=F32)
