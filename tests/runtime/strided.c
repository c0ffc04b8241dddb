/* Strided, offset and in-place calls into libst.so (y = Relu(a) * b + a over a: f32[N, 4],
 * b: f32[4]) and libsq.so (y = a + Transpose(a) over f32[4, 4], not provable in place).
 * Every strided call must give what the compact call gives; prints one line per case:
 *   <name> rc=<rc> right=<0|1> version=<v> msg=<message>
 * and "DONE" at the end. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "sq.h"
#include "st.h"
#include "f32_view.h"

#define N 5

static float a[N * 4], b[4], want[N * 4], y[N * 4];
static int64_t shape_a[2] = {N, 4}, shape_b[1] = {4};

static int same(const float *got, const float *exp, int n) {
  for (int i = 0; i < n; i++)
    if (fabsf(got[i] - exp[i]) > 1e-6f * (1.0f + fabsf(exp[i]))) return 0;
  return 1;
}

static void report(const char *name, int rc, int right, int version, const char *msg) {
  printf("%s rc=%d right=%d version=%d msg=%s\n", name, rc, right, version, rc ? msg : "");
}

/* runs st with inputs ta, tb into a fresh y; compares with `want` */
static void st_case(const char *name, DLTensor ta, DLTensor tb) {
  DLTensor in[2] = {ta, tb}, out[1] = {t(y, 2, shape_a, NULL, 0)};
  for (int i = 0; i < N * 4; i++) y[i] = -777.0f;
  int rc = st_run(in, 2, out, 1);
  report(name, rc, rc == 0 && same(y, want, N * 4), st_last_version(), st_last_error());
}

int main(void) {
  for (int i = 0; i < N * 4; i++) a[i] = (float)(i % 7) - 2.5f + 0.25f * (float)i;
  for (int j = 0; j < 4; j++) b[j] = 0.5f + (float)j;
  for (int i = 0; i < N; i++)
    for (int j = 0; j < 4; j++) {
      float x = a[i * 4 + j];
      want[i * 4 + j] = (x > 0 ? x : 0) * b[j] + x;
    }
  st_case("compact", t(a, 2, shape_a, NULL, 0), t(b, 1, shape_b, NULL, 0));
  int64_t compact_strides[2] = {4, 1};
  st_case("compact-strides", t(a, 2, shape_a, compact_strides, 0), t(b, 1, shape_b, NULL, 0));

  /* positive strides: every other column of a [N, 8] buffer (x[:, ::2]) */
  static float wide[N * 8];
  for (int i = 0; i < N * 8; i++) wide[i] = 1e6f;
  for (int i = 0; i < N; i++)
    for (int j = 0; j < 4; j++) wide[i * 8 + 2 * j] = a[i * 4 + j];
  int64_t every_other[2] = {8, 2};
  st_case("step-2", t(wide, 2, shape_a, every_other, 0), t(b, 1, shape_b, NULL, 0));

  /* rows padded to 6 floats, starting 3 floats into the buffer (byte_offset) */
  static float padded[3 + N * 6];
  for (int i = 0; i < 3 + N * 6; i++) padded[i] = -1e6f;
  for (int i = 0; i < N; i++)
    for (int j = 0; j < 4; j++) padded[3 + i * 6 + j] = a[i * 4 + j];
  int64_t row6[2] = {6, 1};
  st_case("row-pitch-offset", t(padded, 2, shape_a, row6, 3 * sizeof(float)), t(b, 1, shape_b, NULL, 0));

  /* negative strides: rows stored in reverse (x[::-1]) and columns too (x[:, ::-1]) */
  static float rev[N * 4];
  for (int i = 0; i < N; i++)
    for (int j = 0; j < 4; j++) rev[(N - 1 - i) * 4 + (3 - j)] = a[i * 4 + j];
  int64_t back[2] = {-4, -1};
  st_case("negative", t(rev, 2, shape_a, back, (N * 4 - 1) * sizeof(float)), t(b, 1, shape_b, NULL, 0));
  static float brev[4];
  for (int j = 0; j < 4; j++) brev[3 - j] = b[j];
  int64_t back1[1] = {-1};
  st_case("negative-1d", t(a, 2, shape_a, NULL, 0), t(brev, 1, shape_b, back1, 3 * sizeof(float)));

  /* transposed: a stored column-major */
  static float at[N * 4];
  for (int i = 0; i < N; i++)
    for (int j = 0; j < 4; j++) at[i + j * N] = a[i * 4 + j];
  int64_t trans[2] = {1, N};
  st_case("transposed", t(at, 2, shape_a, trans, 0), t(b, 1, shape_b, NULL, 0));

  /* zero strides: one row repeated N times (np.broadcast_to), one value for all of b */
  static float row[4];
  memcpy(row, a, sizeof row);
  float keep[N * 4];
  memcpy(keep, want, sizeof keep);
  for (int i = 0; i < N; i++)
    for (int j = 0; j < 4; j++) {
      float x = row[j];
      want[i * 4 + j] = (x > 0 ? x : 0) * b[j] + x;
    }
  int64_t bcast[2] = {0, 1};
  st_case("zero-stride-rows", t(row, 2, shape_a, bcast, 0), t(b, 1, shape_b, NULL, 0));
  memcpy(want, keep, sizeof keep);
  float one = 2.0f;
  for (int i = 0; i < N; i++)
    for (int j = 0; j < 4; j++) {
      float x = a[i * 4 + j];
      want[i * 4 + j] = (x > 0 ? x : 0) * one + x;
    }
  int64_t zero1[1] = {0};
  st_case("zero-stride-1d", t(a, 2, shape_a, NULL, 0), t(&one, 1, shape_b, zero1, 0));
  memcpy(want, keep, sizeof keep);

  /* in place: y written over a (exactly the same bytes) is proved safe for st */
  static float ab[N * 4];
  memcpy(ab, a, sizeof ab);
  DLTensor in[2] = {t(ab, 2, shape_a, NULL, 0), t(b, 1, shape_b, NULL, 0)};
  DLTensor out[1] = {t(ab, 2, shape_a, NULL, 0)};
  int rc = st_run(in, 2, out, 1);
  report("in-place", rc, rc == 0 && same(ab, want, N * 4), st_last_version(), st_last_error());
  /* the same bytes through a byte_offset: still an exact alias */
  memcpy(ab, a, sizeof ab);
  in[0] = t((char *)ab - 16, 2, shape_a, NULL, 16);
  rc = st_run(in, 2, out, 1);
  report("in-place-offset", rc, rc == 0 && same(ab, want, N * 4), st_last_version(), st_last_error());
  /* partial overlap: y one float after a: refused, nothing written */
  static float shifted[N * 4 + 1];
  memcpy(shifted, a, sizeof a);
  shifted[N * 4] = 42.0f;
  in[0] = t(shifted, 2, shape_a, NULL, 0);
  out[0] = t(shifted + 1, 2, shape_a, NULL, 0);
  rc = st_run(in, 2, out, 1);
  report("partial-overlap", rc, memcmp(shifted, a, sizeof a) == 0 && shifted[N * 4] == 42.0f, st_last_version(),
         st_last_error());
  /* y over a strided input's bytes: refused (only compact exact aliases run in place) */
  memcpy(rev, a, sizeof rev);
  in[0] = t(rev, 2, shape_a, back, (N * 4 - 1) * sizeof(float));
  out[0] = t(rev, 2, shape_a, NULL, 0);
  rc = st_run(in, 2, out, 1);
  report("strided-alias", rc, memcmp(rev, a, sizeof a) == 0, st_last_version(), st_last_error());
  /* an output over b (a different shape): refused */
  static float yb[N * 4];
  in[0] = t(a, 2, shape_a, NULL, 0);
  in[1] = t(yb, 1, shape_b, NULL, 0);
  out[0] = t(yb, 2, shape_a, NULL, 0);
  rc = st_run(in, 2, out, 1);
  report("output-over-smaller-input", rc, 1, st_last_version(), st_last_error());

  /* sq: y = a + a^T reads a at another element than it writes: in place is refused */
  static float s[16], s0[16], sy[16];
  int64_t shape_s[2] = {4, 4};
  for (int i = 0; i < 16; i++) s[i] = s0[i] = (float)i;
  DLTensor sin[1] = {t(s, 2, shape_s, NULL, 0)}, sout[1] = {t(s, 2, shape_s, NULL, 0)};
  rc = sq_run(sin, 1, sout, 1);
  report("sq-in-place", rc, memcmp(s, s0, sizeof s) == 0, sq_last_version(), sq_last_error());
  /* and strided (transposed) input into sq: y = a^T + a, same numbers */
  int64_t tr4[2] = {1, 4};
  sin[0] = t(s, 2, shape_s, tr4, 0);
  sout[0] = t(sy, 2, shape_s, NULL, 0);
  rc = sq_run(sin, 1, sout, 1);
  float sw[16];
  for (int i = 0; i < 4; i++)
    for (int j = 0; j < 4; j++) sw[i * 4 + j] = s0[j * 4 + i] + s0[i * 4 + j];
  report("sq-transposed", rc, rc == 0 && same(sy, sw, 16), sq_last_version(), sq_last_error());
  printf("DONE\n");
  return 0;
}
