"""Host side of a target "cuda" artifact: the C that `codegen.c.link` puts into the dispatcher
(the image table and one launch function per version) and the object file that embeds the
PTX and the const buffers' bytes.

A version's launch function has the type `onnxcc_cuda_version_fn`:

    static int NAME_vK(onnxcc_cuda_call *call, const int64_t *s, void *const *in,
                       void *const *out);

It fills the argument array every kernel of the artifact takes (symbols, input and output
data pointers, workspace, status; see `codegen.cuda.emit`) and launches the version's kernels
in order, each over its work count computed from the symbols.
"""

from __future__ import annotations

from pathlib import Path

from llvmlite import ir

from onnxcc.errors import CompileError
from onnxcc.kernel.expr import ERROR_MESSAGES

from ..c.abi import ArtifactSpec, VersionSpec
from ..c.exprs import c_int
from ..c.link import LinkTarget

PTX_SYMBOL = "onnxcc_cuda_ptx"
RUNTIME_SOURCE = "onnxcc_cuda.c"


def host_const_symbol(k: int) -> str:
    return f"onnxcc_cuda_const_{k}"


def _c_str(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def prelude(spec: ArtifactSpec, names: dict[str, str]) -> str:
    """The image table and the versions' launch functions (`names`: symbol -> C value)."""
    dev = spec.device
    if dev is None:
        raise ValueError(f"artifact {spec.name}: target cuda needs DeviceCode (spec.device)")
    from .emit import parse_arch

    cc, exact = parse_arch(dev.arch)
    kindex = {k: i for i, k in enumerate(dev.kernels)}
    consts = list(dev.consts.items())
    out = ['#include "onnxcc_cuda.h"', "", f"extern const unsigned char {PTX_SYMBOL}[];"]
    out += [f"extern const unsigned char {host_const_symbol(k)}[];" for k in range(len(consts))]
    out.append("")
    if dev.kernels:
        out.append(f"static const char *const cuda_kernels[{len(dev.kernels)}] = {{")
        out += [f"  {_c_str(k)}," for k in dev.kernels]
        out.append("};")
    if consts:
        out.append(f"static const onnxcc_cuda_const cuda_consts[{len(consts)}] = {{")
        out += [f"  {{{_c_str(n)}, {host_const_symbol(k)}, {len(b)}ull}}," for k, (n, b) in enumerate(consts)]
        out.append("};")
    n_err = max(ERROR_MESSAGES) + 1 if ERROR_MESSAGES else 1
    errs = ", ".join(_c_str(ERROR_MESSAGES[c]) if c in ERROR_MESSAGES else "NULL" for c in range(n_err))
    out.append(f"static const char *const cuda_kernel_errors[{n_err}] = {{{errs}}};")
    out.append(f"""static const onnxcc_cuda_image cuda_image = {{
  (const char *){PTX_SYMBOL}, {_c_str(dev.arch)}, {cc}, {int(exact)}, {dev.block},
  {len(dev.kernels)}, {"cuda_kernels" if dev.kernels else "NULL"},
  {len(consts)}, {"cuda_consts" if consts else "NULL"},
  {n_err}, cuda_kernel_errors
}};""")
    nargs = len(spec.symbols) + len(spec.inputs) + len(spec.outputs) + 2
    for v in spec.versions:
        out.append("")
        out.append(_launch_fn(spec, v, names, kindex, nargs))
    return "\n".join(out) + "\n"


def _launch_fn(spec: ArtifactSpec, v: VersionSpec, names: dict[str, str], kindex: dict[str, int],
               nargs: int) -> str:
    lines = [f"/* version {v.symbol}: {len(v.launches)} kernel(s) */",
             f"static int {v.symbol}(onnxcc_cuda_call *call, const int64_t *s, void *const *in, "
             "void *const *out) {",
             f"  void *args[{nargs}];", "  int rc;", "  (void)s; (void)in; (void)out; (void)rc;"]
    a = 0
    for k in range(len(spec.symbols)):
        lines.append(f"  args[{a}] = (void *)&s[{k}];")
        a += 1
    for k in range(len(spec.inputs)):
        lines.append(f"  args[{a}] = (void *)&in[{k}];")
        a += 1
    for k in range(len(spec.outputs)):
        lines.append(f"  args[{a}] = (void *)&out[{k}];")
        a += 1
    lines += [f"  args[{a}] = &call->ws;", f"  args[{a + 1}] = &call->status;"]
    for launch in v.launches:
        if launch.kernel not in kindex:
            raise ValueError(f"version {v.symbol}: kernel {launch.kernel} is not in the device code")
        work = c_int(launch.work, names)
        lines.append(f"  if ((rc = onnxcc_cuda_launch(call, {kindex[launch.kernel]}, {work}, args)) != 0) "
                     f"return rc;  /* {launch.kernel} */")
    lines += ["  return 0;", "}"]
    return "\n".join(lines)


def version_call(k: int, v: VersionSpec, ws: str) -> str:
    """The dispatcher's statement running version k (in_ptrs/out_ptrs/s/dev in scope)."""
    return f"rc = onnxcc_cuda_run(&cuda_image, dev, {k}, {v.symbol}, {ws}, s, in_ptrs, out_ptrs);"


def blob_module(spec: ArtifactSpec) -> ir.Module:
    """A host LLVM module defining the PTX text and the consts' bytes the dispatcher names."""
    dev = spec.device
    assert dev is not None
    m = ir.Module(name=f"{spec.name}_cuda_blobs")

    def blob(name: str, raw: bytes, align: int) -> None:
        ty = ir.ArrayType(ir.IntType(8), max(1, len(raw)))
        g = ir.GlobalVariable(m, ty, name=name)
        g.global_constant = True
        g.visibility = "hidden"
        g.align = align
        g.initializer = ir.Constant(ty, bytearray(raw or b"\0"))

    blob(PTX_SYMBOL, dev.ptx.encode() + b"\0", 16)
    for k, raw in enumerate(dev.consts.values()):
        blob(host_const_symbol(k), raw, 64)
    return m


def write_blob_object(spec: ArtifactSpec, out_dir: Path) -> Path:
    from ..llvm.target import emit_object

    path = Path(out_dir) / f"{spec.name}_cuda_blobs.o"
    path.write_bytes(emit_object(blob_module(spec), opt=0))
    return path


class CudaLink(LinkTarget):
    """The dispatcher's CUDA part: the PTX image and a launch function per version, the
    common device of a call's tensors, `NAME_set_stream`, and the CUDA runtime (driver API
    through dlopen: linking needs no CUDA install)."""

    devices = ("kDLCUDA", "kDLCUDAManaged")
    shape_devices = ("kDLCPU", "kDLCUDAHost", "kDLCUDA", "kDLCUDAManaged")
    api_extra = ("set_stream",)
    statics = frozenset({"cuda_image", "cuda_kernels", "cuda_consts", "cuda_kernel_errors", "shape_devices"})
    where = "on one CUDA device (device pointers)"

    def validate(self, spec: ArtifactSpec) -> None:
        if spec.device is None:
            raise CompileError(f"artifact {spec.name}: target cuda needs the device code (spec.device)")

    def declarations(self, spec: ArtifactSpec, names: dict[str, str]) -> str:
        return prelude(spec, names)

    def run_prologue(self) -> list[str]:
        return ["  int dev = 0;",
                "  if ((rc = onnxcc_cuda_common_device(inputs, n_inputs, outputs, n_outputs, &dev)) != 0) "
                "return rc;"]

    def version_call(self, k: int, v: VersionSpec, ws: str) -> str:
        return version_call(k, v, ws)

    def header_api(self, name: str, up: str) -> str:
        return f"""
/* The CUstream this thread's next {name}_run calls launch on (NULL: the default stream).
 * {name}_run waits for its kernels on that stream before it returns. Thread-local. */
{up}_API void {name}_set_stream(void *stream);
"""

    def api_defs(self, name: str) -> str:
        return f"\nvoid {name}_set_stream(void *stream) {{ onnxcc_cuda_set_stream(stream); }}\n"

    def link_inputs(self, spec: ArtifactSpec, out: Path) -> tuple[list[Path], list[str], list[str]]:
        blob = write_blob_object(spec, out)
        (out / f"{spec.name}.ptx").write_text(spec.device.ptx)  # type: ignore[union-attr]
        return [blob], [RUNTIME_SOURCE], ["-ldl"]


CUDA_LINK = CudaLink()
