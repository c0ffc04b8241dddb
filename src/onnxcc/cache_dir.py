"""Where onnxcc keeps what it caches: `$ONNXCC_CACHE_DIR`, else `$XDG_CACHE_HOME/onnxcc`, else
`~/.cache/onnxcc`. One rule for every layer that writes there (the artifact cache in
runtime/, the compiled C runtime objects in codegen/, the conformance case cache)."""

from __future__ import annotations

import os
from pathlib import Path


def default_root() -> Path:
    env = os.environ.get("ONNXCC_CACHE_DIR")
    if env:
        return Path(env)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "onnxcc"
