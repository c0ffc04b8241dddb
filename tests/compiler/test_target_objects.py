"""A target is an object (codegen/backend.py), never an `if target == ...` in shared code."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import onnxcc
from onnxcc.codegen.c.abi import ArtifactSpec, TensorSig, VersionSpec
from onnxcc.codegen.c.link import CPU_LINK, generate_dispatcher, link_target
from onnxcc.codegen.cpu.backend import CpuBackend
from onnxcc.codegen.cuda.backend import CudaBackend
from onnxcc.errors import CompileError
from onnxcc.ir import DType

SRC = Path(onnxcc.__file__).parent
#: where knowing a target by name is the job: the backends themselves and their registry
BACKEND_FILES = {"codegen/backend.py", "codegen/cpu/backend.py", "codegen/cuda/backend.py"}
#: runtime/ reads a built artifact's format (its "target" field) and imports nothing of the
#: compiler; it is outside the shared compile path this rule is about
EXEMPT_DIRS = ("runtime/",)
TARGET_COMPARE = re.compile(
    # x.target == "cuda", get("target") != "cpu", target in ("cpu", ...)
    r"""target\w*['"]?\)?\s*(?:[!=]=|\bnot\s+in\b|\bin\b)\s*[(\['"]"""
    r"""|[!=]=\s*['"](?:cpu|cuda)['"]"""                                # ... == "cuda"
    r"""|['"](?:cpu|cuda)['"]\s*[!=]=""")                              # "cuda" == ...


def _offences(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if TARGET_COMPARE.search(line)]


def test_the_pattern_catches_the_shapes_it_must():
    for bad in ('if options.target == "cuda":', "extra = x if spec.target != 'cpu' else y",
                'self._cuda = self.meta.get("target") == "cuda"', 'if target in ("cpu", "x"):',
                'where = "a" if "cpu" == t else "b"'):
        assert _offences(bad), bad
    for ok in ('spec.target, spec.triple = self.name, TRIPLE', '"target": spec.target,',
               "if spec.target not in BACKENDS:", 'name: ClassVar[str] = "cuda"'):
        assert not _offences(ok), ok


def test_no_target_string_compares_outside_the_backends():
    found = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel in BACKEND_FILES or rel.startswith(EXEMPT_DIRS):
            continue
        found += [f"{rel}: {line}" for line in _offences(path.read_text())]
    # `spec.target not in BACKENDS` (an unknown-name check) is the one allowed shape
    found = [f for f in found if "not in BACKENDS" not in f]
    assert not found, "target compared by name outside the backends:\n" + "\n".join(found)


def test_cuda_backend_does_not_import_the_cpu_backend():
    paths = sorted((SRC / "codegen" / "cuda").glob("*.py"))
    assert {p.name for p in paths} >= {"emit.py", "host.py", "backend.py"}
    for path in paths:
        tree = ast.parse(path.read_text())
        mods = {("." * n.level) + (n.module or "") for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert not any(m.startswith(("..cpu", "onnxcc.codegen.cpu")) for m in mods), path.name


def _spec(target: str) -> ArtifactSpec:
    x = TensorSig("x", DType.f32, [4])
    return ArtifactSpec("m", [x], [TensorSig("y", DType.f32, [4])], [], [], [VersionSpec("m_v0", True)],
                        target=target)


def test_link_takes_what_differs_from_the_backend_object():
    assert link_target(_spec("cpu")) is CpuBackend.link is CPU_LINK
    assert link_target(_spec("cuda")) is CudaBackend.link
    assert CudaBackend.link.api_extra == ("set_stream",) and CPU_LINK.api_extra == ()
    c = generate_dispatcher(_spec("cpu"))
    assert "onnxcc_call_version(0, m_v0" in c and "set_stream" not in c
    with pytest.raises(CompileError, match="target cuda needs the device code"):
        generate_dispatcher(_spec("cuda"))
    with pytest.raises(CompileError, match="unknown target 'tpu'"):
        generate_dispatcher(_spec("tpu"))


def test_backends_declare_capabilities_as_attributes():
    assert CpuBackend.schedules and not CudaBackend.schedules
    assert "ptx" in CudaBackend.emit_stages and "ptx" not in CpuBackend.emit_stages
    assert CpuBackend(features="+avx512f,+avx").vector_width() == 16
    assert CpuBackend(features="+sse4.2").vector_width() == 4
    assert CudaBackend().vector_width() == 32
