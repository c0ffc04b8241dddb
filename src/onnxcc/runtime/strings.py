"""String tensors across the C ABI, Python side (the ABI itself: NAME.h, codegen/c/strings.py).

In: numpy arrays of str (object arrays of str, or numpy 'U' / 'S' arrays; bytes are read as
UTF-8) become one buffer of NUL-terminated UTF-8 and an array of `const char *` into it,
kept alive for the call. Out: each output element's pointer is read back as a Python str
right after the call, so the library's string arena can be released at once.
"""

from __future__ import annotations

import ctypes

import numpy as np

from onnxcc.errors import GuardError, RuntimeCallError


def as_string_input(name: str, x) -> np.ndarray:
    """Input `name` as a C-contiguous object array of str; anything else a GuardError."""
    a = np.asarray(x, dtype=object) if not isinstance(x, np.ndarray) else x
    if a.dtype.kind not in "OUS":
        raise GuardError(f'input "{name}": expected strings (dtype str), got an array of {a.dtype}')
    out = np.empty(a.shape, dtype=object)
    flat, src = out.reshape(-1), a.reshape(-1)
    for k, v in enumerate(src):
        if isinstance(v, bytes | np.bytes_):
            try:
                v = bytes(v).decode("utf-8")
            except UnicodeDecodeError:
                raise GuardError(f'input "{name}" element {k}: bytes that are not UTF-8') from None
        if not isinstance(v, str):
            raise GuardError(f'input "{name}" element {k}: expected a str, got {type(v).__name__}')
        if "\0" in v:
            raise GuardError(f'input "{name}" element {k}: holds a NUL character, which the C ABI\'s '
                             "NUL-terminated strings cannot carry")
        flat[k] = str(v)
    return out


def encode(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(uint64 pointers in a's shape, the bytes they point into: keep it alive for the call)."""
    parts = [s.encode("utf-8") + b"\0" for s in a.reshape(-1)]
    blob = np.frombuffer(b"".join(parts) or b"\0", dtype=np.uint8).copy()
    starts = np.zeros(len(parts), dtype=np.uint64)
    if parts:
        starts[1:] = np.cumsum([len(p) for p in parts[:-1]], dtype=np.uint64)
    return (starts + np.uint64(blob.ctypes.data)).reshape(a.shape), blob


def decode(name: str, ptrs: np.ndarray, out: np.ndarray) -> None:
    """Read the strings `ptrs` point to into the object array `out`."""
    flat = out.reshape(-1)
    for k, p in enumerate(ptrs.reshape(-1).tolist()):
        if p == 0:
            raise RuntimeCallError(f'output "{name}" element {k} is a NULL pointer', 8)
        try:
            flat[k] = ctypes.string_at(p).decode("utf-8")
        except UnicodeDecodeError:
            raise RuntimeCallError(f'output "{name}" element {k} is not valid UTF-8', 8) from None


__all__ = ["as_string_input", "decode", "encode"]
