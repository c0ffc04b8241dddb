"""Pass infrastructure: ModulePass, the registry, pipelines as text, and instruments.

Passes transform; the runner observes. Printing, timing, verifying and dumping are
instruments (`before`, `after`, `failed` hooks) chosen by the caller or the CLI flags.

One pipeline runs graph passes and kernel passes alike: a pass with `converts = True`
(lower-to-kernel) returns the module the passes after it see (the graph `Module` becomes
a `KernelModule`). Instruments only ask a module to print (`str`) and to verify, so they
cover both IRs; build steps that are not passes (the backend's emit, the link) report
their time through `Instrument.step`.
"""

from __future__ import annotations

import dataclasses
import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from ..errors import CompileError, OnnxccError, PassError
from ..ir import Module

PASSES: dict[str, type[ModulePass]] = {}

SymValues = tuple[tuple[str, tuple[int, ...]], ...]
"""A pass option giving integer values per symbol: `(("seq", (64, 128)), ("batch", (4,)))`;
in a textual pipeline `seq:64:128|batch:4`."""


def sym_values(table: dict[str, list[int]]) -> SymValues:
    """`{"seq": [64, 128]}` -> `(("seq", (64, 128)),)`."""
    return tuple((name, tuple(vals)) for name, vals in table.items())


def parse_sym_values(text: str, what: str) -> SymValues:
    """The textual spelling `seq:64:128|batch:4` of a `SymValues` option (`what` names the
    pass and option in errors)."""
    out: dict[str, list[int]] = {}
    for group in filter(None, (g.strip() for g in text.split("|"))):
        name, *vals = group.split(":")
        if not vals:
            raise OnnxccError(f"{what}: expected SYM:VALUE[:VALUE...] in {group!r}")
        try:
            out.setdefault(name.strip(), []).extend(int(v) for v in vals)
        except ValueError:
            raise OnnxccError(f"{what}: values must be integers in {group!r}") from None
    return sym_values(out)


@dataclass(frozen=True)
class ModulePass:
    """A pass: `run(module, ctx)` transforms in place and returns whether anything changed.

    A pass may assume verified input and must leave verified IR. Options are dataclass
    fields, written on the command line as `name{opt-a=1,opt-b=x}`. A typed option whose
    text is not a plain bool / int / float / str names its parser in the field's metadata
    (`field(default=(), metadata={"parse": parse_exact})`): the text is parsed once, here.
    """

    name: ClassVar[str] = ""
    #: True for a conversion pass: `run` returns the new module instead of `changed`
    converts: ClassVar[bool] = False
    #: True for a pass that only attaches results to the module (a memory plan) and leaves
    #: the IR the verifier checks as it was: `VerifyAfterEach` does not verify it again
    keeps_ir: ClassVar[bool] = False

    def run(self, module: Module, ctx: PassContext) -> bool:
        raise NotImplementedError


def register_pass(cls):
    PASSES[cls.name] = cls
    return cls


class Instrument:
    def before(self, pass_: ModulePass, module: Module, index: int) -> None: ...
    def after(self, pass_: ModulePass, module: Module, index: int, changed: bool) -> None: ...
    def failed(self, pass_: ModulePass, module: Module, index: int, error: BaseException) -> None: ...
    def step(self, name: str, seconds: float) -> None:
        """A build step outside the pass list (import, backend emit, link) took `seconds`."""


@dataclass
class PassContext:
    instruments: list[Instrument] = field(default_factory=list)
    #: free-form options shared by passes (e.g. target vector width)
    options: dict = field(default_factory=dict)


def get_pass(spec: str) -> ModulePass:
    """'name' or 'name{opt-a=1,opt-b=foo}' -> a pass instance."""
    m = re.fullmatch(r"\s*([A-Za-z0-9_\-]+)\s*(?:\{(.*)\})?\s*", spec)
    if not m:
        raise OnnxccError(f"malformed pass spec {spec!r}")
    name, opts = m.group(1), m.group(2)
    _ensure_loaded()
    if name not in PASSES:
        raise OnnxccError(f"unknown pass {name!r} (known: {', '.join(sorted(PASSES))})")
    cls = PASSES[name]
    kwargs = {}
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for item in filter(None, (s.strip() for s in (opts or "").split(","))):
        k, _, v = item.partition("=")
        key = k.strip().replace("-", "_")
        if key not in fields:
            raise OnnxccError(f"pass {name!r} has no option {k.strip()!r}")
        parse = fields[key].metadata.get("parse")
        if parse is not None:
            kwargs[key] = parse(v.strip())
            continue
        try:
            kwargs[key] = _convert(v.strip(), fields[key].type)
        except ValueError:
            raise OnnxccError(f"pass {name!r} option {k.strip()!r}: expected {fields[key].type}, "
                              f"got {v.strip()!r}") from None
    return cls(**kwargs)


def _convert(v: str, ty):
    t = str(ty)
    if "bool" in t:
        return v.lower() in ("1", "true", "yes", "on", "")
    if "int" in t:
        return int(v)
    if "float" in t:
        return float(v)
    return v


def parse_pipeline(text: str) -> list[ModulePass]:
    """Split 'a,b{x=1,y=2},c' at top-level commas."""
    parts, depth, cur = [], 0, ""
    for ch in text:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        if ch == "," and depth == 0:
            parts.append(cur)
            cur = ""
        else:
            cur += ch
    parts.append(cur)
    return [get_pass(p) for p in parts if p.strip()]


def run_pipeline(module, pipeline, ctx: PassContext | None = None):
    """Run the passes in order with ctx's instruments; returns the final module (a different
    object than `module` once a converting pass ran)."""
    ctx = ctx or PassContext()
    passes = parse_pipeline(pipeline) if isinstance(pipeline, str) else list(pipeline)
    done: list[str] = []
    for i, p in enumerate(passes):
        for ins in ctx.instruments:
            ins.before(p, module, i)
        try:
            changed = p.run(module, ctx)
            if getattr(p, "converts", False):
                module, changed = changed, True
        except BaseException as e:
            for ins in ctx.instruments:
                ins.failed(p, module, i, e)
            if isinstance(e, PassError):
                raise
            if isinstance(e, OnnxccError) and getattr(e, "exit_code", 1) == 3:
                raise  # unsupported op: keep its exit code and message
            if isinstance(e, CompileError):
                raise  # a refusal to compile (names its node and what to do): the user's message as is
            raise PassError(p.name, done, e) from e
        try:
            for ins in ctx.instruments:
                ins.after(p, module, i, bool(changed))
        except PassError as e:  # e.g. VerifyAfterEach: name the passes that ran before
            raise PassError(e.pass_name, done, e.cause) from e
        done.append(p.name)
    return module


# ---- instruments ---------------------------------------------------------------------------

def dump_header(pass_name: str) -> str:
    return f"// -----// IR Dump After {pass_name} //----- //"


class VerifyAfterEach(Instrument):
    def after(self, pass_, module, index, changed):
        from ..ir.verify import verify

        if getattr(pass_, "keeps_ir", False):
            return  # verified after the pass before it (a detection net's verify: 0.5 s)
        try:
            if isinstance(module, Module):
                verify(module)
            else:  # the kernel module verifies its programs
                module.verify()
        except OnnxccError as e:
            raise PassError(pass_.name, [], OnnxccError(f"IR invalid after pass: {e}")) from e


class PrintAfter(Instrument):
    """Print the IR after the named passes (all when `names` is None) to `stream`."""

    def __init__(self, names: set[str] | None = None, stream=None, only_changed: bool = False):
        self.names, self.stream, self.only_changed = names, stream, only_changed

    def after(self, pass_, module, index, changed):
        if self.names is not None and pass_.name not in self.names:
            return
        if self.only_changed and not changed:
            return
        out = self.stream or sys.stderr
        out.write(dump_header(pass_.name) + "\n" + str(module) + "\n")


class DumpDir(Instrument):
    """Write one numbered file per pass: DIR/003_canonicalize.onnxir, DIR/009_fuse.kir.

    The number counts every pass this instrument saw, so it runs on across pipelines and
    IRs (graph dumps are .onnxir and parse back; kernel dumps are .kir)."""

    def __init__(self, directory):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.count = 0

    def after(self, pass_, module, index, changed):
        suffix = getattr(module, "dump_suffix", ".onnxir")
        path = self.dir / f"{self.count:03d}_{pass_.name}{suffix}"
        self.count += 1
        path.write_text(dump_header(pass_.name) + "\n" + str(module))


class TimePasses(Instrument):
    def __init__(self, stream=None):
        self.stream = stream
        self.times: list[tuple[str, float]] = []
        self._t0 = 0.0

    def before(self, pass_, module, index):
        self._t0 = time.perf_counter()

    def after(self, pass_, module, index, changed):
        self.times.append((pass_.name, time.perf_counter() - self._t0))

    def step(self, name, seconds):
        self.times.append((name, seconds))

    def report(self) -> str:
        total = sum(t for _, t in self.times) or 1e-12
        lines = ["===-- pass execution timing --===", f"  total: {total * 1e3:.2f} ms"]
        for name, t in self.times:
            lines.append(f"  {t * 1e3:9.2f} ms  {100 * t / total:5.1f}%  {name}")
        return "\n".join(lines)


def _ensure_loaded() -> None:
    from . import registry_all  # noqa: F401  (imports every pass module)
