"""One version's LLVM module cut into parts that LLVM optimises and compiles in parallel.

LLVM's optimiser and code generator take most of a one-version build (a 66-node conv net:
about 8 of its 15 CPU seconds) and run on one core; its work is per function, so the
functions of a version are dealt out to `parts` modules (largest first, each to the
lightest part) that the backend compiles in separate processes. The backend may also ask
for functions to be grouped by the -O level it compiles them at (`split_by_level`): a part
holds functions of one level only, since LLVM's pipeline runs over a whole module.

What may move and what stays:
- the version's own functions (its kernel entry and the bodies it hands to the thread pool,
  all named `PREFIX` or `PREFIX.*`, so unique in the library) move; one that is referenced
  from another part is made `hidden` there (external linkage inside the library only) and
  declared where it is used. Those references are calls through `onnxcc_parallel_for`, or
  the direct call of a body when the work is too small to share out, so only that call's
  inlining is lost;
- every other function (the shared helpers: GEMM micro-kernels, vector math) is copied,
  internal, into each part that uses it, so nothing may clash with another version's or
  another CPU level's copy and `alwaysinline` helpers still inline;
- globals (the weight constants) and declarations go into every part as they are; the
  metadata list is shared, so every `!N` a function names keeps its meaning.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from llvmlite import ir


def size(fn: ir.Function) -> int:
    """`fn`'s instruction count, as emitted (before LLVM's optimiser)."""
    return sum(len(b.instructions) for b in fn.blocks)


def control_only(fn: ir.Function) -> bool:
    """`fn` computes no tensor itself: no vector value, no compute loop (every loop the
    emitter makes for a compute carries `!llvm.loop` metadata, vectorised or scalar), no call
    of a GEMM micro-kernel or of vector math. What is left is size arithmetic, calls of other
    functions (the parallel bodies, GEMM tasks, the LLVM-defined runtime calls once
    shared_helpers.py has moved them out: `runtime_call`) and tiny loops around them (a
    batch loop, a few floats of slack zeroed)."""
    for block in fn.blocks:
        for ins in block.instructions:
            if "llvm.loop" in getattr(ins, "metadata", {}) or isinstance(ins.type, ir.VectorType):
                return False
            if isinstance(ins, ir.CallInstr):
                # the helpers (GEMM micro-kernels, vector math) are named onnxcc.*, shared
                # ones LIB.onnxcc.*
                name = getattr(ins.callee, "name", "")
                helper = name.startswith("onnxcc.") or ".onnxcc." in name
                if helper and not runtime_call(ins.callee):
                    return False
                if any(isinstance(a.type, ir.VectorType) for a in ins.args):
                    return False
    return True


def calls_direct_micro_kernels(fn: ir.Function) -> bool:
    """`fn` calls GEMM micro-kernels (gemm_ukr.py's `onnxcc.gemm.ukr.*`, shared or not), each
    one reading A in place (`.direct.`): a GEMM task body whose hot loop is that call, with no
    A panel to pack around it (a packed-A body, `.aMR`, packs its rows itself)."""
    calls = [getattr(ins.callee, "name", "") for block in fn.blocks for ins in block.instructions
             if isinstance(ins, ir.CallInstr)]
    kernels = [name for name in calls if _UKR in name]
    return bool(kernels) and all(".direct" in name.split(_UKR, 1)[1] for name in kernels)


_UKR = "onnxcc.gemm.ukr."

_RUNTIME_CALL = ir.FunctionType(ir.IntType(32), [ir.PointerType(), ir.PointerType()])


def runtime_call(fn) -> bool:
    """`fn` is a runtime call's entry (`i32 fn(const i64 *sizes, void *const *bufs)`, the
    conv / int8 GEMM / pool calls defined in LLVM) declared here, defined in the shared
    helpers' module: calling it is one call, nothing this module compiles."""
    return isinstance(fn, ir.Function) and not fn.blocks and str(fn.ftype) == str(_RUNTIME_CALL)


def _callees(fn: ir.Function) -> set[ir.Function]:
    """The functions `fn` calls or takes the address of."""
    out: set[ir.Function] = set()
    for block in fn.blocks:
        for ins in block.instructions:
            for op in getattr(ins, "operands", ()):
                if isinstance(op, ir.Function):
                    out.add(op)
    return out


def split_module(module: ir.Module, prefix: str, parts: int) -> list[ir.Module]:
    """`module` as `parts` modules (fewer when it has fewer movable functions); the module
    itself when one part is asked for. Linkage of moved functions is changed in place."""
    return [m for m, _ in split_by_level(module, prefix, parts, lambda fn: 0)]


def split_by_level(module: ir.Module, prefix: str, parts: int,
                   level: Callable[[ir.Function], Any]) -> list[tuple[ir.Module, Any]]:
    """`module` cut into (part, level) pairs: the movable functions grouped by `level(fn)`
    (the -O level the backend compiles them at), each group dealt out to up to `parts`
    parts; the module itself, whole, when it holds one group and one part is asked for."""
    defined = [f for f in module.functions if f.blocks]
    movable = [f for f in defined if f.name == prefix or f.name.startswith(prefix + ".")]
    groups: dict[Any, list[ir.Function]] = {}  # level (an int, or a pair of them) -> functions
    for f in movable:
        groups.setdefault(level(f), []).append(f)
    if len(groups) <= 1 and min(parts, len(movable)) <= 1:
        # (a module without version functions keeps the level its helpers get)
        return [(module, next(iter(groups)) if groups else max(map(level, defined), default=3))]
    uses = {f: _callees(f) for f in defined}

    # deal out each group's functions: largest first, each to the group's part with the
    # least work
    owner: dict[ir.Function, int] = {}
    levels: list[Any] = []
    for lv, fns in sorted(groups.items(), reverse=True):
        first, n = len(levels), min(parts, len(fns))
        levels += [lv] * n
        load = [0] * n
        for f in sorted(fns, key=lambda f: (-size(f), f.name)):
            k = load.index(min(load))
            owner[f] = first + k
            load[k] += size(f)

    members: list[list[ir.Function]] = [[] for _ in levels]
    for f in defined:  # module order, so each part prints in the original order
        if f in owner:
            members[owner[f]].append(f)
    out = []
    for k, lv in enumerate(levels):
        # the helpers the part needs, transitively (a helper may call another)
        need: set[ir.Function] = set()
        todo = list(members[k])
        while todo:
            for g in uses.get(todo.pop(), set()):
                if g in uses and g not in owner and g not in need:
                    need.add(g)
                    todo.append(g)
        foreign = {g for f in [*members[k], *need] for g in uses[f] if g in owner and owner[g] != k}
        for g in foreign:
            g.linkage = "hidden"  # its definition, in another part, must be visible here
        part = _part_module(module, k, [f for f in defined if f in need or owner.get(f) == k], foreign)
        out.append((part, lv))
    return out


def _part_module(module: ir.Module, k: int, defs: list[ir.Function], foreign: set[ir.Function]) -> ir.Module:
    part = ir.Module(name=f"{module.name}.part{k}")
    part.triple, part.data_layout = module.triple, module.data_layout
    keep = set(defs)
    for gv in module.global_values:
        if not isinstance(gv, ir.Function) or gv in keep or not gv.blocks:
            part.add_global(gv)  # globals, declarations and this part's definitions
        elif gv in foreign:  # defined in another part: declared here
            decl = ir.Function(part, gv.ftype, gv.name)
            decl.linkage = "hidden"
            decl.calling_convention = gv.calling_convention
    part.metadata = module.metadata
    part.namedmetadata = module.namedmetadata
    return part
