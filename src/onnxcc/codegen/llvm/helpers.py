"""Builder-first helpers for emitting LLVM IR with llvmlite (in the spirit of numba's
cgutils): counted loops, branches, entry-block allocas, function declarations.

Every helper takes the `ir.IRBuilder` first and leaves it positioned where the caller
continues; loops are emitted in rotated (do-while) form, which is what LLVM's loop passes
expect.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager

from llvmlite import ir

I1 = ir.IntType(1)
I8 = ir.IntType(8)
I16 = ir.IntType(16)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
PTR = ir.PointerType()
VOID = ir.VoidType()


def i64(v: int) -> ir.Constant:
    return ir.Constant(I64, v)


def i32(v: int) -> ir.Constant:
    return ir.Constant(I32, v)


@contextmanager
def for_range(builder: ir.IRBuilder, count: ir.Value, name: str = "i", *, start: ir.Value | None = None,
              guard: bool = True, metadata: ir.MDValue | None = None) -> Iterator[ir.Value]:
    """`for (name = start; name < count; ++name)`; yields the i64 induction variable.

    With `guard=False` the caller promises at least one iteration (no entry test). The
    with-block emits the body at the builder's position; it may create blocks of its own.
    `metadata` (see `loop_metadata`) goes on the back edge as `!llvm.loop`.
    """
    ty = count.type
    lo = start if start is not None else ir.Constant(ty, 0)
    fn = builder.function
    pre = builder.block
    body = fn.append_basic_block(f"{name}.loop")
    exit_ = fn.append_basic_block(f"{name}.end")
    if guard and isinstance(lo, ir.Constant) and isinstance(count, ir.Constant):
        guard = not lo.constant < count.constant
    if guard:
        builder.cbranch(builder.icmp_signed("<", lo, count, name=f"{name}.nonempty"), body, exit_)
    else:
        builder.branch(body)
    builder.position_at_end(body)
    idx = builder.phi(ty, name=name)
    idx.add_incoming(lo, pre)
    yield idx
    latch = builder.block
    nxt = builder.add(idx, ir.Constant(ty, 1), name=f"{name}.next", flags=("nuw", "nsw"))
    idx.add_incoming(nxt, latch)
    br = builder.cbranch(builder.icmp_signed("<", nxt, count, name=f"{name}.more"), body, exit_)
    if metadata is not None:
        br.set_metadata("llvm.loop", metadata)
    move_to_end(exit_)
    builder.position_at_end(exit_)


def loop_metadata(module: ir.Module, vector_width: int | None = None, unroll: int | None = None, *,
                  no_unroll: bool = False) -> ir.MDValue | None:
    """A fresh self-referential `!llvm.loop` node asking for a vector width and/or an
    unroll count (None when nothing is asked). `no_unroll` keeps LLVM from unrolling the
    loop (a strip-mined chunk loop must reach the vectorizer whole, not fully unrolled)."""
    props = []
    if vector_width:
        props.append(module.add_metadata([ir.MetaDataString(module, "llvm.loop.vectorize.enable"),
                                          ir.Constant(I1, 1)]))
        props.append(module.add_metadata([ir.MetaDataString(module, "llvm.loop.vectorize.width"),
                                          i32(vector_width)]))
    if unroll:
        props.append(module.add_metadata([ir.MetaDataString(module, "llvm.loop.unroll.count"), i32(unroll)]))
    if no_unroll:
        props.append(module.add_metadata([ir.MetaDataString(module, "llvm.loop.unroll.disable")]))
    if not props:
        return None
    # NOTE: llvmlite uniques metadata by content; a distinct tag keeps each loop ID its own
    tag = module.add_metadata([ir.MetaDataString(module, "onnxcc.loop"), i32(len(module.metadata))])
    node = module.add_metadata([tag, *props])
    node.operands = (node, *node.operands)  # a loop ID refers to itself
    return node


def masked_tail_metadata(module: ir.Module, vector_width: int) -> ir.MDValue:
    """A fresh `!llvm.loop` node for the tail of a strip-mined loop (fewer than
    `vector_width` iterations): one masked vector iteration (LLVM's tail folding by
    predication) instead of a scalar loop, which on short rows (a 7- or 14-wide feature
    map) would be all of the work; no unrolling, no interleaving."""
    props = [module.add_metadata([ir.MetaDataString(module, "llvm.loop.vectorize.enable"), ir.Constant(I1, 1)]),
             module.add_metadata([ir.MetaDataString(module, "llvm.loop.vectorize.width"), i32(vector_width)]),
             module.add_metadata([ir.MetaDataString(module, "llvm.loop.vectorize.predicate.enable"),
                                  ir.Constant(I1, 1)]),
             module.add_metadata([ir.MetaDataString(module, "llvm.loop.interleave.count"), i32(1)]),
             module.add_metadata([ir.MetaDataString(module, "llvm.loop.unroll.disable")])]
    tag = module.add_metadata([ir.MetaDataString(module, "onnxcc.loop"), i32(len(module.metadata))])
    node = module.add_metadata([tag, *props])
    node.operands = (node, *node.operands)
    return node


def scalar_loop_metadata(module: ir.Module, *, unroll: bool = False) -> ir.MDValue:
    """A fresh `!llvm.loop` node that keeps a loop from being vectorized (tail loops, the
    chunk loop around a vectorized one) and, unless `unroll`, from being unrolled."""
    props = [module.add_metadata([ir.MetaDataString(module, "llvm.loop.vectorize.enable"), ir.Constant(I1, 0)])]
    if not unroll:
        props.append(module.add_metadata([ir.MetaDataString(module, "llvm.loop.unroll.disable")]))
    tag = module.add_metadata([ir.MetaDataString(module, "onnxcc.loop"), i32(len(module.metadata))])
    node = module.add_metadata([tag, *props])
    node.operands = (node, *node.operands)
    return node


def move_to_end(block: ir.Block) -> None:
    """Move `block` to the end of its function's block list (so the printed IR reads in
    program order: a construct's merge block comes after its body)."""
    blocks = block.parent.blocks
    blocks.remove(block)
    blocks.append(block)


@contextmanager
def loop_nest(builder: ir.IRBuilder, counts: Sequence[ir.Value], names: Sequence[str], *,
              guard: bool = True) -> Iterator[tuple[ir.Value, ...]]:
    """Nested `for_range`s, outermost first; yields the induction variables."""
    with ExitStack() as stack:
        idxs = tuple(stack.enter_context(for_range(builder, c, n, guard=guard))
                     for c, n in zip(counts, names, strict=True))
        yield idxs


@contextmanager
def if_then(builder: ir.IRBuilder, cond: ir.Value, name: str = "if", *, likely: bool | None = None
            ) -> Iterator[None]:
    """`if (cond) { with-block }`; continues after the merge."""
    fn = builder.function
    then = fn.append_basic_block(f"{name}.then")
    merge = fn.append_basic_block(f"{name}.end")
    br = builder.cbranch(cond, then, merge)
    if likely is not None:
        br.set_weights([99, 1] if likely else [1, 99])
    builder.position_at_end(then)
    yield
    if not builder.block.is_terminated:
        builder.branch(merge)
    move_to_end(merge)
    builder.position_at_end(merge)


@contextmanager
def if_else(builder: ir.IRBuilder, cond: ir.Value, name: str = "if"):
    """`with if_else(b, c) as (then, otherwise): with then: ...; with otherwise: ...`."""
    fn = builder.function
    bthen = fn.append_basic_block(f"{name}.then")
    belse = fn.append_basic_block(f"{name}.else")
    merge = fn.append_basic_block(f"{name}.end")
    builder.cbranch(cond, bthen, belse)

    @contextmanager
    def arm(block):
        builder.position_at_end(block)
        yield
        if not builder.block.is_terminated:
            builder.branch(merge)

    yield arm(bthen), arm(belse)
    move_to_end(merge)
    builder.position_at_end(merge)


def alloca_once(builder: ir.IRBuilder, ty: ir.Type, name: str = "") -> ir.AllocaInstr:
    """An alloca in the function's entry block (so mem2reg/SROA promote it), at its end
    (before its terminator, if any); the builder returns to the end of its block.

    NOTE: another builder positioned inside the entry block keeps a stale insertion index
    after this; code that owns an entry builder should allocate through that builder."""
    entry = builder.function.entry_basic_block
    with builder.goto_block(entry):
        slot = builder.alloca(ty, name=name)
    return slot


def get_or_declare(module: ir.Module, name: str, fnty: ir.FunctionType,
                   attrs: Sequence[str] = ()) -> ir.Function:
    """The function `name` in `module`, declared with `fnty` and `attrs` if missing."""
    fn = module.globals.get(name)
    if fn is None:
        fn = ir.Function(module, fnty, name=name)
        for a in attrs:
            fn.attributes.add(a)
    return fn


def intrinsic(module: ir.Module, name: str, ret: ir.Type, args: Sequence[ir.Type],
              overload: Sequence[ir.Type] | None = None) -> ir.Function:
    """Declare an overloaded LLVM intrinsic, e.g. `intrinsic(m, "llvm.exp", f32, [f32])`
    -> `@llvm.exp.f32`; `overload` lists the types that form the name suffix (default: ret)."""
    suffix = ".".join(t.intrinsic_name for t in (overload if overload is not None else [ret]))
    return get_or_declare(module, f"{name}.{suffix}", ir.FunctionType(ret, list(args)))


def name_unnamed(fn: ir.Function) -> None:
    """Give every unnamed value of `fn` its opcode as a name (readable dumps: `%fmul.3`
    rather than `%.17`)."""
    for block in fn.blocks:
        for instr in block.instructions:
            anonymous = not instr.name or instr.name.lstrip(".").isdigit()  # llvmlite names them ".N"
            if anonymous and not isinstance(instr.type, ir.VoidType):
                instr.name = instr.opname.split()[0]


def set_name(value: ir.Value, name: str) -> ir.Value:
    if isinstance(value, ir.NamedValue) and not isinstance(value, ir.Constant) and not value.name:
        value.name = name
    return value
