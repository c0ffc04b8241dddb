"""The Python side of built artifacts; imports nothing of the compiler."""

from .loader import CompiledModel, load

__all__ = ["CompiledModel", "load"]
