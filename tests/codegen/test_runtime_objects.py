"""codegen/c/runtime_objects.py: the C runtime compiled once per sources, compiler and flags,
kept in the cache directory; another flag or a changed source makes another object; an
unusable directory or a failing compile hands the sources back to the library's link."""

from __future__ import annotations

import shutil

import pytest

from onnxcc.codegen.c.link import RUNTIME_DIR, RUNTIME_SOURCES
from onnxcc.codegen.c.runtime_objects import runtime_objects

pytestmark = pytest.mark.skipif(shutil.which("cc") is None, reason="needs a C compiler")

FLAGS = ["-O2", "-fPIC", "-pthread", "-fvisibility=hidden"]


def test_compiled_once_then_reused(tmp_path, monkeypatch):
    monkeypatch.setenv("ONNXCC_CACHE_DIR", str(tmp_path / "cache"))
    sources = [RUNTIME_DIR / r for r in RUNTIME_SOURCES]
    objs = runtime_objects(sources, "cc", FLAGS)
    assert objs is not None and len(objs) == len(sources)
    for o, s in zip(objs, sources, strict=True):
        assert o.is_file() and o.name.startswith(s.stem + "-") and o.read_bytes()[:4] == b"\x7fELF"
    mtimes = [o.stat().st_mtime_ns for o in objs]
    again = runtime_objects(sources, "cc", FLAGS)
    assert again == objs and [o.stat().st_mtime_ns for o in objs] == mtimes  # not rebuilt
    other = runtime_objects(sources, "cc", [*FLAGS, "-DONNXCC_TEST_FLAG=1"])
    assert other is not None and not set(other) & set(objs)  # other flags: other objects
    assert not list((tmp_path / "cache" / "runtime-objects").glob(".*.tmp"))


def test_changed_source_gets_a_new_object(tmp_path, monkeypatch):
    monkeypatch.setenv("ONNXCC_CACHE_DIR", str(tmp_path / "cache"))
    rt = tmp_path / "rt"
    shutil.copytree(RUNTIME_DIR, rt)
    src = rt / "onnxcc_layout.c"
    first = runtime_objects([src], "cc", FLAGS)
    src.write_text(src.read_text() + "\nint onnxcc_test_extra(void) { return 7; }\n")
    second = runtime_objects([src], "cc", FLAGS)
    assert first is not None and second is not None and first != second


def test_failures_hand_the_sources_back(tmp_path, monkeypatch):
    bad = tmp_path / "bad.c"
    bad.write_text("this is not C\n")
    monkeypatch.setenv("ONNXCC_CACHE_DIR", str(tmp_path / "cache"))
    assert runtime_objects([bad], "cc", FLAGS) is None
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("ONNXCC_CACHE_DIR", str(blocker))  # a file where the directory should be
    assert runtime_objects([RUNTIME_DIR / RUNTIME_SOURCES[0]], "cc", FLAGS) is None


def test_dispatcher_alone_is_compiled_at_O1():
    from pathlib import Path

    from onnxcc.codegen.c.build import link_flags

    # runtime from cached objects, no backend C: only the generated dispatcher is compiled
    assert link_flags(FLAGS, False, []) == ["-O1", *FLAGS[1:]]
    # the runtime (or a backend's C source) compiled in the same command keeps -O2
    assert link_flags(FLAGS, True, []) == FLAGS
    assert link_flags(FLAGS, False, [Path("host.c")]) == FLAGS
    # a user's own -O level after the defaults is left alone
    assert link_flags([*FLAGS, "-O3"], False, [])[-1] == "-O3"


def test_large_dispatcher_alone_is_compiled_at_O0():
    from pathlib import Path

    from onnxcc.codegen.c.build import DISPATCH_O0_BYTES, link_flags

    # a dispatcher whose workspace formulas make gcc's -O1 cost seconds: -O0 from the threshold up
    assert link_flags(FLAGS, False, [], DISPATCH_O0_BYTES - 1)[0] == "-O1"
    assert link_flags(FLAGS, False, [], DISPATCH_O0_BYTES) == ["-O0", *FLAGS[1:]]
    # never when the runtime or a backend's C is compiled in the same command
    assert link_flags(FLAGS, True, [], DISPATCH_O0_BYTES) == FLAGS
    assert link_flags(FLAGS, False, [Path("host.c")], DISPATCH_O0_BYTES) == FLAGS
    assert link_flags([*FLAGS, "-O3"], False, [], DISPATCH_O0_BYTES)[-1] == "-O3"


def test_dispatcher_at_O0_runs_as_at_O1(tmp_path, monkeypatch):
    """The conv net's library with its dispatcher compiled at -O0 (the threshold lowered to 0):
    the same outputs, bit for bit, as the -O1 build (same kernels) and the same guard error on
    a shape no version accepts; the link command really said -O0."""
    from pathlib import Path

    import numpy as np

    import onnxcc
    from onnxcc.codegen.c import build

    model = Path(__file__).resolve().parents[2] / "models" / "convnet.onnx"
    onnxcc.compile(model, tmp_path / "o1", name="cn")
    seen = []
    run = build.subprocess.run

    def spy(cmd, *a, **k):
        seen.append(cmd)
        return run(cmd, *a, **k)

    monkeypatch.setattr(build, "DISPATCH_O0_BYTES", 0)
    monkeypatch.setattr(build.subprocess, "run", spy)
    onnxcc.compile(model, tmp_path / "o0", name="cn")
    monkeypatch.undo()
    link = [c for c in seen if "-shared" in c]
    assert link and "-O0" in link[-1] and "-O1" not in link[-1]
    a, b = onnxcc.load(tmp_path / "o1"), onnxcc.load(tmp_path / "o0")
    rng = np.random.default_rng(0)
    for shape in [(1, 3, 16, 16), (2, 3, 33, 20)]:
        x = rng.standard_normal(shape).astype(np.float32)
        got, want = b.run({"x": x}), a.run({"x": x})
        assert got.keys() == want.keys()
        for k in want:
            np.testing.assert_array_equal(got[k], want[k])
    bad = np.zeros((1, 4, 16, 16), np.float32)  # 4 channels: the model takes 3
    errors = []
    for lib in (a, b):
        with pytest.raises(Exception) as info:
            lib.run({"x": bad})
        errors.append(str(info.value).replace(str(tmp_path / "o0"), str(tmp_path / "o1")))
    assert errors[0] == errors[1]
