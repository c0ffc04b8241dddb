/* onnxcc CUDA runtime: the driver API found with dlopen, PTX modules cached per context,
 * the workspace, launches. See onnxcc_cuda.h for the contract of each function.
 *
 * Only the few driver types and constants used here are declared (ABI-stable since CUDA
 * 4.0), so no CUDA header is needed to build an artifact. */
#define _GNU_SOURCE
#include "onnxcc_cuda.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef int CUresult;
typedef int CUdevice;
typedef void *CUcontext;
typedef void *CUmodule;
typedef void *CUfunction;
typedef void *CUstream;
typedef unsigned long long CUdeviceptr;

enum {
  CU_OK = 0,
  CU_ATTR_SM_COUNT = 16,
  CU_ATTR_CC_MAJOR = 75,
  CU_ATTR_CC_MINOR = 76,
  CU_JIT_ERROR_LOG = 5,
  CU_JIT_ERROR_LOG_SIZE = 6,
};

#define ONNXCC_CUDA_MAX_SLOTS 64
#define ONNXCC_CUDA_MAX_DEVICES 64
#define ONNXCC_CUDA_GRID_PER_SM 32 /* grid cap in blocks per multiprocessor; kernels loop */
#define ONNXCC_CUDA_STATUS_BYTES 256

/* ---- the driver ------------------------------------------------------------------------ */

static struct {
  int ok;
  char why[768];
  void *lib;
  CUresult (*Init)(unsigned);
  CUresult (*DeviceGetCount)(int *);
  CUresult (*DeviceGet)(CUdevice *, int);
  CUresult (*DeviceGetAttribute)(int *, int, CUdevice);
  CUresult (*CtxGetCurrent)(CUcontext *);
  CUresult (*CtxGetDevice)(CUdevice *);
  CUresult (*DevicePrimaryCtxRetain)(CUcontext *, CUdevice);
  CUresult (*CtxPushCurrent)(CUcontext);
  CUresult (*CtxPopCurrent)(CUcontext *);
  CUresult (*ModuleLoadDataEx)(CUmodule *, const void *, unsigned, int *, void **);
  CUresult (*ModuleGetFunction)(CUfunction *, CUmodule, const char *);
  CUresult (*ModuleGetGlobal)(CUdeviceptr *, size_t *, CUmodule, const char *);
  CUresult (*MemAlloc)(CUdeviceptr *, size_t);
  CUresult (*MemFree)(CUdeviceptr);
  CUresult (*MemcpyHtoD)(CUdeviceptr, const void *, size_t);
  CUresult (*MemcpyDtoHAsync)(void *, CUdeviceptr, size_t, CUstream);
  CUresult (*MemsetD32Async)(CUdeviceptr, unsigned, size_t, CUstream);
  CUresult (*LaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                           CUstream, void **, void **);
  CUresult (*StreamSynchronize)(CUstream);
  CUresult (*GetErrorName)(CUresult, const char **);
  CUresult (*GetErrorString)(CUresult, const char **);
} drv;

static pthread_once_t drv_once = PTHREAD_ONCE_INIT;

/* "CUDA_ERROR_X (what it means)" for a driver result; static storage, per thread. */
static const char *cu_text(CUresult r) {
  static __thread char buf[256];
  const char *name = NULL, *desc = NULL;
  if (drv.GetErrorName) drv.GetErrorName(r, &name);
  if (drv.GetErrorString) drv.GetErrorString(r, &desc);
  snprintf(buf, sizeof buf, "%s (%s)", name ? name : "CUDA error", desc ? desc : "no description");
  if (!name) snprintf(buf, sizeof buf, "CUDA error %d", (int)r);
  return buf;
}

static void drv_load(void) {
  const char *path = getenv("ONNXCC_CUDA_DRIVER");
  if (!path || !*path) path = "libcuda.so.1";
  drv.lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!drv.lib) {
    const char *e = dlerror();
    snprintf(drv.why, sizeof drv.why, "no CUDA driver: cannot load %s (%s)", path, e ? e : "unknown error");
    return;
  }
  struct {
    void **slot;
    const char *name;
  } syms[] = {
      {(void **)&drv.Init, "cuInit"},
      {(void **)&drv.DeviceGetCount, "cuDeviceGetCount"},
      {(void **)&drv.DeviceGet, "cuDeviceGet"},
      {(void **)&drv.DeviceGetAttribute, "cuDeviceGetAttribute"},
      {(void **)&drv.CtxGetCurrent, "cuCtxGetCurrent"},
      {(void **)&drv.CtxGetDevice, "cuCtxGetDevice"},
      {(void **)&drv.DevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain"},
      {(void **)&drv.CtxPushCurrent, "cuCtxPushCurrent_v2"},
      {(void **)&drv.CtxPopCurrent, "cuCtxPopCurrent_v2"},
      {(void **)&drv.ModuleLoadDataEx, "cuModuleLoadDataEx"},
      {(void **)&drv.ModuleGetFunction, "cuModuleGetFunction"},
      {(void **)&drv.ModuleGetGlobal, "cuModuleGetGlobal_v2"},
      {(void **)&drv.MemAlloc, "cuMemAlloc_v2"},
      {(void **)&drv.MemFree, "cuMemFree_v2"},
      {(void **)&drv.MemcpyHtoD, "cuMemcpyHtoD_v2"},
      {(void **)&drv.MemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2"},
      {(void **)&drv.MemsetD32Async, "cuMemsetD32Async"},
      {(void **)&drv.LaunchKernel, "cuLaunchKernel"},
      {(void **)&drv.StreamSynchronize, "cuStreamSynchronize"},
  };
  for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
    *syms[i].slot = dlsym(drv.lib, syms[i].name);
    if (!*syms[i].slot) {
      snprintf(drv.why, sizeof drv.why, "CUDA driver %s lacks %s (driver too old?)", path, syms[i].name);
      return;
    }
  }
  drv.GetErrorName = (CUresult(*)(CUresult, const char **))dlsym(drv.lib, "cuGetErrorName");
  drv.GetErrorString = (CUresult(*)(CUresult, const char **))dlsym(drv.lib, "cuGetErrorString");
  CUresult r = drv.Init(0);
  if (r != CU_OK) {
    snprintf(drv.why, sizeof drv.why, "CUDA driver %s: cuInit failed: %s", path, cu_text(r));
    return;
  }
  drv.ok = 1;
}

/* ---- per-context state ----------------------------------------------------------------- */

typedef struct onnxcc_cuda_slot {
  CUcontext ctx;
  CUdevice dev;
  CUmodule mod;
  CUfunction *funcs;
  int sms;
  pthread_mutex_t ws_mu; /* held by the call using the cached workspace */
  CUdeviceptr ws;
  size_t ws_cap;
} onnxcc_cuda_slot;

static onnxcc_cuda_slot slots[ONNXCC_CUDA_MAX_SLOTS];
static int n_slots;
static CUcontext primary[ONNXCC_CUDA_MAX_DEVICES];
static pthread_mutex_t slots_mu = PTHREAD_MUTEX_INITIALIZER;
static __thread void *stream_tl;

void onnxcc_cuda_set_stream(void *stream) { stream_tl = stream; }

int onnxcc_cuda_common_device(const DLTensor *inputs, int n_inputs, const DLTensor *outputs, int n_outputs,
                              int *device_id) {
  const DLTensor *first = NULL;
  const char *first_kind = "input";
  int first_index = 0;
  for (int pass = 0; pass < 2; pass++) {
    const DLTensor *ts = pass ? outputs : inputs;
    int n = pass ? n_outputs : n_inputs;
    const char *kind = pass ? "output" : "input";
    for (int i = 0; i < n; i++) {
      if (!first) {
        first = &ts[i], first_kind = kind, first_index = i;
      } else if (ts[i].device.device_id != first->device.device_id) {
        onnxcc_error_set("%s %d is on CUDA device %d but %s %d is on device %d: all tensors must be on one "
                         "device", kind, i, (int)ts[i].device.device_id, first_kind, first_index,
                         (int)first->device.device_id);
        return ONNXCC_ERR_DEVICE;
      }
    }
  }
  *device_id = first ? first->device.device_id : 0;
  return ONNXCC_OK;
}

/* Loads the image into the current context (slots_mu held). */
static int slot_load(const onnxcc_cuda_image *img, onnxcc_cuda_slot *s, int device_id) {
  int major = 0, minor = 0;
  CUresult r;
  if ((r = drv.DeviceGetAttribute(&major, CU_ATTR_CC_MAJOR, s->dev)) != CU_OK ||
      (r = drv.DeviceGetAttribute(&minor, CU_ATTR_CC_MINOR, s->dev)) != CU_OK) {
    onnxcc_error_set("CUDA device %d: cannot read its compute capability: %s", device_id, cu_text(r));
    return ONNXCC_ERR_DEVICE;
  }
  int cc = major * 10 + minor;
  if (cc < img->cc || (img->cc_exact && cc != img->cc)) {
    onnxcc_error_set("CUDA device %d has compute capability %d.%d, but this artifact's PTX targets %s%s; "
                     "recompile with --cuda-arch sm_%d", device_id, major, minor, img->arch,
                     img->cc_exact ? " exactly" : " or newer", cc);
    return ONNXCC_ERR_DEVICE;
  }
  if (drv.DeviceGetAttribute(&s->sms, CU_ATTR_SM_COUNT, s->dev) != CU_OK || s->sms < 1) s->sms = 1;
  char log[4096];
  log[0] = '\0';
  int opts[2] = {CU_JIT_ERROR_LOG, CU_JIT_ERROR_LOG_SIZE};
  void *vals[2] = {log, (void *)(uintptr_t)sizeof log};
  if ((r = drv.ModuleLoadDataEx(&s->mod, img->ptx, 2, opts, vals)) != CU_OK) {
    onnxcc_error_set("CUDA device %d: loading the PTX (%s) failed: %s%s%s", device_id, img->arch, cu_text(r),
                     log[0] ? ": " : "", log);
    return ONNXCC_ERR_DEVICE;
  }
  s->funcs = (CUfunction *)calloc(img->n_kernels > 0 ? (size_t)img->n_kernels : 1, sizeof(CUfunction));
  if (!s->funcs) {
    onnxcc_error_set("out of host memory loading the PTX");
    return ONNXCC_ERR_ALLOC;
  }
  for (int k = 0; k < img->n_kernels; k++) {
    if ((r = drv.ModuleGetFunction(&s->funcs[k], s->mod, img->kernels[k])) != CU_OK) {
      onnxcc_error_set("CUDA: kernel %s not found in the PTX: %s", img->kernels[k], cu_text(r));
      return ONNXCC_ERR_DEVICE;
    }
  }
  for (int k = 0; k < img->n_consts; k++) {
    CUdeviceptr p = 0;
    size_t bytes = 0;
    const onnxcc_cuda_const *c = &img->consts[k];
    if ((r = drv.ModuleGetGlobal(&p, &bytes, s->mod, c->name)) != CU_OK || bytes < c->bytes) {
      onnxcc_error_set("CUDA: constant %s (%llu bytes) not found in the PTX: %s", c->name,
                       (unsigned long long)c->bytes, r != CU_OK ? cu_text(r) : "too small");
      return ONNXCC_ERR_DEVICE;
    }
    if (c->bytes > 0 && (r = drv.MemcpyHtoD(p, c->data, (size_t)c->bytes)) != CU_OK) {
      onnxcc_error_set("CUDA: copying constant %s to device %d failed: %s", c->name, device_id, cu_text(r));
      return ONNXCC_ERR_DEVICE;
    }
  }
  return ONNXCC_OK;
}

/* The slot of the current context ctx on device dev, loading the image on first use. */
static int slot_get(const onnxcc_cuda_image *img, CUcontext ctx, CUdevice dev, int device_id,
                    onnxcc_cuda_slot **out) {
  pthread_mutex_lock(&slots_mu);
  for (int i = 0; i < n_slots; i++) {
    if (slots[i].ctx == ctx && slots[i].mod != NULL) {
      *out = &slots[i];
      pthread_mutex_unlock(&slots_mu);
      return ONNXCC_OK;
    }
  }
  if (n_slots == ONNXCC_CUDA_MAX_SLOTS) {
    pthread_mutex_unlock(&slots_mu);
    onnxcc_error_set("CUDA: more than %d contexts used this artifact", ONNXCC_CUDA_MAX_SLOTS);
    return ONNXCC_ERR_DEVICE;
  }
  onnxcc_cuda_slot *s = &slots[n_slots];
  memset(s, 0, sizeof *s);
  s->ctx = ctx;
  s->dev = dev;
  pthread_mutex_init(&s->ws_mu, NULL);
  int rc = slot_load(img, s, device_id);
  if (rc == ONNXCC_OK) {
    n_slots++;
    *out = s;
  } else {
    free(s->funcs);
    s->funcs = NULL;
    s->mod = NULL;
  }
  pthread_mutex_unlock(&slots_mu);
  return rc;
}

/* Makes a context of device_id current; *pushed says whether to pop it afterwards. */
static int context_enter(int device_id, CUcontext *ctx, CUdevice *dev, int *pushed) {
  int count = 0;
  CUresult r = drv.DeviceGetCount(&count);
  if (r != CU_OK) {
    onnxcc_error_set("CUDA: cannot count devices: %s", cu_text(r));
    return ONNXCC_ERR_DEVICE;
  }
  if (device_id < 0 || device_id >= count) {
    onnxcc_error_set("the tensors are on CUDA device %d, but the driver sees %d device%s", device_id, count,
                     count == 1 ? "" : "s");
    return ONNXCC_ERR_DEVICE;
  }
  if ((r = drv.DeviceGet(dev, device_id)) != CU_OK) {
    onnxcc_error_set("CUDA device %d: %s", device_id, cu_text(r));
    return ONNXCC_ERR_DEVICE;
  }
  *pushed = 0;
  CUcontext cur = NULL;
  CUdevice cur_dev = -1;
  if (drv.CtxGetCurrent(&cur) == CU_OK && cur != NULL && drv.CtxGetDevice(&cur_dev) == CU_OK &&
      cur_dev == *dev) {
    *ctx = cur;
    return ONNXCC_OK;
  }
  pthread_mutex_lock(&slots_mu);
  CUcontext p = device_id < ONNXCC_CUDA_MAX_DEVICES ? primary[device_id] : NULL;
  if (p == NULL) {
    r = drv.DevicePrimaryCtxRetain(&p, *dev);
    if (r == CU_OK && device_id < ONNXCC_CUDA_MAX_DEVICES) primary[device_id] = p;
  }
  pthread_mutex_unlock(&slots_mu);
  if (p == NULL) {
    onnxcc_error_set("CUDA device %d: cannot retain its primary context: %s", device_id, cu_text(r));
    return ONNXCC_ERR_DEVICE;
  }
  if ((r = drv.CtxPushCurrent(p)) != CU_OK) {
    onnxcc_error_set("CUDA device %d: cannot make its primary context current: %s", device_id, cu_text(r));
    return ONNXCC_ERR_DEVICE;
  }
  *ctx = p;
  *pushed = 1;
  return ONNXCC_OK;
}

/* ---- workspace ----------------------------------------------------------------------------- */

static size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

static int workspace_get(onnxcc_cuda_call *call, int v, int64_t ws_bytes) {
  if (ws_bytes < 0) {
    onnxcc_error_set("version %d: workspace size evaluates to %lld bytes", v, (long long)ws_bytes);
    return ONNXCC_ERR_ALLOC;
  }
  size_t need = round_up((size_t)ws_bytes, ONNXCC_CUDA_STATUS_BYTES) + ONNXCC_CUDA_STATUS_BYTES;
  onnxcc_cuda_slot *s = call->slot;
  CUresult r;
  if (pthread_mutex_trylock(&s->ws_mu) == 0) {
    if (s->ws_cap < need) {
      /* the previous user synchronized before unlocking: the old block is idle */
      if (s->ws) drv.MemFree(s->ws);
      s->ws = 0;
      s->ws_cap = 0;
      if ((r = drv.MemAlloc(&s->ws, need)) != CU_OK) {
        s->ws = 0;
        pthread_mutex_unlock(&s->ws_mu);
        onnxcc_error_set("version %d: cannot allocate %llu bytes of CUDA workspace: %s", v,
                         (unsigned long long)need, cu_text(r));
        return ONNXCC_ERR_ALLOC;
      }
      s->ws_cap = need;
    }
    call->ws = s->ws;
    call->ws_private = 0;
  } else {
    if ((r = drv.MemAlloc(&call->ws, need)) != CU_OK) {
      onnxcc_error_set("version %d: cannot allocate %llu bytes of CUDA workspace: %s", v,
                       (unsigned long long)need, cu_text(r));
      return ONNXCC_ERR_ALLOC;
    }
    call->ws_private = 1;
  }
  call->status = call->ws + (need - ONNXCC_CUDA_STATUS_BYTES);
  return ONNXCC_OK;
}

static void workspace_release(onnxcc_cuda_call *call) {
  if (call->ws_private)
    drv.MemFree(call->ws);
  else
    pthread_mutex_unlock(&call->slot->ws_mu);
  call->ws = call->status = 0;
}

/* ---- launching ------------------------------------------------------------------------------ */

int onnxcc_cuda_launch(onnxcc_cuda_call *call, int k, int64_t work, void **args) {
  const onnxcc_cuda_image *img = call->image;
  if (work <= 0) return ONNXCC_OK;
  if (k < 0 || k >= img->n_kernels) {
    onnxcc_error_set("CUDA: kernel index %d out of range", k);
    return ONNXCC_ERR_KERNEL;
  }
  int64_t blocks = (work + img->block - 1) / img->block;
  int64_t cap = (int64_t)call->slot->sms * ONNXCC_CUDA_GRID_PER_SM;
  if (blocks > cap) blocks = cap;
  CUresult r = drv.LaunchKernel(call->slot->funcs[k], (unsigned)blocks, 1, 1, (unsigned)img->block, 1, 1, 0,
                                (CUstream)call->stream, args, NULL);
  if (r != CU_OK) {
    onnxcc_error_set("CUDA: launching kernel %s (%lld blocks of %d threads) failed: %s", img->kernels[k],
                     (long long)blocks, img->block, cu_text(r));
    return ONNXCC_ERR_KERNEL;
  }
  return ONNXCC_OK;
}

int onnxcc_cuda_run(const onnxcc_cuda_image *img, int device_id, int v, onnxcc_cuda_version_fn fn,
                    int64_t ws_bytes, const int64_t *syms, void *const *inputs, void *const *outputs) {
  pthread_once(&drv_once, drv_load);
  if (!drv.ok) {
    onnxcc_error_set("%s", drv.why);
    return ONNXCC_ERR_DEVICE;
  }
  CUcontext ctx = NULL;
  CUdevice dev = 0;
  int pushed = 0;
  int rc = context_enter(device_id, &ctx, &dev, &pushed);
  if (rc != ONNXCC_OK) return rc;
  onnxcc_cuda_call call;
  memset(&call, 0, sizeof call);
  call.image = img;
  call.stream = stream_tl;
  if ((rc = slot_get(img, ctx, dev, device_id, &call.slot)) == ONNXCC_OK &&
      (rc = workspace_get(&call, v, ws_bytes)) == ONNXCC_OK) {
    int32_t status = 0;
    CUresult r = drv.MemsetD32Async(call.status, 0, 1, (CUstream)call.stream);
    if (r != CU_OK) {
      onnxcc_error_set("CUDA: clearing the status word failed: %s", cu_text(r));
      rc = ONNXCC_ERR_KERNEL;
    } else {
      onnxcc_error_clear();
      rc = fn(&call, syms, inputs, outputs);
    }
    /* wait for whatever was launched, even after a failed launch: the workspace is reused */
    r = drv.MemcpyDtoHAsync(&status, call.status, sizeof status, (CUstream)call.stream);
    if (r == CU_OK) r = drv.StreamSynchronize((CUstream)call.stream);
    if (rc == ONNXCC_OK && r != CU_OK) {
      onnxcc_error_set("CUDA: running version %d failed: %s", v, cu_text(r));
      rc = ONNXCC_ERR_KERNEL;
    }
    if (rc == ONNXCC_OK && status != 0) {
      const char *what = status > 0 && status < img->n_kernel_errors ? img->kernel_errors[status] : NULL;
      onnxcc_error_set("kernel failed in version %d with code %d%s%s%s", v, (int)status, what ? " (" : "",
                       what ? what : "", what ? ")" : "");
      rc = ONNXCC_ERR_KERNEL;
    }
    workspace_release(&call);
  }
  if (pushed) {
    CUcontext dummy;
    drv.CtxPopCurrent(&dummy);
  }
  return rc;
}
