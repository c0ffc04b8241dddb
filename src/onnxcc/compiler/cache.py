"""The artifact cache's compiler side: the key document of a build (model digest, onnxcc
version, options, target machine) and `compile_cached` (compile on a miss only).
The store itself is runtime/cache.py."""

from __future__ import annotations

from pathlib import Path

from ..errors import OnnxccError
from ..ir import Module
from .compile import compile_model
from .options import CompileOptions


def model_digest(model) -> str:
    """sha256 of the model's content (file bytes, serialized proto, or IR text + weights)."""
    import hashlib

    h = hashlib.sha256()
    if isinstance(model, Module):
        h.update(str(model).encode())
        for k in sorted(model.weights):
            h.update(k.encode())
            h.update(model.weights[k].tobytes())
    elif isinstance(model, (str, Path)):
        p = Path(model)
        if not p.is_file():
            raise OnnxccError(f"{p}: no such file")
        h.update(p.read_bytes())
    elif isinstance(model, bytes):
        h.update(model)
    else:
        h.update(model.SerializeToString())
    return h.hexdigest()


def cache_document(model, options: CompileOptions, extra: dict | None = None) -> dict:
    """Everything that changes the build: the cache key is the sha256 of this document."""
    from ..version import __version__
    from ..codegen.cpu import host_cpu

    cpu, feats = host_cpu()
    return {"model": model_digest(model), "onnxcc": __version__, "options": options.cache_key(),
            "triple": options.triple or "host", "cpu": options.cpu or cpu,
            "features": options.features or feats, "extra": extra or {}}


def compile_cached(model, options: CompileOptions | None = None, cache=None, extra: dict | None = None):
    """The artifact directory for (model, options), compiled only on a cache miss.
    Returns (path, hit: bool)."""
    from ..runtime.cache import ArtifactCache, make_key

    options = options or CompileOptions()
    cache = cache if cache is not None else ArtifactCache()
    doc = cache_document(model, options, extra)
    key = make_key(doc)
    hit = cache.lookup(key, doc)
    if hit is not None:
        return hit, True
    if options.name is None and isinstance(model, (str, Path)):
        options = CompileOptions(**{**options.__dict__, "name": Path(model).stem})
    path = cache.store(key, doc, lambda d: compile_model(model, d, options))
    return path, False
