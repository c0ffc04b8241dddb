"""ONNX element-type enums (TensorProto.DataType) <-> onnxcc DTypes.

Attributes such as Cast's `to` or LayerNormalization's `stash_type` hold the ONNX enum as
a plain int; the numbers are fixed by the ONNX spec, so they are spelled out here rather
than read from the onnx package (ops/ does not depend on onnx).
"""

from __future__ import annotations

from ..ir import DType

_FROM_ONNX: dict[int, DType] = {
    1: DType.f32, 2: DType.u8, 3: DType.i8, 4: DType.u16, 5: DType.i16, 6: DType.i32,
    7: DType.i64, 9: DType.bool, 10: DType.f16, 11: DType.f64, 12: DType.u32, 13: DType.u64,
    16: DType.bf16, 17: DType.f8e4m3fn, 18: DType.f8e4m3fnuz, 19: DType.f8e5m2, 20: DType.f8e5m2fnuz,
    21: DType.u4, 22: DType.i4, 23: DType.f4e2m1, 24: DType.f8e8m0, 25: DType.u2, 26: DType.i2,
    8: DType.string,
}
_TO_ONNX: dict[DType, int] = {v: k for k, v in _FROM_ONNX.items()}

#: names of the ONNX types onnxcc does not model, for error messages
_UNSUPPORTED = {0: "UNDEFINED", 14: "COMPLEX64", 15: "COMPLEX128"}


def onnx_dtype(enum: int | DType) -> DType:
    """The DType for an ONNX TensorProto enum (a DType passes through unchanged).

    >>> onnx_dtype(1)
    DType.f32
    """
    if isinstance(enum, DType):
        return enum
    try:
        return _FROM_ONNX[int(enum)]
    except (KeyError, ValueError, TypeError):
        name = _UNSUPPORTED.get(enum, f"enum {enum}") if isinstance(enum, int) else repr(enum)
        raise ValueError(f"unsupported onnx element type {name}") from None


def onnx_enum(dtype: DType) -> int:
    """The ONNX TensorProto enum for a DType (inverse of `onnx_dtype`)."""
    return _TO_ONNX[dtype]
