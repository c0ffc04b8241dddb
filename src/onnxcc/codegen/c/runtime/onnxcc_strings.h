/* onnxcc runtime: string tensors (onnxcc_strings.c).
 *
 * A string tensor is a DLTensor of kDLOpaqueHandle elements, bits 64: element k is a
 * `const char *` to NUL-terminated UTF-8. Strings the library makes during a call (a
 * concatenation, ...) live in the calling thread's string arena: NAME_run empties it at
 * its start (onnxcc_strings_begin), so they stay valid until the next call on the same
 * thread, unless the caller takes the arena (NAME_strings_take) and frees it later. */
#ifndef ONNXCC_STRINGS_H_
#define ONNXCC_STRINGS_H_

#include "onnxcc_rt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* frees the strings of this thread's previous call (unless taken) and starts afresh */
ONNXCC_HIDDEN void onnxcc_strings_begin(void);
/* detaches this thread's strings and returns them (NULL when there are none) */
ONNXCC_HIDDEN void *onnxcc_strings_take(void);
/* frees strings returned by onnxcc_strings_take (NULL is fine) */
ONNXCC_HIDDEN void onnxcc_strings_free(void *arena);
/* frees this thread's strings now */
ONNXCC_HIDDEN void onnxcc_strings_release(void);

/* The kernels' runtime calls: int32_t fn(const int64_t *sizes, void *const *buffers), see
 * kernel/extern.py; each returns 0, or ONNXCC_ERR_KERNEL after setting the message. */
ONNXCC_HIDDEN int32_t onnxcc_str_equal(const int64_t *n, void *const *p);
ONNXCC_HIDDEN int32_t onnxcc_str_concat(const int64_t *n, void *const *p);
ONNXCC_HIDDEN int32_t onnxcc_str_index(const int64_t *n, void *const *p);
ONNXCC_HIDDEN int32_t onnxcc_str_pick(const int64_t *n, void *const *p);
ONNXCC_HIDDEN int32_t onnxcc_str_regex_full_match(const int64_t *n, void *const *p);
ONNXCC_HIDDEN int32_t onnxcc_str_keep(const int64_t *n, void *const *p);
ONNXCC_HIDDEN int32_t onnxcc_str_normalize(const int64_t *n, void *const *p);
ONNXCC_HIDDEN int32_t onnxcc_str_split_count(const int64_t *n, void *const *p);
ONNXCC_HIDDEN int32_t onnxcc_str_split(const int64_t *n, void *const *p);
ONNXCC_HIDDEN int32_t onnxcc_str_to_float(const int64_t *n, void *const *p);
ONNXCC_HIDDEN int32_t onnxcc_str_to_int(const int64_t *n, void *const *p);
ONNXCC_HIDDEN int32_t onnxcc_str_from_int(const int64_t *n, void *const *p);

#ifdef __cplusplus
}
#endif
#endif /* ONNXCC_STRINGS_H_ */
