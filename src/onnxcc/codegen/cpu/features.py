"""The CPU features a library's kernels need, and checking `--cpu` / `--features` names.

The kernels are compiled for one LLVM CPU and feature string (the build host's unless
`--cpu` / `--features` say otherwise); run on a CPU without one of those features they
would die of SIGILL. So the artifact records the features (NAME.json `cpu_features`) and
the generated dispatcher checks them at the first call with `__builtin_cpu_supports`,
returning ERR_CPU with a message naming the missing feature instead.

Only x86 features that both GCC's and Clang's `__builtin_cpu_supports` know are checked
(`CHECKABLE`); the rest of a feature string (cx16, xsave, ...) is implied by these on every
real CPU. A CPU name's features come from `CPU_FEATURES` (LLVM's definitions of the common
x86 CPUs); an explicit feature string adds to them and `-feat` removes.
"""

from __future__ import annotations

import difflib

from ..llvm.target import captured_fd2, target_machine

#: the features the generated check can test, in the order it tests them
CHECKABLE = ("sse3", "ssse3", "sse4.1", "sse4.2", "popcnt", "avx", "avx2", "fma", "bmi", "bmi2",
             "avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl", "avx512vbmi", "avx512ifma",
             "avx512vbmi2", "avx512vnni", "avx512bitalg", "avx512vpopcntdq", "avx512bf16", "gfni",
             "vpclmulqdq", "aes", "pclmul", "sse4a", "fma4", "xop")

_V2 = ("sse3", "ssse3", "sse4.1", "sse4.2", "popcnt")
_V3 = (*_V2, "avx", "avx2", "fma", "bmi", "bmi2")
_V4 = (*_V3, "avx512f", "avx512cd", "avx512bw", "avx512dq", "avx512vl")
_ICL = (*_V4, "avx512vbmi", "avx512ifma", "avx512vbmi2", "avx512vnni", "avx512bitalg", "avx512vpopcntdq",
        "gfni", "vpclmulqdq", "aes", "pclmul")
_SNB = (*_V2, "avx", "aes", "pclmul")
_ZEN = (*_V3, "aes", "pclmul", "sse4a")

#: LLVM x86 CPU name -> the checkable features it implies
CPU_FEATURES: dict[str, tuple[str, ...]] = {
    "x86-64": (), "generic": (), "core2": ("sse3", "ssse3"), "penryn": ("sse3", "ssse3", "sse4.1"),
    "x86-64-v2": _V2, "nehalem": _V2, "westmere": (*_V2, "aes", "pclmul"), "silvermont": (*_V2, "aes", "pclmul"),
    "goldmont": (*_V2, "aes", "pclmul"), "tremont": (*_V2, "aes", "pclmul", "gfni"),
    "sandybridge": _SNB, "ivybridge": _SNB,
    "x86-64-v3": _V3, "haswell": (*_V3, "aes", "pclmul"), "broadwell": (*_V3, "aes", "pclmul"),
    "skylake": (*_V3, "aes", "pclmul"), "alderlake": (*_V3, "aes", "pclmul", "gfni", "vpclmulqdq"),
    "raptorlake": (*_V3, "aes", "pclmul", "gfni", "vpclmulqdq"),
    "meteorlake": (*_V3, "aes", "pclmul", "gfni", "vpclmulqdq"),
    "x86-64-v4": _V4, "skylake-avx512": (*_V4, "aes", "pclmul"),
    "cascadelake": (*_V4, "aes", "pclmul", "avx512vnni"),
    "cooperlake": (*_V4, "aes", "pclmul", "avx512vnni", "avx512bf16"),
    "cannonlake": (*_V4, "aes", "pclmul", "avx512vbmi", "avx512ifma"),
    "icelake-client": _ICL, "icelake-server": _ICL, "rocketlake": _ICL, "tigerlake": _ICL,
    "sapphirerapids": (*_ICL, "avx512bf16"), "emeraldrapids": (*_ICL, "avx512bf16"),
    "graniterapids": (*_ICL, "avx512bf16"),
    "btver2": (*_V2, "avx", "aes", "pclmul", "sse4a", "bmi"),
    "bdver1": (*_SNB, "sse4a", "fma4", "xop"), "bdver2": (*_SNB, "sse4a", "fma4", "xop", "fma", "bmi"),
    "znver1": _ZEN, "znver2": _ZEN, "znver3": (*_ZEN, "vpclmulqdq"),
    "znver4": (*_ICL, "sse4a", "avx512bf16"), "znver5": (*_ICL, "sse4a", "avx512bf16"),
}


def is_x86(triple: str) -> bool:
    arch = triple.split("-")[0]
    return arch in ("x86_64", "amd64", "i386", "i486", "i586", "i686", "x86")


def required_features(triple: str, cpu: str, features: str) -> list[str]:
    """The checkable features code for (triple, cpu, features) may use, in CHECKABLE order.
    `features` is the full string the target machine got ("" for the CPU's own set)."""
    if not is_x86(triple):
        return []
    have = set(CPU_FEATURES.get(cpu, ()))
    for item in filter(None, (f.strip() for f in features.split(","))):
        name = item[1:] if item[0] in "+-" else item
        if item[0] == "-":
            have.discard(name)
        else:
            have.add(name)
    # an implied feature the string turned off takes its dependants with it
    if "avx" not in have:
        have -= {f for f in have if f.startswith("avx") or f in ("fma", "vpclmulqdq")}
    if "avx512f" not in have:
        have -= {f for f in have if f.startswith("avx512")}
    return [f for f in CHECKABLE if f in have]


# ---- checking names against LLVM -------------------------------------------------------------

def check_cpu(triple: str | None, cpu: str | None, features: str | None) -> str:
    """"" when LLVM knows `cpu` and every feature of `features` for the triple, else a one-line
    problem with a hint. LLVM only warns on fd 2 (and ignores the name) when it builds the
    subtarget, so a tiny function is compiled with fd 2 captured."""
    import llvmlite.binding as llvm

    host = llvm.get_process_triple()
    triple_ = triple or host
    probe_features = features or ""
    if is_x86(triple_) and triple_.startswith(("x86_64", "amd64")):
        # an unknown CPU name alone would abort LLVM ("64-bit code requested on a subtarget that
        # doesn't support it"); the probe says 64-bit explicitly
        probe_features = ",".join(filter(None, [probe_features, "+64bit"]))
    out: list[bytes] = []
    try:
        with captured_fd2(out):
            tm = target_machine(triple_, cpu or ("generic" if triple_ != host else None), probe_features or None,
                                0)
            tm.emit_assembly(llvm.parse_assembly("define void @probe() {\n  ret void\n}\n"))
    except RuntimeError as e:
        return f"--triple {triple_}: {e}"
    text = b"".join(out).decode(errors="replace")
    if cpu and "is not a recognized processor" in text:
        known = sorted(CPU_FEATURES) if is_x86(triple_) else []
        close = difflib.get_close_matches(cpu, known, n=3, cutoff=0.5)
        hint = f"; did you mean {' or '.join(close)}?" if close else ""
        names = ", ".join(n for n in ("x86-64-v2", "x86-64-v3", "x86-64-v4", "skylake-avx512", "znver4")
                          if n in known)
        listing = f" (x86-64 CPU names include {names})" if names else ""
        return f"--cpu {cpu}: not a CPU LLVM knows for {triple_}{hint}{listing}"
    bad = [line.split("'")[1] for line in text.splitlines()
           if "is not a recognized feature" in line and line.count("'") >= 2]
    bad = list(dict.fromkeys(b for b in bad if b != "+64bit"))
    if bad:
        return (f"--features: {', '.join(bad)} not a feature LLVM knows for {triple_} "
                "(features look like +avx2,+fma,-avx512f)")
    return ""
