"""The dispatcher's binding plan: where each of the model's symbols gets its value from
(an input dim, or a linear dim like 2*s solved for s), and which input dims are checked
against the bound symbols afterwards."""

from __future__ import annotations

from dataclasses import dataclass

import sympy

from onnxcc.errors import CompileError
from onnxcc.ir.dims import canon

from .abi import ArtifactSpec
from .exprs import text


@dataclass
class Binding:
    """Where a symbol's value comes from: value = (input[i].shape[j] - offset) / coeff."""

    symbol: str
    index: int
    input: int
    dim: int
    input_name: str
    coeff: int = 1
    offset: object = 0
    expr: object = None  # the dim expression it was solved from, when coeff/offset are not 1/0

    @property
    def where(self) -> str:
        return f'input "{self.input_name}" dim {self.dim}'

    @property
    def provenance(self) -> str:
        return f"bound by {self.source}"

    @property
    def source(self) -> str:
        """'input "a" dim 1' (or 'input "a" dim 1 = 2*s' for a solved dim)."""
        return self.where if self.expr is None else f"{self.where} = {text(self.expr)}"


@dataclass
class Plan:
    bindings: list[Binding]           # in evaluation order
    checks: list[tuple[int, int, object]]  # (input, dim, expected dim) checked after binding


def plan_bindings(spec: ArtifactSpec) -> Plan:
    index = spec.symbol_index()
    bound: dict[str, Binding] = {}
    order: list[Binding] = []
    pending: list[tuple[int, int, object]] = []
    for i, t in enumerate(spec.inputs):
        for j, d in enumerate(t.shape):
            d = canon(d)
            if isinstance(d, sympy.Symbol) and d.name not in bound:
                b = Binding(d.name, index[d.name], i, j, t.name)
                bound[d.name] = b
                order.append(b)
            else:
                pending.append((i, j, d))
    # Solve linear dims (2*s, s + 1, s + n) for a symbol bound nowhere else.
    solved: set[tuple[int, int]] = set()
    changed = True
    while changed:
        changed = False
        for i, j, d in pending:
            if isinstance(d, int) or (i, j) in solved:
                continue
            free = [s for s in d.free_symbols if s.name not in bound]
            if len(free) != 1:
                continue
            s = free[0]
            e = sympy.expand(d)
            a = e.coeff(s, 1)
            rest = sympy.expand(e - a * s)
            if not (a.is_Integer and a != 0) or s in rest.free_symbols:
                continue
            b = Binding(s.name, index[s.name], i, j, spec.inputs[i].name, int(a), rest, d)
            bound[s.name] = b
            order.append(b)
            solved.add((i, j))
            changed = True
    # run-determined symbols are bound to their upper bound after the others (see _run_dims_doc)
    missing = [s.name for s in spec.symbols if s.name not in bound and s.name not in spec.run_dims
               and s.name not in spec.version_dims and s.name not in spec.data_dims
               and s.name not in spec.cap_dims]
    if missing:
        raise CompileError(
            f"artifact {spec.name}: symbol(s) {', '.join(missing)} cannot be determined from the input "
            f"shapes (each must be an input dim, or a linear dim like 2*s or s + 1)")
    return Plan(order, [(i, j, d) for i, j, d in pending if (i, j) not in solved])
