"""Export a tiny BERT-style encoder and a byte CNN to ONNX for tests/data/encoders/
(OPTIONAL: needs torch and transformers).

Not run by the tests: the .onnx files it writes are committed, and
tests/e2e/test_exported_encoders.py only needs onnx + onnxruntime. Rebuild with

    python3 -m venv /tmp/torchenv
    /tmp/torchenv/bin/pip install torch transformers onnx onnxscript numpy
    /tmp/torchenv/bin/python models/export_encoders.py [OUTDIR]     # default tests/data/encoders

Models (issue 13: real encoders with symbolic batch and seq failed to compile):
  bert            transformers.BertModel from a small BertConfig (hidden 48, 2 layers, 4 heads,
                  vocab 120), random seeded weights; inputs input_ids, attention_mask
                  [batch, seq] (int64), outputs last_hidden_state, pooler_output
  bytecnn         Embedding(256, 16) -> Conv1d -> ReLU -> Conv1d -> ReLU -> max over seq -> Linear;
                  input bytes [batch, seq] (int64), output logits [batch, 5]
Each with the legacy TorchScript exporter (`dynamo=False`) and the dynamo exporter
(`dynamo=True`, file names ending in `_dynamo`).
"""

from __future__ import annotations

import sys
import traceback
from pathlib import Path

import torch
from torch import nn

OPSET = 17
MAX_POS = 512


def bert() -> nn.Module:
    from transformers import BertConfig, BertModel

    cfg = BertConfig(vocab_size=120, hidden_size=48, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=96, max_position_embeddings=MAX_POS, type_vocab_size=2)
    torch.manual_seed(0)
    model = BertModel(cfg, add_pooling_layer=True)
    model.eval()
    return model


class BertWrap(nn.Module):
    """Plain tuple outputs (the exporters flatten ModelOutput anyway; this names them)."""

    def __init__(self):
        super().__init__()
        self.bert = bert()

    def forward(self, input_ids, attention_mask):
        out = self.bert(input_ids=input_ids, attention_mask=attention_mask)
        return out.last_hidden_state, out.pooler_output


class ByteCnn(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(1)
        self.emb = nn.Embedding(256, 16)
        self.c1 = nn.Conv1d(16, 32, kernel_size=5, padding=2)
        self.c2 = nn.Conv1d(32, 32, kernel_size=3, padding=1)
        self.fc = nn.Linear(32, 5)

    def forward(self, x):
        h = self.emb(x).transpose(1, 2)  # [batch, 16, seq]
        h = torch.relu(self.c1(h))
        h = torch.relu(self.c2(h))
        h = torch.amax(h, dim=2)
        return self.fc(h)


def _bert_args():
    ids = torch.randint(0, 120, (2, 9))
    mask = torch.ones(2, 9, dtype=torch.int64)
    mask[1, 6:] = 0
    return (ids, mask)


MODELS = {
    "bert": (BertWrap, _bert_args, ["input_ids", "attention_mask"], ["last_hidden_state", "pooler_output"],
             {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"}}),
    "bytecnn": (ByteCnn, lambda: (torch.randint(0, 256, (2, 11)),), ["bytes"], ["logits"],
                {"bytes": {0: "batch", 1: "seq"}}),
}


def export_one(name: str, out: Path, dynamo: bool) -> Path:
    cls, make_args, inames, onames, axes = MODELS[name]
    model = cls().eval()
    args = make_args()
    path = out / (f"{name}_dynamo.onnx" if dynamo else f"{name}.onnx")
    with torch.no_grad():
        if dynamo:
            dims = {"batch": torch.export.Dim("batch", min=1, max=1 << 20),
                    "seq": torch.export.Dim("seq", min=1, max=MAX_POS)}
            dyn = tuple({k: dims[v] for k, v in axes[n].items()} for n in inames)
            prog = torch.onnx.export(model, args, dynamo=True, input_names=inames, output_names=onames,
                                     dynamic_shapes=dyn, opset_version=18)
            prog.save(str(path))
        else:
            dyn = {**axes, **{o: {0: "batch"} for o in onames}}
            torch.onnx.export(model, args, str(path), dynamo=False, input_names=inames, output_names=onames,
                              dynamic_axes=dyn, opset_version=OPSET)
    return path


def main(argv):
    default = Path(__file__).resolve().parents[1] / "tests" / "data" / "encoders"
    out = Path(argv[1]) if len(argv) > 1 else default
    out.mkdir(parents=True, exist_ok=True)
    failed = 0
    for name in MODELS:
        for dynamo in (False, True):
            try:
                p = export_one(name, out, dynamo)
                print(f"wrote {p} ({p.stat().st_size} bytes)")
            except Exception:
                failed += 1
                print(f"FAILED {name} dynamo={dynamo}:", file=sys.stderr)
                traceback.print_exc()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
