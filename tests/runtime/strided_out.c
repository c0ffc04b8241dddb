/* Strided and offset OUTPUTS of libso.so (y = Relu(a) * b + a over a: f32[N, 4], b: f32[4])
 * and libtw.so (two outputs: p = a + a, q = a * a over a: f32[N, 4]).
 * Every call writing a strided view must put into it what the compact call gives, and must
 * leave every byte outside the view as it was; refused calls leave the memory untouched.
 * Prints one line per case:
 *   <name> rc=<rc> right=<0|1> msg=<message>
 * and "DONE" at the end. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "so.h"
#include "tw.h"
#include "f32_view.h"

#define SENTINEL -777.0f

static int close_to(float got, float exp) { return fabsf(got - exp) <= 1e-6f * (1.0f + fabsf(exp)); }

static void report(const char *name, int rc, int right, const char *msg) {
  printf("%s rc=%d right=%d msg=%s\n", name, rc, right, rc ? msg : "");
}

/* Checks a 2-d strided view of `buf` (cap floats): element (i, j) at element offset
 * off + i * s0 + j * s1 must equal want[i * 4 + j]; every other float must be SENTINEL. */
static int view_right(const float *buf, int64_t cap, int64_t n, int64_t off, int64_t s0, int64_t s1,
                      const float *want) {
  char *hit = calloc((size_t)cap, 1);
  int ok = 1;
  for (int64_t i = 0; i < n; i++)
    for (int64_t j = 0; j < 4; j++) {
      int64_t e = off + i * s0 + j * s1;
      if (e < 0 || e >= cap) {
        ok = 0;
        continue;
      }
      hit[e] = 1;
      ok &= close_to(buf[e], want[i * 4 + j]);
    }
  for (int64_t e = 0; e < cap; e++)
    if (!hit[e]) ok &= buf[e] == SENTINEL;
  free(hit);
  return ok;
}

static void fill(float *buf, int64_t cap) {
  for (int64_t e = 0; e < cap; e++) buf[e] = SENTINEL;
}

static int all_sentinel(const float *buf, int64_t cap) {
  for (int64_t e = 0; e < cap; e++)
    if (buf[e] != SENTINEL) return 0;
  return 1;
}

/* so(a, b) into a view of buf: off (elements, through byte_offset), strides s0, s1 */
static void so_case(const char *name, int64_t n, const float *a, const float *b, const float *want, int64_t cap,
                    int64_t off, int64_t s0, int64_t s1) {
  float *buf = malloc((size_t)cap * sizeof(float));
  fill(buf, cap);
  int64_t shape_a[2] = {n, 4}, shape_b[1] = {4}, st[2] = {s0, s1};
  DLTensor in[2] = {t((void *)a, 2, shape_a, NULL, 0), t((void *)b, 1, shape_b, NULL, 0)};
  DLTensor out[1] = {t(buf, 2, shape_a, st, (uint64_t)off * sizeof(float))};
  int rc = so_run(in, 2, out, 1);
  report(name, rc, rc == 0 && view_right(buf, cap, n, off, s0, s1, want), so_last_error());
  free(buf);
}

/* a refused output view: the call fails and buf stays untouched */
static void so_refused(const char *name, int64_t n, const float *a, const float *b, int64_t cap, int64_t off,
                       int64_t s0, int64_t s1) {
  float *buf = malloc((size_t)cap * sizeof(float));
  fill(buf, cap);
  int64_t shape_a[2] = {n, 4}, shape_b[1] = {4}, st[2] = {s0, s1};
  DLTensor in[2] = {t((void *)a, 2, shape_a, NULL, 0), t((void *)b, 1, shape_b, NULL, 0)};
  DLTensor out[1] = {t(buf, 2, shape_a, st, (uint64_t)off * sizeof(float))};
  int rc = so_run(in, 2, out, 1);
  report(name, rc, all_sentinel(buf, cap), so_last_error());
  free(buf);
}

static void expected(int64_t n, const float *a, const float *b, float *want) {
  for (int64_t i = 0; i < n; i++)
    for (int j = 0; j < 4; j++) {
      float x = a[i * 4 + j];
      want[i * 4 + j] = (x > 0 ? x : 0) * b[j] + x;
    }
}

int main(void) {
  enum { N = 5, BIG = 300 }; /* BIG: 300 x 4 floats = 4800 bytes, past the in-frame scratch */
  static float a[BIG * 4], b[4], want[BIG * 4];
  for (int i = 0; i < BIG * 4; i++) a[i] = (float)(i % 7) - 2.5f + 0.25f * (float)(i % 13);
  for (int j = 0; j < 4; j++) b[j] = 0.5f + (float)j;
  expected(BIG, a, b, want);

  so_case("compact", N, a, b, want, N * 4, 0, 4, 1);
  so_case("step-2", N, a, b, want, N * 8, 0, 8, 2);
  so_case("row-pitch-offset", N, a, b, want, 3 + N * 6, 3, 6, 1);
  so_case("negative", N, a, b, want, N * 4, N * 4 - 1, -4, -1);
  so_case("negative-rows-gap", N, a, b, want, 2 + N * 7, 2 + (N - 1) * 7, -7, 1);
  so_case("transposed", N, a, b, want, N * 4, 0, 1, N);
  so_case("big-step-2", BIG, a, b, want, BIG * 8, 1, 8, 2);
  so_case("big-transposed", BIG, a, b, want, BIG * 4, 0, 1, BIG);

  /* a strided input and a strided output in one call */
  {
    static float at[N * 4], buf[N * 8];
    for (int i = 0; i < N; i++)
      for (int j = 0; j < 4; j++) at[i + j * N] = a[i * 4 + j];
    fill(buf, N * 8);
    int64_t shape_a[2] = {N, 4}, shape_b[1] = {4}, trans[2] = {1, N}, out_st[2] = {-8, 2};
    DLTensor in[2] = {t(at, 2, shape_a, trans, 0), t(b, 1, shape_b, NULL, 0)};
    DLTensor out[1] = {t(buf, 2, shape_a, out_st, (uint64_t)((N - 1) * 8) * sizeof(float))};
    int rc = so_run(in, 2, out, 1);
    report("strided-in-and-out", rc, rc == 0 && view_right(buf, N * 8, N, (N - 1) * 8, -8, 2, want),
           so_last_error());
  }

  /* refused: elements sharing memory (zero stride, overlapping steps) */
  so_refused("zero-stride", N, a, b, N * 4, 0, 0, 1);
  so_refused("zero-stride-inner", N, a, b, N * 4, 0, 4, 0);
  so_refused("overlapping-steps", N, a, b, N * 4, 0, 1, 1);
  so_refused("overlapping-rows", N, a, b, N * 4, 0, 3, 1);

  /* refused: a strided output over an input's bytes (even the same elements reversed) */
  {
    static float ab[N * 4], keep[N * 4];
    memcpy(ab, a, sizeof ab);
    memcpy(keep, ab, sizeof ab);
    int64_t shape_a[2] = {N, 4}, shape_b[1] = {4}, back[2] = {-4, -1};
    DLTensor in[2] = {t(ab, 2, shape_a, NULL, 0), t(b, 1, shape_b, NULL, 0)};
    DLTensor out[1] = {t(ab, 2, shape_a, back, (uint64_t)(N * 4 - 1) * sizeof(float))};
    int rc = so_run(in, 2, out, 1);
    report("over-input", rc, memcmp(ab, keep, sizeof ab) == 0, so_last_error());
    /* the same bytes, same compact strides given explicitly: the proved in-place alias */
    int64_t fwd[2] = {4, 1};
    out[0] = t(ab, 2, shape_a, fwd, 0);
    rc = so_run(in, 2, out, 1);
    report("in-place-compact-strides", rc, rc == 0 && view_right(ab, N * 4, N, 0, 4, 1, want), so_last_error());
  }

  /* two outputs: p = a + a, q = a * a, each into its own strided view */
  {
    static float pbuf[N * 8], qbuf[3 + N * 4];
    static float pw[N * 4], qw[N * 4];
    for (int i = 0; i < N * 4; i++) pw[i] = a[i] + a[i], qw[i] = a[i] * a[i];
    fill(pbuf, N * 8);
    fill(qbuf, 3 + N * 4);
    int64_t shape_a[2] = {N, 4}, ps[2] = {8, 2}, qs[2] = {1, N};
    DLTensor in[1] = {t(a, 2, shape_a, NULL, 0)};
    DLTensor out[2] = {t(pbuf, 2, shape_a, ps, 0), t(qbuf, 2, shape_a, qs, 3 * sizeof(float))};
    int rc = tw_run(in, 1, out, 2);
    int right = rc == 0 && view_right(pbuf, N * 8, N, 0, 8, 2, pw) && view_right(qbuf, 3 + N * 4, N, 3, 1, N, qw);
    report("two-outputs", rc, right, tw_last_error());
    /* one compact, one strided */
    fill(pbuf, N * 8);
    out[0] = t(pbuf, 2, shape_a, NULL, 0);
    out[1] = t(qbuf, 2, shape_a, qs, 3 * sizeof(float));
    fill(qbuf, 3 + N * 4);
    rc = tw_run(in, 1, out, 2);
    right = rc == 0 && view_right(pbuf, N * 8, N, 0, 4, 1, pw) && view_right(qbuf, 3 + N * 4, N, 3, 1, N, qw);
    report("one-strided-one-compact", rc, right, tw_last_error());
    /* interleaved halves of one buffer: their byte ranges meet, so refused (conservative) */
    fill(pbuf, N * 8);
    out[0] = t(pbuf, 2, shape_a, ps, 0);
    out[1] = t(pbuf, 2, shape_a, ps, sizeof(float));
    rc = tw_run(in, 1, out, 2);
    report("interleaved-outputs", rc, all_sentinel(pbuf, N * 8), tw_last_error());
  }
  printf("DONE\n");
  return 0;
}
