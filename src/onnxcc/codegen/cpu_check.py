"""The dispatcher's CPU check: `cpu_check()`, called first by NAME_run.

At the first call it asks the CPU (`__builtin_cpu_supports`) for every feature the kernels
were compiled for (ArtifactSpec.cpu_features) and remembers the answer; a missing feature
makes every NAME_run return NAME_ERR_CPU with a message naming it, instead of the kernels
dying of SIGILL. `ONNXCC_CPU_DISABLE=avx512f,fma` makes the check treat those features as
absent (to test the refusal, or a multi-ISA library's fallback, on a CPU that has them).
"""

from __future__ import annotations

from .abi import ArtifactSpec


def _c_str(s: str) -> str:
    return s.replace("\\", "\\\\").replace('"', '\\"')


def cpu_check_fn(spec: ArtifactSpec) -> str:
    """C source of `static int cpu_check(void)` (0, or ERR_CPU with the message set)."""
    up = spec.name.upper()
    feats = list(spec.cpu_features)
    if not feats:
        return ("/* the kernels need no CPU feature beyond the target's baseline */\n"
                "static int cpu_check(void) { return 0; }")
    cpu = str(spec.metadata.get("cpu", "")) or "?"
    tests = "\n".join(f'  if (!__builtin_cpu_supports("{f}") || cpu_masked("{f}")) return "{f}";' for f in feats)
    return f"""/* The CPU features the kernels were compiled for (CPU {_c_str(cpu)}): {", ".join(feats)}. */
#include <stdlib.h>
#include <string.h>

/* ONNXCC_CPU_DISABLE=feat,feat: treat these features as absent */
static int cpu_masked(const char *feat) {{
  const char *list = getenv("ONNXCC_CPU_DISABLE");
  size_t n = strlen(feat);
  while (list != NULL && *list != '\\0') {{
    const char *end = strchr(list, ',');
    size_t len = end != NULL ? (size_t)(end - list) : strlen(list);
    if (len == n && strncmp(list, feat, n) == 0) return 1;
    list = end != NULL ? end + 1 : NULL;
  }}
  return 0;
}}

/* the first feature this CPU lacks, NULL if it has them all */
static const char *cpu_missing(void) {{
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
{tests}
#endif
  return NULL;
}}

static int cpu_state = 0; /* 0: not checked yet, 1: every feature present, 2: one missing */
static const char *cpu_missing_name = NULL;

static int cpu_check(void) {{
  int st = __atomic_load_n(&cpu_state, __ATOMIC_ACQUIRE);
  if (st == 0) {{ /* racing first calls compute the same answer */
    const char *m = cpu_missing();
    cpu_missing_name = m;
    st = m != NULL ? 2 : 1;
    __atomic_store_n(&cpu_state, st, __ATOMIC_RELEASE);
  }}
  if (st == 2) {{
    onnxcc_error_set("this CPU lacks %s, which lib{spec.name}.so's kernels were compiled for (CPU "
                     "{_c_str(cpu)}); rebuild for this machine (onnxcc compile without --cpu, or --cpu "
                     "x86-64-v2 / x86-64-v3 for a portable library)", cpu_missing_name);
    return {up}_ERR_CPU;
  }}
  return 0;
}}"""
