"""Export a second held-out set for tests/data/heldout2/ (OPTIONAL: needs torch and
transformers; the test needs neither).

Architectures and layers the earlier sets (tests/data/hf, tests/data/torch_more, the zoo) do not
hold, with random weights and tiny configs: Hugging Face decoders run one step over a past KV
cache with an attention mask (GPT-J, GPT-Neo, Falcon, Mistral, Qwen2, Gemma, StarCoder2), T5's
encoder-decoder, encoders (XLM-RoBERTa, Funnel, SqueezeBERT, MobileBERT, ConvBERT, LayoutLM),
vision towers (BEiT, LeViT, PoolFormer, MobileNetV1/V2, YOLOS, VideoMAE's 5-D input), speech
encoders (HuBERT, SEW, Wav2Vec2-Conformer, Speech2Text), and hand-written torch modules of
layers not yet covered (models/heldout2_layers.py). Each is exported by the legacy TorchScript
exporter (`NAME_ts17.onnx`, opset 17) and by the dynamo exporter (`NAME_dyn18.onnx`, weights
as external data beside it) with symbolic dims; a file whose export failed is not written.

    /tmp/tv/bin/python models/export_heldout2.py [--out DIR] [NAME ...]
"""

from __future__ import annotations

import argparse
import inspect
import sys
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from heldout2_hf import HF
from heldout2_layers import LAYERS

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "heldout2"
MODELS = {**LAYERS, **HF}


def _by_signature(module: torch.nn.Module, per: list) -> tuple:
    """dynamic_shapes in forward's structure: one entry per named argument, the rest of the
    inputs as one tuple for a `*args` parameter"""
    out: list = []
    for p in inspect.signature(module.forward).parameters.values():
        if p.kind == p.VAR_POSITIONAL:
            out.append(tuple(per[len(out):]))
            return tuple(out)
        out.append(per[len(out)])
    return tuple(out)


def export(name: str, out: Path, kinds: tuple[str, ...]) -> None:
    make, names, dyn, example = MODELS[name]
    torch.manual_seed(0)
    module = make().eval()
    args = example()
    for kind in kinds:
        path = out / f"{name}_{kind}.onnx"
        try:
            with torch.no_grad():
                if kind == "ts17":
                    torch.onnx.export(module, args, str(path), input_names=names, dynamic_axes=dyn,
                                      opset_version=17, dynamo=False)
                else:
                    # in forward's structure (the wrappers take *args), one Dim per symbol name
                    syms = {s for d in dyn.values() for s in d.values()}
                    dims = {s: torch.export.Dim(s, min=1, max=4096) for s in sorted(syms)}
                    per = [{ax: dims[s] for ax, s in dyn.get(n, {}).items()} or None for n in names]
                    shapes = _by_signature(module, per)
                    torch.onnx.export(module, args, str(path), input_names=names, dynamic_shapes=shapes,
                                      opset_version=int(kind[3:]), dynamo=True)
            print("exported", path, flush=True)
        except Exception as e:  # an exporter's refusal: report it, write nothing
            lines = str(e).splitlines()
            why = " | ".join(lines[:1] + [ln for ln in lines if "rror" in ln][:3])[:600]
            print("export failed", path, type(e).__name__, why, flush=True)


if __name__ == "__main__":
    warnings.filterwarnings("ignore")
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--kinds", default="ts17,dyn18")
    ap.add_argument("names", nargs="*")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    for n in a.names or MODELS:
        export(n, a.out, tuple(a.kinds.split(",")))
