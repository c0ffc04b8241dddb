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
propagated into an internal function's body).
"""

from __future__ import annotations

from llvmlite import ir


def _shareable(fn: ir.Function, prefix: str) -> bool:
    """A defined, never-inlined helper (not one of version `prefix`'s own functions) that
    names no metadata (the module's numbering is its own) and calls only declarations
    (intrinsics, the runtime): its text alone is a complete definition."""
    if not fn.blocks or fn.name == prefix or fn.name.startswith(prefix + ".") or "noinline" not in fn.attributes:
        return False
    if getattr(fn, "metadata", None):
        return False
    for block in fn.blocks:
        for ins in block.instructions:
            if getattr(ins, "metadata", None):
                return False
            for op in getattr(ins, "operands", ()):
                if (isinstance(op, ir.Function) and op.blocks) or isinstance(op, (ir.MetaDataArgument, ir.MDValue)):
                    return False
    return True


def share_helpers(versions: list[tuple[ir.Module, str]], name: str) -> str | None:
    """Move the helpers shareable across `versions` ((module, version prefix) pairs) into one
    module, returned as LLVM IR text (None: nothing to share); in each version module the
    helper becomes a `hidden` declaration named `name.HELPER`. The modules are changed in
    place, before anything else prints them (llvmlite caches printed names: a caller printed
    earlier would keep calling the old name, and the link would fail) and before they are
    split (a declaration is not copied into every part)."""
    found: dict[str, list[ir.Function]] = {}
    for module, prefix in versions:
        for fn in list(module.functions):
            if _shareable(fn, prefix):
                found.setdefault(fn.name, []).append(fn)
    texts: dict[str, str] = {}  # helper name -> its definition's text, renamed
    decls: dict[str, str] = {}  # what the shared definitions call
    moved = []
    for old, copies in found.items():
        new = f"{name}.{old}"
        for fn in copies:  # renamed before printed: the name is cached by the first print
            fn.name = new
            if fn.get_reference() != f'@"{new}"':  # printed before (it prints as it did): not shared
                break
            fn.module.globals[new] = fn.module.globals.pop(old)
        else:
            # the shape (types, instructions per block), not the text: printing every copy of
            # every micro-kernel cost more Python time than it saved (bert: 15% of the emission)
            if len({_shape(fn) for fn in copies}) == 1:
                for fn in copies:
                    fn.linkage = "hidden"
                    _declare_memory(fn)
                texts[new] = str(copies[0])  # printed once, with the attributes just added
                for callee in _callees(copies[0]):
                    decls.setdefault(callee.name, str(callee))
                moved.extend(copies)
            # copies that differ (or name metadata) stay internal, each in its module
    if not texts:
        return None
    for fn in moved:
        fn.blocks = []  # now a declaration: its definition is the shared module's
    triple = versions[0][0].triple
    head = f'target triple = "{triple}"\n' if triple else ""
    return head + "\n".join([*decls.values(), *texts.values()]) + "\n"


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


def _callees(fn: ir.Function) -> list[ir.Function]:
    out: dict[str, ir.Function] = {}
    for block in fn.blocks:
        for ins in block.instructions:
            for op in getattr(ins, "operands", ()):
                if isinstance(op, ir.Function):
                    out.setdefault(op.name, op)
    return list(out.values())
