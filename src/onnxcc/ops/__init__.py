"""Op definitions, one module per op family; importing this package registers them all."""

from . import registry  # noqa: F401
from .registry import InferCtx, OpDef, RefCtx, define, get_opdef, onnx_inputs, register, registered_ops, require_opdef

# The verifier (in ir, which imports nothing above it) checks ops through this registry.
from ..ir.verify import set_opdef_lookup

set_opdef_lookup(get_opdef)

# Each family module registers its ops on import.
from . import attention  # noqa: F401
from . import bucket  # noqa: F401
from . import cc  # noqa: F401
from . import contrib  # noqa: F401
from . import control_flow  # noqa: F401
from . import data_dependent  # noqa: F401
from . import elementwise  # noqa: F401
from . import flex_attention  # noqa: F401
from . import gather  # noqa: F401
from . import kv_cache  # noqa: F401
from . import linalg  # noqa: F401
from . import linear_attention  # noqa: F401
from . import loss  # noqa: F401
from . import matmul  # noqa: F401
from . import misc  # noqa: F401
from . import ml  # noqa: F401
from . import nms  # noqa: F401
from . import nn  # noqa: F401
from . import conv_nhwc  # noqa: F401
from . import convt_nhwc  # noqa: F401
from . import pool_nhwc  # noqa: F401
from . import pointwise_extra  # noqa: F401
from . import quant  # noqa: F401
from . import int8_nhwc  # noqa: F401
from . import contrib_qlinear  # noqa: F401
from . import contrib_qlstm  # noqa: F401
from . import contrib_qattention  # noqa: F401
from . import contrib_qembed  # noqa: F401
from . import random  # noqa: F401
from . import reduce  # noqa: F401
from . import resize  # noqa: F401
from . import rnn  # noqa: F401
from . import roi_align  # noqa: F401
from . import sample  # noqa: F401
from . import sdpa  # noqa: F401
from . import shape  # noqa: F401
from . import signal  # noqa: F401
from . import signal_extra  # noqa: F401
from . import text  # noqa: F401
from . import training  # noqa: F401
from . import state_conv  # noqa: F401
from . import swiglu  # noqa: F401
from . import unique  # noqa: F401
from . import strings_sized  # noqa: F401
from .strings import mark_string_ops

mark_string_ops()  # after every family: Equal and the ops that move elements take strings

__all__ = ["InferCtx", "OpDef", "RefCtx", "define", "get_opdef", "onnx_inputs", "register", "registered_ops",
           "require_opdef"]
