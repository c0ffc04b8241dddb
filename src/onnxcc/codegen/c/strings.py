"""String tensors in the C ABI: what link.py adds to an artifact that has any.

The ABI: a string tensor is a DLTensor with dtype {kDLOpaqueHandle, 64, 1} whose elements
are `const char *` pointers to NUL-terminated UTF-8 (compact, row-major, on the CPU). Input
strings belong to the caller and are only read. An output element points either to an
input's string (an op that moves elements: Identity, Reshape, Gather, ...), to a constant
of the library (a LabelEncoder value), or into the calling thread's string arena
(runtime/onnxcc_strings.c): strings the library made during the call. The arena is emptied
when the next NAME_run starts on the same thread, so by default output strings stay valid
until then; `NAME_strings_take()` detaches them (they stay valid until
`NAME_strings_free(handle)`), `NAME_strings_release()` frees them at once. Why an arena
rather than one DLManagedTensor per output: the strings of one output are many small
blocks, and elements of several outputs may share them; one arena per call frees them all
at once, and the usual caller copies the text out right after the call anyway.

Artifacts without strings get nothing of this (not even the runtime file).
"""

from __future__ import annotations

from onnxcc.ir.types import DType

from .abi import ArtifactSpec

#: the runtime file of the string calls and the arena (codegen/c/runtime)
RUNTIME_SOURCE = "onnxcc_strings.c"
#: the exported functions (NAME_ prefixed) of an artifact with string outputs
API = ("strings_take", "strings_free", "strings_release")


def uses_strings(spec: ArtifactSpec) -> bool:
    """Whether some input, output or kernel of the artifact holds strings."""
    return (any(t.dtype is DType.string for t in spec.inputs + spec.outputs)
            or bool((spec.metadata or {}).get("strings")))


def string_outputs(spec: ArtifactSpec) -> bool:
    return any(t.dtype is DType.string for t in spec.outputs)


def runtime_sources(spec: ArtifactSpec) -> list[str]:
    return [RUNTIME_SOURCE] if uses_strings(spec) else []


def api_names(spec: ArtifactSpec) -> list[str]:
    return [f"{spec.name}_{f}" for f in API] if string_outputs(spec) else []


def header_notes(spec: ArtifactSpec) -> list[str]:
    """NAME.h's comment lines on string tensors (empty without them)."""
    if not any(t.dtype is DType.string for t in spec.inputs + spec.outputs):
        return []
    n = spec.name
    return [" *", " * strings (dtype str): DLPack code 3 (kDLOpaqueHandle), bits 64, lanes 1; element k is a",
            " *   `const char *` to NUL-terminated UTF-8 (compact row-major, on the CPU). Input strings are",
            " *   the caller's and only read. An output element points to an input's string, to a",
            " *   constant of the library, or to a string this thread's call made: those stay valid",
            f" *   until the next {n}_run on the same thread, unless {n}_strings_take() detached them",
            f" *   (then until {n}_strings_free()). Elements must not be NULL (the string ops refuse one)."]


def header_decl(spec: ArtifactSpec) -> str:
    if not string_outputs(spec):
        return ""
    n, up = spec.name, spec.name.upper()
    return f"""
/* String outputs: the strings this thread's last {n}_run made live until the next
 * {n}_run on this thread. {n}_strings_take() detaches them and returns a handle (NULL when
 * the call made none) that keeps them valid until {n}_strings_free(handle);
 * {n}_strings_release() frees them now. */
{up}_API void *{n}_strings_take(void);
{up}_API void {n}_strings_free(void *strings);
{up}_API void {n}_strings_release(void);
"""


def dispatcher_include(spec: ArtifactSpec) -> str:
    return '#include "onnxcc_strings.h"\n' if uses_strings(spec) else ""


def run_begin(spec: ArtifactSpec) -> list[str]:
    """NAME_run's first lines: the previous call's strings go."""
    return ["  onnxcc_strings_begin();"] if uses_strings(spec) else []


def run_end(spec: ArtifactSpec) -> list[str]:
    """NAME_run's last lines: without string outputs, nothing the call made is needed after it."""
    return ["  onnxcc_strings_release();"] if uses_strings(spec) and not string_outputs(spec) else []


def api_defs(spec: ArtifactSpec) -> str:
    if not string_outputs(spec):
        return ""
    n = spec.name
    return f"""/* NAME.h: string outputs (codegen/c/strings.py) */
void *{n}_strings_take(void) {{ return onnxcc_strings_take(); }}
void {n}_strings_free(void *strings) {{ onnxcc_strings_free(strings); }}
void {n}_strings_release(void) {{ onnxcc_strings_release(); }}
"""


__all__ = ["API", "RUNTIME_SOURCE", "api_defs", "api_names", "dispatcher_include", "header_decl",
           "header_notes", "run_begin", "run_end", "runtime_sources", "string_outputs", "uses_strings"]
