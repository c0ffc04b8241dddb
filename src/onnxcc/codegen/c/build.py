"""Building libNAME.so: write NAME.h, NAME.json and the dispatcher source that link.py
generates, then run the C compiler over them, the runtime and the backend's objects."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from collections.abc import Iterable
from pathlib import Path

from onnxcc.digest import file_sha256
from onnxcc.errors import CompileError

from . import strings as str_abi
from .abi import ArtifactSpec
from .link import (
    ABI_VERSION,
    RUNTIME_DIR,
    RUNTIME_SOURCES,
    api_names,
    generate_dispatcher,
    generate_header,
    generate_metadata,
    link_target,
)
from .package import cmake_config, pkg_config
from .runtime_objects import runtime_objects

# ---- building libNAME.so -----------------------------------------------------------------

def _version_script(spec: ArtifactSpec) -> str:
    # Export the API and nothing else: kernels and the runtime stay private to the .so.
    names = "".join(f"    {f};\n" for f in api_names(spec.name, link_target(spec), bool(spec.run_dims),
                                                      str_abi.string_outputs(spec)))
    return f"{{\n  global:\n{names}  local:\n    *;\n}};\n"


#: a generated dispatcher from this size (bytes of C) up is compiled at -O0: its bulk is the
#: versions' workspace-size formulas (checked multiply-adds, hundreds per version in a conv
#: net with symbolic H and W), which gcc's -O1 took 1.0-1.2 s to compile for lraspp's 187 KB
#: (0.16 s at -O0), ppocr_det_v4's 161 KB 1.1 s (0.2 s). At -O0 the inline helpers stay calls:
#: per call (kernels stubbed out) 0.53 us more on lraspp, 0.04% of its 1.2 ms run at 64x64, and
#: 1.1 us on ppocr, 0.3% of its 0.36 ms run at 2x32x32. Not lower: mobilenet_v3_small's 75 KB
#: dispatcher (0.32 s of -O1, 0.06 s of -O0) would cost 0.65 us per call, 1.3% of its 50 us
#: run at 64x64; a small dispatcher (a small model) keeps -O1
DISPATCH_O0_BYTES = 128 * 1024


def link_flags(flags: list[str], compiles_runtime: bool, extras: list[Path], dispatcher_bytes: int = 0) -> list[str]:
    """The flags of the link command. Where the only C it compiles is the generated
    dispatcher (the runtime comes as cached objects), its -O2 becomes -O1: the dispatcher is
    straight-line size arithmetic and guards run once per call, where -O2 only spends compile
    time (a symbolic conv net's 800-line dispatcher: 0.7 s of gcc at -O2, 0.4 s at -O1); a
    dispatcher of `DISPATCH_O0_BYTES` or more gets -O0."""
    if compiles_runtime or extras:  # runtime or backend C compiled here too: as it always was
        return flags
    level = "-O0" if dispatcher_bytes >= DISPATCH_O0_BYTES else "-O1"
    return [level if f == "-O2" else f for f in flags]


def _tail(s: str, lines: int = 40) -> str:
    return "\n".join(s.strip().splitlines()[-lines:])


def build_library(spec: ArtifactSpec, object_files: Iterable[str | os.PathLike],
                  out_dir: str | os.PathLike, cc: str = "cc",
                  extra_c_sources: Iterable[str | os.PathLike] = (), cflags: Iterable[str] = ()) -> Path:
    """Write NAME.h, NAME.json, NAME_dispatch.c and link libNAME.so into out_dir.

    Object files must be position independent (LLVM: reloc='pic'). A version symbol that
    no object defines fails the link (-z defs) and is named in the CompileError.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    name = spec.name
    objects = [Path(o) for o in object_files]
    extras = [Path(c) for c in extra_c_sources]
    for f in objects + extras:
        if not f.is_file():
            raise CompileError(f"building lib{name}.so: input file {f} does not exist")
    spec.build_id = content_build_id(spec, objects + extras, cc, list(cflags))
    dispatcher = generate_dispatcher(spec)
    own_objects, own_runtime, own_libs = link_target(spec).link_inputs(spec, out)
    objects += own_objects
    runtime = [*RUNTIME_SOURCES, *own_runtime, *str_abi.runtime_sources(spec)]
    libs = ["-lm", *own_libs]
    (out / f"{name}.h").write_text(generate_header(spec))
    (out / f"{name}_dispatch.c").write_text(dispatcher)
    (out / f"{name}.map").write_text(_version_script(spec))
    lib = out / f"lib{name}.so"
    # Link to a temporary name, then rename: a process that has the old library mapped
    # keeps a valid file instead of one rewritten under it.
    tmp = str(out / f".lib{name}.so.{os.getpid()}.tmp")
    flags = ["-O2", "-fPIC", "-pthread", "-fvisibility=hidden", *cflags]
    # the runtime compiled once per compiler and flags (runtime_objects.py), else with the library
    sources = [RUNTIME_DIR / r for r in runtime]
    runtime_inputs = runtime_objects(sources, cc, flags) or sources
    cmd = [*shlex.split(cc), "-shared", *link_flags(flags, runtime_inputs == sources and bool(sources), extras,
                                             len(dispatcher)),
           f"-I{out}", f"-I{RUNTIME_DIR}", "-o", tmp, str(out / f"{name}_dispatch.c"),
           *map(str, runtime_inputs), *map(str, extras), *map(str, objects),
           "-Wl,-z,defs", f"-Wl,--version-script={out / f'{name}.map'}", *libs]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True)
    except FileNotFoundError:
        Path(tmp).unlink(missing_ok=True)
        raise CompileError(f"building lib{name}.so: C compiler {cc!r} not found") from None
    if proc.returncode != 0:
        Path(tmp).unlink(missing_ok=True)
        raise CompileError(_link_failure(spec, cc, proc))
    # NAME.json records the library's size and sha256 (the loader checks both before dlopen:
    # a truncated or swapped .so is refused instead of faulting); written after the link,
    # each file renamed into place whole.
    meta = generate_metadata(spec)
    meta["library_size"] = Path(tmp).stat().st_size
    meta["library_sha256"] = file_sha256(tmp)
    meta_tmp = out / f".{name}.json.{os.getpid()}.tmp"
    # default=str: info/metadata may carry sympy numbers or expressions; the text is enough
    meta_tmp.write_text(json.dumps(meta, indent=2, default=str) + "\n")
    (out / f"{name}.pc").write_text(pkg_config(spec, meta["onnxcc_version"]))
    (out / f"{name}Config.cmake").write_text(cmake_config(spec, meta["onnxcc_version"]))
    os.replace(tmp, lib)
    os.replace(meta_tmp, out / f"{name}.json")
    for f in own_objects:  # intermediate: the library holds them now
        f.unlink()
    return lib



def content_build_id(spec: ArtifactSpec, inputs: list[Path], cc: str, cflags: list[str]) -> str:
    """The build id: a digest of everything the library is made of (the metadata, the device
    code, the objects and sources, the runtime, the compiler and flags), so the same inputs
    give the same id (reproducible builds) and different builds different ones."""
    import hashlib

    h = hashlib.sha256()
    spec.build_id = ""
    h.update(json.dumps(generate_metadata(spec), sort_keys=True, default=str).encode())
    if spec.device is not None:
        h.update(spec.device.ptx.encode())
        for k, v in sorted(spec.device.consts.items()):
            h.update(k.encode() + bytes(v))
    for f in [*inputs, *(RUNTIME_DIR / r for r in [*RUNTIME_SOURCES, *str_abi.runtime_sources(spec)]),
              RUNTIME_DIR / "onnxcc_rt.h"]:
        h.update(file_sha256(f).encode())
    h.update(json.dumps([cc, cflags, ABI_VERSION]).encode())
    return h.hexdigest()[:16]


def _link_failure(spec: ArtifactSpec, cc: str, proc: subprocess.CompletedProcess) -> str:
    msg = f"building lib{spec.name}.so: {cc} failed with exit code {proc.returncode}"
    undefined = set(re.findall(r"undefined reference to [`'\"]([A-Za-z_][A-Za-z0-9_]*)", proc.stderr))
    missing = [f"version {k}'s kernel {v.symbol}" for k, v in enumerate(spec.versions)
               if v.symbol in undefined]
    if missing:
        msg += f": {', '.join(missing)} not defined by any object file"
    elif undefined:
        msg += f": undefined symbol(s) {', '.join(sorted(undefined))}"
    return msg + "\n" + _tail(proc.stderr)
