"""Export torch.jit.script loops whose carried tensor grows for tests/data/loops/ (OPTIONAL:
needs torch). The loops real models write: `for i in range(x.size(0))` (a trip count from an
input dim) and a while loop on a data condition (greedy decoding's shape), each appending a
row to the carried tensor with torch.cat. Exported by the TorchScript exporter (dynamo=False,
opset 17), which keeps them as ONNX Loops; the dynamo exporter is tried too and its outcome
printed (torch 2.13 traces a Python loop at the example's size: no Loop node is left).

    /tmp/tv/bin/python models/export_loops.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "loops"


class CatSym(torch.nn.Module):
    def forward(self, x):
        out = x
        for _ in range(x.size(0)):
            out = torch.cat([out, out[-1:] * 0.5 + 1.0], 0)
        return out.relu()


class Greedy(torch.nn.Module):
    def forward(self, x, lim):
        out = x
        while bool(out.sum() < lim):
            out = torch.cat([out, out[-1:] + 1.0], 0)
        return out


class Decode(torch.nn.Module):
    """Greedy token decoding: ids [b, l] grows along dim 1 until the last token is `stop` (or
    40 tokens): nothing bounds the state over the inputs (a loop capacity, ops/loop_capacity.py)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.emb = torch.nn.Embedding(11, 8)
        self.out = torch.nn.Linear(8, 11)

    def forward(self, x, stop):
        ids = x
        while bool(ids[0, -1] != stop) and ids.size(1) < 40:
            nxt = self.out(self.emb(ids).mean(1)).argmax(-1, keepdim=True)
            ids = torch.cat([ids, nxt], 1)
        return ids


class Collect(torch.nn.Module):
    """A while loop growing two states: rows of x, and a list of sums that starts empty."""

    def forward(self, x, lim):
        out = x
        sums = torch.zeros(0)
        while bool(out.abs().sum() < lim):
            out = torch.cat([out, out[-1:] * 1.5 + 0.25], 0)
            sums = torch.cat([sums, out.sum().reshape(1)], 0)
        return out, sums


MODELS = {
    "cat_sym": (CatSym, lambda: (torch.randn(3, 2),), ["x"]),
    "greedy": (Greedy, lambda: (torch.rand(3, 2), torch.tensor(20.0)), ["x", "lim"]),
    "decode": (Decode, lambda: (torch.tensor([[3, 5]]), torch.tensor(0)), ["x", "stop"]),
    "collect": (Collect, lambda: (torch.rand(2, 2), torch.tensor(30.0)), ["x", "lim"]),
}
#: dynamic axes of the input x beyond its dim 0 (decode's token count)
MORE_AXES = {"decode": {1: "l"}}


def export(name: str) -> None:
    cls, args, names = MODELS[name]
    outs = ["y", "s"] if name == "collect" else ["y"]
    dyn = {"x": {0: "n", **MORE_AXES.get(name, {})}, **({"y": {0: "m"}} if name in ("cat_sym", "greedy") else {})}
    torch.onnx.export(torch.jit.script(cls()), args(), str(OUT / f"{name}.onnx"), input_names=names,
                      output_names=outs, dynamic_axes=dyn, dynamo=False, opset_version=17)
    try:
        prog = torch.onnx.export(cls(), args(), input_names=names, output_names=outs, dynamo=True,
                                 dynamic_shapes=({0: torch.export.Dim("n")},) + (None,) * (len(names) - 1))
        ops = sorted({n.op_type for n in prog.model_proto.graph.node})
        print(f"{name}: dynamo exported ops {ops} ({'a Loop' if 'Loop' in ops else 'no Loop'})")
    except Exception as e:  # NOTE: only reported: the dynamo exporter refuses data-dependent loops
        print(f"{name}: dynamo export failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}")


if __name__ == "__main__":
    OUT.mkdir(parents=True, exist_ok=True)
    for n in sys.argv[1:] or list(MODELS):
        export(n)
