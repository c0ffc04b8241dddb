"""Lower one IR function (a version) to a kernel program via each op's `OpDef.lower`.

Buffers: parameters become program inputs, returned values program outputs (a result
that is returned is written straight into the output buffer), every other result a
workspace temp. `cc.const` becomes a const buffer, `cc.dims` a tiny i64 compute over the
symbols, and results a lowering declared as views (Reshape...) take no memory at all.
"""

from __future__ import annotations

import numpy as np

from ..errors import CompileError, UnsupportedOp
from ..ir import DType, Function, Module, Op, Value
from ..kernel import KernelProgram, Var, dim_to_expr
from ..ops import require_opdef
from ..ops.cc import const_array
from ..ops.lowering import LowerCtx


class _Lowerer:
    def __init__(self, module: Module, f: Function, name: str, values: dict | None):
        self.module, self.f = module, f
        self.values = values or {}
        self.program = KernelProgram.new(name, [s.name for s in module.symbols])
        self.buf: dict[int, object] = {}  # id(Value) -> Buffer
        self.counter = 0
        self.out_slot: dict[int, int] = {}  # id(Value) -> output index it is written to

    def fresh(self, hint: str) -> str:
        self.counter += 1
        safe = "".join(c if c.isalnum() else "_" for c in hint)[:24] or "t"
        return f"{safe}_{self.counter}"

    def run(self) -> KernelProgram:
        p, f = self.program, self.f
        for k, a in enumerate(f.params):
            self.buf[id(a)] = p.input(f"in{k}", a.type.dtype, a.type.shape)
        ret = f.return_op
        outs = [p.output(f"out{k}", v.type.dtype, v.type.shape) for k, v in enumerate(ret.operands)]
        for k, v in enumerate(ret.operands):
            if isinstance(v.owner, Op) and id(v) not in self.out_slot and v.owner.name != "cc.const":
                self.out_slot[id(v)] = k
        for op in f.body.ops:
            if op is ret:
                break
            first = len(p.body)
            self.lower_op(op, outs)
            _label(p, first, op.loc or op.name)
        # outputs not written by their producer: params, consts, repeats, views
        for k, v in enumerate(ret.operands):
            if self.out_slot.get(id(v)) == k and self.buf[id(v)] is outs[k]:
                continue
            src = self.buf[id(v)]
            p.compute(outs[k], lambda *ix, src=src: src[ix] if ix else src[()])
        p.verify()
        return p

    def lower_op(self, op: Op, outs) -> None:
        if op.regions:
            raise UnsupportedOp(op.opname, op.dialect, op.loc, "control flow is not compiled to native code yet")
        for r in op.results:
            self.check_bound(op, r)
        if op.name == "cc.const":
            arr = const_array(op, self.module)
            data = np.ascontiguousarray(arr).reshape(np.shape(arr))  # NOTE: keeps 0-d arrays 0-d
            self.buf[id(op.result)] = self.program.const(self.fresh(op.loc or "const"), data)
            return
        targets = [outs[self.out_slot[id(r)]] if id(r) in self.out_slot else None for r in op.results]
        if op.name == "cc.dims":
            dims = list(op.attrs["dims"])
            out = targets[0] or self.program.temp(self.fresh("dims"), DType.i64, op.result.type.shape)
            if op.result.type.rank == 0:
                self.program.compute(out, dim_to_expr(dims[0]))
            else:
                i = Var("i")
                expr = dim_to_expr(dims[-1])
                for j in range(len(dims) - 2, -1, -1):
                    expr = _select_eq(i, j, dim_to_expr(dims[j]), expr)
                self.program.compute(out, lambda i: expr if len(dims) > 1 else dim_to_expr(dims[0]))
            self.buf[id(op.result)] = out
            return
        d = require_opdef(op)
        results = [t or self.program.temp(self.fresh(op.loc or op.opname), r.type.dtype, r.type.shape)
                   for t, r in zip(targets, op.results)]
        ins = [self.buf[id(v)] for v in op.operands]
        consts = [_const_of(v, self.module) for v in op.operands]
        known = [self.values.get(v) for v in op.operands]
        ctx = LowerCtx(op, self.program, ins, results, consts, known, self.fresh)
        d.lower(ctx)
        for ri, oi in ctx.aliases.items():
            r = op.results[ri]
            src = ins[oi]
            if targets[ri] is not None:  # an output must own its memory: copy
                shape = r.type.shape
                self.program.compute(targets[ri], _copy_reshaped(src, shape))
                results[ri] = targets[ri]
            else:  # the temp made for this result is unused: drop it so it takes no workspace
                self.program.buffers.pop(results[ri].name, None)
                results[ri] = self.program.view(self.fresh(op.loc or "view"), src, r.type.shape)
        for r, b in zip(op.results, results):
            self.buf[id(r)] = b

    def check_bound(self, op: Op, r: Value) -> None:
        bound = {s.name for a in self.f.params for s in a.type.symbols()}
        bound |= {str(k) for k in self.f.subs}
        extra = sorted(s.name for s in r.type.symbols() if s.name not in bound)
        if extra:
            raise CompileError(f'node "{op.loc}" ({op.name}): result shape {r.type} depends on data '
                               f"({', '.join(extra)} known only at run time); not compiled yet")


def _label(p: KernelProgram, first: int, label: str) -> None:
    """Tag the computes one op lowered to with its name (`Compute.origin`; fusion reports it)."""
    import dataclasses

    from ..kernel import Compute

    for k in range(first, len(p.body)):
        s = p.body[k]
        if isinstance(s, Compute) and not s.origin:
            p.body[k] = dataclasses.replace(s, origin=(label,))


def _select_eq(i, j, a, b):
    from ..kernel import select

    return select(i.eq(j), a, b)


def _copy_reshaped(src, shape):
    """A compute body copying `src` into a buffer of `shape` with the same element count."""
    from ..kernel import flatten_index, unflatten_index

    def body(*ix):
        if tuple(src.shape) == tuple(shape):
            return src[ix] if ix else src[()]
        flat = flatten_index(list(ix), shape)
        return src[tuple(unflatten_index(flat, src.shape))] if src.shape else src[()]

    return body


def _const_of(v: Value, module: Module):
    if isinstance(v.owner, Op) and v.owner.name == "cc.const":
        return const_array(v.owner, module)
    return None


def lower_function(module: Module, f: Function, name: str, values: dict | None = None) -> KernelProgram:
    """The kernel program of one function (usually one version of @main)."""
    return _Lowerer(module, f, name, values).run()
