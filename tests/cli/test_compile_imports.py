"""What a CPU `onnxcc compile` loads: the modules only other paths need (the CUDA backend,
the numpy interpreter, the conformance runner, the JIT session, the simulator, the test
helpers, onnxruntime, onnx's reference evaluator) stay unimported, so every compile (and
every shape class a JIT session builds in a fresh process) does not pay for them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from onnxcc.testing import MODELS_DIR

ROOT = Path(__file__).resolve().parents[2]

#: loaded by other paths only; a CPU compile that imports one has lost a lazy import
NOT_FOR_A_CPU_COMPILE = (
    "onnxcc.codegen.cuda", "onnxcc.interp", "onnxcc.conformance", "onnxcc.session",
    "onnxcc.simulate", "onnxcc.testing", "onnxcc.testing_c", "onnxcc.model_sets",
    "onnxcc.codegen.cpu.jit", "onnxcc.ort_compat", "onnxruntime", "onnx.reference", "torch",
)

_CHILD = """
import json, sys
from onnxcc.cli import main
sys.argv = ["onnxcc", "compile", sys.argv[1], "-o", sys.argv[2], "-q"]
try:
    main()
except SystemExit as e:
    if e.code not in (0, None):
        raise
print(json.dumps(sorted(sys.modules)))
"""


def test_cpu_compile_leaves_the_optional_modules_unimported(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    out = tmp_path / "art"
    proc = subprocess.run([sys.executable, "-c", _CHILD, str(MODELS_DIR / "mlp.onnx"), str(out)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    loaded = set(json.loads(proc.stdout.strip().splitlines()[-1]))
    # the compile did run here: the CPU backend and the link are loaded, the library written
    assert "onnxcc.codegen.cpu.backend" in loaded and "onnxcc.codegen.c.build" in loaded
    assert (out / "libmlp.so").is_file()
    unwanted = sorted(m for m in loaded if any(m == p or m.startswith(p + ".") for p in NOT_FOR_A_CPU_COMPILE))
    assert not unwanted, f"a CPU compile imported {unwanted}"
