"""What one target puts into an artifact's dispatcher, header and link (`LinkTarget`), and
the constants every part of the link shares: the ABI version, the return codes, the DLPack
dtype codes, the exported API's names."""

from __future__ import annotations

import re
from pathlib import Path

from onnxcc.errors import CompileError
from onnxcc.ir.types import DType

from . import strings as str_abi
from .abi import ArtifactSpec, VersionSpec
from .package import SIGNATURE_API

RUNTIME_DIR = Path(__file__).parent / "runtime"
RUNTIME_SOURCES = ("onnxcc_rt.c", "onnxcc_layout.c")

ABI_VERSION = 1
#: the artifact's identity functions (NAME_ prefixed; _identity_header / identity_defs)
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
DISPATCH_STATICS = {"sig_in_infos", "sig_out_infos", "cpu_check", "cpu_missing", "cpu_masked", "cpu_state",
                     "cpu_missing_name", "cpu_level", "cpu_level_state", "cpu_forced", "cpu_level_test",
                     "bind_inputs", "output_dims", "devices", "version_infos", "last_version_tl", "run_syms_tl",
                     "run_ok_tl", "select_version", "value_guard_holds",
                     "input_names", "output_names", "in_place_ok", "in_sigs", "out_sigs"}


def runtime_define(name: str, source: Path = RUNTIME_DIR / "onnxcc_rt.c") -> int:
    """The integer of `#define NAME <integer>` in a runtime source: a constant the generated
    code must agree with (the thread pool's chunks per thread), defined once, in the C the
    runtime is compiled from, and read here instead of repeated; a source without it is an
    error, not a default."""
    m = re.search(rf"^#define {re.escape(name)} (\d+)\b", source.read_text(), re.M)
    if m is None:
        raise CompileError(f"{source.name} has no `#define {name} <integer>`")
    return int(m.group(1))


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


def dlpack_types() -> str:
    """The DLPack block of onnxcc_rt.h; NAME.h repeats it so C callers need no runtime header."""
    h = (RUNTIME_DIR / "onnxcc_rt.h").read_text()
    return h[h.index("/* BEGIN DLPACK"):h.index("/* END DLPACK */")]


def api_names(name: str, target: LinkTarget = CPU_LINK, run_dims: bool = False, strings: bool = False) -> list[str]:
    """The exported functions; `NAME_output_dims` / `NAME_strings_*` only where needed."""
    extra = tuple(target.api_extra) + (("output_dims",) if run_dims else ()) + (str_abi.API if strings else ())
    if run_dims and "kDLCPU" in target.devices and target.shape_devices is None:
        extra += ("run_alloc",)  # library-allocated outputs (managed.py)
    return [f"{name}_{f}" for f in ("run", "output_shape", "last_error", "num_versions", "version_info",
                                    "last_version", *IDENTITY_API, *SIGNATURE_API, *extra)]
