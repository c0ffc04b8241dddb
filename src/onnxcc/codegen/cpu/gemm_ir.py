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


class RowIndex:
    """Row-major indices of a flat row counter that starts at `flat0` and steps by one:
    unflattened once, then carried row to row (adds and selects). Unflattening every row
    cost a division per index: with a channels-last conv's rows (n, oh, ow) over a short k
    that was most of a tile's A packing and epilogue time."""

    def __init__(self, b: ir.IRBuilder, alloca, flat0: ir.Value, exts: Sequence[ir.Value], names: Sequence[str]):
        """`alloca(type, name)`: a slot in the function's entry block."""
        self.b, self.exts, self.names = b, list(exts), list(names)
        self.slots = [alloca(ir.IntType(64), f"{n}.row") for n in self.names]
        start = unflatten(b, flat0, self.exts, self.names)
        for n, s in zip(self.names, self.slots):
            b.store(start[n], s)

    def values(self) -> dict[str, ir.Value]:
        return {n: self.b.load(s, name=n) for n, s in zip(self.names, self.slots)}

    def step(self, vals: dict[str, ir.Value]) -> None:
        """Store the indices of the next row (`vals`: this row's, from `values`)."""
        b, carry = self.b, None
        for k in reversed(range(len(self.names))):
            v = vals[self.names[k]]
            nxt = b.add(v, i64(1) if carry is None else b.zext(carry, ir.IntType(64)), name=f"{self.names[k]}.next")
            if k == 0:
                b.store(nxt, self.slots[k])
                break
            carry = b.icmp_unsigned("==", nxt, self.exts[k], name=f"{self.names[k]}.wrap")
            b.store(b.select(carry, i64(0), nxt), self.slots[k])


def sum_sets(b, acc, n_outer: int, n_inner: int, sets: int, typ):
    """A micro-kernel's partial-sum sets (acc[set][outer][inner], kept apart so consecutive
    k steps do not wait on one FMA chain) added into one value per (outer, inner) slot."""
    out = []
    for i in range(n_outer):
        row = []
        for v in range(n_inner):
            x = b.load(acc[0][i][v], name="sum", typ=typ)
            for s in range(1, sets):
                x = b.fadd(x, b.load(acc[s][i][v], name="part", typ=typ), name="sum")
            row.append(x)
        out.append(row)
    return out
