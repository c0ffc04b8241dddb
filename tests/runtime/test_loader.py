"""runtime.loader over an artifact whose kernel is plain C (no LLVM needed)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import sympy

from onnxcc.codegen.c.abi import ArtifactSpec, TensorSig, VersionSpec
from onnxcc.codegen.c.build import build_library
from onnxcc.errors import GuardError
from onnxcc.ir import DType, SymbolInfo, sym
from onnxcc.runtime import CompiledModel, load

N = sym("N")

# y[i] = flag[i] ? x[i] * k : 0 ;  count = number of set flags. Two versions, same body.
KERNEL = r"""
#include <stdbool.h>
#include <stdint.h>
static int32_t body(const int64_t *s, void *const *in, void *const *out) {
  const _Float16 *x = in[0];
  const bool *flag = in[1];
  int64_t k = *(const int64_t *)in[2];
  float *y = out[0];
  int64_t *count = out[1];
  *count = 0;
  for (int64_t i = 0; i < s[0]; i++) {
    y[i] = flag[i] ? (float)x[i] * (float)k : 0.0f;
    *count += flag[i];
  }
  return 0;
}
int32_t masked_small(const int64_t *s, void *const *in, void *const *out, void *ws) {
  (void)ws;
  return body(s, in, out);
}
int32_t masked_any(const int64_t *s, void *const *in, void *const *out, void *ws) {
  (void)ws;
  return body(s, in, out);
}
"""


def masked_spec(name: str = "masked") -> ArtifactSpec:
    return ArtifactSpec(
        name=name,
        inputs=[TensorSig("x", DType.f16, (N,)), TensorSig("flag", DType.bool, (N,)),
                TensorSig("k", DType.i64, ())],
        outputs=[TensorSig("y", DType.f32, (N,)), TensorSig("count", DType.i64, ())],
        symbols=[SymbolInfo("N", 0, 100)],
        versions=[VersionSpec(f"{name}_small", N <= 8, "", {}, 0, "bucket", {"bucket": 8}),
                  VersionSpec(f"{name}_any", sympy.true)],
    )


def _build(d: Path, name: str = "masked") -> Path:
    src = d / f"{name}_kernel.c"
    src.write_text(KERNEL.replace("masked_", f"{name}_"))
    return build_library(masked_spec(name), [], d, extra_c_sources=[src])


@pytest.fixture(scope="module")
def art(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("masked")
    _build(d)
    return d


@pytest.fixture(scope="module")
def model(art) -> CompiledModel:
    return load(art)


def test_run_dict_and_list(model):
    x = np.arange(6, dtype=np.float16)
    flag = np.array([1, 0, 1, 1, 0, 1], dtype=bool)
    want = np.where(flag, x.astype(np.float32) * 3, 0)
    for out in (model.run({"x": x, "flag": flag, "k": 3}), model.run([x, flag, np.int64(3)])):
        np.testing.assert_array_equal(out["y"], want)
        assert out["count"].shape == () and int(out["count"]) == 4
        assert model.last_version == 0
    model.run({"x": np.zeros(9, np.float16), "flag": np.zeros(9, bool), "k": 1})
    assert model.last_version == 1


def test_non_contiguous_and_empty(model):
    x = np.arange(20, dtype=np.float16)[::2]
    out = model.run({"x": x, "flag": np.ones(10, bool), "k": 2})
    np.testing.assert_array_equal(out["y"], x.astype(np.float32) * 2)
    empty = model.run({"x": np.zeros(0, np.float16), "flag": np.zeros(0, bool), "k": 2})
    assert empty["y"].shape == (0,) and int(empty["count"]) == 0


def test_input_errors(model):
    good = {"x": np.zeros(3, np.float16), "flag": np.zeros(3, bool), "k": 1}
    with pytest.raises(GuardError, match=r'input "x": expected dtype f16 \(float16\), got float32'):
        model.run({**good, "x": np.zeros(3, np.float32)})
    with pytest.raises(GuardError, match="missing input"):
        model.run({"x": good["x"], "k": 1})
    with pytest.raises(GuardError, match="has no input"):
        model.run({**good, "nope": 1})
    msg = 'input "flag" dim 0: expected N = 3 \\(bound by input "x" dim 0\\), got 4'
    with pytest.raises(GuardError, match=msg) as e:
        model.run({**good, "flag": np.zeros(4, bool)})
    assert e.value.code == 4
    with pytest.raises(GuardError, match='input "x" dim 0: N = 101, out of range'):
        model.run({"x": np.zeros(101, np.float16), "flag": np.zeros(101, bool), "k": 1})
    # the C side checks dtypes too, with DLPack's own view of them
    ins = [good["x"], good["flag"].view(np.uint8), np.array(1)]
    rc = model.run_raw(ins, [np.zeros(3, np.float32), np.array(0)])
    assert rc == 3 and model.last_error == 'input "flag": expected dtype bool, got u8'


def test_introspection(model, art):
    assert model.name == "masked" and model.num_versions == 2
    assert [t["name"] for t in model.inputs] == ["x", "flag", "k"]
    assert model.outputs[0] == {"name": "y", "dtype": "f32", "shape": ["N"]}
    assert model.version_info(0).startswith("version 0 (bucket, masked_small): guard N <= 8")
    assert model.output_shape({"x": np.zeros(5, np.float16), "flag": np.zeros(5, bool), "k": 0}, "y") == (5,)
    assert "masked" in repr(model) and "x: f16[N]" in repr(model)
    assert load(art / "masked.json").name == "masked"


def test_directory_with_two_artifacts(art, tmp_path):
    _build(tmp_path, "one")
    _build(tmp_path, "two")
    with pytest.raises(FileNotFoundError, match="found 2"):
        load(tmp_path)
    assert load(tmp_path / "two.json").name == "two"


def test_loader_needs_no_compiler(art):
    """The runtime must import and run with sympy and llvmlite unavailable."""
    script = (
        "import sys\n"
        "sys.modules['sympy'] = None\nsys.modules['llvmlite'] = None\n"
        "import numpy as np\nfrom onnxcc.runtime import load\n"
        f"m = load({str(art)!r})\n"
        "print(m.run({'x': np.ones(2, np.float16), 'flag': np.ones(2, bool), 'k': 5})['y'].tolist())\n"
        "print(sorted(k for k in sys.modules if k.startswith('onnxcc')))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "[5.0, 5.0]"
    assert not any(m.startswith(("onnxcc.codegen", "onnxcc.ir")) for m in eval(lines[1]))


def test_run_fast_path_edge_inputs(model):
    """run() precomputes dtypes and reuses per-thread DLTensor buffers: the checks stay."""
    # a dict of the right size with a wrong name still names the culprit
    with pytest.raises(GuardError, match=r"has no input\(s\) nope"):
        model.run({"x": np.zeros(2, np.float16), "flag": np.zeros(2, bool), "nope": 1})
    # python lists take the model's dtypes; numpy scalars keep theirs
    out = model.run({"x": [1.0, 2.0], "flag": [True, False], "k": 4})
    assert out["y"].tolist() == [4.0, 0.0] and int(out["count"]) == 1
    with pytest.raises(GuardError, match=r'input "k": expected dtype i64 \(int64\), got int32'):
        model.run({"x": [1.0], "flag": [True], "k": np.int32(4)})
    # a rank mismatch reaches the C side's check (the shape buffers take any rank)
    with pytest.raises(GuardError, match='input "x"') as e:
        model.run({"x": np.zeros((2, 3), np.float16), "flag": np.zeros(2, bool), "k": 1})
    assert e.value.code in (3, 4)
    # a rank-1 input after a rank-2 one in the same slot: the slot's shape is rewritten
    good = model.run({"x": np.ones(3, np.float16), "flag": np.ones(3, bool), "k": 1})
    assert good["y"].tolist() == [1.0, 1.0, 1.0]


def test_run_outputs_fresh_and_threads(model):
    """Outputs are new arrays each call, and concurrent threads do not share buffers."""
    from concurrent.futures import ThreadPoolExecutor

    a = model.run({"x": np.ones(3, np.float16), "flag": np.ones(3, bool), "k": 1})
    b = model.run({"x": np.ones(3, np.float16), "flag": np.ones(3, bool), "k": 2})
    assert not np.shares_memory(a["y"], b["y"]) and a["y"].tolist() == [1.0] * 3

    def work(n: int) -> bool:
        x = np.arange(n, dtype=np.float16)
        flag = np.arange(n) % 2 == 0
        for k in range(30):
            out = model.run({"x": x, "flag": flag, "k": k})
            if out["y"].shape != (n,) or int(out["count"]) != int(flag.sum()):
                return False
            if not np.array_equal(out["y"], np.where(flag, x.astype(np.float32) * k, 0)):
                return False
        return True

    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(work, [1 + (i * 7) % 40 for i in range(32)]))


def test_run_portable_pointer_reader(model, monkeypatch):
    """The fast data-pointer reader agrees with numpy's, and run() works with the portable one."""
    from onnxcc.runtime import loader

    base = np.arange(30, dtype=np.int32).reshape(5, 6)
    for a in (base, base[2:, 1:], base[::2], np.zeros(()), np.empty(0)):
        assert loader._data_ptr(a) == a.ctypes.data
    feed = {"x": np.full(4, 2, np.float16), "flag": np.ones(4, bool), "k": 3}
    monkeypatch.setattr(loader, "_data_ptr", loader._data_ptr_slow)
    assert model.run(feed)["y"].tolist() == [6.0] * 4
    # the _Tensors path (CUDA artifacts, hosts with another DLTensor layout) agrees
    monkeypatch.setattr(loader, "_WORD_LAYOUT", False)
    out = model.run(feed)
    assert out["y"].tolist() == [6.0] * 4 and int(out["count"]) == 4
    with pytest.raises(GuardError, match="out of range"):
        model.run({"x": np.zeros(101, np.float16), "flag": np.zeros(101, bool), "k": 1})
