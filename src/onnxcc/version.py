"""onnxcc's version (one copy: the package, the CLI and the artifacts read it from here)."""

__version__ = "0.1.0"
