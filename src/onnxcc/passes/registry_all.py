"""Import every pass module so their @register_pass decorators run (one line per pass), and
register the kernel passes (which cannot import the registry: kernel sits below passes)."""

from ..kernel.passes import KERNEL_PASSES
from . import bucketize, canonicalize, cse, dce, lower, prune_symbols, shape_inference, specialize, split_if  # noqa: F401
from .base import register_pass

for _cls in KERNEL_PASSES:
    register_pass(_cls)
