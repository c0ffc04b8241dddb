"""codegen/cpu/dedup.py: a version function identical to an earlier one (up to its name,
local names and metadata numbering) becomes a stub calling it; any real difference keeps
both."""

from __future__ import annotations

from llvmlite import ir

from onnxcc.codegen.cpu.dedup import forward_duplicates
from onnxcc.codegen.llvm.target import parse_modules

I64, PTR, VOID = ir.IntType(64), ir.PointerType(), ir.VoidType()
BODY = ir.FunctionType(VOID, [I64, I64, PTR])


def _version(prefix: str, scale: int, padding_md: int = 0, m: ir.Module | None = None) -> ir.Module:
    """A version module: `PREFIX.par.loop` (a loop with a vectorize hint and a metadata
    label holding the version's name) and `PREFIX.par.scale` (multiplies by `scale`)."""
    m = m or ir.Module(name=prefix)
    for k in range(padding_md):  # shifts the metadata numbering
        m.add_metadata([ir.MetaDataString(m, f"pad{k}")])
    f = ir.Function(m, BODY, f"{prefix}.par.loop")
    f.linkage = "internal"
    entry = f.append_basic_block(f"{prefix}.entry")  # a local name that differs per version
    loop, done = f.append_basic_block("loop"), f.append_basic_block("done")
    b = ir.IRBuilder(entry)
    b.branch(loop)
    b = ir.IRBuilder(loop)
    i = b.phi(I64, name=f"{prefix}.i")
    i.add_incoming(f.args[0], entry)
    p = b.gep(f.args[2], [i], inbounds=True, source_etype=I64)
    st = b.store(i, p)
    label = m.add_metadata([m.add_metadata([ir.MetaDataString(m, f"onnxcc.{prefix}.s0")])])
    st.set_metadata("onnxcc.label", label)  # like an alias scope's label: names the version
    nxt = b.add(i, ir.Constant(I64, 1))
    i.add_incoming(nxt, loop)
    br = b.cbranch(b.icmp_signed("<", nxt, f.args[1]), loop, done)
    hint = m.add_metadata([ir.MetaDataString(m, "llvm.loop.vectorize.width"), ir.Constant(ir.IntType(32), 8)])
    br.set_metadata("llvm.loop", m.add_metadata([hint]))
    ir.IRBuilder(done).ret_void()
    g = ir.Function(m, BODY, f"{prefix}.par.scale")
    g.linkage = "internal"
    b = ir.IRBuilder(g.append_basic_block("entry"))
    b.store(b.mul(g.args[0], ir.Constant(I64, scale)), g.args[2])
    b.ret_void()
    main = ir.Function(m, ir.FunctionType(VOID, [PTR]), prefix)
    b = ir.IRBuilder(main.append_basic_block("entry"))
    for fn in (f, g):
        b.call(fn, [ir.Constant(I64, 0), ir.Constant(I64, 4), main.args[0]])
    b.ret_void()
    return m


def test_identical_function_of_a_later_version_becomes_a_stub():
    v0, v1 = _version("m_v0", 3), _version("m_v1", 5, padding_md=3)
    assert forward_duplicates([(v0, "m_v0"), (v1, "m_v1")]) == 1
    t0, t1 = str(v0), str(v1)
    assert 'define hidden void @"m_v0.par.loop"' in t0  # the target, visible to v1's object
    assert 'declare hidden void @"m_v0.par.loop"' in t1
    assert 'tail call void @"m_v0.par.loop"' in t1
    assert 'define internal void @"m_v1.par.scale"' in t1 and "mul i64" in t1  # 5 != 3: kept
    for t in (t0, t1):
        parse_modules([t])
    parse_modules([t0, t1])  # one library: the stub finds its target


def test_identical_functions_in_one_module_forward_there():
    m = _version("m_v1", 3, m=_version("m_v0", 3))  # the serial backend: all versions, one module
    assert forward_duplicates([(m, "m_v0"), (m, "m_v1")]) == 2
    text = str(m)
    assert 'tail call void @"m_v0.par.loop"' in text and 'tail call void @"m_v0.par.scale"' in text
    assert 'define internal void @"m_v0.par.loop"' in text  # same module: stays internal
    parse_modules([text])


def test_entry_functions_and_single_versions_are_left_alone():
    v0, v1 = _version("m_v0", 3), _version("m_v1", 7)
    assert forward_duplicates([(v0, "m_v0"), (v1, "m_v1")]) == 1  # the loop; not the entries
    assert 'call void @"m_v1.par.scale"' in str(v1)
    assert forward_duplicates([(_version("a_v0", 2), "a_v0")]) == 0


def _tagged(m: ir.Module, name: str, extra_md: int) -> ir.Function:
    """A body whose loop ID carries the `onnxcc.loop` tag numbered after the module's metadata
    (as llvm/helpers.py numbers it) and whose store names a statement's alias scope."""
    for k in range(extra_md):
        m.add_metadata([ir.MetaDataString(m, f"other{name}{k}")])
    f = ir.Function(m, BODY, name)
    f.linkage = "internal"
    entry, loop, done = f.append_basic_block("entry"), f.append_basic_block("loop"), f.append_basic_block("done")
    ir.IRBuilder(entry).branch(loop)
    b = ir.IRBuilder(loop)
    i = b.phi(I64, name="i")
    i.add_incoming(f.args[0], entry)
    st = b.store(i, b.gep(f.args[2], [i], inbounds=True, source_etype=I64))
    k = len(m.metadata)
    dom = m.add_metadata([ir.MetaDataString(m, f"onnxcc.m_v0.s{k}")])
    st.set_metadata("alias.scope", m.add_metadata([m.add_metadata([ir.MetaDataString(m, f"onnxcc.m_v0.s{k}.w"), dom])]))
    nxt = b.add(i, ir.Constant(I64, 1))
    i.add_incoming(nxt, loop)
    br = b.cbranch(b.icmp_signed("<", nxt, f.args[1]), loop, done)
    tag = m.add_metadata([ir.MetaDataString(m, "onnxcc.loop"), ir.Constant(ir.IntType(32), len(m.metadata))])
    node = m.add_metadata([tag, m.add_metadata([ir.MetaDataString(m, "llvm.loop.unroll.disable")])])
    node.operands = (node, *node.operands)
    br.set_metadata("llvm.loop", node)
    ir.IRBuilder(done).ret_void()
    return f


def test_loop_and_scope_labels_do_not_keep_functions_apart():
    """Two layers' bodies in one version differ only in the numbers their loop-ID tags and
    alias-scope labels carry (each made unique in the module): one is compiled, the other
    forwards to it."""
    m = ir.Module(name="m_v0")
    _tagged(m, "m_v0.par.a", 0)
    _tagged(m, "m_v0.par.b", 3)
    assert forward_duplicates([(m, "m_v0")]) == 1
    text = str(m)
    assert 'tail call void @"m_v0.par.a"' in text
    parse_modules([text])


def test_locals_numbered_by_first_appearance_escapes_included():
    """The key's local numbering (`_numbered_locals`): quoted names with escapes (llvmlite
    writes `"` and `\\` inside a name as \\22 and \\5c), plain names, a name used before it is
    defined (a phi's incoming value) and the same name again all map as a rename would."""
    from onnxcc.codegen.cpu.dedup import _numbered_locals

    text = ('%"a\\22b" = phi i64 [%"c.1", %"x"]\n  %"c.1" = add i64 %"a\\22b", %plain\n'
            '  br label %"a\\5c"\n  %"" = add i64 %"c.1", %"a\\22b"\n  ret "100% \\22"')
    assert _numbered_locals(text) == ('%0 = phi i64 [%1, %2]\n  %1 = add i64 %0, %3\n'
                                      '  br label %4\n  %5 = add i64 %1, %0\n  ret "100% \\22"')
