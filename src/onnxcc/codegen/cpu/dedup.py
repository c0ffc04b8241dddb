"""Identical kernel functions compiled once: a function whose LLVM IR equals an earlier one's
(in the same version or an earlier version) becomes a forwarding stub that tail-calls it.

Versions of one model share most of their kernels (a `seq % 16 == 0` version differs from
the generic one only where seq is an extent of a loop it vectorises), and a conv net repeats
layers of the same shape; LLVM would optimise and compile each copy again. The content key
is the function's printed IR with its own name blanked and the metadata it names (loop
hints, alias scopes) printed after it, renumbered in order of first use; the version's name
inside metadata strings (the alias scopes' labels) is blanked too, as labels carry no
meaning. Any other difference, a symbol index, a constant, a call to another version's
function, keeps the functions apart.

A target in another module (another version's) is given `hidden` linkage and declared
where the stub calls it; version functions are named after their version, so the name is
unique in the library (and per CPU level in a multi-ISA build).

A whole version whose kernel program and memory plan equal an earlier version's (the key of
`kernel/fingerprint.py`, taken before any LLVM is emitted) is not emitted at all: its entry
is a stub calling the earlier version's entry (`forward_version`), which the dispatcher
reaches under the version's own guard as before.
"""

from __future__ import annotations

import re
from collections import Counter

from llvmlite import ir

_MD_REF = re.compile(r"!(\d+)")
# a local's reference: quoted (escapes inside; the loop unrolled, `([^"\\]|\\.)*` took twice
# as long to scan) or plain
_LOCAL = re.compile(r'%(?:"([^"\\]*(?:\\.[^"\\]*)*)"|([-\w.$]+))')
_LABEL = re.compile(r'^"?([^\s"]+?)"?:$', re.MULTILINE)
# labels inside metadata that only keep nodes apart (llvmlite uniques metadata by content):
# a loop ID's `!"onnxcc.loop", i32 N` (a row norm's: `onnxcc.rownorm`) and a statement's alias scope `onnxcc.VERSION.sK`
_LOOP_TAG = re.compile(r'(!"onnxcc\.(?:loop|rownorm)"), i32 \d+')
_SCOPE_TAG = re.compile(r'"onnxcc\.version\.s\d+')


def _metadata_text(module: ir.Module) -> dict[str, str]:
    return {md.name: str(md) for md in module.metadata}


def _content_key(fn: ir.Function, prefix: str, mds: dict[str, str]) -> str:
    text = str(fn).replace(f'@"{fn.name}"', '@"self"', 1)
    # local names (values and blocks, named after the buffers and ops) carry no meaning:
    # numbered in order of first appearance, so two layers of the same shape compare equal
    text = _LABEL.sub(r'%"\1":', text)
    text = _numbered_locals(text)
    order: dict[str, int] = {}
    todo = _MD_REF.findall(text)
    defs = []
    while todo:
        n = todo.pop(0)
        if n in order or n not in mds:
            continue
        order[n] = len(order)
        md = mds[n]
        md = _SCOPE_TAG.sub('"onnxcc.version.s', md.replace(f'"onnxcc.{prefix}.', '"onnxcc.version.'))
        defs.append(_LOOP_TAG.sub(r"\1", md))
        todo.extend(_MD_REF.findall(md))
    whole = "\n".join([text, *defs])
    return _MD_REF.sub(lambda m: f"!{order.get(m.group(1), m.group(1))}", whole)


def _numbered_locals(text: str) -> str:
    """`text` with every local's reference `%N`, N its rank of first appearance. Split, not
    `re.sub` with a callback: a Python call per reference was most of the key's cost (a conv
    net's 3 MB of version functions: 0.3 s)."""
    parts = _LOCAL.split(text)  # text, quoted name, plain name, text, ...
    names = [quoted or plain for quoted, plain in zip(parts[1::3], parts[2::3])]
    ref = {name: f"%{k}" for k, name in enumerate(dict.fromkeys(names))}
    out = [""] * (len(parts) // 3 * 2 + 1)
    out[::2] = parts[::3]
    out[1::2] = [ref[name] for name in names]
    return "".join(out)


def forward_duplicates(versions: list[tuple[ir.Module, str]]) -> int:
    """Turn every version function (named `PREFIX.*`, the entry itself excluded) identical to
    an earlier one into a stub calling that one; `versions` pairs each version's module
    with its prefix, in build order (one module may hold several versions). Returns how many
    functions became stubs."""
    seen: dict[str, tuple[ir.Function, ir.Module]] = {}
    mds: dict[int, dict[str, str]] = {}
    stubs = 0
    fns = [(module, prefix, [f for f in module.functions if f.blocks and f.name.startswith(prefix + ".")])
           for module, prefix in versions]
    # printing a function is most of the key's cost: only functions whose shape (type, block
    # and instruction counts) another one shares can be identical to it, so only they print
    shapes = Counter(_shape(f) for _, _, group in fns for f in group)
    for module, prefix, group in fns:
        for fn in group:
            if shapes[_shape(fn)] < 2:
                continue
            if id(module) not in mds:  # (not `setdefault`: it would print them again per function)
                mds[id(module)] = _metadata_text(module)
            key = _content_key(fn, prefix, mds[id(module)])
            hit = seen.get(key)
            if hit is None:
                seen[key] = (fn, module)
                continue
            target, home = hit
            if home is not module:
                target.linkage = "hidden"
                callee = module.globals.get(target.name)
                if callee is None:
                    callee = ir.Function(module, target.ftype, target.name)
                    callee.linkage = "hidden"
                    callee.calling_convention = target.calling_convention
            else:
                callee = target
            _forward(fn, callee)
            stubs += 1
    return stubs


def forward_version(module: ir.Module, name: str, target: ir.Function | str, ftype: ir.FunctionType) -> ir.Function:
    """Define version entry `name` in `module` as a tail call of entry `target` (a function
    of `module`, or the name of one defined in another module of the library: declared here)
    with the same arguments."""
    if isinstance(target, str):
        callee = module.globals.get(target)
        if callee is None:
            callee = ir.Function(module, ftype, target)
    else:
        callee = target
    fn = ir.Function(module, ftype, name)
    _forward(fn, callee)
    return fn


def _shape(fn: ir.Function) -> tuple:
    return (str(fn.ftype), tuple(len(b.instructions) for b in fn.blocks))


def _forward(fn: ir.Function, callee) -> None:
    """`fn`'s body replaced by a tail call of `callee` with its own arguments."""
    fn.blocks = []
    b = ir.IRBuilder(fn.append_basic_block("forward"))
    r = b.call(callee, list(fn.args), tail=True)
    if isinstance(fn.ftype.return_type, ir.VoidType):
        b.ret_void()
    else:
        b.ret(r)
