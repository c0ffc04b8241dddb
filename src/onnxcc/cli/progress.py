"""`onnxcc compile`'s progress on a terminal: each pass and build step as it finishes, with the
versions once they are known, on one line rewritten in place (stderr). Nothing when stderr is
not a terminal (logs, pipes, CI) or with --quiet."""

from __future__ import annotations

import sys
import time

from ..passes import Instrument


class Progress(Instrument):
    def __init__(self, stream=None):
        self.stream = stream or sys.stderr
        self.t0 = time.perf_counter()
        self.done = 0
        self.versions = 0
        self._width = 0

    @staticmethod
    def wanted(quiet: bool, stream=None) -> bool:
        s = stream or sys.stderr
        return not quiet and bool(getattr(s, "isatty", lambda: False)())

    def _show(self, text: str) -> None:
        line = f"[{time.perf_counter() - self.t0:5.1f}s] {text}"
        self.stream.write("\r" + line.ljust(self._width))
        self.stream.flush()
        self._width = len(line)

    def before(self, pass_, module, index) -> None:
        self._show(f"{self._versions()}{pass_.name} ...")

    def after(self, pass_, module, index, changed) -> None:
        self.done += 1
        versions = getattr(module, "versions", None)
        if isinstance(versions, list):
            self.versions = len(versions)
        else:
            dispatch = getattr(module, "dispatch", None)
            if isinstance(dispatch, dict) and dispatch.get("main"):
                self.versions = len(dispatch["main"])
        self._show(f"{self._versions()}{pass_.name} done ({self.done} passes)")

    def step(self, name: str, seconds: float) -> None:
        self._show(f"{self._versions()}{name} done in {seconds:.1f}s")

    def _versions(self) -> str:
        return f"{self.versions} version{'s' if self.versions != 1 else ''}: " if self.versions else ""

    def finish(self) -> None:
        if self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()
