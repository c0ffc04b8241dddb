"""Helpers for the op tests: one ONNX node built twice, as an onnx.helper model and as the IR
module that mirrors it (what the importer would produce), so the numpy reference can be
compared with onnxruntime and the symbolic shape rule with the concrete result."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from onnxcc.interp import run as interp_run
from onnxcc.ir import DType, Function, Module, Op, TensorType, evaluate, sym
from onnxcc.ir.core import Block
from onnxcc.ir.parser import parse_module
from onnxcc.passes import run_pipeline
from onnxcc.testing import ort_run

_ONNX_TYPE = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16, np.float64: TensorProto.DOUBLE,
              np.int64: TensorProto.INT64, np.int32: TensorProto.INT32, np.int8: TensorProto.INT8,
              np.uint8: TensorProto.UINT8, np.bool_: TensorProto.BOOL, np.uint32: TensorProto.UINT32}


#: the value of a symbol an `envs` entry does not set
DEFAULT_DIM = 3


def _dims(shape, env):
    return tuple(env[d] if isinstance(d, str) else d for d in shape)


def _random(rng, dtype, shape, lo, hi):
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if dtype.kind in "iu":
        return rng.integers(int(lo), int(hi), size=shape).astype(dtype)
    return rng.uniform(lo, hi, size=shape).astype(dtype)


def build(op_type, inputs, attrs=None, consts=None, n_outputs=1, opset=17, domain=""):
    """-> (onnx ModelProto, IR Module) for a single node.

    inputs: [(name, numpy dtype, shape with str symbols), ...]; an entry None is an absent
    optional input. consts: {name: array} inputs fed as initializers (cc.const in the IR).
    """
    attrs, consts = dict(attrs or {}), dict(consts or {})
    names = ["" if i is None else i[0] for i in inputs]
    outs = [f"y{i}" for i in range(n_outputs)]
    # a TENSOR attribute: a TensorProto in the node, an np.ndarray in the IR (as the importer does)
    to_proto, to_array = onnx.numpy_helper.from_array, onnx.numpy_helper.to_array
    onnx_attrs = {k: to_proto(v) if isinstance(v, np.ndarray) else v for k, v in attrs.items()}
    attrs = {k: to_array(v) if isinstance(v, onnx.TensorProto) else v for k, v in attrs.items()}
    node = helper.make_node(op_type, names, outs, name="n0", domain=domain, **onnx_attrs)
    vis = [helper.make_tensor_value_info(n, _ONNX_TYPE[np.dtype(dt).type], list(s))
           for n, dt, s, *_ in (i for i in inputs if i is not None) if n not in consts]
    inits = [onnx.numpy_helper.from_array(v, n) for n, v in consts.items()]
    ovis = [helper.make_empty_tensor_value_info(o) for o in outs]
    graph = helper.make_graph([node], "g", vis, ovis, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8

    m = Module(name="t", attrs={"opset": opset})
    body = Block()
    vals = {}
    for n, dt, s, *_ in (i for i in inputs if i is not None):
        if n in consts:
            continue
        for d in s:
            if isinstance(d, str):
                m.symbols.declare(d, origin=f'input "{n}"')
        vals[n] = body.add_arg(TensorType(DType.from_np(dt), tuple(sym(d) if isinstance(d, str) else d
                                                                      for d in s)), n)
    for n, v in consts.items():
        c = Op("cc.const", [], [TensorType(DType.from_np(v.dtype), v.shape)], {"value": v}, result_names=[n])
        body.append(c)
        vals[n] = c.result
    ir_attrs = dict(attrs)
    present = [vals[n] for n in names if n]
    absent = [i for i, n in enumerate(names) if not n and any(names[i + 1:])]
    if absent:
        ir_attrs["absent"] = absent
    placeholder = TensorType(DType.f32, ())
    op = Op(f"{domain or 'onnx'}.{op_type}", present, [placeholder] * n_outputs, ir_attrs, loc="n0",
            result_names=outs)
    body.append(op)
    body.append(Op("return", op.results))
    m.add_function(Function("main", body, [placeholder] * n_outputs))
    return model, m


def infer(m: Module) -> Module:
    run_pipeline(m, "shape-inference")
    text = str(m)
    assert str(parse_module(text)) == text, "print -> parse -> print is not a fixed point"
    return m


def check(op_type, inputs, attrs=None, envs=({},), consts=None, n_outputs=1, opset=17, rtol=1e-4, atol=1e-5,
          seed=0, expect_shapes=None):
    """Run one node through onnxruntime and our interpreter at each dim setting in `envs`.

    inputs entries may carry a value range: (name, dtype, shape, lo, hi) (default -2, 2 for
    floats, 0..10 for ints). Checks values and that the inferred symbolic output shapes
    evaluate to the concrete ones; a symbol an env does not set is DEFAULT_DIM. Attributes
    are plain python values (a TENSOR attribute as an np.ndarray). Where onnxcc's importer
    exists (and takes the opset), the imported module must give the same types and values.
    Returns the IR module after shape inference.
    """
    model, m = build(op_type, inputs, attrs, consts, n_outputs, opset)
    infer(m)
    if expect_shapes is not None:
        got = [str(r.type) for r in m.main.return_op.operands]
        assert got == list(expect_shapes), got
    imported = _import(model, opset)
    # the importer's module must agree with the hand-built one
    want_types = [str(r.type) for r in m.main.return_op.operands]
    assert [str(r.type) for r in imported.main.return_op.operands] == want_types
    rng = np.random.default_rng(seed)
    symbols = {d for i in inputs if i is not None for d in i[2] if isinstance(d, str)}
    for env in envs:
        env = {**{name: DEFAULT_DIM for name in symbols}, **env}
        feeds = {}
        for n, dt, s, *rng_ in (i for i in inputs if i is not None):
            if consts and n in consts:
                continue
            lo, hi = rng_ if rng_ else ((0, 10) if np.dtype(dt).kind in "iu" else (-2.0, 2.0))
            feeds[n] = _random(rng, dt, _dims(s, env), lo, hi)
        want = ort_run(model, feeds)
        got = interp_run(m, feeds)
        for a, b in zip(interp_run(imported, feeds), got, strict=True):
            np.testing.assert_array_equal(a, b, err_msg=f"{op_type}: imported module differs")
        for i, (g, r) in enumerate(zip(got, m.main.return_op.operands, strict=True)):
            w = want[f"y{i}"]
            assert g.dtype == w.dtype, f"output {i}: dtype {g.dtype} != onnxruntime {w.dtype}"
            assert g.shape == w.shape, f"output {i}: shape {g.shape} != onnxruntime {w.shape}"
            assert tuple(evaluate(d, env) for d in r.type.shape) == w.shape, (r.type, env)
            if w.dtype.kind == "f":
                np.testing.assert_allclose(g, w, rtol=rtol, atol=atol,
                                           err_msg=f"{op_type} output {i} at {env}")
            else:
                np.testing.assert_array_equal(g, w, err_msg=f"{op_type} output {i} at {env}")
    return m


def _import(model, opset: int):
    """The model through onnxcc's importer (any opset: old ones are converted on import)."""
    from onnxcc.frontend import load_onnx  # every opset imports: the cross-check always runs

    return load_onnx(model)


@pytest.fixture
def ort_check():
    return check


@pytest.fixture
def build_node():
    return build


@pytest.fixture
def infer_ir():
    """Parse IR text, run shape-inference, check the round trip; returns the module."""

    def go(text: str) -> Module:
        return infer(parse_module(text))

    return go
