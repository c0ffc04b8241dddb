"""ONNX -> graph IR. `load_onnx(path | bytes | ModelProto) -> Module`."""

from .onnx_import import INLINE_MAX, MIN_OPSET, free_vars, import_model, load_onnx

__all__ = ["INLINE_MAX", "MIN_OPSET", "free_vars", "import_model", "load_onnx"]
