"""Write int8 variants of the torch-exported models in tests/data/torch_more, quantized by
onnxruntime's own tools as users quantize models (needs only onnxruntime and numpy):

  NAME_dynq.onnx       quantize_dynamic (int8 weights; DynamicQuantizeLinear + MatMulInteger /
                       ConvInteger, com.microsoft DynamicQuantizeLSTM for LSTMs)
  NAME_QDQ.onnx        quantize_static, QuantizeLinear / DequantizeLinear pairs around float ops
  NAME_QOperator.onnx  quantize_static, QOperator format: QLinearConv, QLinearMatMul and the
                       com.microsoft QLinear* ops, QGemm

Static quantization calibrates on the inputs tests/e2e/torch_more_inputs.py feeds the model.
By default the files tests/data/quantized holds are written there (the ones tests/e2e/
test_quantized_models.py runs); `--all DIR` writes every variant of every model into DIR
(resnet's QOperator form fails inside onnxruntime's quantizer in 1.32 and is skipped).

  python models/quantize_torch_more.py
  python models/quantize_torch_more.py --all /tmp/q
"""

from __future__ import annotations

import sys
from pathlib import Path

from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_dynamic, quantize_static

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "tests" / "data" / "torch_more"
OUT = ROOT / "tests" / "data" / "quantized"
MODELS = ("resnet", "unet", "convnext", "kvcache", "rnns", "audio")
#: what tests/data/quantized holds: small files (< 200 KB) covering every QOperator op the
#: quantizer writes for these models, and the dynamic LSTM
COMMITTED = ("audio_QOperator", "kvcache_QOperator", "unet_QOperator", "rnns_QOperator", "rnns_dynq")


class _Feeds(CalibrationDataReader):
    def __init__(self, feeds: list[dict]):
        self.it = iter(feeds)

    def get_next(self):
        return next(self.it, None)


def write(name: str, variant: str, out: Path) -> Path:
    sys.path.insert(0, str(ROOT / "tests" / "e2e"))
    from torch_more_inputs import INPUTS  # the inputs the tests feed

    src, dst = SRC / f"{name}_ts17.onnx", out / f"{name}_{variant}.onnx"
    if variant == "dynq":
        quantize_dynamic(src, dst, weight_type=QuantType.QInt8)
    else:
        quantize_static(src, dst, _Feeds(INPUTS[name]), quant_format=QuantFormat[variant],
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    return dst


def main(argv: list[str]) -> None:
    if argv[:1] == ["--all"]:
        out = Path(argv[1])
        jobs = [(n, v) for n in MODELS for v in ("dynq", "QDQ", "QOperator")]
    else:
        out = OUT
        jobs = [tuple(stem.rsplit("_", 1)) for stem in COMMITTED]
    out.mkdir(parents=True, exist_ok=True)
    for name, variant in jobs:
        try:
            print("wrote", write(name, variant, out))
        except Exception as e:  # the quantizer's own failures (resnet QOperator): reported, skipped
            print(f"quantizer failed on {name} {variant}: {str(e)[:200]}")


if __name__ == "__main__":
    main(sys.argv[1:])
