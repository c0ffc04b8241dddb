"""What this machine's DRAM streams at 1 and 2 threads: the roof the memory-bound chains of
benchmarks/heldout_table.py (ROOF_GBS) are held against.

Four loops over arrays larger than the caches (100 MB by default), each thread its own
contiguous half, AVX-512, built with the system C compiler:

- `read`: a sum of x (bytes read);
- `copy`: y = x with plain stores (bytes read + written, as heldout_table counts a chain:
  each store of a line not in cache also reads it first, so DRAM moves three lines per two);
- `ntcopy`: y = x with non-temporal stores (`_mm512_stream_ps`, then `sfence`): no
  read-for-ownership, the roof of a chain whose output streams (codegen/cpu/streaming_stores.py);
- `memcpy`: glibc's.

    python benchmarks/dram_stream.py [--mb 100] [--reps 15]

Measured (December 2026, this 2-core AMD EPYC (Zen 4) VM, load 0.7, medians of 15, GB/s):

    threads  read   copy   ntcopy  memcpy
    1        14-24  22-24  33-36   20-21
    2        22-24  20-23  36-45   21-30
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import tempfile
from pathlib import Path

SOURCE = r"""
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
static size_t N; static float *X, *Y; static int T, mode;
static volatile float sink[64];
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }
static void *work(void *arg) {
  long id = (long)arg; size_t lo = N / T * id, hi = N / T * (id + 1);
  if (mode == 0) {
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = lo; i < hi; i += 64) {
      a0 = _mm512_add_ps(a0, _mm512_load_ps(X + i)); a1 = _mm512_add_ps(a1, _mm512_load_ps(X + i + 16));
      a2 = _mm512_add_ps(a2, _mm512_load_ps(X + i + 32)); a3 = _mm512_add_ps(a3, _mm512_load_ps(X + i + 48));
    }
    sink[id] = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
  } else if (mode == 1) {
    for (size_t i = lo; i < hi; i += 16) _mm512_store_ps(Y + i, _mm512_load_ps(X + i));
  } else if (mode == 2) {
    for (size_t i = lo; i < hi; i += 16) _mm512_stream_ps(Y + i, _mm512_load_ps(X + i));
    _mm_sfence();
  } else {
    memcpy(Y + lo, X + lo, (hi - lo) * 4);
  }
  return 0;
}
static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}
int main(int argc, char **argv) {
  T = atoi(argv[1]); N = (size_t)atol(argv[2]) / 4 / (64 * T) * (64 * T); int reps = atoi(argv[3]);
  X = aligned_alloc(64, N * 4); Y = aligned_alloc(64, N * 4);
  for (size_t i = 0; i < N; i++) { X[i] = (float)i; Y[i] = 0; }
  const char *names[] = {"read", "copy", "ntcopy", "memcpy"};
  double *ts = malloc(sizeof(double) * reps);
  for (mode = 0; mode < 4; mode++) {
    for (int r = 0; r < reps; r++) {
      pthread_t th[64]; double t0 = now();
      for (long i = 0; i < T; i++) pthread_create(th + i, 0, work, (void *)i);
      for (int i = 0; i < T; i++) pthread_join(th[i], 0);
      ts[r] = now() - t0;
    }
    qsort(ts, reps, sizeof(double), cmp);
    double bytes = (mode == 0 ? 1.0 : 2.0) * N * 4;
    printf("threads %d  %-7s median %6.1f GB/s  best %6.1f GB/s\n", T, names[mode], bytes / ts[reps / 2] / 1e9,
           bytes / ts[0] / 1e9);
  }
  return 0;
}
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=100, help="bytes of each array, in MB")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--threads", default="1,2")
    args = ap.parse_args()
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        raise SystemExit("no C compiler")
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = Path(tmp) / "stream.c", Path(tmp) / "stream"
        src.write_text(SOURCE)
        subprocess.run([cc, "-O2", "-mavx512f", "-pthread", str(src), "-o", str(exe)], check=True)
        for t in args.threads.split(","):
            subprocess.run([str(exe), t, str(args.mb * 10**6), str(args.reps)], check=True)


if __name__ == "__main__":
    main()
