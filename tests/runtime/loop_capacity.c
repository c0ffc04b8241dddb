/* Calls a library whose while loop grows its state past the capacity it starts with
 * (tests/runtime/test_loop_capacity_c.py builds it with --loop-capacity 4:64).
 *
 * alloc K...   appended_run_alloc at lim = K (K iterations): prints each output's shape and
 *              data, frees every tensor with its deleter (argv "leak" first: it does not,
 *              the negative control LeakSanitizer must report)
 * caller K     appended_run with outputs allocated from appended_output_shape, each followed
 *              by GUARD canary floats: prints rc, the message and whether the canaries
 *              survived (a state that outgrows its capacity must never write past the end) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "appended.h"

#define GUARD 64
#define CANARY 12345.5f

static void show(const char *name, const DLTensor *t) {
  printf("%s shape=", name);
  int64_t n = 1;
  for (int j = 0; j < t->ndim; ++j) {
    printf("%s%lld", j ? "x" : "", (long long)t->shape[j]);
    n *= t->shape[j];
  }
  printf(" data=");
  for (int64_t i = 0; i < n; ++i) printf("%s%g", i ? "," : "", (double)((const float *)t->data)[i]);
  printf("\n");
}

static int run_alloc(float lim, int leak) {
  float x[1] = {0.0f};
  int64_t xs[1] = {1};
  DLTensor in[2] = {{x, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, xs, NULL, 0},
                    {&lim, {kDLCPU, 0}, 0, {kDLFloat, 32, 1}, NULL, NULL, 0}};
  DLManagedTensor *outs[APPENDED_NUM_OUTPUTS];
  int rc = appended_run_alloc(in, 2, outs, APPENDED_NUM_OUTPUTS);
  printf("alloc lim=%g rc=%d\n", (double)lim, rc);
  if (rc != 0) {
    printf("msg=%s nulls=%d\n", appended_last_error(), outs[0] == NULL && outs[1] == NULL);
    return 0;
  }
  show("v2", &outs[0]->dl_tensor);
  show("n", &outs[1]->dl_tensor);
  if (!leak)
    for (int k = 0; k < APPENDED_NUM_OUTPUTS; ++k) outs[k]->deleter(outs[k]);
  return 0;
}

static int run_caller(float lim) {
  float x[1] = {0.0f};
  int64_t xs[1] = {1};
  DLTensor in[2] = {{x, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, xs, NULL, 0},
                    {&lim, {kDLCPU, 0}, 0, {kDLFloat, 32, 1}, NULL, NULL, 0}};
  int64_t shapes[2][1] = {{0}, {0}};
  DLTensor outs[2];
  float *bufs[2];
  int64_t sizes[2];
  for (int k = 0; k < 2; ++k) {
    int rc = appended_output_shape(in, 2, k, shapes[k]);
    if (rc != 0) { printf("shape rc=%d %s\n", rc, appended_last_error()); return 1; }
    sizes[k] = k == 0 ? shapes[k][0] : 1;
    bufs[k] = malloc((size_t)(sizes[k] + GUARD) * sizeof(float));
    for (int64_t i = 0; i < sizes[k] + GUARD; ++i) bufs[k][i] = CANARY;
    DLTensor t = {bufs[k], {kDLCPU, 0}, k == 0 ? 1 : 0, {kDLFloat, 32, 1}, shapes[k], NULL, 0};
    outs[k] = t;
  }
  int rc = appended_run(in, 2, outs, 2);
  int intact = 1;
  for (int k = 0; k < 2; ++k)
    for (int64_t i = sizes[k]; i < sizes[k] + GUARD; ++i) intact &= bufs[k][i] == CANARY;
  printf("caller lim=%g bound=%lld rc=%d canaries=%s msg=%s\n", (double)lim, (long long)shapes[0][0], rc,
         intact ? "intact" : "OVERWRITTEN", rc ? appended_last_error() : "");
  if (rc == 0) {
    int64_t d[1];
    appended_output_dims(0, d);
    printf("caller true=%lld\n", (long long)d[0]);
  }
  free(bufs[0]);
  free(bufs[1]);
  return 0;
}

int main(int argc, char **argv) {
  int leak = 0;
  for (int a = 1; a < argc; ++a) {
    if (strcmp(argv[a], "leak") == 0) leak = 1;
    else if (strcmp(argv[a], "caller") == 0 && a + 1 < argc) {
      if (run_caller((float)atof(argv[++a])) != 0) return 1;
    } else if (run_alloc((float)atof(argv[a]), leak) != 0) return 1;
  }
  printf("DONE\n");
  return 0;
}
