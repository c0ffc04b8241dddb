"""Attention (opset 23) as one op: compiled once with symbolic batch / sequence lengths, run
at several shapes through the public path, compared with onnxruntime and the interpreter."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper

import onnxcc
from onnxcc.interp import run as interp_run
from onnxcc.testing import ort_run


def _model(inputs, outputs, attrs, n_outputs=1):
    node = helper.make_node("Attention", [n for n, *_ in inputs], [o for o, *_ in outputs][:n_outputs],
                            name="attn", **attrs)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
                          [helper.make_tensor_value_info(n, t, s) for n, t, s in outputs[:n_outputs]])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 23)])
    m.ir_version = 10
    return m


def _feeds(model, env, rng):
    feeds = {}
    for vi in model.graph.input:
        shape = [env[d.dim_param] if d.dim_param else d.dim_value for d in vi.type.tensor_type.shape.dim]
        if vi.type.tensor_type.elem_type == T.BOOL:
            feeds[vi.name] = rng.random(shape) < 0.8
        else:
            feeds[vi.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def _check(model, envs, tmp_path, rtol=1e-4, atol=1e-5):
    onnxcc.compile(model, tmp_path / "a", name="attn")
    lib = onnxcc.load(tmp_path / "a")
    module = onnxcc.load_onnx(model)
    rng = np.random.default_rng(0)
    for env in envs:
        feeds = _feeds(model, env, rng)
        want = ort_run(model, feeds)
        got = lib.run(feeds)
        ref = interp_run(module, list(feeds.values()))
        assert list(got) == list(want)
        for (name, w), r in zip(want.items(), ref, strict=True):
            np.testing.assert_allclose(got[name], w, rtol=rtol, atol=atol, err_msg=f"native {name} at {env}")
            np.testing.assert_allclose(r, w, rtol=rtol, atol=atol, err_msg=f"interp {name} at {env}")


def test_causal_attention_at_symbolic_batch_and_seq(tmp_path):
    b, s = "batch", "seq"
    m = _model([("Q", T.FLOAT, [b, 4, s, 16]), ("K", T.FLOAT, [b, 4, s, 16]), ("V", T.FLOAT, [b, 4, s, 8])],
               [("Y", T.FLOAT, None)], {"is_causal": 1})
    _check(m, [{b: 1, s: 5}, {b: 2, s: 17}], tmp_path)


def test_past_and_present_with_causal_offset(tmp_path):
    b, s, p = "batch", "seq", "past"
    node = helper.make_node("Attention", ["Q", "K", "V", "", "past_key", "past_value"],
                            ["Y", "present_key", "present_value"], name="attn", is_causal=1)
    g = helper.make_graph([node], "g", [
        helper.make_tensor_value_info("Q", T.FLOAT, [b, 2, s, 8]),
        helper.make_tensor_value_info("K", T.FLOAT, [b, 2, s, 8]),
        helper.make_tensor_value_info("V", T.FLOAT, [b, 2, s, 8]),
        helper.make_tensor_value_info("past_key", T.FLOAT, [b, 2, p, 8]),
        helper.make_tensor_value_info("past_value", T.FLOAT, [b, 2, p, 8])],
        [helper.make_tensor_value_info(n, T.FLOAT, None) for n in ("Y", "present_key", "present_value")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 23)])
    m.ir_version = 10
    _check(m, [{b: 1, s: 1, p: 6}, {b: 2, s: 3, p: 9}], tmp_path)


def test_3d_grouped_query_attention_with_a_bool_mask(tmp_path):
    b, s, L = "batch", "seq", "kv"
    m = _model([("Q", T.FLOAT, [b, s, 4 * 8]), ("K", T.FLOAT, [b, L, 2 * 8]), ("V", T.FLOAT, [b, L, 2 * 8]),
                ("attn_mask", T.BOOL, [s, L])],
               [("Y", T.FLOAT, None)], {"q_num_heads": 4, "kv_num_heads": 2})
    _check(m, [{b: 1, s: 3, L: 7}, {b: 2, s: 9, L: 4}], tmp_path)


@pytest.mark.parametrize("mode", [0, 2, 3])
def test_softcap_float_mask_and_the_qk_output(mode, tmp_path):
    b, s = "batch", "seq"
    node = helper.make_node("Attention", ["Q", "K", "V", "attn_mask"], ["Y", "", "", "qk"], name="attn",
                            softcap=2.5, scale=0.3, qk_matmul_output_mode=mode)
    g = helper.make_graph([node], "g", [
        helper.make_tensor_value_info("Q", T.FLOAT, [b, 2, s, 4]),
        helper.make_tensor_value_info("K", T.FLOAT, [b, 2, s, 4]),
        helper.make_tensor_value_info("V", T.FLOAT, [b, 2, s, 4]),
        helper.make_tensor_value_info("attn_mask", T.FLOAT, [1, 2, s, s])],
        [helper.make_tensor_value_info(n, T.FLOAT, None) for n in ("Y", "qk")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 23)])
    m.ir_version = 10
    _check(m, [{b: 1, s: 5}, {b: 3, s: 2}], tmp_path)


def test_symbolic_hidden_size_without_scale_is_refused_clearly(tmp_path):
    m = _model([("Q", T.FLOAT, [1, 2, 3, "h"]), ("K", T.FLOAT, [1, 2, 3, "h"]), ("V", T.FLOAT, [1, 2, 3, 4])],
               [("Y", T.FLOAT, None)], {})
    with pytest.raises(onnxcc.errors.UnsupportedOp, match="symbolic head size needs the scale attribute"):
        onnxcc.compile(m, tmp_path / "a", name="attn")
