"""The cache never breaks a build (issue 17): an unusable cache directory is bypassed with a
one-line warning, a damaged entry (a file where the entry should be, an unlisted file inside)
is rebuilt, directories are created private, and a cache another user could write is refused."""

from __future__ import annotations

import os
import stat

import numpy as np
import pytest
from click.testing import CliRunner

import onnxcc
from onnxcc.cli import main
from onnxcc.compiler import CompileOptions, compile_cached
from onnxcc.runtime.cache import ArtifactCache


def _works(path):
    out = onnxcc.load(path).run({"x": np.array([[-1, 2, -3]], np.float32)})["y"]
    np.testing.assert_array_equal(out, [[0, 2, 0]])


def _bypassed(cache, model_path, capsys, needle):
    path, hit = compile_cached(model_path, CompileOptions(), cache)
    assert not hit and not str(path).startswith(str(cache.root))
    _works(path)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("warning: ") and needle in err[0], err
    assert err[0].endswith("building without the cache")
    assert cache.events[-1][0] == "bypass"


def test_cache_dir_env_pointing_at_a_file(tmp_path, model_path, capsys, monkeypatch):
    f = tmp_path / "afile"
    f.write_text("x")
    monkeypatch.setenv("ONNXCC_CACHE_DIR", str(f))
    _bypassed(ArtifactCache(), model_path, capsys, "is not a directory")
    assert f.read_text() == "x"


def test_cache_dir_that_cannot_be_created(tmp_path, model_path, capsys):
    f = tmp_path / "afile"
    f.write_text("x")
    _bypassed(ArtifactCache(f / "sub"), model_path, capsys, "cannot be created")


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only directory anyway")
def test_read_only_cache_dir(tmp_path, model_path, capsys):
    root = tmp_path / "ro"
    root.mkdir(mode=0o500)
    _bypassed(ArtifactCache(root), model_path, capsys, "not writable")


def test_world_writable_cache_is_refused(tmp_path, model_path, capsys):
    root = tmp_path / "ww"
    root.mkdir()
    root.chmod(0o777)
    _bypassed(ArtifactCache(root), model_path, capsys, "writable by every user")


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give a directory to another user")
def test_foreign_owned_cache_is_refused(tmp_path, model_path, capsys):
    root = tmp_path / "foreign"
    root.mkdir(mode=0o700)
    os.chown(root, 54321, 54321)
    _bypassed(ArtifactCache(root), model_path, capsys, "owned by another user (uid 54321)")


def test_directories_are_created_private(tmp_path, model_path):
    cache = ArtifactCache(tmp_path / "a" / "b")
    path, _ = compile_cached(model_path, CompileOptions(), cache)
    for d in (tmp_path / "a", tmp_path / "a" / "b", path.parent, path):
        assert stat.S_IMODE(d.stat().st_mode) & 0o077 == 0, (d, oct(d.stat().st_mode))


def test_entry_path_that_is_a_file_is_rebuilt(tmp_path, model_path):
    cache = ArtifactCache(tmp_path / "c")
    path, _ = compile_cached(model_path, CompileOptions(), cache)
    import shutil

    shutil.rmtree(path)
    path.write_text("not an entry")
    again, hit = compile_cached(model_path, CompileOptions(), cache)
    assert not hit and again == path and again.is_dir()
    assert ("corrupt", again.name, "entry is not a directory") in cache.events
    _works(again)
    assert compile_cached(model_path, CompileOptions(), cache)[1]


@pytest.mark.parametrize("extra", ["file", "dir"])
def test_unlisted_file_in_an_entry_is_rebuilt(tmp_path, model_path, extra):
    cache = ArtifactCache(tmp_path / "c")
    path, _ = compile_cached(model_path, CompileOptions(), cache)
    if extra == "file":
        (path / "evil.so").write_bytes(b"\x7fELF")
    else:
        (path / "sub").mkdir()
    again, hit = compile_cached(model_path, CompileOptions(), cache)
    assert not hit and again == path
    assert any(e[0] == "corrupt" and "unlisted file" in e[2] for e in cache.events)
    assert not (path / "evil.so").exists() and not (path / "sub").exists()
    _works(again)


def test_cli_run_with_a_cache_env_that_is_a_file(tmp_path, model_path):
    f = tmp_path / "afile"
    f.write_text("x")
    # (--cache-dir FILE is click's usage error; the environment variable is not checked by click)
    res = CliRunner().invoke(main, ["run", str(model_path), "--random", "N=2"], env={"ONNXCC_CACHE_DIR": str(f)})
    assert res.exit_code == 0, res.output
    warnings = [ln for ln in res.stderr.splitlines() if ln.startswith("warning:")]
    assert len(warnings) == 1 and "is not a directory; building without the cache" in warnings[0]
