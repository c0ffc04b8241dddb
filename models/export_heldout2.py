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
import sys
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from export_common import export_or_report
from heldout2_hf import HF
from heldout2_layers import LAYERS

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "heldout2"
MODELS = {**LAYERS, **HF}


def export(name: str, out: Path, kinds: tuple[str, ...]) -> None:
    make, names, dyn, example = MODELS[name]
    torch.manual_seed(0)
    module = make().eval()
    args = example()
    for kind in kinds:
        export_or_report(module, args, out / f"{name}_{kind}.onnx", names, dyn, kind)


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
