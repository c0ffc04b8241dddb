"""Whether this machine's C compiler can build the C tests with AddressSanitizer, and whether
LeakSanitizer works here (it needs ptrace, which some sandboxes refuse)."""

from __future__ import annotations

import subprocess
from pathlib import Path

ASAN = ["-fsanitize=address", "-fno-omit-frame-pointer"]


def asan_available() -> bool:
    r = subprocess.run(["cc", *ASAN, "-x", "c", "-", "-o", "/dev/null"], input="int main(void){return 0;}",
                       capture_output=True, text=True)
    return r.returncode == 0


def lsan_works(tmp: Path) -> bool:
    """Probe with a known leak: LeakSanitizer must report it."""
    src = tmp / "probe.c"
    src.write_text("#include <stdlib.h>\nvoid *p;\nint main(void){p = malloc(7); p = 0; return 0;}\n")
    subprocess.run(["cc", *ASAN, "-o", str(tmp / "probe"), str(src)], check=True)
    r = subprocess.run([str(tmp / "probe")], capture_output=True, text=True,
                       env={"ASAN_OPTIONS": "detect_leaks=1", "PATH": "/usr/bin:/bin"})
    return "detected memory leaks" in r.stderr
