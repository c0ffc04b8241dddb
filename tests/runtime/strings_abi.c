/* Calls libsc.so (y = StringConcat(a, b), eq = Equal(a, b)) through its string ABI (NAME.h):
 * string tensors of `const char *`, outputs made in the thread's arena, strings_take /
 * strings_free keeping one call's strings past the next call, and the refusals (a NULL
 * element, a wrong dtype). Prints one line per step for test_strings_c.py. */
#include <stdio.h>
#include <string.h>

#include "sc.h"

static void tensor(DLTensor *t, void *data, int64_t *shape, uint8_t code, uint8_t bits) {
  memset(t, 0, sizeof *t);
  t->data = data;
  t->device.device_type = kDLCPU;
  t->ndim = 1;
  t->dtype.code = code;
  t->dtype.bits = bits;
  t->dtype.lanes = 1;
  t->shape = shape;
}

static int run(const char **a, const char **b, const char **y, uint8_t *eq) {
  static int64_t shape[1] = {3};
  DLTensor in[2], out[2];
  tensor(&in[0], (void *)a, shape, kDLOpaqueHandle, 64);
  tensor(&in[1], (void *)b, shape, kDLOpaqueHandle, 64);
  tensor(&out[0], (void *)y, shape, kDLOpaqueHandle, 64);
  tensor(&out[1], eq, shape, kDLBool, 8);
  return sc_run(in, 2, out, 2);
}

int main(void) {
  const char *a[3] = {"ab", "", "\xc3\xa9"}, *b[3] = {"c", "", "!"}, *y[3] = {0};
  uint8_t eq[3];
  int rc = run(a, b, y, eq);
  printf("first rc=%d y=%s|%s|%s eq=%d%d%d\n", rc, y[0], y[1], y[2], eq[0], eq[1], eq[2]);
  void *held = sc_strings_take(); /* y's strings now outlive the next call */
  const char *keep = y[0];
  const char *a2[3] = {"x", "y", "z"}, *y2[3] = {0};
  rc = run(a2, b, y2, eq);
  printf("second rc=%d y=%s|%s|%s kept=%s\n", rc, y2[0], y2[1], y2[2], keep);
  sc_strings_free(held);
  a2[1] = NULL;
  rc = run(a2, b, y2, eq);
  printf("null rc=%d err=%s\n", rc, sc_last_error());
  static int64_t shape[1] = {3};
  int64_t ints[3] = {0, 0, 0};
  DLTensor in[2], out[2];
  tensor(&in[0], ints, shape, kDLInt, 64);
  tensor(&in[1], (void *)b, shape, kDLOpaqueHandle, 64);
  tensor(&out[0], (void *)y, shape, kDLOpaqueHandle, 64);
  tensor(&out[1], eq, shape, kDLBool, 8);
  rc = sc_run(in, 2, out, 2);
  printf("dtype rc=%d err=%s\n", rc, sc_last_error());
  sc_strings_release();
  return 0;
}
