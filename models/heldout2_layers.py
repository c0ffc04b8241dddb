"""Hand-written torch modules for models/export_heldout2.py: layers the earlier exported sets do
not cover (spectrograms, einsum forms, cumulative products, index_put, masks computed from
lengths, resize modes, 1-D / 3-D grouped, dilated and transposed convolutions, instance norm,
EmbeddingBag, reflect / replicate / circular padding, fold, pixel_unshuffle, triu / tril,
integer and bool arithmetic, max-unpooling, float16 and bfloat16 models).

Each entry: name -> (module factory, input names, {input: {axis: symbol}}, example inputs).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class Spectro(nn.Module):
    """a log-magnitude STFT (hann window, hop 4) then a per-bin affine and a mean over time"""

    def __init__(self):
        super().__init__()
        self.register_buffer("win", torch.hann_window(16))
        self.lin = nn.Linear(9, 4)

    def forward(self, w):
        s = torch.stft(w, 16, 4, window=self.win, center=False, return_complex=True)
        mag = torch.view_as_real(s).pow(2).sum(-1)
        return self.lin(torch.log1p(mag).transpose(1, 2)).mean(1)


class Einsums(nn.Module):
    def forward(self, a, b):
        s = torch.einsum("bij,bkj->bik", a, b)  # a b^T, batched
        d = torch.einsum("bij,bij->b", a, a)  # a full contraction
        o = torch.einsum("bi,bj->bij", a.sum(2), b.sum(2))  # an outer product
        t = torch.einsum("bij->bji", s)  # a transpose
        return s.sum((1, 2)) + d + o.mean((1, 2)) + t.amax((1, 2))


class Cumulative(nn.Module):
    """a reverse cumsum (flip), an int64 cumsum of a mask, a product as exp of a cumsum of logs"""

    def forward(self, x):
        p = torch.exp(torch.cumsum(torch.log(torch.sigmoid(x) + 0.5), 1))
        r = torch.flip(torch.cumsum(torch.flip(x, [1]), 1), [1])
        m = torch.cumsum((x > 0).long(), 1).float()
        return p + r + m


class IndexPut(nn.Module):
    """index_put with accumulation, masked_fill from a mask computed from lengths, index_select"""

    def forward(self, x, idx, lengths):
        rows = torch.arange(x.shape[0])
        acc = torch.zeros(x.shape[0], 8).index_put((rows, idx.clamp(0, 7)), x.new_ones(idx.shape[0]), accumulate=True)
        t = torch.arange(x.shape[1]).unsqueeze(0)
        keep = t < lengths.unsqueeze(1)
        y = x.masked_fill(~keep, -1e4).softmax(1)
        return y.index_select(1, torch.tensor([0, 2])).sum(1, keepdim=True) + acc[:, :4] * 0.5


class Resizes(nn.Module):
    """nearest-exact, bilinear with antialias, area (adaptive average pooling) and bicubic resizes"""

    def forward(self, x):
        a = F.interpolate(x, scale_factor=2.0, mode="nearest-exact")
        b = F.interpolate(x, scale_factor=0.5, mode="bilinear", antialias=True, align_corners=False)
        c = F.adaptive_avg_pool2d(x, (3, 5))
        d = F.interpolate(x, size=(7, 9), mode="bicubic", align_corners=False)
        return a.mean((2, 3)) + b.amax((2, 3)) + c.sum((2, 3)) + d.mean((2, 3))


class Convs1d(nn.Module):
    """grouped + dilated Conv1d, a strided ConvTranspose1d with output padding, depthwise"""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv1d(4, 8, 3, dilation=2, groups=2, padding=2)
        self.t1 = nn.ConvTranspose1d(8, 6, 4, stride=2, padding=1, output_padding=1)
        self.dw = nn.Conv1d(6, 6, 5, padding=2, groups=6, padding_mode="reflect")

    def forward(self, x):
        return self.dw(F.leaky_relu(self.t1(F.silu(self.c1(x))), 0.1))


class Convs3d(nn.Module):
    """Conv3d with stride, a grouped ConvTranspose3d, InstanceNorm3d, trilinear resize"""

    def __init__(self):
        super().__init__()
        self.c = nn.Conv3d(2, 4, 3, stride=(1, 2, 2), padding=1)
        self.n = nn.InstanceNorm3d(4, affine=True)
        self.t = nn.ConvTranspose3d(4, 4, 2, stride=2, groups=2)

    def forward(self, x):
        y = self.t(F.relu(self.n(self.c(x))))
        return F.interpolate(y, scale_factor=0.5, mode="trilinear", align_corners=False)


class Norms(nn.Module):
    """InstanceNorm2d, GroupNorm, LocalResponseNorm, F.normalize, an unbiased std"""

    def __init__(self):
        super().__init__()
        self.i, self.g, self.l = nn.InstanceNorm2d(6, affine=True), nn.GroupNorm(3, 6), nn.LocalResponseNorm(3)

    def forward(self, x):
        y = self.l(self.g(self.i(x)))
        return F.normalize(y, dim=1) + y.std(dim=(2, 3), keepdim=True)


class Bag(nn.Module):
    """EmbeddingBag (mean, 2-D input), an Embedding with padding_idx, a max over bags"""

    def __init__(self):
        super().__init__()
        self.bag, self.emb = nn.EmbeddingBag(50, 8, mode="mean"), nn.Embedding(50, 8, padding_idx=0)

    def forward(self, ids):
        return self.bag(ids) + self.emb(ids).amax(1)


class Pads(nn.Module):
    """reflect, replicate, circular and constant padding of an image"""

    def forward(self, x):
        a = F.pad(x, (1, 2, 2, 1), mode="reflect")
        b = F.pad(x, (1, 2, 2, 1), mode="replicate")
        c = F.pad(x, (1, 2, 2, 1), mode="circular")
        d = F.pad(x, (1, 2, 2, 1), value=0.5)
        return a * b + c - d


class FoldUnshuffle(nn.Module):
    """unfold then fold (overlap-add), pixel_unshuffle, channel shuffle"""

    def forward(self, x):
        h, w = x.shape[2], x.shape[3]
        u = F.unfold(x, 2, stride=2)
        f = F.fold(u * 2, (h, w), 2, stride=2)
        s = F.pixel_unshuffle(f, 2)
        return F.channel_shuffle(s, 2) if hasattr(F, "channel_shuffle") else s


class TriMasks(nn.Module):
    """triu / tril of a computed matrix, where on broadcast shapes, a banded mask"""

    def forward(self, x):
        s = x @ x.transpose(1, 2)
        n = s.shape[1]
        band = torch.ones(n, n, dtype=torch.bool).triu(-1).tril(1)
        return torch.where(band, s, torch.zeros(1)).triu(0) + s.tril(-1) * 0.5


class IntMath(nn.Module):
    """int64 and bool arithmetic: floor division, remainder, bitwise ops, comparisons, a cast"""

    def forward(self, a, b):
        q = torch.div(a, b.clamp(min=1), rounding_mode="floor")
        r = torch.remainder(a, 7)
        m = (a > b) ^ (r == 0)
        bits = torch.bitwise_and(a, 12) | (b << 1)
        return q + r * m.long() + bits, (m & (q > 0)).sum(1)


class Unpool(nn.Module):
    """max pooling with indices then MaxUnpool2d, an LP pool, adaptive max pooling"""

    def forward(self, x):
        y, i = F.max_pool2d(x, 2, return_indices=True)
        u = F.max_unpool2d(y * 2, i, 2)
        return u + F.lp_pool2d(x, 2, 1) + F.adaptive_max_pool2d(x, 1)


class Activations(nn.Module):
    """GLU, SELU, CELU, PReLU, hardtanh, softmin, logsumexp, atan2"""

    def __init__(self):
        super().__init__()
        self.p = nn.PReLU(8)

    def forward(self, x):
        g = F.glu(torch.cat([x, x], -1), -1)
        a = F.selu(x) + F.celu(x, 0.5) + self.p(x) + F.hardtanh(x, -0.5, 0.5)
        return g + a + F.softmin(x, -1) + torch.logsumexp(x, -1, keepdim=True) + torch.atan2(x, g + 2)


class HalfConv(nn.Module):
    """a float16 conv block: Conv2d, BatchNorm, SiLU, global pooling, Linear"""

    def __init__(self):
        super().__init__()
        self.c, self.bn, self.fc = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.Linear(8, 4)

    def forward(self, x):
        return self.fc(F.silu(self.bn(self.c(x))).mean((2, 3)))


class BF16Mlp(nn.Module):
    """a bfloat16 MLP with LayerNorm and GELU"""

    def __init__(self):
        super().__init__()
        self.a, self.b, self.n = nn.Linear(16, 32), nn.Linear(32, 16), nn.LayerNorm(16)

    def forward(self, x):
        return self.n(x + self.b(F.gelu(self.a(x))))


def _img(c=3, h=12, w=10, n=2):
    return lambda: (torch.randn(n, c, h, w),)


IMG = {0: "N", 2: "H", 3: "W"}
LAYERS = {
    "spectro": (Spectro, ["w"], {"w": {0: "B", 1: "L"}}, lambda: (torch.randn(2, 200),)),
    "einsums": (Einsums, ["a", "b"], {"a": {0: "B", 1: "N", 2: "D"}, "b": {0: "B", 1: "N", 2: "D"}},
                lambda: (torch.randn(2, 5, 4), torch.randn(2, 5, 4))),
    "cumulative": (Cumulative, ["x"], {"x": {0: "B", 1: "N"}}, lambda: (torch.randn(3, 7),)),
    "indexput": (IndexPut, ["x", "idx", "lengths"], {"x": {0: "B", 1: "T"}, "idx": {0: "B"}, "lengths": {0: "B"}},
                 lambda: (torch.randn(3, 6), torch.randint(0, 8, (3,)), torch.tensor([6, 2, 4]))),
    "resizes": (Resizes, ["x"], {"x": IMG}, _img()),
    "convs1d": (Convs1d, ["x"], {"x": {0: "N", 2: "L"}}, lambda: (torch.randn(2, 4, 20),)),
    "convs3d": (Convs3d, ["x"], {"x": {0: "N", 2: "D", 3: "H", 4: "W"}}, lambda: (torch.randn(2, 2, 4, 8, 6),)),
    "norms": (Norms, ["x"], {"x": IMG}, _img(6)),
    "bag": (Bag, ["ids"], {"ids": {0: "B", 1: "T"}}, lambda: (torch.randint(0, 50, (3, 5)),)),
    "pads": (Pads, ["x"], {"x": IMG}, _img(2, 6, 5)),
    "fold": (FoldUnshuffle, ["x"], {"x": IMG}, _img(4, 8, 6)),
    "trimasks": (TriMasks, ["x"], {"x": {0: "B", 1: "N"}}, lambda: (torch.randn(2, 6, 4),)),
    "intmath": (IntMath, ["a", "b"], {"a": {0: "B", 1: "N"}, "b": {0: "B", 1: "N"}},
                lambda: (torch.randint(-50, 50, (2, 6)), torch.randint(-5, 9, (2, 6)))),
    "unpool": (Unpool, ["x"], {"x": IMG}, _img(3, 8, 6)),
    "activations": (Activations, ["x"], {"x": {0: "B", 2: "T"}}, lambda: (torch.randn(2, 8, 5),)),
    "halfconv": (lambda: HalfConv().half(), ["x"], {"x": IMG}, lambda: (torch.randn(2, 3, 12, 10).half(),)),
    "bf16mlp": (lambda: BF16Mlp().to(torch.bfloat16), ["x"], {"x": {0: "B", 1: "T"}},
                lambda: (torch.randn(2, 5, 16).to(torch.bfloat16),)),
}
