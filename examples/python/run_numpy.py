"""Compile the mlp sample, load it, and call it with numpy arrays.

    python examples/python/run_numpy.py [OUT_DIR]
"""

import sys
from pathlib import Path

import numpy as np

import onnxcc
from onnxcc.errors import OnnxccError

ROOT = Path(__file__).resolve().parents[2]
out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "out" / "mlp"

onnxcc.compile(ROOT / "models" / "mlp.onnx", out, specialize={"batch": [1]})
m = onnxcc.load(out)
print(m)

x = np.random.default_rng(0).standard_normal((4, 64)).astype(np.float32)
y = m.run({"x": x})["y"]
print("batch 4:", y.shape, "rows sum to", np.round(y.sum(axis=1), 4), "-", m.version_info(m.last_version))

buf = np.empty((1, 10), np.float32)  # a preallocated output, written in place
m.run({"x": x[:1]}, out={"y": buf})
print("batch 1 into a preallocated buffer:", m.version_info(m.last_version).split(";")[0])

try:
    m.run({"x": x.astype(np.float64)})  # the model takes f32: an error naming the input
except OnnxccError as e:
    print("float64:", e)
print("float64 with cast=True:", m.run({"x": x.astype(np.float64)}, cast=True)["y"].dtype)
