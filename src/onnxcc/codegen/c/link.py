"""Wrap compiled versions into an artifact: NAME.h, NAME.json, the dispatcher, libNAME.so.

The pieces, one file each: target.py (what a target adds, the shared constants),
binding.py (where each symbol's value comes from), header.py (NAME.h), dispatch.py (the
generated C of NAME_run and friends), metadata.py (NAME.json), layout.py (strides and
aliasing); build.py runs the C compiler over them. This module is the one place the rest of
onnxcc imports them from.
"""

from __future__ import annotations

from .dispatch import generate_dispatcher
from .header import generate_header
from .metadata import generate_metadata
from .target import (
    ABI_VERSION,
    CPU_LINK,
    DL_DTYPE,
    ERROR_CODES,
    IDENTITY_API,
    RUNTIME_DIR,
    RUNTIME_SOURCES,
    LinkTarget,
    api_names,
    link_target,
    runtime_define,
)

__all__ = ["ABI_VERSION", "CPU_LINK", "DL_DTYPE", "ERROR_CODES", "IDENTITY_API", "RUNTIME_DIR", "RUNTIME_SOURCES",
           "LinkTarget", "api_names", "generate_dispatcher", "generate_header", "generate_metadata", "link_target",
           "runtime_define"]
