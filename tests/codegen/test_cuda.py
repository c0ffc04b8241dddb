"""CUDA backend without a GPU: PTX structure, ptxas on every op and every sample model and
version kind (sm_80, sm_90), the CLI, and the host library's error paths (no driver, CPU
tensors; a fake driver for the launch path). `@pytest.mark.gpu` tests need a real GPU."""

from __future__ import annotations

import ctypes
import functools
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from onnxcc.cli import main
from onnxcc.codegen.cuda.emit import CudaModule, emit_ptx, parse_arch
from onnxcc.compiler import CompileOptions, compile_model
from onnxcc.errors import CompileError, OnnxccError
from onnxcc.ir import DType, sym
from onnxcc.kernel import (
    KernelProgram,
    Var,
    argmin,
    cast,
    check,
    maximum,
    plan,
    power,
    rem,
    rmin,
    rprod,
    rsum,
    select,
    truncdiv,
    unary,
)
from onnxcc.kernel.expr import FLOAT_UNARY
from onnxcc.testing import MODELS_DIR, SAMPLE_MODELS

PTXAS = shutil.which("ptxas")
needs_ptxas = pytest.mark.skipif(PTXAS is None, reason="ptxas (CUDA toolkit) not installed")
ARCHS = ["sm_80", "sm_90"]
CONTROL_FLOW = ("if_model", "loop_model", "scan_model")  # not compiled natively yet
NATIVE_MODELS = [m for m in SAMPLE_MODELS if m not in CONTROL_FLOW]
N = sym("N")
HERE = Path(__file__).parent


def assemble(ptx: str, arch: str, tmp_path: Path) -> None:
    src = tmp_path / f"k_{arch}.ptx"
    src.write_text(ptx)
    r = subprocess.run([PTXAS, f"-arch={arch}", str(src), "-o", str(tmp_path / "k.cubin")],
                       capture_output=True, text=True)
    assert r.returncode == 0, f"ptxas -arch={arch} failed:\n{r.stderr[-3000:]}"


def undefined_functions(ptx: str) -> list[str]:
    return re.findall(r"\.extern\s+\.func[^(]*?\b([A-Za-z_$][\w$.]*)\s*\(", ptx)


def every_op_program(dt: DType) -> KernelProgram:
    """One compute per float unary op, plus binaries, reductions, casts and checks."""
    p = KernelProgram.new(f"ops_{dt.value}", ["N"])
    X = p.input("X", dt, (N, 5))
    Yb = p.input("Yb", dt, (N, 5))
    Idx = p.input("Idx", DType.i64, (N,))
    k = Var("k")
    for op in sorted(FLOAT_UNARY):
        out = p.output(f"u_{op}", DType.bool if op in ("isnan", "isinf") else dt, (N, 5))
        p.compute(out, lambda n, c, op=op: unary(op, X[n, c]))
    ob = p.output("bin", dt, (N, 5))
    p.compute(ob, lambda n, c: power(X[n, c], Yb[n, c]) + rem(X[n, c], Yb[n, c]) + X[n, c] % Yb[n, c]
              + maximum(X[n, c], Yb[n, c]) + truncdiv(X[n, c], Yb[n, c]) + X[n, c] // Yb[n, c])
    red = p.output("red", dt, (N,))
    p.compute(red, lambda n: rsum([(k, 5)], X[n, k]) * rprod([(k, 5)], Yb[n, k]) + rmin([(k, 5)], X[n, k]))
    am = p.output("am", DType.i64, (N,))
    p.compute(am, lambda n: argmin(k, 5, X[n, k]) + cast(X[n, 0], DType.i64) // (Idx[n] + 1))
    ch = p.output("ch", dt, (N,))
    p.compute(ch, lambda n: select(Idx[n] < 3, X[check(Idx[n] < N, Idx[n]), 0], cast(Idx[n], dt)))
    cv = p.output("cv", DType.f16, (N, 5))
    p.compute(cv, lambda n, c: cast(cast(X[n, c], DType.bf16), DType.f16))
    return p


# ---- PTX text ---------------------------------------------------------------------------------


def small_program() -> KernelProgram:
    p = KernelProgram.new("small", ["N"])
    X = p.input("X", DType.f32, (N, 3))
    W = p.const("W", np.arange(6, dtype=np.float32).reshape(3, 2))
    T = p.temp("T", DType.f32, (N, 2))
    Y = p.output("Y", DType.f32, (N,))
    k = Var("k")
    p.compute(T, lambda n, j: rsum([(k, 3)], X[n, k] * W[k, j]))
    p.compute(Y, lambda n: T[n, 0] - T[n, 1])
    return p


def test_ptx_has_one_grid_stride_kernel_per_compute():
    p = small_program()
    cm = CudaModule("small", "sm_80")
    launches = cm.add_program(p, plan(p), "small_v0")
    assert [la.kernel for la in launches] == ["small_v0_k0", "small_v0_k1"] == cm.kernels
    assert [str(la.work) for la in launches] == ["2*N", "N"]
    ptx = cm.ptx()
    assert ".target sm_80" in ptx and ".address_size 64" in ptx
    assert ptx.count(".visible .entry ") == 2
    for reg in ("%tid.x", "%ntid.x", "%ctaid.x", "%nctaid.x"):
        assert reg in ptx
    body = ptx[ptx.index(".visible .entry small_v0_k1"):]
    back = [m.group(1) for m in re.finditer(r"^(\$L__\w+):", body, re.M)
            if re.search(rf"\bbra(\.uni)?\s+{re.escape(m.group(1))};", body[m.end():])]
    assert back, "no backward branch: the grid-stride loop is missing"
    assert undefined_functions(ptx) == []
    # the weights are a module global the runtime fills, not PTX data
    (name,) = cm.consts
    assert re.search(rf"\.visible \.global \.align 64 \.b8 {name}\[24\];", ptx)
    assert cm.consts[name] == np.arange(6, dtype=np.float32).tobytes()


def test_parse_arch():
    assert parse_arch("sm_80") == (80, False) and parse_arch("sm_90a") == (90, True)
    for bad in ("sm80", "compute_80", "sm_35"):
        with pytest.raises(CompileError, match="CUDA arch"):
            parse_arch(bad)


@needs_ptxas
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("dt", [DType.f32, DType.f64, DType.f16])
def test_every_op_assembles(dt, arch, tmp_path):
    p = every_op_program(dt)
    cm = CudaModule(p.name, arch)
    cm.add_program(p, plan(p), p.name)
    ptx = cm.ptx()
    assert undefined_functions(ptx) == []
    assemble(ptx, arch, tmp_path)


# ---- sample models: every version kind, both archs ----------------------------------------


def model_options(model: str, arch: str) -> CompileOptions:
    """exact (batch=1), bucket (seq, where the model has it), divisible (default k), generic."""
    buckets = {"seq": [8, 64]} if "seq" in SAMPLE_MODELS[model][0] else {}
    return CompileOptions(target="cuda", cuda_arch=arch, specialize={"batch": [1]}, buckets=buckets)


@functools.cache
def model_llvm(model: str):
    """The NVPTX LLVM module of a sample model (the IR is the same for every arch)."""
    return compile_model(MODELS_DIR / f"{model}.onnx", "unused", model_options(model, "sm_80"), emit="llvm")


@needs_ptxas
@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("model", NATIVE_MODELS)
def test_sample_model_ptx_assembles(model, arch, tmp_path):
    art = model_llvm(model)
    kinds = {art.module.functions[v].attrs.get("kind", "generic") for v in art.module.dispatch["main"]}
    assert {"generic", "exact"} <= kinds
    if "seq" in SAMPLE_MODELS[model][0]:
        assert "bucket" in kinds
    if model in ("transformer", "convnet"):
        assert "divisible" in kinds
    ptx = emit_ptx(art.text, arch)
    assert f".target {arch}" in ptx
    assert undefined_functions(ptx) == []
    assemble(ptx, arch, tmp_path)


@pytest.mark.parametrize("model", CONTROL_FLOW)
def test_control_flow_models_are_refused_clearly_on_cuda(model, tmp_path):
    """Control flow is not compiled for CUDA yet: the refusal must be this one clear error (not a
    crash, not another error). When CUDA control flow lands, this test becomes an assembly test."""
    with pytest.raises(OnnxccError, match=r"cuda codegen: .*control flow.* not supported on CUDA yet"):
        compile_model(MODELS_DIR / f"{model}.onnx", tmp_path, CompileOptions(target="cuda"), emit="ptx")


# ---- the library ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def mlp_cuda(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("cuda") / "mlp"
    compile_model(MODELS_DIR / "mlp.onnx", out, CompileOptions(target="cuda", specialize={"batch": [1]}))
    return out


def test_cuda_artifact_files_and_metadata(mlp_cuda):
    meta = json.loads((mlp_cuda / "mlp.json").read_text())
    assert meta["target"] == "cuda" and meta["arch"] == "sm_80" and meta["triple"] == "nvptx64-nvidia-cuda"
    assert meta["metadata"]["cuda_arch"] == "sm_80"
    assert all(v["launches"] for v in meta["versions"])
    assert (mlp_cuda / "mlp.ptx").read_text().startswith("//")
    header = (mlp_cuda / "mlp.h").read_text()
    assert "void mlp_set_stream(void *stream);" in header
    nm = subprocess.run(["nm", "-D", "--defined-only", str(mlp_cuda / "libmlp.so")], capture_output=True,
                        text=True)
    exported = set(re.findall(r" T (\w+)", nm.stdout))
    assert {"mlp_run", "mlp_output_shape", "mlp_set_stream"} <= exported
    assert not any(e.startswith("onnxcc_") for e in exported)
    # the library links no CUDA library: the driver is found at run time
    ldd = subprocess.run(["ldd", str(mlp_cuda / "libmlp.so")], capture_output=True, text=True).stdout
    assert "cuda" not in ldd


def test_inspect_shows_target_and_arch(mlp_cuda):
    r = CliRunner().invoke(main, ["inspect", str(mlp_cuda)])
    assert r.exit_code == 0, r.output
    assert "target cuda (nvptx64-nvidia-cuda, sm_80)" in r.output


def test_cli_emit_ptx(tmp_path):
    r = CliRunner().invoke(main, ["compile", str(MODELS_DIR / "mlp.onnx"), "-o", str(tmp_path / "m"),
                                  "--target", "cuda", "--cuda-arch", "sm_90", "--emit", "ptx"])
    assert r.exit_code == 0, r.output
    assert ".target sm_90" in r.output and ".visible .entry mlp_v0_k0(" in r.output


def test_emit_ptx_needs_cuda_target(tmp_path):
    with pytest.raises(OnnxccError, match="--emit ptx needs --target cuda"):
        compile_model(MODELS_DIR / "mlp.onnx", tmp_path, CompileOptions(), emit="ptx")


def test_output_shape_takes_host_descriptions(mlp_cuda):
    from onnxcc.runtime import load

    m = load(mlp_cuda)
    assert m.output_shape({"x": np.zeros((5, 64), np.float32)}, "y") == (5, 10)


# The error paths run in a subprocess each: the driver is looked up once per process, and a
# crash would show as a failed test rather than killing the test run.
CALL = textwrap.dedent("""
    import ctypes, json, sys
    import numpy as np
    from onnxcc.runtime import load
    from onnxcc.runtime.loader import _Tensors
    m = load(sys.argv[1])
    dev = json.loads(sys.argv[2])
    x, y = np.zeros((3, 64), np.float32), np.zeros((3, 10), np.float32)
    if dev is None:
        rc = m.run_raw([x], [y])
    else:
        (d_in, d_out), n_calls = dev[:2], dev[2] if len(dev) > 2 else 1
        ins = _Tensors([x], ["f32"], (2, d_in), [0x10000])
        outs = _Tensors([y], ["f32"], (2, d_out), [0x20000])
        m.lib.mlp_set_stream(ctypes.c_void_p(0x77))
        for _ in range(n_calls):
            rc = m._run(ins.array, 1, outs.array, 1)
    print(json.dumps({"rc": rc, "error": m.last_error, "codes": m.codes}))
""")


def call_lib(lib_dir: Path, device, **env) -> dict:
    full = {**os.environ, **{k: str(v) for k, v in env.items()}}
    r = subprocess.run([sys.executable, "-c", CALL, str(lib_dir), json.dumps(device)], capture_output=True,
                       text=True, env=full, timeout=120)
    assert r.returncode == 0, f"the call crashed or failed (exit {r.returncode}):\n{r.stderr[-3000:]}"
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_no_driver_is_a_clean_error(mlp_cuda, tmp_path):
    out = call_lib(mlp_cuda, [0, 0], ONNXCC_CUDA_DRIVER=tmp_path / "no" / "libcuda.so.1")
    assert out["rc"] == out["codes"]["ERR_DEVICE"]
    assert out["error"].startswith("no CUDA driver: cannot load ")


def _have_driver() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


def test_default_driver_lookup_without_driver(mlp_cuda):
    if _have_driver() or os.environ.get("ONNXCC_CUDA_DRIVER"):
        pytest.skip("a CUDA driver is installed here")
    out = call_lib(mlp_cuda, [0, 0])
    assert out["rc"] == out["codes"]["ERR_DEVICE"]
    assert out["error"].startswith("no CUDA driver: cannot load libcuda.so.1 (")


def test_cpu_tensor_is_a_device_error(mlp_cuda):
    out = call_lib(mlp_cuda, None)
    assert out["rc"] == out["codes"]["ERR_DEVICE"]
    assert out["error"] == ('input "x": tensor is in CPU memory (DLPack device type 1), but this artifact '
                            "reads CUDA device memory")


# ---- the launch path, through a fake driver ------------------------------------------------


@pytest.fixture(scope="module")
def fake_driver(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("fakecuda") / "libcuda.so.1"
    r = subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-o", str(out), str(HERE / "fake_libcuda.c")],
                       capture_output=True, text=True)
    if r.returncode:
        pytest.skip(f"cannot build the fake driver: {r.stderr[-500:]}")
    return out


def fake_call(lib_dir, fake_driver, tmp_path, device=(0, 0), **knobs):
    log = tmp_path / "fake.log"
    log.unlink(missing_ok=True)
    out = call_lib(lib_dir, list(device), ONNXCC_CUDA_DRIVER=fake_driver, FAKE_CUDA_LOG=log,
                   **{f"FAKE_CUDA_{k.upper()}": v for k, v in knobs.items()})
    out["log"] = log.read_text().splitlines() if log.exists() else []
    return out


def test_fake_driver_launch_sequence(mlp_cuda, fake_driver, tmp_path):
    out = fake_call(mlp_cuda, fake_driver, tmp_path, device=(0, 0, 2))
    assert out["rc"] == 0 and out["error"] == ""
    meta = json.loads((mlp_cuda / "mlp.json").read_text())
    generic = meta["versions"][-1]
    assert generic["guard"] == "true"
    log = out["log"]
    assert log[0].startswith("load ptx ")
    consts = [ln for ln in log if ln.startswith("htod const")]
    assert len(consts) == len(re.findall(r"\.visible \.global", (mlp_cuda / "mlp.ptx").read_text()))
    launches = [ln.split() for ln in log if ln.startswith("launch")]
    # batch = 3, two calls: each kernel of the generic version, in order, blocks of 256 threads,
    # on the stream set with mlp_set_stream (0x77 = 119); the module is loaded once
    names = [la["kernel"] for la in generic["launches"]]
    assert [ln[1] for ln in launches] == names * 2
    for ln, la in zip(launches, generic["launches"] * 2):
        work = eval(la["work"].replace("batch", "3"))
        assert ln[2:] == [str(-(-work // 256)), "256", "119"]
    assert sum(ln.startswith("load ptx") for ln in log) == 1
    assert sum(ln.startswith("alloc ws") for ln in log) == 1  # the workspace is reused


def test_fake_driver_low_compute_capability(mlp_cuda, fake_driver, tmp_path):
    out = fake_call(mlp_cuda, fake_driver, tmp_path, cc=75)
    assert out["rc"] == out["codes"]["ERR_DEVICE"]
    assert out["error"] == ("CUDA device 0 has compute capability 7.5, but this artifact's PTX targets sm_80 "
                            "or newer; recompile with --cuda-arch sm_75")
    assert not [ln for ln in out["log"] if ln.startswith("launch")]


def test_fake_driver_no_device(mlp_cuda, fake_driver, tmp_path):
    out = fake_call(mlp_cuda, fake_driver, tmp_path, device=(1, 1))
    assert out["rc"] == out["codes"]["ERR_DEVICE"]
    assert out["error"] == "the tensors are on CUDA device 1, but the driver sees 1 device"
    out = fake_call(mlp_cuda, fake_driver, tmp_path, init=100)
    assert out["rc"] == out["codes"]["ERR_DEVICE"]
    assert "cuInit failed: CUDA_ERROR_FAKE (a fake failure)" in out["error"]


def test_fake_driver_mixed_devices(mlp_cuda, fake_driver, tmp_path):
    out = fake_call(mlp_cuda, fake_driver, tmp_path, device=(0, 1), devices=2)
    assert out["rc"] == out["codes"]["ERR_DEVICE"]
    assert out["error"] == ("output 0 is on CUDA device 1 but input 0 is on device 0: all tensors must be "
                            "on one device")


def test_fake_driver_kernel_status(mlp_cuda, fake_driver, tmp_path):
    out = fake_call(mlp_cuda, fake_driver, tmp_path, status=2)
    assert out["rc"] == out["codes"]["ERR_KERNEL"]
    assert out["error"] == "kernel failed in version 1 with code 2 (index out of range)"


# ---- on a GPU -----------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("model", NATIVE_MODELS)
def test_gpu_sample_model_matches_onnxruntime(model, tmp_path):
    from onnxcc.runtime import load
    from onnxcc.testing import ort_run, random_inputs

    path = MODELS_DIR / f"{model}.onnx"
    compile_model(path, tmp_path / model, model_options(model, "sm_80"))
    m = load(tmp_path / model)
    for j, dims in enumerate(SAMPLE_MODELS[model]):
        feeds = random_inputs(path, dims, seed=j)
        want = ort_run(path, feeds)
        got = m.run(feeds)
        for name, w in want.items():
            np.testing.assert_allclose(got[name], w, rtol=1e-3, atol=1e-4,
                                       err_msg=f"{model} {name} at {dims}")

