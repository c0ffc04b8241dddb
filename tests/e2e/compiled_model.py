"""What e2e tests of one generated model share: the model built once per module, compiled to a
library loaded for the numeric comparisons (`lib_fixture`), and for the tests that also read
what the lowering chose, to its kernel IR text (`built_fixture`: test_conv_tap_regimes.py,
test_nhwc_dw_padcopy.py); the random image fed at symbolic N, H, W (`image_feeds`) and the
comparison of a library's outputs with onnxruntime's (`assert_matches_onnxruntime`: within
tolerances, or exactly); whether this machine's backend has the f32 conv call
(`has_f32_conv_call`: the tests that read the calls the lowering emits)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest

import onnxcc
from onnxcc.testing import ort_run


def compile_kernel_and_lib(tmp_path_factory, name: str, model: onnx.ModelProto, **options):
    """-> (model path, kernel IR text, loaded library) of `model`, saved as NAME.onnx in a new
    directory, both built with `options` (one version unless they say otherwise: the generic
    version is the one the tests' symbolic extents exercise)."""
    d = tmp_path_factory.mktemp(name)
    path = str(d / f"{name}.onnx")
    onnx.save(model, path)
    options.setdefault("max_versions", 1)
    kernel = onnxcc.compile(path, str(d / "kir"), emit="kernel", **options).text
    onnxcc.compile(path, str(d / "lib"), **options)
    return path, kernel, onnxcc.load(str(d / "lib"))


def built_fixture(name: str, make_model: Callable[[], onnx.ModelProto], **options):
    """A module-scoped fixture `built`: `compile_kernel_and_lib` of `make_model()`, once per
    test module (`built = built_fixture("taps", _model)` at the module's top level)."""

    @pytest.fixture(scope="module")
    def built(tmp_path_factory):
        return compile_kernel_and_lib(tmp_path_factory, name, make_model(), **options)

    return built


def lib_fixture(name: str, write_model: Callable[[Path], object], **options):
    """A module-scoped fixture `built` -> (model path, loaded library): `write_model(path)`
    saves the model as NAME.onnx in a new directory, compiled there with `options` (the
    compiler's defaults otherwise: every version it makes)."""

    @pytest.fixture(scope="module")
    def built(tmp_path_factory):
        d = tmp_path_factory.mktemp(name)
        path = d / f"{name}.onnx"
        write_model(path)
        onnxcc.compile(path, d / "lib", **options)
        return path, onnxcc.load(d / "lib")

    return built


def f32conv_sizes(kernel_text: str) -> list[dict[str, str]]:
    """the sizes (the text before the buffers) of every `call onnxcc_f32conv(...)` in a kernel
    IR dump, and of every stem call `onnxcc_f32stem_*(...)` and Winograd call
    `onnxcc_f32wino_*(...)` (kernel/conv_stem_call.py, conv_wino_call.py: the same sizes), one
    dict per call in the dump's order: each size's text by its name
    (kernel/conv_call.py `SIZES`)"""
    from onnxcc.kernel.conv_call import SIZES

    calls = re.findall(r"call onnxcc_f32(?:conv|stem_\w+|wino_\w+)\(([^;]*);", kernel_text)
    return [dict(zip(SIZES, (s.strip() for s in c.split(",")), strict=True)) for c in calls]


def has_f32_conv_call() -> bool:
    """whether the default CPU backend lowers a dense channels-last conv to the implicit-GEMM
    call (ops/conv_implicit.py), so a test may look for `onnxcc_f32conv` in the kernel IR"""
    from onnxcc.codegen.cpu.backend import CpuBackend
    from onnxcc.compiler import CompileOptions

    return CpuBackend.from_options(CompileOptions()).f32_conv_call()


def image_feeds(dims: dict[str, int], channels: int = 3, seed: int | None = None) -> dict[str, np.ndarray]:
    """{"x": N(0, 1) f32 values of shape [N, channels, H, W]} for `dims` (N, H, W), drawn from
    a generator seeded by `seed`, by default H * 100 + W (each plane its own values)"""
    rng = np.random.default_rng(dims["H"] * 100 + dims["W"] if seed is None else seed)
    return {"x": rng.standard_normal((dims["N"], channels, dims["H"], dims["W"])).astype(np.float32)}


def assert_matches_onnxruntime(path, lib, feeds: dict[str, np.ndarray], rtol: float = 0.0, atol: float = 0.0,
                               where: object = "") -> None:
    """`lib.run(feeds)` gives the outputs onnxruntime gives for the model at `path`: the same
    names, shapes, and values within rtol / atol (`where` names the case in a failure). With
    both 0, the default, exactly: the same dtypes and every element equal (the integer
    kernels, whose i32 sums and requantization are onnxruntime's)"""
    want, got = ort_run(str(path), feeds), lib.run(feeds)
    assert set(got) == set(want)
    for name, ref in want.items():
        assert got[name].shape == ref.shape, name
        if rtol == 0 and atol == 0:
            assert got[name].dtype == ref.dtype, name
            np.testing.assert_array_equal(got[name], ref, err_msg=f"{name} at {where}")
        else:
            np.testing.assert_allclose(got[name], ref, rtol=rtol, atol=atol, err_msg=f"{name} at {where}")


_THREADED_RUN = """
import sys, numpy as np, onnxcc
lib = onnxcc.load(sys.argv[1])
d = np.load(sys.argv[2])
out = {}
for k in d.files:
    for j, y in enumerate(lib.run({"x": d[k]}).values()):
        out[f"{k}_{j}"] = y
np.savez(sys.argv[3], **out)
"""


def assert_threads_match_onnxruntime(path: Path, shapes, threads: int, tmp_path: Path,
                                     rtol: float = 1e-4, atol: float = 1e-4, channels: int = 3) -> None:
    """The library `lib_fixture` built beside the model at `path`, run in a child process on
    `threads` threads (the pool's size is fixed at its first use in a process) at N(0, 1)
    inputs "x" of `channels` channels for each (N, H, W) of `shapes` (seeded by `threads`),
    gives onnxruntime's outputs, one by one, within rtol / atol."""
    rng = np.random.default_rng(threads)
    xs = {f"x{i}": rng.standard_normal((n, channels, h, w)).astype(np.float32)
          for i, (n, h, w) in enumerate(shapes)}
    np.savez(tmp_path / "in.npz", **xs)
    env = dict(os.environ, ONNXCC_NUM_THREADS=str(threads))
    args = [str(path.parent / "lib"), str(tmp_path / "in.npz"), str(tmp_path / "out.npz")]
    subprocess.run([sys.executable, "-c", _THREADED_RUN, *args], check=True, env=env)
    got = np.load(tmp_path / "out.npz")
    model = onnx.load(path)
    for k, x in xs.items():
        for j, want in enumerate(ort_run(model, {"x": x}).values()):
            np.testing.assert_allclose(got[f"{k}_{j}"], want, rtol=rtol, atol=atol,
                                       err_msg=f"{threads} threads, x {x.shape}, output {j}")
