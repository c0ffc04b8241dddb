"""Bucket versions end to end: the transformer sample with buckets on seq (16, 64) matches
onnxruntime at seq = 1, each bucket's edge, edge + 1, a middle value and one above the last
bucket (the fallback), from Python and from a C program, with `last_version` naming the
bucket used. Also the automatic bucket choice: the dynamic programme against brute force,
and against power-of-two buckets on a skewed trace."""

from __future__ import annotations

import itertools
import shutil
import subprocess

import numpy as np
import pytest

import onnxcc
from onnxcc.ir import sym
from onnxcc.passes.bucket_choice import assign, optimal_buckets, padding_waste, pow2_buckets, read_trace
from onnxcc.testing import MODELS_DIR, ort_run, random_inputs

MODEL = MODELS_DIR / "transformer.onnx"
SEQS = [1, 16, 17, 40, 64, 65]


@pytest.fixture(scope="module")
def bucketed(tmp_path_factory):
    out = tmp_path_factory.mktemp("transformer_buckets")
    onnxcc.compile(MODEL, out, buckets={"seq": [16, 64]}, opt=1)  # -O1: the numerics are the point here
    return out


def expected_bucket(seq: int) -> int | None:
    return assign(seq, [16, 64])


def version_bucket(model, v: int) -> int | None:
    info = model.meta["versions"][v]
    return info["info"].get("bucket") if info["kind"] == "bucket" else None


def test_bucket_versions_in_dispatch_order(bucketed):
    model = onnxcc.load(bucketed)
    kinds = [v["kind"] for v in model.meta["versions"]]
    assert kinds[:2] == ["bucket", "bucket"] and kinds[-1] == "generic"
    assert [v["info"]["bucket"] for v in model.meta["versions"][:2]] == [16, 64]
    assert model.meta["versions"][0]["info"]["symbol"] == "seq"
    assert "guard seq <= 16" in model.version_info(0)
    assert "guard 16 < seq & seq <= 64" in model.version_info(1)


@pytest.mark.parametrize("batch", [1, 3])
def test_bucketed_transformer_matches_onnxruntime(bucketed, batch):
    model = onnxcc.load(bucketed)
    for k, seq in enumerate(SEQS):
        feeds = random_inputs(MODEL, {"batch": batch, "seq": seq}, seed=k)
        want = ort_run(MODEL, feeds)["y"]
        got = model.run(feeds)["y"]
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=f"seq={seq} batch={batch}")
        assert version_bucket(model, model.last_version) == expected_bucket(seq), f"seq={seq}"


C_MAIN = r"""
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "transformer.h"

/* usage: prog BATCH SEQ IN.bin OUT.bin: prints the version used */
int main(int argc, char **argv) {
  int64_t b = atoll(argv[1]), s = atoll(argv[2]);
  size_t n = (size_t)(b * s * 256);
  float *x = malloc(n * sizeof(float)), *y = malloc(n * sizeof(float));
  FILE *f = fopen(argv[3], "rb");
  if (fread(x, sizeof(float), n, f) != n) return 10;
  fclose(f);
  int64_t shape[3] = {b, s, 256}, oshape[3];
  DLTensor in, out;
  memset(&in, 0, sizeof in);
  in.data = x; in.device.device_type = kDLCPU; in.ndim = 3; in.shape = shape;
  in.dtype.code = kDLFloat; in.dtype.bits = 32; in.dtype.lanes = 1;
  out = in;
  if (transformer_output_shape(&in, 1, 0, oshape) != 0) return 11;
  out.data = y; out.shape = oshape;
  int rc = transformer_run(&in, 1, &out, 1);
  if (rc != 0) { printf("rc=%d %s\n", rc, transformer_last_error()); return 12; }
  f = fopen(argv[4], "wb");
  fwrite(y, sizeof(float), n, f);
  fclose(f);
  int v = transformer_last_version();
  printf("version=%d %s\n", v, transformer_version_info(v));
  return 0;
}
"""


@pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")
def test_bucketed_transformer_from_c(bucketed, tmp_path):
    (tmp_path / "main.c").write_text(C_MAIN)
    exe = tmp_path / "main"
    subprocess.run(["cc", "-std=c99", "-O1", "-I", str(bucketed), str(tmp_path / "main.c"), "-L",
                    str(bucketed),
                    "-ltransformer", f"-Wl,-rpath,{bucketed}", "-o", str(exe)], check=True)
    model = onnxcc.load(bucketed)
    for k, seq in enumerate(SEQS):
        feeds = random_inputs(MODEL, {"batch": 2, "seq": seq}, seed=10 + k)
        feeds["x"].tofile(tmp_path / "in.bin")
        res = subprocess.run([str(exe), "2", str(seq), str(tmp_path / "in.bin"), str(tmp_path / "out.bin")],
                             capture_output=True, text=True)
        assert res.returncode == 0, res.stdout + res.stderr
        got = np.fromfile(tmp_path / "out.bin", dtype=np.float32).reshape(2, seq, 256)
        want = ort_run(MODEL, feeds)["y"]
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=f"seq={seq}")
        v = int(res.stdout.split()[0].split("=")[1])
        assert version_bucket(model, v) == expected_bucket(seq)
        assert ("(bucket," in res.stdout) == (expected_bucket(seq) is not None)


# ---- automatic buckets -------------------------------------------------------------------------


def brute_force(trace, cost, k):
    vals = [v for v, _ in trace]
    best = None
    for j in range(1, k + 1):
        for inner in itertools.combinations(vals[:-1], j - 1):
            bs = list(inner) + [vals[-1]]
            c = sum(n * cost(assign(v, bs)) for v, n in trace)
            if best is None or c < best[0] - 1e-9:
                best = (c, bs)
    return best


@pytest.mark.parametrize("seed", range(6))
def test_auto_buckets_dp_matches_brute_force(seed):
    rng = np.random.default_rng(seed)
    vals = sorted(set(int(v) for v in rng.integers(1, 200, size=int(rng.integers(3, 10)))))
    trace = [(v, int(rng.integers(1, 20))) for v in vals]
    a, b = float(rng.uniform(0, 5)), float(rng.uniform(1, 1000))
    cost = lambda n: a * n * n + b * n + 7.0  # noqa: E731 - attention-like: quadratic + linear
    for k in (1, 2, 3, 4):
        chosen = optimal_buckets(trace, cost, k)
        assert len(chosen) <= k and chosen[-1] == vals[-1]
        got = sum(n * cost(assign(v, chosen)) for v, n in trace)
        want, _ = brute_force(trace, cost, k)
        assert got == pytest.approx(want, rel=1e-12)


def skewed_trace(n=1000, seed=0):
    rng = np.random.default_rng(seed)
    seqs = np.clip(np.round(rng.lognormal(mean=3.2, sigma=0.8, size=n)), 1, 512).astype(int)
    vals, counts = np.unique(seqs, return_counts=True)
    return [(int(v), int(c)) for v, c in zip(vals, counts)]


def test_auto_buckets_beat_powers_of_two_on_a_skewed_trace(tmp_path):
    from onnxcc.passes import run_pipeline
    from onnxcc.passes.bucket_choice import choose_buckets

    trace = skewed_trace()
    (tmp_path / "trace.txt").write_text("".join(f"{v},{c}\n" for v, c in trace))
    assert read_trace(tmp_path / "trace.txt") == trace
    m = onnxcc.load_model(MODEL)
    run_pipeline(m, "shape-inference,canonicalize")
    for k in (2, 4, 6):
        choice = choose_buckets(m.main, "seq", trace, k)
        assert len(choice.buckets) == len(choice.pow2) == k
        assert choice.waste < choice.pow2_waste
        poly = choice.polynomial
        cost = lambda n, poly=poly: float(poly.subs(sym("seq"), n))  # noqa: E731
        w, e = padding_waste(trace, pow2_buckets(trace[-1][0], k), cost)
        assert choice.pow2_waste == pytest.approx(w / e)
    # the polynomial has the attention term: seq appears squared
    assert choice.polynomial.as_poly().degree() == 2


def test_trace_format_errors(tmp_path):
    from onnxcc.errors import OnnxccError

    p = tmp_path / "t.txt"
    p.write_text("# seq values\n5\n7,3\n5\n")
    assert read_trace(p) == [(5, 2), (7, 3)]
    p.write_text("5\nseven\n")
    with pytest.raises(OnnxccError, match=r"t.txt:2: expected VALUE or VALUE,COUNT"):
        read_trace(p)
