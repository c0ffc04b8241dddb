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


MODELS = {
    "cat_sym": (CatSym, lambda: (torch.randn(3, 2),), ["x"]),
    "greedy": (Greedy, lambda: (torch.rand(3, 2), torch.tensor(20.0)), ["x", "lim"]),
}


def export(name: str) -> None:
    cls, args, names = MODELS[name]
    dyn = {"x": {0: "n"}, "y": {0: "m"}}
    torch.onnx.export(torch.jit.script(cls()), args(), str(OUT / f"{name}.onnx"), input_names=names,
                      output_names=["y"], dynamic_axes=dyn, dynamo=False, opset_version=17)
    try:
        prog = torch.onnx.export(cls(), args(), input_names=names, output_names=["y"], dynamo=True,
                                 dynamic_shapes=({0: torch.export.Dim("n")},) + (None,) * (len(names) - 1))
        ops = sorted({n.op_type for n in prog.model_proto.graph.node})
        print(f"{name}: dynamo exported ops {ops} ({'a Loop' if 'Loop' in ops else 'no Loop'})")
    except Exception as e:  # NOTE: only reported: the dynamo exporter refuses data-dependent loops
        print(f"{name}: dynamo export failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}")


if __name__ == "__main__":
    OUT.mkdir(parents=True, exist_ok=True)
    for n in sys.argv[1:] or list(MODELS):
        export(n)
