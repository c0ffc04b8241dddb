/* A fake CUDA driver for testing the host side of CUDA artifacts on machines without a GPU.
 *
 * "Device memory" is host memory; modules and kernels are names; launches run nothing and
 * are logged (one line each) to $FAKE_CUDA_LOG. Knobs (environment):
 *   FAKE_CUDA_DEVICES   device count (default 1)
 *   FAKE_CUDA_CC        compute capability x 10 (default 80)
 *   FAKE_CUDA_STATUS    the status word the kernels "leave" (default 0)
 *   FAKE_CUDA_INIT      cuInit's result (default 0) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

static int env_int(const char *name, int dflt) {
  const char *v = getenv(name);
  return v && *v ? atoi(v) : dflt;
}

static void logf_(const char *fmt, const char *a, long long b, long long c, long long d) {
  const char *path = getenv("FAKE_CUDA_LOG");
  if (!path) return;
  FILE *f = fopen(path, "a");
  if (!f) return;
  fprintf(f, fmt, a, b, c, d);
  fclose(f);
}

static __thread void *ctx_stack[16];
static __thread int ctx_depth;

CUresult cuInit(unsigned flags) { (void)flags; return env_int("FAKE_CUDA_INIT", 0); }
CUresult cuDeviceGetCount(int *n) { *n = env_int("FAKE_CUDA_DEVICES", 1); return 0; }
CUresult cuDeviceGet(int *d, int ordinal) {
  if (ordinal < 0 || ordinal >= env_int("FAKE_CUDA_DEVICES", 1)) return 101; /* invalid device */
  *d = ordinal;
  return 0;
}
CUresult cuDeviceGetAttribute(int *v, int attr, int dev) {
  (void)dev;
  int cc = env_int("FAKE_CUDA_CC", 80);
  *v = attr == 75 ? cc / 10 : attr == 76 ? cc % 10 : attr == 16 ? 4 : 0;
  return 0;
}
CUresult cuCtxGetCurrent(void **c) { *c = ctx_depth ? ctx_stack[ctx_depth - 1] : NULL; return 0; }
CUresult cuCtxGetDevice(int *d) {
  if (!ctx_depth) return 201;
  *d = (int)(intptr_t)ctx_stack[ctx_depth - 1] - 1;
  return 0;
}
CUresult cuDevicePrimaryCtxRetain(void **c, int dev) { *c = (void *)(intptr_t)(dev + 1); return 0; }
CUresult cuCtxPushCurrent_v2(void *c) {
  if (ctx_depth == 16) return 1;
  ctx_stack[ctx_depth++] = c;
  return 0;
}
CUresult cuCtxPopCurrent_v2(void **c) {
  if (!ctx_depth) return 201;
  *c = ctx_stack[--ctx_depth];
  return 0;
}
CUresult cuModuleLoadDataEx(void **m, const void *image, unsigned n, int *opts, void **vals) {
  (void)n, (void)opts, (void)vals;
  const char *ptx = (const char *)image;
  if (!strstr(ptx, ".version") || !strstr(ptx, ".target")) return 218; /* invalid PTX */
  logf_("load %s %lld %lld %lld\n", "ptx", (long long)strlen(ptx), 0, 0);
  *m = (void *)ptx;
  return 0;
}
CUresult cuModuleGetFunction(void **f, void *m, const char *name) {
  char entry[512];
  snprintf(entry, sizeof entry, ".entry %s(", name);
  if (!strstr((const char *)m, entry)) return 500; /* not found */
  *f = strdup(name);
  return 0;
}
CUresult cuModuleGetGlobal_v2(CUdeviceptr *p, size_t *bytes, void *m, const char *name) {
  const char *decl = strstr((const char *)m, name);
  const char *under = strrchr(name, '_');
  if (!decl || !under) return 500;
  size_t n = (size_t)strtoull(under + 1, NULL, 10);
  *p = (CUdeviceptr)(uintptr_t)calloc(1, n ? n : 1);
  *bytes = n;
  return 0;
}
CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t n) {
  *p = (CUdeviceptr)(uintptr_t)malloc(n);
  logf_("alloc %s %lld %lld %lld\n", "ws", (long long)n, 0, 0);
  return *p ? 0 : 2;
}
CUresult cuMemFree_v2(CUdeviceptr p) { free((void *)(uintptr_t)p); return 0; }
CUresult cuMemcpyHtoD_v2(CUdeviceptr d, const void *s, size_t n) {
  memcpy((void *)(uintptr_t)d, s, n);
  logf_("htod %s %lld %lld %lld\n", "const", (long long)n, 0, 0);
  return 0;
}
CUresult cuMemcpyDtoHAsync_v2(void *d, CUdeviceptr s, size_t n, void *stream) {
  (void)stream;
  memcpy(d, (void *)(uintptr_t)s, n);
  int st = env_int("FAKE_CUDA_STATUS", 0);
  if (st && n == 4) memcpy(d, &st, 4);
  return 0;
}
CUresult cuMemcpyDtoH_v2(void *d, CUdeviceptr s, size_t n) { memcpy(d, (void *)(uintptr_t)s, n); return 0; }
CUresult cuCtxSetCurrent(void *c) {
  if (c) ctx_stack[ctx_depth ? ctx_depth - 1 : ctx_depth++] = c;
  else ctx_depth = 0;
  return 0;
}
CUresult cuCtxSynchronize(void) { return 0; }
CUresult cuMemsetD32Async(CUdeviceptr d, unsigned v, size_t n, void *stream) {
  (void)stream;
  for (size_t i = 0; i < n; i++) ((unsigned *)(uintptr_t)d)[i] = v;
  return 0;
}
CUresult cuLaunchKernel(void *f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                        unsigned shmem, void *stream, void **params, void **extra) {
  (void)gy, (void)gz, (void)by, (void)bz, (void)shmem, (void)extra;
  /* params[0] is the first symbol's value when the model has symbols */
  logf_("launch %s %lld %lld %lld\n", (const char *)f, (long long)gx, (long long)bx,
        (long long)(intptr_t)stream);
  (void)params;
  return 0;
}
CUresult cuStreamSynchronize(void *s) { (void)s; return 0; }
CUresult cuGetErrorName(CUresult r, const char **s) { *s = r ? "CUDA_ERROR_FAKE" : "CUDA_SUCCESS"; return 0; }
CUresult cuGetErrorString(CUresult r, const char **s) { *s = r ? "a fake failure" : "no error"; return 0; }
