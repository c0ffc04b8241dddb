"""attention-chain: exporters' MatMul -> [scale, mask] -> Softmax -> MatMul becomes one cc.sdpa.

Every torch / Hugging Face export writes attention as

    x = MatMul(Q, Kt)                      Kt often Transpose(K, perm)
    x = Mul(x, c) | Div(x, c)              the scale (a constant, or computed from a dim)
    x = Add(x, mask) | Where(m, x, fill)   additive masks, boolean masks, causal masks
    y = MatMul(Softmax(x, axis=-1), V)

which lowers to a GEMM, a softmax and a GEMM over a `[.., S, T]` score tensor. Where the
backend runs attention fused over key blocks (`Backend.fused_attention`: kernel/flash.py,
codegen/cpu/flash.py), this pass replaces the chain by `cc.sdpa` (ops/sdpa.py), whose
lowering never stores the scores. The op keeps every step of the chain as it was (the same
ops on the same operands, in the same order), so the results differ only by the order of
the additions in the dot products and the softmax sum, as any GEMM schedule's do.

Rewritten only when that is provably the same computation and pays:
- every intermediate (the scores, each step's result, the softmax) has exactly one user, the
  next op of the chain (else it is needed anyway, and storing it is what fusion avoids);
- the Softmax is over the last axis, feeds the second MatMul as its left operand, and no
  step operand broadcasts the scores bigger (a step's result has the scores' type);
- the second MatMul's batch dims are the scores' (V broadcasts into them, not the reverse);
- f32 or f64 (half precision rounds each intermediate, which the fused kernel would not);
- V's head size is static and at most kernel/flash.py's MAX_ROW (the accumulator row);
- the fused form is measured faster (benchmarks/attention_chain.py): a causal chain from 64
  keys; heads of 64 and up from `min_kv` keys (static, or a symbol whose range allows that
  many: measured at most 1.2x slower on short rows, faster from 512 keys, and no O(S*T)
  buffer); heads of at most 16 (both Q's and V's) from 64 keys or a symbolic count (the
  CPU runs them with the query rows in vector lanes); other narrower heads from
  NARROW_FACTOR times `min_kv`, only when the key count is proved that long (they lose up
  to 1.7x on short rows).

A chain whose masks are proved causal (attention_causal.py: every key after the query's row
adds nothing) gets `causal = 0`, and the mask steps that are the identity up to the diagonal
go: the kernel reads no mask and skips the key blocks after each block of rows.

It runs after the version passes, so each version decides on its own extents: an exact
`seq == 128` version keeps the GEMM chain while the generic one is fused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ..ir import DType, Module, Op, Value
from ..kernel.flash import LANES_MAX_HEAD, MAX_ROW
from ..ops.attention import FLASH_MIN_KV
from .attention_causal import causal_steps
from .base import ModulePass, PassContext, register_pass
from .dce import dce
from .rewrite import RewritePattern, Rewriter, apply_patterns

_MAX_STEPS = 8
"""the longest chain of score steps followed back from the Softmax"""

CAUSAL_MIN_KV = 64
"""the fewest keys for which a causal chain runs fused (one key block: measured faster from
64 keys on, heads of 16 and 64; benchmarks/attention_chain.py --causal)"""
LANES_MIN_KV = 64
"""the fewest keys for which heads of at most kernel/flash.py's LANES_MAX_HEAD (Q's and V's)
run fused, with the query rows in vector lanes (codegen/cpu/flash_lanes.py; measured 1 thread,
4 heads, CPU-clock medians, benchmarks/attention_chain.py's chain, fused / chain: head 8 0.86
at 64 keys, 0.57 at 256, 0.44 at 1599; head 16 0.87 at 64, 0.86 at 256, 0.70 at 1599, 1.0 at
17); a symbolic count takes the fused form (the audio encoders' frames: 1599 at 16000
samples; the zoo's bert / gpt2 / vit rows at 1 to 128 tokens are no slower)"""
NARROW_FACTOR = 8
"""heads narrower than 64 (Q's or V's) need this many times `min_kv` keys before the fused
form wins (measured: head 16 fused/chain 1.20 at 512 keys, 0.89 at 2048; head 32 1.01 at
512, 0.97 at 2048); with a symbolic key count they stay on the GEMM chain unless its range
proves the keys many (zoo gpt2 / llama, heads 16 / 8: fused 1.5-1.7x slower at 128 keys)"""


@dataclass(frozen=True)
class Chain:
    """A matched chain: the scores MatMul, the steps after it and their operands."""

    scores: Op
    steps: tuple[str, ...]
    operands: tuple[Value, ...]


def _step_sides(op: Op) -> list[tuple[int, str, tuple[int, ...]]]:
    """(position of the scores, the step it is, positions of the step's own operands) for
    each way `op` can be a score step."""
    if len(op.operands) != 2 and op.name != "onnx.Where":
        return []
    if op.name in ("onnx.Mul", "onnx.Add"):  # IEEE products and sums commute exactly
        name = op.name[5:].lower()
        return [(0, name, (1,)), (1, name, (0,))]
    if op.name in ("onnx.Div", "onnx.Sub"):  # only x / c and x - c
        return [(0, op.name[5:].lower(), (1,))]
    if op.name == "onnx.Where" and len(op.operands) == 3:
        return [(1, "where_keep", (0, 2)), (2, "where_fill", (0, 1))]
    return []


def trace_scores(v: Value, depth: int = 0) -> Chain | None:
    """The chain ending in `v` (the Softmax's input): back through score steps to a MatMul,
    each value on the way used once, or None."""
    op = v.owner
    if depth > _MAX_STEPS or not isinstance(op, Op) or len(v.uses) != 1 or len(op.results) != 1:
        return None
    if op.name == "onnx.MatMul":
        return Chain(op, (), ())
    for xi, name, others in _step_sides(op):
        x = op.operands[xi]
        if x.type != v.type or any(op.operands[o] is x for o in others):
            continue  # a step that grows the scores, or reads them twice (x * x)
        inner = trace_scores(x, depth + 1)
        if inner is not None:
            return Chain(inner.scores, (*inner.steps, name),
                         (*inner.operands, *(op.operands[o] for o in others)))
    return None


class _FuseChain(RewritePattern):
    op_names = ("onnx.Softmax",)

    def __init__(self, module: Module, min_kv: int):
        self.module, self.min_kv = module, min_kv

    def match_and_rewrite(self, op: Op, rewriter: Rewriter) -> bool:
        x = op.results[0]
        rank = x.type.rank
        if rank < 2 or op.attrs.get("axis", -1) not in (-1, rank - 1) or len(x.uses) != 1:
            return False
        pv = x.uses[0].op
        if pv.name != "onnx.MatMul" or x.uses[0].index != 0 or len(pv.operands) != 2:
            return False
        v = pv.operands[1]
        chain = trace_scores(op.operands[0])
        if chain is None or not self._fits(chain, x, v, pv):
            return False
        causal = causal_steps(self.module, chain.steps, chain.operands, x.type.rank)
        if not self._pays(chain, x, v, causal is not None):
            return False
        q, kt = chain.scores.operands
        k, perm = kt, None
        t = kt.owner
        if isinstance(t, Op) and t.name == "onnx.Transpose" and len(t.operands) == 1:
            # read K where it lies: the kernel indexes K through the permutation
            k = t.operands[0]
            perm = tuple(t.attrs.get("perm", tuple(reversed(range(k.type.rank)))))
        steps, operands = chain.steps, chain.operands
        attrs: dict = {}
        if causal is not None:
            # keys after the row are masked out: blocks skipped (kernel/flash.py); the steps
            # that change nothing before the diagonal go
            attrs["causal"] = 0
            steps, operands, attrs["masked"] = causal[0], causal[1], list(causal[2])
        attrs["steps"] = steps
        if perm is not None:
            attrs["k_perm"] = perm
        y = pv.results[0]
        new = Op("cc.sdpa", [q, k, v, *operands], [y.type], attrs, loc=pv.loc or op.loc,
                 result_names=[y.name])
        rewriter.insert_before(pv, new)
        rewriter.replace_op(pv, [new.results[0]])
        return True

    def _fits(self, chain: Chain, probs: Value, v: Value, pv: Op) -> bool:
        """What cc.sdpa and the fused kernel take (module doc)."""
        q, kt = chain.scores.operands
        st = probs.type
        if st.dtype not in (DType.f32, DType.f64) or q.type.rank < 2 or kt.type.rank < 2 or v.type.rank < 2:
            return False
        head = v.type.shape[-1]
        if not isinstance(head, int) or not 0 < head <= MAX_ROW:
            return False
        out = pv.results[0].type.shape
        if len(out) != st.rank:
            return False
        prove = self.module.symbols.prove_eq
        return all(prove(a, b) is True for a, b in zip(out[:-2], st.shape[:-2], strict=True))

    def _pays(self, chain: Chain, probs: Value, v: Value, causal: bool) -> bool:
        """Whether the fused form is measured faster at this key count (module doc)."""
        kv = probs.type.shape[-1]
        symbols = self.module.symbols
        if causal:  # half the blocks skipped: faster from one block of keys on
            return symbols.prove_le(kv, CAUSAL_MIN_KV - 1) is not True
        d = chain.scores.operands[0].type.shape[-1]
        heads = [h for h in (d, v.type.shape[-1]) if isinstance(h, int)]
        if len(heads) == 2 and max(heads) <= LANES_MAX_HEAD:
            # rows in vector lanes: fused from LANES_MIN_KV keys, and with a symbolic count
            return symbols.prove_le(kv, LANES_MIN_KV - 1) is not True
        narrow = len(heads) < 2 or min(heads) < 64
        min_kv = self.min_kv * (NARROW_FACTOR if narrow else 1)
        if symbols.prove_le(kv, min_kv - 1) is True:
            return False  # static, or a symbol whose range (--dim) keeps it short
        # a symbol that may be short: fused where short rows lose little (heads of 64 and up)
        return not narrow or symbols.prove_le(min_kv, kv) is True


def fuse_attention_chains(module: Module, min_kv: int = FLASH_MIN_KV) -> bool:
    changed = apply_patterns(module, [_FuseChain(module, min_kv)])
    if changed:
        dce(module)
    return changed


@register_pass
@dataclass(frozen=True)
class AttentionChainPass(ModulePass):
    """MatMul -> [scale, masks] -> Softmax -> MatMul chains whose intermediates have no
    other users become cc.sdpa (attention fused over key blocks)."""

    name: ClassVar[str] = "attention-chain"
    min_kv: int = FLASH_MIN_KV
    """the fewest keys (when static) for which the fused form pays"""

    def run(self, module: Module, ctx: PassContext) -> bool:
        return fuse_attention_chains(module, self.min_kv)
