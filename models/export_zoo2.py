"""Export a third held-out set for tests/data/zoo2/ (OPTIONAL: needs torch, transformers and
torchvision; the test needs none of them).

Hugging Face architectures the earlier sets (tests/data/hf, heldout2, the zoo) do not hold,
random weights and tiny configs: XLNet (relative attention with its own einsums), RoFormer
(sinusoidal rotary), CLIP's vision tower, ConvNeXt v2 (global response norm), MobileViT v2
(separable linear attention), DETR (a ResNet backbone, masks, object queries), Whisper and
Marian as whole encoder-decoders, Wav2Vec2-BERT (a conformer over filterbank features), and
GPTBigCode / Phi-3 decoders stepping over a past KV cache; and models of the earlier sets
exported again at the opsets they were not (TorchScript at 11 and 14, dynamo at 18), whose
lowerings differ (LayerNorm decomposed before 17, no Trilu before 14, dynamo's own
decompositions; transformers' scaled_dot_product_attention exports only from 14). Each entry
lists the kinds it is exported as; a file whose export failed is not written. Needs
`PYTHONPATH=/tmp/tvshim` (torchvision's op schemas) for transformers' image utilities.

    PYTHONPATH=/tmp/tvshim /tmp/tv/bin/python models/export_zoo2.py [--out DIR] [--kinds K,..] [NAME ...]
"""

# ruff: noqa: I001  (tv_shim must be imported before torchvision / transformers)
from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import tv_shim  # noqa: F401  (torchvision's C++ op schemas)
import torch
import transformers as T

sys.path.insert(0, str(Path(__file__).resolve().parent))
import export_tv
from export_common import export_or_report
from heldout2_hf import HF as HELDOUT2, TXT, Last, _dec_entry, _decoder, _image, _text

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "zoo2"
SEQ2SEQ = dict(vocab_size=100, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
               decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64)


class Logits(torch.nn.Module):
    """a seq2seq model's logits from its encoder input and the decoder's ids"""

    def __init__(self, model: torch.nn.Module, enc_kw: str) -> None:
        super().__init__()
        self.m, self.enc_kw = model, enc_kw

    def forward(self, enc, dec):
        return self.m(**{self.enc_kw: enc}, decoder_input_ids=dec).logits


def _detr():
    backbone = T.ResNetConfig(num_channels=3, embedding_size=8, hidden_sizes=[8, 16, 16, 16], depths=[1, 1, 1, 1],
                              out_features=["stage4"])
    cfg = T.DetrConfig(use_timm_backbone=False, backbone_config=backbone, use_pretrained_backbone=False,
                       d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
                       decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, num_queries=5)
    return T.DetrModel(cfg)


def _whisper():
    cfg = T.WhisperConfig(vocab_size=100, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
                          decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, num_mel_bins=16,
                          max_source_positions=32, max_target_positions=32, pad_token_id=0, bos_token_id=1,
                          eos_token_id=2, decoder_start_token_id=1)
    return Logits(T.WhisperForConditionalGeneration(cfg), "input_features")


def _marian():
    cfg = T.MarianConfig(**SEQ2SEQ, pad_token_id=0, decoder_start_token_id=0)
    return Logits(T.MarianMTModel(cfg), "input_ids")


def _ids2(b=2, t=9, d=5):
    return lambda: (torch.randint(1, 100, (b, t)), torch.randint(1, 100, (b, d)))


#: name -> ((module factory, input names, {input: {axis: symbol}}, example inputs), kinds)
MODELS: dict[str, tuple[tuple, tuple[str, ...]]] = {
    "xlnet": (_text(lambda: T.XLNetModel(T.XLNetConfig(vocab_size=100, d_model=32, n_layer=2, n_head=4,
                                                        d_inner=64))), ("ts14", "ts17")),
    "roformer": (_text(lambda: T.RoFormerModel(T.RoFormerConfig(**TXT, embedding_size=32))), ("ts14", "dyn18")),
    "clip_vision": (_image(lambda: T.CLIPVisionModel(T.CLIPVisionConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4, image_size=32,
        patch_size=8)), 32, 32, dyn_hw=False), ("ts14", "dyn18")),
    "convnextv2": (_image(lambda: T.ConvNextV2Model(T.ConvNextV2Config(hidden_sizes=[8, 16], depths=[1, 1],
                                                                        num_stages=2))), ("ts17", "dyn18")),
    # its unfold's inverse (col2im) exports only from opset 18
    "mobilevitv2": (_image(lambda: T.MobileViTV2Model(T.MobileViTV2Config(image_size=64, width_multiplier=0.25))),
                    ("dyn18",)),
    "detr": (_image(_detr, 64, 64), ("ts17",)),
    "whisper": ((_whisper, ["f", "dec"], {"f": {0: "B"}, "dec": {0: "B", 1: "D"}},
                 lambda: (torch.randn(2, 16, 64), torch.randint(1, 100, (2, 5)))), ("ts14", "ts17")),
    "marian": ((_marian, ["ids", "dec"], {"ids": {0: "B", 1: "T"}, "dec": {0: "B", 1: "D"}}, _ids2()),
               ("ts14", "ts17")),
    "w2v2bert": ((lambda: Last(T.Wav2Vec2BertModel(T.Wav2Vec2BertConfig(
        hidden_size=32, num_hidden_layers=1, num_attention_heads=4, intermediate_size=64,
        feature_projection_input_dim=16, conv_depthwise_kernel_size=5, position_embeddings_type="relative_key",
        left_max_position_embeddings=8, right_max_position_embeddings=8)), ("input_features",)),
                  ["f"], {"f": {0: "B", 1: "T"}}, lambda: (torch.randn(2, 20, 16),)), ("ts17",)),
    "bigcode": (_dec_entry(_decoder(T.GPTBigCodeForCausalLM, T.GPTBigCodeConfig, kvh=4, n_embd=32, n_layer=2,
                                    n_head=4, n_positions=128, multi_query=False), kvh=4), ("ts17",)),
    "phi3": (_dec_entry(_decoder(T.Phi3ForCausalLM, T.Phi3Config, pad_token_id=0)), ("ts17",)),
    # earlier sets' architectures at other opsets
    "qwen2": (HELDOUT2["qwen2"], ("ts14",)),
    "falcon": (HELDOUT2["falcon"], ("ts14",)),
    "funnel": (HELDOUT2["funnel"], ("ts14", "dyn18")),
    "beit": (HELDOUT2["beit"], ("ts14",)),
    "hubert": (HELDOUT2["hubert"], ("ts14",)),
    "opt": (_text(lambda: T.OPTForCausalLM(T.OPTConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2,
                                                        num_attention_heads=4, ffn_dim=64, word_embed_proj_dim=32,
                                                        max_position_embeddings=128))), ("ts14", "dyn18")),
    "bloom": (_text(lambda: T.BloomForCausalLM(T.BloomConfig(vocab_size=100, hidden_size=32, n_layer=2,
                                                              n_head=4))), ("ts14",)),
    "deberta": (_text(lambda: T.DebertaV2Model(T.DebertaV2Config(**TXT))), ("ts11", "dyn18")),
    "segformer": (_image(lambda: T.SegformerModel(T.SegformerConfig(
        num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[8, 16], patch_sizes=[7, 3],
        strides=[4, 2], num_attention_heads=[1, 2], mlp_ratios=[2, 2]))), ("ts14", "dyn18")),
}


#: torchvision models of tests/data/tv (models/export_tv.py, same builders) at the opsets that set
#: did not export: opset 11 has Resize / Pad / Squeeze / ReduceSum / Split in their older forms
TV = {"swin_v2_small": ("ts11",), "swin_small": ("ts11",), "convnext_small": ("ts11",),
      "efficientnet_b0_small": ("ts11",), "maxvit_small": ("ts14",)}

#: name -> the least H / W its dynamo export accepts (torch.export proves guards on smaller sizes)
HW_MIN = {"mobilevitv2": 64}


def export(name: str, out: Path, kinds: tuple[str, ...] | None) -> None:
    if name in TV:
        export_tv.export(name, out, kinds or TV[name])
        return
    (make, names, dyn, example), own = MODELS[name]
    torch.manual_seed(0)
    module = make().eval()
    args = example()
    hw = HW_MIN.get(name, 1)
    for kind in kinds or own:
        export_or_report(module, args, out / f"{name}_{kind}.onnx", names, dyn, kind,
                         dim_min=lambda s: hw if s in ("H", "W") else 1)


if __name__ == "__main__":
    warnings.filterwarnings("ignore")
    # eval-mode MultiheadAttention's fused fast path has no TorchScript export rule (as export_tv)
    torch.backends.mha.set_fastpath_enabled(False)
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--kinds", default="", help="override each entry's kinds (ts11,ts14,ts17,dyn18)")
    ap.add_argument("names", nargs="*")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    for n in a.names or [*MODELS, *TV]:
        export(n, a.out, tuple(a.kinds.split(",")) if a.kinds else None)
