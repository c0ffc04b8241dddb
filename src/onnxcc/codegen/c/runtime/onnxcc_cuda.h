/* onnxcc CUDA runtime: loads the artifact's PTX through the CUDA driver API and launches
 * its kernels. Compiled into every target "cuda" artifact beside onnxcc_rt.c.
 *
 * The driver (libcuda.so.1, or $ONNXCC_CUDA_DRIVER when set) is found with dlopen at the
 * first call, so building and linking an artifact never needs a GPU or the CUDA toolkit.
 * Without a driver, without the device, or on a device whose compute capability is below
 * the PTX target, calls fail with ONNXCC_ERR_DEVICE and a message; nothing crashes. */
#ifndef ONNXCC_CUDA_H_
#define ONNXCC_CUDA_H_

#include <stdint.h>

#include "onnxcc_rt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A const buffer: the PTX global `name` receives `bytes` bytes from `data` after loading. */
typedef struct {
  const char *name;
  const unsigned char *data;
  uint64_t bytes;
} onnxcc_cuda_const;

/* Everything an artifact's dispatcher tells the runtime about its GPU code. */
typedef struct {
  const char *ptx;     /* NUL-terminated PTX text */
  const char *arch;    /* "sm_80", for messages */
  int cc;              /* the compute capability x 10 the PTX needs at least */
  int cc_exact;        /* arch-specific PTX (sm_90a): the capability must equal cc */
  int block;           /* threads per block of every launch */
  int n_kernels;
  const char *const *kernels; /* entry names; launches refer to them by index */
  int n_consts;
  const onnxcc_cuda_const *consts;
  int n_kernel_errors;
  const char *const *kernel_errors; /* message of a kernel's status code, NULL if none */
} onnxcc_cuda_image;

struct onnxcc_cuda_slot;

/* One call in flight: what launches need. ws and status are device pointers (CUdeviceptr);
 * kernels get &ws and &status among their arguments. */
typedef struct {
  const onnxcc_cuda_image *image;
  struct onnxcc_cuda_slot *slot;
  void *stream;
  uint64_t ws;
  uint64_t status;
  int ws_private; /* ws was allocated for this call alone */
} onnxcc_cuda_call;

typedef int (*onnxcc_cuda_version_fn)(onnxcc_cuda_call *call, const int64_t *syms, void *const *inputs,
                                      void *const *outputs);

/* The stream the calling thread's next runs use (a CUstream; NULL = the default stream).
 * Thread-local. */
ONNXCC_HIDDEN void onnxcc_cuda_set_stream(void *stream);

/* The CUDA device all the tensors are on (kDLCUDA / kDLCUDAManaged device ids must agree). */
ONNXCC_HIDDEN int onnxcc_cuda_common_device(const DLTensor *inputs, int n_inputs, const DLTensor *outputs,
                                            int n_outputs, int *device_id);

/* Runs version v: finds the driver, makes a context of device_id current (the caller's
 * current context if it is on that device, else the device's primary context), loads the
 * PTX once per context and checks the compute capability, gets ws_bytes of workspace
 * (a cached block when no other call holds it, else a private one), calls fn to launch
 * the kernels on the thread's stream, waits for the stream and reads the kernels' status.
 * Returns ONNXCC_OK or an error code with a message. */
ONNXCC_HIDDEN int onnxcc_cuda_run(const onnxcc_cuda_image *image, int device_id, int v, onnxcc_cuda_version_fn fn,
                                  int64_t ws_bytes, const int64_t *syms, void *const *inputs,
                                  void *const *outputs);

/* Launches kernel k over `work` elements (nothing when work <= 0): blocks of image->block
 * threads, as many as needed up to a grid that fills the device (the kernels loop). */
ONNXCC_HIDDEN int onnxcc_cuda_launch(onnxcc_cuda_call *call, int k, int64_t work, void **args);

#ifdef __cplusplus
}
#endif
#endif /* ONNXCC_CUDA_H_ */
