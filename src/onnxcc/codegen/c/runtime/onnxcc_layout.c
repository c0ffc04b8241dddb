/* onnxcc runtime: serving strided inputs by compacting them into scratch.
 *
 * Why a copy and not strided kernels: every kernel is generated for compact row-major
 * buffers, which is what lets the scheduler vectorise and tile with constant strides. A
 * strided kernel would need every load's address computed from per-call strides (a second
 * set of versions, slower ones), while one copy costs a single pass over the input, which
 * every model reads at least once anyway. Compact inputs (NULL or compact strides) never
 * come here: they are read in place, with no copy. */
#include "onnxcc_rt.h"

#include <string.h>

/* copies n elements of esz bytes, stride `step` elements apart, into dst (compact) */
static void onnxcc_gather_row(char *dst, const char *src, int64_t n, int64_t step, int64_t esz) {
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

typedef struct {
  const DLTensor *t;
  const char *base;
  char *dst;
  int64_t esz, inner, step;
} onnxcc_compact_job;

/* rows [begin, end) of the outer dims: an odometer started at `begin`, keeping the row's
 * offset as it goes; the innermost dim is one gathered row */
static void onnxcc_compact_rows(int64_t begin, int64_t end, void *ctx) {
  const onnxcc_compact_job *job = (const onnxcc_compact_job *)ctx;
  const DLTensor *t = job->t;
  int32_t rank = t->ndim;
  int64_t idx[rank > 1 ? rank : 1], off = 0, rest = begin;
  for (int32_t d = rank - 2; d >= 0; d--) { /* unflatten the first row's index */
    idx[d] = rest % t->shape[d];
    rest /= t->shape[d];
    off += idx[d] * t->strides[d];
  }
  char *out = job->dst + begin * job->inner * job->esz;
  for (int64_t row = begin; row < end; row++) {
    onnxcc_gather_row(out, job->base + off * job->esz, job->inner, job->step, job->esz);
    out += job->inner * job->esz;
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

/* below this many bytes one thread copies: waking the pool costs more than it saves */
#define ONNXCC_COMPACT_PARALLEL (1 << 20)

void onnxcc_compact(const DLTensor *t, void *dst) {
  int64_t esz = (t->dtype.bits + 7) / 8;
  const char *base = (const char *)t->data + t->byte_offset;
  int32_t rank = t->ndim;
  int64_t numel = 1;
  for (int32_t d = 0; d < rank; d++) numel *= t->shape[d];
  if (numel == 0) return;
  if (rank == 0 || t->strides == NULL) {
    memcpy(dst, base, (size_t)(numel * esz));
    return;
  }
  int64_t inner = t->shape[rank - 1];
  onnxcc_compact_job job = {t, base, (char *)dst, esz, inner, inner == 1 ? 1 : t->strides[rank - 1]};
  int64_t rows = numel / inner;
  if (numel * esz < ONNXCC_COMPACT_PARALLEL || rows < 2)
    onnxcc_compact_rows(0, rows, &job);
  else /* a big input: its rows over the thread pool (chunks never overlap) */
    onnxcc_parallel_for(rows, onnxcc_compact_rows, &job);
}

int onnxcc_compact_inputs(const DLTensor *inputs, const onnxcc_span *spans, int n_inputs, void **ptrs,
                          void *small, size_t small_cap, void **scratch) {
  size_t total = 0;
  *scratch = NULL;
  for (int k = 0; k < n_inputs; k++) /* each copy 64-byte aligned, like a compact caller's might be */
    if (spans[k].strided) total += ((size_t)spans[k].nbytes + ONNXCC_ALIGN - 1) & ~(size_t)(ONNXCC_ALIGN - 1);
  if (total == 0) return ONNXCC_OK;
  char *buf = (char *)small; /* small copies live in the caller's frame: no malloc per call */
  if (total > small_cap) {
    buf = (char *)onnxcc_aligned_alloc(total);
    if (buf == NULL) {
      onnxcc_error_set("could not allocate %llu bytes to compact the strided inputs", (unsigned long long)total);
      return ONNXCC_ERR_ALLOC;
    }
    *scratch = buf;
  }
  for (int k = 0; k < n_inputs; k++) {
    if (!spans[k].strided) continue;
    onnxcc_compact(&inputs[k], buf);
    ptrs[k] = buf;
    buf += ((size_t)spans[k].nbytes + ONNXCC_ALIGN - 1) & ~(size_t)(ONNXCC_ALIGN - 1);
  }
  return ONNXCC_OK;
}
