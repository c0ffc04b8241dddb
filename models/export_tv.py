"""Export torchvision models for tests/data/tv/ (OPTIONAL: needs torch and torchvision; the test
needs neither).

Architectures the zoo (squeezenet, mobilenet v2/v3, shufflenet, mnasnet, lraspp) and the
Hugging Face set (resnet, regnet, convnext, swin) do not hold: EfficientNet v1/v2, DenseNet,
GoogLeNet, Inception v3, ResNeXt / Wide ResNet, RegNetY, ConvNeXt, ViT, Swin v1/v2, MaxViT,
segmentation (DeepLabV3, FCN), video (R3D, MC3, R(2+1)D, S3D, MViT), optical flow (RAFT) and
detection (SSDlite, RetinaNet, FCOS, whose post-processing exports TopK / NonZero /
NonMaxSuppression). Random weights. `NAME` is the torchvision builder at its own size (too big
to keep in the repository: written to --out only); `NAME_small` the same architecture built
from torchvision's classes with fewer and narrower layers, which is what tests/data/tv holds.
Each is exported by the TorchScript exporter (`_ts17`, or `_ts11` / `_ts13` with --kinds) and
the dynamo exporter (`_dyn18`) with the symbolic dims of its entry; a failed export writes
nothing and says why.

    PYTHONPATH=/tmp/tvshim /tmp/tv/bin/python models/export_tv.py [--out DIR] [--kinds ts17,dyn18] [NAME ...]
"""

# ruff: noqa: I001  (tv_shim must be imported before torchvision)
from __future__ import annotations

import argparse
from collections import OrderedDict
import warnings
from pathlib import Path
import sys

import tv_shim  # noqa: F401  (torchvision's C++ op schemas; before torchvision)
import torch
import torchvision
import torchvision.models as tvm
from torchvision.models import convnext, densenet, efficientnet, maxvit, regnet, swin_transformer
from torchvision.models import video, vision_transformer
from torchvision.models.detection.anchor_utils import DefaultBoxGenerator
from torchvision.models.detection.ssd import SSD
from torchvision.models.detection.ssdlite import SSDLiteHead
from torchvision.models.detection import fcos_resnet50_fpn, retinanet_resnet50_fpn, ssdlite320_mobilenet_v3_large
from torchvision.models.optical_flow import raft_small
from torchvision.models.segmentation import deeplabv3_mobilenet_v3_large, fcn_resnet50

sys.path.insert(0, str(Path(__file__).resolve().parent))
from export_common import export_or_report


def _has_ops() -> bool:
    return True


# the shim's `_has_ops` is a lambda, which TorchScript cannot script where torchvision's nms
# is scripted for tracing (batched_nms): a plain function instead
torchvision.extension._has_ops = _has_ops

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "tv"
IMG = {"x": {0: "N", 2: "H", 3: "W"}}
VID = {"x": {0: "N", 2: "T", 3: "H", 4: "W"}}
BATCH = {"x": {0: "N"}}


class Detector(torch.nn.Module):
    """one image in, the first result's boxes / scores / labels out (tuples export; dicts don't)"""

    def __init__(self, net: torch.nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, x):
        r = self.net([x[0]])[0]
        return r["boxes"], r["scores"], r["labels"]


class Flow(torch.nn.Module):
    """RAFT with a fixed number of refinement steps; the last flow estimate out"""

    def __init__(self, net: torch.nn.Module, iters: int) -> None:
        super().__init__()
        self.net, self.iters = net, iters

    def forward(self, a, b):
        return self.net(a, b, num_flow_updates=self.iters)[-1]


class Segment(torch.nn.Module):
    def __init__(self, net: torch.nn.Module) -> None:
        super().__init__()
        self.net = net

    def forward(self, x):
        return self.net(x)["out"]


def _effnet_small():
    setting, last = efficientnet._efficientnet_conf("efficientnet_b0", width_mult=0.25, depth_mult=0.3)
    return efficientnet.EfficientNet(setting, 0.2, num_classes=10, last_channel=last)


def _effnet_v2_small():
    setting, _ = efficientnet._efficientnet_conf("efficientnet_v2_s")
    return efficientnet.EfficientNet(setting[:3], 0.2, num_classes=10, last_channel=128)


def _swin_small(v2: bool):
    extra = dict(block=swin_transformer.SwinTransformerBlockV2,
                 downsample_layer=swin_transformer.PatchMergingV2) if v2 else {}
    return swin_transformer.SwinTransformer([4, 4], 16, [1, 1], [1, 2], [4, 4], num_classes=10, **extra)


class TinyBackbone(torch.nn.Module):
    """two feature maps (strides 8 and 16) for the small SSD: torchvision's detectors take any
    module that returns an ordered dict of them"""

    def __init__(self) -> None:
        super().__init__()
        def block(i, o, s):
            return torch.nn.Sequential(torch.nn.Conv2d(i, o, 3, s, 1), torch.nn.BatchNorm2d(o), torch.nn.ReLU6())
        self.a = torch.nn.Sequential(block(3, 8, 2), block(8, 16, 2), block(16, 16, 2))
        self.b = block(16, 24, 2)
        self.out_channels = [16, 24]

    def forward(self, x):
        a = self.a(x)
        return OrderedDict([("0", a), ("1", self.b(a))])


def _ssd_small():
    """torchvision's SSD with its SSDlite head and post-processing (per-class score threshold,
    TopK, batched NMS) over a tiny backbone, 3 classes, 64x64 resize"""
    anchors = DefaultBoxGenerator([[2, 3], [2, 3]], min_ratio=0.2, max_ratio=0.95)
    head = SSDLiteHead([16, 24], anchors.num_anchors_per_location(), 3, torch.nn.BatchNorm2d)
    net = SSD(TinyBackbone(), anchors, (64, 64), 3, head=head, score_thresh=0.2, nms_thresh=0.5,
              detections_per_img=20, topk_candidates=30, image_mean=[0.5] * 3, image_std=[0.5] * 3)
    return Detector(net)


def _det(builder, **kw):
    return Detector(builder(weights=None, weights_backbone=None, **kw))


#: name -> (builder, example inputs as shapes, dynamic axes per input name)
MODELS: dict[str, tuple] = {
    "efficientnet_b0": (lambda: tvm.efficientnet_b0(), [(1, 3, 64, 64)], IMG),
    "efficientnet_b0_small": (_effnet_small, [(1, 3, 32, 32)], IMG),
    "efficientnet_v2_s": (lambda: tvm.efficientnet_v2_s(), [(1, 3, 64, 64)], IMG),
    "efficientnet_v2_small": (_effnet_v2_small, [(1, 3, 32, 32)], IMG),
    "densenet121": (lambda: tvm.densenet121(), [(1, 3, 64, 64)], IMG),
    "densenet_small": (lambda: densenet.DenseNet(8, (2, 2, 2, 2), 16, num_classes=10), [(1, 3, 32, 32)], IMG),
    "googlenet": (lambda: tvm.googlenet(aux_logits=False, init_weights=False), [(1, 3, 64, 64)], IMG),
    "inception_v3": (lambda: tvm.inception_v3(aux_logits=False, init_weights=False), [(1, 3, 96, 96)], IMG),
    "resnext50_32x4d": (lambda: tvm.resnext50_32x4d(), [(1, 3, 64, 64)], IMG),
    "wide_resnet50_2": (lambda: tvm.wide_resnet50_2(), [(1, 3, 32, 32)], IMG),
    "regnet_y_400mf": (lambda: tvm.regnet_y_400mf(), [(1, 3, 64, 64)], IMG),
    "regnet_y_small": (lambda: regnet.RegNet(regnet.BlockParams.from_init_params(4, 16, 8.0, 2.0, 8, se_ratio=0.25),
                                             num_classes=10), [(1, 3, 32, 32)], IMG),
    "convnext_tiny": (lambda: tvm.convnext_tiny(), [(1, 3, 64, 64)], IMG),
    "convnext_small": (lambda: convnext.ConvNeXt([convnext.CNBlockConfig(16, 32, 1), convnext.CNBlockConfig(32, 64, 1),
                                                  convnext.CNBlockConfig(64, None, 1)], num_classes=10),
                       [(1, 3, 32, 32)], IMG),
    "vit_b_16": (lambda: tvm.vit_b_16(), [(1, 3, 224, 224)], BATCH),
    "vit_small": (lambda: vision_transformer.VisionTransformer(32, 8, 2, 2, 32, 64, num_classes=10),
                  [(1, 3, 32, 32)], BATCH),
    "swin_t": (lambda: tvm.swin_t(), [(1, 3, 64, 64)], IMG),
    "swin_small": (lambda: _swin_small(False), [(1, 3, 32, 32)], IMG),
    "swin_v2_t": (lambda: tvm.swin_v2_t(), [(1, 3, 64, 64)], IMG),
    "swin_v2_small": (lambda: _swin_small(True), [(1, 3, 32, 32)], IMG),
    "maxvit_t": (lambda: tvm.maxvit_t(), [(1, 3, 224, 224)], BATCH),
    "maxvit_small": (lambda: maxvit.MaxVit((32, 32), 16, 2, [16, 32], [1, 1], 8, 0.0, num_classes=10),
                     [(1, 3, 32, 32)], BATCH),
    "deeplabv3_mobilenet_v3_large": (lambda: Segment(deeplabv3_mobilenet_v3_large(weights_backbone=None)),
                                     [(1, 3, 64, 64)], IMG),
    "fcn_resnet50": (lambda: Segment(fcn_resnet50(weights_backbone=None)), [(1, 3, 64, 64)], IMG),
    "r3d_18": (lambda: video.r3d_18(), [(1, 3, 4, 32, 32)], VID),
    "mc3_18": (lambda: video.mc3_18(), [(1, 3, 4, 32, 32)], VID),
    "r2plus1d_18": (lambda: video.r2plus1d_18(), [(1, 3, 4, 32, 32)], VID),
    "r3d_small": (lambda: video.VideoResNet(video.resnet.BasicBlock, [video.resnet.Conv3DSimple] * 4, [1, 1, 1, 1],
                                            video.resnet.BasicStem, num_classes=10), [(1, 3, 4, 16, 16)], VID),
    "s3d": (lambda: video.s3d(), [(1, 3, 8, 64, 64)], {"x": {0: "N"}}),
    "mvit_v1_b": (lambda: video.mvit_v1_b(), [(1, 3, 16, 224, 224)], BATCH),
    "raft_small": (lambda: Flow(raft_small(), 2), [(1, 3, 128, 128), (1, 3, 128, 128)],
                   {"a": {0: "N", 2: "H", 3: "W"}, "b": {0: "N", 2: "H", 3: "W"}}),
    "ssdlite": (lambda: _det(ssdlite320_mobilenet_v3_large), [(1, 3, 96, 96)], {"x": {2: "H", 3: "W"}}),
    "ssd_small": (_ssd_small, [(1, 3, 48, 40)], {"x": {2: "H", 3: "W"}}),
    "retinanet": (lambda: _det(retinanet_resnet50_fpn, min_size=128, max_size=128), [(1, 3, 96, 96)],
                  {"x": {2: "H", 3: "W"}}),
    "fcos": (lambda: _det(fcos_resnet50_fpn, min_size=128, max_size=128), [(1, 3, 96, 96)],
             {"x": {2: "H", 3: "W"}}),
}


def input_names(name: str) -> list[str]:
    return ["a", "b"] if name.startswith("raft") else ["x"]


def calibrate(module: torch.nn.Module, args: tuple) -> None:
    """set every batch norm's running statistics to those of one forward pass over `args`, so
    random weights give activations of order one through the whole net (torchvision's initial
    statistics, mean 0 and variance 1, let deep nets' outputs shrink to 1e-12, which any
    absolute tolerance would pass)"""
    norms = [m for m in module.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    for m in norms:
        m.reset_running_stats()
        m.momentum = None  # a cumulative average: after one pass, that pass's statistics
    module.train()
    with torch.no_grad():
        module(*args)
    module.eval()


def export(name: str, out: Path, kinds: tuple[str, ...]) -> None:
    make, shapes, dyn = MODELS[name]
    torch.manual_seed(0)
    module = make().eval()
    args = tuple(torch.randn(s) for s in shapes)
    for m in module.modules():  # zero-initialised heads (ViT's) would make every output 0
        if isinstance(m, torch.nn.Linear) and not m.weight.any():
            torch.nn.init.normal_(m.weight, std=0.2)
    if not isinstance(module, Detector):  # detectors take other arguments in training mode
        calibrate(module, tuple(torch.randn(4, *s[1:]) for s in shapes))  # 4: a norm over 1x1 planes needs a batch
    names = input_names(name)
    for kind in kinds:
        if kind.startswith("dyn"):
            # an example dim of 1 is specialised by torch.export: batch 2 where it is symbolic
            args = tuple(torch.randn(2, *a.shape[1:]) if 0 in dyn.get(n, {}) else a
                         for a, n in zip(args, names))
        export_or_report(module, args, out / f"{name}_{kind}.onnx", names, dyn, kind,
                         dim_min=lambda s: 1 if s in ("N", "T") else 16, external_data=False)


if __name__ == "__main__":
    warnings.filterwarnings("ignore")
    # eval-mode MultiheadAttention takes a fused fast path the TorchScript exporter has no rule for
    torch.backends.mha.set_fastpath_enabled(False)
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--kinds", default="ts17,dyn18")
    ap.add_argument("names", nargs="*")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    for n in a.names or MODELS:
        export(n, a.out, tuple(a.kinds.split(",")))
