"""Traits an OpDef declares for the passes that need them (DESIGN: op knowledge lives on
the op): how it treats padded positions (`PadRule`, read by bucketize), which of the
canonical patterns apply to it (`CANONICAL_PATTERNS` and `Neutral`, read by canonicalize)
and its cost (`OpDef.flops`, read by the bucket cost model).

A family file sets them next to its ops, e.g. `set_pad(PadRule("view", shape_operands=(1,)),
"onnx.Reshape")`; adding an op touches only its family file.
"""

from __future__ import annotations

from dataclasses import dataclass

#: the rules bucketize knows (passes/bucketize.py maps each to its handler)
PAD_RULES = ("elementwise", "view", "transpose", "matmul", "gemm", "softmax", "reduce", "mean", "argreduce",
             "layernorm", "concat", "split", "slice", "gather", "expand", "constant_of_shape", "cumsum",
             "batchnorm", "passthrough", "pad", "mask")


#: how an elementwise op combines operand fills that are not all known numbers:
#:   product   a zero times a finite value is zero (Mul)
#:   quotient  finite over a finite, provably nonzero denominator is finite (Div)
#:   select    finite when both arms are finite, whatever the condition (Where)
FILL_ALGEBRA = ("", "product", "quotient", "select")


@dataclass(frozen=True)
class PadRule:
    """How an op treats positions padded up to a bucket bound (see passes/bucketize.py).

    An op without a rule (and not elementwise) is refused by bucketize, by name, when a
    padded dim reaches it."""

    rule: str
    """one of PAD_RULES: the bucketize handler that applies"""
    identity: float | None = None
    """reduce / argreduce: what masked positions must hold (0 for a sum, -inf for a max)"""
    result_fill: float | None = None
    """softmax: what the result holds at padded positions along the axis"""
    finite: bool = False
    """maps finite operands to finite results (elementwise, softmax off the axis)"""
    keeps_zero: bool = False
    """reduce: a zero row stays zero and a finite row finite"""
    shape_operands: tuple[int, ...] = ()
    """operand slots read as a shape (safe at the padded size)"""
    fills: str = ""
    """elementwise: how unknown fills combine, one of FILL_ALGEBRA ("" for none)"""

    def __post_init__(self):
        if self.rule not in PAD_RULES:
            raise ValueError(f"unknown pad rule {self.rule!r} (known: {', '.join(PAD_RULES)})")
        if self.fills not in FILL_ALGEBRA:
            raise ValueError(f"unknown fill algebra {self.fills!r} (known: {', '.join(FILL_ALGEBRA)})")


#: the default of elementwise and broadcast ops
ELEMENTWISE = PadRule("elementwise")
#: elementwise, finite operands give finite results
FINITE_ELEMENTWISE = PadRule("elementwise", finite=True)


#: the canonicalization patterns an op may declare (passes/canonicalize.py implements them):
#:   same-type-identity  the op returns its first operand when the result type is the same
#:   neutral-operand     `x op c` with c all the op's `Neutral` value is x (`Neutral`)
#:   transpose           an identity permutation is dropped, two permutations are composed
#:   dropout             inference-mode dropout is the identity
CANONICAL_PATTERNS = ("same-type-identity", "neutral-operand", "transpose", "dropout")


@dataclass(frozen=True)
class Neutral:
    """A binary op's neutral element: `x + 0`, `x * 1` are x (and `0 + x` when it commutes)."""

    value: float
    commutes: bool


def set_canonical(pattern: str, *names: str, neutral: Neutral | None = None) -> None:
    """Declare that canonical `pattern` applies to each registered op in `names`."""
    if pattern not in CANONICAL_PATTERNS:
        raise ValueError(f"unknown canonical pattern {pattern!r} (known: {', '.join(CANONICAL_PATTERNS)})")
    for d in _opdefs(names):
        d.canonical = (*d.canonical, pattern)
        if neutral is not None:
            d.neutral = neutral


def _opdefs(names):
    from .registry import get_opdef

    for n in names:
        d = get_opdef(n)
        if d is None:
            raise KeyError(f"{n} is not registered")
        yield d


def set_cost(flops, *names: str) -> None:
    """Give each registered op in `names` its cost: `flops(op)` -> the floating-point work
    of one run as a dim expression (multiply-add = 2)."""
    for d in _opdefs(names):
        d.flops = flops


def set_pad(rule: PadRule, *names: str) -> None:
    """Give each registered op in `names` the pad rule `rule`."""
    for d in _opdefs(names):
        d.pad = rule
