"""Export more small PyTorch models for tests/data/torch_more/ (OPTIONAL: needs torch).

Written the way users write models, not the way onnxcc likes them: torch's own
TransformerEncoder with a padding mask and positions from `arange`, scaled_dot_product_attention
with is_causal and RMSNorm, a KV cache whose past length is its own symbol, a U-Net with
BatchNorm, bilinear upsampling and ConvTranspose, a ResNet stem and blocks, a ConvNeXt block
(7x7 depthwise, LayerNorm over channels last), stacked bidirectional GRU + LSTM, a
wav2vec-style strided Conv1d front end with GroupNorm, PixelShuffle + nearest resize +
ceil-mode pooling, cumsum / topk / einsum / mish / softplus, roll / sort / gather /
scatter_add, grid_sample on a dynamic-size image, boolean-mask indexing and nonzero, a
float16 model, and nn.MultiheadAttention with queries and keys of different lengths.

Each is exported by the legacy TorchScript exporter (`NAME_ts17.onnx`, opset 17) and by the
dynamo exporter (`NAME_dyn18.onnx`, opset 18, weights as external data beside it; the
encoder and the causal LM also at opset 23, `NAME_dyn23.onnx`). Where an
exporter fails the file is not written (torch 2.13: TorchScript cannot export
TransformerEncoder's fast path or RMSNorm). The inputs the tests feed are made in
tests/e2e/test_torch_exported_more.py (no torch needed there); the ones here only trace.

    python3 -m venv /tmp/torchenv && /tmp/torchenv/bin/pip install torch onnx onnxscript numpy
    /tmp/torchenv/bin/python models/export_torch_more.py [NAME ...]
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "torch_more"


class Enc(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb, self.pos = nn.Embedding(100, 64), nn.Embedding(512, 64)
        layer = nn.TransformerEncoderLayer(64, 4, 128, batch_first=True, norm_first=True, activation="gelu")
        self.enc, self.head = nn.TransformerEncoder(layer, 2), nn.Linear(64, 5)

    def forward(self, ids):
        pos = torch.arange(ids.shape[1]).unsqueeze(0)
        return self.head(self.enc(self.emb(ids) + self.pos(pos), src_key_padding_mask=ids == 0))


class CausalLM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb, self.qkv, self.o = nn.Embedding(50, 32), nn.Linear(32, 96), nn.Linear(32, 32)
        self.norm, self.out = nn.RMSNorm(32), nn.Linear(32, 50)

    def forward(self, ids):
        x = self.emb(ids)
        b, t, _ = x.shape
        q, k, v = self.qkv(self.norm(x)).view(b, t, 3, 4, 8).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, t, 32))
        return self.out(F.silu(x)).log_softmax(-1)


def _conv_bn_relu(i, o):
    return nn.Sequential(nn.Conv2d(i, o, 3, padding=1), nn.BatchNorm2d(o), nn.ReLU())


class UNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.d1, self.d2, self.mid = _conv_bn_relu(3, 8), _conv_bn_relu(8, 16), _conv_bn_relu(16, 16)
        self.up, self.u1, self.out = nn.ConvTranspose2d(16, 8, 2, stride=2), _conv_bn_relu(16, 8), nn.Conv2d(8, 2, 1)

    def forward(self, x):
        a = self.d1(x)
        b = self.d2(F.max_pool2d(a, 2))
        u = F.interpolate(self.mid(b), scale_factor=2.0, mode="bilinear", align_corners=False)
        return self.out(self.u1(torch.cat([self.up(b) + u[:, :8], a], 1)))


def _conv_bn(i, o, k, s, p):
    return [nn.Conv2d(i, o, k, s, p, bias=False), nn.BatchNorm2d(o)]


class ResNetish(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(*_conv_bn(3, 16, 7, 2, 3), nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        self.b1 = nn.Sequential(*_conv_bn(16, 16, 3, 1, 1), nn.ReLU(), *_conv_bn(16, 16, 3, 1, 1))
        self.down = nn.Sequential(*_conv_bn(16, 32, 1, 2, 0))
        self.b2 = nn.Sequential(*_conv_bn(16, 32, 3, 2, 1), nn.ReLU(), *_conv_bn(32, 32, 3, 1, 1))
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        x = self.stem(x)
        x = F.relu(x + self.b1(x))
        x = F.relu(self.down(x) + self.b2(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class ConvNeXtBlock(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem, self.dw = nn.Conv2d(3, 32, 4, 4), nn.Conv2d(32, 32, 7, padding=3, groups=32)
        self.ln, self.p1, self.p2 = nn.LayerNorm(32), nn.Linear(32, 128), nn.Linear(128, 32)
        self.gamma = nn.Parameter(torch.full((32,), 0.1))

    def forward(self, x):
        x = self.stem(x)
        y = self.p2(F.gelu(self.p1(self.ln(self.dw(x).permute(0, 2, 3, 1))))) * self.gamma
        return (x + y.permute(0, 3, 1, 2)).mean((2, 3))


class RNNs(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(20, 32, 2, batch_first=True, bidirectional=True)
        self.lstm, self.fc = nn.LSTM(64, 16, batch_first=True), nn.Linear(16, 3)

    def forward(self, x):
        z, (h, c) = self.lstm(self.gru(x)[0])
        return self.fc(z[:, -1]), h[0] * c[0]


class Audio(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1, self.gn = nn.Conv1d(1, 16, 10, 5), nn.GroupNorm(4, 16)
        self.c2, self.c3 = nn.Conv1d(16, 32, 3, 2), nn.Conv1d(32, 32, 3, 2, groups=4)

    def forward(self, w):
        x = F.gelu(self.c2(F.gelu(self.gn(self.c1(w.unsqueeze(1))))))
        x = F.hardswish(self.c3(x))
        return torch.softmax(x.transpose(1, 2) @ x, -1).sum(1)


class Misc(nn.Module):
    def forward(self, x, y):
        a = torch.cumsum(x, 1) * torch.sigmoid(y)
        v, i = torch.topk(a, 3, dim=1)
        m = torch.where(a > 0, a, torch.zeros_like(a)).amax(1, keepdim=True)
        e = torch.einsum("bn,bk->bnk", x, v).flatten(1)
        return F.mish(e).sum(1) + m.squeeze(1) + i.float().sum(1) + F.softplus(x).prod(1).clamp(max=1e3)


class PixelUp(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.shuffle = nn.Conv2d(4, 16, 3, padding=1), nn.PixelShuffle(2)

    def forward(self, x):
        y = self.shuffle(self.conv(x))
        y = F.interpolate(y, size=(x.shape[2] * 3, x.shape[3] * 3), mode="nearest")
        return F.avg_pool2d(y, 3, 3, ceil_mode=True) + y.amax((2, 3), keepdim=True)


class KVCache(nn.Module):
    """one attention step over a past KV cache: the new length T and the past P are both symbolic"""

    def __init__(self):
        super().__init__()
        self.q, self.k, self.v = nn.Linear(32, 32), nn.Linear(32, 32), nn.Linear(32, 32)

    def forward(self, x, pk, pv):
        b, t, _ = x.shape

        def heads(z):
            return z.view(b, t, 4, 8).transpose(1, 2)

        q = heads(self.q(x))
        k, v = torch.cat([pk, heads(self.k(x))], 2), torch.cat([pv, heads(self.v(x))], 2)
        p = k.shape[2]
        att = (q @ k.transpose(-1, -2)) / 8 ** 0.5
        att = att.masked_fill(~torch.ones(t, p, dtype=torch.bool).tril(p - t), float("-inf")).softmax(-1)
        return (att @ v).transpose(1, 2).reshape(b, t, 32), k, v


class GatherSort(nn.Module):
    """roll (dynamo: slices at Mod(-shift, N)), flip, gather, sort / argsort (TopK), scatter_add"""

    def forward(self, x, idx):
        k = idx.shape[1]
        y = torch.gather(x, 1, idx) + torch.roll(x, 2, 1)[:, :k] + torch.flip(x, [1])[:, :k]
        s, o = torch.sort(x, 1, descending=True)
        return torch.zeros_like(x).scatter_add(1, idx, y) + s * o.float().argsort(1).float()


class Sample(nn.Module):
    """grid_sample on an image of dynamic size, bicubic upsampling, unfold (im2col)"""

    def forward(self, x, grid):
        a = F.grid_sample(x, grid, mode="bilinear", padding_mode="border", align_corners=False)
        b = F.interpolate(x, scale_factor=2.0, mode="bicubic", align_corners=True)
        u = F.unfold(x, 3, padding=1)
        return a.mean((2, 3)) + b.amax((2, 3)) + u.sum(2)[:, : x.shape[1]]


class Mask(nn.Module):
    """boolean-mask indexing and nonzero: sizes known only from the data"""

    def forward(self, x):
        return x[x > 0].sum() + torch.nonzero(x > 1).float().sum(), (x * (x > 0)).cumsum(-1)


class Half(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin, self.ln = nn.Linear(16, 16), nn.LayerNorm(16)

    def forward(self, x):
        return F.gelu(self.ln(self.lin(x))).softmax(-1)


class MHA(nn.Module):
    """nn.MultiheadAttention with its averaged weights, queries and keys of different lengths"""

    def __init__(self):
        super().__init__()
        self.mha = nn.MultiheadAttention(32, 4, batch_first=True)

    def forward(self, q, kv):
        return self.mha(q, kv, kv, need_weights=True)


def _ids(b, t, hi):
    return torch.randint(1, hi, (b, t))


#: name -> (module, input names, {input: {axis: symbol}}, example inputs to trace with)
MODELS = {
    "enc": (Enc, ["ids"], {"ids": {0: "B", 1: "T"}}, lambda: (_ids(2, 17, 100),)),
    "causal": (CausalLM, ["ids"], {"ids": {0: "B", 1: "T"}}, lambda: (_ids(2, 9, 50),)),
    "unet": (UNet, ["x"], {"x": {0: "N", 2: "H", 3: "W"}}, lambda: (torch.randn(2, 3, 32, 48),)),
    "resnet": (ResNetish, ["x"], {"x": {0: "N", 2: "H", 3: "W"}}, lambda: (torch.randn(2, 3, 65, 47),)),
    "convnext": (ConvNeXtBlock, ["x"], {"x": {0: "N", 2: "H", 3: "W"}}, lambda: (torch.randn(2, 3, 64, 48),)),
    "rnns": (RNNs, ["x"], {"x": {0: "B", 1: "T"}}, lambda: (torch.randn(2, 13, 20),)),
    "audio": (Audio, ["w"], {"w": {0: "B", 1: "L"}}, lambda: (torch.randn(2, 1601),)),
    "misc": (Misc, ["x", "y"], {"x": {0: "B", 1: "N"}, "y": {0: "B", 1: "N"}},
             lambda: (torch.randn(3, 10), torch.randn(3, 10))),
    "pixelup": (PixelUp, ["x"], {"x": {0: "N", 2: "H", 3: "W"}}, lambda: (torch.randn(2, 4, 7, 5),)),
    "kvcache": (KVCache, ["x", "pk", "pv"], {"x": {0: "B", 1: "T"}, "pk": {0: "B", 2: "P"}, "pv": {0: "B", 2: "P"}},
                lambda: (torch.randn(2, 3, 32), torch.randn(2, 4, 10, 8), torch.randn(2, 4, 10, 8))),
    "gather": (GatherSort, ["x", "idx"], {"x": {0: "B", 1: "N"}, "idx": {0: "B", 1: "K"}},
               lambda: (torch.randn(2, 10), torch.randint(0, 10, (2, 6)))),
    "sample": (Sample, ["x", "grid"], {"x": {0: "B", 2: "H", 3: "W"}, "grid": {0: "B", 1: "GH", 2: "GW"}},
               lambda: (torch.randn(2, 3, 8, 9), torch.rand(2, 5, 4, 2) * 2 - 1)),
    "mask": (Mask, ["x"], {"x": {0: "B", 1: "N"}}, lambda: (torch.randn(3, 7),)),
    "half": (lambda: Half().half(), ["x"], {"x": {0: "B", 1: "T"}}, lambda: (torch.randn(2, 5, 16).half(),)),
    "mha": (MHA, ["q", "kv"], {"q": {0: "B", 1: "T"}, "kv": {0: "B", 1: "S"}},
            lambda: (torch.randn(2, 5, 32), torch.randn(2, 7, 32))),
}

#: also exported by the dynamo exporter at opset 23 (`NAME_dyn23.onnx`): SDPA becomes the
#: Attention op, RMSNorm RMSNormalization
OPSET23 = ("enc", "causal")


def export(name: str) -> None:
    cls, names, dyn, example = MODELS[name]
    torch.manual_seed(0)
    module, args = cls().eval(), example()
    for kind in ("ts17", "dyn18") + (("dyn23",) if name in OPSET23 else ()):
        path = OUT / f"{name}_{kind}.onnx"
        try:
            with torch.no_grad():
                if kind == "ts17":
                    torch.onnx.export(module, args, str(path), input_names=names, dynamic_axes=dyn,
                                      opset_version=17, dynamo=False)
                else:
                    shapes = {n: {ax: torch.export.Dim(sym, min=1, max=4096) for ax, sym in d.items()}
                              for n, d in dyn.items()}
                    torch.onnx.export(module, args, str(path), input_names=names, dynamic_shapes=shapes,
                                      opset_version=int(kind[3:]), dynamo=True)
            print("exported", path)
        except Exception as e:  # an exporter's refusal: report it, write nothing
            print("export failed", path, type(e).__name__, str(e).splitlines()[0][:200])


def torch_reference(name: str, inputs: list[dict]) -> None:
    """NAME_torch.npz: the module's own outputs (key `K.OUTPUT_INDEX`) at the test's inputs,
    for files onnxruntime cannot run."""
    cls = MODELS[name][0]
    torch.manual_seed(0)
    module, out = cls().eval(), {}
    for k, feeds in enumerate(inputs):
        with torch.no_grad():
            res = module(*[torch.from_numpy(a) for a in feeds.values()])
        for j, r in enumerate(res if isinstance(res, tuple) else (res,)):
            out[f"{k}.{j}"] = r.numpy()
    import numpy as np

    np.savez(OUT / f"{name}_torch.npz", **out)
    print("wrote", OUT / f"{name}_torch.npz")


if __name__ == "__main__":
    warnings.filterwarnings("ignore")
    OUT.mkdir(parents=True, exist_ok=True)
    for name in sys.argv[1:] or MODELS:
        export(name)
    sys.path.insert(0, str(OUT.parents[1] / "e2e"))
    from torch_more_inputs import INPUTS  # the inputs the test feeds

    torch_reference("enc", INPUTS["enc"])
