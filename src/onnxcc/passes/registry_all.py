"""Import every pass module so their @register_pass decorators run (one line per pass)."""

from . import bucketize, canonicalize, cse, dce, shape_inference, specialize  # noqa: F401
