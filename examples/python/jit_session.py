"""A JIT session over the mlp sample: every call is served at once (by the generic version), and a
shape seen `threshold` times gets its own specialised version, compiled in the background.

    python examples/python/jit_session.py [CACHE_DIR]
"""

import sys
from pathlib import Path

import numpy as np

import onnxcc

ROOT = Path(__file__).resolve().parents[2]
cache = sys.argv[1] if len(sys.argv) > 1 else None

rng = np.random.default_rng(0)
with onnxcc.Session(ROOT / "models" / "mlp.onnx", threshold=3, cache=cache) as s:
    for batch in [8, 8, 8, 3, 8]:
        y = s.run({"x": rng.standard_normal((batch, 64)).astype(np.float32)})["y"]
    s.wait()  # let the background compile finish
    y = s.run({"x": rng.standard_normal((8, 64)).astype(np.float32)})["y"]
    st = s.stats
    print(f"{st.calls} calls: {st.hits} on a specialised version, {st.misses} on the generic one; "
          f"specialised {st.specialized}")
