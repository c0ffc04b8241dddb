"""Op definitions, one module per op family; importing this package registers them all."""

from . import registry  # noqa: F401
from .registry import InferCtx, OpDef, RefCtx, define, get_opdef, onnx_inputs, register, registered_ops, require_opdef

# Each family module registers its ops on import.
import importlib as _importlib

for _family in ("cc", "elementwise", "reduce", "shape", "matmul", "nn", "control_flow", "misc", "bucket", "rnn"):
    try:
        _importlib.import_module(f"{__name__}.{_family}")
    except ModuleNotFoundError as _e:  # a family not written yet
        if _e.name != f"{__name__}.{_family}":
            raise

__all__ = ["InferCtx", "OpDef", "RefCtx", "define", "get_opdef", "onnx_inputs", "register", "registered_ops",
           "require_opdef"]
