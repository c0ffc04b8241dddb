/* Calls nzm_run_alloc (library-allocated outputs, DLPack managed tensors) and prints what
 * it got; frees every tensor with its deleter unless argv[1] is "leak" (the negative
 * control: LeakSanitizer must then report the blocks). */
#include <stdio.h>
#include <string.h>

#include "nzm.h"

static void show(const char *name, DLManagedTensor *m) {
  const DLTensor *t = &m->dl_tensor;
  printf("%s ndim=%d shape=", name, (int)t->ndim);
  for (int j = 0; j < t->ndim; ++j) printf("%s%lld", j ? "x" : "", (long long)t->shape[j]);
  printf(" strides=%s data=", t->strides ? "set" : "null");
  int64_t n = 1;
  for (int j = 0; j < t->ndim; ++j) n *= t->shape[j];
  for (int64_t i = 0; i < n; ++i) {
    if (t->dtype.code == kDLInt) printf("%s%lld", i ? "," : "", (long long)((const int64_t *)t->data)[i]);
    else printf("%s%g", i ? "," : "", (double)((const float *)t->data)[i]);
  }
  printf("\n");
}

int main(int argc, char **argv) {
  int leak = argc > 1 && strcmp(argv[1], "leak") == 0;
  float x[12] = {0, 1, 0, 2, 0, 0, 3, 0, 0, 0, 0, 4};
  int64_t shape[2] = {3, 4};
  DLTensor in = {x, {kDLCPU, 0}, 2, {kDLFloat, 32, 1}, shape, NULL, 0};
  for (int round = 0; round < 3; ++round) {
    DLManagedTensor *outs[NZM_NUM_OUTPUTS];
    int rc = nzm_run_alloc(&in, 1, outs, NZM_NUM_OUTPUTS);
    printf("rc=%d\n", rc);
    if (rc != 0) return 1;
    show("nz", outs[0]);
    show("neg", outs[1]);
    if (!leak)
      for (int k = 0; k < NZM_NUM_OUTPUTS; ++k) outs[k]->deleter(outs[k]);
    x[round] = 5.0f; /* one more nonzero next round */
  }
  /* a failing call allocates nothing and leaves NULLs */
  DLTensor bad = in;
  bad.dtype.bits = 64;
  DLManagedTensor *outs[NZM_NUM_OUTPUTS] = {(DLManagedTensor *)&bad, (DLManagedTensor *)&bad};
  int rc = nzm_run_alloc(&bad, 1, outs, NZM_NUM_OUTPUTS);
  printf("bad rc=%d nulls=%d msg=%s\n", rc, outs[0] == NULL && outs[1] == NULL, nzm_last_error());
  printf("DONE\n");
  return 0;
}
