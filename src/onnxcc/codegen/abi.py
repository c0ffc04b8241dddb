"""The plain-data contract between the code generators and the linker.

An `ArtifactSpec` says everything `codegen.link` needs to wrap compiled versions into
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
from dataclasses import dataclass, field
from typing import Any

import sympy

from onnxcc.ir.dims import SymbolInfo
from onnxcc.ir.types import DType

Dim = int | sympy.Expr

#: "one": the 0/1-rule version `SYM == 1` that passes/specialize.py makes for a symbol meeting a broadcast
VERSION_KINDS = ("generic", "exact", "one", "bucket", "divisible", "split")

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
