/* What the strided-call drivers (strided.c, strided_out.c) share: `t`, an f32 DLTensor over
 * host memory `p` with `shape`, `strides` (NULL: compact) and a byte offset. Included after
 * an artifact's header, which declares DLTensor. */
#ifndef ONNXCC_TESTS_F32_VIEW_H
#define ONNXCC_TESTS_F32_VIEW_H

#include <stdint.h>
#include <string.h>

static DLTensor t(void *p, int ndim, int64_t *shape, int64_t *strides, uint64_t off) {
  DLTensor x;
  memset(&x, 0, sizeof x);
  x.data = p;
  x.device.device_type = kDLCPU;
  x.ndim = ndim;
  x.shape = shape;
  x.strides = strides;
  x.byte_offset = off;
  x.dtype.code = kDLFloat;
  x.dtype.bits = 32;
  x.dtype.lanes = 1;
  return x;
}

#endif
