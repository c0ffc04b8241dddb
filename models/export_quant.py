"""Derive the held-out set tests/data/quant/ the way users make such models (needs only
onnxruntime and onnx; the float models come from models/quant_torch.py, which needs torch):

  NAME_dynq            onnxruntime.quantization.quantize_dynamic (MatMulInteger / ConvInteger
                       with DynamicQuantizeLinear, DynamicQuantizeLSTM)
  NAME_qdq_A_W[_pc]    quantize_static, QDQ format, activations A / weights W (u8 / s8),
                       `_pc` per-channel weights; calibrated on random inputs
  NAME_qop_A_W[_pc]    quantize_static, QOperator format (QLinearConv, QLinearMatMul, the
                       com.microsoft QLinear* ops)
  NAME_f16[_io32]      onnxruntime.transformers.float16.convert_float_to_float16; `_io32` with
                       keep_io_types=True (float32 inputs and outputs, Casts inside)
  NAME_opK             onnx.version_converter.convert_version down to opset K
  oldops_tsK_dropout   the opset-K torch export with an old-form Dropout (ratio attribute)
  ARCH_dec_merged      one decoder graph whose If on `use_cache_branch` runs the with-past or
                       the first-step decoder (the pattern optimum's merged decoders have),
                       built from ARCH_dec_past and ARCH_dec_first with onnx.helper

    /work/main/.venv/bin/python models/export_quant.py [--float DIR] [--out DIR] [--all]

Without `--all` only the committed files (COMMITTED) are written.
"""

from __future__ import annotations

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np
import onnx
from onnx import helper as h

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "e2e"))
from quant_inputs import feeds, settings  # noqa: E402  # pyright: ignore[reportMissingImports]

ZOO = ROOT / "tests" / "zoo" / "models"
TYPES = {"u8": "QUInt8", "s8": "QInt8"}
#: what tests/data/quant holds (small files covering each kind; see the test)
COMMITTED = (
    "bert_dynq", "bert_qdq_u8_s8", "bert_qop_u8_s8", "convnet_dynq", "convnet_qdq_s8_s8_pc", "convnet_qop_u8_s8_pc",
    "convnet_qop_u8_u8", "lstm_dynq", "mobilenet_v2_qop_u8_s8", "convnet_f16", "convnet_f16_io32", "bert_f16_io32",
    "oldops_ts9", "oldops_ts10_dropout", "oldops_ts11", "bart_dec_merged", "whisper_dec_past", "t5_dec_past",
    "marian_dec_first",
)


class _Calib:
    """calibration inputs: the model's test settings at other seeds"""

    def __init__(self, path: Path, stem: str):
        self.it = iter([feeds(path, d, 100 + k) for k, d in enumerate(settings(stem) * 2)])

    def get_next(self):
        return next(self.it, None)


def quantize(src: Path, kind: str, dst: Path) -> None:
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_dynamic, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    if kind == "dynq":
        quantize_dynamic(src, dst, weight_type=QuantType.QInt8)
        return
    fmt, act, wt, *pc = kind.split("_")
    pre = dst.with_suffix(".pre.onnx")
    quant_pre_process(str(src), str(pre), skip_symbolic_shape=True)
    from onnxruntime.quantization.calibrate import CalibrationDataReader

    calib = type("Calib", (_Calib, CalibrationDataReader), {})(src, src.stem)
    quantize_static(pre, dst, calib, quant_format=QuantFormat.QDQ if fmt == "qdq" else QuantFormat.QOperator,
                    activation_type=QuantType[TYPES[act]], weight_type=QuantType[TYPES[wt]], per_channel=bool(pc))
    pre.unlink()


def half(src: Path, keep_io: bool, dst: Path) -> None:
    from onnxruntime.transformers.float16 import convert_float_to_float16

    onnx.save(convert_float_to_float16(onnx.load(str(src)), keep_io_types=keep_io), str(dst))


def old_opset(src: Path, opset: int, dst: Path) -> None:
    onnx.save(onnx.version_converter.convert_version(onnx.load(str(src)), opset), str(dst))


def with_dropout(src: Path, dst: Path) -> None:
    """the opset-K graph with its output passed through Dropout(ratio=0.3) in the old form
    (ratio an attribute, two outputs: the mask unused), a no-op at inference"""
    m = onnx.load(str(src))
    out = m.graph.output[0].name
    for n in m.graph.node:
        n.output[:] = [f"{o}_pre" if o == out else o for o in n.output]
    m.graph.node.append(h.make_node("Dropout", [f"{out}_pre"], [out, "dropout_mask"], ratio=0.3))
    onnx.save(m, str(dst))


def _rank(name: str) -> list[None]:
    """unknown dims of the right rank: logits [B, T, V], presents [B, H, L, HD]"""
    return [None] * (3 if name == "logits" else 4)


def merged_decoder(past: Path, first: Path, dst: Path) -> None:
    """If(use_cache_branch) then the with-past step else the first step, each a subgraph that
    reads the outer graph's inputs; the with-past branch passes the cross-attention past
    through as its present (what optimum's merged decoders return)"""
    mp, mf = onnx.load(str(past)), onnx.load(str(first))
    outs = [o.name for o in mf.graph.output]

    def branch(m: onnx.ModelProto, tag: str) -> onnx.GraphProto:
        g = onnx.compose.add_prefix(m, f"{tag}/").graph
        nodes = [h.make_node("Identity", [i.name[len(tag) + 1:]], [i.name]) for i in g.input]
        produced = {o.name[len(tag) + 1:]: o.name for o in g.output}
        for o in outs:  # the cross-attention presents of the with-past branch: its past inputs
            if o not in produced:
                produced[o] = f"{tag}/{o}_id"
                nodes.append(h.make_node("Identity", [o.replace("present_", "")], [produced[o]]))
        return h.make_graph(nodes + list(g.node), f"{tag}_branch", [],
                            [h.make_tensor_value_info(produced[o], onnx.TensorProto.FLOAT, _rank(o)) for o in outs],
                            list(g.initializer))

    then_g, else_g = branch(mp, "past"), branch(mf, "first")
    flag = h.make_tensor_value_info("use_cache_branch", onnx.TensorProto.BOOL, [1])
    graph = h.make_graph([h.make_node("If", ["use_cache_branch"], outs, then_branch=then_g, else_branch=else_g)],
                         "merged_decoder", [*mp.graph.input, *[i for i in mf.graph.input if i.name not in
                                                               {j.name for j in mp.graph.input}], flag],
                         [h.make_tensor_value_info(o, onnx.TensorProto.FLOAT, _rank(o)) for o in outs])
    m = h.make_model(graph, opset_imports=list(mp.opset_import))
    m.ir_version = mp.ir_version
    onnx.checker.check_model(m)
    onnx.save(m, str(dst))


def _copy(src: Path, dst: Path) -> None:
    dst.write_bytes(src.read_bytes())


def jobs(flt: Path) -> dict[str, tuple]:
    """stem -> (function, args...): `function(*args, dst)` writes it; the zoo's conv nets
    beside the torch exports"""
    out: dict[str, tuple] = {}
    for name in ("bert", "convnet", "lstm"):
        out[f"{name}_dynq"] = (quantize, flt / f"{name}_ts17.onnx", "dynq")
    for name, src in (("bert", flt / "bert_ts17.onnx"), ("convnet", flt / "convnet_ts17.onnx"),
                      ("mobilenet_v2", ZOO / "mobilenet_v2_ts13.onnx"),
                      ("squeezenet1_1", ZOO / "squeezenet1_1_ts11.onnx")):
        for fmt in ("qdq", "qop"):
            for kind in ("u8_s8", "s8_s8_pc", "u8_s8_pc", "u8_u8"):
                out[f"{name}_{fmt}_{kind}"] = (quantize, src, f"{fmt}_{kind}")
    for name in ("bert", "convnet", "lstm"):
        out[f"{name}_f16"] = (half, flt / f"{name}_ts17.onnx", False)
        out[f"{name}_f16_io32"] = (half, flt / f"{name}_ts17.onnx", True)
    # mobilenet_v2 and bert: the converter has no adapter down to 10 (Clip, Gather); kept to see
    for name, src in (("mobilenet_v2", ZOO / "mobilenet_v2_ts11.onnx"),
                      ("squeezenet1_1", ZOO / "squeezenet1_1_ts11.onnx"), ("bert", ZOO / "bert_ts11.onnx")):
        for k in (10,):
            out[f"{name}_op{k}"] = (old_opset, src, k)
    for k in (9, 10, 11):
        out[f"oldops_ts{k}"] = (_copy, flt / f"oldops_ts{k}.onnx")
        out[f"oldops_ts{k}_dropout"] = (with_dropout, flt / f"oldops_ts{k}.onnx")
    for arch in ("whisper", "bart", "t5", "marian"):
        for kind in ("past", "first"):
            out[f"{arch}_dec_{kind}"] = (_copy, flt / f"{arch}_dec_{kind}.onnx")
        out[f"{arch}_dec_merged"] = (merged_decoder, flt / f"{arch}_dec_past.onnx", flt / f"{arch}_dec_first.onnx")
    return out


def main() -> None:
    warnings.filterwarnings("ignore")
    ap = argparse.ArgumentParser()
    ap.add_argument("--float", type=Path, default=Path("/tmp/quantgen/float"))
    ap.add_argument("--out", type=Path, default=ROOT / "tests" / "data" / "quant")
    ap.add_argument("--all", action="store_true")
    ap.add_argument("stems", nargs="*")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    todo = jobs(a.float)
    for stem in a.stems or (todo if a.all else COMMITTED):
        fn, *args = todo[stem]
        dst = a.out / f"{stem}.onnx"
        try:
            fn(*args, dst)
            print("wrote", dst, flush=True)
        except Exception as e:  # a tool's own failure (the quantizer's, the converter's): reported
            print("failed", stem, type(e).__name__, str(e).splitlines()[:1], flush=True)


if __name__ == "__main__":
    np.random.seed(0)
    main()
