"""The dispatcher's CPU check: `cpu_check()`, called first by NAME_run.

At the first call it asks the CPU (`__builtin_cpu_supports`) for every feature the kernels
were compiled for (ArtifactSpec.cpu_features) and remembers the answer; a missing feature
makes every NAME_run return NAME_ERR_CPU with a message naming it, instead of the kernels
dying of SIGILL. `ONNXCC_CPU_DISABLE=avx512f,fma` makes the check treat those features as
absent (to test the refusal, or a multi-ISA library's fallback, on a CPU that has them).

A multi-ISA library (--cpu-versions) holds versions for several CPU levels; `cpu_level(k)`
says whether level k's extra features are all present (and, when `ONNXCC_CPU_LEVEL=NAME` is
set, whether k is that level), and each such version's guard starts with it, so the
dispatcher picks by the running CPU like by any other guard.
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
                "static int cpu_check(void) { return 0; }\n" + _masked_fn())
    cpu = str(spec.metadata.get("cpu", "")) or "?"
    tests = "\n".join(f'  if (!__builtin_cpu_supports("{f}") || cpu_masked("{f}")) return "{f}";' for f in feats)
    return f"""/* The CPU features the kernels were compiled for (CPU {_c_str(cpu)}): {", ".join(feats)}. */
{_masked_fn()}
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



def _masked_fn() -> str:
    return r"""#include <stdlib.h>
#include <string.h>

/* ONNXCC_CPU_DISABLE=feat,feat: treat these features as absent */
static int cpu_masked(const char *feat) {
  const char *list = getenv("ONNXCC_CPU_DISABLE");
  size_t n = strlen(feat);
  while (list != NULL && *list != '\0') {
    const char *end = strchr(list, ',');
    size_t len = end != NULL ? (size_t)(end - list) : strlen(list);
    if (len == n && strncmp(list, feat, n) == 0) return 1;
    list = end != NULL ? end + 1 : NULL;
  }
  return 0;
}
"""


def _levels(spec: ArtifactSpec) -> list[str]:
    """The levels that need a run-time test: those with features beyond the shared ones."""
    base = set(spec.cpu_features)
    return [name for name, feats in spec.cpu_levels.items() if set(feats) - base]


def cpu_version_guard(spec: ArtifactSpec, v, cond: str) -> str:
    """A version's C guard, preceded by its CPU level's test where it has one."""
    levels = _levels(spec)
    if not v.cpu or v.cpu not in levels:
        return cond
    test = f"cpu_level({levels.index(v.cpu)})"
    return test if cond == "1" else f"{test} && {cond}"


def cpu_levels_fn(spec: ArtifactSpec) -> str:
    """C source of `static int cpu_level(int k)` for a multi-ISA library ("" otherwise)."""
    levels = _levels(spec)
    if not levels:
        return ""
    base = set(spec.cpu_features)
    cases = []
    for k, name in enumerate(levels):
        extra = [f for f in spec.cpu_levels[name] if f not in base]
        tests = " &&\n        ".join(f'__builtin_cpu_supports("{f}") && !cpu_masked("{f}")' for f in extra)
        cases.append(f'  case {k}:\n    if (cpu_forced("{_c_str(name)}") == 0) return 0;\n'
                     f"#if defined(__x86_64__) || defined(__i386__)\n    __builtin_cpu_init();\n"
                     f"    return {tests};\n#else\n    return 0;\n#endif")
    names = ", ".join(levels)
    return f"""/* CPU levels beyond the shared features, most capable first ({_c_str(names)}); tested once each */
/* ONNXCC_CPU_LEVEL=NAME: only that level's versions (or the baseline's) may run: -1 unset, 1 NAME, 0 other */
static int cpu_forced(const char *name) {{
  const char *want = getenv("ONNXCC_CPU_LEVEL");
  if (want == NULL || *want == '\\0') return -1;
  return strcmp(want, name) == 0;
}}

static int cpu_level_test(int k) {{
  switch (k) {{
{chr(10).join(cases)}
  }}
  return 0;
}}

static int cpu_level_state[{len(levels)}]; /* 0: not tested yet, 1: present, 2: absent */

static int cpu_level(int k) {{
  int st = __atomic_load_n(&cpu_level_state[k], __ATOMIC_ACQUIRE);
  if (st == 0) {{
    st = cpu_level_test(k) ? 1 : 2;
    __atomic_store_n(&cpu_level_state[k], st, __ATOMIC_RELEASE);
  }}
  return st == 1;
}}"""
