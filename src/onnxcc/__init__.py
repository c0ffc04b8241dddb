"""onnxcc: an ahead-of-time ONNX compiler for models with symbolic shapes.

The public API:

    load_onnx(path | bytes | onnx.ModelProto, name=None) -> Module   import an ONNX model
    parse_ir(text, filename="<text>") -> Module                      read the textual IR
    print_ir(module) -> str                                          write the textual IR
    load_model(path) -> Module                                       .onnx or .onnxir, by suffix
    compile(model, out_dir, **options) -> Artifact                   build libNAME.so + NAME.h + NAME.json
    load(out_dir) -> CompiledModel                                   load a built artifact (ctypes)
    Session(model, **options)                                        JIT: serve now, specialise hot shapes
    InferenceSession(model, **options)                               onnxruntime-style: .run(None, feeds)

Heavy modules (onnx, the op registry, passes) are imported on first use.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from .version import __version__

if TYPE_CHECKING:  # pragma: no cover
    from .ir import Module


def load_onnx(model, name: str | None = None) -> Module:
    """Import an ONNX model (path, serialized bytes or onnx.ModelProto) as a typed Module."""
    from .frontend import load_onnx as _load_onnx

    return _load_onnx(model, name)


def parse_ir(text: str, filename: str = "<text>") -> Module:
    """Parse the textual IR (what `print_ir` writes) into a Module."""
    import onnxcc.ops  # noqa: F401  (op definitions, for passes run on the result)

    from .ir.parser import parse_module

    return parse_module(text, filename)


def print_ir(module: Module) -> str:
    """The canonical text of a Module (print -> parse -> print is a fixed point)."""
    from .ir.printer import print_module

    return print_module(module)


def load_model(path: str | os.PathLike) -> Module:
    """Load a model file: `.onnx` through the ONNX importer, `.onnxir` through the IR parser."""
    from .frontend.model_file import load_model as _load_model

    return _load_model(path)


def compile(model, out_dir, emit: str = "lib", **options):
    """Compile `model` (path, bytes, ModelProto or Module) into `out_dir`; options are the
    fields of `onnxcc.compiler.CompileOptions` (name, dims, specialize, target, ...)."""
    from .compiler import CompileOptions, compile_model

    return compile_model(model, out_dir, CompileOptions(**options), emit=emit)


def load(path: str | os.PathLike, *, out_pool_mb: float | None = None, out_pool_blocks: int | None = None):
    """Load a compiled artifact directory (or its NAME.json) for calls from Python; the
    output pool's bounds as in `onnxcc.runtime.load`."""
    from .runtime import load as _load

    return _load(path, out_pool_mb=out_pool_mb, out_pool_blocks=out_pool_blocks)


def __getattr__(name: str):
    # the JIT session pulls in the whole compiler: import it on first use
    if name == "Session":
        from .session import Session

        return Session
    if name == "InferenceSession":
        from .ort_compat import InferenceSession

        return InferenceSession
    raise AttributeError(f"module 'onnxcc' has no attribute {name!r}")


__all__ = ["InferenceSession", "Session", "__version__", "compile", "load", "load_model", "load_onnx", "parse_ir",
           "print_ir"]
