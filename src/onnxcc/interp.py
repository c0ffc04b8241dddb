"""The numpy reference interpreter over the IR: the oracle every pass is checked against.

`run(module, inputs)` binds the symbols from the inputs' dims (first occurrence binds,
later ones must agree), then walks the function's ops in order, calling each op's
`OpDef.reference`. Regions (If / Loop / Scan bodies) run through `run_block`.
"""

from __future__ import annotations

import numpy as np
import sympy

from .errors import GuardError, OnnxccError
from .ir import Block, Function, Module, evaluate
from .ops import RefCtx, require_opdef


class Interpreter:
    def __init__(self, module: Module):
        self.module = module

    def run(self, inputs, function: Function | None = None) -> list[np.ndarray]:
        f = function or self.module.main
        if isinstance(inputs, dict):
            missing = [a.name for a in f.params if a.name not in inputs]
            if missing:
                raise OnnxccError(f"missing inputs: {', '.join(missing)}")
            args = [inputs[a.name] for a in f.params]
        else:
            args = list(inputs)
        if len(args) != len(f.params):
            raise OnnxccError(f"@{f.name} takes {len(f.params)} inputs, got {len(args)}")
        args = [np.asarray(a) for a in args]
        env = bind_symbols(f, args)
        env.update({str(k): int(v) for k, v in f.subs.items()})
        return self.run_block(f.body, args, env)

    def run_block(self, block: Block, args: list[np.ndarray], env: dict[str, int]) -> list[np.ndarray]:
        vals: dict[int, np.ndarray] = {id(a): np.asarray(x) for a, x in zip(block.args, args)}
        for op in block.ops:
            if op.name in ("return", "yield"):
                return [vals[id(v)] for v in op.operands]
            ins = [vals[id(v)] for v in op.operands]
            d = require_opdef(op)
            try:
                outs = d.reference(RefCtx(op, env, self), *ins)
            except OnnxccError:
                raise
            except Exception as e:
                raise OnnxccError(f"while interpreting {op.name} ({op.loc or 'no loc'}): "
                                  f"{type(e).__name__}: {e}") from e
            if len(outs) != len(op.results):
                raise OnnxccError(f"{op.name} ({op.loc}): reference returned {len(outs)} results, "
                                  f"expected {len(op.results)}")
            for r, o in zip(op.results, outs):
                o = np.asarray(o)
                if o.dtype != r.type.dtype.np:
                    o = o.astype(r.type.dtype.np)
                vals[id(r)] = o
        return []


def bind_symbols(f: Function, args: list[np.ndarray]) -> dict[str, int]:
    """Bind each symbol from the first input dim that is exactly it; check the rest."""
    env: dict[str, int] = {}
    for a, x in zip(f.params, args):
        if x.ndim != a.type.rank:
            raise GuardError(f'input "{a.name}": expected rank {a.type.rank}, got {x.ndim}')
        for i, d in enumerate(a.type.shape):
            if isinstance(d, sympy.Symbol) and d.name not in env:
                env[d.name] = int(x.shape[i])
    for a, x in zip(f.params, args):
        for i, d in enumerate(a.type.shape):
            if d is None:
                continue
            free = [] if isinstance(d, int) else [s.name for s in d.free_symbols if s.name not in env]
            if free:
                continue
            want = evaluate(d, env)
            if want != x.shape[i]:
                raise GuardError(f'input "{a.name}" dim {i}: expected {d} = {want}, got {x.shape[i]}')
    return env


def run(module: Module, inputs, function: Function | None = None) -> list[np.ndarray]:
    return Interpreter(module).run(inputs, function)
