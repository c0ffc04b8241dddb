"""The ONNX importer: sample models import typed (no `?`), round-trip through the text form,
and interpret like onnxruntime; dim_params, initializers, constants, absent inputs,
subgraph captures, exporter-style shape chains and every error path."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import sympy
from onnx import TensorProto, helper, numpy_helper

import onnxcc
from onnxcc.errors import ImportError_, OnnxccError, UnsupportedOp
from onnxcc.frontend import free_vars, load_onnx
from onnxcc.interp import run as interp_run
from onnxcc.ir import DType, TensorType, WeightRef, sym
from onnxcc.ir.parser import parse_module
from onnxcc.ir.printer import print_module
from onnxcc.ir.verify import verify
from onnxcc.ops import define
from onnxcc.passes import PassContext, VerifyAfterEach, run_pipeline
from onnxcc.passes.pipelines import DEFAULT_GRAPH_PIPELINE
from onnxcc.testing import MODELS_DIR, SAMPLE_MODELS, ort_run, random_inputs

F32, I64 = TensorProto.FLOAT, TensorProto.INT64
RTOL, ATOL = 1e-4, 1e-5
CASES = [(name, dims) for name, settings in SAMPLE_MODELS.items() for dims in settings]

# A custom-domain op registered by this file only: it lets the tests exercise the importer's
# generic paths (absent inputs, optional outputs, subgraph captures) without depending on
# any particular ONNX op's definition.
TEST_DOMAIN = "onnxcc_frontend_test"
define(f"{TEST_DOMAIN}.First", infer=lambda ctx: [ctx.in_types[0]] * len(ctx.op.results),
       reference=lambda ctx, *xs: [xs[0]] * len(ctx.op.results), arity=(1, None), num_results=None)


def _model(nodes, inputs, outputs, inits=(), opset=17, domains=(), name="g") -> onnx.ModelProto:
    graph = helper.make_graph(nodes, name, inputs, outputs, list(inits))
    imports = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, 1) for d in domains]
    return helper.make_model(graph, opset_imports=imports, ir_version=8)


def _roundtrip(module) -> str:
    text = print_module(module)
    again = print_module(parse_module(text))
    assert again == text, "print -> parse -> print is not a fixed point"
    return text


def _compare(model, module, feeds):
    want = ort_run(model, feeds)
    got = interp_run(module, feeds)
    names = [o.name for o in (model.graph.output if isinstance(model, onnx.ModelProto)
                              else onnx.load(str(model), load_external_data=False).graph.output)]
    assert len(got) == len(names)
    for n, g in zip(names, got):
        assert g.shape == want[n].shape, f"{n}: shape {g.shape} != onnxruntime {want[n].shape}"
        np.testing.assert_allclose(g, want[n], rtol=RTOL, atol=ATOL, err_msg=n)


def _case_id(case):
    name, dims = case
    return name + "-" + "-".join(f"{k}{v}" for k, v in dims.items())


# ---- the sample models ---------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(SAMPLE_MODELS))
def test_sample_model_imports_typed_and_round_trips(name):
    module = load_onnx(MODELS_DIR / f"{name}.onnx")
    verify(module)
    assert module.name == name and module.attrs["opset"] == 17
    text = _roundtrip(module)
    assert "?" not in text, f"{name}: some dim is unknown:\n{text}"
    assert "onnx.Constant" not in text


@pytest.mark.parametrize("case", CASES, ids=[_case_id(c) for c in CASES])
def test_sample_model_interp_matches_onnxruntime(case):
    name, dims = case
    path = MODELS_DIR / f"{name}.onnx"
    module = load_onnx(path)
    _compare(path, module, random_inputs(path, dims, seed=3))


@pytest.mark.parametrize("name", sorted(SAMPLE_MODELS))
def test_sample_model_after_graph_pipeline_matches_onnxruntime(name):
    path = MODELS_DIR / f"{name}.onnx"
    module = load_onnx(path)
    run_pipeline(module, _graph_pipeline(), PassContext(instruments=[VerifyAfterEach()]))
    assert "?" not in _roundtrip(module)
    _compare(path, module, random_inputs(path, SAMPLE_MODELS[name][1], seed=4))


def _graph_pipeline() -> str:
    """The default graph pipeline, every pass of it (a pass that fails to load fails the test)."""
    return DEFAULT_GRAPH_PIPELINE


def test_mlp_params_symbols_and_weights():
    m = load_onnx(MODELS_DIR / "mlp.onnx")
    (x,) = m.main.params
    assert x.name == "x" and x.type == TensorType(DType.f32, (sym("batch"), 64))
    assert m.symbols["batch"].origin == 'input "x" dim 0'
    assert m.main.result_types == [TensorType(DType.f32, (sym("batch"), 10))]
    consts = [op for op in m.main.body.ops if op.name == "cc.const"]
    assert m.main.body.ops[: len(consts)] == consts, "initializers come first"
    big = {op.results[0].name: op.attrs["value"] for op in consts if isinstance(op.attrs["value"], WeightRef)}
    assert "fc1.weight" in big and m.weights[big["fc1.weight"].name].shape == (64, 128)
    small = [op.attrs["value"] for op in consts if isinstance(op.attrs["value"], np.ndarray)]
    assert small and all(v.size <= 64 for v in small)


def test_if_model_captures_become_operands_and_block_args():
    m = load_onnx(MODELS_DIR / "if_model.onnx")
    (op,) = [o for o in m.main.body.ops if o.name == "onnx.If"]
    assert [v.name for v in op.operands[1:]] == ["x", "add_1"]
    for region in op.regions:
        assert [a.name for a in region.block.args] == ["x", "add_1"]
        assert region.block.ops[-1].name == "yield"


def test_loop_and_scan_region_layouts():
    loop = load_onnx(MODELS_DIR / "loop_model.onnx")
    (op,) = [o for o in loop.main.body.ops if o.name == "onnx.Loop"]
    # M, cond, carried, captures
    assert [v.name for v in op.operands] == ["const_1", "const_2", "x", "W", "x"]
    args = op.regions[0].block.args
    assert [str(a.type) for a in args[:2]] == ["i64[]", "bool[]"]
    assert [a.name for a in args] == ["iter", "cond_in", "h_in", "W", "x"]
    scan = load_onnx(MODELS_DIR / "scan_model.onnx")
    (op,) = [o for o in scan.main.body.ops if o.name == "onnx.Scan"]
    assert op.attrs["num_captures"] == 1 and op.operands[-1].name == "W"
    _s_in, x_t, _w = op.regions[0].block.args
    assert x_t.type == TensorType(DType.f32, (sym("batch"), 16)), "a scan input's slice drops the scan axis"


# ---- dims and symbols ----------------------------------------------------------------------------

def _identity_model(dims, dims2=None):
    inputs = [helper.make_tensor_value_info("x", F32, dims)]
    nodes = [helper.make_node("Identity", ["x"], ["y"], name="id")]
    outputs = [helper.make_tensor_value_info("y", F32, None)]
    if dims2 is not None:
        inputs.append(helper.make_tensor_value_info("z", F32, dims2))
        nodes.append(helper.make_node("Identity", ["z"], ["w"], name="id2"))
        outputs.append(helper.make_tensor_value_info("w", F32, None))
    return _model(nodes, inputs, outputs)


def test_unnamed_and_negative_dims_get_fresh_symbols():
    model = _identity_model([None, -1, 3])
    model.graph.input[0].type.tensor_type.shape.dim[0].Clear()  # neither value nor param
    m = load_onnx(model)
    assert m.main.params[0].type.shape == (sym("x_d0"), sym("x_d1"), 3)
    assert m.symbols["x_d1"].origin == 'input "x" dim 1'


def test_odd_dim_params_become_identifiers_or_expressions():
    m = load_onnx(_identity_model(["unk__123", "N?", "N_", 4], ["batch", "batch + 1", "2*batch"]))
    x, z = m.main.params
    n_q = x.type.shape[1]
    assert x.type.shape[0] == sym("unk__123")
    assert n_q != x.type.shape[2], '"N?" and "N_" are different dims'
    b = sym("batch")
    assert z.type.shape == (b, b + 1, 2 * b)
    text = _roundtrip(m)
    assert "?" not in text.replace("// ", "")


def test_module_name_from_stem_or_given(tmp_path):
    path = tmp_path / "my-model.v2.onnx"
    onnx.save(_identity_model(["n"]), str(path))
    assert load_onnx(path).name == "my_model_v2"
    assert load_onnx(path, name="renamed").name == "renamed"
    assert load_onnx(path.read_bytes()).name == "g"


# ---- constants, weights, attributes --------------------------------------------------------------

def test_constant_forms_and_initializer_sizes():
    big = np.arange(100, dtype=np.float32).reshape(10, 10)
    nodes = [
        helper.make_node("Constant", [], ["cf"], value_float=2.5),
        helper.make_node("Constant", [], ["cfs"], value_floats=[1.0, 2.0]),
        helper.make_node("Constant", [], ["ci"], value_int=7),
        helper.make_node("Constant", [], ["cis"], value_ints=[1, 2, 3]),
        helper.make_node("Constant", [], ["ct"], value=numpy_helper.from_array(big, "t")),
        helper.make_node("Add", ["x", "cf"], ["a"]),
        helper.make_node("Add", ["a", "ct"], ["b"]),
        helper.make_node("Add", ["b", "w"], ["y"]),
    ]
    m = load_onnx(_model(nodes, [helper.make_tensor_value_info("x", F32, [10, 10])],
                         [helper.make_tensor_value_info("y", F32, None)],
                         [numpy_helper.from_array(big + 1, "w")]))
    consts = {op.results[0].name: op for op in m.main.body.ops if op.name == "cc.const"}
    assert consts["cf"].results[0].type == TensorType(DType.f32, ())
    assert consts["cfs"].results[0].type == TensorType(DType.f32, (2,))
    assert consts["ci"].results[0].type == TensorType(DType.i64, ())
    np.testing.assert_array_equal(consts["cis"].attrs["value"], [1, 2, 3])
    assert all(isinstance(consts[k].attrs["value"], WeightRef) for k in ("ct", "w"))
    np.testing.assert_array_equal(m.weights[consts["w"].attrs["value"].name], big + 1)
    assert m.main.body.ops[0] is consts["w"]
    x = np.ones((10, 10), np.float32)
    np.testing.assert_allclose(interp_run(m, {"x": x})[0], x + 2.5 + big + big + 1)


def test_external_data_is_read_relative_to_the_model(tmp_path):
    w = np.random.default_rng(0).standard_normal((32, 8)).astype(np.float32)
    model = _model([helper.make_node("MatMul", ["x", "w"], ["y"])],
                   [helper.make_tensor_value_info("x", F32, ["n", 32])],
                   [helper.make_tensor_value_info("y", F32, None)], [numpy_helper.from_array(w, "w")])
    sub = tmp_path / "sub"
    sub.mkdir()
    onnx.save(model, str(sub / "ext.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
              location="ext.bin", size_threshold=0)
    m = load_onnx(sub / "ext.onnx")
    np.testing.assert_array_equal(next(iter(m.weights.values())), w)
    (sub / "ext.bin").unlink()
    with pytest.raises(ImportError_, match="external data"):
        load_onnx(sub / "ext.onnx")


def test_attributes_keep_onnx_names_and_convert_types():
    node = helper.make_node("Gemm", ["a", "b"], ["y"], name="g", alpha=0.5, transB=1)
    m = load_onnx(_model([node], [helper.make_tensor_value_info("a", F32, [2, 3]),
                                  helper.make_tensor_value_info("b", F32, [4, 3])],
                         [helper.make_tensor_value_info("y", F32, None)]))
    (op,) = [o for o in m.main.body.ops if o.name == "onnx.Gemm"]
    assert op.attrs == {"alpha": 0.5, "transB": 1} and op.loc == "g"
    assert op.results[0].type == TensorType(DType.f32, (2, 4))


def test_absent_optional_inputs_and_outputs():
    x = helper.make_tensor_value_info("x", F32, ["n"])
    nodes = [helper.make_node("First", ["x", "", "x"], ["a", "", "c"], domain=TEST_DOMAIN, name="mid"),
             helper.make_node("First", ["a", "", ""], ["d"], domain=TEST_DOMAIN),
             helper.make_node("Add", ["c", "d"], ["y"])]
    m = load_onnx(_model(nodes, [x], [helper.make_tensor_value_info("y", F32, None)], domains=[TEST_DOMAIN]))
    mid, trail = [o for o in m.main.body.ops if o.name == f"{TEST_DOMAIN}.First"]
    assert len(mid.operands) == 2 and mid.attrs["absent"] == [1] and len(mid.results) == 3
    assert len(trail.operands) == 1 and "absent" not in trail.attrs
    assert trail.loc == "First_1", "an unnamed node's loc is <op_type>_<index>"
    _roundtrip(m)


def test_nested_subgraph_free_variables():
    inner = helper.make_graph([helper.make_node("Add", ["outer_a", "local"], ["r"])], "inner", [],
                              [helper.make_tensor_value_info("r", F32, None)])
    body = helper.make_graph(
        [helper.make_node("Mul", ["i_in", "outer_b"], ["local"]),
         helper.make_node("If", ["c"], ["o"], then_branch=inner, else_branch=inner)],
        "body", [helper.make_tensor_value_info("i_in", F32, None)],
        [helper.make_tensor_value_info("o", F32, None)])
    assert free_vars(inner) == ["outer_a", "local"]
    assert free_vars(body) == ["outer_b", "c", "outer_a"]


def test_generic_subgraph_captures_with_a_custom_op():
    body = helper.make_graph([helper.make_node("Add", ["b_in", "x"], ["b_out"])], "body",
                             [helper.make_tensor_value_info("b_in", F32, ["n"])],
                             [helper.make_tensor_value_info("b_out", F32, ["n"])])
    node = helper.make_node("First", ["x"], ["y"], domain=TEST_DOMAIN, name="withbody", body=body)
    m = load_onnx(_model([node], [helper.make_tensor_value_info("x", F32, ["n"])],
                         [helper.make_tensor_value_info("y", F32, None)], domains=[TEST_DOMAIN]))
    (op,) = [o for o in m.main.body.ops if o.name == f"{TEST_DOMAIN}.First"]
    assert [v.name for v in op.operands] == ["x", "x"]
    block = op.regions[0].block
    assert [a.name for a in block.args] == ["b_in", "x"]
    assert block.ops[0].loc == "withbody/Add_0" and block.ops[-1].name == "yield"
    verify(m)
    _roundtrip(m)


# ---- exporter-style shape chains -----------------------------------------------------------------

def _i64(name, vals):
    return numpy_helper.from_array(np.array(vals, dtype=np.int64), name)


def _exporter_model() -> onnx.ModelProto:
    """What torch.onnx.export writes for a head split and friends, over x: f32[batch, seq, 64]."""
    n = helper.make_node
    nodes = [
        # head split: Shape -> Gather -> Unsqueeze -> Concat -> Reshape, then Transpose
        n("Shape", ["x"], ["s0"]), n("Gather", ["s0", "i0"], ["b"], axis=0),
        n("Shape", ["x"], ["s1"]), n("Gather", ["s1", "i1"], ["t"], axis=0),
        n("Unsqueeze", ["b", "ax0"], ["bu"]), n("Unsqueeze", ["t", "ax0"], ["tu"]),
        n("Concat", ["bu", "tu", "heads", "hd"], ["shape4"], axis=0),
        n("Reshape", ["x", "shape4"], ["r4"]),
        n("Transpose", ["r4"], ["heads_out"], perm=[0, 2, 1, 3]),
        # Shape -> Slice -> Concat(-1) -> Reshape back
        n("Shape", ["heads_out"], ["s2"]), n("Slice", ["s2", "st0", "en2"], ["s2bh"]),
        n("Concat", ["s2bh", "minus1"], ["shape3"], axis=0),
        n("Reshape", ["heads_out", "shape3"], ["merged"]),
        # arithmetic on shape values: Div(seq, 2) and batch*seq
        n("Div", ["t", "two"], ["half"]), n("Unsqueeze", ["half", "ax0"], ["hu"]),
        n("Concat", ["bu", "hu"], ["zshape"], axis=0),
        n("ConstantOfShape", ["zshape"], ["zeros"],
          value=numpy_helper.from_array(np.array([0.5], np.float32))),
        n("Mul", ["b", "t"], ["bt"]), n("Unsqueeze", ["bt", "ax0"], ["btu"]),
        n("Concat", ["btu", "hid"], ["flat_shape"], axis=0),
        n("Reshape", ["x", "flat_shape"], ["flat"]),
        # Range(0, Gather(Shape(x), 1), 1)
        n("Shape", ["x"], ["s3"]), n("Gather", ["s3", "i1"], ["t3"], axis=0),
        n("Range", ["zero", "t3", "one"], ["positions"]),
    ]
    inits = [_i64("i0", 0), _i64("i1", 1), _i64("ax0", [0]), _i64("heads", [4]), _i64("hd", [16]),
             _i64("st0", [0]), _i64("en2", [2]), _i64("minus1", [-1]), _i64("two", 2), _i64("hid", [64]),
             _i64("zero", 0), _i64("one", 1)]
    outs = ["heads_out", "merged", "zeros", "flat", "positions"]
    return _model(nodes, [helper.make_tensor_value_info("x", F32, ["batch", "seq", 64])],
                  [helper.make_tensor_value_info(o, F32 if o != "positions" else I64, None) for o in outs],
                  inits, name="exporter")


def test_exporter_shape_chains_give_symbolic_shapes():
    model = _exporter_model()
    m = load_onnx(model)
    b, s = sym("batch"), sym("seq")
    assert m.main.result_types == [
        TensorType(DType.f32, (b, 4, s, 16)),
        TensorType(DType.f32, (b, 4, s * 16)),
        TensorType(DType.f32, (b, sympy.floor(s / 2))),
        TensorType(DType.f32, (b * s, 64)),
        TensorType(DType.i64, (s,)),
    ]
    text = _roundtrip(m)
    assert "?" not in text
    for dims in ({"batch": 1, "seq": 1}, {"batch": 2, "seq": 7}):
        _compare(model, m, random_inputs(model, dims, seed=5))


# ---- errors --------------------------------------------------------------------------------------

def test_truncated_file(tmp_path):
    data = (MODELS_DIR / "mlp.onnx").read_bytes()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ImportError_) as e:
        load_onnx(path)
    assert str(e.value) == f"{path}: not a valid ONNX model (protobuf parse failed)"


@pytest.mark.parametrize("data", [b"hello, this is not onnx", bytes(range(256)) * 4, b""],
                         ids=["text", "bytes", "empty"])
def test_garbage_file(tmp_path, data):
    path = tmp_path / "junk.onnx"
    path.write_bytes(data)
    msg = r"junk\.onnx: not a valid ONNX model \((protobuf parse failed|no graph)\)$"
    with pytest.raises(ImportError_, match=msg):
        load_onnx(path)


def test_missing_file(tmp_path):
    with pytest.raises(ImportError_, match=r"nope\.onnx: no such file$"):
        load_onnx(tmp_path / "nope.onnx")


@pytest.mark.parametrize("domain", ["", "com.example"])
def test_unsupported_op_names_op_domain_and_node(domain):
    node = helper.make_node("FrobnicateTensor", ["x"], ["y"], name="frob_7", domain=domain)
    model = _model([node], [helper.make_tensor_value_info("x", F32, ["n"])],
                   [helper.make_tensor_value_info("y", F32, None)], domains=[domain] if domain else [])
    with pytest.raises(UnsupportedOp) as e:
        load_onnx(model)
    assert (e.value.op_type, e.value.domain, e.value.node) == ("FrobnicateTensor", domain, "frob_7")
    assert e.value.exit_code == 3
    assert str(e.value) == f"unsupported op FrobnicateTensor (domain {domain or 'ai.onnx'}) at node 'frob_7'"


def test_unregistered_ai_onnx_ml_op_is_unsupported_by_name():
    node = helper.make_node("Normalizer", ["x"], ["y"], name="norm", domain="ai.onnx.ml", norm="MAX")
    model = _model([node], [helper.make_tensor_value_info("x", F32, ["n", 3])],
                   [helper.make_tensor_value_info("y", F32, None)], domains=["ai.onnx.ml"])
    with pytest.raises(UnsupportedOp, match=r"Normalizer.*ai.onnx.ml.*norm"):
        load_onnx(model)


@pytest.mark.parametrize("opset", [0, 99])
def test_opset_out_of_range(opset):
    model = _identity_model(["n"])
    model.opset_import[0].version = opset
    with pytest.raises(ImportError_, match=f"opset {opset} is (not a valid opset|newer)"):
        load_onnx(model.SerializeToString())


def test_undefined_input_and_non_tensor_input():
    model = _model([helper.make_node("Identity", ["ghost"], ["y"], name="ghostly")],
                   [helper.make_tensor_value_info("x", F32, ["n"])],
                   [helper.make_tensor_value_info("y", F32, None)])
    with pytest.raises(ImportError_, match=r'node "ghostly".*"ghost"'):
        load_onnx(model)
    seq = helper.make_tensor_sequence_value_info("x", F32, None)
    model = _model([helper.make_node("Identity", ["x"], ["y"])], [seq],
                   [helper.make_tensor_value_info("y", F32, None)])
    with pytest.raises(ImportError_, match='input "x" is a sequence; onnxcc supports tensors only'):
        load_onnx(model)


# ---- the public API ------------------------------------------------------------------------------

def test_public_api_round_trip_and_load_model(tmp_path):
    assert onnxcc.__version__ == "0.1.0"
    m = onnxcc.load_model(MODELS_DIR / "mlp.onnx")
    text = onnxcc.print_ir(m)
    path = tmp_path / "mlp.onnxir"
    path.write_text(text)
    assert onnxcc.print_ir(onnxcc.load_model(path)) == text
    assert onnxcc.print_ir(onnxcc.parse_ir(text)) == text
    with pytest.raises(OnnxccError, match=r"expected .onnx or .onnxir"):
        onnxcc.load_model(tmp_path / "model.txt")
    with pytest.raises(OnnxccError, match="no such file"):
        onnxcc.load_model(tmp_path / "absent.onnxir")
