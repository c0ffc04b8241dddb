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
