"""Export small PyTorch models to ONNX for tests/data/torch/ (OPTIONAL: needs torch).

Not run by the tests: the .onnx files it writes are committed, and
tests/e2e/test_torch_exported.py only needs onnx + onnxruntime. Rebuild with

    python3 -m venv /tmp/torchenv
    /tmp/torchenv/bin/pip install torch onnx onnxscript numpy
    /tmp/torchenv/bin/python models/export_torch.py [OUTDIR]     # default tests/data/torch

Each model is exported with the legacy TorchScript exporter (`dynamo=False`, what many
users still run) and, where it works, with the dynamo exporter (`dynamo=True`, file names
ending in `_dynamo`). Dynamic axes are named `batch`, `seq`, `H`, `W`. Weights are seeded
and every file stays well under 1 MB.
"""

from __future__ import annotations

import sys
import traceback
from pathlib import Path

import torch
from torch import nn

OPSET = 17


class Transformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=128, batch_first=True)

    def forward(self, x):
        return self.layer(x)


class Lstm(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(16, 32, num_layers=2, batch_first=True)

    def forward(self, x):
        y, (h, c) = self.rnn(x)
        return y, h, c


class BiGru(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.GRU(16, 24, num_layers=1, batch_first=True, bidirectional=True)

    def forward(self, x):
        y, h = self.rnn(x)
        return y, h


class Cond(nn.Module):
    """torch.cond on a data-dependent predicate (dynamo exporter only) -> ONNX If."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        def yes(x):
            return torch.relu(self.lin(x)) * 2.0

        def no(x):
            return torch.sigmoid(x) - 1.0

        return torch.cond(x.sum() > 0, yes, no, (x,))


class WhileLoop(nn.Module):
    """A data-dependent while loop, scripted with torch.jit.script -> ONNX Loop (legacy exporter)."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        h = x
        i = 0
        while bool(h.abs().max() > 0.05) and i < 20:
            h = torch.tanh(self.lin(h)) * 0.5
            i += 1
        return h


class Cnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, stride=1, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1),
        )
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        return self.fc(torch.flatten(self.body(x), 1))


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(32, 64)
        self.ln = nn.LayerNorm(64)
        self.fc2 = nn.Linear(64, 64)
        self.fc3 = nn.Linear(64, 16)

    def forward(self, x):
        h = nn.functional.gelu(self.fc1(x), approximate="tanh")
        h = self.ln(h)
        h = nn.functional.gelu(self.fc2(h), approximate="none")
        return self.fc3(h)


def _randn(*shape):
    return torch.randn(*shape)


# name -> (module factory, example inputs, input names, output names, dynamic axes per input/output)
MODELS = {
    "transformer": (Transformer, lambda: (_randn(2, 5, 64),), ["x"], ["y"],
                    {"x": {0: "batch", 1: "seq"}, "y": {0: "batch", 1: "seq"}}),
    "lstm": (Lstm, lambda: (_randn(2, 5, 16),), ["x"], ["y", "h", "c"],
             {"x": {0: "batch", 1: "seq"}, "y": {0: "batch", 1: "seq"}, "h": {1: "batch"}, "c": {1: "batch"}}),
    "bigru": (BiGru, lambda: (_randn(2, 5, 16),), ["x"], ["y", "h"],
              {"x": {0: "batch", 1: "seq"}, "y": {0: "batch", 1: "seq"}, "h": {1: "batch"}}),
    "cond": (Cond, lambda: (_randn(3, 8),), ["x"], ["y"], {"x": {0: "batch"}, "y": {0: "batch"}}),
    "while_loop": (WhileLoop, lambda: (_randn(3, 8),), ["x"], ["y"], {"x": {0: "batch"}, "y": {0: "batch"}}),
    "cnn": (Cnn, lambda: (_randn(2, 3, 12, 10),), ["x"], ["y"],
            {"x": {0: "batch", 2: "H", 3: "W"}, "y": {0: "batch"}}),
    "mlp_gelu": (Mlp, lambda: (_randn(2, 7, 32),), ["x"], ["y"],
                 {"x": {0: "batch", 1: "seq"}, "y": {0: "batch", 1: "seq"}}),
}


def _dynamo_shapes(args, names, axes):
    from torch.export import Dim

    dims = {}
    shapes = []
    for name, _ in zip(names, args):
        spec = {}
        for ax, sym in axes.get(name, {}).items():
            dims.setdefault(sym, Dim(sym, min=1, max=4096))
            spec[ax] = dims[sym]
        shapes.append(spec)
    return tuple(shapes)


def export_one(name, out: Path, dynamo: bool) -> Path | None:
    factory, make_args, inames, onames, axes = MODELS[name]
    torch.manual_seed(0)
    model = factory().eval()
    args = make_args()
    path = out / (f"{name}_dynamo.onnx" if dynamo else f"{name}.onnx")
    if name == "cond" and not dynamo:
        return None  # torch.cond needs the dynamo exporter
    if name == "while_loop":
        if dynamo:
            return None  # a data-dependent Python while loop cannot be traced by torch.export
        model = torch.jit.script(model)
    if dynamo:
        with torch.no_grad():
            onnx_program = torch.onnx.export(model, args, dynamo=True, input_names=inames, output_names=onames,
                                             dynamic_shapes=_dynamo_shapes(args, inames, axes), opset_version=18,
                                             external_data=False)
        onnx_program.save(str(path), external_data=False)
    else:
        # no torch.no_grad() here: under no_grad an eval-mode TransformerEncoderLayer takes its
        # fused fast path (aten::_transformer_encoder_layer_fwd), which the legacy exporter cannot export
        torch.onnx.export(model, args, str(path), dynamo=False, input_names=inames, output_names=onames,
                          dynamic_axes=axes, opset_version=OPSET, do_constant_folding=True)
    return path


def export_unfolded(name, out: Path) -> Path:
    """Legacy export without constant folding: BatchNormalization (and the exporter's raw
    shape arithmetic) stay in the graph instead of being folded into Conv."""
    factory, make_args, inames, onames, axes = MODELS[name]
    torch.manual_seed(0)
    model = factory().eval()
    for m in model.modules():  # non-trivial running statistics, so BatchNorm does something
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 2.0)
    path = out / f"{name}_nofold.onnx"
    torch.onnx.export(model, make_args(), str(path), dynamo=False, input_names=inames, output_names=onames,
                      dynamic_axes=axes, opset_version=OPSET, do_constant_folding=False)
    return path


def main(argv):
    out = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parents[1] / "tests" / "data" / "torch"
    out.mkdir(parents=True, exist_ok=True)
    for name in MODELS:
        for dynamo in (False, True):
            try:
                p = export_one(name, out, dynamo)
                if p is not None:
                    print(f"wrote {p} ({p.stat().st_size} bytes)")
            except Exception:
                print(f"FAILED {name} dynamo={dynamo}:", file=sys.stderr)
                traceback.print_exc(limit=3)
    for name in ("cnn", "transformer"):
        p = export_unfolded(name, out)
        print(f"wrote {p} ({p.stat().st_size} bytes)")


if __name__ == "__main__":
    main(sys.argv)
