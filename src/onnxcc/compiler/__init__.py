"""The compiler: options, the pipeline recipe, compile (import -> pipeline -> backend ->
link) and the artifact cache's key. Import from here: `from onnxcc.compiler import ...`."""

from .cache import cache_document, compile_cached, model_digest
from .compile import Artifact, artifact_spec, compile_model, graph_stage, load_module, narrow_dims
from .options import EMIT_STAGES, PIPELINE_STAGES, TARGETS, CompileOptions
from .pipeline import graph_pipeline, pipeline, recipe

__all__ = ["EMIT_STAGES", "PIPELINE_STAGES", "TARGETS", "Artifact", "CompileOptions", "artifact_spec",
           "cache_document", "compile_cached", "compile_model", "graph_pipeline", "graph_stage",
           "load_module", "model_digest", "narrow_dims", "pipeline", "recipe"]
