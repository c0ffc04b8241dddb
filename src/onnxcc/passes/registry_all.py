"""Import every pass module so their @register_pass decorators run."""

import importlib

for _mod in ("shape_inference", "canonicalize", "dce", "cse", "specialize", "bucketize"):
    try:
        importlib.import_module(f"{__package__}.{_mod}")
    except ModuleNotFoundError as e:  # pass not written yet
        if e.name != f"{__package__}.{_mod}":
            raise
