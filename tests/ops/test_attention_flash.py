"""Attention fused over key blocks (kernel/flash.py, codegen/cpu/flash.py) through the user
path: compiled once with symbolic lengths, run at lengths that cross the 64-key blocks, the
4-row blocks and the 4-key groups (1, 7, 100, 513, 1000), compared with onnxruntime and the
numpy interpreter at fp32 rtol 1e-4 / atol 1e-5. The kernel text says which path ran."""

from __future__ import annotations

import json

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper

import onnxcc
from onnxcc.interp import run as interp_run
from onnxcc.testing import ort_run

RTOL, ATOL = 1e-4, 1e-5


def _model(inputs, attrs, outputs=("Y",), opset=23):
    names = [n if n else "" for n, *_ in inputs]
    node = helper.make_node("Attention", names, list(outputs), name="attn", **attrs)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs if n],
                          [helper.make_tensor_value_info(o, T.FLOAT, None) for o in outputs if o])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 10
    return m


def _feeds(model, env, rng, dead_rows=False):
    feeds = {}
    for vi in model.graph.input:
        shape = [env[d.dim_param] if d.dim_param else d.dim_value for d in vi.type.tensor_type.shape.dim]
        if vi.type.tensor_type.elem_type == T.BOOL:
            m = rng.random(shape) < 0.7
            if dead_rows and m.ndim >= 2 and m.shape[-2] > 1:
                m[..., 0, :] = False  # a query row with nothing to attend: zeros, not NaN
            feeds[vi.name] = m
        else:
            feeds[vi.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def _check(model, envs, tmp_path, dead_rows=False):
    onnxcc.compile(model, tmp_path / "a", name="attn")
    lib = onnxcc.load(tmp_path / "a")
    module = onnxcc.load_onnx(model)
    rng = np.random.default_rng(0)
    for env in envs:
        feeds = _feeds(model, env, rng, dead_rows)
        want = ort_run(model, feeds)
        got = lib.run(feeds)
        ref = interp_run(module, list(feeds.values()))
        assert list(got) == list(want)
        for (name, w), r in zip(want.items(), ref, strict=True):
            assert np.isfinite(got[name]).all(), f"{name} at {env}: non-finite values"
            np.testing.assert_allclose(got[name], w, rtol=RTOL, atol=ATOL, err_msg=f"native {name} at {env}")
            np.testing.assert_allclose(r, w, rtol=RTOL, atol=ATOL, err_msg=f"interp {name} at {env}")
    return lib


def _fused(model, tmp_path) -> list:
    """The fused-attention cores (kernel/flash.py) of the computes of `--emit kernel`'s
    text, parsed back, and the names of its temp buffers."""
    from onnxcc.kernel.flash import match_flash
    from onnxcc.kernel.parser import parse_kernel_text

    text = onnxcc.compile(model, tmp_path / "k", name="attn", emit="kernel").text
    progs = parse_kernel_text(text)
    found = [fl for p in progs for c in p.computes() if (fl := match_flash(c)) is not None]
    temps = [n for p in progs for n, buf in p.buffers.items() if buf.kind == "temp"]
    return found, temps


def _arena(lib_dir, dims) -> int:
    import sympy

    meta = json.loads((lib_dir / "attn.json").read_text())
    formula = meta["versions"][-1]["workspace_bytes"]
    return int(sympy.sympify(str(formula)).subs({sympy.Symbol(k): v for k, v in dims.items()}))


B, S, L = "batch", "seq", "kv"


def test_plain_attention_at_lengths_across_blocks(tmp_path):
    m = _model([("Q", T.FLOAT, [B, 3, S, 16]), ("K", T.FLOAT, [B, 3, S, 16]), ("V", T.FLOAT, [B, 3, S, 8])], {})
    _check(m, [{B: 1, S: 1}, {B: 2, S: 7}, {B: 1, S: 100}, {B: 1, S: 513}], tmp_path)


def test_causal_with_past_keys_longer_than_the_queries(tmp_path):
    p = "past"
    m = _model([("Q", T.FLOAT, [B, 2, S, 16]), ("K", T.FLOAT, [B, 2, S, 16]), ("V", T.FLOAT, [B, 2, S, 16]),
                ("", None, None), ("past_key", T.FLOAT, [B, 2, p, 16]), ("past_value", T.FLOAT, [B, 2, p, 16])],
               {"is_causal": 1}, outputs=("Y", "present_key", "present_value"))
    _check(m, [{B: 1, S: 1, p: 70}, {B: 2, S: 7, p: 129}, {B: 1, S: 100, p: 413}], tmp_path)


def test_grouped_query_3d_with_a_bool_mask_and_empty_rows(tmp_path):
    m = _model([("Q", T.FLOAT, [B, S, 6 * 8]), ("K", T.FLOAT, [B, L, 2 * 8]), ("V", T.FLOAT, [B, L, 2 * 16]),
                ("attn_mask", T.BOOL, [S, L])], {"q_num_heads": 6, "kv_num_heads": 2})
    _check(m, [{B: 1, S: 1, L: 1}, {B: 2, S: 9, L: 7}, {B: 1, S: 100, L: 1000}], tmp_path, dead_rows=True)


def test_softcap_scale_float_mask_and_raw_scores_output(tmp_path):
    m = _model([("Q", T.FLOAT, [B, 2, S, 8]), ("K", T.FLOAT, [B, 2, L, 8]), ("V", T.FLOAT, [B, 2, L, 8]),
                ("attn_mask", T.FLOAT, [1, 2, S, L])],
               {"softcap": 2.5, "scale": 0.3, "qk_matmul_output_mode": 0}, outputs=("Y", "", "", "qk"))
    _check(m, [{B: 1, S: 5, L: 67}, {B: 2, S: 13, L: 130}], tmp_path)


def test_fused_path_stores_no_scores_and_shrinks_the_arena(tmp_path):
    m = _model([("Q", T.FLOAT, [B, 4, S, 32]), ("K", T.FLOAT, [B, 4, S, 32]), ("V", T.FLOAT, [B, 4, S, 32])],
               {"is_causal": 1})
    found, temps = _fused(m, tmp_path)
    assert len(found) == 1 and found[0].rows_var == "s" and found[0].dot is not None and found[0].row == 32
    assert found[0].causal is not None  # is_causal alone: the key blocks after each row block are skipped
    assert not any(t.startswith(("scores", "probs")) for t in temps), temps
    _check(m, [{B: 1, S: 130}], tmp_path)
    # no b*h*s*s floats in the arena (causal alone needs no dead-row flags either)
    assert _arena(tmp_path / "a", {B: 1, S: 1024}) <= 64 * 1024


@pytest.mark.parametrize("mode", [2, 3])
def test_outputs_that_need_the_scores_keep_the_materialised_path(mode, tmp_path):
    m = _model([("Q", T.FLOAT, [B, 2, S, 4]), ("K", T.FLOAT, [B, 2, S, 4]), ("V", T.FLOAT, [B, 2, S, 4])],
               {"qk_matmul_output_mode": mode}, outputs=("Y", "", "", "qk"))
    found, temps = _fused(m, tmp_path)
    assert not found and any(t.startswith("scores") for t in temps), temps
    _check(m, [{B: 1, S: 70}], tmp_path)


def _ms_model(nodes, inputs, outputs, inits=None):
    import onnx

    vis = [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs]
    inits = [onnx.numpy_helper.from_array(np.asarray(a), n) for n, a in (inits or {}).items()]
    m = helper.make_model(helper.make_graph(nodes, "g", vis, [helper.make_empty_tensor_value_info(o) for o in outputs],
                                            inits),
                          opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8
    return m


def _check_ms(model, envs, tmp_path, fill=None):
    onnxcc.compile(model, tmp_path / "a", name="attn")
    lib = onnxcc.load(tmp_path / "a")
    for seed, env in enumerate(envs):
        feeds = _feeds(model, env, np.random.default_rng(seed))
        if fill is not None:
            fill(feeds, env)
        want = ort_run(model, feeds)
        got = lib.run(feeds)
        for name, w in want.items():
            np.testing.assert_allclose(got[name], w, rtol=RTOL, atol=3e-5, err_msg=f"{name} at {env}")


def test_contrib_multi_head_attention_with_bias_and_key_padding_mask(tmp_path):
    d, heads = 32, 2
    node = helper.make_node("MultiHeadAttention", ["q", "k", "v", "b", "kpm"], ["y"], domain="com.microsoft",
                            num_heads=heads)
    m = _ms_model([node], [("q", T.FLOAT, [B, S, d]), ("k", T.FLOAT, [B, L, d]), ("v", T.FLOAT, [B, L, d]),
                           ("kpm", T.INT32, [B, L])], ["y"],
                  {"b": np.random.default_rng(1).standard_normal(3 * d).astype(np.float32)})

    def mask(feeds, env):
        feeds["kpm"] = (np.random.default_rng(2).random((env[B], env[L])) < 0.8).astype(np.int32)

    found, temps = _fused(m, tmp_path)
    assert len(found) == 1 and not found[0].guarded and found[0].rows_var is not None, temps
    _check_ms(m, [{B: 2, S: 3, L: 70}, {B: 1, S: 100, L: 300}], tmp_path, mask)


def test_contrib_group_query_attention_prompt(tmp_path):
    n, nkv, hd = 4, 2, 16
    node = helper.make_node("GroupQueryAttention", ["q", "k", "v", "", "", "sl", "tot"], ["y"],
                            domain="com.microsoft", num_heads=n, kv_num_heads=nkv)
    m = _ms_model([node], [("q", T.FLOAT, [B, S, n * hd]), ("k", T.FLOAT, [B, S, nkv * hd]),
                           ("v", T.FLOAT, [B, S, nkv * hd]), ("sl", T.INT32, [B]), ("tot", T.INT32, [])], ["y"])

    def lengths(feeds, env):
        b, s = env[B], env[S]
        feeds["sl"] = np.array([s - 1 - (i * 13 % s) for i in range(b)], np.int32)
        feeds["tot"] = np.array(s, np.int32)

    found, _ = _fused(m, tmp_path)
    assert len(found) == 1 and found[0].rows_var is not None
    _check_ms(m, [{B: 2, S: 67}, {B: 1, S: 130}], tmp_path, lengths)


def test_double_precision_against_the_interpreter(tmp_path):
    """f64 runs the fused loop in f64 (onnxruntime's Attention kernel takes f32 only)."""
    m = _model([("Q", T.DOUBLE, [B, 2, S, 16]), ("K", T.DOUBLE, [B, 2, S, 16]), ("V", T.DOUBLE, [B, 2, S, 16])],
               {"is_causal": 1})
    m.graph.output[0].type.tensor_type.elem_type = T.DOUBLE
    onnxcc.compile(m, tmp_path / "a", name="attn")
    lib, module = onnxcc.load(tmp_path / "a"), onnxcc.load_onnx(m)
    rng = np.random.default_rng(0)
    for b, s in [(1, 5), (2, 70), (1, 130)]:
        feeds = {n: rng.standard_normal((b, 2, s, 16)) for n in ("Q", "K", "V")}
        ref = interp_run(module, list(feeds.values()))[0]
        np.testing.assert_allclose(lib.run(feeds)["Y"], ref, rtol=1e-10, atol=1e-12, err_msg=f"at {(b, s)}")
