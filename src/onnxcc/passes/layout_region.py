"""The machinery nhwc-region and qnhwc-region share: find connected sets of ops that may run
channels-last, and rewrite one such set with one layout change at each of its ends.

A pass subclasses `RegionFinder` (which ops are eligible, through which operands they join)
and `RegionRewriter` (the per-op rewrite, and how a [N, 1, 1, C] exit's shape constant is
made); what a region must hold to pay, and the per-op folds, stay in the pass's own file.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..ir import Block, Module, Op, TensorType, Value
from ..ops.conv_nhwc import TO_NCHW, TO_NHWC
from .dce import dce


def permuted(t: TensorType) -> TensorType:
    """a 4-D [N, C, H, W] type's channels-last twin [N, H, W, C]"""
    return TensorType(t.dtype, tuple(t.shape[p] for p in TO_NHWC))


def unit_plane(t: TensorType) -> bool:
    """[N, C, 1, 1] with a static C: channels-last the same elements in the same order"""
    return t.shape[2] == 1 and t.shape[3] == 1 and isinstance(t.shape[1], int)


class RegionFinder:
    """The regions of one block: union-find over its eligible ops, joined where one reads
    another's result at a position `links` names."""

    def __init__(self, block: Block, module: Module):
        self.module = module
        self.ops = [op for op in block.ops if self.eligible(op)]
        self.index = {id(op): k for k, op in enumerate(self.ops)}
        self.parent = list(range(len(self.ops)))

    def eligible(self, op: Op) -> bool:
        raise NotImplementedError

    def links(self, op: Op) -> list[int]:
        """the operand positions through which `op` joins the region of the value's maker"""
        raise NotImplementedError

    def find(self, k: int) -> int:
        while self.parent[k] != k:
            self.parent[k] = self.parent[self.parent[k]]
            k = self.parent[k]
        return k

    def groups(self) -> list[list[Op]]:
        """every connected set of eligible ops, each in block order (in order of its first op)"""
        for op in self.ops:
            for k in self.links(op):
                owner = op.operands[k].owner
                if isinstance(owner, Op) and id(owner) in self.index:
                    a, b = self.find(self.index[id(op)]), self.find(self.index[id(owner)])
                    self.parent[a] = b
        out: dict[int, list[Op]] = {}
        for op in self.ops:
            out.setdefault(self.find(self.index[id(op)]), []).append(op)
        return list(out.values())


class RegionRewriter:
    """Rewrites one region of a block (its ops in block order): `rewrite` makes each op's
    channels-last twin and records it in `new`; values from outside enter through one
    Transpose each, values read outside leave through one."""

    def __init__(self, block: Block, module: Module, ops: list[Op]):
        self.block, self.module, self.ops = block, module, ops
        self.members = {id(op) for op in ops}
        self.new: dict[int, Value] = {}       # id(old value) -> its channels-last twin
        self.entries: dict[int, Value] = {}   # id(outside value) -> its transposed copy

    def run(self) -> None:
        for op in self.ops:
            self.rewrite(op)
        for op in self.ops:
            self.exit(op)
        for op in reversed(self.ops):
            op.erase()

    def rewrite(self, op: Op) -> None:
        raise NotImplementedError

    def plane_shape(self, arr: np.ndarray, op: Op, anchor: Op) -> Value:
        """the shape constant `arr` of a unit-plane exit's Reshape, made before `anchor`"""
        raise NotImplementedError

    def operand(self, v: Value, user: Op) -> Value:
        """`v` channels-last: its twin in the region, or one Transpose per outside value"""
        if id(v) in self.new:
            return self.new[id(v)]
        if id(v) not in self.entries:
            t = Op("onnx.Transpose", [v], [permuted(v.type)], {"perm": list(TO_NHWC)}, loc=user.loc,
                   result_names=[f"{v.name}_nhwc" if v.name else ""])
            self.block.insert_before(user, t)
            self.entries[id(v)] = t.results[0]
        return self.entries[id(v)]

    def exit(self, op: Op) -> None:
        """Uses of `op`'s result outside the region read it back in NCHW."""
        old = op.results[0]
        outside = [u for u in old.uses if id(u.op) not in self.members]
        if not outside:
            return
        new = self.new[id(old)]
        anchor = new.owner
        assert isinstance(anchor, Op)
        if old.type.rank == 2 or unit_plane(old.type):
            # [N, 1, 1, C] and [N, C, 1, 1] (or a pool's [N, C] without its dims) hold their
            # elements in the same order: a Reshape, a view, where a Transpose is a compute that
            # fusion would inline a pool into (its reduction then strided over the channels
            # again); Reshape's 0 keeps N
            dims = [0, old.type.shape[1]] + [1, 1] * (old.type.rank == 4)
            shape = self.plane_shape(np.array(dims, np.int64), op, anchor)
            t = Op("onnx.Reshape", [new, shape], [old.type], {}, loc=op.loc, result_names=[old.name])
        else:
            t = Op("onnx.Transpose", [new], [old.type], {"perm": list(TO_NCHW)}, loc=op.loc,
                   result_names=[old.name])
        t.parent = self.block
        self.block.ops.insert(self.block.ops.index(anchor) + 1, t)
        for u in outside:
            u.op.set_operand(u.index, t.results[0])


def rewrite_regions(module: Module, regions: Callable[[Block], list[list[Op]]],
                    rewriter: type[RegionRewriter]) -> bool:
    """Rewrite every region `regions` finds in each function's body; dead ops (the constants
    the old ops read) are dropped after."""
    changed = False
    for fn in module.functions.values():
        block = fn.body
        for ops in regions(block):
            rewriter(block, module, ops).run()
            changed = True
    if changed:
        dce(module)
    return changed
