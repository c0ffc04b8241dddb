"""Pattern rewriting: `RewritePattern`, the `Rewriter` every mutation goes through, and the
`apply_patterns` worklist driver.

A pattern looks at one op and, if it matches, changes the IR through the rewriter and
returns True. The rewriter keeps counts and tells the driver which ops to look at again
(the users of replaced values, the producers of erased ops' operands), so a greedy run
reaches a fixed point without rescanning the whole module.

```python
class DropIdentity(RewritePattern):
    op_names = ("onnx.Identity",)

    def match_and_rewrite(self, op, rewriter):
        rewriter.replace_op(op, [op.operands[0]])
        return True

apply_patterns(module, [DropIdentity()])
```
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Sequence
from typing import ClassVar

from ..ir import Block, Module, Op, Value


class RewritePattern:
    """One local rewrite. Subclasses set `op_names` (None: every op) and override
    `match_and_rewrite`, which must return True exactly when it changed the IR."""

    op_names: ClassVar[tuple[str, ...] | None] = None

    def match_and_rewrite(self, op: Op, rewriter: Rewriter) -> bool:
        raise NotImplementedError


class Rewriter:
    """The only way patterns mutate the IR; counts what it does and feeds the worklist."""

    def __init__(self, on_change=None):
        self.inserted = 0
        self.removed = 0
        self.replaced = 0
        #: ops erased so far (the driver skips them)
        self.erased: set[Op] = set()
        #: called with every op worth another look (apply_patterns feeds its worklist this way)
        self.on_change = on_change or (lambda op: None)

    @property
    def changed(self) -> bool:
        return bool(self.inserted or self.removed or self.replaced)

    def insert_before(self, anchor: Op, new_op: Op) -> Op:
        """Insert `new_op` right before `anchor` in anchor's block."""
        if anchor.parent is None:
            raise ValueError(f"cannot insert before {anchor.name}: it is not in a block")
        anchor.parent.insert_before(anchor, new_op)
        self.inserted += 1
        self.on_change(new_op)
        return new_op

    def replace_all_uses(self, old: Value, new: Value) -> None:
        """Point every use of `old` at `new`; the types must be identical."""
        if old is new:
            return
        if old.type != new.type:
            raise ValueError(f"cannot replace a value of type {old.type} by one of type {new.type}")
        users = old.users
        old.replace_all_uses_with(new)
        for u in users:
            self.on_change(u)

    def replace_op(self, op: Op, new_values: Sequence[Value] | Op) -> None:
        """Replace each result of `op` by the matching new value, then erase `op`.

        `new_values` may be an op: if it is not in a block yet it is inserted before `op`,
        and its results are the replacements. A None entry stands for a result that has
        no uses (erasing `op` fails otherwise).
        """
        if isinstance(new_values, Op):
            if new_values.parent is None:
                self.insert_before(op, new_values)
            new_values = new_values.results
        new_values = list(new_values)
        if len(new_values) != len(op.results):
            raise ValueError(f"replacing {op.name} ({op.loc}): {len(op.results)} results, "
                             f"{len(new_values)} replacements")
        for r, v in zip(op.results, new_values):
            if v is not None:
                self.replace_all_uses(r, v)
        self.replaced += 1
        self.erase_op(op)

    def modified(self, op: Op) -> None:
        """Note that a pattern changed `op` in place (attrs, operands): revisit it and its users."""
        self.on_change(op)
        for r in op.results:
            for u in r.users:
                self.on_change(u)

    def erase_op(self, op: Op) -> None:
        """Erase an op whose results are unused (its nested ops go with it)."""
        producers = [v.owner for v in op.operands if isinstance(v.owner, Op)]
        op.erase()
        self.removed += 1
        self.erased.update(op.walk())
        for p in producers:
            self.on_change(p)


def _walk_block(block: Block) -> Iterable[Op]:
    for op in block.ops:
        yield op
        for r in op.regions:
            for b in r.blocks:
                yield from _walk_block(b)


def apply_patterns(module: Module, patterns: Sequence[RewritePattern], max_iterations: int = 10,
                   rewriter: Rewriter | None = None) -> bool:
    """Apply `patterns` greedily, in program order, nested regions included, until nothing
    matches or `max_iterations` sweeps have run. Returns whether anything changed."""
    by_name: dict[str, list[RewritePattern]] = {}
    generic: list[RewritePattern] = []
    for p in patterns:
        if p.op_names is None:
            generic.append(p)
        else:
            for n in p.op_names:
                by_name.setdefault(n, []).append(p)

    queue: deque[Op] = deque()
    queued: set[Op] = set()

    def push(op: Op) -> None:
        if op not in queued and op.name not in ("return", "yield"):
            queued.add(op)
            queue.append(op)

    rw = rewriter or Rewriter()
    rw.on_change = push
    changed = False
    for _ in range(max_iterations):
        for f in module.functions.values():
            for op in _walk_block(f.body):
                push(op)
        sweep_changed = False
        while queue:
            op = queue.popleft()
            queued.discard(op)
            if op in rw.erased or op.parent is None:
                continue
            for p in by_name.get(op.name, []) + generic:
                if p.match_and_rewrite(op, rw):
                    sweep_changed = True
                    break
        changed |= sweep_changed
        if not sweep_changed:
            break
    return changed
