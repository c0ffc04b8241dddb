/* Hostile calls into libalias.so (y = a + b, z = a * b over f32[N, 4]), built with
 * -fsanitize=address,undefined where the compiler has them. Every hostile call must fail with
 * a nonzero code and a one-line message and leave the outputs untouched; the honest calls
 * must give the right numbers. Prints one line per case:
 *   CASE <name> rc=<rc> untouched=<0|1> msg=<message>     (a hostile call)
 *   GOOD <name> rc=<rc> right=<0|1>                        (an honest call)
 * and "DONE" at the end. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "alias.h"

#define N 3
#define SENTINEL 12345.0f

static float a[N * 4], b[N * 4], y[N * 4 + 8], z[N * 4 + 8];
static int64_t shape[2] = {N, 4};

static DLTensor t(float *p, int64_t *s) {
  DLTensor x;
  memset(&x, 0, sizeof x);
  x.data = p;
  x.device.device_type = kDLCPU;
  x.ndim = 2;
  x.shape = s;
  x.dtype.code = kDLFloat;
  x.dtype.bits = 32;
  x.dtype.lanes = 1;
  return x;
}

static void reset(DLTensor *in, DLTensor *out) {
  for (int i = 0; i < N * 4 + 8; i++) y[i] = z[i] = SENTINEL;
  in[0] = t(a, shape);
  in[1] = t(b, shape);
  out[0] = t(y, shape);
  out[1] = t(z, shape);
}

static int untouched(void) {
  for (int i = 0; i < N * 4 + 8; i++)
    if (y[i] != SENTINEL || z[i] != SENTINEL) return 0;
  return 1;
}

static int right(void) {
  for (int i = 0; i < N * 4; i++)
    if (y[i] != a[i] + b[i] || z[i] != a[i] * b[i]) return 0;
  return 1;
}

static void report(const char *name, int rc) {
  const char *msg = alias_last_error();
  printf("CASE %s rc=%d untouched=%d msg=%s\n", name, rc, untouched(), msg ? msg : "(null)");
}

int main(void) {
  DLTensor in[2], out[2];
  int64_t neg[2] = {-1, 4}, huge[2] = {INT64_C(1) << 62, 4}, huge2[2] = {INT64_C(1) << 40, INT64_C(1) << 40};
  int64_t zero[2] = {0, 4}, wide[2] = {N, 5}, big_n[2] = {INT64_C(1) << 31, 4};
  int64_t strides_t[2] = {1, N}, strides_ok[2] = {4, 1}, strides_zero[2] = {0, 1};
  int64_t strides_huge[2] = {INT64_C(1) << 62, 1}, strides_neg_huge[2] = {-(INT64_C(1) << 62), 1};
  int64_t shp[2];
  for (int i = 0; i < N * 4; i++) { a[i] = (float)i - 3.0f; b[i] = 0.5f * (float)i; }

#define HOSTILE(name, setup, call) do { reset(in, out); setup; report(name, (call)); } while (0)
#define RUN alias_run(in, 2, out, 2)

  HOSTILE("null-input-data", in[0].data = NULL, RUN);
  HOSTILE("null-output-data", out[1].data = NULL, RUN);
  HOSTILE("ndim-1", in[0].ndim = 1, RUN);
  HOSTILE("ndim-3", in[1].ndim = 3, RUN);
  HOSTILE("ndim-negative", in[0].ndim = -7, RUN);
  HOSTILE("ndim-huge", out[0].ndim = 1 << 30, RUN);
  HOSTILE("negative-dim", in[0].shape = neg, RUN);
  HOSTILE("huge-dim", in[0].shape = huge, RUN);
  HOSTILE("huge-dims-overflow", (in[0].shape = huge2, in[0].ndim = 2), RUN);
  HOSTILE("symbol-above-range", in[0].shape = big_n, RUN);
  HOSTILE("zero-dim-below-range", in[0].shape = zero, RUN);
  HOSTILE("static-dim-wrong", in[1].shape = wide, RUN);
  HOSTILE("output-dim-wrong", out[1].shape = wide, RUN);
  HOSTILE("output-huge-dim", out[0].shape = huge, RUN);
  HOSTILE("dtype-f64", in[0].dtype.bits = 64, RUN);
  HOSTILE("dtype-int", in[1].dtype.code = kDLInt, RUN);
  HOSTILE("dtype-lanes", in[0].dtype.lanes = 4, RUN);
  HOSTILE("dtype-output", out[0].dtype.code = kDLBfloat, RUN);
  HOSTILE("device-cuda", in[0].device.device_type = kDLCUDA, RUN);
  HOSTILE("null-shape-input", in[0].shape = NULL, RUN);
  HOSTILE("null-shape-output", out[1].shape = NULL, RUN);
  /* strided inputs and outputs are served (tests/runtime/test_strided*_c.py); an output whose
   * strides make two elements share memory, and strides whose reach overflows, are not */
  HOSTILE("strides-output-zero", out[0].strides = strides_zero, RUN);
  HOSTILE("strides-overflow", in[0].strides = strides_huge, RUN);
  HOSTILE("strides-negative-overflow", in[1].strides = strides_neg_huge, RUN);
  HOSTILE("overlap-outputs", out[1].data = y, RUN);
  HOSTILE("overlap-output-input", out[0].data = a, RUN);
  HOSTILE("overlap-by-offset", (out[1].data = y, out[1].byte_offset = 4 * N * 4 - 4), RUN);
  HOSTILE("byte-offset-wraps", out[0].byte_offset = UINT64_MAX - 3, RUN);
  HOSTILE("byte-offset-wraps-input", in[1].byte_offset = (uint64_t)(UINTPTR_MAX - (uintptr_t)b) + 16, RUN);
  HOSTILE("n-inputs-wrong", (void)0, alias_run(in, 1, out, 2));
  HOSTILE("n-inputs-negative", (void)0, alias_run(in, -1, out, 2));
  HOSTILE("n-outputs-wrong", (void)0, alias_run(in, 2, out, 3));
  HOSTILE("inputs-null", (void)0, alias_run(NULL, 2, out, 2));
  HOSTILE("outputs-null", (void)0, alias_run(in, 2, NULL, 2));
  HOSTILE("output-shape-bad-index", (void)0, alias_output_shape(in, 2, 7, shp));
  HOSTILE("output-shape-negative-index", (void)0, alias_output_shape(in, 2, -1, shp));
  HOSTILE("output-shape-null", (void)0, alias_output_shape(in, 2, 0, NULL));
  HOSTILE("output-shape-null-inputs", (void)0, alias_output_shape(NULL, 2, 0, shp));
  HOSTILE("output-shape-huge-dim", in[0].shape = huge2, alias_output_shape(in, 2, 0, shp));
  /* introspection with bad indices: NULL, never a read out of bounds */
  printf("CASE version-info-bad rc=%d untouched=1 msg=version_info(-1)/(1000)\n",
         alias_version_info(-1) == NULL && alias_version_info(1000) == NULL ? 1 : 0);

  /* honest calls: right numbers */
  reset(in, out);
  int rc = RUN;
  printf("GOOD plain rc=%d right=%d\n", rc, right());
  reset(in, out);
  in[0].strides = strides_ok;
  out[0].strides = strides_ok;
  rc = RUN;
  printf("GOOD compact-strides rc=%d right=%d\n", rc, right());
  reset(in, out);
  DLTensor same[2] = {t(a, shape), t(a, shape)};
  rc = alias_run(same, 2, out, 2);
  int ok = 1;
  for (int i = 0; i < N * 4; i++) ok &= y[i] == a[i] + a[i] && z[i] == a[i] * a[i];
  printf("GOOD same-input-twice rc=%d right=%d\n", rc, ok);
  /* an honest byte_offset: the tensor starts 8 floats into a bigger buffer */
  static float abuf[N * 4 + 8];
  for (int i = 0; i < N * 4; i++) abuf[8 + i] = a[i];
  reset(in, out);
  in[0] = t(abuf, shape);
  in[0].byte_offset = 8 * sizeof(float);
  rc = RUN;
  printf("GOOD byte-offset rc=%d right=%d\n", rc, right());
  /* a transposed view: a stored column-major, read through strides {1, N} */
  static float at[N * 4];
  for (int i = 0; i < N; i++)
    for (int j = 0; j < 4; j++) at[i + j * N] = a[i * 4 + j];
  reset(in, out);
  in[0] = t(at, shape);
  in[0].strides = strides_t;
  rc = RUN;
  printf("GOOD strides-transposed rc=%d right=%d\n", rc, right());
  /* a misaligned byte_offset (one byte): served right or refused, never a fault */
  static unsigned char raw[sizeof a + 1];
  memcpy(raw + 1, a, sizeof a);
  reset(in, out);
  in[0].data = raw;
  in[0].byte_offset = 1;
  rc = RUN;
  if (rc == 0)
    printf("GOOD misaligned rc=%d right=%d\n", rc, right());
  else
    report("misaligned", rc);
  printf("DONE\n");
  return 0;
}
