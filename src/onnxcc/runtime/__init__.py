"""The Python side of built artifacts; imports nothing of the compiler."""

from .loader import ArtifactError, CompiledModel, load

__all__ = ["ArtifactError", "CompiledModel", "load"]
