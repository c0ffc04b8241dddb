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


def load_model(path: str | os.PathLike, structure: dict[str, str] | None = None,
               values: dict[str, list] | None = None, dims: dict[str, int] | None = None) -> Module:
    """Load a model file: `.onnx` through the ONNX importer, `.onnxir` through the IR parser.
    `structure`: the sequence / optional inputs' specs (frontend/sequences.py)."""
    from .onnx_import import load_onnx

    p = Path(path)
    suffix = p.suffix.lower()
    if suffix in ONNX_SUFFIXES:
        return load_onnx(p, structure=structure, values=values, dims=dims)
    if suffix in IR_SUFFIXES:
        if not p.is_file():
            raise ImportError_(f"{p}: no such file" if not p.exists() else f"{p}: not a file")
        try:
            text = p.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise ImportError_(f"{p}: cannot read: {e}") from e
        import onnxcc.ops  # noqa: F401  (op definitions, for the passes run on the result)

        module = parse_module(text, str(p))
        _load_weights(module, p)
        return module
    kind = repr(p.suffix) if p.suffix else "(no suffix)"
    raise ImportError_(f"{p}: unknown model file type {kind}: expected .onnx or .onnxir")


#: the module attribute naming the weights file `write_ir` saved beside the text
WEIGHTS_ATTR = "weights_file"


def write_ir(module: Module, path: str | os.PathLike, text_of) -> None:
    """Write `module` as IR text to `path`, its weights (the tensors `cc.const {value =
    @name}` refers to, which the text never holds) beside it in PATH.weights.npz, named by
    the module attribute `weights_file`, so the file compiles on its own."""
    import numpy as np

    p = Path(path)
    if module.weights:
        npz = p.with_name(p.stem + ".weights.npz")
        with open(npz, "wb") as f:
            np.savez(f, **module.weights)
        module.attrs[WEIGHTS_ATTR] = npz.name
    p.write_text(text_of(module))


def _load_weights(module: Module, path: Path) -> None:
    """Fill module.weights from the file `weights_file` names (beside the text). Text without
    it still loads (to print, to run graph passes); compiling it needs the weights."""
    name = module.attrs.get(WEIGHTS_ATTR)
    if name is not None:
        f = path.parent / str(name)
        if not isinstance(name, str) or Path(name).name != name or not f.is_file():
            raise ImportError_(f"{path}: weights file {name!r} (attribute {WEIGHTS_ATTR}) not found beside it")
        import numpy as np

        try:
            with np.load(f, allow_pickle=False) as z:
                for k in z.files:
                    module.weights.setdefault(k, z[k])
        except (OSError, ValueError) as e:
            raise ImportError_(f"{f}: cannot read the weights: {e}") from None
