"""Export tests/data/torch/posenc_dynamo.onnx (OPTIONAL: needs torch + onnxscript).

A tiny transformer encoder whose positions come from `torch.arange` over the dynamic seq:
an integer arange (learned positions, a Gather), a float arange (sinusoidal positions:
`Range(0.0, Cast(seq), 1.0)`) and a float arange over a computed length
(`Range(0.0, Cast((seq + 1) // 2), 1.0)`). The dynamo exporter turns each into an
onnx.Range over values computed from Shape, which onnxcc must size symbolically.

    python3 -m venv /tmp/torchenv
    /tmp/torchenv/bin/pip install torch onnx onnxscript numpy
    /tmp/torchenv/bin/python models/export_posenc.py [OUTDIR]     # default tests/data/torch
"""

from __future__ import annotations

import math
import sys
from pathlib import Path


def main(out: Path) -> None:
    import torch
    from torch import nn

    torch.manual_seed(0)

    class PosEncoder(nn.Module):
        def __init__(self, d: int = 16, maxlen: int = 64):
            super().__init__()
            self.inp = nn.Linear(d, d)
            self.pos = nn.Embedding(maxlen, d)
            self.layer = nn.TransformerEncoderLayer(d, 2, 32, dropout=0.0, batch_first=True)
            self.out = nn.Linear(d, 4)
            self.d = d

        def forward(self, x):
            s = x.shape[1]
            pos_i = torch.arange(s, device=x.device)  # int arange -> learned positions
            t = torch.arange(s, dtype=torch.float32, device=x.device)  # float arange -> sinusoids
            half = self.d // 2
            freq = torch.exp(torch.arange(0, half, dtype=torch.float32) * (-math.log(10000.0) / half))
            ang = t[:, None] * freq[None, :]
            sincos = torch.cat([torch.sin(ang), torch.cos(ang)], dim=-1)
            h = self.inp(x) + self.pos(pos_i)[None] + sincos[None]
            every_other = torch.arange(0, (s + 1) // 2, dtype=torch.float32)  # a computed length
            return self.out(self.layer(h)).sum(-1) + every_other.sum()

    m = PosEncoder().eval()
    x = torch.randn(2, 7, 16)
    batch, seq = torch.export.Dim("batch", min=1, max=64), torch.export.Dim("seq", min=2, max=64)
    prog = torch.onnx.export(m, (x,), dynamic_shapes={"x": {0: batch, 1: seq}}, input_names=["x"],
                             output_names=["output"], opset_version=18, dynamo=True)
    prog.optimize()
    out.mkdir(parents=True, exist_ok=True)
    prog.save(str(out / "posenc_dynamo.onnx"))


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parents[1] / "tests" / "data" / "torch")
