"""The float models models/export_quant.py derives its quantized, float16 and old-opset files
from (needs torch and transformers; run under /tmp/tv/bin/python):

  bert_ts17       a BERT-style encoder (transformers, tiny random config), ids + mask [B, T]
  convnet_ts17    a small conv net: conv/BN/ReLU, strided and depthwise convs, a residual Add,
                  pooling, Linear; x [N, 3, H, W]
  lstm_ts17       a two-layer LSTM with a Linear head; x [B, T, 16]
  oldops_tsK      Upsample (nearest x2), slices, Pad, Split, Squeeze / Unsqueeze, exported at
                  opset K = 9, 10, 11 (their old attribute forms)
  ARCH_dec_past   an encoder-decoder's decoder step over a past KV cache (ARCH = whisper, bart,
                  t5, marian): dec [B, 1], enc [B, S, D], then per layer the self-attention past
                  key / value [B, H, P, HD] and the cross-attention key / value [B, H, S, HD];
                  outputs the logits and the new self-attention keys / values
  ARCH_dec_first  the first step of the same decoder (no past): dec [B, T], enc [B, S, D];
                  outputs the logits and every present key / value (self and cross)

Each is written as NAME.onnx into the directory given (default /tmp/quantgen/float).

    PYTHONPATH=/tmp/tvshim /tmp/tv/bin/python models/quant_torch.py [--out DIR] [NAME ...]
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

import torch

try:  # the torchvision shim of this machine's torch environment (transformers imports torchvision)
    import tv_shim  # noqa: F401  # pyright: ignore[reportMissingImports]
except ImportError:
    pass
import transformers as T
from torch import nn
from torch.nn import functional as F

LAYERS, HEADS, D = 2, 4, 32


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU())
        self.c2 = nn.Sequential(nn.Conv2d(16, 32, 3, stride=2, padding=1), nn.ReLU6())
        self.dw = nn.Sequential(nn.Conv2d(32, 32, 3, padding=1, groups=32), nn.ReLU())
        self.pw = nn.Conv2d(32, 32, 1)
        self.head = nn.Linear(32, 10)

    def forward(self, x):
        y = self.c2(self.c1(x))
        y = F.max_pool2d(y + self.pw(self.dw(y)), 2)
        return self.head(F.adaptive_avg_pool2d(y, 1).flatten(1))


class Lstm(nn.Module):
    def __init__(self):
        super().__init__()
        self.rnn = nn.LSTM(16, 32, num_layers=2, batch_first=True)
        self.head = nn.Linear(32, 8)

    def forward(self, x):
        return self.head(self.rnn(x)[0])


class OldOps(nn.Module):
    """ops whose attribute forms changed after opset 9-11: Upsample, Slice, Pad, Split, Squeeze"""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 8, 3, padding=1)

    def forward(self, x):
        y = F.interpolate(self.conv(x), scale_factor=2.0, mode="nearest")
        a, b = torch.split(y, [3, 5], dim=1)
        a = F.pad(a[:, :, 1:, :-1], (1, 0, 0, 1), value=0.5)
        m = b.mean(dim=1, keepdim=True).squeeze(1).unsqueeze(1)
        return torch.cat([a, m], dim=1).relu()


class DecoderStep(nn.Module):
    """one decoder step; with `past` the caches enter as tensors and become an
    EncoderDecoderCache inside forward, as the exporters of encoder-decoders write it"""

    def __init__(self, model, past: bool):
        super().__init__()
        self.m, self.past = model, past

    def forward(self, dec, enc, *kv):
        cache = T.EncoderDecoderCache(T.DynamicCache(), T.DynamicCache())
        if self.past:
            for i in range(LAYERS):
                cache.self_attention_cache.update(kv[4 * i], kv[4 * i + 1], i)
                cache.cross_attention_cache.update(kv[4 * i + 2], kv[4 * i + 3], i)
                cache.is_updated[i] = True
        out = self.m(decoder_input_ids=dec, encoder_outputs=(enc,), past_key_values=cache, use_cache=True)
        pkv = out.past_key_values
        outs = [out.logits]
        for i in range(LAYERS):
            outs += [pkv.self_attention_cache.layers[i].keys, pkv.self_attention_cache.layers[i].values]
            if not self.past:
                outs += [pkv.cross_attention_cache.layers[i].keys, pkv.cross_attention_cache.layers[i].values]
        return tuple(outs)


def _seq2seq(arch: str):
    common = dict(vocab_size=100, d_model=D, encoder_layers=1, decoder_layers=LAYERS, encoder_attention_heads=HEADS,
                  decoder_attention_heads=HEADS, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64)
    if arch == "bart":
        return T.BartForConditionalGeneration(T.BartConfig(**common))
    if arch == "marian":
        return T.MarianMTModel(T.MarianConfig(**common, pad_token_id=0, decoder_start_token_id=0))
    if arch == "whisper":
        return T.WhisperForConditionalGeneration(T.WhisperConfig(
            **common, num_mel_bins=16, max_source_positions=32, max_target_positions=64, pad_token_id=0,
            bos_token_id=1, eos_token_id=2, decoder_start_token_id=1, suppress_tokens=[], begin_suppress_tokens=[]))
    return T.T5ForConditionalGeneration(T.T5Config(vocab_size=100, d_model=D, d_kv=D // HEADS, d_ff=64, num_layers=1,
                                                   num_decoder_layers=LAYERS, num_heads=HEADS))


def _decoder(arch: str, past: bool):
    def make():
        return DecoderStep(_seq2seq(arch), past)

    kv = [f"{n}{i}" for i in range(LAYERS) for n in ("sk", "sv", "ck", "cv")] if past else []
    outs = ["logits"] + [f"present_{n}{i}" for i in range(LAYERS)
                         for n in (("sk", "sv") if past else ("sk", "sv", "ck", "cv"))]
    dyn = {"dec": {0: "B", 1: "T"}, "enc": {0: "B", 1: "S"},
           **{n: {0: "B", 2: "P" if n.startswith("s") else "S"} for n in kv},
           "logits": {0: "B", 1: "T"}, **{n: {0: "B", 2: "Q" if "_s" in n else "S"} for n in outs[1:]}}

    def example():
        b, s, p, t = 2, 6, 3, (1 if past else 2)
        caches = []
        for _ in range(LAYERS if past else 0):
            caches += [torch.randn(b, HEADS, p, D // HEADS), torch.randn(b, HEADS, p, D // HEADS),
                       torch.randn(b, HEADS, s, D // HEADS), torch.randn(b, HEADS, s, D // HEADS)]
        return (torch.randint(1, 100, (b, t)), torch.randn(b, s, D), *caches)
    return make, ["dec", "enc", *kv], outs, dyn, example


def _plain(make, names, dyn, example, ydims=None):
    """one output `y` whose dims are those of the first input's, or `ydims`"""
    return make, names, ["y"], {**dyn, "y": ydims or dyn[names[0]]}, example


MODELS = {
    "bert_ts17": _plain(lambda: _Last(T.BertModel(T.BertConfig(vocab_size=100, hidden_size=D, num_hidden_layers=2,
                                                               num_attention_heads=HEADS, intermediate_size=64,
                                                               max_position_embeddings=64))),
                        ["ids", "mask"], {"ids": {0: "B", 1: "T"}, "mask": {0: "B", 1: "T"}},
                        lambda: (torch.randint(1, 100, (2, 7)), torch.ones(2, 7, dtype=torch.long))),
    "convnet_ts17": _plain(ConvNet, ["x"], {"x": {0: "N", 2: "H", 3: "W"}}, lambda: (torch.randn(2, 3, 32, 32),),
                           {0: "N"}),
    "lstm_ts17": _plain(Lstm, ["x"], {"x": {0: "B", 1: "T"}}, lambda: (torch.randn(2, 5, 16),)),
    **{f"oldops_ts{k}": _plain(OldOps, ["x"], {"x": {0: "N", 2: "H", 3: "W"}}, lambda: (torch.randn(2, 4, 8, 8),),
                               {0: "N", 2: "H2", 3: "W2"})
       for k in (9, 10, 11)},
    **{f"{a}_dec_{kind}": _decoder(a, kind == "past") for a in ("whisper", "bart", "t5", "marian")
       for kind in ("past", "first")},
}


class _Last(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.m = model

    def forward(self, ids, mask):
        return self.m(input_ids=ids, attention_mask=mask).last_hidden_state


def export(name: str, out: Path) -> None:
    make, names, outs, dyn, example = MODELS[name]
    torch.manual_seed(0)
    opset = int(name.rsplit("ts", 1)[1]) if "_ts" in name else 17
    path = out / f"{name}.onnx"
    try:
        module = make().eval()
        with torch.no_grad():
            torch.onnx.export(module, example(), str(path), input_names=names, output_names=outs,
                              dynamic_axes=dyn,
                              opset_version=opset, dynamo=False)
        print("exported", path, flush=True)
    except Exception as e:  # an exporter's refusal: reported, nothing written
        print("export failed", path, type(e).__name__, str(e).splitlines()[:1], flush=True)


if __name__ == "__main__":
    warnings.filterwarnings("ignore")
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=Path("/tmp/quantgen/float"))
    ap.add_argument("names", nargs="*")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    for n in a.names or MODELS:
        export(n, a.out)
