"""Element types and tensor types.

A `TensorType` is frozen and hashable: a dtype and a shape whose dims are ints, sympy
expressions, or None for a dim no analysis could determine (printed `?`; rare).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

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

    def __repr__(self) -> str:
        return f"DType.{self.value}"

    @property
    def np(self) -> np.dtype:
        if self is DType.bf16:
            raise TypeError("bf16 has no numpy dtype")
        return np.dtype(_NP_NAME[self])

    @property
    def itemsize(self) -> int:
        return 2 if self is DType.bf16 else self.np.itemsize

    @property
    def is_float(self) -> bool:
        return self in (DType.f16, DType.bf16, DType.f32, DType.f64)

    @property
    def is_int(self) -> bool:
        return self.value[0] in "iu"

    @property
    def is_signed(self) -> bool:
        return self.value[0] == "i" or self.is_float

    @classmethod
    def from_np(cls, dt) -> DType:
        dt = np.dtype(dt)
        for k, v in _NP_NAME.items():
            if np.dtype(v) == dt:
                return k
        raise TypeError(f"no onnxcc dtype for numpy dtype {dt}")


_NP_NAME = {
    DType.f16: "float16", DType.f32: "float32", DType.f64: "float64",
    DType.i8: "int8", DType.i16: "int16", DType.i32: "int32", DType.i64: "int64",
    DType.u8: "uint8", DType.u16: "uint16", DType.u32: "uint32", DType.u64: "uint64",
    DType.bool: "bool",
}


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
