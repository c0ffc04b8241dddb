"""The compiler: options, the pipeline recipe, compile (import -> pipeline -> backend ->
link) and the artifact cache's key. Import from here: `from onnxcc.compiler import ...`.

Names load on first use, so the CLI can read `options.EMIT_STAGES` without importing the
passes, the ops and sympy.
"""

import importlib

_HOMES = {
    "cache_document": "cache", "compile_cached": "cache", "model_digest": "cache",
    "Artifact": "compile", "artifact_spec": "compile", "compile_model": "compile", "graph_stage": "compile",
    "load_module": "compile", "narrow_dims": "compile",
    "EMIT_STAGES": "options", "PIPELINE_STAGES": "options", "TARGETS": "options", "CompileOptions": "options",
    "build_pipeline": "pipeline", "graph_pipeline": "pipeline", "recipe": "pipeline",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str):
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f".{home}", __name__), name)
