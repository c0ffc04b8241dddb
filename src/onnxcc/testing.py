"""Test helpers shared by the test suite and benchmarks: the sample models, an onnxruntime
oracle, and random inputs for a model at a given setting of its symbolic dims.

onnxruntime is a test-only dependency, so it is imported inside `ort_run`, not at module load.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx

# src/onnxcc/testing.py -> parents[2] is the repository root (works for editable installs).
MODELS_DIR = Path(__file__).resolve().parents[2] / "models"

ModelLike = str | Path | bytes | onnx.ModelProto

# name (models/NAME.onnx) -> dim settings to test at. Each list includes 1 and a
# non-power-of-two. convnet's H/W start at 8: two 2x2 pools need H, W >= 4 to stay non-empty.
SAMPLE_MODELS: dict[str, list[dict[str, int]]] = {
    "mlp": [{"batch": 1}, {"batch": 3}, {"batch": 64}],
    "gelu_layernorm": [{"batch": 1, "seq": 1}, {"batch": 3, "seq": 7}, {"batch": 2, "seq": 64}],
    "transformer": [{"batch": 1, "seq": 1}, {"batch": 3, "seq": 7}, {"batch": 2, "seq": 64}],
    "convnet": [{"batch": 1, "H": 8, "W": 8}, {"batch": 3, "H": 13, "W": 13}, {"batch": 2, "H": 16, "W": 11}],
    "if_model": [{"batch": 1}, {"batch": 3}, {"batch": 64}],
    "loop_model": [{"batch": 1}, {"batch": 3}, {"batch": 64}],
    "scan_model": [{"batch": 1, "seq": 1}, {"batch": 3, "seq": 7}, {"batch": 2, "seq": 64}],
}


def _load(model: ModelLike) -> onnx.ModelProto:
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, bytes):
        return onnx.load_from_string(model)
    return onnx.load(str(model))


def ort_run(model: ModelLike, feeds: dict[str, np.ndarray], threads: int = 1) -> dict[str, np.ndarray]:
    """Run `model` with onnxruntime on CPU; returns {output name: array}."""
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    if isinstance(model, onnx.ModelProto):
        model = model.SerializeToString()
    elif isinstance(model, Path):
        model = str(model)
    sess = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds), strict=True))


def input_shapes(model: ModelLike, dims: dict[str, int]) -> dict[str, tuple[tuple[int, ...], np.dtype]]:
    """{input name: (concrete shape, numpy dtype)} for the graph inputs that are not initializers."""
    # a path's external weights are not needed for the signature
    m = onnx.load(str(model), load_external_data=False) if isinstance(model, (str, Path)) else _load(model)
    inits = {t.name for t in m.graph.initializer}
    out = {}
    for vi in m.graph.input:
        if vi.name in inits:  # IR < 4 style models list weights as inputs too
            continue
        tt = vi.type.tensor_type
        shape = []
        for d in tt.shape.dim:
            if d.HasField("dim_value"):
                shape.append(d.dim_value)
            elif d.dim_param in dims:
                shape.append(dims[d.dim_param])
            else:
                raise KeyError(f"input {vi.name!r}: no value given for dim {d.dim_param or '<unnamed>'!r}")
        out[vi.name] = (tuple(shape), onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type))
    return out


def random_inputs(model: ModelLike, dims: dict[str, int], seed: int = 0) -> dict[str, np.ndarray]:
    """Random feeds for `model` with its dim_params set from `dims`: floats ~ N(0, 0.5^2),
    ints in [0, 10), bools fair coin."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, (shape, dtype) in input_shapes(model, dims).items():
        if np.issubdtype(dtype, np.floating):
            feeds[name] = (rng.standard_normal(shape) * 0.5).astype(dtype)
        elif np.issubdtype(dtype, np.integer):
            feeds[name] = rng.integers(0, 10, size=shape).astype(dtype)
        elif dtype == np.bool_:
            feeds[name] = rng.random(shape) < 0.5
        else:
            raise TypeError(f"input {name!r}: unsupported dtype {dtype}")
    return feeds


def jit_run(module, inputs, function=None, parallel: bool = False) -> list[np.ndarray]:
    """Lower one function of an IR module to a kernel program, JIT it in-process and run it
    on `inputs` (dict by parameter name, or list). Checks op lowerings without linking a .so."""
    from onnxcc.codegen.cpu.jit import JitKernel
    from onnxcc.passes.lower import lower_function

    f = function or module.main
    if isinstance(inputs, dict):
        inputs = [inputs[a.name] for a in f.params]
    prog = lower_function(module, f, "jit_main")
    syms = {str(k): int(v) for k, v in f.subs.items()}
    return JitKernel(prog, parallel=parallel)(*inputs, syms=syms)


def jit_module(module, parallel: bool = False):
    """@main of an IR module lowered and JIT-compiled once (a compile per size would dominate
    an op test's time): returns feeds (dict by parameter name) -> results."""
    from onnxcc.codegen.cpu.jit import JitKernel
    from onnxcc.passes.lower import lower_function

    f = module.main
    kernel = JitKernel(lower_function(module, f, "jit_main"), parallel=parallel)
    syms = {str(k): int(v) for k, v in f.subs.items()}
    return lambda feeds: kernel(*(feeds[a.name] for a in f.params), syms=syms)


def check_lowering(model, dims_list, rtol=1e-4, atol=1e-5, pipeline="shape-inference,canonicalize"):
    """Import an ONNX model, lower it and JIT-run it at each dims setting; compare with onnxruntime."""
    from onnxcc.frontend import load_onnx
    from onnxcc.passes import run_pipeline

    m = load_onnx(model)
    run_pipeline(m, pipeline)
    for k, dims in enumerate(dims_list):
        feeds = random_inputs(model, dims, seed=k)
        want = ort_run(model, feeds)
        got = jit_run(m, feeds)
        assert len(got) == len(want), f"{len(got)} outputs, onnxruntime gives {len(want)} at {dims}"
        for (name, w), g in zip(want.items(), got, strict=True):
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"output {name} at {dims}")


def compile_lib(model: onnx.ModelProto, out_dir: str | Path, **options):
    """The user path in one call: `model` saved as OUT_DIR/model.onnx, compiled with `options`
    into OUT_DIR/lib and loaded (-> `onnxcc.load`'s model, ready to `run`)."""
    import onnxcc

    out_dir = Path(out_dir)
    path = out_dir / "model.onnx"
    onnx.save(model, str(path))
    onnxcc.compile(path, out_dir / "lib", **options)
    return onnxcc.load(out_dir / "lib")


def op_model(nodes, inputs, outputs, inits=None, opset: int = 17, ir_version: int = 8,
             domains: dict[str, int] | None = None) -> onnx.ModelProto:
    """A one-graph model for op tests: inputs [(name, onnx element type, shape)], outputs
    [names] (types left to inference), inits {name: array}; `domains` {domain: opset} imported
    besides ai.onnx's `opset` (com.microsoft's contrib ops)."""
    from onnx import helper, numpy_helper

    vis = [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs]
    ovis = [helper.make_empty_tensor_value_info(n) for n in outputs]
    inits = [numpy_helper.from_array(np.asarray(a), n) for n, a in (inits or {}).items()]
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in (domains or {}).items()]
    m = helper.make_model(helper.make_graph(nodes, "g", vis, ovis, inits), opset_imports=opsets)
    m.ir_version = ir_version
    return m


def spec_model(nodes, inputs, outputs, inits=None, opset: int = 18) -> onnx.ModelProto:
    """`op_model` with inputs [(name, numpy dtype, shape, *value range)] (the ranges are
    `spec_inputs`'), ir_version 10."""
    from onnx import helper

    typed = [(n, helper.np_dtype_to_tensor_dtype(np.dtype(t)), s) for n, t, s, *_ in inputs]
    return op_model(nodes, typed, outputs, inits, opset, ir_version=10)


def spec_inputs(inputs, dims: dict[str, int], seed: int) -> dict[str, np.ndarray]:
    """Random feeds for `spec_model`'s input list: each (name, dtype, shape, lo, hi) uniform in
    [lo, hi) (ints: integers in [lo, hi), default [0, 10); floats default [-2, 2); bools: a fair
    coin); a callable in place of the range, `f(rng, shape)`, makes the array itself."""
    rng = np.random.default_rng(seed)
    out = {}
    for n, t, s, *r in inputs:
        shape = tuple(dims[d] if isinstance(d, str) else d for d in s)
        if r and callable(r[0]):
            out[n] = r[0](rng, shape)
        elif np.dtype(t) == np.bool_:
            out[n] = rng.random(shape) < 0.5
        elif np.dtype(t).kind in "iu":
            lo, hi = r or (0, 10)
            out[n] = rng.integers(lo, hi, size=shape).astype(t)
        else:
            lo, hi = r or (-2.0, 2.0)
            out[n] = rng.uniform(lo, hi, size=shape).astype(t)
    return out


def check_jit(model, dims_list, rtol=1e-4, atol=1e-5, feeds=None, oracle: str = "ort"):
    """Compile `model` once (`jit_compile`); at each dims setting compare every output's dtype,
    shape and values with the oracle: onnxruntime, or "interp" (the numpy reference
    interpreter). feeds(dims, seed) makes the inputs (default `random_inputs`). Returns the
    kernel program, for tests that also inspect what was lowered."""
    from onnxcc.interp import run as interp_run

    mod, prog, kernel = jit_compile(model)
    for seed, dims in enumerate(dims_list):
        inputs = feeds(dims, seed) if feeds else random_inputs(model, dims, seed=seed)
        if oracle == "ort":
            want = list(ort_run(model, inputs).items())
        else:
            want = list(zip([o.name for o in model.graph.output], interp_run(mod, inputs)))
        got = kernel(*[inputs[a.name] for a in mod.main.params])
        assert len(got) == len(want), f"{len(got)} outputs, the oracle gives {len(want)} at {dims}"
        for (name, w), g in zip(want, got):
            assert g.dtype == w.dtype, (name, g.dtype, w.dtype)
            assert g.shape == w.shape, (name, dims, g.shape, w.shape)
            np.testing.assert_allclose(g, w, rtol=rtol, atol=atol, err_msg=f"output {name} at {dims}")
    return prog


def jit_compile(model, pipeline: str = "shape-inference,canonicalize", name: str = "jit_main"):
    """Import an ONNX model, run `pipeline`, lower @main and JIT it in-process.
    Returns (module, kernel program, JitKernel): what op-lowering tests inspect and call."""
    from onnxcc.codegen.cpu.jit import JitKernel
    from onnxcc.frontend import load_onnx
    from onnxcc.passes import run_pipeline
    from onnxcc.passes.lower import lower_function

    mod = load_onnx(model)
    run_pipeline(mod, pipeline)
    prog = lower_function(mod, mod.main, name)
    return mod, prog, JitKernel(prog)


def to_half_model(model: ModelLike, elem: int = onnx.TensorProto.FLOAT16,
                  frm: int = onnx.TensorProto.FLOAT) -> onnx.ModelProto:
    """A copy of a float32 model in float16 (elem FLOAT16) or bfloat16 (BFLOAT16): its float
    initializers and Constant / ConstantOfShape tensors rounded (nearest even), its float
    inputs, outputs and value infos retyped, and its Casts to float retargeted, in every
    subgraph. Float attributes (epsilon, alpha) stay what they are: ops read them as such.
    `frm` names the float type to replace: to_half_model(half, FLOAT, BFLOAT16) turns a
    bf16 model back into f32 with the rounded weights (an f32 oracle for it)."""
    import ml_dtypes
    from onnx import numpy_helper

    T = onnx.TensorProto
    npdt = {T.FLOAT16: np.float16, T.BFLOAT16: ml_dtypes.bfloat16, T.FLOAT: np.float32}[elem]
    m = onnx.ModelProto()
    m.CopyFrom(_load(model))

    def tensor(t: onnx.TensorProto) -> None:
        if t.data_type == frm:
            t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(npdt), t.name))

    def graph(g: onnx.GraphProto) -> None:
        for t in g.initializer:
            tensor(t)
        for vi in [*g.input, *g.output, *g.value_info]:
            if vi.type.tensor_type.elem_type == frm:
                vi.type.tensor_type.elem_type = elem
        for n in g.node:
            for a in n.attribute:
                if a.type == onnx.AttributeProto.TENSOR:
                    tensor(a.t)
                elif a.type == onnx.AttributeProto.GRAPH:
                    graph(a.g)
                elif a.type == onnx.AttributeProto.GRAPHS:
                    for sub in a.graphs:
                        graph(sub)
                elif n.op_type == "Cast" and a.name == "to" and a.i == frm:
                    a.i = elem

    graph(m.graph)
    return m
