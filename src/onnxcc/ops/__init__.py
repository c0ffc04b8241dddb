"""Op definitions, one module per op family; importing this package registers them all."""

from . import registry  # noqa: F401
from .registry import InferCtx, OpDef, RefCtx, define, get_opdef, onnx_inputs, register, registered_ops, require_opdef

# The verifier (in ir, which imports nothing above it) checks ops through this registry.
from ..ir.verify import set_opdef_lookup  # noqa: E402

set_opdef_lookup(get_opdef)

# Each family module registers its ops on import.
from . import (  # noqa: F401,E402
    bucket, cc, control_flow, elementwise, linalg, loss, matmul, misc, nn, reduce, rnn, sample, shape, signal,
)

__all__ = ["InferCtx", "OpDef", "RefCtx", "define", "get_opdef", "onnx_inputs", "register", "registered_ops",
           "require_opdef"]
