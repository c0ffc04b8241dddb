"""The JIT session: serve every call at once, specialise hot shapes in the background.

    s = onnxcc.Session("models/transformer.onnx", threshold=4)
    y = s.run({"x": x})          # served by the best compiled version available now

A session starts from one artifact (generic + the versions the compile options ask for),
built through the on-disk cache. Each call binds the symbols from the input shapes. Calls
that land on the generic version are counted per shape class (the symbols' values); when
a class reaches `threshold` calls, an artifact specialised to it is compiled in a
background thread while calls keep being served by the generic version, and later calls
of that class switch to it. Every artifact goes through the cache, keyed by the model's
content, onnxcc's version, the target and every flag, plus the specialisation's guard.

A model whose shapes depend on some inputs' values (a Reshape target, Slice starts read
from an input) has no generic version: the session then builds, on the first call with each
new value of those inputs, an artifact with a value version for it (synchronously: nothing
else could serve the call), at most `max_specializations` of them.

`ONNXCC_LOG=recompiles` logs every miss: the shape, the version that served it, and the
guards that failed.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from .compiler import CompileOptions, compile_cached
from .compiler.value_versions import ValueDependentError, values_flag, with_values
from .errors import OnnxccError
from .runtime import load
from .runtime.cache import ArtifactCache


@dataclass
class SessionStats:
    calls: int = 0
    #: calls served by a specialised version (a guard other than the generic one held)
    hits: int = 0
    #: calls served by the generic version
    misses: int = 0
    #: artifacts built by this session (cache misses), and artifacts found in the cache
    compiles: int = 0
    cache_hits: int = 0
    compile_seconds: float = 0.0
    run_seconds: float = 0.0
    #: shape classes specialised, in order
    specialized: list = field(default_factory=list)


def _log_enabled(what: str) -> bool:
    return what in os.environ.get("ONNXCC_LOG", "").split(",")


class Session:
    def __init__(self, model, *, cache: ArtifactCache | str | None = None, threshold: int = 8,
                 max_specializations: int = 16, background: bool = True, **compile_options):
        if isinstance(model, str):
            model = Path(model)
        self.model = model
        self.options = CompileOptions(**compile_options)
        self.cache = cache if isinstance(cache, ArtifactCache) else ArtifactCache(cache)
        self.threshold = threshold
        self.max_specializations = max_specializations
        self.stats = SessionStats()
        self._lock = threading.Lock()
        self._counts: dict[tuple, int] = {}
        #: shape classes whose specialised build failed -> why (not retried; the generic version serves them)
        self.failed: dict[tuple, str] = {}
        self._logged: set[tuple] = set()  # shape classes whose miss was logged
        self._special: dict[tuple, object] = {}    # shape class -> CompiledModel
        self._pending: set[tuple] = set()  # shape classes being compiled
        self._pool = ThreadPoolExecutor(max_workers=1) if background else None
        #: value-dependent shapes: the inputs whose values pick the artifact, and those artifacts
        self.value_inputs: list[str] = []
        self._by_value: dict[tuple, object] = {}
        try:
            self.base = self._build(self.options, None)
        except ValueDependentError as e:  # no generic version: one artifact per value, on demand
            self.base, self.value_inputs, self._input_names = None, e.inputs, e.all_inputs
            return
        self._input_names = [t["name"] for t in self.base.inputs]
        self._bare = [self._bare_symbols(t["shape"]) for t in self.base.inputs]
        self._symbol_names = [s["name"] for s in self.base.meta["symbols"]]
        #: shape class per tuple of input shapes (a class is a function of the shapes alone)
        self._class_of: dict[tuple, tuple] = {}

    # ---- building ----------------------------------------------------------------------------
    def _build(self, options: CompileOptions, guard: str | None):
        t0 = time.perf_counter()
        path, hit = compile_cached(self.model, options, self.cache, extra={"guard": guard} if guard else None)
        with self._lock:
            if hit:
                self.stats.cache_hits += 1
            else:
                self.stats.compiles += 1
                self.stats.compile_seconds += time.perf_counter() - t0
        return load(path)

    @staticmethod
    def _bare_symbols(shape) -> list[str | None]:
        return [d if isinstance(d, str) and d.isidentifier() else None for d in shape]

    def shape_class(self, arrays: list[np.ndarray]) -> tuple:
        env: dict[str, int] = {}
        for a, names in zip(arrays, self._bare):
            for n, v in zip(names, np.shape(a)):
                if n is not None:
                    env.setdefault(n, int(v))
        return tuple((n, env[n]) for n in self._symbol_names if n in env)

    def _class_memo(self, arrays: list) -> tuple:
        """shape_class, remembered per tuple of shapes where every input is an ndarray (others,
        lists and DLPack tensors, are read afresh)."""
        if all(type(a) is np.ndarray for a in arrays):
            shapes = tuple([a.shape for a in arrays])
            key = self._class_of.get(shapes)
            if key is None:
                if len(self._class_of) >= 1024:  # a bound against a sweep over endless shapes
                    self._class_of.clear()
                key = self._class_of[shapes] = self.shape_class(arrays)
            return key
        return self.shape_class(arrays)

    def _specialize(self, key: tuple):
        spec = dict(self.options.specialize)
        for n, v in key:
            spec[n] = sorted(set(spec.get(n, [])) | {v})
        opts = replace(self.options, specialize=spec)
        guard = " & ".join(f"{n} == {v}" for n, v in key)
        try:
            compiled = self._build(opts, guard)
        except Exception as e:  # a failed build must not leave its class pending (or lost in a pool)
            msg = str(e) if isinstance(e, OnnxccError) else f"{type(e).__name__}: {e}"
            with self._lock:
                self._pending.discard(key)
                self.failed[key] = msg
            sys.stderr.write(f"onnxcc: specialising {guard} failed; the generic version keeps serving it: {msg}\n")
            return None
        with self._lock:
            self._special[key] = compiled
            self._pending.discard(key)
            self.stats.specialized.append(dict(key))
        return compiled

    # ---- serving -----------------------------------------------------------------------------
    def _value_model(self, arrays: list):
        """The artifact whose value versions serve these inputs' values (built on a miss)."""
        feeds = dict(zip(self._input_names, arrays))
        key = tuple((n, np.asarray(feeds[n]).dtype.str, np.asarray(feeds[n]).tobytes()) for n in self.value_inputs)
        with self._lock:
            model = self._by_value.get(key)
        if model is not None:
            with self._lock:
                self.stats.hits += 1
            return model
        if len(self._by_value) >= self.max_specializations:
            raise OnnxccError(f"the shapes depend on the value of {', '.join(self.value_inputs)} and this session "
                              f"already built {len(self._by_value)} value versions (max_specializations)")
        opts = with_values(self.options, self.value_inputs, feeds)
        if _log_enabled("recompiles"):
            sys.stderr.write(f"onnxcc: specialising on the value of {', '.join(self.value_inputs)} "
                             f"({values_flag(opts, self.value_inputs)})\n")
        model = self._build(opts, None)
        with self._lock:
            self._by_value[key] = model
            self.stats.misses += 1
            self.stats.specialized.append({n: opts.specialize_value[n][-1] for n in self.value_inputs})
        return model

    def run(self, inputs) -> dict[str, np.ndarray]:
        if self.base is not None and getattr(self.base, "structure", None) is not None:
            # sequences / optionals (lists, None): the build is specialised on their structure
            # (input_structure=...); the loader checks it, and no shape class is specialised
            t0 = time.perf_counter()
            out = self.base.run(inputs)
            with self._lock:
                self.stats.calls += 1
                self.stats.run_seconds += time.perf_counter() - t0
            return out
        names = self._input_names
        arrays = [inputs[n] for n in names] if isinstance(inputs, dict) else list(inputs)
        if len(arrays) != len(names):
            raise OnnxccError(f"expected {len(names)} inputs ({', '.join(names)}), got {len(arrays)}")
        if self.base is None:
            model = self._value_model(arrays)
            t0 = time.perf_counter()
            out = model.run(arrays)
            with self._lock:
                self.stats.calls += 1
                self.stats.run_seconds += time.perf_counter() - t0
            return out
        key = self._class_memo(arrays)
        with self._lock:
            model = self._special.get(key, self.base)
        t0 = time.perf_counter()
        out = model.run(arrays)
        v = model.last_version
        dt = time.perf_counter() - t0
        generic = v == model.num_versions - 1
        with self._lock:
            self.stats.calls += 1
            self.stats.run_seconds += dt
            if generic:
                self.stats.misses += 1
            else:
                self.stats.hits += 1
        if generic:
            self._on_miss(key, model, arrays)
        return out

    def _on_miss(self, key: tuple, model, arrays) -> None:
        with self._lock:  # the log says a shape class's miss once, not on every call
            first = key not in self._logged
            self._logged.add(key)
        if first and _log_enabled("recompiles"):
            failed = "; ".join(f"{model.version_info(i)}" for i in range(model.num_versions - 1)) or "none"
            shapes = ", ".join(f"{t['name']}{list(np.shape(a))}" for t, a in zip(model.inputs, arrays))
            sys.stderr.write(f"onnxcc: miss: {shapes} ({', '.join(f'{n}={v}' for n, v in key)}) served by the "
                             f"generic version; guards that failed: {failed}\n")
        if not key:
            return
        with self._lock:
            n = self._counts.get(key, 0) + 1
            self._counts[key] = n
            start = (n >= self.threshold and key not in self._special and key not in self._pending
                     and key not in self.failed
                     and len(self._special) + len(self._pending) < self.max_specializations)
            if start:
                self._pending.add(key)
        if not start:
            return
        if _log_enabled("recompiles"):
            sys.stderr.write(f"onnxcc: specialising {', '.join(f'{n}={v}' for n, v in key)} after {n} calls\n")
        if self._pool is not None:
            self._pool.submit(self._specialize, key)
        else:
            self._specialize(key)

    def wait(self) -> None:
        """Block until every background compile has finished (tests, benchmarks)."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = ThreadPoolExecutor(max_workers=1)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
