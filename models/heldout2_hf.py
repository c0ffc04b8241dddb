"""Hugging Face architectures for models/export_heldout2.py, random weights and tiny configs.

Decoders run ONE step over a past KV cache: inputs `ids` [B, T], `mask` [B, M] (M = P + T,
zeros for left padding) and the past keys / values of each layer [B, KVH, P, HD]; outputs the
logits and layer 0's present key. Encoders take `ids` [B, T] (and `mask`), vision towers `x`
[N, 3, H, W] (VideoMAE `x` [N, 4, 3, 32, 32]), speech encoders a waveform `w` [B, L] or
filterbank features [B, T, 16].

Each entry: name -> (module factory, input names, {input: {axis: symbol}}, example inputs).
"""

from __future__ import annotations

import torch
import transformers as T
from torch import nn

TXT = dict(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
           max_position_embeddings=128)
LAYERS, KVH, HD = 2, 2, 8


class DecoderStep(nn.Module):
    """one decoding step: the past keys / values become a DynamicCache inside forward"""

    def __init__(self, model):
        super().__init__()
        self.m = model

    def forward(self, ids, mask, *past):
        cache = T.DynamicCache(config=self.m.config)
        for i in range(LAYERS):
            cache.update(past[2 * i], past[2 * i + 1], i)
        out = self.m(input_ids=ids, attention_mask=mask, past_key_values=cache, use_cache=True)
        return out.logits, out.past_key_values.layers[0].keys


class Last(nn.Module):
    """the model's last hidden state (or logits) as the one output"""

    def __init__(self, model, kw=("input_ids",)):
        super().__init__()
        self.m, self.kw = model, kw

    def forward(self, *a):
        o = self.m(**dict(zip(self.kw, a, strict=True)))
        return o.last_hidden_state if getattr(o, "last_hidden_state", None) is not None else o.logits


def _decoder(cls, cfg_cls, kvh=KVH, **kw):
    def make():
        cfg = cfg_cls(**{**TXT, "num_key_value_heads": kvh, **kw})
        return DecoderStep(cls(cfg))
    return make


def _dec_inputs(kvh=KVH, hd=HD):
    def example():
        b, t, p = 2, 3, 5
        mask = torch.ones(b, p + t, dtype=torch.long)
        mask[1, :2] = 0
        past = [torch.randn(b, kvh, p, hd) for _ in range(2 * LAYERS)]
        return (torch.randint(1, 100, (b, t)), mask, *past)
    return example


def _dec_entry(make, kvh=KVH, hd=HD):
    past = [f"{kv}{i}" for i in range(LAYERS) for kv in ("pk", "pv")]
    dyn = {"ids": {0: "B", 1: "T"}, "mask": {0: "B", 1: "M"}, **{n: {0: "B", 2: "P"} for n in past}}
    return make, ["ids", "mask", *past], dyn, _dec_inputs(kvh, hd)


def _ids(*extra):
    def example():
        ids = torch.randint(1, 100, (2, 9))
        return (ids, *[f(ids) for f in extra])
    return example


def _text(make, kw=("input_ids",), extra=()):
    names = {"input_ids": "ids", "attention_mask": "mask", "bbox": "bbox", "decoder_input_ids": "dec"}
    inputs = [names[k] for k in kw]
    dyn = {n: {0: "B", 1: "D" if n == "dec" else "T"} for n in inputs}
    return lambda: Last(make(), kw), inputs, dyn, _ids(*extra)


def _image(make, h=64, w=64, dyn_hw=True):
    dyn = {"x": {0: "N", 2: "H", 3: "W"} if dyn_hw else {0: "N"}}
    return lambda: Last(make(), ("pixel_values",)), ["x"], dyn, lambda: (torch.randn(2, 3, h, w),)


AUDIO = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, conv_dim=(16, 16),
             conv_kernel=(10, 3), conv_stride=(5, 2), num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4)


def _audio(make):
    return lambda: Last(make(), ("input_values",)), ["w"], {"w": {0: "B", 1: "L"}}, lambda: (torch.randn(2, 1600),)


HF = {
    "gptj": _dec_entry(_decoder(T.GPTJForCausalLM, T.GPTJConfig, kvh=4, n_embd=32, n_layer=LAYERS, n_head=4,
                                rotary_dim=4, n_positions=128), kvh=4),
    "gptneo": _dec_entry(_decoder(T.GPTNeoForCausalLM, T.GPTNeoConfig, kvh=4, num_layers=LAYERS, num_heads=4,
                                  attention_types=[[["global", "local"], 1]], window_size=4), kvh=4),
    "falcon": _dec_entry(_decoder(T.FalconForCausalLM, T.FalconConfig, kvh=4, new_decoder_architecture=False,
                                  multi_query=False), kvh=4),
    "mistral": _dec_entry(_decoder(T.MistralForCausalLM, T.MistralConfig, sliding_window=None)),
    "qwen2": _dec_entry(_decoder(T.Qwen2ForCausalLM, T.Qwen2Config)),
    "gemma": _dec_entry(_decoder(T.GemmaForCausalLM, T.GemmaConfig, head_dim=HD)),
    "starcoder2": _dec_entry(_decoder(T.Starcoder2ForCausalLM, T.Starcoder2Config, sliding_window=None)),
    "t5": _text(lambda: T.T5Model(T.T5Config(vocab_size=100, d_model=32, d_kv=8, d_ff=64, num_layers=1,
                                              num_decoder_layers=1, num_heads=4)),
                ("input_ids", "decoder_input_ids"), (lambda ids: ids[:, :5],)),
    "xlmr": _text(lambda: T.XLMRobertaModel(T.XLMRobertaConfig(**TXT)), ("input_ids", "attention_mask"),
                  (lambda ids: (ids > 20).long(),)),
    "funnel": _text(lambda: T.FunnelModel(T.FunnelConfig(vocab_size=100, block_sizes=[1, 1], d_model=32, n_head=4,
                                                         d_head=8, d_inner=64))),
    "squeezebert": _text(lambda: T.SqueezeBertModel(T.SqueezeBertConfig(**TXT, embedding_size=32))),
    "mobilebert": _text(lambda: T.MobileBertModel(T.MobileBertConfig(
        vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
        embedding_size=16, intra_bottleneck_size=16, true_hidden_size=16, num_feedforward_networks=2))),
    "convbert": _text(lambda: T.ConvBertModel(T.ConvBertConfig(**TXT, embedding_size=32, head_ratio=2,
                                                               conv_kernel_size=3))),
    "layoutlm": _text(lambda: T.LayoutLMModel(T.LayoutLMConfig(**TXT)), ("input_ids", "bbox"),
                      (lambda ids: torch.randint(0, 100, (*ids.shape, 4)).sort(-1).values,)),
    "beit": _image(lambda: T.BeitModel(T.BeitConfig(**{**TXT, "image_size": 32, "patch_size": 8,
                                                       "use_relative_position_bias": True}))),
    "levit": _image(lambda: T.LevitModel(T.LevitConfig(image_size=64, hidden_sizes=[16, 32, 48],
                                                       num_attention_heads=[1, 2, 3], depths=[1, 1, 1],
                                                       key_dim=[8, 8, 8], patch_size=16)),
                    dyn_hw=False),
    "poolformer": _image(lambda: T.PoolFormerModel(T.PoolFormerConfig(hidden_sizes=[8, 16], depths=[1, 1],
                                                                      num_encoder_blocks=2, patch_sizes=[7, 3],
                                                                      strides=[4, 2], padding=[2, 1]))),
    "mobilenetv1": _image(lambda: T.MobileNetV1Model(T.MobileNetV1Config(depth_multiplier=0.25, image_size=64))),
    "mobilenetv2": _image(lambda: T.MobileNetV2Model(T.MobileNetV2Config(depth_multiplier=0.25, image_size=64))),
    "yolos": _image(lambda: T.YolosModel(T.YolosConfig(**{**TXT, "image_size": [32, 32], "patch_size": 8,
                                                          "num_detection_tokens": 5}))),
    "videomae": (lambda: Last(T.VideoMAEModel(T.VideoMAEConfig(**{**TXT, "image_size": 32, "patch_size": 16,
                                                                   "num_frames": 4, "tubelet_size": 2})),
                              ("pixel_values",)),
                 ["x"], {"x": {0: "N"}}, lambda: (torch.randn(2, 4, 3, 32, 32),)),
    "hubert": _audio(lambda: T.HubertModel(T.HubertConfig(**AUDIO))),
    "sew": _audio(lambda: T.SEWModel(T.SEWConfig(**AUDIO, squeeze_factor=2))),
    "w2v2conformer": _audio(lambda: T.Wav2Vec2ConformerModel(T.Wav2Vec2ConformerConfig(
        **AUDIO, conv_depthwise_kernel_size=5, position_embeddings_type="rotary"))),
    "data2vec_audio": _audio(lambda: T.Data2VecAudioModel(
        T.Data2VecAudioConfig(**{**AUDIO, "num_conv_pos_embeddings": 5}))),
    "speech2text": (lambda: Last(T.Speech2TextModel(T.Speech2TextConfig(
        vocab_size=100, d_model=32, encoder_layers=1, decoder_layers=1, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, input_feat_per_channel=16,
        conv_channels=16, max_source_positions=256, max_target_positions=64)).encoder, ("input_features",)),
                    ["f"], {"f": {0: "B", 1: "T"}}, lambda: (torch.randn(2, 40, 16),)),
}
