"""The causal mask as torch exports it, shared by the attention tests' graphs."""

from __future__ import annotations

from onnx import NodeProto, helper


def torch_causal_mask(query: str, out: str = "causal") -> list[NodeProto]:
    """Nodes making `out` [S, S] from the sequence axis (2) of `query`: 0 on and below the
    diagonal, `lowest` above it (Trilu of ones, Equal 0, Where). The graph must hold the
    scalar initializers `one`, `zero` and `lowest`."""
    n = helper.make_node
    return [n("Shape", [query], ["qs"], start=2, end=3), n("Concat", ["qs", "qs"], ["tt"], axis=0),
            n("Expand", ["one", "tt"], ["ones"]), n("Trilu", ["ones"], ["tril"], upper=0),
            n("Equal", ["tril", "zero"], ["above"]), n("Where", ["above", "lowest", "zero"], [out])]
