"""Import every pass module so their @register_pass decorators run (one line per pass), and
register the kernel passes (which cannot import the registry: kernel sits below passes)."""

from ..kernel.passes import KERNEL_PASSES
from . import (  # noqa: F401
    attention_chain,
    broadcast_relax,
    bucketize,
    canonicalize,
    cse,
    dce,
    fold_conv_affine,
    lower,
    nhwc_region,
    prune_symbols,
    qdq_fuse,
    qnhwc_region,
    shape_inference,
    specialize,
    specialize_value,
    split_if,
    value_symbols,
)
from .base import register_pass

for _cls in KERNEL_PASSES:
    register_pass(_cls)
