"""A model file by its suffix: `.onnx` through the ONNX importer, `.onnxir` through the IR parser."""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import ImportError_
from ..ir import Module
from ..ir.parser import parse_module

#: file suffixes `load_model` understands
ONNX_SUFFIXES = (".onnx",)
IR_SUFFIXES = (".onnxir",)


def load_model(path: str | os.PathLike) -> Module:
    """Load a model file: `.onnx` through the ONNX importer, `.onnxir` through the IR parser."""
    from .onnx_import import load_onnx

    p = Path(path)
    suffix = p.suffix.lower()
    if suffix in ONNX_SUFFIXES:
        return load_onnx(p)
    if suffix in IR_SUFFIXES:
        if not p.is_file():
            raise ImportError_(f"{p}: no such file" if not p.exists() else f"{p}: not a file")
        try:
            text = p.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise ImportError_(f"{p}: cannot read: {e}") from e
        import onnxcc.ops  # noqa: F401  (op definitions, for the passes run on the result)

        return parse_module(text, str(p))
    kind = repr(p.suffix) if p.suffix else "(no suffix)"
    raise ImportError_(f"{p}: unknown model file type {kind}: expected .onnx or .onnxir")
