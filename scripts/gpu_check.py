#!/usr/bin/env python3
"""GPU check: compile the sample models for CUDA, run them at several shapes through Python
and through C, compare with onnxruntime on the CPU, print max errors and latencies.

    python scripts/gpu_check.py [--arch sm_90] [--models mlp,transformer] [--repeat 20]

Needs an NVIDIA GPU with its driver, a C compiler, onnxruntime; not the CUDA toolkit.
Every model is built with every version kind (exact batch=1, seq buckets, divisibility,
generic). Exit status 0 when every output matches (rtol 1e-3, atol 1e-4).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "src"))

from onnxcc.compiler import CompileOptions, compile_model  # noqa: E402
from onnxcc.runtime import load  # noqa: E402
from onnxcc.runtime.cuda_device import driver  # noqa: E402
from onnxcc.testing import MODELS_DIR, SAMPLE_MODELS, ort_run, random_inputs  # noqa: E402

RTOL, ATOL = 1e-3, 1e-4
CONTROL_FLOW = ("if_model", "loop_model", "scan_model")  # not compiled natively yet

# A C caller: device buffers through the driver API, NAME_run timed over --repeat calls.
C_HARNESS = r"""
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "@NAME@.h"

typedef unsigned long long dptr;
static int (*cuInit_)(unsigned), (*cuDeviceGet_)(int *, int), (*cuRetain_)(void **, int),
    (*cuSetCurrent_)(void *), (*cuAlloc_)(dptr *, size_t), (*cuHtoD_)(dptr, const void *, size_t),
    (*cuDtoH_)(void *, dptr, size_t);

static void *slurp(const char *path, size_t n) {
  void *p = malloc(n ? n : 1);
  FILE *f = fopen(path, "rb");
  if (!f || fread(p, 1, n, f) != n) { fprintf(stderr, "cannot read %s\n", path); exit(2); }
  fclose(f);
  return p;
}

/* argv: repeat; per input: path ndim dims... itemsize code bits; per output: path itemsize code bits ndim */
int main(int argc, char **argv) {
  void *lib = dlopen("libcuda.so.1", RTLD_NOW);
  if (!lib) { fprintf(stderr, "no libcuda.so.1\n"); return 2; }
  cuInit_ = dlsym(lib, "cuInit"); cuDeviceGet_ = dlsym(lib, "cuDeviceGet");
  cuRetain_ = dlsym(lib, "cuDevicePrimaryCtxRetain"); cuSetCurrent_ = dlsym(lib, "cuCtxSetCurrent");
  cuAlloc_ = dlsym(lib, "cuMemAlloc_v2"); cuHtoD_ = dlsym(lib, "cuMemcpyHtoD_v2");
  cuDtoH_ = dlsym(lib, "cuMemcpyDtoH_v2");
  int dev; void *ctx;
  if (cuInit_(0) || cuDeviceGet_(&dev, 0) || cuRetain_(&ctx, dev) || cuSetCurrent_(ctx)) return 3;
  int a = 1, repeat = atoi(argv[a++]);
  DLTensor in[@NUM_INPUTS@], out[@NUM_OUTPUTS@];
  int64_t shapes[@NUM_INPUTS@ + @NUM_OUTPUTS@][8];
  const char *out_paths[@NUM_OUTPUTS@];
  size_t out_bytes[@NUM_OUTPUTS@];
  for (int i = 0; i < @NUM_INPUTS@; i++) {
    const char *path = argv[a++];
    int nd = atoi(argv[a++]);
    size_t n = 1;
    for (int d = 0; d < nd; d++) n *= (size_t)(shapes[i][d] = atoll(argv[a++]));
    int item = atoi(argv[a++]);
    in[i] = (DLTensor){0};
    in[i].device.device_type = kDLCUDA;
    in[i].ndim = nd; in[i].shape = shapes[i];
    in[i].dtype.code = (uint8_t)atoi(argv[a++]);
    in[i].dtype.bits = (uint8_t)atoi(argv[a++]);
    in[i].dtype.lanes = 1;
    void *host = slurp(path, n * item);
    dptr p; if (cuAlloc_(&p, n * item + 1) || cuHtoD_(p, host, n * item)) return 4;
    in[i].data = (void *)(uintptr_t)p;
    free(host);
  }
  for (int k = 0; k < @NUM_OUTPUTS@; k++) {
    out_paths[k] = argv[a++];
    int item = atoi(argv[a++]);
    out[k] = (DLTensor){0};
    out[k].device.device_type = kDLCUDA;
    out[k].dtype.code = (uint8_t)atoi(argv[a++]);
    out[k].dtype.bits = (uint8_t)atoi(argv[a++]);
    out[k].dtype.lanes = 1;
    out[k].shape = shapes[@NUM_INPUTS@ + k];
    out[k].ndim = atoi(argv[a++]);
    if (@NAME@_output_shape(in, @NUM_INPUTS@, k, out[k].shape)) {
      fprintf(stderr, "%s\n", @NAME@_last_error());
      return 5;
    }
    size_t n = 1;
    for (int d = 0; d < out[k].ndim; d++) n *= (size_t)out[k].shape[d];
    out_bytes[k] = n * item;
    dptr p; if (cuAlloc_(&p, out_bytes[k] + 1)) return 4;
    out[k].data = (void *)(uintptr_t)p;
  }
  int rc = @NAME@_run(in, @NUM_INPUTS@, out, @NUM_OUTPUTS@); /* warm-up: loads the PTX */
  if (rc) { fprintf(stderr, "run failed (%d): %s\n", rc, @NAME@_last_error()); return 6; }
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (int r = 0; r < repeat; r++) rc |= @NAME@_run(in, @NUM_INPUTS@, out, @NUM_OUTPUTS@);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  if (rc) { fprintf(stderr, "run failed: %s\n", @NAME@_last_error()); return 6; }
  for (int k = 0; k < @NUM_OUTPUTS@; k++) {
    void *host = malloc(out_bytes[k] ? out_bytes[k] : 1);
    if (cuDtoH_(host, (dptr)(uintptr_t)out[k].data, out_bytes[k])) return 7;
    FILE *f = fopen(out_paths[k], "wb");
    fwrite(host, 1, out_bytes[k], f);
    fclose(f);
    free(host);
  }
  printf("%.4f\n", ((t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6) / (repeat ? repeat : 1));
  return 0;
}
"""

DLPACK = {"float32": (2, 32), "float64": (2, 64), "float16": (2, 16), "int64": (0, 64), "int32": (0, 32),
          "int8": (0, 8), "uint8": (1, 8), "bool": (6, 8)}


def detect_arch() -> str:
    import ctypes

    drv = driver()
    major, minor = ctypes.c_int(), ctypes.c_int()
    dev = ctypes.c_int()
    drv._call("cuDeviceGet", ctypes.byref(dev), ctypes.c_int(0))
    drv._call("cuDeviceGetAttribute", ctypes.byref(major), ctypes.c_int(75), dev)
    drv._call("cuDeviceGetAttribute", ctypes.byref(minor), ctypes.c_int(76), dev)
    return f"sm_{major.value}{minor.value}"


def options(model: str, arch: str) -> CompileOptions:
    buckets = {"seq": [8, 64]} if "seq" in SAMPLE_MODELS[model][0] else {}
    return CompileOptions(target="cuda", cuda_arch=arch, specialize={"batch": [1]}, buckets=buckets)


def max_errors(got: dict, want: dict) -> tuple[float, float, bool]:
    abs_err = rel_err = 0.0
    ok = True
    for name, w in want.items():
        g = np.asarray(got[name], np.float64)
        w = np.asarray(w, np.float64)
        if g.shape != w.shape:
            return float("inf"), float("inf"), False
        d = np.abs(g - w)
        abs_err = max(abs_err, float(d.max(initial=0)))
        rel_err = max(rel_err, float((d / np.maximum(np.abs(w), 1e-30)).max(initial=0)))
        ok &= bool(np.all(d <= ATOL + RTOL * np.abs(w)))
    return abs_err, rel_err, ok


def build_c_harness(art_dir: Path, meta: dict) -> Path:
    name = meta["name"]
    src = art_dir / "gpu_check_main.c"
    text = C_HARNESS.replace("@NAME@", name).replace("@NUM_INPUTS@", str(len(meta["inputs"])))
    src.write_text(text.replace("@NUM_OUTPUTS@", str(len(meta["outputs"]))))
    exe = art_dir / "gpu_check_main"
    subprocess.run(["cc", "-O2", "-o", str(exe), str(src), f"-I{art_dir}", f"-L{art_dir}", f"-l{name}",
                    f"-Wl,-rpath,{art_dir}", "-ldl"], check=True)
    return exe


def run_c(exe: Path, meta: dict, feeds: dict, tmp: Path, repeat: int) -> tuple[dict, float]:
    args = [str(exe), str(repeat)]
    for t in meta["inputs"]:
        a = np.ascontiguousarray(feeds[t["name"]])
        path = tmp / f"in_{t['name']}.bin"
        a.tofile(path)
        code, bits = DLPACK[str(a.dtype)]
        args += [str(path), str(a.ndim), *map(str, a.shape), str(a.itemsize), str(code), str(bits)]
    outs = []
    for t in meta["outputs"]:
        dt = np.dtype({"f32": "float32", "f64": "float64", "f16": "float16", "i64": "int64", "i32": "int32",
                       "bool": "bool"}[t["dtype"]])
        path = tmp / f"out_{t['name']}.bin"
        code, bits = DLPACK[str(dt)]
        args += [str(path), str(dt.itemsize), str(code), str(bits), str(len(t["shape"]))]
        outs.append((t["name"], path, dt))
    r = subprocess.run(args, capture_output=True, text=True)
    if r.returncode:
        raise RuntimeError(f"C harness failed ({r.returncode}): {r.stderr.strip()}")
    return {n: np.fromfile(p, dt) for n, p, dt in outs}, float(r.stdout.strip())


def check_model(model: str, arch: str, out_root: Path, repeat: int) -> bool:
    path = MODELS_DIR / f"{model}.onnx"
    t0 = time.perf_counter()
    art = compile_model(path, out_root / model, options(model, arch))
    print(f"{model}: compiled for {arch} in {time.perf_counter() - t0:.1f} s "
          f"({len(art.module.dispatch['main'])} versions)")
    m = load(art.out_dir)
    meta = json.loads(art.metadata.read_text())
    exe = build_c_harness(art.out_dir, meta)
    drv = driver()
    all_ok = True
    for j, dims in enumerate(SAMPLE_MODELS[model]):
        feeds = random_inputs(path, dims, seed=j)
        want = ort_run(path, feeds)
        # Python: numpy in, numpy out (copies included), then device-resident timing
        got = m.run(feeds)
        a_py, r_py, ok_py = max_errors(got, want)
        version = m.last_version
        ins = [drv.to_device(feeds[t["name"]]) for t in meta["inputs"]]
        outs = [drv.empty(got[t["name"]].shape, got[t["name"]].dtype) for t in meta["outputs"]]
        m.run_device(ins, outs)
        t0 = time.perf_counter()
        for _ in range(repeat):
            m.run_device(ins, outs)
        py_ms = (time.perf_counter() - t0) * 1e3 / max(1, repeat)
        # C: its own device buffers
        with tempfile.TemporaryDirectory() as td:
            got_c, c_ms = run_c(exe, meta, feeds, Path(td), repeat)
        got_c = {k: v.reshape(want[k].shape) if v.size == want[k].size else v for k, v in got_c.items()}
        a_c, r_c, ok_c = max_errors(got_c, want)
        ok = ok_py and ok_c
        all_ok &= ok
        shape = ", ".join(f"{k}={v}" for k, v in dims.items())
        print(f"  {shape:24} v{version}  python: max abs {a_py:.2e} rel {r_py:.2e} {py_ms:8.3f} ms  "
              f"C: max abs {a_c:.2e} rel {r_c:.2e} {c_ms:8.3f} ms  {'ok' if ok else 'MISMATCH'}")
    return all_ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arch", default=None, help="PTX target (default: the GPU's own, e.g. sm_90)")
    ap.add_argument("--models", default=",".join(m for m in SAMPLE_MODELS if m not in CONTROL_FLOW))
    ap.add_argument("--repeat", type=int, default=20, help="timed runs per shape")
    ap.add_argument("--out", type=Path, default=None, help="artifact directory (default: a temporary one)")
    args = ap.parse_args()
    arch = args.arch or detect_arch()
    print(f"GPU check: PTX {arch}, rtol {RTOL}, atol {ATOL}, "
          f"latency = mean of {args.repeat} synchronous runs")
    with tempfile.TemporaryDirectory() as td:
        root = args.out or Path(td)
        results = {m: check_model(m, arch, root, args.repeat) for m in args.models.split(",") if m}
    bad = [m for m, ok in results.items() if not ok]
    print("all models match onnxruntime" if not bad else f"MISMATCH in {', '.join(bad)}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
