/* onnxcc runtime: string tensors and the string ops' runtime calls.
 *
 * Elements are `const char *` to NUL-terminated UTF-8 (onnxcc_strings.h). Strings made here
 * come from the calling thread's arena: a list of malloc'ed blocks that NAME_run empties at
 * its start, NAME_strings_take detaches and NAME_strings_free frees; a thread that exits
 * frees its arena (the pthread key's destructor). The kernels run string calls on the
 * thread that called NAME_run (never inside a parallel loop), so one arena per thread is
 * enough and no lock is needed.
 *
 * Needs nothing beyond libc: POSIX <regex.h> for RegexFullMatch, run in the "C" locale (a
 * per-thread uselocale, so the process's locale does not change what a pattern means); the
 * compiler translates RE2 patterns into POSIX extended ones and refuses what it cannot
 * translate (ops/strings_regex.py says which). */
#define _GNU_SOURCE
#include "onnxcc_strings.h"

#include <errno.h>
#include <locale.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <regex.h>
#include <stdlib.h>
#include <string.h>

/* ---- the per-thread arena ------------------------------------------------------------- */

typedef struct str_block {
  struct str_block *next;
  size_t used, cap; /* the bytes follow the header */
} str_block;

typedef struct {
  str_block *head;
} str_arena;

#define STR_BLOCK_BYTES ((size_t)65536)

static pthread_key_t arena_key;
static pthread_once_t arena_once = PTHREAD_ONCE_INIT;

void onnxcc_strings_free(void *arena) {
  str_arena *a = (str_arena *)arena;
  if (a == NULL) return;
  for (str_block *b = a->head; b != NULL;) {
    str_block *next = b->next;
    free(b);
    b = next;
  }
  free(a);
}

static void arena_key_init(void) { (void)pthread_key_create(&arena_key, onnxcc_strings_free); }

static str_arena *arena_get(int create) {
  (void)pthread_once(&arena_once, arena_key_init);
  str_arena *a = (str_arena *)pthread_getspecific(arena_key);
  if (a == NULL && create) {
    a = (str_arena *)calloc(1, sizeof *a);
    if (a != NULL && pthread_setspecific(arena_key, a) != 0) {
      free(a);
      a = NULL;
    }
  }
  return a;
}

void *onnxcc_strings_take(void) {
  str_arena *a = arena_get(0);
  if (a != NULL) (void)pthread_setspecific(arena_key, NULL);
  return a;
}

void onnxcc_strings_release(void) { onnxcc_strings_free(onnxcc_strings_take()); }

void onnxcc_strings_begin(void) { onnxcc_strings_release(); }

/* dlclose: no thread may later run a destructor that is no longer mapped; the key goes
 * (other threads' arenas are left to the process, this thread's is freed) */
__attribute__((destructor)) static void arena_unload(void) {
  if (pthread_once(&arena_once, arena_key_init) == 0) {
    onnxcc_strings_release();
    (void)pthread_key_delete(arena_key);
  }
}

/* n bytes from this thread's arena; NULL (message set) when memory runs out */
static char *str_alloc(size_t n) {
  str_arena *a = arena_get(1);
  if (a == NULL) goto oom;
  str_block *b = a->head;
  if (b == NULL || b->cap - b->used < n) {
    size_t cap = n > STR_BLOCK_BYTES ? n : STR_BLOCK_BYTES;
    if ((b = (str_block *)malloc(sizeof(str_block) + cap)) == NULL) goto oom;
    b->used = 0;
    b->cap = cap;
    b->next = a->head;
    a->head = b;
  }
  char *p = (char *)(b + 1) + b->used;
  b->used += n;
  return p;
oom:
  onnxcc_error_set("out of memory for %zu bytes of string results", n);
  return NULL;
}

/* ---- helpers -------------------------------------------------------------------------- */

#define ELEMS(p) ((const char *const *)(p))

static int32_t null_element(const char *op, int64_t k) {
  onnxcc_error_set("%s: string element %lld is a NULL pointer (every element must point to a "
                   "NUL-terminated UTF-8 string)", op, (long long)k);
  return ONNXCC_ERR_KERNEL;
}

/* ---- the calls ------------------------------------------------------------------------ */

/* Equal on strings: n = {count}; p = {A, B, Y (bool)}; A and B already broadcast */
int32_t onnxcc_str_equal(const int64_t *n, void *const *p) {
  const char *const *a = ELEMS(p[0]), *const *b = ELEMS(p[1]);
  uint8_t *y = (uint8_t *)p[2];
  for (int64_t i = 0; i < n[0]; i++) {
    if (a[i] == NULL || b[i] == NULL) return null_element("Equal", i);
    y[i] = strcmp(a[i], b[i]) == 0;
  }
  return 0;
}

/* StringConcat: n = {count}; p = {A, B, Y}; A and B already broadcast */
int32_t onnxcc_str_concat(const int64_t *n, void *const *p) {
  const char *const *a = ELEMS(p[0]), *const *b = ELEMS(p[1]);
  const char **y = (const char **)p[2];
  for (int64_t i = 0; i < n[0]; i++) {
    if (a[i] == NULL || b[i] == NULL) return null_element("StringConcat", i);
    size_t la = strlen(a[i]), lb = strlen(b[i]);
    char *s = str_alloc(la + lb + 1);
    if (s == NULL) return ONNXCC_ERR_ALLOC;
    memcpy(s, a[i], la);
    memcpy(s + la, b[i], lb + 1);
    y[i] = s;
  }
  return 0;
}

/* A table lookup (LabelEncoder's string keys): n = {count, keys}; p = {X, blob (the keys in
 * strcmp order, NUL-terminated one after another), offsets (i64, where each starts), slots
 * (i64, each sorted key's position in the table), IDX (i64)}; IDX[i] = the position of the key
 * equal to X[i], else -1. A binary search: vocabularies can be large. */
int32_t onnxcc_str_index(const int64_t *n, void *const *p) {
  const char *const *x = ELEMS(p[0]);
  const char *blob = (const char *)p[1];
  const int64_t *off = (const int64_t *)p[2], *slot = (const int64_t *)p[3];
  int64_t *idx = (int64_t *)p[4];
  for (int64_t i = 0; i < n[0]; i++) {
    if (x[i] == NULL) return null_element("LabelEncoder", i);
    int64_t lo = 0, hi = n[1];
    idx[i] = -1;
    while (lo < hi) {
      int64_t mid = lo + (hi - lo) / 2;
      int c = strcmp(x[i], blob + off[mid]);
      if (c == 0) {
        idx[i] = slot[mid];
        break;
      }
      if (c < 0) hi = mid;
      else lo = mid + 1;
    }
  }
  return 0;
}

/* Strings picked from a table (LabelEncoder's string values): n = {count, values}; p = {IDX
 * (i64), blob, offsets (values + 1 of them: the last is the default), Y}. Y's elements
 * point into the library's constant blob: valid as long as the library is loaded. */
int32_t onnxcc_str_pick(const int64_t *n, void *const *p) {
  const int64_t *idx = (const int64_t *)p[0];
  const char *blob = (const char *)p[1];
  const int64_t *off = (const int64_t *)p[2];
  const char **y = (const char **)p[3];
  for (int64_t i = 0; i < n[0]; i++) {
    int64_t k = idx[i] >= 0 && idx[i] < n[1] ? idx[i] : n[1];
    y[i] = blob + off[k];
  }
  return 0;
}

/* RegexFullMatch: n = {count, byte_sensitive}; p = {X, pattern (POSIX ERE, anchored), Y
 * (bool)}. byte_sensitive: the pattern holds `.` or a negated class, which POSIX in the "C"
 * locale applies to one BYTE and RE2 to one UTF-8 character (and `.`: RE2 never matches a
 * newline); an element where that could differ (a byte >= 0x80 or a newline) is refused. */
int32_t onnxcc_str_regex_full_match(const int64_t *n, void *const *p) {
  const char *const *x = ELEMS(p[0]);
  const char *pattern = (const char *)p[1];
  uint8_t *y = (uint8_t *)p[2];
  locale_t c = newlocale(LC_ALL_MASK, "C", (locale_t)0);
  if (c == (locale_t)0) {
    onnxcc_error_set("RegexFullMatch: cannot create the C locale");
    return ONNXCC_ERR_KERNEL;
  }
  locale_t old = uselocale(c);
  regex_t re;
  int32_t rc = 0;
  int err = regcomp(&re, pattern, REG_EXTENDED | REG_NOSUB);
  if (err != 0) {
    char why[128];
    regerror(err, &re, why, sizeof why);
    onnxcc_error_set("RegexFullMatch: POSIX regcomp refused the translated pattern %s: %s", pattern, why);
    rc = ONNXCC_ERR_KERNEL;
    goto out;
  }
  for (int64_t i = 0; i < n[0] && rc == 0; i++) {
    if (x[i] == NULL) {
      rc = null_element("RegexFullMatch", i);
      break;
    }
    if (n[1]) {
      for (const unsigned char *s = (const unsigned char *)x[i]; *s; s++) {
        if (*s >= 0x80 || *s == '\n') {
          onnxcc_error_set("RegexFullMatch: element %lld holds a non-ASCII character or a newline, where "
                           "this pattern ('.' or a negated class) means something else in POSIX regex than "
                           "in RE2; refused rather than answered differently", (long long)i);
          rc = ONNXCC_ERR_KERNEL;
          break;
        }
      }
      if (rc != 0) break;
    }
    y[i] = regexec(&re, x[i], 0, NULL, 0) == 0;
  }
  regfree(&re);
out:
  uselocale(old);
  freelocale(c);
  return rc;
}

/* ---- StringNormalizer ----------------------------------------------------------------- */

static int has_non_ascii(const char *s) {
  for (const unsigned char *c = (const unsigned char *)s; *c; c++)
    if (*c >= 0x80) return 1;
  return 0;
}

static int ascii_lower(int c) { return c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c; }
static int ascii_upper(int c) { return c >= 'a' && c <= 'z' ? c - 'a' + 'A' : c; }

static int equal_fold(const char *a, const char *b) {
  for (; *a && *b; a++, b++)
    if (ascii_lower((unsigned char)*a) != ascii_lower((unsigned char)*b)) return 0;
  return *a == *b;
}

/* which elements stay: n = {count, stopwords, case_sensitive}; p = {X, blob, starts, KEEP
 * (i64 0/1)}. A case-insensitive comparison folds ASCII letters only: an element with a
 * non-ASCII byte is refused there (the stopwords were checked at compile time). */
int32_t onnxcc_str_keep(const int64_t *n, void *const *p) {
  const char *const *x = ELEMS(p[0]);
  const char *blob = (const char *)p[1];
  const int64_t *off = (const int64_t *)p[2];
  int64_t *keep = (int64_t *)p[3];
  for (int64_t i = 0; i < n[0]; i++) {
    if (x[i] == NULL) return null_element("StringNormalizer", i);
    if (!n[2] && n[1] > 0 && has_non_ascii(x[i])) {
      onnxcc_error_set("StringNormalizer: element %lld holds a non-ASCII character, which a case-insensitive "
                       "stopword comparison here cannot fold (ASCII only); refused", (long long)i);
      return ONNXCC_ERR_KERNEL;
    }
    keep[i] = 1;
    for (int64_t k = 0; k < n[1]; k++) {
      if (n[2] ? strcmp(x[i], blob + off[k]) == 0 : equal_fold(x[i], blob + off[k])) {
        keep[i] = 0;
        break;
      }
    }
  }
  return 0;
}

/* the kept elements in order, their case changed: n = {count, action (0 NONE, 1 LOWER,
 * 2 UPPER)}; p = {X, KEEP, Y}; none kept: Y[0] = "" (the spec's one empty string) */
int32_t onnxcc_str_normalize(const int64_t *n, void *const *p) {
  const char *const *x = ELEMS(p[0]);
  const int64_t *keep = (const int64_t *)p[1];
  const char **y = (const char **)p[2];
  int64_t out = 0;
  for (int64_t i = 0; i < n[0]; i++) {
    if (!keep[i]) continue;
    if (n[1] == 0) {
      y[out++] = x[i];
      continue;
    }
    if (has_non_ascii(x[i])) {
      onnxcc_error_set("StringNormalizer: element %lld holds a non-ASCII character; case changes here are "
                       "ASCII only, so it is refused rather than changed partly", (long long)i);
      return ONNXCC_ERR_KERNEL;
    }
    size_t len = strlen(x[i]);
    char *s = str_alloc(len + 1);
    if (s == NULL) return ONNXCC_ERR_ALLOC;
    for (size_t j = 0; j <= len; j++)
      s[j] = (char)(n[1] == 1 ? ascii_lower((unsigned char)x[i][j]) : ascii_upper((unsigned char)x[i][j]));
    y[out++] = s;
  }
  if (out == 0) y[0] = "";
  return 0;
}

/* ---- StringSplit ---------------------------------------------------------------------- */

/* Python's str.isspace on ASCII (what str.split() splits at) */
static int split_space(unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f); }

static int32_t piece(const char **out, int64_t k, const char *s, size_t len) {
  char *t = str_alloc(len + 1);
  if (t == NULL) return ONNXCC_ERR_ALLOC;
  memcpy(t, s, len);
  t[len] = '\0';
  out[k] = t;
  return 0;
}

/* Splits s like Python's s.split(delim or None, maxsplit) (maxsplit < 0: no limit); writes
 * the pieces to out when it is not NULL; returns the count, or -1 (message set) */
static int64_t split_one(const char *s, const char *delim, int64_t maxsplit, const char **out) {
  int64_t count = 0;
  size_t dl = strlen(delim), i = 0, len = strlen(s);
  if (dl == 0) { /* runs of whitespace; none at the ends */
    while (i < len && split_space((unsigned char)s[i])) i++;
    while (i < len) {
      size_t j = i;
      if (maxsplit >= 0 && count == maxsplit) {
        j = len; /* the rest as it is */
      } else {
        while (j < len && !split_space((unsigned char)s[j])) j++;
      }
      if (out != NULL && piece(out, count, s + i, j - i) != 0) return -1;
      count++;
      i = j;
      while (i < len && split_space((unsigned char)s[i])) i++;
    }
    return count;
  }
  if (len == 0) return 0; /* no substrings, as onnxruntime has it (Python's split gives one "") */
  for (;;) {
    const char *at = maxsplit >= 0 && count == maxsplit ? NULL : strstr(s + i, delim);
    size_t j = at == NULL ? len : (size_t)(at - s);
    if (out != NULL && piece(out, count, s + i, j - i) != 0) return -1;
    count++;
    if (at == NULL) return count;
    i = j + dl;
  }
}

/* the substring counts: n = {count, maxsplit (< 0: none), cap (the columns allocated)}; p = {X,
 * DELIM (u8, "" = whitespace), Z (i64), MOST (i64 scalar: the largest count, 0 for no
 * elements), SYMBOL (u8: the name of the output's last dim)}; more than cap substrings in one
 * element is an error, not a cut */
int32_t onnxcc_str_split_count(const int64_t *n, void *const *p) {
  const char *const *x = ELEMS(p[0]);
  const char *delim = (const char *)p[1];
  int64_t *z = (int64_t *)p[2], *most = (int64_t *)p[3];
  *most = 0;
  for (int64_t i = 0; i < n[0]; i++) {
    if (x[i] == NULL) return null_element("StringSplit", i);
    if (delim[0] == '\0') {
      /* the spec splits at whitespace, onnxruntime at spaces only: text where the two differ
       * (other whitespace, or non-ASCII that may hold some) is refused */
      for (const unsigned char *c = (const unsigned char *)x[i]; *c; c++) {
        if (*c >= 0x80 || (*c != ' ' && split_space(*c))) {
          onnxcc_error_set("StringSplit: element %lld holds whitespace other than spaces, or a non-ASCII "
                           "character, where the spec (any whitespace) and onnxruntime (spaces) split "
                           "differently; refused", (long long)i);
          return ONNXCC_ERR_KERNEL;
        }
      }
    }
    z[i] = split_one(x[i], delim, n[1], NULL);
    if (z[i] > n[2]) {
      onnxcc_error_set("StringSplit: element %lld splits into %lld substrings, more than the %lld columns this "
                       "build allocates for (give maxsplit, or compile with --dim %s=1:N)", (long long)i,
                       (long long)z[i], (long long)n[2], (const char *)p[4]);
      return ONNXCC_ERR_KERNEL;
    }
    if (z[i] > *most) *most = z[i];
  }
  return 0;
}

/* the substrings, each row padded with "": n = {count, maxsplit, width}; p = {X, DELIM, Y
 * (count x width)} */
int32_t onnxcc_str_split(const int64_t *n, void *const *p) {
  const char *const *x = ELEMS(p[0]);
  const char *delim = (const char *)p[1];
  const char **y = (const char **)p[2];
  for (int64_t i = 0; i < n[0]; i++) {
    const char **row = y + i * n[2];
    int64_t got = split_one(x[i], delim, n[1], row);
    if (got < 0) return ONNXCC_ERR_ALLOC;
    for (int64_t k = got; k < n[2]; k++) row[k] = "";
  }
  return 0;
}

/* ---- Cast ----------------------------------------------------------------------------- */

static int ascii_ieq(const char *a, const char *b) { return equal_fold(a, b); }

/* the spec's number literals: [+-](digits[.digits*] | .digits)([eE][+-]digits) */
static int float_literal(const char *s) {
  const char *c = s;
  int digits = 0;
  if (*c == '+' || *c == '-') c++;
  while (*c >= '0' && *c <= '9') c++, digits++;
  if (*c == '.') {
    c++;
    while (*c >= '0' && *c <= '9') c++, digits++;
  }
  if (!digits) return 0;
  if (*c == 'e' || *c == 'E') {
    c++;
    if (*c == '+' || *c == '-') c++;
    if (!(*c >= '0' && *c <= '9')) return 0;
    while (*c >= '0' && *c <= '9') c++;
  }
  return *c == '\0';
}

/* strings to f32 / f64: n = {count, f64}; p = {X, Y}; parsed in the "C" locale */
int32_t onnxcc_str_to_float(const int64_t *n, void *const *p) {
  const char *const *x = ELEMS(p[0]);
  locale_t c = newlocale(LC_ALL_MASK, "C", (locale_t)0);
  if (c == (locale_t)0) {
    onnxcc_error_set("Cast: cannot create the C locale");
    return ONNXCC_ERR_KERNEL;
  }
  locale_t old = uselocale(c);
  int32_t rc = 0;
  for (int64_t i = 0; i < n[0]; i++) {
    const char *s = x[i];
    double v;
    if (s == NULL) {
      rc = null_element("Cast", i);
      break;
    }
    if (ascii_ieq(s, "inf") || ascii_ieq(s, "+inf")) {
      v = HUGE_VAL;
    } else if (ascii_ieq(s, "-inf")) {
      v = -HUGE_VAL;
    } else if (ascii_ieq(s, "nan")) {
      v = NAN;
    } else if (float_literal(s)) {
      v = strtod(s, NULL); /* f32 from the double, as the reference (numpy) has it */
    } else {
      onnxcc_error_set("Cast: element %lld is not a number literal (the spec leaves such text undefined)",
                       (long long)i);
      rc = ONNXCC_ERR_KERNEL;
      break;
    }
    if (n[1]) {
      ((double *)p[1])[i] = v;
    } else {
      ((float *)p[1])[i] = (float)v;
    }
  }
  uselocale(old);
  freelocale(c);
  return rc;
}

/* strings to integers: n = {count, lo, hi}; p = {X, Y (i64)}; decimal literals in [lo, hi] */
int32_t onnxcc_str_to_int(const int64_t *n, void *const *p) {
  const char *const *x = ELEMS(p[0]);
  int64_t *y = (int64_t *)p[1];
  for (int64_t i = 0; i < n[0]; i++) {
    const char *s = x[i];
    if (s == NULL) return null_element("Cast", i);
    const char *c = s + (*s == '+' || *s == '-');
    int ok = *c != '\0';
    for (; *c; c++) ok &= *c >= '0' && *c <= '9';
    errno = 0;
    long long v = ok ? strtoll(s, NULL, 10) : 0;
    if (!ok || errno == ERANGE || v < n[1] || v > n[2]) {
      onnxcc_error_set("Cast: element %lld is not an integer literal in [%lld, %lld] (the spec leaves such "
                       "text undefined)", (long long)i, (long long)n[1], (long long)n[2]);
      return ONNXCC_ERR_KERNEL;
    }
    y[i] = v;
  }
  return 0;
}

/* integers to decimal strings: n = {count, unsigned}; p = {X (i64, or u64 bits), Y} */
int32_t onnxcc_str_from_int(const int64_t *n, void *const *p) {
  const int64_t *x = (const int64_t *)p[0];
  const char **y = (const char **)p[1];
  for (int64_t i = 0; i < n[0]; i++) {
    char *s = str_alloc(24);
    if (s == NULL) return ONNXCC_ERR_ALLOC;
    if (n[1]) {
      snprintf(s, 24, "%llu", (unsigned long long)(uint64_t)x[i]);
    } else {
      snprintf(s, 24, "%lld", (long long)x[i]);
    }
    y[i] = s;
  }
  return 0;
}
