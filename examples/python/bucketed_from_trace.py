"""Buckets chosen from a trace of observed batch sizes: one library with a padded version per
bucket, picked per call by the batch size.

    python examples/python/bucketed_from_trace.py [OUT_DIR]
"""

import sys
from pathlib import Path

import numpy as np

import onnxcc
from onnxcc.compiler import CompileOptions
from onnxcc.simulate import auto_buckets

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
MODEL = ROOT / "models" / "mlp.onnx"
out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "out" / "mlp_buckets"

choice = auto_buckets(MODEL, CompileOptions(), "batch", HERE / "trace.txt", k=2)
print(choice.report())
onnxcc.compile(MODEL, out, buckets={"batch": choice.buckets})
m = onnxcc.load(out)
for batch in (3, 20, 100):
    y = m.run({"x": np.ones((batch, 64), np.float32)})["y"]
    print(f"batch {batch}: {y.shape} by {m.version_info(m.last_version).split(';')[0]}")
