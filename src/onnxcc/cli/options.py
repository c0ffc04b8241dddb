"""Compile flags shared by `onnxcc compile`, `run` and `simulate`, parsed into CompileOptions."""

from __future__ import annotations

import functools
import inspect
from pathlib import Path

import click

from ..compiler.options import TARGETS
from ..errors import OnnxccError


def parse_structure_specs(items) -> dict[str, str]:
    """("x=seq:3", "o=none") -> {"x": "seq:3", "o": "none"}, each spec checked."""
    from ..io_structure import parse_spec

    out = {}
    for item in items:
        name, sep, spec = item.partition("=")
        if not sep or not name.strip():
            raise OnnxccError(f"--input-structure {item!r}: expected INPUT=SPEC (x=seq:3, o=none)")
        parse_spec(spec, name.strip())
        out[name.strip()] = spec.strip()
    return out


def parse_loop_capacity(text: str) -> tuple[int, int]:
    """"16" or "16:4096" -> (initial, limit), both positive, initial <= limit."""
    first, _, last = text.partition(":")
    try:
        initial = int(first)
        limit = int(last) if last else max(initial, 1 << 24)
    except ValueError:
        raise click.UsageError(f"--loop-capacity {text!r}: expected INITIAL or INITIAL:LIMIT (16:65536)") from None
    if not 1 <= initial <= limit:
        raise click.UsageError(f"--loop-capacity {text!r}: need 1 <= INITIAL <= LIMIT")
    return initial, limit


def compile_flags(fn):
    """Decorate a command with the compile flags; it receives `options` (CompileOptions)."""

    @click.option("--name", help="artifact name (C identifier; default: the model file's stem)")
    @click.option("--dim", "dims", multiple=True, metavar="SYM=LO:HI", help="narrow a symbol's range; repeatable")
    @click.option("--specialize", "specs", multiple=True, metavar="SYM=V[,V...]",
                  help="add exact versions with SYM fixed to each value; repeatable")
    @click.option("--specialize-value", "value_specs", multiple=True, metavar="INPUT=V[,V...][;V,...]",
                  help="add a version compiled for this value of a small input (a scalar or 1-D: "
                       "shape=2,3,4); `;` separates values (shape=2,3,4;4,6,1 or sr=16000;shape=2,3,4); "
                       "repeatable; several inputs combine")
    @click.option("--value-symbols", is_flag=True,
                  help="bind the elements of size-only int64 inputs (Reshape's shape, ConstantOfShape's, "
                       "Tile's repeats) to symbols read from their data at each call: one generic version")
    @click.option("--input-structure", "structure_specs", multiple=True, metavar="INPUT=SPEC",
                  help="the structure of a sequence / optional input: x=seq:3 (ranks where the model gives "
                       "none: x=seq:2:ranks=1,1), o=none, o=some, o=some:seq:2; repeatable")
    @click.option("--loop-capacity", "loop_capacity", default=None, metavar="INITIAL[:LIMIT]",
                  help="a while loop's grown state with no bound: the rows its buffers start with beyond "
                       "the initial extent (default 16), doubled per call up to LIMIT (default 2**24)")
    @click.option("--no-specialize-one", is_flag=True, help="no `SYM == 1` versions for broadcast symbols")
    @click.option("--divisible", type=click.IntRange(min=0), default=None, metavar="K",
                  help="divisibility versions SYM % K == 0 (default: the target's vector width; 0 or 1: none)")
    @click.option("--max-versions", type=click.IntRange(min=1), default=8, show_default=True,
                  help="bound on versions (generic included)")
    @click.option("--bucket", "bucket_specs", multiple=True, metavar="SYM=B1,B2,...|SYM=auto",
                  help="bucket versions: pad SYM up to the next bound (exact masks); auto: chosen from --trace")
    @click.option("--trace", type=click.Path(dir_okay=False, path_type=Path), default=None,
                  help="observed values of the bucketed symbol: one per line, or VALUE,COUNT")
    @click.option("--max-buckets", type=click.IntRange(min=1), default=4, show_default=True,
                  help="bucket count for --bucket SYM=auto")
    @click.option("--target", type=click.Choice(TARGETS), default="cpu", show_default=True)
    @click.option("--cuda-arch", default="sm_80", show_default=True, metavar="sm_XY",
                  help="target cuda: the PTX target (the GPU's compute capability must be at least this)")
    @click.option("--triple", default=None, help="LLVM target triple (default: the host)")
    @click.option("--cpu", "cpu_name", default=None, help="LLVM CPU name (default: the host's)")
    @click.option("--features", default=None, help="LLVM target features (default: the host's)")
    @click.option("--cpu-versions", "cpu_versions", default=None, metavar="CPU,CPU,...",
                  help="build the versions once per LLVM CPU (e.g. x86-64-v3,znver4) into one library; "
                       "the dispatcher picks by the running CPU")
    @click.option("--cc", "cc", default=None, metavar="CC",
                  help="C compiler (and flags) for the dispatcher and the link (default: $CC, else cc)")
    @click.option("--no-parallel", is_flag=True, help="emit single-threaded kernels")
    @click.option("--no-fuse", is_flag=True, help="no kernel-level fusion (one compute per lowered op)")
    @click.option("-O", "opt", type=click.IntRange(0, 3), default=3, show_default=True, help="LLVM optimisation level")
    @functools.wraps(fn)
    def wrapper(*args, name, dims, specs, value_specs, value_symbols, structure_specs, no_specialize_one, divisible,
                max_versions, target, cuda_arch, triple, cpu_name, cpu_versions, cc, features, no_parallel, no_fuse,
                opt, bucket_specs, trace, max_buckets, loop_capacity, **kwargs):
        from ..compiler import CompileOptions

        options = CompileOptions(name=name, dims=parse_dims(dims), specialize=parse_specs(specs),
                                 specialize_one=not no_specialize_one, divisible=divisible,
                                 max_versions=max_versions, target=target, cuda_arch=cuda_arch, triple=triple,
                                 cpu=cpu_name,
                                 features=features, opt=opt, parallel=not no_parallel, fuse=not no_fuse,
                                 specialize_value=parse_value_specs(value_specs), value_symbols=value_symbols,
                                 input_structure=parse_structure_specs(structure_specs))
        if loop_capacity is not None:
            options.loop_capacity = parse_loop_capacity(loop_capacity)
        if cc is not None:
            if not cc.strip():
                raise click.UsageError("--cc: expected a C compiler, e.g. --cc gcc or --cc 'clang -O2'")
            options.cc = cc
        levels = [c.strip() for c in (cpu_versions or "").split(",") if c.strip()]
        if cpu_versions is not None and not levels:
            raise click.UsageError("--cpu-versions: expected CPU names, e.g. x86-64-v3,x86-64-v4")
        options.cpu_versions = levels
        if triple or cpu_name or features or levels:  # (only then: `run DIR` needs no LLVM)
            from ..codegen.backend import backend_class

            check = getattr(backend_class(target), "check_options", None)
            problem = check(options) if check is not None else ""
            if problem:  # a usage error (exit 2), before LLVM ignores the name or aborts
                raise click.UsageError(problem)
        buckets, auto = parse_buckets(bucket_specs)
        check_within_dims(options.dims, options.specialize, "--specialize")
        check_within_dims(options.dims, buckets, "--bucket")
        choices = []
        if auto and "model" in kwargs:
            from ..simulate import auto_buckets

            if trace is None:
                raise OnnxccError(f"--bucket {auto[0]}=auto needs --trace FILE (observed values of {auto[0]})")
            for symbol in auto:
                choice = auto_buckets(kwargs["model"], options, symbol, trace, max_buckets)
                click.echo(choice.report(), err=True)
                buckets[symbol] = choice.buckets
                choices.append(choice)
        options.buckets = buckets
        wanted = inspect.signature(fn).parameters
        extra = {"trace": trace, "max_buckets": max_buckets, "bucket_choices": choices, "auto_buckets": auto}
        kwargs.update({k: v for k, v in extra.items() if k in wanted})
        return fn(*args, options=options, **kwargs)

    return wrapper


def parse_dims(items) -> dict[str, tuple[int, int]]:
    out = {}
    for item in items:
        name, sep, rng = item.partition("=")
        lo, sep2, hi = rng.partition(":")
        try:
            if not (sep and sep2):
                raise ValueError
            lo_, hi_ = int(lo), int(hi)
            if not name.strip() or not 0 <= lo_ <= hi_:
                raise ValueError
            out[name.strip()] = (lo_, hi_)
        except ValueError:
            raise OnnxccError(f"--dim {item!r}: expected SYM=LO:HI with 0 <= LO <= HI, e.g. seq=1:2048") from None
    return out


def parse_specs(items) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for item in items:
        name, sep, vals = item.partition("=")
        try:
            if not sep:
                raise ValueError
            nums = [int(v) for v in vals.split(",")]
            if not name.strip() or any(n < 0 for n in nums):
                raise ValueError
            out.setdefault(name.strip(), []).extend(nums)
        except ValueError:
            raise OnnxccError(f"--specialize {item!r}: expected SYM=V[,V...] (V >= 0), e.g. batch=1") from None
    # a value given twice is one version, not two identical ones
    return {k: sorted(set(v)) for k, v in out.items()}


def parse_value_specs(items) -> dict[str, list[list]]:
    """['shape=2,3,4;4,6,1', 'sr=16000'] -> {'shape': [[2, 3, 4], [4, 6, 1]], 'sr': [[16000]]}.

    Each `;`-separated piece is `INPUT=V,V,...` or, without `=`, one more value of the input
    named before it; `INPUT=` (or `INPUT=[]`) is the empty value; brackets are optional."""
    out: dict[str, list[list]] = {}
    for item in items:
        name = None
        for piece in item.split(";"):
            piece = piece.strip()
            if not piece:
                continue
            if "=" in piece:
                name, _, vals = piece.partition("=")
                name = name.strip()
            else:
                vals = piece
            try:
                if not name:
                    raise ValueError
                body = vals.strip().removeprefix("[").removesuffix("]")
                value = [_number(v) for v in body.split(",")] if body.strip() else []
            except ValueError:
                raise OnnxccError(f"--specialize-value {item!r}: expected INPUT=V[,V...] with numbers "
                                  "(e.g. shape=2,3,4 or sr=16000; `;` between values)") from None
            if value not in out.setdefault(name, []):
                out[name].append(value)
    return out


def _number(text: str):
    t = text.strip()
    if t.lower() in ("true", "false"):
        return int(t.lower() == "true")
    try:
        return int(t)
    except ValueError:
        return float(t)


def check_within_dims(dims: dict[str, tuple[int, int]], values: dict[str, list[int]], flag: str) -> None:
    """Values for a symbol whose range --dim narrowed must lie inside it (a version outside the
    range could never run)."""
    from ..ir import INT_MAX

    for name, vals in values.items():
        lo, hi = dims.get(name, (1, INT_MAX))
        bad = [v for v in vals if not lo <= v <= hi]
        if bad:
            where = f"--dim {name}={lo}:{hi}" if name in dims else f"the range of a dim, [1, {hi}]"
            raise OnnxccError(f"{flag} {name}={','.join(map(str, bad[:5]))}: outside {where}")


def parse_buckets(items) -> tuple[dict[str, list[int]], list[str]]:
    """['seq=16,64', 'batch=auto'] -> ({'seq': [16, 64]}, ['batch'])."""
    out: dict[str, list[int]] = {}
    auto: list[str] = []
    for item in items:
        name, sep, vals = item.partition("=")
        name = name.strip()
        if sep and vals.strip() == "auto":
            auto.append(name)
            continue
        try:
            nums = [int(v) for v in vals.split(",")] if sep and name else []
            if not nums or any(n < 1 for n in nums):
                raise ValueError
        except ValueError:
            raise OnnxccError(f"--bucket {item!r}: expected SYM=B1,B2,... (positive) or SYM=auto, "
                              "e.g. seq=64,128,512") from None
        out.setdefault(name, []).extend(nums)
    return {k: sorted(set(v)) for k, v in out.items()}, auto


def parse_assignments(text: str, flag: str) -> dict[str, int]:
    """'batch=2,seq=7' -> {'batch': 2, 'seq': 7}."""
    out = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        k, sep, v = item.partition("=")
        try:
            if not sep:
                raise ValueError
            out[k.strip()] = int(v)
        except ValueError:
            raise OnnxccError(f"{flag} {item!r}: expected SYM=INT") from None
    return out
