"""The plain-data contract between the code generators and the linker.

An `ArtifactSpec` says everything `codegen.c.link` needs to wrap compiled versions into
`libNAME.so`: the model's inputs and outputs with symbolic shapes, its symbols (order =
the order of the `syms` array every version receives), the run-time constraints, and the
versions in dispatch order (most specialised first, generic last).

Every version is a native function with the C signature

    int32_t SYMBOL(const int64_t *syms, void *const *inputs, void *const *outputs,
                   void *workspace);

`syms[k]` is the value of `symbols[k]`; inputs/outputs are data pointers (byte_offset
already applied) of compact row-major tensors; `workspace` is 64-byte aligned and holds
`workspace_bytes` bytes (NULL when that is 0). It returns 0, or nonzero on a run-time error.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass, field
from typing import Any

import sympy

from onnxcc.ir.dims import SymbolInfo
from onnxcc.ir.types import DType

Dim = int | sympy.Expr

#: "one": the 0/1-rule version `SYM == 1` that passes/specialize.py makes for a symbol meeting a broadcast
#: "value": a version compiled for given values of some inputs (passes/specialize_value.py);
#: "split": one side of an If whose condition is over dims (passes/split_if.py)
VERSION_KINDS = ("generic", "exact", "one", "bucket", "divisible", "value", "split")

_C_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def is_c_identifier(s: str) -> bool:
    return bool(_C_IDENT.match(s))


@dataclass
class TensorSig:
    """One model input or output as the C caller sees it."""

    name: str
    dtype: DType
    shape: tuple[Dim, ...]
    """ints and sympy expressions over the spec's symbols"""

    @property
    def rank(self) -> int:
        return len(self.shape)


@dataclass
class KernelLaunch:
    """One GPU kernel a version launches (target "cuda"), in launch order."""

    kernel: str
    """the kernel's entry name in the PTX"""
    work: Dim
    """the number of elements of its flattened domain (threads' worth of work), over the symbols"""


@dataclass
class DeviceCode:
    """The GPU code of a target "cuda" artifact, embedded in libNAME.so."""

    arch: str
    """the PTX target, e.g. "sm_80"; the device's compute capability must be at least this"""
    ptx: str
    """the PTX text of every version's kernels"""
    kernels: list[str] = field(default_factory=list)
    """every kernel entry name; a launch refers to its kernel by its index here"""
    consts: dict[str, bytes] = field(default_factory=dict)
    """PTX global name -> the bytes the runtime copies into it after loading the PTX"""
    block: int = 256
    """threads per block of every launch"""


@dataclass
class ValueGuard:
    """A value version's condition on one input: its data equals `data` byte for byte."""

    input: int
    """the input's index"""
    name: str
    numel: int
    """the element count the input must have"""
    data: bytes
    """the value, in the input's dtype, row-major"""
    text: str
    """the value for people: `16000`, `[2, 3, 4]`"""


@dataclass
class VersionSpec:
    """One compiled version: its kernel symbol and when the dispatcher may call it."""

    symbol: str
    """the object-file function implementing this version"""
    guard: Any = sympy.true
    """a sympy boolean over the symbols; `sympy.true` for the generic version"""
    guard_text: str = ""
    """the guard for people; rendered from `guard` when empty"""
    subs: dict[str, int] = field(default_factory=dict)
    """the substitution this version was compiled under (symbol name -> value)"""
    workspace_bytes: Dim = 0
    """scratch bytes the version needs, evaluated per call from the symbols"""
    kind: str = "generic"
    """one of VERSION_KINDS"""
    info: dict = field(default_factory=dict)
    """free-form facts for the metadata (arena peak, buckets, ...); must be JSON-able"""
    launches: list[KernelLaunch] = field(default_factory=list)
    """target "cuda": the kernels this version launches, in order (`symbol` then names the
    host function the dispatcher generates to launch them)"""
    cpu: str = ""
    """multi-ISA libraries (--cpu-versions): the LLVM CPU this version was compiled for; the
    dispatcher tries it only on a CPU with that level's features (ArtifactSpec.cpu_levels)"""
    value_guards: list[ValueGuard] = field(default_factory=list)
    """kind "value": the input values it was compiled for (checked on the input's data, on
    top of `guard`)"""
    in_place: list[tuple[int, int]] = field(default_factory=list)
    """(output, input) pairs this version was proved to compute correctly when the output
    aliases the input exactly (kernel.in_place_pairs); the dispatcher serves such calls"""


@dataclass
class ArtifactSpec:
    """Everything the linker needs to know about one artifact."""

    name: str
    """a C identifier: prefixes every exported function and names the files"""
    inputs: list[TensorSig]
    outputs: list[TensorSig]
    symbols: list[SymbolInfo]
    constraints: list[tuple[Any, str]] = field(default_factory=list)
    """(sympy boolean, origin) pairs, e.g. (Eq(Mod(b, 4), 0), 'node "Reshape_5": split into heads')"""
    versions: list[VersionSpec] = field(default_factory=list)
    target: str = "cpu"
    triple: str = ""
    metadata: dict = field(default_factory=dict)
    device: DeviceCode | None = None
    """target "cuda": the PTX and what the runtime needs to load it"""
    run_dims: dict[str, Any] = field(default_factory=dict)
    """run-determined symbols (a loop's data-dependent trip count, a branch-dependent extent)
    -> their upper bound over the input symbols: the dispatcher binds the symbol to the
    bound (outputs are allocated for it), the kernel writes the true value back into its
    `syms` slot, and `NAME_output_dims` reports it after the run"""
    late_dims: list[str] = field(default_factory=list)
    """the run-determined symbols that are bound mid-run (run-time symbols: NonZero's count...):
    an output with only such run-determined dims is laid out compact row-major in its TRUE
    shape, at the start of its allocation (the others: in the leading corner)"""
    cpu_features: list[str] = field(default_factory=list)
    """x86 features the kernels need (codegen/cpu/features.py CHECKABLE names): the
    dispatcher checks them at the first call and refuses with ERR_CPU, never SIGILL"""
    cpu_levels: dict[str, list[str]] = field(default_factory=dict)
    """multi-ISA libraries: CPU name -> the features its versions need (beyond cpu_features,
    which every level shares and cpu_check tests once)"""
    build_id: str = field(default_factory=lambda: secrets.token_hex(8))
    """NAME_build_id(), NAME.h's NAME_BUILD_ID and NAME.json's build_id carry it, so a library,
    header and metadata from different builds are told apart; build_library sets it to a digest
    of the library's inputs (c_build.content_build_id: the same inputs, the same id)"""
    data_dims: dict[str, tuple[int, int]] = field(default_factory=dict)
    """symbols read from an input's data (a size-only int64 input, passes/value_symbols.py):
    symbol -> (input index, element); bound by the dispatcher before any kernel runs"""
    version_dims: dict[str, list[Any]] = field(default_factory=dict)
    """version-determined symbols (an output dim the chosen value version fixes) -> their
    value per version (None: left as bound); set by the dispatcher once it picked a version"""

    cap_dims: dict[str, dict] = field(default_factory=dict)
    """loop capacities (ops/loop_capacity.py): symbol -> {node, what} (the loop and the
    carried dim or iteration count it sizes); set by the dispatcher to cap_initial << k, k doubling on the
    kernel's ERR_CAPACITY while the capacity stays <= cap_limit (codegen/c/capacity.py)"""
    cap_initial: int = 16
    cap_limit: int = 1 << 24

    def symbol_index(self) -> dict[str, int]:
        return {s.name: k for k, s in enumerate(self.symbols)}

    def validate(self) -> None:
        """Check what the C side relies on; raises ValueError naming the offender."""
        if not is_c_identifier(self.name):
            raise ValueError(f"artifact name {self.name!r} is not a C identifier")
        if not self.versions:
            raise ValueError(f"artifact {self.name!r} has no versions")
        names = [s.name for s in self.symbols]
        if len(set(names)) != len(names):
            raise ValueError(f"duplicate symbol names in {names}")
        known = set(names)
        for k, v in enumerate(self.versions):
            if not is_c_identifier(v.symbol):
                raise ValueError(f"version {k}: kernel symbol {v.symbol!r} is not a C identifier")
            if v.kind not in VERSION_KINDS:
                raise ValueError(f"version {k}: kind {v.kind!r} is not one of {VERSION_KINDS}")
            _check_symbols(v.guard, known, f"version {k} guard")
            _check_symbols(v.workspace_bytes, known, f"version {k} workspace_bytes")
            for launch in v.launches:
                _check_symbols(launch.work, known, f"version {k} kernel {launch.kernel}")
        for kind, sigs in (("input", self.inputs), ("output", self.outputs)):
            for t in sigs:
                for j, d in enumerate(t.shape):
                    _check_symbols(d, known, f'{kind} "{t.name}" dim {j}')
        for expr, origin in self.constraints:
            _check_symbols(expr, known, f"constraint from {origin or '?'}")
        for name, per in self.version_dims.items():
            if name not in known:
                raise ValueError(f"version-determined symbol {name} is not a declared symbol")
            if len(per) != len(self.versions):
                raise ValueError(f"version-determined symbol {name}: {len(per)} values for "
                                 f"{len(self.versions)} versions")
            for d in per:
                if d is not None:
                    _check_symbols(d, known - set(self.version_dims), f"version-determined symbol {name}")
        for name, (i, j) in self.data_dims.items():
            if name not in known:
                raise ValueError(f"data-bound symbol {name} is not a declared symbol")
            t = self.inputs[i] if 0 <= i < len(self.inputs) else None
            count = (t.shape[0] if t.rank == 1 else 1) if t is not None and t.rank <= 1 else None
            if t is None or t.dtype is not DType.i64 or not (isinstance(count, int) and 0 <= j < count):
                raise ValueError(f"data-bound symbol {name}: input {i} element {j} is not an element of a "
                                 "static scalar or 1-D i64 input")
        for k, v in enumerate(self.versions):
            for g in v.value_guards:
                if not 0 <= g.input < len(self.inputs) or self.inputs[g.input].name != g.name:
                    raise ValueError(f"version {k}: value guard on input {g.input} ({g.name!r}) does not "
                                     "name an input")
        for k, v in enumerate(self.versions):
            for o, i in v.in_place:
                if not (0 <= o < len(self.outputs) and 0 <= i < len(self.inputs)):
                    raise ValueError(f"version {k}: in-place pair (output {o}, input {i}) is out of range")
        for name in self.cap_dims:
            if name not in known:
                raise ValueError(f"loop capacity {name} is not a declared symbol")
        if not 1 <= self.cap_initial <= self.cap_limit:
            raise ValueError(f"loop capacity: initial {self.cap_initial} not in [1, limit {self.cap_limit}]")
        for name, bound in self.run_dims.items():
            if name not in known:
                raise ValueError(f"run-determined symbol {name} is not a declared symbol")
            _check_symbols(bound, known - set(self.run_dims), f"upper bound of run-determined symbol {name}")


def _check_symbols(e, known: set[str], where: str) -> None:
    if isinstance(e, (int, bool)):
        return
    unknown = sorted(s.name for s in sympy.sympify(e).free_symbols if s.name not in known)
    if unknown:
        raise ValueError(f"{where} uses undeclared symbol(s) {', '.join(unknown)}")
