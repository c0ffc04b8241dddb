"""Where the Python time of `onnxcc compile MODEL` goes, stage by stage: cProfile per pass and
build step (the `--time-passes` names), the top functions of each by own time and by
cumulative time.

    python benchmarks/profile_stages.py MODEL.onnx [--stage plan-memory --stage llvm] [--top 25]

One profiler per stage, switched at the pass boundaries (an instrument after the verifier,
so each pass's verification counts in its stage as in `--time-passes`) and at the backend's
steps (`llvm`: building the LLVM IR in Python; `codegen` runs in forked workers, which a
profiler in this process does not see). cProfile inflates Python-heavy code two to four
times, unevenly: read the rankings, and time a change with benchmarks/compile_time.py. The
LLVM object cache is off, as in compile_time.py (every kernel compiled).
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import tempfile
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", type=Path)
    ap.add_argument("--stage", action="append", help="a stage to report (default: every one)")
    ap.add_argument("--top", type=int, default=25, help="functions listed per ranking")
    args = ap.parse_args()
    os.environ.setdefault("ONNXCC_OBJECT_CACHE", "0")

    from onnxcc.compiler import compile_model
    from onnxcc.compiler.options import CompileOptions
    from onnxcc.passes import PassContext, TimePasses, VerifyAfterEach
    from onnxcc.passes.base import Instrument

    class StageProfiles(Instrument):
        """A profiler running between two events; at each event the time since the last one is
        filed under the event's stage (a pass's `after`, a step's name) or as `between`."""

        def __init__(self) -> None:
            self.stats: dict[str, list[cProfile.Profile]] = {}
            self._start()

        def _start(self) -> None:
            self.cur = cProfile.Profile()
            self.cur.enable()

        def file(self, stage: str) -> None:
            self.cur.disable()
            self.stats.setdefault(stage, []).append(self.cur)
            self._start()

        def before(self, pass_, module, index) -> None:
            self.file("between")

        def after(self, pass_, module, index, changed) -> None:
            self.file(pass_.name)

        def step(self, name: str, seconds: float) -> None:
            self.file(name)

    prof, timer = StageProfiles(), TimePasses()
    with tempfile.TemporaryDirectory() as out:
        compile_model(args.model, Path(out), CompileOptions(),
                      pass_ctx=PassContext(instruments=[VerifyAfterEach(), timer, prof]))
    prof.cur.disable()
    print(timer.report())
    for stage, runs in prof.stats.items():
        if args.stage and stage not in args.stage:
            continue
        text = io.StringIO()
        st = pstats.Stats(runs[0], stream=text)
        for r in runs[1:]:
            st.add(r)
        text.write(f"\n######## {stage}: {st.total_tt:.2f} s profiled\n")  # type: ignore[attr-defined]
        st.sort_stats("tottime").print_stats(args.top)
        st.sort_stats("cumtime").print_stats(args.top)
        sys.stdout.write(text.getvalue())


if __name__ == "__main__":
    main()
