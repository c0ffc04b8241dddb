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
    16: DType.bf16,
}
_TO_ONNX: dict[DType, int] = {v: k for k, v in _FROM_ONNX.items()}

#: names of the ONNX types onnxcc does not model, for error messages
_UNSUPPORTED = {0: "UNDEFINED", 8: "STRING", 14: "COMPLEX64", 15: "COMPLEX128", 17: "FLOAT8E4M3FN",
                18: "FLOAT8E4M3FNUZ", 19: "FLOAT8E5M2", 20: "FLOAT8E5M2FNUZ", 21: "UINT4", 22: "INT4",
                23: "FLOAT4E2M1"}


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
