"""A content key of a kernel version: two versions with the same key lower to the same code,
so a backend emits, optimises and compiles one and lets the other call it.

Versions often coincide: a divisibility version whose symbol is no vectorised extent (BERT's
`batch % 16 == 0`) schedules every compute as the generic version does. The key is taken
before any LLVM is emitted, over everything a backend's emitter reads of a version: its
program (statements with their schedules, buffers, const values, symbols, run dims) and its
memory plan, the program's own name blanked. It is a walk of the object graph, so a field
added to a statement or a schedule is part of the key without anyone remembering to add it:
dataclasses and plain objects by their type and fields, containers in order, numpy arrays by
dtype, shape and a digest of their bytes, sympy expressions as themselves (sympy's equality is
structural, assumptions included; printing them was 90% of the walk). An object the
walk does not know (a function, a closure that may hold version-specific data) makes the
version unkeyable (`None`): it is emitted as before. An object met twice is written as a
reference to its first visit, so the key also pins which parts are shared (a shared object
in one version and two equal ones in another give different keys: a missed sharing, never a
false one).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import struct
from collections import Counter
from typing import Any

import numpy as np
import sympy


class Unkeyable(Exception):
    """The walk met an object whose content it cannot write down."""


def version_key(program, plan, digests: dict[int, tuple] | None = None) -> tuple | None:
    """The content key of (`program`, `plan`) with `program.name` blanked (a flat tuple to
    compare and hash), or None where some part of them cannot be keyed. `digests` memoises
    arrays' digests by identity across calls (versions share their weight arrays); its
    caller keeps the arrays alive."""
    walk = _Walk(program.name, {} if digests is None else digests)
    try:
        walk.walk((program, plan))
    except (Unkeyable, RecursionError):
        return None
    return tuple(walk.out)


_ATOMS = (bool, int, float, complex, str, bytes, type(None))


_NAME = ("<the program's name>",)


class _Walk:
    def __init__(self, name: str, digests: dict[int, tuple]):
        self.name, self.digests = name, digests
        self.out: list[Any] = []
        self.seen: dict[int, int] = {}
        self.keep: list = []  # the visited objects, alive while their ids are in `seen`

    def put(self, s: Any) -> None:
        self.out.append(s)

    def walk(self, x) -> None:
        if isinstance(x, _ATOMS):
            # the program's name (its LLVM symbol, its metadata labels) is what two equal
            # versions differ by
            self.out.append(_NAME if isinstance(x, str) and x == self.name else _atom(x))
            return
        k = self.seen.get(id(x))
        if k is not None:
            self.put(("ref", k))
            return
        self.seen[id(x)] = len(self.seen)
        self.keep.append(x)
        if isinstance(x, enum.Enum):
            self.put((type(x), x.name))
        elif isinstance(x, sympy.Basic):
            self.put(x)
        elif isinstance(x, np.ndarray):
            d = self.digests.get(id(x))
            if d is None:
                digest = hashlib.sha256(np.ascontiguousarray(x).tobytes()).digest()
                d = self.digests[id(x)] = (x.dtype.str, x.shape, digest)
            self.put(("array", *d))
        elif isinstance(x, np.generic):
            self.put(("npscalar", x.dtype.str, x.tobytes()))
        elif isinstance(x, (list, tuple)):
            self.put((type(x), len(x)))
            for y in x:
                self.walk(y)
        elif isinstance(x, dict):
            self.put((dict, len(x)))
            for key, y in x.items():
                self.walk(key)
                self.walk(y)
        elif isinstance(x, (set, frozenset)):
            # iteration order of a set is not its content: atoms only, sorted
            if not all(isinstance(y, _ATOMS) for y in x):
                raise Unkeyable(type(x))
            self.put((frozenset, frozenset(map(_atom, x))))
        elif type(x).__module__.startswith("onnxcc.") or (dataclasses.is_dataclass(x) and not isinstance(x, type)):
            # a dataclass's fields and any attribute set outside them, in their order
            self.put(type(x))
            d = getattr(x, "__dict__", None)
            if d is not None:
                self.put((dict, len(d)))
                for name, y in d.items():
                    self.put(name)
                    self.walk(y)
            for name in _slots(type(x)):
                if hasattr(x, name):
                    self.put(name)
                    self.walk(getattr(x, name))
                else:
                    self.put(("unset", name))
        else:
            raise Unkeyable(type(x))


def _atom(x) -> tuple:
    """An atom as a comparable value: with its type, since 1 == 1.0 == True; a float by its
    bits, since -0.0 == 0.0 and nan != nan."""
    if isinstance(x, float):
        return (float, struct.pack("<d", x))
    if isinstance(x, complex):
        return (complex, struct.pack("<dd", x.real, x.imag))
    return (type(x), x)


@functools.cache
def _slots(cls: type) -> tuple[str, ...]:
    return tuple(n for c in cls.__mro__ for n in getattr(c, "__slots__", ()) if n not in ("__dict__", "__weakref__"))


def version_twins(versions) -> dict[int, int]:
    """For each version (a `KernelVersion`, with `program` and `plan`) whose key an earlier
    one has, its index -> the index of the first such version."""
    twins: dict[int, int] = {}
    if len(versions) < 2:
        return twins
    # the whole walk only for versions whose outline (buffers and their shapes, statement
    # count, workspace size) another one shares: most versions differ there already
    outlines = Counter(_outline(v) for v in versions)
    first: dict[tuple, int] = {}
    digests: dict[int, tuple] = {}  # the arrays stay alive in the versions
    for k, v in enumerate(versions):
        if outlines[_outline(v)] < 2:
            continue
        key = version_key(v.program, v.plan, digests)
        if key is None:
            continue
        j = first.setdefault(key, k)
        if j != k:
            twins[k] = j
    return twins


def _outline(v) -> tuple:
    p = v.program
    return (len(p.body), tuple((n, b.kind, b.shape) for n, b in p.buffers.items()),
            None if v.plan is None else v.plan.workspace_bytes)
