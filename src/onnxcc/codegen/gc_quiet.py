"""`gc_frozen`: a build's long-lived objects kept out of Python's cyclic collector.

A compile makes objects by the million (sympy expressions in the passes, LLVM IR objects in
emission) on top of hundreds of thousands that stay alive through it (the imported modules,
the graph and kernel modules, sympy's caches). Every full collection walks all of them again:
that was 30-45% of emission's `llvm` step. `gc.freeze()` moves the objects alive now into the
collector's permanent generation, which no collection walks; new objects are still collected,
and frozen ones are still freed by reference counting when they die (only frozen *cycles*
wait until the end). The driver enters it around the whole compile and `refreeze`s after each
pass; the CPU backend enters it again around emission and refreezes after each version's LLVM
module and before the worker compile (bert_ts17: the collector's share of a compile 0.77 s ->
0.12 s); the outermost exit unfreezes everything.

It restores the collector's state exactly, also on an exception: it only acts when nothing
was frozen on entry (`gc.get_freeze_count() == 0`), so objects a caller froze itself (a
pre-fork server) stay frozen and are never thawed here, and the thresholds and the enabled
flag are never touched. A process that compiles many models (a Session, a JIT user) frees
each build's objects as before."""

from __future__ import annotations

import gc
import threading

_lock = threading.Lock()  # builds on several threads share the one collector
_owned = 0  # depth of nested gc_frozen blocks inside the one that froze (0: none of ours)


class gc_frozen:
    def __enter__(self):
        global _owned
        with _lock:
            self.counted = bool(_owned) or gc.get_freeze_count() == 0  # a caller's frozen set: hands off
            if self.counted:  # outermost, or nested in ours: freeze what is alive now
                _owned += 1
                gc.freeze()
        return self

    def __exit__(self, *exc):
        global _owned
        with _lock:
            if self.counted:
                _owned -= 1
                if _owned == 0:  # the outermost: everything frozen since goes back
                    gc.unfreeze()
        return False


def refreeze() -> None:
    """Inside a gc_frozen block of ours, freeze what is alive now too (a pass's survivors)."""
    with _lock:
        if _owned:
            gc.freeze()
