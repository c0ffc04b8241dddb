"""Export small Hugging Face transformers models (random weights, tiny configs) for
tests/data/hf/ (OPTIONAL: needs torch and transformers; the test needs neither).

Architectures the model zoo does not hold, through the legacy TorchScript exporter at opset 17
with dynamic batch / sequence or image size: causal LMs with ALiBi (BLOOM), learned and rotary
positions (OPT, GPT-NeoX, Phi), an encoder-decoder (BART), disentangled relative attention
(DeBERTa-v2), MPNet, CLIP's text tower, and vision models: ConvNeXt, ResNet, RegNet (grouped
convs), MobileViT, Swin (shifted windows), SegFormer, DINOv2 (interpolated position
embeddings). Files whose export failed are not written.

    /tmp/torchenv/bin/pip install torch transformers onnx
    /tmp/torchenv/bin/python models/export_hf.py [NAME ...]
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import torch
import transformers as T

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "hf"

TXT = dict(
    vocab_size=100,
    hidden_size=32,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=64,
    max_position_embeddings=128,
)
MODELS = {
    "phi": lambda: T.PhiForCausalLM(T.PhiConfig(**TXT)),
    "gptneox": lambda: T.GPTNeoXForCausalLM(T.GPTNeoXConfig(**TXT)),
    "bloom": lambda: T.BloomForCausalLM(T.BloomConfig(vocab_size=100, hidden_size=32, n_layer=2, n_head=4)),
    "opt": lambda: T.OPTForCausalLM(
        T.OPTConfig(
            vocab_size=100,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            ffn_dim=64,
            max_position_embeddings=128,
            word_embed_proj_dim=32,
        )
    ),
    "bart": lambda: T.BartModel(
        T.BartConfig(
            vocab_size=100,
            d_model=32,
            encoder_layers=1,
            decoder_layers=1,
            encoder_attention_heads=4,
            decoder_attention_heads=4,
            encoder_ffn_dim=64,
            decoder_ffn_dim=64,
            max_position_embeddings=128,
        )
    ),
    "deberta": lambda: T.DebertaV2Model(T.DebertaV2Config(**TXT)),
    "mpnet": lambda: T.MPNetModel(T.MPNetConfig(**TXT)),
    "clip_text": lambda: T.CLIPTextModel(
        T.CLIPTextConfig(
            vocab_size=100,
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=64,
            max_position_embeddings=128,
        )
    ),
}
IMG = {
    "convnext_hf": lambda: T.ConvNextModel(
        T.ConvNextConfig(num_channels=3, hidden_sizes=[8, 16], depths=[1, 1], num_stages=2)
    ),
    "resnet_hf": lambda: T.ResNetModel(
        T.ResNetConfig(num_channels=3, embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], layer_type="bottleneck")
    ),
    "mobilevit": lambda: T.MobileViTModel(
        T.MobileViTConfig(
            image_size=64,
            hidden_sizes=[16, 24, 32],
            neck_hidden_sizes=[8, 8, 16, 16, 24, 32, 64],
            num_attention_heads=2,
        )
    ),
    "swin": lambda: T.SwinModel(
        T.SwinConfig(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1], num_heads=[2, 2], window_size=2)
    ),
    "segformer": lambda: T.SegformerModel(
        T.SegformerConfig(
            num_encoder_blocks=2,
            depths=[1, 1],
            sr_ratios=[2, 1],
            hidden_sizes=[8, 16],
            patch_sizes=[7, 3],
            strides=[4, 2],
            num_attention_heads=[1, 2],
            mlp_ratios=[2, 2],
        )
    ),
    "dinov2": lambda: T.Dinov2Model(
        T.Dinov2Config(
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=64,
            image_size=32,
            patch_size=8,
        )
    ),
    "regnet": lambda: T.RegNetModel(
        T.RegNetConfig(embedding_size=8, hidden_sizes=[8, 16], depths=[1, 1], groups_width=8)
    ),
}


class Wrap(torch.nn.Module):
    """the model's last hidden state (or logits) as the one output"""

    def __init__(self, model, key):
        super().__init__()
        self.m, self.key = model, key

    def forward(self, *a):
        o = self.m(*a) if self.key != "bart" else self.m(input_ids=a[0], decoder_input_ids=a[1])
        return o.last_hidden_state if getattr(o, "last_hidden_state", None) is not None else o.logits


def export(name: str) -> None:
    torch.manual_seed(0)
    m = Wrap((MODELS.get(name) or IMG[name])().eval(), name)
    if name in MODELS:
        args = (torch.randint(1, 100, (2, 9)),) + ((torch.randint(1, 100, (2, 5)),) if name == "bart" else ())
        names = ["ids"] + (["dec"] if name == "bart" else [])
        dyn = {n: {0: "B", 1: "T" if n == "ids" else "D"} for n in names}
    else:
        args, names, dyn = (torch.randn(2, 3, 64, 64),), ["x"], {"x": {0: "N", 2: "H", 3: "W"}}
    path = OUT / f"{name}_ts17.onnx"
    try:
        with torch.no_grad():
            torch.onnx.export(m, args, str(path), input_names=names, dynamic_axes=dyn, opset_version=17, dynamo=False)
        print("exported", path)
    except Exception as e:  # the exporter's refusal: report it, write nothing
        print("export failed", path, type(e).__name__, str(e).splitlines()[0][:200] if str(e) else "")


if __name__ == "__main__":
    warnings.filterwarnings("ignore")
    OUT.mkdir(parents=True, exist_ok=True)
    for name in sys.argv[1:] or [*MODELS, *IMG]:
        export(name)
