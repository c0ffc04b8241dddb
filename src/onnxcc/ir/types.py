"""Element types and tensor types.

A `TensorType` is frozen and hashable: a dtype and a shape whose dims are ints, sympy
expressions, or None for a dim no analysis could determine (printed `?`; rare).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import ml_dtypes
import numpy as np
import sympy

from .dims import Dim, canon


class DType(enum.Enum):
    """Element types, with the short names the text form uses."""

    f16 = "f16"
    bf16 = "bf16"
    f32 = "f32"
    f64 = "f64"
    i8 = "i8"
    i16 = "i16"
    i32 = "i32"
    i64 = "i64"
    u8 = "u8"
    u16 = "u16"
    u32 = "u32"
    u64 = "u64"
    bool = "bool"
    # the small types (ONNX 1.18+): 8-bit floats, 4-bit floats and sub-byte integers. They are
    # storage types: values convert to and from them (Cast, CastLike, QuantizeLinear,
    # DequantizeLinear) and move as they are (views); the other ops refuse them.
    f8e4m3fn = "f8e4m3fn"
    f8e4m3fnuz = "f8e4m3fnuz"
    f8e5m2 = "f8e5m2"
    f8e5m2fnuz = "f8e5m2fnuz"
    f8e8m0 = "f8e8m0"
    f4e2m1 = "f4e2m1"
    i4 = "i4"
    u4 = "u4"
    i2 = "i2"
    u2 = "u2"
    # strings (ONNX STRING): UTF-8 text, one `const char *` per element in memory (a pointer
    # to a NUL-terminated string; see codegen/c/strings.py for who owns what). numpy holds
    # them as object arrays of str. Only ops that move elements, and the string ops, take them.
    string = "str"

    def __repr__(self) -> str:
        return f"DType.{self.value}"

    @property
    def np(self) -> np.dtype:
        """The numpy dtype of the values (bf16 and the small types: ml_dtypes' types, which
        hold sub-byte values one per byte)."""
        name = _NP_NAME.get(self)
        return np.dtype(name) if name is not None else np.dtype(getattr(ml_dtypes, _ML_NAME[self]))

    @property
    def bits(self) -> int:
        """Bits per element; below 8 (i4, u4, i2, u2, f4e2m1) elements are packed in memory,
        the first in the low bits of a byte (ONNX's and DLPack's layout)."""
        return _SUB_BYTE.get(self, 8 * self.np.itemsize)

    @property
    def itemsize(self) -> int:
        """Bytes per element in memory; 1 for the packed sub-byte types (an upper bound)."""
        return max(1, self.bits // 8)

    @property
    def is_float(self) -> bool:
        return self in _FLOATS

    @property
    def is_small(self) -> bool:
        """One of the storage-only small types (8-bit and 4-bit floats, sub-byte integers)."""
        return self in _SMALL

    @property
    def is_str(self) -> bool:
        return self is DType.string

    @property
    def is_int(self) -> bool:
        return self.value[0] in "iu"

    @property
    def is_signed(self) -> bool:
        return self.value[0] == "i" or self.is_float

    @classmethod
    def from_np(cls, dt) -> DType:
        dt = np.dtype(dt)
        if not _BY_NP:
            _BY_NP.update({k.np: k for k in reversed(DType)})  # first wins (f16 before the others)
        try:
            return _BY_NP[dt]
        except KeyError:
            raise TypeError(f"no onnxcc dtype for numpy dtype {dt}") from None


_NP_NAME = {
    DType.f16: "float16", DType.f32: "float32", DType.f64: "float64",
    DType.i8: "int8", DType.i16: "int16", DType.i32: "int32", DType.i64: "int64",
    DType.u8: "uint8", DType.u16: "uint16", DType.u32: "uint32", DType.u64: "uint64",
    DType.bool: "bool", DType.string: "object",
}
#: ml_dtypes' names of the types numpy lacks
_ML_NAME = {
    DType.bf16: "bfloat16", DType.f8e4m3fn: "float8_e4m3fn", DType.f8e4m3fnuz: "float8_e4m3fnuz",
    DType.f8e5m2: "float8_e5m2", DType.f8e5m2fnuz: "float8_e5m2fnuz", DType.f8e8m0: "float8_e8m0fnu",
    DType.f4e2m1: "float4_e2m1fn", DType.i4: "int4", DType.u4: "uint4", DType.i2: "int2", DType.u2: "uint2",
}
_BY_NP: dict = {}  # numpy dtype -> DType, filled on first use
_SUB_BYTE = {DType.f4e2m1: 4, DType.i4: 4, DType.u4: 4, DType.i2: 2, DType.u2: 2}
_FLOATS = frozenset({DType.f16, DType.bf16, DType.f32, DType.f64, DType.f8e4m3fn, DType.f8e4m3fnuz,
                     DType.f8e5m2, DType.f8e5m2fnuz, DType.f8e8m0, DType.f4e2m1})
_SMALL = frozenset({DType.f8e4m3fn, DType.f8e4m3fnuz, DType.f8e5m2, DType.f8e5m2fnuz, DType.f8e8m0,
                    DType.f4e2m1, DType.i4, DType.u4, DType.i2, DType.u2})


@dataclass(frozen=True)
class TensorType:
    dtype: DType
    shape: tuple[Dim, ...]

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(canon(d) for d in self.shape))

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def is_static(self) -> bool:
        return all(isinstance(d, int) for d in self.shape)

    @property
    def has_unknown(self) -> bool:
        return any(d is None for d in self.shape)

    def numel(self) -> Dim | None:
        """Element count; None when some dim is unknown."""
        n: Dim = 1
        for d in self.shape:
            if d is None:
                return None
            n = n * d
        return canon(n)

    def nbytes(self) -> Dim | None:
        n = self.numel()
        return None if n is None else canon(n * self.dtype.itemsize)

    def with_shape(self, shape) -> TensorType:
        return TensorType(self.dtype, tuple(shape))

    def with_dtype(self, dtype: DType) -> TensorType:
        return TensorType(dtype, self.shape)

    def symbols(self) -> set[sympy.Symbol]:
        out: set = set()
        for d in self.shape:
            if d is not None and not isinstance(d, int):
                out |= d.free_symbols
        return out

    def __str__(self) -> str:
        from .printer import print_type

        return print_type(self)


def storage_np(dt: DType) -> np.dtype:
    """The unsigned integer numpy dtype holding one element's bit pattern where numpy has no
    arithmetic type of its own (bf16: uint16; the small types: uint8, one element per byte
    before packing), else the dtype's numpy dtype."""
    if dt is DType.bf16:
        return np.dtype(np.uint16)
    if dt.is_small:
        return np.dtype(np.uint8)
    return dt.np


def to_bits(values, dt: DType) -> np.ndarray:
    """Values as `dt` (rounded and saturated the way a numpy cast to ml_dtypes' type does),
    as their bit patterns in `storage_np(dt)`, one element per item (see `pack_bits`).
    An array already in `storage_np(dt)` of a non-numpy dtype is taken to hold bits."""
    a = np.asarray(values)
    st = storage_np(dt)
    if st == dt.np:
        return a.astype(st, copy=False)
    if a.dtype == st:
        return a
    bits = a.astype(dt.np).view(st)
    return bits & np.uint8((1 << dt.bits) - 1) if dt.bits < 8 else bits


def pack_bits(codes: np.ndarray, bits: int) -> bytes:
    """Sub-byte codes (one per uint8, flattened in row-major order) packed 8 // bits per
    byte, the first element in the lowest bits (ONNX's and DLPack's layout)."""
    per = 8 // bits
    c = np.asarray(codes, np.uint8).reshape(-1)
    c = np.concatenate([c, np.zeros((-c.size) % per, np.uint8)]).reshape(-1, per)
    out = np.zeros(c.shape[0], np.uint8)
    for k in range(per):
        out |= (c[:, k] & np.uint8((1 << bits) - 1)) << np.uint8(k * bits)
    return out.tobytes()


def storage_bytes(values, dt: DType) -> bytes:
    """The bytes of a tensor of `dt` as it lies in memory (sub-byte types packed)."""
    bits = to_bits(values, dt)
    return pack_bits(bits, dt.bits) if dt.bits < 8 else np.ascontiguousarray(bits).tobytes()
