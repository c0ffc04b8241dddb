"""Small conv nets with symbolic batch, H, W against onnxruntime, side by side in one process.

Five nets nobody tuned for: `plain` (3x3 convs 3->16->32 with Relu and MaxPool, global
average pool, Gemm: the shape of the held-out benchmark), `mobile` (a stride-2 stem, then two
depthwise-separable blocks with BatchNormalization + Relu, one depthwise at stride 2),
`resnet` (a stem conv, then a residual block conv-BN-Relu-conv-BN + identity, Relu), and two
U-Nets, `unet` and `unet_resize` (not in the default `--nets`): 3x3 conv pairs over three
pooled levels, a decoder that upsamples by a 2x2 stride-2 ConvTranspose (`unet`) or by a x2
Resize + 3x3 conv (`unet_resize`, nearest and bilinear as torch exports them), concatenates
the encoder's skips and ends in a 1x1 conv to 3 classes per pixel (H and W multiples of 8).
Each is compiled once with `onnxcc compile` (one library for every shape) and timed against
onnxruntime, and OpenVINO where it is installed (`peers.py`; alternating rounds, medians). Each thread count
runs in a child process of its own, because both runtimes fix their pool size at start-up.

    unset OPENBLAS_CORETYPE OPENBLAS_L2_SIZE
    python benchmarks/convnets.py [--threads 2,1] [--nets plain,mobile,resnet,unet,unet_resize]
        [--sizes 32,112,224,96x160] [--batches 1,4] [--clock wall|cpu] [--json out.json]

Prints one row per (net, batch, size, threads) with both medians and the ratio
onnxcc / onnxruntime (lower is better) and onnxcc / the fastest peer, then the geomeans per
net and thread count.
`--clock cpu` times single-threaded runs by the process's CPU time instead of the wall
clock: on a machine shared with other jobs a call preempted halfway counts only the time
it ran (both runtimes compute on the calling thread at one thread; rows with more
threads keep the wall clock).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parent))


class _Net:
    """A tiny graph builder: every conv gets seeded weights and a bias."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list = []
        self.inits: list = []
        self.n = 0

    def _init(self, arr: np.ndarray) -> str:
        self.n += 1
        name = f"p{self.n}"
        self.inits.append(numpy_helper.from_array(arr.astype(np.float32), name))
        return name

    def op(self, kind: str, *inputs: str, **attrs) -> str:
        self.n += 1
        out = f"t{self.n}"
        self.nodes.append(helper.make_node(kind, list(inputs), [out], **attrs))
        return out

    def conv(self, x: str, cin: int, cout: int, k: int, stride: int = 1, group: int = 1) -> str:
        w = self.rng.standard_normal((cout, cin // group, k, k)) * math.sqrt(2.0 / (cin // group * k * k))
        b = 0.1 * self.rng.standard_normal(cout)
        p = k // 2
        return self.op("Conv", x, self._init(w), self._init(b), kernel_shape=[k, k], pads=[p] * 4,
                       strides=[stride, stride], group=group)

    def bn(self, x: str, c: int) -> str:
        scale = 1.0 + 0.1 * self.rng.standard_normal(c)
        bias = 0.1 * self.rng.standard_normal(c)
        mean = 0.1 * self.rng.standard_normal(c)
        var = self.rng.uniform(0.5, 1.5, c)
        return self.op("BatchNormalization", x, *(self._init(a) for a in (scale, bias, mean, var)), epsilon=1e-5)

    def head(self, x: str, c: int) -> str:
        h = self.op("Flatten", self.op("GlobalAveragePool", x), axis=1)
        w = self._init(self.rng.standard_normal((10, c)) / math.sqrt(c))
        return self.op("Gemm", h, w, self._init(0.1 * self.rng.standard_normal(10)), transB=1)

    def convt(self, x: str, cin: int, cout: int) -> str:
        """A 2x2 stride-2 ConvTranspose (a U-Net's learned upsampling; weight [Cin, Cout, 2, 2])."""
        w = self.rng.standard_normal((cin, cout, 2, 2)) * math.sqrt(1.0 / cin)
        b = 0.1 * self.rng.standard_normal(cout)
        return self.op("ConvTranspose", x, self._init(w), self._init(b), kernel_shape=[2, 2], strides=[2, 2])

    def resize2(self, x: str, mode: str) -> str:
        """A x2 Resize as torch exports F.interpolate(scale_factor=2): nearest with asymmetric
        coordinates and floor rounding, bilinear (align_corners=False) with pytorch_half_pixel."""
        scales = self._init(np.array([1, 1, 2, 2]))
        if mode == "nearest":
            return self.op("Resize", x, "", scales, mode="nearest", coordinate_transformation_mode="asymmetric",
                           nearest_mode="floor")
        return self.op("Resize", x, "", scales, mode="linear", coordinate_transformation_mode="pytorch_half_pixel")

    def model(self, name: str, out: str, out_shape: tuple = ("batch", 10)) -> onnx.ModelProto:
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3, "H", "W"])
        y = helper.make_tensor_value_info(out, TensorProto.FLOAT, list(out_shape))
        g = helper.make_graph(self.nodes, name, [x], [y], self.inits)
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def plain() -> onnx.ModelProto:
    g = _Net(1)
    h = g.op("MaxPool", g.op("Relu", g.conv("x", 3, 16, 3)), kernel_shape=[2, 2], strides=[2, 2])
    h = g.op("MaxPool", g.op("Relu", g.conv(h, 16, 32, 3)), kernel_shape=[2, 2], strides=[2, 2])
    return g.model("plain", g.head(h, 32))


def mobile() -> onnx.ModelProto:
    g = _Net(2)
    h = g.op("Relu", g.bn(g.conv("x", 3, 16, 3, stride=2), 16))
    for cin, cout, stride in ((16, 32, 1), (32, 64, 2)):
        h = g.op("Relu", g.bn(g.conv(h, cin, cin, 3, stride=stride, group=cin), cin))
        h = g.op("Relu", g.bn(g.conv(h, cin, cout, 1), cout))
    return g.model("mobile", g.head(h, 64))


def resnet() -> onnx.ModelProto:
    g = _Net(3)
    h = g.op("Relu", g.bn(g.conv("x", 3, 32, 3, stride=2), 32))
    r = g.op("Relu", g.bn(g.conv(h, 32, 32, 3), 32))
    r = g.bn(g.conv(r, 32, 32, 3), 32)
    h = g.op("Relu", g.op("Add", r, h))
    return g.model("resnet", g.head(h, 32))


UNET_WIDTHS = (16, 32, 64)
"""a U-Net's encoder widths per level (three 2x2 max pools, so H and W are multiples of 8);
the bottleneck has twice the last"""


def _unet(seed: int, up) -> tuple[_Net, str]:
    """Encoder: per level two 3x3 conv + Relu, then a 2x2 max pool; a bottleneck of two 3x3
    convs; decoder: per level `up` (x2 upsampling and halving the channels), a Concat with the
    encoder's skip along channels, two 3x3 conv + Relu; a 1x1 conv to 3 classes at full size.
    Convs carry a bias (torch exports an eval-mode BatchNorm folded into it)."""
    g = _Net(seed)

    def double(h: str, cin: int, cout: int) -> str:
        h = g.op("Relu", g.conv(h, cin, cout, 3))
        return g.op("Relu", g.conv(h, cout, cout, 3))

    skips, h, cin = [], "x", 3
    for c in UNET_WIDTHS:
        h = double(h, cin, c)
        skips.append(h)
        h, cin = g.op("MaxPool", h, kernel_shape=[2, 2], strides=[2, 2]), c
    h = double(h, cin, 2 * cin)
    for level, c in enumerate(reversed(UNET_WIDTHS)):
        h = up(g, h, 2 * c, c, level)
        h = double(g.op("Concat", h, skips.pop(), axis=1), 2 * c, c)
    return g, g.conv(h, UNET_WIDTHS[0], 3, 1)


def unet() -> onnx.ModelProto:
    g, out = _unet(4, lambda g, h, cin, cout, level: g.convt(h, cin, cout))
    return g.model("unet", out, ("batch", 3, "H", "W"))


def unet_resize() -> onnx.ModelProto:
    """Upsampling by Resize then a 3x3 conv + Relu halving the channels: nearest at the deepest
    level, bilinear above it (both as torch exports them)."""
    def up(g: _Net, h: str, cin: int, cout: int, level: int) -> str:
        h = g.resize2(h, "nearest" if level == 0 else "linear")
        return g.op("Relu", g.conv(h, cin, cout, 3))

    g, out = _unet(5, up)
    return g.model("unet_resize", out, ("batch", 3, "H", "W"))


NETS = {"plain": plain, "mobile": mobile, "resnet": resnet, "unet": unet, "unet_resize": unet_resize}


def _size(text: str) -> tuple[int, int]:
    """'224' is a square plane, '96x160' is H x W"""
    h, _, w = text.partition("x")
    return int(h), int(w or h)


def _child(args) -> list[dict]:
    """Time every (net, batch, size) at one thread count (set before either runtime starts)."""
    os.environ["ONNXCC_NUM_THREADS"] = str(args.threads)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    from peers import available_peers, format_row, make_peers, time_row

    import onnxcc

    peer_names = available_peers(args.peers)
    cpu_clock = args.clock == "cpu" and args.threads == 1
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.nets.split(","):
            path = Path(tmp) / f"{name}.onnx"
            onnx.save(NETS[name](), path)
            onnxcc.compile(path, Path(tmp) / name)
            lib = onnxcc.load(Path(tmp) / name)
            peers = make_peers(path, args.threads, peer_names)
            for b in (int(v) for v in args.batches.split(",")):
                for s in args.sizes.split(","):
                    hw = _size(s)
                    x = np.random.default_rng(0).standard_normal((b, 3, *hw)).astype(np.float32)
                    row = time_row(lambda f: list(lib.run(f).values()), peers, {"x": x}, args.repeats,
                                   clock=time.process_time if cpu_clock else None)
                    size = hw[0] if hw[0] == hw[1] else f"{hw[0]}x{hw[1]}"
                    row.update(net=name, batch=b, size=size, threads=args.threads, clock="cpu" if cpu_clock else "wall")
                    rows.append(row)
                    label = f"{hw[0]}^2" if hw[0] == hw[1] else f"{hw[0]}x{hw[1]}"
                    print(f"{name:7s} b={b} {label:>7s} t={args.threads}  {format_row(row, peer_names)}", flush=True)
    return rows


def main() -> None:
    from peers import geomean

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", default="2,1", help="comma list; each runs in its own child process")
    ap.add_argument("--nets", default="plain,mobile,resnet")
    ap.add_argument("--sizes", default="32,112,224", help="comma list of N (N x N) or HxW")
    ap.add_argument("--batches", default="1,4")
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    ap.add_argument("--peers", default="auto", help="comma list of ort,openvino (auto: OpenVINO if installed)")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--child-json", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child_json is not None:
        args.threads = int(args.threads)
        args.child_json.write_text(json.dumps(_child(args)))
        return
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        for t in args.threads.split(","):
            out = Path(tmp) / f"t{t}.json"
            cmd = [sys.executable, __file__, "--threads", t, "--nets", args.nets, "--sizes", args.sizes,
                   "--batches", args.batches, "--repeats", str(args.repeats), "--clock", args.clock,
                   "--peers", args.peers, "--child-json", str(out)]
            subprocess.run(cmd, check=True)
            rows += json.loads(out.read_text())
    geo: dict[str, float] = {}
    for key in sorted({(r["net"], r["threads"]) for r in rows}):
        for field, label in (("ratio", "onnxruntime"), ("ratio_best", "best peer")):
            g = geomean(r.get(field) for r in rows if (r["net"], r["threads"]) == key)
            if g is not None:
                geo[f"{key[0]}/t{key[1]}/{label}"] = g
    for k, v in geo.items():
        print(f"geomean onnxcc / {k.split('/')[2]} {k.split('/')[0]} t{k.split('/')[1][1:]}: {v:.3f}")
    if args.json:
        args.json.write_text(json.dumps({"clock": args.clock, "rows": rows, "geomean": geo}, indent=2))


if __name__ == "__main__":
    main()
