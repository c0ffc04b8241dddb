"""Wrap compiled versions into an artifact: NAME.h, NAME.json, the dispatcher, libNAME.so.

The dispatcher is generated C. For every call it validates the DLTensors, binds the model's
symbols from the input dims, checks ranges, repeated dims and constraints (each failure is
an error code plus a message naming the input, the dim, what was expected and what was
got), picks the first version whose guard holds, checks the outputs, allocates the
workspace and calls the version. The binding plan is decided here, in Python, so the C is
straight-line code with every message spelled out.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import sympy

from onnxcc.errors import CompileError
from onnxcc.ir.dims import canon
from onnxcc.ir.types import DType

from . import layout
from . import strings as str_abi
from .abi import ArtifactSpec, TensorSig, VersionSpec
from .cpu_check import cpu_check_fn, cpu_levels_fn, cpu_version_guard
from .exprs import C_HELPERS, UnsupportedExpr, c_bool, c_int, c_int_checked_lets, text
from .managed import has_run_alloc, run_alloc_decl, run_alloc_fn
from .package import ERROR_DOCS, SIGNATURE_API, signature_defs, signature_header

RUNTIME_DIR = Path(__file__).parent / "runtime"
RUNTIME_SOURCES = ("onnxcc_rt.c", "onnxcc_layout.c")
ABI_VERSION = 1
#: the artifact's identity functions (NAME_ prefixed; _identity_header / _identity_defs)
IDENTITY_API = ("build_id", "abi_version")

# Return codes of NAME_run / NAME_output_shape, as onnxcc_rt.h defines them (ONNXCC_ERR_*;
# every dispatcher static-asserts the two agree). Also written to NAME.json for loaders.
ERROR_CODES = {"OK": 0, "ERR_ARGS": 1, "ERR_DEVICE": 2, "ERR_DTYPE": 3, "ERR_SHAPE": 4, "ERR_CONSTRAINT": 5,
               "ERR_GUARD": 6, "ERR_ALLOC": 7, "ERR_KERNEL": 8, "ERR_CPU": 9}

# DLPack (code, bits) per dtype; lanes are always 1. bf16 is its own type code in DLPack.
DL_DTYPE = {
    DType.f16: (2, 16), DType.bf16: (4, 16), DType.f32: (2, 32), DType.f64: (2, 64),
    DType.i8: (0, 8), DType.i16: (0, 16), DType.i32: (0, 32), DType.i64: (0, 64),
    DType.u8: (1, 8), DType.u16: (1, 16), DType.u32: (1, 32), DType.u64: (1, 64),
    DType.bool: (6, 8),
    # the small types: DLPack 1.1's float8 / float4 codes; sub-byte integers are kDLInt /
    # kDLUInt with bits 4 or 2. Sub-byte tensors are packed (see NAME.h).
    DType.f8e4m3fn: (10, 8), DType.f8e4m3fnuz: (11, 8), DType.f8e5m2: (12, 8), DType.f8e5m2fnuz: (13, 8),
    DType.f8e8m0: (14, 8), DType.f4e2m1: (17, 4), DType.i4: (0, 4), DType.u4: (1, 4), DType.i2: (0, 2),
    DType.u2: (1, 2), DType.string: (3, 64),  # str: kDLOpaqueHandle, one `const char *` each (strings.py)
}

# File-scope names of the generated dispatcher, which a kernel symbol must not take.
_DISPATCH_STATICS = {"sig_in_infos", "sig_out_infos", "cpu_check", "cpu_missing", "cpu_masked", "cpu_state",
                     "cpu_missing_name", "cpu_level", "cpu_level_state", "cpu_forced", "cpu_level_test",
                     "bind_inputs", "output_dims", "devices", "version_infos", "last_version_tl", "run_syms_tl",
                     "run_ok_tl", "select_version", "value_guard_holds",
                     "input_names", "output_names", "in_place_ok", "in_sigs", "out_sigs"}


class LinkTarget:
    """What one target puts into the shared dispatcher, header and link; every backend has
    one (`Backend.link`). This base is the CPU's: native kernel functions called in place,
    nothing more to link. The CUDA one (codegen/cuda/host.py) adds the PTX image, a launch
    function per version, `NAME_set_stream` and its runtime."""

    #: DLPack device types the kernels can dereference
    devices: tuple[str, ...] = ("kDLCPU",)
    #: device types whose tensors NAME_output_shape accepts (it reads only shapes); None: `devices`
    shape_devices: tuple[str, ...] | None = None
    #: exported functions beyond the common API (NAME_ prefixed)
    api_extra: tuple[str, ...] = ()
    #: file-scope names the target's part of the dispatcher defines
    statics: frozenset[str] = frozenset()
    #: where NAME_run's tensors live, for the header's comment
    where: str = "on the CPU"

    def validate(self, spec: ArtifactSpec) -> None:
        """Raise CompileError when the spec lacks what this target needs."""

    def declarations(self, spec: ArtifactSpec, names: dict[str, str]) -> str:
        """The dispatcher's declarations of the versions (`names`: symbol -> C value)."""
        kernels = sorted({v.symbol for v in spec.versions})
        return "\n".join(f"extern int32_t {k}(const int64_t *syms, void *const *inputs,\n"
                         f"{' ' * (16 + len(k))}void *const *outputs, void *workspace);" for k in kernels)

    def run_prologue(self) -> list[str]:
        """NAME_run's lines after the pointers are set up, before the version switch."""
        return []

    def version_call(self, k: int, v: VersionSpec, ws: str) -> str:
        """The statement running version k (s, in_ptrs, out_ptrs in scope; sets rc)."""
        return f"rc = onnxcc_call_version({k}, {v.symbol}, {ws}, s, in_ptrs, out_ptrs);"

    def header_api(self, name: str, up: str) -> str:
        """Declarations NAME.h adds after the common API."""
        return ""

    def api_defs(self, name: str) -> str:
        """Definitions of `api_extra`."""
        return ""

    def link_inputs(self, spec: ArtifactSpec, out: Path) -> tuple[list[Path], list[str], list[str]]:
        """Written before the link: (object files, runtime sources, linker libraries) to add."""
        return [], [], []


CPU_LINK = LinkTarget()


def link_target(spec: ArtifactSpec) -> LinkTarget:
    """The spec's target's LinkTarget, from the backend registry."""
    from ..backend import BACKENDS, backend_class

    if spec.target not in BACKENDS:
        raise CompileError(f"artifact {spec.name}: unknown target {spec.target!r} "
                           f"(known: {', '.join(BACKENDS)})")
    return backend_class(spec.target).link


def _dlpack_types() -> str:
    """The DLPack block of onnxcc_rt.h; NAME.h repeats it so C callers need no runtime header."""
    h = (RUNTIME_DIR / "onnxcc_rt.h").read_text()
    return h[h.index("/* BEGIN DLPACK"):h.index("/* END DLPACK */")]


# ---- small text helpers ------------------------------------------------------------------

def _c_string(s: str, fmt: bool = False) -> str:
    """The body of a C string literal for s; with fmt, '%' is doubled for printf."""
    out = []
    for ch in s:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "%" and fmt:
            out.append("%%")
        elif ch == "?":
            out.append("\\?")  # no accidental trigraphs
        elif 32 <= ord(ch) < 127:
            out.append(ch)
        else:
            out.extend(f"\\{b:03o}" for b in ch.encode("utf-8"))
    return "".join(out)


def _comment(s: str) -> str:
    return s.replace("*/", "* /")


def _shape_text(shape) -> str:
    return "[" + ", ".join(text(d) for d in shape) + "]"


def api_names(name: str, target: LinkTarget = CPU_LINK, run_dims: bool = False, strings: bool = False) -> list[str]:
    """The exported functions; `NAME_output_dims` / `NAME_strings_*` only where needed."""
    extra = tuple(target.api_extra) + (("output_dims",) if run_dims else ()) + (str_abi.API if strings else ())
    if run_dims and "kDLCPU" in target.devices and target.shape_devices is None:
        extra += ("run_alloc",)  # library-allocated outputs (managed.py)
    return [f"{name}_{f}" for f in ("run", "output_shape", "last_error", "num_versions", "version_info",
                                    "last_version", *IDENTITY_API, *SIGNATURE_API, *extra)]


class _Msg:
    """A printf format and its arguments, built piece by piece."""

    def __init__(self, *pieces: str):
        self.fmt, self.args = "", []
        for p in pieces:
            self.text(p)

    def text(self, s: str) -> _Msg:
        self.fmt += _c_string(s, fmt=True)
        return self

    def value(self, c_expr: str) -> _Msg:
        self.fmt += "%lld"
        self.args.append(f"(long long)({c_expr})")
        return self

    def copy(self) -> _Msg:
        c = _Msg()
        c.fmt, c.args = self.fmt, list(self.args)
        return c

    def fail(self, code: str, before: str = "") -> str:
        """A C block that sets the message and returns code (running `before` first)."""
        args = "".join(", " + a for a in self.args)
        return f'{{ {before}onnxcc_error_set("{self.fmt}"{args}); return {code}; }}'


# ---- the binding plan --------------------------------------------------------------------

@dataclass
class _Binding:
    """Where a symbol's value comes from: value = (input[i].shape[j] - offset) / coeff."""

    symbol: str
    index: int
    input: int
    dim: int
    input_name: str
    coeff: int = 1
    offset: object = 0
    expr: object = None  # the dim expression it was solved from, when coeff/offset are not 1/0

    @property
    def where(self) -> str:
        return f'input "{self.input_name}" dim {self.dim}'

    @property
    def provenance(self) -> str:
        return f"bound by {self.source}"

    @property
    def source(self) -> str:
        """'input "a" dim 1' (or 'input "a" dim 1 = 2*s' for a solved dim)."""
        return self.where if self.expr is None else f"{self.where} = {text(self.expr)}"


@dataclass
class _Plan:
    bindings: list[_Binding]           # in evaluation order
    checks: list[tuple[int, int, object]]  # (input, dim, expected dim) checked after binding


def _plan(spec: ArtifactSpec) -> _Plan:
    index = spec.symbol_index()
    bound: dict[str, _Binding] = {}
    order: list[_Binding] = []
    pending: list[tuple[int, int, object]] = []
    for i, t in enumerate(spec.inputs):
        for j, d in enumerate(t.shape):
            d = canon(d)
            if isinstance(d, sympy.Symbol) and d.name not in bound:
                b = _Binding(d.name, index[d.name], i, j, t.name)
                bound[d.name] = b
                order.append(b)
            else:
                pending.append((i, j, d))
    # Solve linear dims (2*s, s + 1, s + n) for a symbol bound nowhere else.
    solved: set[tuple[int, int]] = set()
    changed = True
    while changed:
        changed = False
        for i, j, d in pending:
            if isinstance(d, int) or (i, j) in solved:
                continue
            free = [s for s in d.free_symbols if s.name not in bound]
            if len(free) != 1:
                continue
            s = free[0]
            e = sympy.expand(d)
            a = e.coeff(s, 1)
            rest = sympy.expand(e - a * s)
            if not (a.is_Integer and a != 0) or s in rest.free_symbols:
                continue
            b = _Binding(s.name, index[s.name], i, j, spec.inputs[i].name, int(a), rest, d)
            bound[s.name] = b
            order.append(b)
            solved.add((i, j))
            changed = True
    # run-determined symbols are bound to their upper bound after the others (see _run_dims_doc)
    missing = [s.name for s in spec.symbols if s.name not in bound and s.name not in spec.run_dims
               and s.name not in spec.version_dims and s.name not in spec.data_dims]
    if missing:
        raise CompileError(
            f"artifact {spec.name}: symbol(s) {', '.join(missing)} cannot be determined from the input "
            f"shapes (each must be an input dim, or a linear dim like 2*s or s + 1)")
    return _Plan(order, [(i, j, d) for i, j, d in pending if (i, j) not in solved])


# ---- NAME.h ------------------------------------------------------------------------------

def _describe_tensors(kind: str, sigs: list[TensorSig]) -> list[str]:
    lines = [f" * {kind}s, in order:"]
    for k, t in enumerate(sigs):
        lines.append(f" *   {k}: \"{_comment(t.name)}\"  {t.dtype.value}  {_comment(_shape_text(t.shape))}")
    return lines


def _dtype_notes(sigs: list[TensorSig]) -> list[str]:
    """How the less common dtypes travel: their DLPack (code, bits), and the packing of the
    sub-byte ones."""
    used = sorted({t.dtype for t in sigs if t.dtype is DType.bf16 or t.dtype.is_small}, key=lambda d: d.value)
    if not used:
        return []
    lines = [" *", " * dtypes (DLPack code, bits; lanes 1):"]
    lines += [f" *   {d.value}: code {DL_DTYPE[d][0]}, bits {DL_DTYPE[d][1]}" for d in used]
    if any(d.bits < 8 for d in used):
        lines += [" *   sub-byte types are packed: element k of the row-major tensor sits in byte",
                  " *   k / (8 / bits), bits (k % (8 / bits)) * bits upward (ONNX's layout); a tensor",
                  " *   of n elements takes ceil(n * bits / 8) bytes"]
    return lines


def _structure_doc(structure: dict | None) -> list[str]:
    """How the model's sequence / optional inputs and outputs map onto the tensors above
    (io_structure.py): the build is specialised on their structure."""
    if not structure:
        return []
    doc = [" *", " * sequences and optionals (this build is specialised on their structure: a sequence of",
           " * N is the N tensors NAME.0 .. NAME.N-1 above, a present optional the tensor NAME, an",
           " * absent one no tensor at all):"]
    for kind, items in (("input", structure.get("inputs", [])), ("output", structure.get("outputs", []))):
        for name, spec in items:
            if spec != "tensor":
                doc.append(f" *   {kind} {_comment(name)}: {_comment(spec)}")
    return doc


def generate_header(spec: ArtifactSpec) -> str:
    spec.validate()
    n, up = spec.name, spec.name.upper()
    doc = [f"/* {n}.h: the C API of lib{n}.so, generated by onnxcc. Do not edit.", " *"]
    doc += _describe_tensors("input", spec.inputs) + [" *"] + _describe_tensors("output", spec.outputs)
    doc += _dtype_notes(spec.inputs + spec.outputs)
    doc += str_abi.header_notes(spec)
    doc += _structure_doc((spec.metadata or {}).get("structure"))
    if spec.symbols:
        doc.append(" *\n * symbols (bound from the input dims at every call):")
        for s in spec.symbols:
            if s.name in spec.run_dims:  # listed below
                continue
            mult = f", multiple of {s.multiple_of}" if s.multiple_of > 1 else ""
            doc.append(f" *   {s.name} in [{s.lo}, {s.hi}]{mult}")
    if spec.run_dims:
        doc += _run_dims_doc(spec)
    if spec.constraints:
        doc.append(" *\n * checked at every call:")
        for expr, origin in spec.constraints:
            doc.append(f" *   {_comment(text(expr))}" + (f"  ({_comment(origin)})" if origin else ""))
    doc.append(" *\n * versions, tried in order (the first whose guard holds runs):")
    for k, v in enumerate(spec.versions):
        doc.append(f" *   {k}: {v.kind}, {_comment(_guard_text(v))}")
    target = link_target(spec)
    doc += layout.header_doc(spec, layout.reads_host(target.devices, target.shape_devices))
    doc.append(" */")
    last = len(ERROR_CODES) - 1
    codes = "\n".join(f"  {up}_{k} = {v}{',' if i < last else ' '}" + " " * max(1, 17 - len(k) - len(str(v)))
                       + f"/* {ERROR_DOCS.get(k, '')} */" for i, (k, v) in enumerate(ERROR_CODES.items()))
    where, stream = target.where, target.header_api(n, up) + str_abi.header_decl(spec)
    return "\n".join(doc) + f"""
#ifndef {up}_H_
#define {up}_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {{
#endif

{_dlpack_types()}
#define {up}_NUM_INPUTS {len(spec.inputs)}
#define {up}_NUM_OUTPUTS {len(spec.outputs)}
#define {up}_NUM_VERSIONS {len(spec.versions)}
{_identity_header(spec)}
/* Return codes. Every nonzero code comes with a message in {n}_last_error(). */
enum {{
{codes}
}};

#ifndef {up}_API
#define {up}_API __attribute__((visibility("default")))
#endif

/* Runs the model. inputs/outputs: {up}_NUM_INPUTS / {up}_NUM_OUTPUTS tensors in the
 * order listed above, {where}; strides and in-place calls as "strides and aliasing" above
 * says (outputs compact row-major). Outputs are allocated by the caller with the shapes
 * {n}_output_shape reports. An output whose memory (data + byte_offset, its extent)
 * overlaps an input's or another output's is refused with {up}_ERR_ARGS naming both
 * tensors, except an exact alias a version was proved safe for. Re-entrant and
 * thread-safe; each call allocates its own workspace. Returns {up}_OK or an error code. */
{up}_API int {n}_run(const DLTensor *inputs, int n_inputs, DLTensor *outputs, int n_outputs);

/* Writes the shape of output `output` (its rank many int64_t) for these inputs, after
 * the same checks {n}_run makes of them. Only the inputs' shapes and dtypes are read. */
{up}_API int {n}_output_shape(const DLTensor *inputs, int n_inputs, int output, int64_t *shape);
{_output_dims_decl(spec)}{run_alloc_decl(spec) if has_run_alloc(spec, target.devices, target.shape_devices) else ""}
/* The message of this thread's last failed call, "" when it succeeded. */
{up}_API const char *{n}_last_error(void);

/* Introspection: the number of versions, one version's guard, substitution and workspace
 * as text (NULL for a bad index), and the version this thread's last {n}_run used
 * (-1 if it picked none). */
{up}_API int {n}_num_versions(void);
{up}_API const char *{n}_version_info(int version);
{up}_API int {n}_last_version(void);

/* The loaded library's build id (compare with {up}_BUILD_ID) and C ABI version. */
{up}_API const char *{n}_build_id(void);
{up}_API int {n}_abi_version(void);
{signature_header(spec)}{stream}
#ifdef __cplusplus
}}
#endif
#endif /* {up}_H_ */
"""


def _identity_header(spec: ArtifactSpec) -> str:
    """NAME.h's build id and ABI version, as macros (what this header was generated for) and
    functions (what the loaded library is): a program can compare the two at start-up."""
    n, up = spec.name, spec.name.upper()
    return f"""
/* This header's build; {n}_build_id() returns the loaded library's. They differ when the
 * header and the library come from different compiles: rebuild against the library. */
#define {up}_BUILD_ID "{spec.build_id}"
/* The C ABI this header describes; {n}_abi_version() returns the library's. */
#define {up}_ABI_VERSION {ABI_VERSION}
"""


def _identity_defs(spec: ArtifactSpec) -> str:
    n, up = spec.name, spec.name.upper()
    return f"""/* the artifact's identity (NAME.h: {up}_BUILD_ID, {up}_ABI_VERSION) */
const char *{n}_build_id(void) {{ return "{spec.build_id}"; }}

int {n}_abi_version(void) {{ return {ABI_VERSION}; }}
"""


def _run_dims_doc(spec: ArtifactSpec) -> list[str]:
    lines = [" *", " * determined by the run (data-dependent: a loop's trip count, the extent of the branch",
             " * taken), at most:"]
    for name, bound in spec.run_dims.items():
        lines.append(f" *   {name} <= {_comment(text(bound))}")
    lines += [" * An output with such a dim is allocated for the upper bound: {n}_output_shape reports",
              " * it. {n}_run lays the data out row-major in that allocated shape; after the run,",
              " * {n}_output_dims gives the true extents, and the valid elements are the leading",
              " * corner [0, d0) x [0, d1) x ... of the allocation (a compact prefix when only the",
              " * leading dim is run-determined, as for a Loop's stacked scan outputs). A loop that would",
              " * run past its bound fails ({N}_ERR_KERNEL, kernel code 4) instead of overrunning."]
    late = [k for k in spec.run_dims if k in spec.late_dims]
    if late:
        lines += [" * Run-time symbols (" + ", ".join(late) + ") are bound mid-run, when the op that",
                  " * counts them runs: an output whose run-determined dims are all such symbols holds",
                  " * its elements compact row-major in its TRUE shape at the start of the allocation",
                  " * (NAME.json: \"run_layout\": \"prefix\"), not in the corner."]
        checks = spec.metadata.get("runtime_constraints", [])
        if checks:
            lines.append(" * Checked by the kernel when they are bound ({N}_ERR_KERNEL, kernel code 4):")
            lines += [f" *   {_comment(c['text'])}  ({_comment(c['origin'])})" for c in checks]
    return [line.replace("{n}", spec.name).replace("{N}", spec.name.upper()) for line in lines]


def _output_dims_decl(spec: ArtifactSpec) -> str:
    if not spec.run_dims:
        return ""
    n, up = spec.name, spec.name.upper()
    return f"""
/* The true shape of output `output` after this thread's last successful {n}_run (some
 * dims are determined by the run, see above); {up}_ERR_ARGS if there was none. */
{up}_API int {n}_output_dims(int output, int64_t *shape);
"""


def _guard_text(v: VersionSpec) -> str:
    return v.guard_text or text(v.guard)


def _version_info_text(k: int, v: VersionSpec) -> str:
    subs = ", ".join(f"{a}={b}" for a, b in v.subs.items()) or "none"
    cpu = f"cpu {v.cpu}, " if v.cpu else ""
    ws = text(v.workspace_bytes)
    if len(ws) > 60 or "Piecewise" in ws:  # a symbolic plan: `onnxcc inspect` shows it by ranges
        ws = "symbolic (see NAME.json or onnxcc inspect)"
    else:
        ws += " bytes"
    return f"version {k} ({v.kind}, {cpu}{v.symbol}): guard {_guard_text(v)}; subs {subs}; workspace {ws}"


# ---- the dispatcher ----------------------------------------------------------------------

class _Dispatch:
    """Generates NAME_dispatch.c for one spec."""

    def __init__(self, spec: ArtifactSpec):
        spec.validate()
        self.target = target = link_target(spec)
        if any(v.value_guards for v in spec.versions) and "kDLCPU" not in target.devices:
            raise CompileError(f"artifact {spec.name}: value versions compare the input's data in the "
                               f"dispatcher, which target {spec.target} cannot read (use --target cpu)")
        target.validate(spec)
        own = _DISPATCH_STATICS | target.statics | set(api_names(spec.name, target, True, True))
        clash = sorted({v.symbol for v in spec.versions} & own)
        if clash or any(v.symbol.startswith("onnxcc_") for v in spec.versions):
            raise CompileError(f"artifact {spec.name}: kernel symbol(s) {clash or 'onnxcc_*'} clash with the "
                               "dispatcher's own names")
        self.spec = spec
        self.n = spec.name
        self.up = spec.name.upper()
        self.plan = _plan(spec)
        self.bind = {b.symbol: b for b in self.plan.bindings}
        self.names = {s.name: f"s[{k}]" for k, s in enumerate(spec.symbols)}
        self.host = layout.reads_host(target.devices, target.shape_devices)
        self.strided = layout.strided_ok(spec, self.host)

    def code(self, key: str) -> str:
        return f"{self.up}_{key}"

    def fail(self, msg: _Msg, key: str, before: str = "") -> str:
        return msg.fail(self.code(key), before)

    def ci(self, e) -> str:
        return c_int(e, self.names)

    def sym_sources(self, msg: _Msg, e) -> None:
        """' (k = 5 from input "a" dim 1; k2 = 6 from input "b" dim 0)' for the symbols of e:
        a failed constraint names where each of its symbols was bound."""
        index = self.spec.symbol_index()
        syms = sorted((s.name for s in sympy.sympify(e).free_symbols), key=lambda n: index[n])
        for k, name in enumerate(syms):
            msg.text("; " if k else " (").text(f"{name} = ").value(self.names[name])
            if name in self.bind:
                msg.text(f" from {self.bind[name].source}")
            elif name in self.spec.run_dims:
                msg.text(" (its upper bound; determined by the run)")
        if syms:
            msg.text(")")

    def sym_context(self, msg: _Msg, e, only: bool = False) -> None:
        """' (seq = 7 bound by input "y" dim 0; ...)' for the symbols of e."""
        index = self.spec.symbol_index()
        syms = sorted((s.name for s in sympy.sympify(e).free_symbols), key=lambda n: index[n])
        if not syms:
            return
        msg.text(" (")
        for k, name in enumerate(syms):
            if k:
                msg.text("; ")
            msg.text(f"{name} = ").value(self.names[name])
            if not only and name in self.bind:
                msg.text(f" {self.bind[name].provenance}")
        msg.text(")")

    # -- pieces ------------------------------------------------------------------------
    def prelude(self) -> str:
        s = self.spec
        decls = self.target.declarations(s, self.names)
        infos = ",\n".join(f'  "{_c_string(_version_info_text(k, v))}"' for k, v in enumerate(s.versions))
        devices = ", ".join(self.target.devices)
        asserts = "\n".join(f'_Static_assert((int){self.up}_{k} == (int)ONNXCC_{k}, "return codes drifted");'
                            for k in ERROR_CODES)
        return f"""/* {self.n}_dispatch.c: generated by onnxcc. Do not edit. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "{self.n}.h"
#include "onnxcc_rt.h"
{str_abi.dispatcher_include(s)}{C_HELPERS}
#define SYM_CAP {max(1, len(s.symbols))}

/* the versions, one native function each */
{decls}

static const char *const version_infos[{len(s.versions)}] = {{
{infos}
}};

/* thread-local, so concurrent callers each see their own */
static __thread int last_version_tl = -1;
{self.run_statics()}
/* device types this target's kernels can read */
static const int32_t devices[] = {{{devices}}};
#define NUM_DEVICES ((int)(sizeof devices / sizeof devices[0]))

{asserts}
"""

    def tensor_sigs(self) -> str:
        """One onnxcc_tensor_sig per input and output: what onnxcc_check_tensor checks."""
        def sig(kind: str, t: TensorSig, strided: bool) -> str:
            code, bits = DL_DTYPE[t.dtype]
            return (f'  {{"{kind}", "{_c_string(t.name)}", "{t.dtype.value}", "{_c_string(_shape_text(t.shape))}", '
                    f"{t.rank}, {code}, {bits}, {int(strided)}}},")
        s = self.spec
        ins = [sig("input", t, ok) for t, ok in zip(s.inputs, self.strided, strict=True)] or ["  {0},"]
        outs = [sig("output", t, False) for t in s.outputs] or ["  {0},"]
        return "\n".join([f"static const onnxcc_tensor_sig in_sigs[{max(1, len(s.inputs))}] = {{", *ins, "};",
                          f"static const onnxcc_tensor_sig out_sigs[{max(1, len(s.outputs))}] = {{", *outs, "};"])

    def tensor_check_call(self, kind: str, arr: str, k: int, devs: str, n_devs: str, spans: str) -> str:
        sigs = "in_sigs" if kind == "input" else "out_sigs"
        return (f"  if ((rc = onnxcc_check_tensor(&{arr}[{k}], &{sigs}[{k}], {devs}, {n_devs}, &{spans}[{k}])) != 0) "
                "return rc;")

    def bind_fn(self) -> str:
        s = self.spec
        count = _Msg(f"expected {len(s.inputs)} inputs ({', '.join(t.name for t in s.inputs)}), got ")
        out = [self.tensor_sigs(), "",
               "/* Validates the inputs (on one of devs[]), records their spans and binds s[] from their dims. */",
               "static int bind_inputs(const DLTensor *inputs, int n_inputs, int64_t *s, const int32_t *devs, "
               "int n_devs, onnxcc_span *in_sp) {",
               "  int rc = 0;", "  (void)s; (void)rc;",
               f"  if (n_inputs != {len(s.inputs)}) " + count.value("n_inputs").fail(self.code("ERR_ARGS")),
               "  if (inputs == NULL && n_inputs > 0) " + _Msg("inputs is NULL").fail(self.code("ERR_ARGS"))]
        for k in range(len(s.inputs)):
            out.append(self.tensor_check_call("input", "inputs", k, "devs", "n_devs", "in_sp"))
        out.append("  /* bind each symbol where it first appears, then check its range at once */")
        for b in self.plan.bindings:
            out += self.binding(b)
        out += self.data_bindings()
        out.append("  /* every other input dim must agree with the bound symbols */")
        for i, j, d in self.plan.checks:
            out += self.dim_check(i, j, d)
        if s.run_dims:
            out.append("  /* run-determined dims: the upper bound (the kernel writes back the true value) */")
        for name, bound in s.run_dims.items():
            out.append(f"  {self.names[name]} = {self.ci(canon(bound))};")
        if s.constraints:
            out.append("  /* the model's own constraints */")
        for expr, origin in s.constraints:
            msg = _Msg(f"constraint {text(expr)} does not hold")
            self.sym_sources(msg, expr)
            if origin:
                msg.text(f", needed by {origin}")
            try:
                cond = c_bool(expr, self.names)
            except UnsupportedExpr as e:
                needed = f" (needed by {origin})" if origin else ""
                raise CompileError(f"building lib{s.name}.so: constraint {text(expr)}{needed} "
                                   f"cannot be checked: {e}") from None
            out.append(f"  if (!{cond}) {msg.fail(self.code('ERR_CONSTRAINT'))}")
        out += ["  return 0;", "}"]
        return "\n".join(out)

    def data_bindings(self) -> list[str]:
        """Symbols read from an int64 input's data (value symbols), range-checked at once."""
        s = self.spec
        if not s.data_dims:
            return []
        if "kDLCPU" not in self.target.devices or self.target.shape_devices is not None:
            raise CompileError(f"artifact {s.name}: symbols read from input data need a target whose "
                               f"dispatcher reads host memory (--target cpu), not {s.target}")
        out = ["  /* symbols read from the data of size inputs, before any kernel runs */"]
        for name, (i, j) in s.data_dims.items():
            info = s.symbols[s.symbol_index()[name]]
            var = self.names[name]
            out.append(f"  {var} = ((const int64_t *)((const char *)inputs[{i}].data + "
                       f"inputs[{i}].byte_offset))[{j}];")
            msg = _Msg(f'input "{s.inputs[i].name}" element {j}: {name} = ').value(var)
            msg.text(f", out of range [{info.lo}, {info.hi}] (sizes only; compile a version for this value "
                     f"with --specialize-value {s.inputs[i].name}=...)")
            out.append(f"  if ({var} < {info.lo} || {var} > {info.hi}) " + msg.fail(self.code("ERR_SHAPE")))
        return out

    def binding(self, b: _Binding) -> list[str]:
        info = self.spec.symbols[b.index]
        dim = f"inputs[{b.input}].shape[{b.dim}]"
        var = self.names[b.symbol]
        lines = []
        if b.expr is None:
            lines.append(f"  {var} = {dim};")
            head = _Msg(f"{b.where}: {b.symbol} = ").value(var)
        else:
            num = f"({dim} - {self.ci(b.offset)})" if b.offset != 0 else dim
            not_multiple = _Msg(f"{b.where}: expected {text(b.expr)}")
            self.sym_context(not_multiple, b.offset)
            not_multiple.text(", got ").value(dim)
            not_multiple.text(f", which is not {text(b.expr)} for any integer {b.symbol}")
            lines += [f"  if (onnxcc_mod({num}, {b.coeff}) != 0) {not_multiple.fail(self.code('ERR_SHAPE'))}",
                      f"  {var} = {num} / {b.coeff};"]
            head = _Msg(f"{b.where}: {text(b.expr)} = ").value(dim).text(f" gives {b.symbol} = ").value(var)
        range_msg = head.copy().text(f", out of range [{info.lo}, {info.hi}]")
        lines.append(f"  if ({var} < {info.lo} || {var} > {info.hi}) " + self.fail(range_msg, "ERR_SHAPE"))
        if info.multiple_of > 1:
            mult_msg = head.copy().text(f", not a multiple of {info.multiple_of}")
            lines.append(f"  if ({var} % {info.multiple_of} != 0) " + self.fail(mult_msg, "ERR_SHAPE"))
        return lines

    def dim_check(self, i: int, j: int, d) -> list[str]:
        t = self.spec.inputs[i]
        dim = f"inputs[{i}].shape[{j}]"
        msg = _Msg(f'input "{t.name}" dim {j}: expected ')
        if isinstance(d, int):
            msg.text(str(d))
            return [f"  if ({dim} != {d}) " + msg.text(", got ").value(dim).fail(self.code("ERR_SHAPE"))]
        want = self.ci(d)
        if isinstance(d, sympy.Symbol):
            msg.text(f"{d.name} = ").value(want).text(f" ({self.bind[d.name].provenance})")
        else:
            msg.text(f"{text(d)} = ").value(want)
            self.sym_context(msg, d)
        return [f"  if ({dim} != {want}) " + msg.text(", got ").value(dim).fail(self.code("ERR_SHAPE"))]

    def output_dims_fn(self) -> str:
        out = ["/* The shape of output k under s[]; fails on a negative extent. */",
               "static int output_dims(const int64_t *s, int k, int64_t *dims) {",
               "  (void)s; (void)dims;", "  switch (k) {"]
        for k, t in enumerate(self.spec.outputs):
            out.append(f"  case {k}:")
            for j, d in enumerate(map(canon, t.shape)):
                out.append(f"    dims[{j}] = {self.ci(d)};")
                if not isinstance(d, (int, sympy.Symbol)):  # symbols are range-checked already
                    msg = _Msg(f'output "{t.name}" dim {j}: {text(d)} = ').value(f"dims[{j}]")
                    msg.text(" is negative")
                    self.sym_context(msg, d, only=True)
                    out.append(f"    if (dims[{j}] < 0) {msg.fail(self.code('ERR_SHAPE'))}")
            out.append("    return 0;")
        out += ["  }", "  return 0;", "}"]
        return "\n".join(out)

    def run_fn(self) -> str:
        s, n = self.spec, self.n
        max_rank = max([1] + [t.rank for t in s.outputs])
        count = _Msg(f"expected {len(s.outputs)} outputs ({', '.join(t.name for t in s.outputs)}), got ")
        lines = [f"int {n}_run(const DLTensor *inputs, int n_inputs, DLTensor *outputs, int n_outputs) {{",
                 "  int64_t s[SYM_CAP];", "  int rc;",
                 f"  onnxcc_span in_sp[{max(1, len(s.inputs))}], out_sp[{max(1, len(s.outputs))}];",
                 "  onnxcc_error_clear();", *str_abi.run_begin(s), "  last_version_tl = -1;",
                 *(["  run_ok_tl = 0;"] if s.run_dims else []),
                 "  if ((rc = cpu_check()) != 0) return rc;",
                 "  if ((rc = bind_inputs(inputs, n_inputs, s, devices, NUM_DEVICES, in_sp)) != 0) return rc;",
                 "  int v = select_version(inputs, s);",
                 f"  if (v < 0) return {self.code('ERR_GUARD')};",
                 f"  if (n_outputs != {len(s.outputs)}) " + self.fail(count.value("n_outputs"), "ERR_ARGS"),
                 "  if (outputs == NULL && n_outputs > 0) " + self.fail(_Msg("outputs is NULL"), "ERR_ARGS"),
                 f"  int64_t dims[{max_rank}];", "  (void)dims;"]
        for k, t in enumerate(s.outputs):
            lines.append(self.tensor_check_call("output", "outputs", k, "devices", "NUM_DEVICES", "out_sp"))
            lines.append(f"  if ((rc = output_dims(s, {k}, dims)) != 0) return rc;")
            for j, d in enumerate(map(canon, t.shape)):
                msg = _Msg(f'output "{t.name}" dim {j}: expected ')
                msg.text(f"{text(d)} = " if not isinstance(d, int) else "").value(f"dims[{j}]")
                if not isinstance(d, sympy.Symbol):
                    self.sym_context(msg, d, only=True)
                msg.text(", got ").value(f"outputs[{k}].shape[{j}]")
                lines.append(f"  if (outputs[{k}].shape[{j}] != dims[{j}]) " + self.fail(msg, "ERR_SHAPE"))
        lines.append(layout.aliasing_call(s))
        nin, nout = max(1, len(s.inputs)), max(1, len(s.outputs))
        lines += [f"  void *in_ptrs[{nin}];", f"  void *out_ptrs[{nout}];",
                  "  (void)in_ptrs; (void)out_ptrs;"]
        for arr, ptrs, n_ in (("inputs", "in_ptrs", len(s.inputs)), ("outputs", "out_ptrs", len(s.outputs))):
            lines += [f"  {ptrs}[{k}] = (char *){arr}[{k}].data + {arr}[{k}].byte_offset;" for k in range(n_)]
        lines += self.target.run_prologue()
        compacts = any(self.strided)
        if compacts:  # strided inputs: copied compact first (runtime/onnxcc_layout.c says why)
            any_strided = " | ".join(f"in_sp[{k}].strided" for k, ok in enumerate(self.strided) if ok)
            lines += ["  void *compact_buf = NULL;",
                      "  _Alignas(64) unsigned char compact_small[ONNXCC_COMPACT_SMALL];",
                      f"  if (({any_strided}) && (rc = onnxcc_compact_inputs(inputs, in_sp, "
                      f"{len(s.inputs)}, in_ptrs, compact_small, sizeof compact_small, &compact_buf)) != 0) return rc;"]
        free_first = "onnxcc_aligned_free(compact_buf); " if compacts else ""
        lines += ["  last_version_tl = v;", "  switch (v) {"]
        for k, v in enumerate(s.versions):
            # the workspace size is evaluated with checked arithmetic: an overflow is refused
            # (ERR_ALLOC, naming the size) instead of wrapping to a small arena
            ws_expr = canon(v.workspace_bytes)
            too_big = _Msg(f"version {k}: workspace size {text(ws_expr)} bytes overflows int64")
            self.sym_context(too_big, ws_expr, only=True)
            lines.append(f"  case {k}: {{")
            # each repeated subexpression (a conv net's nested floors) once, as a local
            lets, ws_c = c_int_checked_lets(ws_expr, self.names, "ws_ovf", "ws_")
            lines += ["    int ws_ovf = 0;", *(f"    {x}" for x in lets),
                      f"    int64_t ws = {ws_c};",
                      f"    if (ws_ovf) {self.fail(too_big, 'ERR_ALLOC', free_first)}",
                      f"    {self.target.version_call(k, v, 'ws')} break;", "  }"]
        lines += [f"  default: rc = {self.code('ERR_GUARD')}; break;", "  }"]
        if compacts:
            lines.append("  if (compact_buf != NULL) onnxcc_aligned_free(compact_buf);")
        if s.run_dims:  # the kernel wrote the run-determined symbols' true values into s[]
            lines += ["  if (rc == 0) {", "    for (int k = 0; k < SYM_CAP; ++k) run_syms_tl[k] = s[k];",
                      "    run_ok_tl = 1;", "  }"]
        lines += [*str_abi.run_end(s), "  return rc;", "}"]
        return "\n".join(lines)

    def aliasing_fn(self) -> str:
        """The names the overlap check's messages use and, where some version runs in place,
        its table (layout.py): every other overlap is refused with ERR_ARGS naming both."""
        def names(ts: list[TensorSig]) -> str:
            return ", ".join(f'"{_c_string(t.name)}"' for t in ts) or "NULL"

        s = self.spec
        table = [layout.in_place_table(s)] if layout.has_in_place(s) else []
        return "\n".join([
            f"static const char *const input_names[{max(1, len(s.inputs))}] = {{{names(s.inputs)}}};",
            f"static const char *const output_names[{max(1, len(s.outputs))}] = {{{names(s.outputs)}}};",
            *table])

    def select_version(self) -> str:
        """select_version(inputs, s): the first version whose guard holds (its value guards
        too), with the symbols it fixes set in s[]; -1 with the error set when none does."""
        lines = ["/* The version this call runs: the first whose guard holds; sets the symbols it fixes. */",
                 "static int select_version(const DLTensor *inputs, int64_t *s) {",
                 "  (void)inputs; (void)s;", "  int v = -1;"]
        for k, v in enumerate(self.spec.versions):
            cond = c_bool(v.guard, self.names)
            if v.value_guards:
                cond = f"value_guard_holds({k}, inputs)" if cond == "1" else f"{cond} && value_guard_holds({k}, inputs)"
            cond = cpu_version_guard(self.spec, v, cond)
            if cond == "1":  # the generic version: nothing after it can be reached
                lines.append(f"  {'' if k == 0 else 'else '}v = {k};")
                break
            lines.append(f"  {'if' if k == 0 else 'else if'} ({cond}) v = {k};")
        else:
            lines.append(f"  if (v < 0) {self.guard_failure()}")
        lines += self.set_version_dims()
        lines += ["  return v;", "}"]
        return "\n".join(lines)

    def guard_failure(self) -> str:
        """Sets the error of a call no version accepts (NAME_run returns ERR_GUARD)."""
        msg = _Msg("no version accepts this call")
        shown = [x for x in self.spec.symbols if x.name not in self.spec.version_dims]
        for k, sinfo in enumerate(shown):
            msg.text(("; " if k else " (") + f"{sinfo.name} = ").value(self.names[sinfo.name])
        needs = (f"version {k} needs {_guard_text(v)}" for k, v in enumerate(self.spec.versions))
        msg.text(("): " if shown else ": ") + "; ".join(needs))
        valued = {}
        for v in self.spec.versions:
            for g in v.value_guards:
                valued.setdefault(g.name, []).append(g.text)
        for name, texts in valued.items():
            msg.text(f'; input "{name}" has another value than the ones compiled ({" | ".join(texts)}): '
                     f"compile a version for it with --specialize-value {name}=...")
        return msg.fail("-1")

    def set_version_dims(self) -> list[str]:
        vd = self.spec.version_dims
        if not vd:
            return []
        lines = ["  switch (v) {"]
        for k in range(len(self.spec.versions)):
            sets = [f"{self.names[name]} = {self.ci(canon(per[k]))};" for name, per in vd.items()
                    if per[k] is not None]
            if sets:
                lines.append(f"  case {k}: " + " ".join(sets) + " break;")
        lines += ["  default: break;", "  }"]
        return lines

    def value_guards_fn(self) -> str:
        """value_guard_holds(k, inputs): the inputs hold the values version k was compiled for
        (element count, then the bytes; the dtype and compactness bind_inputs checked)."""
        out = ["/* 1 when the inputs hold the values version k was compiled for. */",
               "static int value_guard_holds(int k, const DLTensor *inputs) {", "  (void)inputs;",
               "  switch (k) {"]
        tables = []
        for k, v in enumerate(self.spec.versions):
            if not v.value_guards:
                continue
            out.append(f"  case {k}:")
            for j, g in enumerate(v.value_guards):
                t = self.spec.inputs[g.input]
                arr = f"value_{k}_{j}"
                body = ", ".join(str(b) for b in g.data) or "0"
                tables.append(f"static const unsigned char {arr}[{max(1, len(g.data))}] = {{{body}}};"
                              f"  /* {_comment(t.name)} == {_comment(g.text)} */")
                numel = " * ".join(f"inputs[{g.input}].shape[{d}]" for d in range(t.rank)) or "1"
                out.append(f"    if (({numel}) != {g.numel}) return 0;")
                if g.data:
                    out.append(f"    if (memcmp((const char *)inputs[{g.input}].data + inputs[{g.input}].byte_offset, "
                               f"{arr}, {len(g.data)}) != 0) return 0;")
            out.append("    return 1;")
        out += ["  default: return 1;", "  }", "}"]
        return "\n".join(tables + out)

    def run_statics(self) -> str:
        if not self.spec.run_dims:
            return ""
        return ("/* this thread's last successful run: its symbols, run-determined ones as the run set them */\n"
                "static __thread int64_t run_syms_tl[SYM_CAP];\nstatic __thread int run_ok_tl = 0;\n")

    def output_dims_api(self) -> str:
        if not self.spec.run_dims:
            return ""
        n, nout = self.n, len(self.spec.outputs)
        return f"""
int {n}_output_dims(int output, int64_t *shape) {{
  if (!run_ok_tl) {{
    onnxcc_error_set("{n}_output_dims: no successful {n}_run on this thread");
    return {self.code("ERR_ARGS")};
  }}
  if (output < 0 || output >= {nout} || shape == NULL) {{
    onnxcc_error_set("{n}_output_dims: output index %d out of range [0, {nout}) or shape is NULL", output);
    return {self.code("ERR_ARGS")};
  }}
  return output_dims(run_syms_tl, output, shape);
}}
"""

    def api_fns(self) -> str:
        n, nout = self.n, len(self.spec.outputs)
        # only shapes and dtypes are read: a device target may take host descriptions too
        devs, shape_devs = "devices, NUM_DEVICES", ""
        if self.target.shape_devices is not None:
            devs = "shape_devices, NUM_SHAPE_DEVICES"
            listed = ", ".join(self.target.shape_devices)
            shape_devs = (f"static const int32_t shape_devices[] = {{{listed}}};\n"
                          "#define NUM_SHAPE_DEVICES ((int)(sizeof shape_devices / sizeof shape_devices[0]))\n\n")
        stream = self.target.api_defs(n)
        head = f"int {n}_output_shape(const DLTensor *inputs, int n_inputs, int output, int64_t *shape) {{"
        # a value version fixes some output dims: the shape is the chosen version's
        select = (f"\n  if (select_version(inputs, s) < 0) return {self.code('ERR_GUARD')};"
                  if self.spec.version_dims else "")
        return shape_devs + head + f"""
  int64_t s[SYM_CAP];
  onnxcc_span in_sp[{max(1, len(self.spec.inputs))}];
  int rc;
  onnxcc_error_clear();
  if ((rc = bind_inputs(inputs, n_inputs, s, {devs}, in_sp)) != 0) return rc;{select}
  if (output < 0 || output >= {nout}) {{
    onnxcc_error_set("output index %d out of range [0, {nout})", output);
    return {self.code("ERR_ARGS")};
  }}
  if (shape == NULL) {{
    onnxcc_error_set("shape is NULL");
    return {self.code("ERR_ARGS")};
  }}
  return output_dims(s, output, shape);
}}

const char *{n}_last_error(void) {{ return onnxcc_error_get(); }}

int {n}_num_versions(void) {{ return {len(self.spec.versions)}; }}

const char *{n}_version_info(int version) {{
  return version >= 0 && version < {len(self.spec.versions)} ? version_infos[version] : NULL;
}}

int {n}_last_version(void) {{ return last_version_tl; }}
{stream}{self.output_dims_api()}"""

    def source(self) -> str:
        parts = [self.prelude(), cpu_check_fn(self.spec), cpu_levels_fn(self.spec), self.bind_fn(),
                 self.value_guards_fn(), self.select_version(), self.output_dims_fn(), self.aliasing_fn(),
                 self.run_fn(), self.api_fns(), _identity_defs(self.spec), signature_defs(self.spec, DL_DTYPE)]
        if has_run_alloc(self.spec, self.target.devices, self.target.shape_devices):
            parts.append(run_alloc_fn(self.spec, DL_DTYPE, self.code))
        if str_abi.string_outputs(self.spec):
            parts.append(str_abi.api_defs(self.spec))
        return "\n\n".join(p.rstrip("\n") for p in parts) + "\n"


def generate_dispatcher(spec: ArtifactSpec) -> str:
    """The C source of NAME_run, NAME_output_shape and the introspection functions."""
    return _Dispatch(spec).source()


# ---- NAME.json ---------------------------------------------------------------------------

def _onnxcc_version() -> str:
    from ...version import __version__

    return __version__


def generate_metadata(spec: ArtifactSpec) -> dict:
    spec.validate()

    def tensor(t: TensorSig) -> dict:
        d = {"name": t.name, "dtype": t.dtype.value, "shape": [text(d) for d in t.shape]}
        run = sorted({s.name for x in t.shape for s in sympy.sympify(x).free_symbols} & set(spec.run_dims))
        if run:  # allocated for the bound; NAME_output_dims gives the true shape after a run
            d["run_determined"] = run
            # bound mid-run: compact in the true shape at the start (else: the leading corner)
            d["run_layout"] = "prefix" if set(run) <= set(spec.late_dims) else "corner"
        return d

    return {
        "name": spec.name,
        "abi_version": ABI_VERSION,
        "build_id": spec.build_id,
        **({"cpu_features": list(spec.cpu_features)} if spec.cpu_features else {}),
        **({"cpu_levels": dict(spec.cpu_levels)} if spec.cpu_levels else {}),
        "onnxcc_version": _onnxcc_version(),
        "target": spec.target,
        "triple": spec.triple,
        **({"arch": spec.device.arch, "kernels": len(spec.device.kernels)} if spec.device is not None else {}),
        "library": f"lib{spec.name}.so",
        "header": f"{spec.name}.h",
        "error_codes": dict(ERROR_CODES),
        "inputs": [tensor(t) for t in spec.inputs],
        "outputs": [tensor(t) for t in spec.outputs],
        "symbols": [{"name": s.name, "lo": s.lo, "hi": s.hi, "multiple_of": s.multiple_of, "origin": s.origin}
                    for s in spec.symbols],
        "constraints": [{"text": text(e), "origin": o} for e, o in spec.constraints],
        **({"run_dims": {k: text(v) for k, v in spec.run_dims.items()}} if spec.run_dims else {}),
        **({"late_dims": list(spec.late_dims)} if spec.late_dims else {}),
        **({"data_dims": {k: {"input": spec.inputs[i].name, "element": j} for k, (i, j) in spec.data_dims.items()}}
           if spec.data_dims else {}),
        **({"version_dims": {k: [None if d is None else text(d) for d in per]
                             for k, per in spec.version_dims.items()}} if spec.version_dims else {}),
        "versions": [{"index": k, "symbol": v.symbol, "kind": v.kind, "guard": _guard_text(v),
                      "subs": dict(v.subs), "workspace_bytes": text(v.workspace_bytes), "info": v.info,
                      **({"cpu": v.cpu} if v.cpu else {}),
                      **({"value_guards": [{"input": g.name, "value": g.text} for g in v.value_guards]}
                         if v.value_guards else {}),
                      **({"launches": [{"kernel": la.kernel, "work": text(la.work)} for la in v.launches]}
                         if v.launches else {})}
                     for k, v in enumerate(spec.versions)],
        **layout.metadata(spec, layout.reads_host(link_target(spec).devices, link_target(spec).shape_devices)),
        "metadata": spec.metadata,
    }
