"""The artifact side of value versions (passes/specialize_value.py): each version's value
guards as bytes for the dispatcher, the output signature when the generic version could not
be built (an output dim the value decides becomes a version-determined symbol), and the
refusal that names the inputs a data-dependent shape needs."""

from __future__ import annotations

import sympy

from ..errors import CompileError, DimDependentError, ValueDependentError
from ..ir import Function, Module, canon
from ..ir.dims import SymbolInfo
from ..ir.printer import print_bool
from ..passes.specialize_value import (
    MAX_VALUE_ELEMENTS,
    guard_text,
    value_array,
    value_guards_of,
    value_inputs,
    value_text,
)


def generic_function(module: Module, kmod) -> Function:
    """The generic version of @main (built or dropped)."""
    for f in module.functions.values():
        if f.attrs.get("kind") == "generic":
            return f
    return kmod.versions[-1].function


def value_guards(module: Module, generic: Function, f: Function) -> list:
    """The ValueGuards of version f (none unless it is a value version)."""
    from ..codegen.c.abi import ValueGuard

    out = []
    for name, value in value_guards_of(f):
        k, arr, _ = value_array(generic, name, value)
        out.append(ValueGuard(k, name, int(arr.size), arr.tobytes(), value_text(arr)))
    return out


def version_guard_text(f: Function) -> str:
    """The guard for people: the symbolic part and the values, joined by `&`."""
    parts = [guard_text(n, _as_array(f, n, v)) for n, v in value_guards_of(f)]
    sym_part = print_bool(f.guard)
    if sym_part != "true" or not parts:
        parts.append(sym_part)
    return " & ".join(parts)


def _as_array(f: Function, name: str, value: list):
    return value_array(f, name, value)[1]


def output_signature(module: Module, kmod, generic: Function, out_names: list[str]):
    """(output shapes, extra SymbolInfos, version_dims) of an artifact whose versions are
    kmod's. With the generic version built, its result types as they are; without it, a dim
    every version agrees on (over input symbols) stays, any other becomes a symbol the
    dispatcher sets per version."""
    versions = [v.function for v in kmod.versions]
    n = len(versions)
    bound = ({s.name for p in generic.params for s in p.type.symbols()}
             | {item.partition("=")[0] for item in generic.attrs.get("value_symbols", [])})
    built_generic = any(f is generic for f in versions)
    run_dims = set(kmod.versions[-1].program.run_dims)
    shapes: list[tuple] = []
    extra: list[SymbolInfo] = []
    vdims: dict[str, list] = {}
    taken = {s.name for s in module.symbols}
    for j, gt in enumerate(generic.result_types):
        shape = []
        for i, g in enumerate(gt.shape):
            g = canon(g)
            per = []
            for f in versions:
                t = f.result_types[j]
                if t.rank != gt.rank:
                    raise CompileError(f'output "{out_names[j]}": its rank depends on the value of an input '
                                       f"({gt} in the generic version, {t} in {f.name}); not compiled yet")
                per.append(canon(t.shape[i]))
            free = {s.name for s in sympy.sympify(g).free_symbols}
            if built_generic and not (free & run_dims and any(f.attrs.get("kind") == "value" for f in versions)):
                shape.append(g if _agrees(g, versions, per) else
                             _max_over_versions(g, versions, per, out_names[j], i, _strict_equalities(module)))
                continue
            if not built_generic and all(p == per[0] for p in per) and \
                    {s.name for s in sympy.sympify(per[0]).free_symbols} <= bound:
                shape.append(per[0])
                continue
            for f, p in zip(versions, per):
                if f is not generic and {s.name for s in sympy.sympify(p).free_symbols} - bound:
                    raise CompileError(f'output "{out_names[j]}" dim {i}: {p} in version {f.name} is not known '
                                       "from the input shapes; not compiled yet")
            if isinstance(g, sympy.Symbol) and g.name not in vdims and g.name not in bound:
                name = g.name
            elif built_generic:
                raise CompileError(f'output "{out_names[j]}" dim {i}: {g} is known only after the run in the '
                                   "generic version and fixed in a value version; not compiled yet")
            else:
                name = _fresh(f"{out_names[j]}_d{i}", taken)
                extra.append(SymbolInfo(name, 0, 2**31 - 1, 1, f'output "{out_names[j]}" dim {i}, '
                                        "fixed by the value version"))
            taken.add(name)
            vdims[name] = [None if f is generic else p for f, p in zip(versions, per)]
            shape.append(sympy.Symbol(name, integer=True, positive=True))
        shapes.append(tuple(shape))
    if not built_generic:  # symbols the dropped generic version left unbound: set, unused, to 0
        for s in module.symbols:
            if s.name not in bound and s.name not in vdims and s.name not in run_dims:
                vdims[s.name] = [0] * n
    return shapes, extra, vdims


def _equalities(f: Function, strict: tuple = ()) -> dict:
    """The substitution a version's guard implies: its `SYM == expr` terms, then the module's
    strict `SYM == SYM` constraints (`strict`), which hold wherever any version runs."""
    out = {}
    for a in [*sympy.And.make_args(f.guard), *strict]:
        if isinstance(a, sympy.Eq) and isinstance(a.lhs, sympy.Symbol) and a.lhs not in out:
            out[a.lhs] = a.rhs
        elif isinstance(a, sympy.Eq) and isinstance(a.rhs, sympy.Symbol) and a.rhs not in out:
            out[a.rhs] = a.lhs
    return out


def _strict_equalities(module: Module) -> tuple:
    return tuple(c.expr for c in module.constraints if isinstance(c.expr, sympy.Eq)
                 and isinstance(c.expr.lhs, sympy.Symbol) and isinstance(c.expr.rhs, sympy.Symbol))


def _settle(e, eqs: dict):
    """`e` with `eqs` applied until nothing changes (a guard's `N == 1` after a constraint's
    `K == N`); a few rounds at most, since each substitution only renames toward constants."""
    e = sympy.sympify(e)
    for _ in range(4):
        nxt = e.subs(eqs)
        if nxt == e:
            break
        e = nxt
    return e


def _same_under(f: Function, a, b, strict: tuple = ()) -> bool:
    """Whether dims `a` (over the generic's symbols) and `b` (version f's) agree where f runs."""
    eqs = _equalities(f, strict)
    a = _settle(sympy.sympify(a).subs(f.subs), eqs)
    return canon(a) == canon(_settle(b, eqs))


def _agrees(g, versions: list[Function], per: list, strict: tuple = ()) -> bool:
    return all(_same_under(f, g, p, strict) for f, p in zip(versions, per, strict=True))


def _max_over_versions(g, versions: list[Function], per: list, out_name: str, axis: int, strict: tuple = ()):
    """An output dim versions type differently: `x[N] + y[K]` is `N` in the generic version
    (guarded by N == K) and `K` in the N == 1 one. Their max is each version's dim where it
    runs (checked per version, with the module's strict equalities: specialize's `N == 1`
    version of a pair broadcast-versions left strict types it `K`, which is 1 there too);
    anything else is refused rather than guessed."""
    cand = sympy.Max(g, *per)
    if _agrees(cand, versions, per, strict):
        return cand
    shown = ", ".join(f"{p} in {f.name}" for f, p in zip(versions, per, strict=True))
    raise CompileError(f'output "{out_name}" dim {axis}: the versions give it differently ({shown}) '
                       "and no one expression covers them; not compiled yet")


def _fresh(base: str, taken: set[str]) -> str:
    import re

    name = re.sub(r"[^A-Za-z0-9_]", "_", base)
    if not name or not (name[0].isalpha() or name[0] == "_"):
        name = "d_" + name
    k, out = 1, name
    while out in taken:
        out = f"{name}_{k}"
        k += 1
    return out


#: what the refusals of a shape known only from data say (passes/lower.py, the ops' lowerings)
_DATA_DEPENDENT = ("depends on data", "known only at run time", "must be known at compile time")


def refuse_value_dependent(e: Exception, module: Module) -> Exception:
    """A "depends on data" refusal, re-worded when the shapes depend on input values that a
    value version would fold: names the inputs and suggests --specialize-value."""
    generic = next((f for f in module.functions.values() if f.attrs.get("kind") == "generic"),
                   module.functions.get("main"))
    if generic is None or not any(w in str(e) for w in _DATA_DEPENDENT):
        return e
    names = value_inputs(module, generic)
    if not names:
        return e
    flags = " ".join(f"--specialize-value {n}=V" for n in names)
    which = ", ".join(f'"{n}"' for n in names)
    head = str(e).split(" depends on data", 1)[0] if "depends on data" in str(e) else f"{e};"
    return ValueDependentError(
        f"{head} depends on the value of input{'s' if len(names) > 1 else ''} {which}: compile versions for "
        f"given values with {flags} (onnxcc run --inputs does it from the inputs it is given)", names,
        [p.name for p in generic.params])


def with_values(options, names: list[str], feeds: dict):
    """`options` plus value versions for the values `feeds` holds for inputs `names` (what
    `onnxcc run` and the Session propose when the generic build is refused)."""
    from dataclasses import replace

    import numpy as np

    missing = [n for n in names if n not in feeds]
    if missing:
        raise CompileError(f"the shapes depend on the value of input(s) {', '.join(missing)}, which the "
                           "inputs given do not hold")
    values = dict(options.specialize_value)
    problems = {}
    for n in names:
        v = np.asarray(feeds[n])
        if v.ndim > 1 or v.size > MAX_VALUE_ELEMENTS:
            problems[n] = (f'the shapes depend on the value of input "{n}" ({v.dtype}{list(v.shape)}), too large '
                           f"for a value version (at most {MAX_VALUE_ELEMENTS} elements, rank <= 1)")
        elif not (v.dtype.kind in "biuf" or _ml_number(v.dtype)):
            problems[n] = (f'the shapes depend on the value of input "{n}", whose dtype {v.dtype} a value '
                           "version cannot hold")
    if len(problems) == len(names):
        raise CompileError(next(iter(problems.values())))
    # the analysis may name an input that reaches the op without deciding its shape (OneHot's
    # values beside its depth): specialise on the others; if one was needed, the build says so
    for n in names:
        if n in problems:
            continue
        value = np.asarray(feeds[n]).reshape(-1)
        value = (value.astype(np.float64) if _ml_number(value.dtype) else value).tolist()
        values[n] = [*(x for x in values.get(n, []) if x != value), value]
    return replace(options, specialize_value=values)


def _ml_number(dt) -> bool:
    """bf16 and the small types: ml_dtypes' numbers, which numpy sees as kind "V"."""
    return getattr(dt.type, "__module__", "").startswith("ml_dtypes")


def values_flag(options, names: list[str]) -> str:
    """`--specialize-value shape=2,3,4 --specialize-value sr=16000` for the values of `names`."""
    def one(v):
        return ",".join(str(x) for x in v)

    return " ".join(f"--specialize-value {n}={';'.join(one(v) for v in options.specialize_value[n])}"
                    for n in names if n in options.specialize_value)


def build_for_inputs(build, options, feeds_for, note=None):
    """`build(options)`; when that is refused because shapes depend on some inputs' values,
    `build` again with value versions for the values `feeds_for(input names)` gives (None:
    re-raise), saying so through `note(line)`. The path `onnxcc run --inputs`, the Session
    and the conformance harness share."""
    try:
        return build(options)
    except DimDependentError as e:  # a sequence's length hangs on an input dim: build for the one given
        feeds = feeds_for(e.all_inputs)
        if feeds is None:
            raise
        options = with_dims(options, e, feeds)
        if note is not None:
            note("onnxcc: a sequence's length depends on " + ", ".join(
                f'input "{i}" dim {a}' for i, a, _ in e.dims) + ": specialising on the dims given (" +
                " ".join(f"--specialize {s}={options.specialize[s][0]}" for _, _, s in e.dims) + ")")
        return build_for_inputs(build, options, feeds_for, note)
    except ValueDependentError as e:
        feeds = feeds_for(e.all_inputs)
        if feeds is None:
            raise
        options = with_values(options, e.inputs, feeds)
        if note is not None:
            used = [n for n in e.inputs if n in options.specialize_value]
            which = ", ".join(f'"{n}"' for n in used)
            note(f"onnxcc: shapes depend on the value of input{'s' if len(used) > 1 else ''} {which}: "
                 f"specialising on the values given ({values_flag(options, e.inputs)})")
        return build(options)


def with_dims(options, e: DimDependentError, feeds: dict):
    """`options` with an exact version for each dim `e` names, at its size in `feeds`."""
    from dataclasses import replace

    import numpy as np

    spec = dict(options.specialize)
    for name, axis, symbol in e.dims:
        if name not in feeds or np.ndim(feeds[name]) <= axis:
            raise e
        v = int(np.shape(feeds[name])[axis])
        if spec.get(symbol) == [v]:
            raise e  # already built for it: not what stops this build
        spec[symbol] = [v]
    return replace(options, specialize=spec)
