"""Strided numpy `out=` views through onnxcc.load(...).run (issue 15, item 5): y[:, ::2],
y.T, y[::-1] and offset slices are written in place by the library (it scatters its compact
result into them), equal to the compact call (float32, exact: the same kernel), with every
element outside the view untouched. A view whose elements share memory is refused by the
library with a message; a view whose strides are not whole elements by the loader."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import onnxcc
from onnxcc.errors import GuardError
from onnxcc.testing import compile_lib
from onnxcc.testing_c import relu_mul_add_model


@pytest.fixture(scope="module")
def so(tmp_path_factory):
    d = tmp_path_factory.mktemp("so_py")
    onnxcc.compile(relu_mul_add_model(d / "so.onnx", "so"), d / "art", name="so")
    return onnxcc.load(d / "art")


def _inputs(n=5):
    rng = np.random.default_rng(1)
    return {"a": rng.standard_normal((n, 4)).astype(np.float32), "b": rng.standard_normal(4).astype(np.float32)}


VIEWS = {
    "step": lambda buf: buf[:, ::2],                      # buf: [5, 8]
    "transposed": lambda buf: buf[:4, :5].T,              # strides (1, 8) elements
    "reversed": lambda buf: buf[::-1, 7:3:-1],            # negative strides
    "offset-rows": lambda buf: buf[:, 3:7],               # row pitch 8, offset 3
}


@pytest.mark.parametrize("view", sorted(VIEWS))
@pytest.mark.parametrize("portable", [False, True])
def test_out_views_written_in_place(so, view, portable, monkeypatch):
    if portable:  # the _Tensors path (CUDA artifacts, other hosts) must agree with the word path
        monkeypatch.setattr(so, "_packed", True)
    x = _inputs()
    want = so.run(x)["y"]
    buf = np.full((5, 8), -777.0, np.float32)
    out = VIEWS[view](buf)
    assert out.shape == (5, 4) and not out.flags.c_contiguous
    got = so.run(x, out={"y": out})["y"]
    assert got is out
    np.testing.assert_array_equal(out, want)
    mask = np.ones(buf.shape, bool)
    VIEWS[view](mask)[...] = False
    assert (buf[mask] == -777.0).all()  # nothing outside the view written


def test_out_view_whose_elements_share_memory_is_refused(so):
    buf = np.full(8, -777.0, np.float32)
    out = np.lib.stride_tricks.as_strided(buf, shape=(5, 4), strides=(4, 4))  # rows overlap
    with pytest.raises(GuardError, match=r'output "y" dim \d: stride 1 .*makes two elements share memory'):
        so.run(_inputs(), out={"y": out})
    assert (buf == -777.0).all()


def test_out_view_with_strides_not_whole_elements_is_refused(so):
    raw = np.zeros(128, np.uint8)
    out = np.ndarray((5, 4), np.float32, raw.data, offset=2, strides=(18, 4))  # row pitch 4.5 floats
    with pytest.raises(GuardError, match=r'out "y": must be C-contiguous .*strides are not whole elements'):
        so.run(_inputs(), out={"y": out})


def test_metadata_lists_strided_outputs(so):
    assert so.meta["strided_outputs"] == ["y"]


def test_inspect_shows_output_strides(so):
    from click.testing import CliRunner

    from onnxcc.cli import main

    r = CliRunner().invoke(main, ["inspect", str(so.path.parent)])
    assert r.exit_code == 0, r.output
    assert ("output strides: served strided (written compact, scattered after the run; no zero or overlapping "
            "strides): y") in r.output


def test_which_outputs_are_served_strided():
    """Sub-byte outputs (packed) and outputs with run-determined dims (laid out in the
    allocated shape by rules of their own) stay compact; a non-host target serves none."""
    import sympy

    from onnxcc.codegen.c.abi import ArtifactSpec, TensorSig, VersionSpec
    from onnxcc.codegen.c.layout import strided_outputs_ok
    from onnxcc.codegen.c.link import generate_dispatcher
    from onnxcc.ir import DType, SymbolInfo, sym

    n, r = sym("n"), sym("r")
    spec = ArtifactSpec(
        name="g", inputs=[TensorSig("x", DType.f32, (n,))],
        outputs=[TensorSig("y", DType.f32, (n,)), TensorSig("k", DType.i4, (n,)), TensorSig("z", DType.f32, (r,))],
        symbols=[SymbolInfo("n", 1, 64, 1, 'input "x" dim 0'), SymbolInfo("r", 1, 64, 1, "run")],
        versions=[VersionSpec("g_v0", sympy.true, "", {}, 0, "generic")], run_dims={"r": n})
    assert strided_outputs_ok(spec, host=True) == [True, False, False]
    assert strided_outputs_ok(spec, host=False) == [False, False, False]
    c = generate_dispatcher(spec)
    assert c.count("ONNXCC_STRIDED_WRITE}") == 1 and "onnxcc_scatter_outputs(outputs, out_sp, 3, out_ptrs)" in c


def test_big_out_view_is_scattered_over_the_thread_pool(so):
    """1.6 MB of output (past the runtime's 1 MiB threshold): the scatter runs its rows over
    the thread pool; chunks must neither miss nor overlap rows."""
    x = _inputs(100_000)
    want = so.run(x)["y"]
    buf = np.full((100_000, 8), -777.0, np.float32)
    so.run(x, out={"y": buf[::-1, 1::2]})
    np.testing.assert_array_equal(buf[::-1, 1::2], want)
    assert (buf[:, 0::2] == -777.0).all()


@pytest.mark.parametrize("dtype", ["float64", "int8", "float16"])
def test_3d_out_views_of_each_element_size(tmp_path, dtype):
    """The scatter's element sizes (8, 1, 2 bytes) on a rank-3 view whose dims are permuted
    and reversed: y = x + x, equal to the compact result, nothing else written."""
    h = helper
    vi = h.make_tensor_value_info
    code = {"float64": TensorProto.DOUBLE, "int8": TensorProto.INT8, "float16": TensorProto.FLOAT16}[dtype]
    g = h.make_graph([h.make_node("Add", ["x", "x"], ["y"])], "add3", [vi("x", code, ["A", 3, 4])],
                     [vi("y", code, ["A", 3, 4])])
    m = h.make_model(g, opset_imports=[h.make_opsetid("", 17)])
    m.ir_version = 8
    lib = compile_lib(m, tmp_path, name="add3")
    x = (np.arange(2 * 3 * 4) % 50 - 20).astype(dtype).reshape(2, 3, 4)
    want = lib.run({"x": x})["y"]
    np.testing.assert_array_equal(want, x + x)
    buf = np.full((4, 3, 2, 2), 7, dtype)  # the view: [2, 3, 4] out of [4, 3, 2] with a gap dim
    view = buf[:, ::-1, :, 1].transpose(2, 1, 0)
    assert view.shape == (2, 3, 4) and not view.flags.c_contiguous
    lib.run({"x": x}, out={"y": view})
    np.testing.assert_array_equal(view, want)
    assert (buf[..., 0] == 7).all()
