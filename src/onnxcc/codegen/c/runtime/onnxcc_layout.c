/* onnxcc runtime: serving strided inputs by compacting them into scratch, and strided
 * outputs by scattering a compact scratch result into them after the run.
 *
 * Why a copy and not strided kernels: every kernel is generated for compact row-major
 * buffers, which is what lets the scheduler vectorise and tile with constant strides. A
 * strided kernel would need every load's address computed from per-call strides (a second
 * set of versions, slower ones), while one copy costs a single pass over the tensor, which
 * every model reads (writes) at least once anyway. Compact tensors (NULL or compact
 * strides) never come here: they are read and written in place, with no copy. */
#include "onnxcc_rt.h"

#include <string.h>

/* The row movers and the one body both directions share are inlined (always_inline), with
 * `scatter` a constant: the small calls this runtime serves pay no call per row and no
 * per-row test for the direction. */
#define ONNXCC_INLINE static inline __attribute__((always_inline))

/* copies n elements of esz bytes, stride `step` elements apart, into dst (compact) */
ONNXCC_INLINE void onnxcc_gather_row(char *dst, const char *src, int64_t n, int64_t step, int64_t esz) {
  if (step == 1) {
    memcpy(dst, src, (size_t)(n * esz));
    return;
  }
  int64_t bstep = step * esz;
  switch (esz) { /* the common sizes as typed moves, the rest byte by byte */
    case 1: for (int64_t i = 0; i < n; i++) dst[i] = src[i * bstep]; return;
    case 2: for (int64_t i = 0; i < n; i++) memcpy(dst + 2 * i, src + i * bstep, 2); return;
    case 4: for (int64_t i = 0; i < n; i++) memcpy(dst + 4 * i, src + i * bstep, 4); return;
    case 8: for (int64_t i = 0; i < n; i++) memcpy(dst + 8 * i, src + i * bstep, 8); return;
    default: for (int64_t i = 0; i < n; i++) memcpy(dst + esz * i, src + i * bstep, (size_t)esz); return;
  }
}

/* the other way: n compact elements of esz bytes from src, `step` elements apart into dst */
ONNXCC_INLINE void onnxcc_scatter_row(char *dst, const char *src, int64_t n, int64_t step, int64_t esz) {
  if (step == 1) {
    memcpy(dst, src, (size_t)(n * esz));
    return;
  }
  int64_t bstep = step * esz;
  switch (esz) {
    case 1: for (int64_t i = 0; i < n; i++) dst[i * bstep] = src[i]; return;
    case 2: for (int64_t i = 0; i < n; i++) memcpy(dst + i * bstep, src + 2 * i, 2); return;
    case 4: for (int64_t i = 0; i < n; i++) memcpy(dst + i * bstep, src + 4 * i, 4); return;
    case 8: for (int64_t i = 0; i < n; i++) memcpy(dst + i * bstep, src + 8 * i, 8); return;
    default: for (int64_t i = 0; i < n; i++) memcpy(dst + i * bstep, src + esz * i, (size_t)esz); return;
  }
}

typedef struct {
  const DLTensor *t;
  char *base;    /* the strided tensor's data + byte_offset */
  char *dense;   /* the compact copy */
  int64_t esz, inner, step;
} onnxcc_compact_job;

/* rows [begin, end) of the outer dims: an odometer started at `begin`, keeping the row's
 * offset as it goes; the innermost dim is one row moved at a time (scatter 0: strided ->
 * compact, an input; 1: compact -> strided, an output) */
ONNXCC_INLINE void onnxcc_move_rows(int64_t begin, int64_t end, const onnxcc_compact_job *job, int scatter) {
  const DLTensor *t = job->t;
  int32_t rank = t->ndim;
  int64_t idx[rank > 1 ? rank : 1], off = 0, rest = begin;
  for (int32_t d = rank - 2; d >= 0; d--) { /* unflatten the first row's index */
    idx[d] = rest % t->shape[d];
    rest /= t->shape[d];
    off += idx[d] * t->strides[d];
  }
  char *dense = job->dense + begin * job->inner * job->esz;
  for (int64_t row = begin; row < end; row++) {
    if (scatter)
      onnxcc_scatter_row(job->base + off * job->esz, dense, job->inner, job->step, job->esz);
    else
      onnxcc_gather_row(dense, job->base + off * job->esz, job->inner, job->step, job->esz);
    dense += job->inner * job->esz;
    for (int32_t d = rank - 2; d >= 0; d--) { /* next outer index */
      if (++idx[d] < t->shape[d]) {
        off += t->strides[d];
        break;
      }
      idx[d] = 0;
      off -= (t->shape[d] - 1) * t->strides[d];
    }
  }
}

static void onnxcc_gather_rows(int64_t begin, int64_t end, void *ctx) {
  onnxcc_move_rows(begin, end, (const onnxcc_compact_job *)ctx, 0);
}

static void onnxcc_scatter_rows(int64_t begin, int64_t end, void *ctx) {
  onnxcc_move_rows(begin, end, (const onnxcc_compact_job *)ctx, 1);
}

/* below this many bytes one thread copies: waking the pool costs more than it saves */
#define ONNXCC_COMPACT_PARALLEL (1 << 20)

/* moves t's elements between its strided layout and the compact buffer `dense` */
ONNXCC_INLINE void onnxcc_relayout(const DLTensor *t, void *dense, int scatter) {
  int64_t esz = (t->dtype.bits + 7) / 8;
  char *base = (char *)t->data + t->byte_offset;
  int32_t rank = t->ndim;
  int64_t numel = 1;
  for (int32_t d = 0; d < rank; d++) numel *= t->shape[d];
  if (numel == 0) return;
  if (rank == 0 || t->strides == NULL) {
    if (scatter)
      memcpy(base, dense, (size_t)(numel * esz));
    else
      memcpy(dense, base, (size_t)(numel * esz));
    return;
  }
  int64_t inner = t->shape[rank - 1];
  onnxcc_compact_job job = {t, base, (char *)dense, esz, inner, inner == 1 ? 1 : t->strides[rank - 1]};
  int64_t rows = numel / inner;
  if (numel * esz < ONNXCC_COMPACT_PARALLEL || rows < 2)
    onnxcc_move_rows(0, rows, &job, scatter);
  else /* a big tensor: its rows over the thread pool (chunks never overlap; an output's
        * elements never share bytes, onnxcc_strides_meet saw to that) */
    onnxcc_parallel_for(rows, scatter ? onnxcc_scatter_rows : onnxcc_gather_rows, &job);
}

void onnxcc_compact(const DLTensor *t, void *dst) { onnxcc_relayout(t, dst, 0); }

static size_t onnxcc_slot_bytes(int64_t nbytes) {
  return ((size_t)nbytes + ONNXCC_ALIGN - 1) & ~(size_t)(ONNXCC_ALIGN - 1);
}

/* points ptrs[k] of every strided span at a 64-byte aligned slot of its compact size, in
 * `small` when they all fit, else in one allocated block (*scratch) */
ONNXCC_INLINE int onnxcc_stage(const onnxcc_span *spans, int n, void **ptrs, void *small, size_t small_cap,
                               void **scratch, const char *what) {
  size_t total = 0;
  *scratch = NULL;
  for (int k = 0; k < n; k++)
    if (spans[k].strided) total += onnxcc_slot_bytes(spans[k].nbytes);
  if (total == 0) return ONNXCC_OK;
  char *buf = (char *)small; /* small copies live in the caller's frame: no malloc per call */
  if (total > small_cap) {
    buf = (char *)onnxcc_aligned_alloc(total);
    if (buf == NULL) {
      onnxcc_error_set("could not allocate %llu bytes to stage the strided %s", (unsigned long long)total, what);
      return ONNXCC_ERR_ALLOC;
    }
    *scratch = buf;
  }
  for (int k = 0; k < n; k++) {
    if (!spans[k].strided) continue;
    ptrs[k] = buf;
    buf += onnxcc_slot_bytes(spans[k].nbytes);
  }
  return ONNXCC_OK;
}

int onnxcc_compact_inputs(const DLTensor *inputs, const onnxcc_span *spans, int n_inputs, void **ptrs,
                          void *small, size_t small_cap, void **scratch) {
  int rc = onnxcc_stage(spans, n_inputs, ptrs, small, small_cap, scratch, "inputs");
  if (rc != ONNXCC_OK) return rc;
  for (int k = 0; k < n_inputs; k++)
    if (spans[k].strided) onnxcc_relayout(&inputs[k], ptrs[k], 0);
  return ONNXCC_OK;
}

int onnxcc_stage_outputs(const onnxcc_span *spans, int n_outputs, void **ptrs, void *small, size_t small_cap,
                         void **scratch) {
  return onnxcc_stage(spans, n_outputs, ptrs, small, small_cap, scratch, "outputs");
}

void onnxcc_scatter_outputs(const DLTensor *outputs, const onnxcc_span *spans, int n_outputs, void *const *ptrs) {
  for (int k = 0; k < n_outputs; k++)
    if (spans[k].strided) onnxcc_relayout(&outputs[k], ptrs[k], 1);
}
