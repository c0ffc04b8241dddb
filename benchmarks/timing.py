"""Side-by-side timing of runtimes in one process: alternating rounds, medians."""

from __future__ import annotations

import statistics
import time

ROUNDS = 6
"""the two runtimes alternate in this many rounds of calls each"""
PAUSE_S = 0.15
"""idle time before each round. Both runtimes' worker threads spin a while after a call
(onnxcc's 100 us; onnxruntime's measured between 20 and 100 ms), and with as many threads as
cores one runtime's spinning worker steals a core from the other's measured calls: calling
them turn by turn measured the transformer 2x slower than it runs alone."""
WARM_S = 0.025
"""untimed calls at the start of each round, for at least this long (3 calls at least): after
an idle spell the scheduler needs a few milliseconds to spread a runtime's threads over the
cores again (measured on both runtimes: up to 1.5x slower calls for ~5 ms)"""


def bench_pair(fn_a, fn_b, repeats: int, budget_s: float = 2.0, clock=time.perf_counter) -> tuple[float, float]:
    """Median seconds per call of a and b, each measured in its own steady state (`bench_many`)."""
    ta, tb = bench_many([fn_a, fn_b], repeats, budget_s, clock)
    return ta, tb


def bench_many(fns, repeats: int, budget_s: float = 2.0, clock=time.perf_counter) -> list[float]:
    """Median seconds per call of each function, each measured in its own steady state.

    The functions take turns in ROUNDS rounds; a round is a pause, untimed warm-up calls
    (WARM_S) and repeats/ROUNDS timed calls. Alternating rounds instead of single calls measures
    each runtime without the others' threads spinning beside it, and still keeps the comparison
    fair when the machine's load drifts. `clock` times each call (`time.process_time` gives CPU
    seconds, for single-threaded rows on a loaded machine)."""
    per_round = max(1, -(-repeats // ROUNDS))
    times: list[list[float]] = [[] for _ in fns]
    deadline = time.perf_counter() + budget_s
    for r in range(ROUNDS):
        for fn, out in zip(fns, times):
            time.sleep(PAUSE_S)
            warm_until = time.perf_counter() + WARM_S
            for i in range(1000):
                fn()
                if i >= 2 and time.perf_counter() > warm_until:
                    break
            for _ in range(per_round):
                t0 = clock()
                fn()
                out.append(clock() - t0)
        if r >= 1 and time.perf_counter() > deadline:
            break
    return [statistics.median(t) for t in times]
