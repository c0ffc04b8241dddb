"""onnxruntime's contrib ops (ops/contrib.py, ops/contrib_rotary.py) and the close ONNX ops
(RMSNormalization, RotaryEmbedding): each model is compiled once at symbolic shapes and run at
several settings of its dims, the native JIT kernels and the numpy reference interpreter both
compared with onnxruntime (which runs the com.microsoft ops on CPU)."""

import numpy as np
import pytest
from onnx import TensorProto as T
from onnx import helper as h

from onnxcc.errors import OnnxccError, UnsupportedOp
from onnxcc.frontend import load_onnx
from onnxcc.interp import run as interp_run
from onnxcc.testing import jit_compile, op_model, ort_run, random_inputs

F, I64 = T.FLOAT, T.INT64
MS = "com.microsoft"
_RNG = np.random.default_rng(5)


def _model(nodes, inputs, outputs, inits=None, opset=17):
    return op_model(nodes, inputs, outputs, inits, opset, 10 if opset >= 23 else 8, {MS: 1})


def _w(*shape, scale=0.5):
    return (_RNG.standard_normal(shape) * scale).astype(np.float32)


def _check(m, dims_list, rtol=1e-4, atol=1e-5):
    """Compile once; at each dims setting compare the JIT kernels and the interpreter with
    onnxruntime, output by output (shape, dtype, values)."""
    mod, prog, k = jit_compile(m)
    for seed, dims in enumerate(dims_list):
        feeds = random_inputs(m, dims, seed=seed)
        want = ort_run(m, feeds)
        args = [feeds[a.name] for a in mod.main.params]
        for engine, got in (("native", k(*args)), ("interp", interp_run(mod, feeds))):
            assert len(got) == len(want)
            for (name, w), g in zip(want.items(), got, strict=True):
                assert g.shape == w.shape, (engine, name, dims, g.shape, w.shape)
                assert g.dtype == w.dtype, (engine, name, g.dtype, w.dtype)
                np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"{engine} {name} at {dims}")
    return prog


def test_fused_matmul_trans_alpha_and_batch_transposes():
    inits = {"w1": _w(8, 6), "w2": _w(6, 8)}
    nodes = [
        h.make_node("FusedMatMul", ["x", "w1"], ["y0"], domain=MS, alpha=0.5),
        h.make_node("FusedMatMul", ["x", "w2"], ["y1"], domain=MS, transB=1),
        h.make_node("FusedMatMul", ["x", "x"], ["y2"], domain=MS, transB=1, alpha=0.125),  # attention scores
        h.make_node("FusedMatMul", ["xt", "w1"], ["y3"], domain=MS, transA=1),
        # x as [M, N, 8] @ r [M, 8, 6]: dim 0 of x moves behind the batch dims
        h.make_node("FusedMatMul", ["x", "r"], ["y4"], domain=MS, transBatchA=1),
        # q [M, 5, 8] @ x as [M, 8, N] (transBatchB and transB)
        h.make_node("FusedMatMul", ["q", "x"], ["y5"], domain=MS, transB=1, transBatchB=1, alpha=2.0),
        h.make_node("FusedMatMul", ["v", "w2"], ["y6"], domain=MS, transB=1),  # 1-D A
    ]
    m = _model(nodes, [("x", F, ["N", "M", 8]), ("xt", F, ["N", 8, "M"]), ("q", F, ["M", 5, 8]),
                       ("v", F, [8]), ("r", F, ["M", 8, 6])],
               [f"y{i}" for i in range(7)], inits)
    prog = _check(m, [{"N": 2, "M": 3}, {"N": 1, "M": 7}, {"N": 3, "M": 1}])
    assert len(list(prog.computes())) == 7  # each FusedMatMul is one compute (no transposed copies)


def test_gelu_family():
    b = _w(8)
    nodes = [
        h.make_node("Gelu", ["x"], ["y0"], domain=MS),
        h.make_node("BiasGelu", ["x", "b"], ["y1"], domain=MS),
        h.make_node("FastGelu", ["x"], ["y2"], domain=MS),
        h.make_node("FastGelu", ["x", "b"], ["y3"], domain=MS),
        h.make_node("QuickGelu", ["x"], ["y4"], domain=MS),
        h.make_node("QuickGelu", ["x"], ["y5"], domain=MS, alpha=1.0),
    ]
    m = _model(nodes, [("x", F, ["N", "S", 8])], [f"y{i}" for i in range(6)], {"b": b})
    _check(m, [{"N": 2, "S": 5}, {"N": 1, "S": 1}], rtol=1e-4, atol=2e-5)


def test_skip_layer_normalization_outputs_and_optional_inputs():
    g, beta, bias = _w(16) + 1.0, _w(16), _w(16)
    nodes = [
        h.make_node("SkipLayerNormalization", ["x", "s", "g", "beta", "bias"], ["y0", "m0", "iv0", "sum0"],
                    domain=MS, epsilon=1e-5),
        # beta absent, bias present: the absent input in the middle
        h.make_node("SkipLayerNormalization", ["x", "s", "g", "", "bias"], ["y1", "", "", "sum1"], domain=MS),
        # skip broadcast over the batch ([S, H]), no beta / bias, default epsilon
        h.make_node("SkipLayerNormalization", ["x", "s2", "g"], ["y2"], domain=MS),
    ]
    m = _model(nodes, [("x", F, ["N", "S", 16]), ("s", F, ["N", "S", 16]), ("s2", F, ["S", 16])],
               ["y0", "m0", "iv0", "sum0", "y1", "sum1", "y2"], {"g": g, "beta": beta, "bias": bias})
    _check(m, [{"N": 2, "S": 3}, {"N": 1, "S": 6}], rtol=1e-4, atol=3e-5)


def test_simplified_layer_normalizations():
    g, bias = _w(16) + 1.0, _w(16)
    nodes = [
        h.make_node("SimplifiedLayerNormalization", ["x", "g"], ["y0", "iv0"], epsilon=1e-5),  # ONNX domain
        h.make_node("SkipSimplifiedLayerNormalization", ["x", "s", "g", "bias"], ["y1", "", "iv1", "sum1"],
                    domain=MS, epsilon=1e-5),
        h.make_node("SkipSimplifiedLayerNormalization", ["x", "s", "g"], ["y2"], domain=MS),
    ]
    m = _model(nodes, [("x", F, ["N", "S", 16]), ("s", F, ["N", "S", 16])],
               ["y0", "iv0", "y1", "iv1", "sum1", "y2"], {"g": g, "bias": bias})
    _check(m, [{"N": 2, "S": 3}, {"N": 1, "S": 1}], rtol=1e-4, atol=3e-5)


def test_skip_simplified_mean_output_is_refused_when_used():
    m = _model([h.make_node("SkipSimplifiedLayerNormalization", ["x", "s", "g"], ["y", "mean"], domain=MS)],
               [("x", F, ["N", 16]), ("s", F, ["N", 16])], ["y", "mean"], {"g": _w(16)})
    with pytest.raises(UnsupportedOp, match=r"SkipSimplifiedLayerNormalization \(domain com\.microsoft\)"
                                             r".*mean"):
        jit_compile(m)


def _caches(rows, half):
    ang = _RNG.uniform(0, 3, (rows, half)).astype(np.float32)
    return {"cos": np.cos(ang), "sin": np.sin(ang)}


@pytest.mark.parametrize("interleaved", [0, 1])
def test_contrib_rotary_embedding(interleaved):
    il = interleaved
    c, cr = _caches(32, 4), _caches(32, 2)
    inits = {"cos": c["cos"], "sin": c["sin"], "cosr": cr["cos"], "sinr": cr["sin"]}
    nodes = [
        # 3-D [B, S, N*H] with position ids [B, S]
        h.make_node("RotaryEmbedding", ["x3", "pid", "cos", "sin"], ["y0"], domain=MS, interleaved=il,
                    num_heads=2),
        # 3-D without num_heads: head size from the cache width
        h.make_node("RotaryEmbedding", ["x3", "pid", "cos", "sin"], ["y1"], domain=MS, interleaved=il),
        # 4-D [B, N, S, H], offset form of position ids ([1]: positions off + s)
        h.make_node("RotaryEmbedding", ["x4", "off", "cos", "sin"], ["y2"], domain=MS, interleaved=il),
        # partial rotation: 4 of 8 head elements
        h.make_node("RotaryEmbedding", ["x3", "pid", "cosr", "sinr"], ["y3"], domain=MS, interleaved=il,
                    num_heads=2, rotary_embedding_dim=4),
    ]
    m = _model(nodes, [("x3", F, ["B", "S", 16]), ("x4", F, ["B", 3, "S", 8]), ("pid", I64, ["B", "S"]),
                       ("off", I64, [1])], ["y0", "y1", "y2", "y3"], inits)
    _check(m, [{"B": 2, "S": 5}, {"B": 1, "S": 1}, {"B": 3, "S": 9}])


def test_contrib_rotary_position_out_of_range_fails_the_kernel():
    c = _caches(4, 4)
    m = _model([h.make_node("RotaryEmbedding", ["x", "pid", "cos", "sin"], ["y"], domain=MS)],
               [("x", F, ["B", 1, "S", 8]), ("pid", I64, ["B", "S"])], ["y"], c)
    _, _, k = jit_compile(m)
    x = np.ones((1, 1, 2, 8), np.float32)
    with pytest.raises(Exception, match="index"):
        k(x, np.array([[0, 7]], np.int64))


@pytest.mark.parametrize("interleaved", [0, 1])
def test_onnx_rotary_embedding_symbolic(interleaved):
    il = interleaved
    c = _caches(16, 3)
    nodes = [
        h.make_node("RotaryEmbedding", ["x4", "cos", "sin", "pid"], ["y0"], interleaved=il),
        h.make_node("RotaryEmbedding", ["x3", "cos", "sin", "pid"], ["y1"], interleaved=il, num_heads=2),
        h.make_node("RotaryEmbedding", ["x3b", "cos", "sin", "pid"], ["y2"], interleaved=il, num_heads=2,
                    rotary_embedding_dim=6),  # 6 of 8
        # no position ids: per-token caches [B, S, rot/2]
        h.make_node("RotaryEmbedding", ["x4", "cb", "sb"], ["y3"], interleaved=il),
    ]
    m = _model(nodes, [("x4", F, ["B", 2, "S", 6]), ("x3", F, ["B", "S", 12]), ("x3b", F, ["B", "S", 16]),
                       ("pid", I64, ["B", "S"]),
                       ("cb", F, ["B", "S", 3]), ("sb", F, ["B", "S", 3])], ["y0", "y1", "y2", "y3"], c,
               opset=23)
    _check(m, [{"B": 2, "S": 4}, {"B": 1, "S": 1}])


def test_rms_normalization_symbolic():
    nodes = [
        h.make_node("RMSNormalization", ["x", "g"], ["y0"]),
        h.make_node("RMSNormalization", ["x", "g2"], ["y1"], axis=1, epsilon=1e-3),
    ]
    m = _model(nodes, [("x", F, ["N", "S", 8])], ["y0", "y1"], {"g": _w(8) + 1, "g2": _w(1, 8) + 1}, opset=23)
    _check(m, [{"N": 2, "S": 3}, {"N": 1, "S": 1}])


def test_other_contrib_ops_are_refused_naming_op_domain_and_node():
    m = _model([h.make_node("BiasSoftmax", ["x", "x"], ["y"], domain=MS, name="bs0")],
               [("x", F, ["N", 4])], ["y"])
    with pytest.raises(UnsupportedOp,
                       match=r"unsupported op BiasSoftmax \(domain com\.microsoft\) at node 'bs0'"):
        load_onnx(m)


def test_rotary_scale_is_refused():
    m = _model([h.make_node("RotaryEmbedding", ["x", "pid", "cos", "sin"], ["y"], domain=MS, scale=0.5,
                            name="rope")],
               [("x", F, ["B", 1, "S", 8]), ("pid", I64, ["B", "S"])], ["y"], _caches(8, 4))
    with pytest.raises(UnsupportedOp,
                       match=r"RotaryEmbedding \(domain com\.microsoft\) at node 'rope': scale"):
        load_onnx(m)


def test_attention_packed_projection_masks_and_bias():
    d, heads = 16, 4
    inits = {"w": _w(d, 3 * d, scale=0.3), "b": _w(3 * d), "w2": _w(d, 32, scale=0.3)}
    nodes = [
        h.make_node("Attention", ["x", "w", "b"], ["y0", "present"], domain=MS, num_heads=heads),
        h.make_node("Attention", ["x", "w", "b", "mask"], ["y1"], domain=MS, num_heads=heads),
        # mask_index as each batch row's end position
        h.make_node("Attention", ["x", "w", "b", "ends"], ["y4"], domain=MS, num_heads=heads),
        h.make_node("Attention", ["x", "w", "", "", "", "ab"], ["y2"], domain=MS, num_heads=heads,
                    unidirectional=1, scale=0.2),
        # q, k, v of different sizes: 8 + 8 + 16
        h.make_node("Attention", ["x", "w2"], ["y3"], domain=MS, num_heads=2, qkv_hidden_sizes=[8, 8, 16]),
    ]
    m = _model(nodes, [("x", F, ["B", "S", d]), ("mask", T.INT32, ["B", "S"]),
                       ("ab", F, [1, heads, "S", "S"]), ("ends", T.INT32, ["B"])],
               ["y0", "present", "y1", "y2", "y3", "y4"], inits)
    _check(m, [{"B": 2, "S": 5}, {"B": 1, "S": 1}, {"B": 3, "S": 8}], atol=3e-5)


def test_multi_head_attention_cross_and_self():
    d, heads = 16, 2
    nodes = [
        h.make_node("MultiHeadAttention", ["q", "k", "v"], ["y0"], domain=MS, num_heads=heads),
        h.make_node("MultiHeadAttention", ["q", "k", "v", "b", "kpm"], ["y1", "pk", "pv"], domain=MS,
                    num_heads=heads),
        h.make_node("MultiHeadAttention", ["q", "q", "q", "", "", "ab"], ["y2"], domain=MS, num_heads=heads,
                    unidirectional=1),
    ]
    m = _model(nodes, [("q", F, ["B", "S", d]), ("k", F, ["B", "L", d]), ("v", F, ["B", "L", d]),
                       ("kpm", T.INT32, ["B", "L"]), ("ab", F, ["B", heads, "S", "S"])],
               ["y0", "y1", "pk", "pv", "y2"], {"b": _w(3 * d)})
    _check(m, [{"B": 2, "S": 3, "L": 6}, {"B": 1, "S": 1, "L": 1}], atol=3e-5)


def test_attention_shared_past_buffer_is_refused():
    node = h.make_node("Attention", ["x", "w", "b", "", "past"], ["y"], domain=MS, num_heads=2, name="att",
                       past_present_share_buffer=1)
    m = _model([node], [("x", F, ["B", "S", 8]), ("past", F, [2, "B", 2, "P", 4])], ["y"],
               {"w": _w(8, 24), "b": _w(24)})
    with pytest.raises(UnsupportedOp,
                       match=r"Attention \(domain com\.microsoft\) at node 'att': past_present_share_buffer"):
        load_onnx(m)


def _nbits_weights(k, n, bits, block, zp: str):
    kb = -(-k // block)
    b = _RNG.integers(0, 256, (n, kb, block * bits // 8)).astype(np.uint8)
    sc = (_RNG.uniform(0.01, 0.1, n * kb)).astype(np.float32)
    out = {"B": b, "sc": sc}
    if zp == "packed":
        out["zp"] = _RNG.integers(0, 256, n * (-(-kb * bits // 8))).astype(np.uint8)
    elif zp == "float":
        out["zp"] = _RNG.uniform(0, 1 << bits, (n, kb)).astype(np.float32)
    return out


@pytest.mark.parametrize("bits,block,zp", [(4, 16, "packed"), (4, 32, "none"), (4, 16, "float"),
                                           (8, 16, "packed"), (2, 16, "packed")])
def test_matmul_nbits_constant_weights(bits, block, zp):
    k, n = 40, 12  # K not a multiple of the block: the last block is padded
    inits = _nbits_weights(k, n, bits, block, zp) | {"bias": _w(n)}
    ins = ["x", "B", "sc", "zp" if zp != "none" else "", "", "bias"]
    m = _model([h.make_node("MatMulNBits", ins, ["y"], domain=MS, K=k, N=n, bits=bits, block_size=block)],
               [("x", F, ["B_", "S", k])], ["y"], inits)
    prog = _check(m, [{"B_": 2, "S": 3}, {"B_": 1, "S": 1}], rtol=1e-4, atol=1e-4)
    # constant weights are dequantized at compile time into one float [K, N] constant
    assert [b.shape for name, b in prog.buffers.items() if "nbits_w" in name] == [(k, n)]


def test_matmul_nbits_runtime_weights_decode_in_kernel():
    k, n, bits, block = 32, 8, 4, 16
    m = _model([h.make_node("MatMulNBits", ["x", "B", "sc", "zp"], ["y"], domain=MS, K=k, N=n, bits=bits,
                            block_size=block)],
               [("x", F, ["S", k]), ("B", T.UINT8, [n, 2, 8]), ("sc", F, [n * 2]), ("zp", T.UINT8, [n])],
               ["y"])
    _check(m, [{"S": 3}, {"S": 1}], rtol=1e-4, atol=1e-4)


def test_group_query_attention_prompt_step():
    n, nkv, hd = 4, 2, 8
    node = h.make_node("GroupQueryAttention", ["q", "k", "v", "", "", "sl", "tot"], ["y", "pk", "pv"],
                       domain=MS, num_heads=n, kv_num_heads=nkv)
    m = _model([node], [("q", F, ["B", "S", n * hd]), ("k", F, ["B", "S", nkv * hd]),
                        ("v", F, ["B", "S", nkv * hd]), ("sl", T.INT32, ["B"]), ("tot", T.INT32, [])],
               ["y", "pk", "pv"])
    mod, _, k = jit_compile(m)
    for seed, (b, s) in enumerate([(2, 5), (1, 1), (3, 7)]):
        feeds = random_inputs(m, {"B": b, "S": s}, seed=seed)
        # right padding: each batch row's last valid key (seqlens_k = length - 1)
        feeds["sl"] = np.array([s - 1 - (i % s) for i in range(b)], np.int32)
        feeds["tot"] = np.array(s, np.int32)
        want = ort_run(m, feeds)
        native = k(*[feeds[a.name] for a in mod.main.params])
        for engine, got in (("native", native), ("interp", interp_run(mod, feeds))):
            for (name, w), g in zip(want.items(), got, strict=True):
                np.testing.assert_allclose(g, w, rtol=1e-4, atol=3e-5, err_msg=f"{engine} {name} at {(b, s)}")
    with pytest.raises(Exception, match="assert"):  # total_sequence_length must be S without past state
        k(*[np.array(s + 1, np.int32) if a.name == "tot" else feeds[a.name] for a in mod.main.params])


def test_group_query_attention_decode_step_with_past():
    n, nkv, hd = 4, 2, 8
    node = h.make_node("GroupQueryAttention", ["q", "k", "v", "pk", "pv", "sl", "tot"], ["y", "ok", "ov"],
                       domain=MS, num_heads=n, kv_num_heads=nkv)
    ins = [("q", F, ["B", 1, n * hd]), ("k", F, ["B", 1, nkv * hd]), ("v", F, ["B", 1, nkv * hd]),
           ("pk", F, ["B", nkv, "P", hd]), ("pv", F, ["B", nkv, "P", hd]), ("sl", T.INT32, ["B"]),
           ("tot", T.INT32, [])]
    m = _model([node], ins, ["y", "ok", "ov"])
    mod, _, k = jit_compile(m)
    for seed, (b, p) in enumerate([(2, 3), (1, 1), (3, 9)]):
        feeds = random_inputs(m, {"B": b, "P": p}, seed=seed)
        feeds["sl"] = np.full(b, p, np.int32)  # every row full: P + 1 - 1
        feeds["tot"] = np.array(p + 1, np.int32)
        want = ort_run(m, feeds)
        native = k(*[feeds[a.name] for a in mod.main.params])
        for engine, got in (("native", native), ("interp", interp_run(mod, feeds))):
            for (name, w), g in zip(want.items(), got, strict=True):
                assert g.shape == w.shape, (engine, name)
                np.testing.assert_allclose(g, w, rtol=1e-4, atol=3e-5, err_msg=f"{engine} {name} at {(b, p)}")
    feeds["sl"][0] -= 1  # a ragged batch row: the kernel refuses to guess where its keys go
    with pytest.raises(Exception, match="assert"):
        k(*[feeds[a.name] for a in mod.main.params])


def test_attention_with_past_state_gpt2_style():
    d, heads = 16, 4
    node = h.make_node("Attention", ["x", "w", "b", "mask", "past"], ["y", "present"], domain=MS,
                       num_heads=heads, unidirectional=1)
    ins = [("x", F, ["B", "S", d]), ("mask", T.INT32, ["B", "T"]), ("past", F, [2, "B", heads, "P", 4])]
    m = _model([node], ins, ["y", "present"], {"w": _w(d, 3 * d, scale=0.3), "b": _w(3 * d)})
    mod, _, k = jit_compile(m)
    for seed, (b, s, p) in enumerate([(2, 1, 3), (1, 4, 2), (3, 2, 1)]):
        feeds = random_inputs(m, {"B": b, "S": s, "P": p, "T": p + s}, seed=seed)
        want = ort_run(m, feeds)
        native = k(*[feeds[a.name] for a in mod.main.params])
        for engine, got in (("native", native), ("interp", interp_run(mod, feeds))):
            for (name, w), g in zip(want.items(), got, strict=True):
                assert g.shape == w.shape, (engine, name)
                np.testing.assert_allclose(g, w, rtol=1e-4, atol=3e-5,
                                           err_msg=f"{engine} {name} at {(b, s, p)}")


@pytest.mark.parametrize("unidirectional", [0, 1])
def test_multi_head_attention_with_past_state(unidirectional):
    d, heads = 16, 2
    node = h.make_node("MultiHeadAttention", ["q", "k", "v", "b", "", "", "pk", "pv"], ["y", "ok", "ov"],
                       domain=MS, num_heads=heads, unidirectional=unidirectional)
    ins = [("q", F, ["B", "S", d]), ("k", F, ["B", "S", d]), ("v", F, ["B", "S", d]),
           ("pk", F, ["B", heads, "P", 8]), ("pv", F, ["B", heads, "P", 8])]
    m = _model([node], ins, ["y", "ok", "ov"], {"b": _w(3 * d)})
    _check(m, [{"B": 2, "S": 1, "P": 3}, {"B": 1, "S": 3, "P": 1}, {"B": 3, "S": 2, "P": 6}], atol=3e-5)


def test_float16_models_compute_in_float32_like_onnxruntime():
    def w16(*shape):
        return _w(*shape).astype(np.float16)

    nodes = [
        h.make_node("FastGelu", ["x", "b"], ["y0"], domain=MS),
        h.make_node("QuickGelu", ["x"], ["y1"], domain=MS),
        h.make_node("SkipLayerNormalization", ["x", "x", "g", "b"], ["y2"], domain=MS),
        h.make_node("SkipSimplifiedLayerNormalization", ["x", "x", "g"], ["y3"], domain=MS),
        h.make_node("SimplifiedLayerNormalization", ["x", "g"], ["y4"]),
        h.make_node("FusedMatMul", ["x", "wm"], ["y5"], domain=MS, transB=1, alpha=0.5),
    ]
    m = _model(nodes, [("x", T.FLOAT16, ["N", 16])], [f"y{i}" for i in range(6)],
               {"b": w16(16), "g": w16(16), "wm": w16(8, 16)})
    _check(m, [{"N": 3}, {"N": 1}], rtol=2e-3, atol=2e-3)


def test_skip_layer_norm_needs_2d_or_3d_operands():
    m = _model([h.make_node("SkipLayerNormalization", ["x", "s", "g"], ["y"], domain=MS)],
               [("x", F, ["N", 16]), ("s", F, [16])], ["y"], {"g": _w(16)})
    with pytest.raises(OnnxccError, match="2-D or 3-D"):
        load_onnx(m)


@pytest.mark.parametrize("interleaved", [0, 1])
def test_group_query_attention_with_rotary(interleaved):
    n, nkv, hd = 4, 2, 16  # onnxruntime wants head sizes that are multiples of 16 here
    c = _caches(32, hd // 2)
    for past in (False, True):
        ins = ["q", "k", "v", "pk" if past else "", "pv" if past else "", "sl", "tot", "cos", "sin"]
        node = h.make_node("GroupQueryAttention", ins, ["y", "ok", "ov"], domain=MS, num_heads=n,
                           kv_num_heads=nkv, do_rotary=1, rotary_interleaved=interleaved)
        s = 1 if past else "S"
        vis = [("q", F, ["B", s, n * hd]), ("k", F, ["B", s, nkv * hd]), ("v", F, ["B", s, nkv * hd]),
               ("sl", T.INT32, ["B"]), ("tot", T.INT32, [])]
        if past:
            vis += [("pk", F, ["B", nkv, "P", hd]), ("pv", F, ["B", nkv, "P", hd])]
        m = _model([node], vis, ["y", "ok", "ov"], c)
        mod, _, k = jit_compile(m)
        for seed, (b, sp) in enumerate([(2, 3), (1, 1), (3, 6)]):
            dims = {"B": b, "P": sp} if past else {"B": b, "S": sp}
            feeds = random_inputs(m, dims, seed=seed)
            total = sp + 1 if past else sp
            feeds["sl"] = np.full(b, total - 1, np.int32)
            feeds["tot"] = np.array(total, np.int32)
            want = ort_run(m, feeds)
            native = k(*[feeds[a.name] for a in mod.main.params])
            for engine, got in (("native", native), ("interp", interp_run(mod, feeds))):
                for (name, w), g in zip(want.items(), got, strict=True):
                    np.testing.assert_allclose(g, w, rtol=1e-4, atol=3e-5,
                                               err_msg=f"{engine} {name} past={past} at {dims}")
