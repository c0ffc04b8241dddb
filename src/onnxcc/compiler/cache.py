"""The artifact cache's compiler side: the key document of a build (the model and every
external-data file it reads, onnxcc's version and a digest of its own source, options, target
machine) and `compile_cached` (compile on a miss only).
The store itself is runtime/cache.py."""

from __future__ import annotations

import tempfile
from pathlib import Path

from .cache_key import model_digest, source_digest
from .compile import compile_model
from .options import CompileOptions
from .value_versions import ValueDependentError

__all__ = ["cache_document", "compile_cached", "model_digest", "source_digest"]


def cache_document(model, options: CompileOptions, extra: dict | None = None) -> dict:
    """Everything that changes the build: the cache key is the sha256 of this document."""
    from ..codegen.cpu.emit import host_cpu
    from ..version import __version__

    cpu, feats = host_cpu()
    return {"model": model_digest(model), "onnxcc": __version__, "source": source_digest(),
            "options": options.cache_key(),
            "triple": options.triple or "host", "cpu": options.cpu or cpu,
            "features": options.features or feats, "extra": extra or {}}


def compile_cached(model, options: CompileOptions | None = None, cache=None, extra: dict | None = None):
    """The artifact directory for (model, options), compiled only on a cache miss.
    Returns (path, hit: bool)."""
    from ..runtime.cache import ArtifactCache, CacheUnusable, make_key, warn

    options = options or CompileOptions()
    cache = cache if cache is not None else ArtifactCache()
    doc = cache_document(model, options, extra)
    key = make_key(doc)
    if options.name is None and isinstance(model, (str, Path)):
        options = CompileOptions(**{**options.__dict__, "name": Path(model).stem})
    problem = cache.problem()
    if not problem:
        hit = cache.lookup(key, doc)
        if hit is not None:
            return hit, True
        _raise_recorded_refusal(cache, key)
        about = {"model": str(Path(model).resolve())} if isinstance(model, (str, Path)) else {}
        try:
            return cache.store(key, doc, lambda d: compile_model(model, d, options), about), False
        except CacheUnusable as e:
            problem = str(e)
        except ValueDependentError as e:
            # the same build is refused the same way every time: remember it, so a caller that
            # retries with value versions (build_for_inputs) does not pay for it again
            cache.record_refusal(key, {"kind": "value-dependent", "message": str(e), "inputs": e.inputs,
                                       "all_inputs": e.all_inputs})
            raise
    # the cache cannot be used: build without it (a private directory of its own)
    warn(f"{problem}; building without the cache")
    cache.events.append(("bypass", key, problem))
    out = Path(tempfile.mkdtemp(prefix="onnxcc-nocache-"))
    compile_model(model, out, options)
    return out, False


def _raise_recorded_refusal(cache, key: str) -> None:
    """Raise the ValueDependentError recorded for this key, if any."""
    rec = cache.refusal(key)
    if rec is None or rec.get("kind") != "value-dependent":
        return
    inputs, all_inputs = rec.get("inputs"), rec.get("all_inputs")
    if not (isinstance(inputs, list) and isinstance(all_inputs, list)):
        return
    raise ValueDependentError(str(rec.get("message", "")), [str(n) for n in inputs], [str(n) for n in all_inputs])
