"""A content key of a kernel version: two versions with the same key lower to the same code,
so a backend emits, optimises and compiles one and lets the other call it.

Versions often coincide: a divisibility version whose symbol is no vectorised extent (BERT's
`batch % 16 == 0`) schedules every compute as the generic version does. The key is taken
before any LLVM is emitted, over everything a backend's emitter reads of a version: its
program (statements with their schedules, buffers, const values, symbols, run dims) and its
memory plan, the program's own name blanked. It is a walk of the object graph, so a field
added to a statement or a schedule is part of the key without anyone remembering to add it:
dataclasses and plain objects by their type and fields, containers in order, numpy arrays by
dtype, shape and bytes, sympy expressions by `srepr` (assumptions included). An object the
walk does not know (a function, a closure that may hold version-specific data) makes the
version unkeyable (`None`): it is emitted as before. An object met twice is written as a
reference to its first visit, so the key also pins which parts are shared (a shared object
in one version and two equal ones in another give different keys: a missed sharing, never a
false one).
"""

from __future__ import annotations

import dataclasses
import enum
import hashlib

import numpy as np
import sympy


class Unkeyable(Exception):
    """The walk met an object whose content it cannot write down."""


def version_key(program, plan) -> str | None:
    """The content key of (`program`, `plan`) with `program.name` blanked, or None where some
    part of them cannot be keyed."""
    h = hashlib.sha256()
    try:
        _Walk(h, program.name).walk((program, plan))
    except (Unkeyable, RecursionError):
        return None
    return h.hexdigest()


_ATOMS = (bool, int, float, complex, str, bytes, type(None))


class _Walk:
    def __init__(self, h, name: str):
        self.h, self.name = h, name
        self.seen: dict[int, int] = {}
        self.keep: list = []  # the visited objects, alive while their ids are in `seen`

    def put(self, s: str) -> None:
        self.h.update(s.encode())
        self.h.update(b"\0")

    def walk(self, x) -> None:
        if isinstance(x, _ATOMS):
            # the program's name (its LLVM symbol, its metadata labels) is what two equal versions differ by
            self.put("<name>" if x == self.name and isinstance(x, str) else f"{type(x).__name__}:{x!r}")
            return
        k = self.seen.get(id(x))
        if k is not None:
            self.put(f"ref:{k}")
            return
        self.seen[id(x)] = len(self.seen)
        self.keep.append(x)
        if isinstance(x, enum.Enum):
            self.put(f"enum:{type(x).__qualname__}.{x.name}")
        elif isinstance(x, sympy.Basic):
            self.put(f"sympy:{sympy.srepr(x)}")
        elif isinstance(x, np.ndarray):
            self.put(f"array:{x.dtype.str}:{x.shape}")
            self.h.update(np.ascontiguousarray(x).tobytes())
        elif isinstance(x, np.generic):
            self.put(f"npscalar:{x.dtype.str}:{x!r}")
        elif isinstance(x, (list, tuple)):
            self.put(f"{type(x).__name__}:{len(x)}")
            for y in x:
                self.walk(y)
        elif isinstance(x, dict):
            self.put(f"dict:{len(x)}")
            for key, y in x.items():
                self.walk(key)
                self.walk(y)
        elif isinstance(x, (set, frozenset)):
            # iteration order of a set is not its content: atoms only, sorted
            if not all(isinstance(y, _ATOMS) for y in x):
                raise Unkeyable(type(x))
            self.put(f"set:{sorted(map(repr, x))}")
        elif dataclasses.is_dataclass(x) and not isinstance(x, type):
            self.put(f"dc:{type(x).__module__}.{type(x).__qualname__}")
            for f in dataclasses.fields(x):
                self.put(f.name)
                self.walk(getattr(x, f.name))
            extra = _instance_fields(x, {f.name for f in dataclasses.fields(x)})
            for name, y in extra:  # attributes set outside the dataclass fields
                self.put(name)
                self.walk(y)
        elif type(x).__module__.startswith("onnxcc."):
            self.put(f"obj:{type(x).__module__}.{type(x).__qualname__}")
            for name, y in _instance_fields(x, set()):
                self.put(name)
                self.walk(y)
        else:
            raise Unkeyable(type(x))


def _instance_fields(x, skip: set[str]) -> list[tuple[str, object]]:
    """`x`'s instance attributes (its `__dict__` and slots) not in `skip`, sorted by name
    (cached properties included: they are derived from the rest, or they are content)."""
    out = {k: v for k, v in getattr(x, "__dict__", {}).items() if k not in skip}
    for cls in type(x).__mro__:
        for slot in getattr(cls, "__slots__", ()):
            if slot not in skip and slot not in ("__dict__", "__weakref__") and hasattr(x, slot):
                out[slot] = getattr(x, slot)
    return sorted(out.items())


def version_twins(versions) -> dict[int, int]:
    """For each version (a `KernelVersion`, with `program` and `plan`) whose key an earlier
    one has, its index -> the index of the first such version."""
    first: dict[str, int] = {}
    twins: dict[int, int] = {}
    for k, v in enumerate(versions):
        key = version_key(v.program, v.plan)
        if key is None:
            continue
        j = first.setdefault(key, k)
        if j != k:
            twins[k] = j
    return twins
