"""GEMM rate: onnxcc's compiled MatMul against numpy's sgemm, same cores, same thread count.

    python benchmarks/gemm.py                  # 256, 512, 1024 cubed, all cores
    python benchmarks/gemm.py --threads 1 --sizes 512,1024 --json out.json

The MatMul is an ONNX model with symbolic M, K, N (both operands are inputs, as numpy's
are), compiled through the normal driver into a shared library and called through the
runtime loader (its C thread pool, ONNXCC_NUM_THREADS = --threads). numpy runs with its
BLAS limited to the same thread count. The two are timed alternately in one process; each
figure is the best of --reps calls (after a warm-up), as GFLOP/s = 2*M*N*K / seconds. The
machine should be otherwise idle: with every core in use, one descheduled thread stalls a
whole parallel call, on either side.

OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE (set on some hosts for old OpenBLAS builds) slow a
current numpy down: this script re-executes itself without them, in its own process only,
and reports which kernel OpenBLAS then runs.
"""

from __future__ import annotations

import argparse
import ctypes
import glob
import json
import os
import sys
import tempfile
import time
from pathlib import Path

_CLEANED = "ONNXCC_BENCH_ENV_CLEANED"
ROUNDS = 6
"""the two sides alternate in this many rounds of reps/ROUNDS calls each"""
PAUSE_S = 0.2


def _reexec_without_openblas_overrides() -> None:
    if os.environ.get(_CLEANED) or not any(k in os.environ for k in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")):
        return
    env = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")}
    env[_CLEANED] = "1"
    os.execve(sys.executable, [sys.executable, *sys.argv], env)


def _parse() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="256,512,1024", help="comma-separated cube sizes (M = N = K)")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--json", nargs="?", const="-", default=None, metavar="PATH",
                    help="also write the results as JSON (to PATH, or stdout with no PATH)")
    return ap.parse_args()


def _blas_info(threads: int) -> dict:
    """Which BLAS numpy uses and which kernel it runs; limits it to `threads`."""
    info: dict = {"threadpoolctl": False}
    try:
        from threadpoolctl import threadpool_info, threadpool_limits  # type: ignore[import-not-found]

        threadpool_limits(threads)
        info["threadpoolctl"] = True
        info["libraries"] = [{k: d.get(k) for k in ("internal_api", "version", "architecture", "num_threads")}
                             for d in threadpool_info()]
        return info
    except ImportError:
        pass
    import numpy as np

    libdir = Path(np.__file__).parent.parent / "numpy.libs"
    for path in sorted(glob.glob(str(libdir / "*openblas*"))):
        lib = ctypes.CDLL(path)
        for suffix in ("64_", "_64_", ""):
            for prefix in ("scipy_openblas_", "openblas_"):
                core = getattr(lib, f"{prefix}get_corename{suffix}", None)
                setn = getattr(lib, f"{prefix}set_num_threads{suffix}", None)
                getn = getattr(lib, f"{prefix}get_num_threads{suffix}", None)
                if core is None or setn is None:
                    continue
                core.restype = ctypes.c_char_p
                setn(threads)
                info.update(library=Path(path).name, kernel=core().decode(),
                            num_threads=getn() if getn is not None else None,
                            note="threadpoolctl not installed: read from OpenBLAS directly")
                return info
    info["note"] = "threadpoolctl not installed and no OpenBLAS found in numpy.libs"
    return info


def _matmul_model():
    from onnx import TensorProto, helper

    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, ["M", "K"])
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, ["K", "N"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["M", "N"])
    g = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["y"], name="mm")], "gemm", [a, b], [y])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def main() -> int:
    _reexec_without_openblas_overrides()
    args = _parse()
    os.environ["ONNXCC_NUM_THREADS"] = str(args.threads)
    import numpy as np

    blas = _blas_info(args.threads)
    from onnxcc.compiler import CompileOptions, compile_model
    from onnxcc.runtime import load

    sizes = [int(s) for s in args.sizes.split(",") if s]
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        compile_model(_matmul_model(), Path(tmp) / "gemm", CompileOptions(name="gemm"))
        compile_s = time.perf_counter() - t0
        model = load(Path(tmp) / "gemm")
        rng = np.random.default_rng(0)
        rows = []
        for n in sizes:
            a = rng.standard_normal((n, n), dtype=np.float32)
            b = rng.standard_normal((n, n), dtype=np.float32)
            y = np.empty((n, n), np.float32)
            ref = np.empty((n, n), np.float32)
            for _ in range(3):  # warm-up: thread pools, page faults, caches
                assert model.run_raw([a, b], [y]) == 0, model.last_error()
                np.matmul(a, b, out=ref)
            err = float(np.abs(y - ref).max() / max(1e-30, float(np.abs(ref).max())))
            best = {"cc": float("inf"), "np": float("inf")}
            calls = {"cc": lambda: model.run_raw([a, b], [y]), "np": lambda: np.matmul(a, b, out=ref)}
            per_round = max(1, args.reps // ROUNDS)
            for _ in range(ROUNDS):
                for side in ("cc", "np"):
                    # NOTE: OpenBLAS workers spin for a while after a call; let them park so
                    # neither side runs beside the other's spinning threads
                    time.sleep(PAUSE_S)
                    for _ in range(per_round):
                        t = time.perf_counter()
                        calls[side]()
                        best[side] = min(best[side], time.perf_counter() - t)
            best_cc, best_np = best["cc"], best["np"]
            flops = 2.0 * n ** 3
            rows.append({"size": n, "onnxcc_gflops": flops / best_cc / 1e9, "numpy_gflops": flops / best_np / 1e9,
                         "ratio": best_np / best_cc, "onnxcc_ms": best_cc * 1e3, "numpy_ms": best_np * 1e3,
                         "max_rel_err": err, "version": model.version_info(model.last_version)})
    print(f"GEMM, {args.threads} thread(s), best of {args.reps}; numpy BLAS: "
          f"{blas.get('kernel') or blas.get('libraries') or blas.get('note')}")
    print(f"{'size':>6} {'onnxcc GFLOP/s':>15} {'numpy GFLOP/s':>14} {'ratio':>7}")
    for r in rows:
        print(f"{r['size']:>6} {r['onnxcc_gflops']:>15.1f} {r['numpy_gflops']:>14.1f} {r['ratio']:>7.2f}")
    doc = {"threads": args.threads, "reps": args.reps, "compile_seconds": round(compile_s, 3), "blas": blas,
           "openblas_env_cleared": bool(os.environ.get(_CLEANED)), "results": rows}
    if args.json == "-":
        print(json.dumps(doc, indent=2))
    elif args.json:
        Path(args.json).write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
