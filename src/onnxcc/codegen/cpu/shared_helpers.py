"""Shared helpers compiled once per library: the `noinline` helpers (GEMM micro-kernels,
GEMV and int8 kernels) that every version module, and every part of a split version, would
otherwise carry as its own internal copy for LLVM to optimise and compile again.

A bert export's five versions held the same 12x32 micro-kernels three times (a third of
each version's instructions), a conv net's two parts of one version each its own copy of
every window micro-kernel. The helpers are emitted per module and named by everything their
code depends on (rows, tile width, A and B modes, the epilogue's hash, the vector width), so
equal names mean equal code (the emitters already rely on it: a helper is looked up by name
in its module); their shapes (types, instructions per block) are compared anyway, and a
helper whose copies differ stays where it is. A shared helper moves, under the build's prefix (unique per library and
per CPU level of a multi-ISA build) and `hidden` linkage, into one module of its own; each
version module keeps a declaration. It is never inlined (`noinline`), so its callers'
code is what it was; only LLVM's interprocedural view of it is lost (a constant argument
propagated into an internal function's body). A helper takes along the inlinable
functions it calls (`_units`): the LLVM-defined runtime calls (`gemm_call.py` `define_entry`,
`chan_pool.py`) move with their task bodies, so a version's entry that calls them keeps
no compute of its own and is compiled as control code (`split.control_only`; squeezenet's
entry inlined 26 conv calls' set-up and took 0.5 s of -O3).

A helper whose emitter goes through `emit_once` (the GEMM micro-kernels) is built only in
the first module of a build that asks for it (`HelpersOnce`): a later module gets the same
declaration, with no body, and `shared_modules` points it at the shared definition, as it
would a copy (a fifth of a two-version conv net's emission was its micro-kernels again).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from contextvars import ContextVar

from llvmlite import ir


class HelpersOnce:
    """The helpers one build emits once (`emit_once`), while entered (`with once: ...`, around
    each version's emission): the first definition of each name, and the declarations that
    later modules hold instead, each with what would define it there."""

    def __init__(self) -> None:
        self.first: dict[str, ir.Function] = {}
        self.later: list[tuple[ir.Function, ir.Function, Callable[[], None]]] = []  # (declaration, first, define)
        self._tokens: list = []

    def __enter__(self) -> HelpersOnce:
        self._tokens.append(_ONCE.set(self))
        return self

    def __exit__(self, *exc) -> None:
        _ONCE.reset(self._tokens.pop())


_ONCE: ContextVar[HelpersOnce | None] = ContextVar("onnxcc_helpers_once", default=None)


def emit_once(fn: ir.Function, define: Callable[[], None]) -> None:
    """Define helper `fn`, just declared (its prototype, attributes and the declarations its
    body uses, as a full definition has them) by calling `define`, unless a `HelpersOnce` is
    entered and an earlier module of it defined a helper of the same name (equal names, equal
    code): then `fn` stays a declaration for `shared_modules`, which defines it after all
    where that first definition is not shared."""
    once = _ONCE.get()
    first = once.first.get(fn.name) if once is not None else None
    if once is None or first is None or first.module is fn.module:
        if once is not None:
            once.first.setdefault(fn.name, fn)
        define()
        return
    once.later.append((fn, first, define))


def _own(fn: ir.Function, prefix: str) -> bool:
    """A defined function that is not one of version `prefix`'s own and names no metadata
    (the module's numbering is its own)."""
    if not fn.blocks or fn.name == prefix or fn.name.startswith(prefix + ".") or getattr(fn, "metadata", None):
        return False
    for block in fn.blocks:
        for ins in block.instructions:
            if getattr(ins, "metadata", None):
                return False
            for op in getattr(ins, "operands", ()):
                if isinstance(op, (ir.MetaDataArgument, ir.MDValue)):
                    return False
    return True


def _units(module: ir.Module, prefix: str) -> dict[str, list[ir.Function]]:
    """The shareable units of `module`, by their root's name: a never-inlined helper (the
    root) with the inlinable functions it reaches (a runtime call's entry, `gemm_call.py`
    `define_entry`, with its task body). Every function of a unit is `_own`; the
    never-inlined helpers a unit calls are units of their own, which `share_helpers` must
    share too."""
    out = {}
    for root in module.functions:
        if "noinline" not in root.attributes or not _own(root, prefix):
            continue
        unit, todo = [root], [root]
        while todo:
            for g in _callees(todo.pop()):
                if g.blocks and "noinline" not in g.attributes and g not in unit:  # else: a unit of its own
                    unit.append(g)
                    todo.append(g)
        if all(_own(g, prefix) for g in unit[1:]):
            out[root.name] = unit
    return out


def share_helpers(versions: list[tuple[ir.Module, str]], name: str) -> str | None:
    """`shared_modules` with every helper in one module (None: nothing to share)."""
    modules = shared_modules(versions, name)
    return modules[0][0] if modules else None


def kernel_family(old: str) -> str | None:
    """The family of shared helper `old` (its name before the move) when it is one of
    gemm_ukr.py's micro-kernels (named `onnxcc.gemm.ukr.ROWSxNR.MODE.vVL`): its name less the
    row count, so a tile's row variants share a module. Hand-written vector code, compiled with
    the short pipeline (llvm/target.py `KERNEL`); None for every other helper (the conv and
    pool calls' task bodies, gemm_implicit.py's and the GEMV and int8 kernels), which the short
    pipeline left slower."""
    m = _UKR.fullmatch(old)
    return f"{m.group(1)}{m.group(2)}" if m else None


_UKR = re.compile(r"(onnxcc\.gemm\.ukr\.)\d+x(\d+\..+)")


def shared_modules(versions: list[tuple[ir.Module, str]], name: str,
                   group: Callable[[str], str | None] = lambda old: None,
                   group_name: str | None = None, once: HelpersOnce | None = None) -> list[tuple[str, str | None]]:
    """Move the helpers shareable across `versions` ((module, version prefix) pairs) into
    modules of their own, returned as (LLVM IR text, group) pairs: the helpers `group` (given
    a helper's name before the move) maps to None in one module, first, the others in one
    module per group key ([]: nothing to share); in each version module the
    helper becomes a `hidden` declaration named `name.HELPER` (`group_name.HELPER` for a
    grouped one when given: a name no library's own, so the group's module prints alike in
    every library built for the same target and the object cache serves it across them;
    whoever passes it makes it unique per target, for a multi-ISA library's levels). The inlinable functions of its
    unit are copied, internal and under their names, into the shared module: a version
    function may call them too (an `alwaysinline` vector-math helper), and the version's copy,
    unused otherwise, is dropped by the split or by LLVM. The modules are changed in place,
    before anything else prints them (llvmlite caches printed names: a caller printed
    earlier would keep calling the old name, and the link would fail) and before they are
    split (a declaration is not copied into every part). The declarations `once` left in
    later modules (`emit_once`) move with their first definition, named and declared as its
    copies are; where it is not shared they are defined after all."""
    found: dict[str, list[list[ir.Function]]] = {}  # root name -> the unit's copies, one per module
    for module, prefix in versions:
        for root, unit in _units(module, prefix).items():
            found.setdefault(root, []).append(unit)
    # (its name before the move, the declaration, the first definition, what defines it here)
    later = [(decl.name, decl, first, define) for decl, first, define in (once.later if once is not None else ())]
    borrowed: dict[str, list[ir.Function]] = {}  # root name -> the declarations standing for copies
    for old, decl, _, _ in later:
        borrowed.setdefault(old, []).append(decl)
    real = {id(decl): first for _, decl, first, _ in later}  # the copy each stands for, as a callee
    ok: dict[str, list[list[ir.Function]]] = {}
    for old, copies in found.items():
        # renamed before printed: the name is cached by the first print
        new = f"{group_name if group_name and group(old) is not None else name}.{old}"
        if all(_rename(fn, new) for fn in [*(unit[0] for unit in copies), *borrowed.get(old, ())]):
            # the shape (types, instructions per block), not the text: printing every copy of
            # every micro-kernel cost more Python time than it saved (bert: 15% of the emission)
            if len({tuple(map(_shape, unit)) for unit in copies}) == 1:
                ok[old] = copies
            # copies that differ (or name metadata) stay internal, each in its module
        # (else printed before, it prints as it did: not shared)
    # a unit calling a never-inlined helper that is not shared stays too (until none does)
    while True:
        drop = [old for old, copies in ok.items()
                if any(g.blocks and "noinline" in g.attributes and g.name.removeprefix(f"{name}.") not in ok
                       for fn in copies[0] for g in _callees(fn, real))]
        if not drop:
            break
        for old in drop:
            del ok[old]
    moved = []  # (declaration, first definition) of the borrowed helpers that are shared
    for old, decl, first, define in later:
        if any(unit[0] is first for unit in ok.get(old, ())):
            moved.append((decl, first))
        else:
            define()  # its module's own copy after all, internal as the first one
    if not ok:
        return []
    # group key -> (helper name -> its definition's text, renamed; what those definitions call)
    mods: dict[str | None, tuple[dict[str, str], dict[str, str]]] = {}
    key_of = {copies[0][0].name: group(old) for old, copies in ok.items()}  # by the new name
    elsewhere: list[tuple[dict[str, str], ir.Function]] = []  # another group's helper, called
    for old, copies in ok.items():
        for unit in copies:
            unit[0].linkage = "hidden"
            _declare_memory(unit[0])
        key = group(old)
        texts, decls = mods.setdefault(key, ({}, {}))
        for fn in copies[0]:
            if fn.name not in texts:  # (a function two units reach: equal names, equal code)
                texts[fn.name] = str(fn)  # printed once, with the attributes just added
            for callee in _callees(fn, real):
                if not callee.blocks:
                    decls.setdefault(callee.name, str(callee))
                elif key_of.get(callee.name, key) != key:
                    elsewhere.append((decls, callee))
    for copies in ok.values():
        for unit in copies:
            unit[0].blocks = []  # now a declaration: its definition is the shared module's
    for decl, first in moved:  # declared as the copies now are
        decl.linkage = first.linkage
        for attr in first.attributes:
            decl.attributes.add(attr)
        for arg, like in zip(decl.args, first.args):
            for attr in like.attributes:
                arg.add_attribute(attr)
    for decls, callee in elsewhere:
        decls.setdefault(callee.name, str(callee))  # (printed now: a declaration)
    triple = versions[0][0].triple
    head = f'target triple = "{triple}"\n' if triple else ""
    # a unit's inlinable functions are copied into the module of each group that reaches them
    # (internal there: no clash); a group's module declares the never-inlined helpers of
    # another group that it calls
    out = []
    for key in sorted(mods, key=lambda k: (k is not None, k or "")):
        texts, decls = mods[key]
        out.append((head + "\n".join([*decls.values(), *texts.values()]) + "\n", key))
    return out


def _rename(fn: ir.Function, new: str) -> bool:
    """`fn` renamed `new` in its module; False when it was printed before under its old name."""
    old = fn.name
    if old == new:
        return True
    fn.name = new
    if fn.get_reference() != f'@"{new}"':
        return False
    fn.module.globals[new] = fn.module.globals.pop(old)
    return True


def _declare_memory(fn: ir.Function) -> None:
    """Tell the callers what LLVM would have inferred from an internal definition: the
    helper touches memory only through its pointer arguments and keeps none of them. Without
    it a call clobbers all memory and captures the buffers passed (a window GEMM's stack
    tile and offset table): its callers optimised to 30% more code and took 40% longer in
    LLVM (squeezenet). Only for a helper that calls nothing but LLVM intrinsics and stores
    no pointer."""
    for block in fn.blocks:
        for ins in block.instructions:
            if isinstance(ins, ir.CallInstr) and not getattr(ins.callee, "name", "").startswith("llvm."):
                return
            if isinstance(ins, ir.StoreInstr) and isinstance(ins.operands[0].type, ir.PointerType):
                return
            if ins.opname == "ptrtoint":
                return
    fn.attributes.add("argmemonly")
    for arg in fn.args:
        if isinstance(arg.type, ir.PointerType):
            arg.add_attribute("captures(none)")


def _shape(fn: ir.Function) -> tuple:
    return (str(fn.ftype), tuple(fn.attributes), tuple((b.name, len(b.instructions)) for b in fn.blocks))


def _callees(fn: ir.Function, real: dict[int, ir.Function] | None = None) -> list[ir.Function]:
    """The functions `fn` calls or takes the address of; a declaration `real` maps (by id)
    stands for the function given there."""
    out: dict[str, ir.Function] = {}
    for block in fn.blocks:
        for ins in block.instructions:
            for op in getattr(ins, "operands", ()):
                if isinstance(op, ir.Function):
                    out.setdefault(op.name, real.get(id(op), op) if real else op)
    return list(out.values())
