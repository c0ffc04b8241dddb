"""One version's LLVM module cut into parts that LLVM optimises and compiles in parallel.

LLVM's optimiser and code generator take most of a one-version build (a 66-node conv net:
about 8 of its 15 CPU seconds) and run on one core; its work is per function, so the
functions of a version are dealt out to `parts` modules (largest first, each to the
lightest part) that the backend compiles in separate processes.

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

from llvmlite import ir


def _size(fn: ir.Function) -> int:
    return sum(len(b.instructions) for b in fn.blocks)


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
    defined = [f for f in module.functions if f.blocks]
    movable = [f for f in defined if f.name == prefix or f.name.startswith(prefix + ".")]
    parts = min(parts, len(movable))
    if parts <= 1:
        return [module]
    uses = {f: _callees(f) for f in defined}

    # deal out the movable functions: largest first, each to the part with the least work
    owner: dict[ir.Function, int] = {}
    load = [0] * parts
    for f in sorted(movable, key=lambda f: (-_size(f), f.name)):
        k = load.index(min(load))
        owner[f] = k
        load[k] += _size(f)

    members: list[list[ir.Function]] = [[] for _ in range(parts)]
    for f in defined:  # module order, so each part prints in the original order
        if f in owner:
            members[owner[f]].append(f)
    out = []
    for k in range(parts):
        # the helpers the part needs, transitively (a helper may call another)
        need: set[ir.Function] = set()
        todo = list(members[k])
        while todo:
            for g in uses.get(todo.pop(), ()):
                if g in uses and g not in owner and g not in need:
                    need.add(g)
                    todo.append(g)
        foreign = {g for f in [*members[k], *need] for g in uses[f] if g in owner and owner[g] != k}
        for g in foreign:
            g.linkage = "hidden"  # its definition, in another part, must be visible here
        out.append(_part_module(module, k, [f for f in defined if f in need or owner.get(f) == k], foreign))
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
