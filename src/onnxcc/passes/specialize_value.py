"""specialize-value: versions of @main compiled for given VALUES of small inputs.

In a value version the input is a constant: every use of the parameter reads a `cc.const`
holding the value, so shape inference and canonicalize fold what depends on it (a Reshape's
target, Expand's shape, Slice's starts, a Reduce's axes, TopK's K, an If's condition...).
The parameter itself stays (the C signature is the same for every version); the generated
dispatcher compares the input's data with the value before it picks the version
(codegen/c/dispatch.py), so a version only runs on the value it was compiled for.

Options (CLI: `specialize-value{values=shape:2 3 4|sr:16000}`): groups `NAME:V V ...` joined
by `|`, one value each (an empty value is `NAME:`); a name given twice has two values.
Several inputs combine: one version per combination of their values, most specialised
first, ahead of the versions `specialize` made. `value_inputs` finds the inputs whose values
decide a shape the generic version cannot compute (what `onnxcc run` proposes).
"""

from __future__ import annotations

import hashlib
import itertools
import re
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np
import sympy

from ..errors import CompileError, ShapeError
from ..ir import Function, Module
from ..ir.clone import clone_function
from ..ir.types import TensorType
from .base import ModulePass, PassContext, register_pass
from .canonicalize import canonicalize, new_const
from .shape_inference import infer_function_constraints

#: an input whose value may be specialised: at most this many elements, rank at most 1
MAX_VALUE_ELEMENTS = 64


def parse_value_text(text: str) -> dict[str, list[list]]:
    """'shape:2 3 4|sr:16000|shape:1 24' -> {'shape': [[2, 3, 4], [1, 24]], 'sr': [[16000]]}."""
    out: dict[str, list[list]] = {}
    for group in filter(None, (g.strip() for g in text.split("|"))):
        name, sep, vals = group.partition(":")
        if not sep or not name.strip():
            raise CompileError(f"specialize-value: expected NAME:V V ... in {group!r}")
        try:
            value = [_parse_number(x) for x in vals.split()]
        except ValueError:
            raise CompileError(f"specialize-value: values must be numbers in {group!r}") from None
        out.setdefault(name.strip(), []).append(value)
    return out


def _parse_number(x: str):
    low = x.lower()
    if low in ("true", "false"):
        return int(low == "true")
    try:
        return int(x)
    except ValueError:
        return float(x)


#: typed pass option: (input name, (value, ...)) pairs, each value a flat tuple of numbers
ValueSpecs = tuple[tuple[str, tuple[tuple, ...]], ...]


def value_specs(values: dict[str, list[list]]) -> ValueSpecs:
    """CompileOptions.specialize_value -> the pass option."""
    return tuple((name, tuple(tuple(v) for v in vals)) for name, vals in values.items())


def parse_value_specs(text: str) -> ValueSpecs:
    return value_specs(parse_value_text(text))


def format_value_text(values: dict[str, list[list]]) -> str:
    """The inverse of parse_value_text (CompileOptions.specialize_value -> the pass option)."""
    return "|".join(f"{name}:{' '.join(repr(x) for x in v)}" for name, vals in values.items() for v in vals)


def value_text(value: np.ndarray) -> str:
    """`16000` for a scalar, `[2, 3, 4]` for a 1-D value: how guards and messages show it."""
    items = [repr(x) if isinstance(x, float) else str(x) for x in value.reshape(-1).tolist()]
    return items[0] if value.ndim == 0 else "[" + ", ".join(items) + "]"


def value_array(f: Function, name: str, value: list) -> tuple[int, np.ndarray, dict]:
    """(parameter index, the value as an array of the input's dtype and shape, the symbol
    substitution a 1-D input of symbolic length needs) for input `name` of `f`."""
    names = [p.name for p in f.params]
    if name not in names:
        raise CompileError(f"--specialize-value {name}: the model has no input {name!r} (inputs: {', '.join(names)})")
    k = names.index(name)
    t = f.params[k].type
    where = f"--specialize-value {name}={','.join(map(str, value))}"
    if t.rank > 1 and not t.is_static:
        raise CompileError(f"{where}: input {name!r} is {t}; value versions take scalars, 1-D or static inputs")
    if t.dtype.bits < 8:  # packed in memory: the guard's byte compare would not see elements
        raise CompileError(f"{where}: input {name!r} is {t}; value versions do not take {t.dtype.value} inputs")
    subs: dict = {}
    shape = list(t.shape)
    if t.rank == 1 and not isinstance(shape[0], int):
        d = shape[0]
        if not isinstance(d, sympy.Symbol):
            raise CompileError(f"{where}: input {name!r} is {t}; its length must be a number or a symbol")
        subs[d] = len(value)
        shape = [len(value)]
    n = int(np.prod(shape)) if shape else 1
    if len(value) != n:
        raise CompileError(f"{where}: input {name!r} is {t} ({n} element{'s' if n != 1 else ''}), "
                          f"the value has {len(value)}")
    dt = t.dtype.np
    arr = np.array(value, dtype=np.float64 if any(isinstance(x, float) for x in value) else np.int64)
    cast = arr.astype(dt)
    if not np.array_equal(cast.astype(arr.dtype), arr, equal_nan=True) and arr.size:
        raise CompileError(f"{where}: not representable as {t.dtype.value} (input {name!r} is {t})")
    return k, cast.reshape(shape), subs


def _tag(items: list[tuple[str, np.ndarray]]) -> str:
    def clean(s: str) -> str:
        return re.sub(r"[^A-Za-z0-9]+", "_", s.replace("-", "m").replace(".", "p")).strip("_")

    tag = "__".join(clean(n) + "_" + "_".join(clean(str(x)) for x in a.reshape(-1).tolist()) for n, a in items)
    if len(tag) > 40:
        digest = hashlib.sha256(repr([(n, a.tolist()) for n, a in items]).encode()).hexdigest()[:10]
        tag = f"{clean(items[0][0])[:20]}_{digest}"
    return "val_" + tag


def guard_text(name: str, value: np.ndarray) -> str:
    return f"{name} == {value_text(value)}"


def value_version(module: Module, generic: Function, items: list[tuple[str, list]]) -> Function:
    """A clone of `generic` with each (input, value) of `items` a constant, re-inferred; its
    guard holds the constraints its shapes need (the value itself is attrs["value_guard"])."""
    arrays, subs, consts = [], {}, []
    for name, value in items:
        k, arr, s = value_array(generic, name, value)
        arrays.append((name, arr))
        subs.update(s)
        consts.append((k, arr))
    v = clone_function(generic, f"main.{_tag(arrays)}", subs)
    for k, arr in consts:
        p = v.params[k]
        op = new_const(TensorType(p.type.dtype, arr.shape), arr, loc=f"value of input {p.name}", name=f"{p.name}_value")
        body_ops = v.body.ops
        if body_ops:
            v.body.insert_before(body_ops[0], op)
        else:
            v.body.append(op)
        p.replace_all_uses_with(op.result)
    v.attrs["kind"] = "value"
    # a @main the importer already built for some values (a sequence's structure) keeps them
    v.attrs["value_guard"] = [*generic.attrs.get("value_guard", []),
                              *(format_value_text({n: [a.reshape(-1).tolist()]}) for n, a in arrays)]
    # the generic function's own guard stays (split-if's: its body was folded for it)
    v.guard = sympy.And(generic.guard, *[sympy.Eq(s, n) for s, n in subs.items()])
    return v


def value_guards_of(f: Function) -> list[tuple[str, list]]:
    """[(input name, flat value)] of a value version (empty for the others)."""
    out = []
    for text in f.attrs.get("value_guard", []):
        for name, vals in parse_value_text(text).items():
            out += [(name, v) for v in vals]
    return out


@register_pass
@dataclass(frozen=True)
class SpecializeValuePass(ModulePass):
    """Value versions of @main ahead of the others: one per combination of the given values."""

    name: ClassVar[str] = "specialize-value"
    #: (input, (value, ...)) pairs, each value a flat tuple of numbers; a textual pipeline
    #: spells it `specialize-value{values="shape:2 3 4|sr:16000"}`, parsed once
    values: ValueSpecs = field(default=(), metadata={"parse": parse_value_specs})
    max_versions: int = 64

    def run(self, module: Module, ctx: PassContext) -> bool:
        specs = {name: [list(v) for v in vals] for name, vals in self.values}
        order = module.dispatch.get("main")
        if not specs or not order:
            return False
        generic = module.functions[order[-1]]
        combos = list(itertools.product(*[[(n, v) for v in vals] for n, vals in specs.items()]))
        if len(combos) > self.max_versions:
            raise CompileError(f"--specialize-value: {len(combos)} combinations of values, more than "
                              f"{self.max_versions} versions")
        made = []
        for items in combos:
            v = value_version(module, generic, list(items))
            if v.name in module.functions:
                continue
            module.add_function(v)
            made.append(v)
        # fold what the constants decide (shape chains, Reshape targets, If conditions...)
        canonicalize(module)
        for v in made:
            try:
                needs = infer_function_constraints(module, v)
            except ShapeError as e:
                shown = ", ".join(f"{n}={','.join(map(str, x))}" for n, x in value_guards_of(v))
                raise CompileError(f"--specialize-value {shown}: {e}") from None
            v.guard = sympy.And(v.guard, *[n.expr for n in needs])
        module.dispatch["main"] = [v.name for v in made] + list(order)
        return True


def small_inputs(f: Function) -> list[int]:
    """Parameters whose value a version could be specialised on: rank <= 1, few elements."""
    out = []
    for k, p in enumerate(f.params):
        t = p.type
        if t.rank == 0 or (t.rank == 1 and (not isinstance(t.shape[0], int) or t.shape[0] <= MAX_VALUE_ELEMENTS)):
            out.append(k)
    return out


def unbound_symbols(f: Function) -> set[str]:
    """Symbols in f's result types that no parameter's shape binds (data-dependent dims)."""
    bound = ({s.name for p in f.params for s in p.type.symbols()} | {str(k) for k in f.subs}
             | {item.partition("=")[0] for item in f.attrs.get("value_symbols", [])})
    found = set()
    for op in f.walk():
        for r in op.results:
            found |= {s.name for s in r.type.symbols() if s.name not in bound}
    return found


def _reaches(f: Function, k: int) -> set[int]:
    """ids of the ops the value of parameter k flows into (transitively)."""
    live = {id(f.params[k])}
    hit: set[int] = set()
    for op in f.walk():
        if any(id(x) in live for x in op.operands):
            hit.add(id(op))
            live |= {id(r) for r in op.results}
    return hit


def value_inputs(module: Module, f: Function) -> list[str]:
    """The small inputs (scalars, short 1-D) whose values flow into an op with a
    data-dependent result dim: the inputs a value version folds so the shapes become known.
    May name more than needed (a Pad's scalar constant_value with its pads), never fewer of
    those that reach it."""
    bad = unbound_symbols(f)
    culprits = {id(op) for op in f.walk() if any(s.name in bad for r in op.results for s in r.type.symbols())}
    # an If typed as one branch for now (ranks differ on a condition from data), and the ops
    # around it: the captures that reach its condition flow into those
    for op in f.walk():
        if op.name == "onnx.If" and op.attrs.get("typed_as") is not None:
            while op is not None:
                culprits.add(id(op))
                region = op.parent.parent if op.parent is not None else None
                op = region.parent if region is not None else None
    if not culprits:
        return []
    cands = [k for k in small_inputs(f) if _reaches(f, k) & culprits]
    return [f.params[k].name for k in cands]
