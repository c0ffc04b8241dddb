/* onnxcc runtime: the small C support library compiled into every artifact.
 *
 * Everything here is hidden: each libNAME.so gets its own private copy, so two artifacts
 * loaded into one process never share (or interpose) error buffers or thread pools.
 * Hidden symbols still resolve across the object files of one link, which is how the
 * LLVM-generated kernels reach onnxcc_parallel_for. */
#ifndef ONNXCC_RT_H_
#define ONNXCC_RT_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ONNXCC_HIDDEN __attribute__((visibility("hidden")))

/* BEGIN DLPACK: copied verbatim into every NAME.h.
 * DLPack tensor types, layout- and value-identical to dlpack.h, under dlpack.h's own
 * include guard: include dlpack.h BEFORE this header to get the rest of DLPack too. */
#ifndef DLPACK_DLPACK_H_
#define DLPACK_DLPACK_H_
typedef enum {
  kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3, kDLOpenCL = 4, kDLVulkan = 7, kDLMetal = 8,
  kDLVPI = 9, kDLROCM = 10, kDLROCMHost = 11, kDLExtDev = 12, kDLCUDAManaged = 13,
  kDLOneAPI = 14, kDLWebGPU = 15, kDLHexagon = 16, kDLMAIA = 17
} DLDeviceType;
typedef enum {
  kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLOpaqueHandle = 3, kDLBfloat = 4, kDLComplex = 5,
  kDLBool = 6
} DLDataTypeCode;
typedef struct {
  DLDeviceType device_type;
  int32_t device_id;
} DLDevice;
typedef struct {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
} DLDataType;
typedef struct {
  void *data; /* the tensor starts at (char *)data + byte_offset */
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t *shape;
  int64_t *strides; /* in elements; NULL means compact row-major */
  uint64_t byte_offset;
} DLTensor;
/* A tensor someone else owns: call deleter(self) once when done with it (NAME_run_alloc). */
typedef struct DLManagedTensor {
  DLTensor dl_tensor;
  void *manager_ctx;
  void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;
#endif /* DLPACK_DLPACK_H_ */
/* END DLPACK */

/* ---- return codes: every NAME_ERR_* equals the ONNXCC_ERR_* of the same name --------- */
enum {
  ONNXCC_OK = 0,
  ONNXCC_ERR_ARGS = 1,       /* wrong counts, NULL pointers, bad output index */
  ONNXCC_ERR_DEVICE = 2,     /* a tensor on a device this artifact cannot read */
  ONNXCC_ERR_DTYPE = 3,
  ONNXCC_ERR_SHAPE = 4,      /* rank, dims, strides, symbol ranges */
  ONNXCC_ERR_CONSTRAINT = 5, /* a constraint the model needs does not hold */
  ONNXCC_ERR_GUARD = 6,      /* no version's guard holds */
  ONNXCC_ERR_ALLOC = 7,
  ONNXCC_ERR_KERNEL = 8,     /* a version returned nonzero; its code is in the message */
  ONNXCC_ERR_CPU = 9         /* this CPU lacks a feature the kernels were compiled for */
};

/* ---- errors: one thread-local message per artifact ---------------------------------- */
ONNXCC_HIDDEN void onnxcc_error_clear(void);
ONNXCC_HIDDEN void onnxcc_error_set(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The current thread's message; "" when none. Valid until the next set/clear. */
ONNXCC_HIDDEN const char *onnxcc_error_get(void);

/* ---- memory ---------------------------------------------------------------------- */
#define ONNXCC_ALIGN 64
/* 64-byte aligned block; never NULL for bytes == 0 (so NULL always means failure). */
ONNXCC_HIDDEN void *onnxcc_aligned_alloc(size_t bytes);
ONNXCC_HIDDEN void onnxcc_aligned_free(void *p);
/* A library-allocated CPU tensor of this shape (copied) and dtype, its data 64-byte aligned
 * and `bytes` long; its deleter frees data, shape and itself. NULL when out of memory. The
 * struct has room for `ndim` strides after the shape (strides left NULL: compact). */
ONNXCC_HIDDEN DLManagedTensor *onnxcc_managed_new(int32_t ndim, const int64_t *shape, uint8_t code,
                                                  uint8_t bits, size_t bytes);
/* Bytes of a compact tensor of this shape and element width (sub-byte types packed);
 * nonzero when the size overflows. */
ONNXCC_HIDDEN int onnxcc_tensor_bytes(int32_t ndim, const int64_t *shape, int bits, size_t *bytes);

/* ---- thread pool ----------------------------------------------------------------- */
typedef void (*onnxcc_body_fn)(int64_t begin, int64_t end, void *ctx);
/* Runs body over [0, n) split into contiguous chunks, on worker threads plus the caller.
 * Returns when every chunk is done. Chunks never overlap and cover [0, n) exactly once.
 * Runs inline (one call body(0, n, ctx)) when n < 2, when there is one thread, when
 * called from inside a body (nesting), or when another caller thread holds the pool. */
ONNXCC_HIDDEN void onnxcc_parallel_for(int64_t n, onnxcc_body_fn body, void *ctx);
/* Threads a parallel_for may use, the caller included: ONNXCC_NUM_THREADS when set to a
 * positive integer, else the number of online CPUs. Fixed at first use. */
ONNXCC_HIDDEN int onnxcc_num_threads(void);

/* ---- dispatcher helpers ------------------------------------------------------------ */
/* What onnxcc_check_tensor learnt about one tensor, kept for the overlap check and the
 * compaction, so neither walks the shape again. */
typedef struct {
  uintptr_t lo, hi; /* the bytes [lo, hi) its elements lie in; lo == hi when it is empty */
  int64_t nbytes;   /* its size compact: numel * element bytes (packed for sub-byte types) */
  int64_t device;   /* (device type << 32) | device id: bytes of two devices never overlap */
  int strided;      /* 1: strides not compact row-major (compacted first / scattered after) */
} onnxcc_span;

/* What one tensor of the signature must be; kind ("input"/"output"), name, dtype_text and
 * shape_text only go into messages. The dispatcher keeps one static const per tensor. */
typedef struct {
  const char *kind, *name, *dtype_text, *shape_text;
  int32_t rank;
  uint8_t code, bits;
  int allow_strided; /* ONNXCC_STRIDED_READ / _WRITE: may come strided (0: compact only) */
} onnxcc_tensor_sig;

/* onnxcc_tensor_sig.allow_strided: an input the dispatcher compacts when it comes strided
 * (any strides: negative, zero, gaps), or an output it scatters into after the run (any
 * strides under which every element has bytes of its own: no zero stride, no two dims
 * whose steps make elements meet, since two writes to one address would race). */
#define ONNXCC_STRIDED_READ 1
#define ONNXCC_STRIDED_WRITE 2

/* Checks what does not depend on the model's symbols: device (one of devices[]), dtype
 * (code, bits, lanes 1), rank, extents >= 0, strides, data present, and that every byte
 * an element may occupy lies inside the address space. Strides: compact row-major (size-1
 * dims may have any stride) always passes; any other strides (in elements, DLPack's way)
 * pass only with sig->allow_strided (for _WRITE only strides whose elements do not share
 * bytes), and only for whole-byte dtypes, setting span->strided. Fills *span. Returns
 * ONNXCC_OK or an error code with a message. */
ONNXCC_HIDDEN int onnxcc_check_tensor(const DLTensor *t, const onnxcc_tensor_sig *sig, const int32_t *devices,
                                      int n_devices, onnxcc_span *span);

/* Refuses (ONNXCC_ERR_ARGS, naming both tensors) an output whose bytes overlap an input's or
 * another output's (a strided tensor's bytes: the whole range its strides reach). in_place (NULL: none) is n_outputs x n_inputs flags of the version
 * about to run: where in_place[k * n_inputs + i] is set, output k may alias input i
 * EXACTLY (the same bytes, both compact), since that version was proved to read each
 * element of the input before writing the same element of the output; every other
 * overlap is refused. */
ONNXCC_HIDDEN int onnxcc_check_overlap(const onnxcc_span *inputs, int n_inputs, const char *const *input_names,
                                       const onnxcc_span *outputs, int n_outputs,
                                       const char *const *output_names, const unsigned char *in_place);

/* Strided inputs (outputs) up to this many bytes, all of them together, are staged in
 * NAME_run's own frame instead of an allocation. */
#define ONNXCC_COMPACT_SMALL 4096

/* Copies tensor t (accepted by onnxcc_check_tensor with allow_strided; whole-byte dtype)
 * into dst as a compact row-major tensor of span->nbytes bytes. */
ONNXCC_HIDDEN void onnxcc_compact(const DLTensor *t, void *dst);

/* Serves strided inputs: when some spans[k].strided, copies each strided input compact into
 * `small` (small_cap bytes, 64-byte aligned, the caller's) when they all fit, else into one
 * allocated block (*scratch, freed by the caller with onnxcc_aligned_free; NULL when none
 * was allocated), and points ptrs[k] at its copy; compact inputs keep their pointers.
 * ONNXCC_ERR_ALLOC (message set) when the block cannot be allocated. */
ONNXCC_HIDDEN int onnxcc_compact_inputs(const DLTensor *inputs, const onnxcc_span *spans, int n_inputs,
                                        void **ptrs, void *small, size_t small_cap, void **scratch);

/* Serves strided outputs: when some spans[k].strided, points ptrs[k] at a compact scratch
 * slot (in `small` when all fit, else in one allocated block *scratch, freed by the caller
 * with onnxcc_aligned_free) that the version writes; onnxcc_scatter_outputs then copies
 * each slot into its strided tensor, after a successful run only (a failed call leaves the
 * caller's outputs untouched). ONNXCC_ERR_ALLOC (message set) when the block cannot be
 * allocated. */
ONNXCC_HIDDEN int onnxcc_stage_outputs(const onnxcc_span *spans, int n_outputs, void **ptrs, void *small,
                                       size_t small_cap, void **scratch);
ONNXCC_HIDDEN void onnxcc_scatter_outputs(const DLTensor *outputs, const onnxcc_span *spans, int n_outputs,
                                          void *const *ptrs);

typedef int32_t (*onnxcc_version_fn)(const int64_t *syms, void *const *inputs,
                                     void *const *outputs, void *workspace);
/* Allocates ws_bytes of aligned workspace (reusing the calling thread's cached one when it
 * is big enough; ONNXCC_WORKSPACE_CACHE=0: fresh each call), calls version v, releases
 * it. A nonzero return
 * becomes ONNXCC_ERR_KERNEL with "kernel failed in version V with code C" (followed by
 * any message the kernel set itself with onnxcc_error_set). */
/* The code the last failed kernel call of this thread returned (valid right after
 * onnxcc_call_version returned ONNXCC_ERR_KERNEL): 5 is
 * ERR_CAPACITY, a grown loop state that passed its capacity, which the dispatcher answers by
 * re-running with a larger one (codegen/c/capacity.py). */
ONNXCC_HIDDEN int onnxcc_last_kernel_code(void);
ONNXCC_HIDDEN int onnxcc_call_version(int v, onnxcc_version_fn fn, int64_t ws_bytes,
                                      const int64_t *syms, void *const *inputs,
                                      void *const *outputs);

#ifdef __cplusplus
}
#endif
#endif /* ONNXCC_RT_H_ */
