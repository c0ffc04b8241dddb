"""CompileOptions: every flag that changes what gets built, and the `--emit` stop points."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field

from ..codegen.backend import BACKENDS
from ..errors import OnnxccError

#: the stop points of the pipeline (after the graph and version passes, after the kernel
#: passes), then every backend's own (in their order; `lib`, the whole artifact, last)
PIPELINE_STAGES = ("ir", "kernel")
EMIT_STAGES = ("ir", "kernel", "llvm", "asm", "ptx", "lib")
TARGETS = tuple(BACKENDS)


@dataclass
class CompileOptions:
    """Every flag that changes what gets built (all of it goes into the cache key)."""

    name: str | None = None
    #: narrowed symbol ranges: {"seq": (1, 2048)}
    dims: dict[str, tuple[int, int]] = field(default_factory=dict)
    #: exact versions: {"batch": [1], "seq": [128, 512]}
    specialize: dict[str, list[int]] = field(default_factory=dict)
    #: the 0/1 rule (a symbol meeting a broadcast gets its own `== 1` version)
    specialize_one: bool = True
    #: divisibility versions `SYM % k == 0`; None picks k from the target's vector width
    divisible: int | None = None
    max_versions: int = 8
    target: str = "cpu"
    #: target cuda: the PTX target (the device's compute capability must be at least this)
    cuda_arch: str = "sm_80"
    triple: str | None = None
    cpu: str | None = None
    features: str | None = None
    opt: int = 3
    parallel: bool = True
    #: the C compiler (and flags) that builds the dispatcher and links the library: $CC, else cc
    cc: str = field(default_factory=lambda: os.environ.get("CC") or "cc")
    #: kernel-level fusion (kernel/fuse.py); False keeps one compute per lowered op
    fuse: bool = True
    #: bucket versions (pad up to the next bound, exact masks): {"seq": [64, 128, 512]}
    buckets: dict[str, list[int]] = field(default_factory=dict)
    #: multi-ISA: the versions are built once per LLVM CPU listed (e.g. x86-64-v3, znver4) into one
    #: library; the dispatcher picks by the running CPU's features (compiler/multi_isa.py)
    cpu_versions: list[str] = field(default_factory=list)
    #: value versions: input name -> the values (each a flat list of numbers) a version is
    #: compiled for, the input folded to that constant: {"shape": [[2, 3, 4]], "sr": [[16000]]};
    #: several inputs combine (one version per combination). `{"sr": 16000}`, `{"shape": [2, 3, 4]}`
    #: or a numpy array are one value each (normalized on construction)
    specialize_value: dict[str, list[list]] = field(default_factory=dict)
    #: bind the elements of size-only 1-D int64 inputs (Reshape's shape, ConstantOfShape's,
    #: Tile's repeats) to symbols the dispatcher reads from the data: one generic version
    value_symbols: bool = False
    #: the structure of each sequence / optional input (io_structure.py): {"x": "seq:3",
    #: "opt": "none"}; a build is specialised on it (each element a tensor of the C ABI)
    input_structure: dict[str, str] = field(default_factory=dict)
    #: a while loop's grown state that nothing bounds: (initial capacity, limit) in rows beyond
    #: its initial extent; the library doubles it per call until the run fits (ops/loop_capacity.py)
    loop_capacity: tuple[int, int] = (16, 1 << 24)

    def __post_init__(self):
        self.specialize_value = normalize_values(self.specialize_value)

    def cache_key(self) -> dict:
        d = asdict(self)
        d["dims"] = {k: list(v) for k, v in sorted(self.dims.items())}
        d["specialize"] = {k: sorted(v) for k, v in sorted(self.specialize.items())}
        d["buckets"] = {k: sorted(set(v)) for k, v in sorted(self.buckets.items())}
        d["specialize_value"] = {k: [list(x) for x in v] for k, v in sorted(self.specialize_value.items())}
        d["input_structure"] = dict(sorted(self.input_structure.items()))
        d["loop_capacity"] = list(self.loop_capacity)
        if "ONNXCC_PROFILE_SERIAL" in os.environ:  # codegen/cpu/emit.py PROFILE_SERIAL_ENV
            d["profile_serial"] = True  # a profiling build runs its serial computes as regions
        return d


def _number(x, name: str):
    """One element of a value: a Python int, float or bool (numpy scalars included)."""
    import numbers

    if isinstance(x, bool) or type(x).__name__ == "bool_":
        return int(bool(x))
    if isinstance(x, numbers.Integral):
        return int(x)
    if isinstance(x, numbers.Real):
        return float(x)
    raise OnnxccError(f"specialize_value {name}: element {x!r} is not a number")


def _flat(v, name: str) -> list:
    if hasattr(v, "tolist") and hasattr(v, "ndim"):  # a numpy array or scalar
        if v.ndim > 1:
            raise OnnxccError(f"specialize_value {name}: a value is a scalar or 1-D, got {v.ndim}-D")
        v = v.tolist()
    if isinstance(v, (list, tuple)):
        return [_number(x, name) for x in v]
    return [_number(v, name)]


def normalize_values(spec: dict) -> dict[str, list[list]]:
    """{name: value or [value, ...]} -> {name: [flat value, ...]} (duplicates dropped, order kept).

    A list whose items are all lists (or arrays) is several values; any other list, tuple,
    array or number is one value."""
    out: dict[str, list[list]] = {}
    for name, v in (spec or {}).items():
        if not isinstance(name, str) or not name:
            raise OnnxccError(f"specialize_value: input names are strings, got {name!r}")
        many = isinstance(v, list) and v and all(isinstance(x, (list, tuple)) or (hasattr(x, "ndim") and x.ndim == 1)
                                                 for x in v)
        vals = [_flat(x, name) for x in v] if many else [_flat(v, name)]
        seen: list[list] = []
        for x in vals:
            if x not in seen:
                seen.append(x)
        out[name] = seen
    return out
