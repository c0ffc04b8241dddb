"""String tensors from C (codegen/c/strings.py's ABI): strings_abi.c calls a StringConcat +
Equal library with `const char *` tensors, keeps one call's strings past the next with
NAME_strings_take / NAME_strings_free, and gets clear errors for a NULL element and a wrong
dtype; under AddressSanitizer where the compiler has it (a use after free or an overflow
fails the run). NAME.h documents the ABI."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto as TP
from onnx import helper as h

import onnxcc

HERE = Path(__file__).parent
ASAN = ["-fsanitize=address", "-fno-omit-frame-pointer"]


def _model() -> onnx.ModelProto:
    g = h.make_graph([h.make_node("StringConcat", ["a", "b"], ["y"]), h.make_node("Equal", ["a", "b"], ["eq"])],
                     "sc", [h.make_tensor_value_info(n, TP.STRING, ["N"]) for n in "ab"],
                     [h.make_tensor_value_info("y", TP.STRING, None), h.make_tensor_value_info("eq", TP.BOOL, None)])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 20)])
    m.ir_version = 9
    return m


def _asan_works() -> bool:
    r = subprocess.run(["cc", *ASAN, "-x", "c", "-", "-o", "/dev/null"], input="int main(void){return 0;}",
                       capture_output=True, text=True)
    return r.returncode == 0


@pytest.fixture(scope="module")
def run_c(tmp_path_factory):
    if shutil.which("cc") is None:
        pytest.skip("needs a C compiler")
    tmp = tmp_path_factory.mktemp("strings_c")
    flags = ASAN if _asan_works() else []
    art = tmp / "art"
    onnxcc.compile(_model(), art, name="sc", cc=" ".join(["cc", *flags]))
    exe = tmp / "strings_abi"
    subprocess.run(["cc", "-O1", "-g", *flags, "-o", str(exe), str(HERE / "strings_abi.c"), f"-I{art}",
                    f"-L{art}", "-lsc", f"-Wl,-rpath,{art}"], check=True)
    r = subprocess.run([str(exe)], capture_output=True, text=True, timeout=120,
                       env={"ASAN_OPTIONS": "detect_leaks=0", "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    return art, dict(line.split(" ", 1) for line in r.stdout.splitlines())


def test_strings_in_and_out_of_c(run_c):
    _, out = run_c
    assert out["first"] == "rc=0 y=abc||\u00e9! eq=010"


def test_taken_strings_outlive_the_next_call(run_c):
    _, out = run_c
    assert out["second"] == "rc=0 y=xc|y|z! kept=abc"


def test_null_element_and_wrong_dtype_are_refused(run_c):
    _, out = run_c
    assert out["null"].startswith("rc=8 ") and "element 1 is a NULL pointer" in out["null"]
    assert out["dtype"].startswith("rc=3 ") and 'input "a"' in out["dtype"]


def test_header_documents_the_string_abi(run_c):
    art, _ = run_c
    text = (art / "sc.h").read_text()
    assert "kDLOpaqueHandle" in text and "NUL-terminated UTF-8" in text
    for fn in ("sc_strings_take", "sc_strings_free", "sc_strings_release"):
        assert f"{fn}(" in text
