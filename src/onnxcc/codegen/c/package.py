"""The artifact as a C package: the model's signature at run time (NAME_input_info /
NAME_output_info), one line of documentation per return code, and the files a C build
finds it by: NAME.pc (pkg-config) and NAMEConfig.cmake (CMake's find_package), both
relative to the artifact directory so it can be moved."""

from __future__ import annotations

from .abi import ArtifactSpec, TensorSig

#: the signature functions (NAME_ prefixed)
SIGNATURE_API = ("num_inputs", "num_outputs", "input_info", "output_info")

#: one line per return code, for NAME.h
ERROR_DOCS = {
    "OK": "success",
    "ERR_ARGS": "wrong tensor counts, a NULL pointer or a bad output index",
    "ERR_DEVICE": "a tensor on a device this library cannot read",
    "ERR_DTYPE": "a tensor of the wrong dtype",
    "ERR_SHAPE": "a wrong rank, a dim outside its symbol's range or disagreeing with another, bad strides",
    "ERR_CONSTRAINT": "a constraint the model needs does not hold for these shapes",
    "ERR_GUARD": "no version accepts these shapes",
    "ERR_ALLOC": "the workspace could not be allocated (or its size overflows)",
    "ERR_KERNEL": "a version failed while running; the message has its code",
    "ERR_CPU": "this CPU lacks a feature the kernels were compiled for; the message names it",
}


def _c(s: str) -> str:
    return s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def signature_header(spec: ArtifactSpec) -> str:
    n, up = spec.name, spec.name.upper()
    return f"""
/* The model's signature at run time: name, DLPack dtype, rank and each dim as text (a number,
 * or a symbolic expression such as "batch" or "seq + 1"). NULL for an index out of range. */
typedef struct {{
  const char *name;
  DLDataType dtype;
  int32_t ndim;
  const char *const *dims;
}} {n}_tensor_info;
{up}_API int {n}_num_inputs(void);
{up}_API int {n}_num_outputs(void);
{up}_API const {n}_tensor_info *{n}_input_info(int index);
{up}_API const {n}_tensor_info *{n}_output_info(int index);
"""


def _table(kind: str, sigs: list[TensorSig], n: str, dl_dtype) -> str:
    from .exprs import text

    lines = []
    for k, t in enumerate(sigs):
        dims = ", ".join(f'"{_c(text(d))}"' for d in t.shape) or "NULL"
        lines.append(f"static const char *const {kind}_dims_{k}[] = {{{dims}}};")
    entries = []
    for k, t in enumerate(sigs):
        code, bits = dl_dtype[t.dtype]
        entries.append(f'  {{"{_c(t.name)}", {{{code}, {bits}, 1}}, {t.rank}, {kind}_dims_{k}}}')
    body = ",\n".join(entries) or '  {"", {0, 0, 0}, 0, NULL}'
    lines.append(f"static const {n}_tensor_info {kind}_infos[{max(1, len(sigs))}] = {{\n{body}\n}};")
    return "\n".join(lines)


def signature_defs(spec: ArtifactSpec, dl_dtype) -> str:
    n, nin, nout = spec.name, len(spec.inputs), len(spec.outputs)
    return f"""/* the model's signature (NAME.h: {n}_tensor_info) */
{_table("sig_in", spec.inputs, n, dl_dtype)}
{_table("sig_out", spec.outputs, n, dl_dtype)}

int {n}_num_inputs(void) {{ return {nin}; }}

int {n}_num_outputs(void) {{ return {nout}; }}

const {n}_tensor_info *{n}_input_info(int index) {{
  return index >= 0 && index < {nin} ? &sig_in_infos[index] : NULL;
}}

const {n}_tensor_info *{n}_output_info(int index) {{
  return index >= 0 && index < {nout} ? &sig_out_infos[index] : NULL;
}}
"""


def pkg_config(spec: ArtifactSpec, version: str) -> str:
    n = spec.name
    return f"""# pkg-config file of the onnxcc artifact {n}: PKG_CONFIG_PATH=DIR pkg-config --cflags --libs {n}
prefix=${{pcfiledir}}

Name: {n}
Description: {n} compiled by onnxcc (libNAME.so + NAME.h)
Version: {version}
Cflags: -I${{prefix}}
Libs: -L${{prefix}} -l{n} -Wl,-rpath,${{prefix}}
"""


def cmake_config(spec: ArtifactSpec, version: str) -> str:
    n = spec.name
    return f"""# CMake package of the onnxcc artifact {n}:
#   find_package({n} CONFIG REQUIRED PATHS /path/to/artifact)   then   target_link_libraries(app {n}::{n})
get_filename_component(_{n}_dir "${{CMAKE_CURRENT_LIST_FILE}}" DIRECTORY)
if(NOT TARGET {n}::{n})
  add_library({n}::{n} SHARED IMPORTED)
  set_target_properties({n}::{n} PROPERTIES
    IMPORTED_LOCATION "${{_{n}_dir}}/lib{n}.so"
    IMPORTED_NO_SONAME TRUE
    INTERFACE_INCLUDE_DIRECTORIES "${{_{n}_dir}}")
endif()
set({n}_VERSION "{version}")
set({n}_FOUND TRUE)
"""
