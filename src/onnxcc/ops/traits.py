"""Traits an OpDef declares for the passes that need them (DESIGN: op knowledge lives on
the op): how it treats padded positions (`PadRule`, read by bucketize) and which of the
shared identity patterns apply to it (`CANONICAL_PATTERNS`, read by canonicalize).

A family file sets them next to its ops, e.g. `set_pad(PadRule("view", shape_operands=(1,)),
"onnx.Reshape")`; adding an op touches only its family file.
"""

from __future__ import annotations

from dataclasses import dataclass

#: the rules bucketize knows (passes/bucketize.py maps each to its handler)
PAD_RULES = ("elementwise", "view", "transpose", "matmul", "gemm", "softmax", "reduce", "mean", "argreduce",
             "layernorm", "concat", "split", "slice", "gather", "expand", "constant_of_shape", "cumsum",
             "batchnorm", "passthrough", "pad", "mask")


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

    def __post_init__(self):
        if self.rule not in PAD_RULES:
            raise ValueError(f"unknown pad rule {self.rule!r} (known: {', '.join(PAD_RULES)})")


#: the default of elementwise and broadcast ops
ELEMENTWISE = PadRule("elementwise")
#: elementwise, finite operands give finite results
FINITE_ELEMENTWISE = PadRule("elementwise", finite=True)


def set_pad(rule: PadRule, *names: str) -> None:
    """Give each registered op in `names` the pad rule `rule`."""
    from .registry import get_opdef

    for n in names:
        d = get_opdef(n)
        if d is None:
            raise KeyError(f"set_pad: {n} is not registered")
        d.pad = rule
