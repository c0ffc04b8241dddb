"""ONNX -> graph IR: `load_onnx(path | bytes | ModelProto) -> Module`.

What the importer does, in order:
  - reads the protobuf (a bad file is one clear `ImportError_` line), checks the ai.onnx
    opset (any the installed onnx knows), inlines model-local functions, and upgrades a model
    older than opset 13 (opset_compat.py: onnx's version converter, plus per-op rules where
    the converter fails or changes the meaning);
  - graph inputs (not initializers) become `@main` parameters; `dim_param` names become
    module symbols, unnamed / -1 dims fresh symbols named `<input>_d<axis>`;
  - initializers become `cc.const` at the top of their block (inline up to INLINE_MAX
    elements, else a `WeightRef` into `module.weights`); `Constant` nodes likewise;
  - every other node becomes `onnx.<OpType>` (custom domains `<domain>.<OpType>`) with its
    attributes converted, absent optional inputs dropped (listed in attr `absent` when a
    later operand is present), and its shape rule run at once, so the IR is typed as it is
    built (one value map for the whole import carries shape-chain values);
  - GRAPH attributes become regions, isolated from above: a subgraph's free variables are
    passed as extra operands and bound to extra block arguments (If / Loop / Scan layouts
    as in the op conventions); subgraph outputs become `yield`, graph outputs `return`.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import onnx
import onnx.inliner
import onnx.numpy_helper
import sympy
from google.protobuf.message import DecodeError
from onnx.external_data_helper import uses_external_data

from ..errors import ImportError_, OnnxccError, ParseError, UnsupportedOp, ValueDependentError
from ..ir import Block, Dim, DType, Function, Module, Op, Region, TensorType, Value, WeightRef, canon, identifier
from ..ops import InferCtx, get_opdef
from ..ops.control_flow import carried_varies, ragged_scans
from ..ops.dtypes import onnx_dtype
from ..ops.infer import infer_block, infer_op
from . import opset_compat, sequences
from .node_order import topological
from .onnx_ops import CONVERTERS
from .validate import validate_model

#: the oldest ai.onnx opset onnxcc imports; the newest is what the installed onnx knows
MIN_OPSET = 1
#: constants with up to this many elements are stored inline in the IR, larger ones as weights
INLINE_MAX = 64
#: an overridable input's default (its initializer) is `module.weights[DEFAULT_PREFIX + name]`,
#: the names listed in `module.attrs["input_defaults"]`; compile writes them beside the library
DEFAULT_PREFIX = "default:"

ModelSource = str | os.PathLike | bytes | bytearray | onnx.ModelProto

_ONNX_DOMAINS = ("", "ai.onnx")
_ATTR = onnx.AttributeProto
_PLACEHOLDER = TensorType(DType.f32, ())  # a result's type before its shape rule runs
_SYMBOL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# non-tensor ONNX types, for error messages
_TYPE_KINDS = {"sequence_type": "a sequence", "optional_type": "an optional", "map_type": "a map",
               "sparse_tensor_type": "a sparse tensor"}
# names the dim-expression parser reads as functions or keywords: never used as symbols
_RESERVED = {"floor", "ceiling", "Max", "Min", "Mod", "Abs", "true", "false"}


def load_onnx(model: ModelSource, name: str | None = None, structure: dict[str, str] | None = None,
              values: dict[str, list] | None = None, dims: dict[str, int] | None = None) -> Module:
    """Import an ONNX model (a path, serialized bytes or a ModelProto) as a typed Module.
    `structure`: the spec of each sequence / optional input (io_structure.py); `values`: flat
    values of inputs that decide a sequence's structure (frontend/sequences.py); `dims`:
    values of input dims a sequence's length hangs on (@main is guarded on them)."""
    proto, base_dir, what, default_name = _read(model)
    return import_model(proto, name or default_name, base_dir=base_dir, what=what, structure=structure,
                        values=values, dims=dims)


def import_model(proto: onnx.ModelProto, name: str = "model", base_dir: str = "",
                 what: str = "model", structure: dict[str, str] | None = None,
                 values: dict[str, list] | None = None, dims: dict[str, int] | None = None) -> Module:
    """Import an in-memory ModelProto; external data is read relative to `base_dir`."""
    if not proto.HasField("graph"):
        raise ImportError_(f"{what}: not a valid ONNX model (no graph)")
    bad = _non_utf8_field(proto)
    if bad:
        raise ImportError_(f"{what}: not a valid ONNX model (field {bad} is not valid UTF-8)")
    opset = _check_opset(proto, what)
    validate_model(proto, opset, what)
    if len(proto.functions):
        try:
            proto = onnx.inliner.inline_local_functions(proto)
        except Exception as e:
            raise ImportError_(f"{what}: cannot inline model-local functions: {_one_line(e)}") from e
    if opset < opset_compat.TARGET_OPSET:
        proto = opset_compat.upgrade(proto, opset, what)
    module = Module(name=_ident(name))
    module.attrs["opset"] = opset
    imp = _Importer(module, base_dir, what, structure=structure, values=values, dims=dims)
    try:
        imp.import_main(proto.graph, proto.ir_version)
    except OnnxccError:
        if not imp.split_ifs:
            raise
        # an If whose result ranks hang on a condition over dims was typed as its then_branch,
        # and what follows does not fit that typing: type such Ifs as their else_branch (the
        # split-if pass makes both versions, and drops the one that cannot hold)
        module = Module(name=_ident(name))
        module.attrs["opset"] = opset
        imp = _Importer(module, base_dir, what, branch=1, structure=structure, values=values, dims=dims)
        imp.import_main(proto.graph, proto.ir_version)
    return module


# ---- reading ---------------------------------------------------------------------------------

def _read(model: ModelSource) -> tuple[onnx.ModelProto, str, str, str]:
    """-> (proto, base dir for external data, name for messages, default module name)."""
    if isinstance(model, onnx.ModelProto):
        return model, "", "model", model.graph.name or "model"
    if isinstance(model, (bytes, bytearray, memoryview)):
        proto = _parse(bytes(model), "<bytes>")
        return proto, "", "<bytes>", proto.graph.name or "model"
    if not isinstance(model, (str, os.PathLike)):
        raise TypeError(f"load_onnx takes a path, bytes or onnx.ModelProto, not {type(model).__name__}")
    path = Path(model)
    if not path.exists():
        raise ImportError_(f"{path}: no such file")
    if path.is_dir():
        raise ImportError_(f"{path}: is a directory, not an ONNX file")
    try:
        data = path.read_bytes()
    except OSError as e:
        raise ImportError_(f"{path}: cannot read: {e.strerror or e}") from e
    return _parse(data, str(path)), str(path.parent), str(path), path.stem


def _parse(data: bytes, what: str) -> onnx.ModelProto:
    try:
        proto = onnx.load_from_string(data)
    except (DecodeError, ValueError, RuntimeError) as e:
        raise ImportError_(f"{what}: not a valid ONNX model (protobuf parse failed)") from e
    if not proto.HasField("graph"):
        raise ImportError_(f"{what}: not a valid ONNX model (no graph)")
    return proto


def _non_utf8_field(msg) -> str | None:
    """The name of a string field holding invalid UTF-8 (protobuf hands those out as bytes)."""
    for fd, val in msg.ListFields():
        if fd.type not in (fd.TYPE_STRING, fd.TYPE_MESSAGE):
            continue
        items = val if _repeated(fd) else [val]
        for v in items:
            if fd.type == fd.TYPE_STRING:
                if not isinstance(v, str):
                    return f"{msg.DESCRIPTOR.name}.{fd.name}"
            else:
                bad = _non_utf8_field(v)
                if bad:
                    return bad
    return None


def _repeated(fd) -> bool:
    rep = getattr(fd, "is_repeated", None)
    return bool(rep) if rep is not None else fd.label == fd.LABEL_REPEATED


def _check_opset(proto: onnx.ModelProto, what: str) -> int:
    newest = onnx.defs.onnx_opset_version()
    versions = {o.domain: o.version for o in proto.opset_import}
    v = versions.get("", versions.get("ai.onnx"))
    if v is None:
        if any(n.domain in _ONNX_DOMAINS for n in proto.graph.node):
            raise ImportError_(f"{what}: the model imports no ai.onnx opset")
        return newest  # only other domains' ops: they say for themselves what they take
    if v < MIN_OPSET:
        raise ImportError_(f"{what}: ai.onnx opset {v} is not a valid opset (onnxcc imports {MIN_OPSET} "
                           f"to {newest})")
    if v > newest:
        raise ImportError_(f"{what}: ai.onnx opset {v} is newer than the installed onnx knows "
                           f"(supported: {MIN_OPSET} to {newest})")
    return v


# ---- the importer ----------------------------------------------------------------------------

class _Importer:
    """Module-wide state: symbols from dim_params, weights, the value map for shape chains."""

    def __init__(self, module: Module, base_dir: str, what: str, branch: int = 0,
                 structure: dict[str, str] | None = None, values: dict[str, list] | None = None,
                 dims: dict[str, int] | None = None):
        self.module = module
        #: values of symbols a sequence's length may hang on; those used are `fixed_dims`
        #: and become @main's guard
        self.dim_values = dict(dims or {})
        self.fixed_dims: dict[str, int] = {}
        #: flat values of graph inputs a sequence's structure may depend on; those used are
        #: recorded in `baked` and become @main's value guard
        self.input_values = dict(values or {})
        self.baked: dict[str, list] = {}
        #: @main's block and its ONNX input names, once import_main has made them
        self.main_block: Block | None = None
        self.input_names: list[str] = []
        #: the graph inputs whose values may decide a sequence's structure (named together)
        self.structure_inputs: list[str] = []
        #: the spec of each sequence / optional graph input (frontend/sequences.py)
        self.structure = dict(structure or {})
        self.base_dir = base_dir
        self.what = what
        #: the branch an If whose result ranks depend on the condition is typed as, for now
        self.branch = branch
        #: whether the graph has such an If
        self.split_ifs = False
        #: Value -> known value (object ndarray of Dims), shared by every shape rule run
        self.values: dict = {}
        #: dim_param string -> its Dim
        self.dim_params: dict[str, Dim] = {}

    def import_main(self, g: onnx.GraphProto, ir_version: int = onnx.IR_VERSION) -> Function:
        inits = {t.name for t in g.initializer} | {t.values.name for t in g.sparse_initializer}
        # From IR 4 on, a graph input named like an initializer is an input whose default is the
        # initializer (onnxruntime lets the caller override it): an input here, not a constant.
        # Before IR 4 every initializer had to be listed as an input too: those are constants.
        overridable = {vi.name for vi in g.input if vi.name in inits} if ir_version >= 4 else set()
        inputs = [vi for vi in g.input if vi.name not in inits or vi.name in overridable]
        # plain-identifier dim_params first, so an expression dim ("seq + 1") can refer to them
        for vi in inputs:
            for axis, d in enumerate(_dims_of(vi)):
                if d.HasField("dim_param") and _SYMBOL_NAME.fullmatch(d.dim_param):
                    self.dim_param(d.dim_param, f'input "{vi.name}" dim {axis}')
        body = Block()
        self.main_block, self.input_names = body, [vi.name for vi in inputs]
        self.structure_inputs = sequences.structure_inputs(g, set(self.input_names))
        b = GraphBuilder(self, body, {}, prefix="")
        in_specs = []
        for vi in inputs:
            if vi.name in b.scope:
                raise ImportError_(f"{self.what}: graph input {vi.name!r} is declared twice")
            if sequences.is_structured(vi.type):
                item = sequences.input_item(self, vi, self.structure.get(vi.name), body.add_arg)
                b.scope[vi.name] = item
                in_specs.append([vi.name, sequences.flatten_output(vi.name, item, "")[0]])
                continue
            b.scope[vi.name] = body.add_arg(self.value_info_type(vi, f'input "{vi.name}"'), vi.name)
            in_specs.append([vi.name, "tensor"])
        for t in g.initializer:
            if t.name in overridable:
                self.module.weights[DEFAULT_PREFIX + t.name] = self.tensor(t, f'initializer "{t.name}"')
        if overridable:
            self.module.attrs["input_defaults"] = [vi.name for vi in inputs if vi.name in overridable]
        b.build(g, skip_initializers=overridable)
        items = [b.lookup(o.name, f'graph output "{o.name}"') for o in g.output]
        outs, out_names, out_specs = [], [], []
        for o, v in zip(g.output, items):
            spec, flat = sequences.flatten_output(o.name, v, f'{self.what}: graph output "{o.name}"')
            out_specs.append([o.name, spec])
            if isinstance(v, Value):
                self.check_declared(o, v.type, f'graph output "{o.name}"')
            outs += [x for _, x in flat]
            out_names += [n for n, _ in flat]
        if any(sp != "tensor" for _, sp in in_specs + out_specs):
            # the loader flattens and groups the caller's lists and Nones by this (NAME.json)
            self.module.attrs["input_structure"] = [f"{sp} {n}" for n, sp in in_specs]
            self.module.attrs["output_structure"] = [f"{sp} {n}" for n, sp in out_specs]
        body.append(Op("return", outs))
        attrs: dict = {"outputs": out_names}
        if self.baked:  # the build holds only for these values: @main is a value version
            attrs["value_guard"] = [f"{n}:{' '.join(repr(x) for x in v)}" for n, v in self.baked.items()]
        # a dim a sequence's length hung on: this build holds for its value only
        guard = sympy.And(*[sympy.Eq(self.module.symbols[n].symbol, v) for n, v in self.fixed_dims.items()])
        # NOTE: returned values get renamed by passes; the artifact needs the graph's names
        return self.module.add_function(Function("main", body, [v.type for v in outs], guard=guard, attrs=attrs))

    def input_value(self, name: str) -> list[int] | None:
        """The value given for graph input `name` (integers and bools only), recorded as used."""
        v = self.input_values.get(name)
        default = self.module.weights.get(DEFAULT_PREFIX + name)
        if v is None and isinstance(default, np.ndarray) and default.size <= 64:
            v = default.reshape(-1).tolist()  # an input with an initializer: its default, guarded
        if v is None or not all(float(x).is_integer() for x in v):
            return None
        self.baked[name] = list(v)
        return [int(x) for x in v]

    def check_declared(self, vi: onnx.ValueInfoProto, got: TensorType, where: str) -> None:
        """A declared elem_type that differs from the computed one is refused (as onnxruntime
        and the ONNX checker do); declared shapes are hints (onnxruntime merges them leniently)."""
        if not vi.type.HasField("tensor_type") or not vi.type.tensor_type.elem_type:
            return
        want = self.dtype(vi.type.tensor_type.elem_type, where)
        if want != got.dtype:
            raise ImportError_(f"{self.what}: {where} is declared {want.value}, but the graph computes "
                               f"{got.dtype.value} there")

    # ---- types and dims ----------------------------------------------------------------------
    def dtype(self, enum: int, where: str) -> DType:
        try:
            return onnx_dtype(enum)
        except ValueError as e:
            raise ImportError_(f"{self.what}: {where}: {e}") from None

    def value_info_type(self, vi: onnx.ValueInfoProto, where: str) -> TensorType:
        kind = vi.type.WhichOneof("value")
        if kind != "tensor_type":
            what = _TYPE_KINDS.get(kind, f"of type {kind}") if kind else "untyped"
            raise ImportError_(f"{self.what}: {where} is {what}; onnxcc supports tensors only")
        tt = vi.type.tensor_type
        dt = self.dtype(tt.elem_type, where)
        if not tt.HasField("shape"):
            raise ImportError_(f"{self.what}: {where} has no shape (unknown rank); onnxcc needs the rank")
        return TensorType(dt, tuple(self.dim(d, vi.name, axis, f"{where} dim {axis}")
                                    for axis, d in enumerate(tt.shape.dim)))

    def dim(self, d, name: str, axis: int, origin: str) -> Dim:
        if d.HasField("dim_value") and d.dim_value >= 0:
            return int(d.dim_value)
        if d.HasField("dim_param") and d.dim_param and not _placeholder(d.dim_param):
            return self.dim_param(d.dim_param, origin)
        return self.module.symbols.fresh(_ident(f"{name}_d{axis}"), origin=origin)

    def dim_param(self, s: str, origin: str) -> Dim:
        """The Dim for a dim_param: a symbol (made an identifier), or an expression over others."""
        if s in self.dim_params:
            return self.dim_params[s]
        d = None if _SYMBOL_NAME.fullmatch(s) else self._dim_expr(s)
        if d is None:
            d = self.module.symbols.fresh(_ident(s), origin=origin)
        self.dim_params[s] = d
        return d

    def _dim_expr(self, s: str) -> Dim | None:
        """A dim_param like "batch + 1" or "2*seq" over dim_params already seen, or None."""
        from ..ir.parser import Parser

        try:
            p = Parser(s)
            e = p.parse_dim()
            if p.peek().kind != "eof":
                return None
        except ParseError:
            return None
        e = sympy.sympify(e)
        if e.is_Integer:
            return int(e) if e >= 0 else None
        known = set(self.dim_params.values())
        if not e.free_symbols <= known or e.is_integer is not True:
            return None
        return canon(e)

    # ---- tensors and attributes ----------------------------------------------------------------
    def tensor(self, t: onnx.TensorProto, where: str) -> np.ndarray:
        dt = self.dtype(t.data_type, where)
        try:
            arr = onnx.numpy_helper.to_array(t, base_dir=self.base_dir)
        except Exception as e:
            problem = "cannot read external data" if uses_external_data(t) else "malformed tensor"
            raise ImportError_(f"{self.what}: {where}: {problem}: {_one_line(e)}") from e
        return _c_array(arr, dt.np)

    def attr(self, a: onnx.AttributeProto, node: onnx.NodeProto, loc: str):
        where = f'node "{loc}" attribute {a.name!r}'
        t = a.type
        if t == _ATTR.INT:
            return int(a.i)
        if t == _ATTR.FLOAT:
            return float(a.f)
        if t == _ATTR.STRING:
            return a.s.decode("utf-8", errors="replace")
        if t == _ATTR.INTS:
            return [int(x) for x in a.ints]
        if t == _ATTR.FLOATS:
            return [float(x) for x in a.floats]
        if t == _ATTR.STRINGS:
            return [s.decode("utf-8", errors="replace") for s in a.strings]
        if t == _ATTR.TENSOR:
            return self.tensor(a.t, where)
        if t == _ATTR.TENSORS:
            return [self.tensor(x, where) for x in a.tensors]
        kind = _ATTR.AttributeType.Name(t) if t in _ATTR.AttributeType.values() else str(t)
        raise UnsupportedOp(node.op_type, node.domain, loc,
                            f"attribute {a.name!r} of type {kind} is not supported")


class GraphBuilder:
    """Builds one block from one ONNX graph; converters in onnx_ops.py receive one of these."""

    def __init__(self, imp: _Importer, block: Block, scope: dict[str, Value], prefix: str):
        self.imp = imp
        self.module = imp.module
        self.block = block
        #: ONNX name -> Value, for this graph only (regions are isolated from above)
        self.scope = scope
        #: prefix for the locs of unnamed nodes (the parent node's loc inside subgraphs)
        self.prefix = prefix
        #: the loc of the node being converted (the default loc of `emit`)
        self.loc = ""

    def build(self, g: onnx.GraphProto, skip_initializers: set[str] = frozenset()) -> None:
        if len(g.sparse_initializer):
            raise ImportError_(f"{self.imp.what}: sparse initializers are not supported")
        for t in g.initializer:
            if t.name in skip_initializers:  # an overridable input (import_main)
                continue
            arr = self.imp.tensor(t, f'initializer "{t.name}"')
            self.scope[t.name] = self.const(arr, t.name, loc=t.name)
        for i, node in topological(g.node, self.scope, _node_uses):
            self.node(node, i)

    def lookup(self, name: str, where: str) -> Value:
        v = self.scope.get(name)
        if v is None:
            raise ImportError_(f'{self.imp.what}: {where} uses "{name}", which is not defined before it')
        return v

    # ---- building ops ------------------------------------------------------------------------
    def emit(self, name: str, operands, attrs: dict | None = None, n_results: int = 1, loc: str | None = None,
             regions: list[Region] | None = None, result_names=()) -> list[Value]:
        """Append an op, run its shape rule now, and return its results."""
        op = Op(name, list(operands), [_PLACEHOLDER] * n_results, attrs or {}, regions,
                self.loc if loc is None else loc, result_names)
        self.block.append(op)
        if op.regions:
            # the bodies were typed as they were built; a control-flow OpDef may now refine
            # them from the operands (e.g. a loop-carried value whose shape varies)
            values = self.imp.values
            get_opdef(name).infer_regions(InferCtx(op, self.module, values),
                                          lambda blk: infer_block(blk, self.module, values, self.imp.branch))
        # provisional: an If whose result ranks depend on a condition over dims is typed as its
        # then_branch for now; the split-if pass gives each value of the condition its own
        # version (any later shape inference of the unsplit If refuses it)
        self.imp.split_ifs |= infer_op(op, self.module, self.imp.values, provisional=self.imp.branch) is None
        return list(op.results)

    def const(self, arr: np.ndarray, name: str = "", loc: str | None = None) -> Value:
        """A `cc.const`: inline when small, else a weight in `module.weights`."""
        arr = _c_array(arr)
        t = TensorType(DType.from_np(arr.dtype), arr.shape)
        if arr.size <= INLINE_MAX:
            value = arr
        else:
            wname, k = name or "w", 0
            while wname in self.module.weights:
                k += 1
                wname = f"{name or 'w'}_{k}"
            self.module.weights[wname] = arr
            value = WeightRef(wname)
        op = Op("cc.const", (), [t], {"value": value}, loc=self.loc if loc is None else loc,
                result_names=[name])
        self.block.append(op)
        infer_op(op, self.module, self.imp.values)
        return op.result

    def inputs(self, node: onnx.NodeProto) -> list[Value | None]:
        """The node's inputs as Values, None where an optional input is absent."""
        return [self.lookup(n, f'node "{self.loc}" ({node.op_type})') if n else None for n in node.input]

    def attrs(self, node: onnx.NodeProto) -> dict:
        """The node's non-graph attributes, converted."""
        return {a.name: self.imp.attr(a, node, self.loc) for a in node.attribute if a.type != _ATTR.GRAPH}

    # ---- nodes -------------------------------------------------------------------------------
    def node(self, node: onnx.NodeProto, index: int) -> None:
        self.loc = node.name or f"{self.prefix}{node.op_type}_{index}"
        if sequences.wants(self, node):  # resolved at import: the IR holds no sequence
            self._bind(node, sequences.convert(self, node))
            return
        domain, op_type = node.domain, node.op_type
        conv = None
        if domain in _ONNX_DOMAINS:
            name = "onnx." + op_type
            if op_type == "Constant":
                conv = _constant
            else:
                conv = CONVERTERS.get(op_type)
        elif opset_compat.compat_since(domain) is not None:
            # an old-opset node set aside by opset_compat.upgrade: its rule imports it
            since = opset_compat.compat_since(domain)
            results = opset_compat.convert(node, self, since)
            self._bind(node, results)
            return
        else:  # another domain (ai.onnx.ml, ai.onnx.preview.training, com.microsoft): registered by name
            name = f"{domain}.{op_type}"
        if conv is None and get_opdef(name) is None:
            raise UnsupportedOp(op_type, domain, self.loc)
        results = conv(node, self) if conv is not None else self.generic(node, name)
        if name == "onnx.Loop" and results and carried_varies(results[0].owner, self.module) \
                and sequences.can_unroll(self, node):
            # a carried value that changes shape across iterations: unrolled when its trip
            # count and condition are known, every iteration typed on its own (else it stays
            # a Loop, compiled as one with the varying dims re-bound per iteration)
            results = self._unroll_or_keep(node, results)
        self._bind(node, results)

    def _unroll_or_keep(self, node: onnx.NodeProto, results: list) -> list:
        """Unroll a Loop whose trip count is known; a body condition that turns out to
        depend on data drops the partial unrolling and keeps the Loop."""
        loop = results[0].owner
        mark, saved = len(self.block.ops), list(self.module.constraints)
        try:
            unrolled = sequences.unroll_loop(self, node)
        except (sequences.DataCondition, ValueDependentError) as e:
            # a trip count M given as an input with no value: kept, M read into a symbol at
            # dispatch by value-symbols (one build for every M instead of one per value; a
            # scan output whose slices move is typed by the first one's, control_flow.LoopOp),
            # unless the slices are a carried value itself (then per-value builds)
            if isinstance(e, ValueDependentError) and ragged_scans(loop, self.module):
                raise
            for op in reversed(self.block.ops[mark:]):
                op.erase()
            self.module.constraints[:] = saved
            return results
        loop.erase()
        return unrolled

    def _bind(self, node: onnx.NodeProto, results: list[Value]) -> None:
        op_type = node.op_type
        wanted = [n for n in node.output]
        if len(results) < len(_trim(wanted)):
            raise ImportError_(f'{self.imp.what}: node "{self.loc}" ({op_type}) has {len(_trim(wanted))} '
                               f"outputs, its conversion gave {len(results)}")
        for out, v in zip(wanted, results):
            if out:
                if isinstance(v, Value):
                    v.name = v.name or out
                self.scope[out] = v

    def generic(self, node: onnx.NodeProto, name: str) -> list[Value]:
        """The 1:1 path: inputs -> operands, attributes converted, GRAPH attributes -> regions."""
        slots = list(node.input)
        attrs = self.attrs(node)
        graphs = [a for a in node.attribute if a.type == _ATTR.GRAPH]
        captures: list[str] = []
        for a in graphs:
            for n in free_vars(a.g):
                if n not in captures:
                    captures.append(n)
        slots = _trim(slots + captures)
        absent = [i for i, n in enumerate(slots) if not n]
        where = f'node "{self.loc}" ({node.op_type})'
        operands = [self.lookup(n, where) for n in slots if n]
        if absent:
            attrs["absent"] = absent
        cap_values = [self.scope[n] for n in captures]
        regions = self.regions(node, graphs, cap_values, captures, attrs)
        outs = _trim(list(node.output))
        return self.emit(name, operands, attrs, len(outs), regions=regions, result_names=outs)

    # ---- subgraphs -----------------------------------------------------------------------------
    def regions(self, node, graphs, caps: list[Value], cap_names: list[str], attrs: dict) -> list[Region]:
        if not graphs:
            return []
        where = f'node "{self.loc}" ({node.op_type})'
        by_name = {a.name: a.g for a in graphs}
        op_type = node.op_type if node.domain in _ONNX_DOMAINS else None
        cap_types = [v.type for v in caps]
        if op_type == "If":
            out = []
            for key in ("then_branch", "else_branch"):
                g = self._need(by_name, key, node)
                if len(g.input):
                    raise ImportError_(f'{self.imp.what}: node "{self.loc}" (If): {key} must take no inputs, '
                                       f"has {len(g.input)}")
                out.append(self.subgraph(g, [], [], cap_types, cap_names))
            return out
        if op_type == "Loop":
            g = self._need(by_name, "body", node)
            carried = [self.lookup(n, where) for n in node.input[2:]]
            if len(g.input) != 2 + len(carried):
                raise ImportError_(f'{self.imp.what}: node "{self.loc}" (Loop): body takes {len(g.input)} '
                                   f"inputs, expected 2 + {len(carried)} loop-carried")
            types = [TensorType(DType.i64, ()), TensorType(DType.bool, ())] + [v.type for v in carried]
            attrs["num_captures"] = len(caps)  # tells carried values from captures (like Scan)
            return [self.subgraph(g, list(g.input), types, cap_types, cap_names)]
        if op_type == "Scan":
            g = self._need(by_name, "body", node)
            inputs = [self.lookup(n, where) for n in node.input]
            n_scan = int(attrs.get("num_scan_inputs", 0))
            if not 1 <= n_scan <= len(inputs):
                raise ImportError_(f'{self.imp.what}: node "{self.loc}" (Scan): num_scan_inputs {n_scan} out of '
                                   f"range [1, {len(inputs)}] (the node has {len(inputs)} inputs)")
            n_state = len(inputs) - n_scan
            axes = list(attrs.get("scan_input_axes", [0] * n_scan))
            if len(axes) != n_scan:
                raise ImportError_(f'{self.imp.what}: node "{self.loc}" (Scan): scan_input_axes has {len(axes)} '
                                   f"entries for {n_scan} scan inputs")
            types = [v.type for v in inputs[:n_state]]
            for v, ax in zip(inputs[n_state:], axes):
                ax = ax + v.type.rank if ax < 0 else ax
                if not 0 <= ax < v.type.rank:
                    raise ImportError_(f'{self.imp.what}: node "{self.loc}" (Scan): scan axis {ax} out of '
                                       f"range for {v.type}")
                types.append(v.type.with_shape(v.type.shape[:ax] + v.type.shape[ax + 1:]))
            if len(g.input) != len(types):
                raise ImportError_(f'{self.imp.what}: node "{self.loc}" (Scan): body takes {len(g.input)} '
                                   f"inputs, expected {len(types)}")
            attrs["num_captures"] = len(caps)
            return [self.subgraph(g, list(g.input), types, cap_types, cap_names)]
        # any other op with subgraphs: the body's declared inputs, then the captures; the
        # attribute each region came from is recorded, as optional graphs may be absent
        attrs["region_names"] = [a.name for a in graphs]
        out = []
        for a in graphs:
            g = a.g
            types = [None] * len(g.input)
            out.append(self.subgraph(g, list(g.input), types, cap_types, cap_names))
        return out

    def _need(self, by_name: dict, key: str, node) -> onnx.GraphProto:
        if key not in by_name:
            raise ImportError_(f'{self.imp.what}: node "{self.loc}" ({node.op_type}) has no {key!r} graph')
        return by_name[key]

    def subgraph(self, g: onnx.GraphProto, declared: list, types: list, cap_types: list,
                 cap_names: list[str]) -> Region:
        """One subgraph -> a single-block region: args = (*g's inputs, *captures), ends in yield."""
        arg_types = [self._arg_type(vi, t) for vi, t in zip(declared, types)] + cap_types
        names = [vi.name for vi in declared] + cap_names
        block = Block(arg_types, names)
        sub = GraphBuilder(self.imp, block, dict(zip(names, block.args)), prefix=self.loc + "/")
        parent_loc = self.loc
        sub.build(g)
        self.loc = parent_loc
        where = f'node "{parent_loc}" subgraph {g.name!r}'
        outs = [sub.lookup(o.name, f'{where} output "{o.name}"') for o in g.output]
        for o, v in zip(g.output, outs):
            if not isinstance(v, Value):  # a body that yields a sequence its op does not unroll
                raise UnsupportedOp("subgraph", "", parent_loc, f'{where} output "{o.name}" is a sequence or '
                                    "optional, which this op cannot carry (only Loop, If and SequenceMap resolve them)")
        block.append(Op("yield", outs))
        return Region([block])

    def _arg_type(self, vi: onnx.ValueInfoProto, known: TensorType | None) -> TensorType:
        """A region argument's type: from the operands where known; the declared type fills gaps."""
        where = f'node "{self.loc}" subgraph input "{vi.name}"'
        has_shape = vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape")
        if known is None:
            return self.imp.value_info_type(vi, where)
        if not known.has_unknown or not has_shape or len(vi.type.tensor_type.shape.dim) != known.rank:
            return known
        declared = self.imp.value_info_type(vi, where)
        return known.with_shape(k if k is not None else d for k, d in zip(known.shape, declared.shape))


def _constant(node: onnx.NodeProto, b: GraphBuilder) -> list[Value]:
    """ONNX Constant -> cc.const (every value_* form except strings and sparse tensors)."""
    if len(node.attribute) != 1:
        raise ImportError_(f'{b.imp.what}: node "{b.loc}" (Constant) needs exactly one value attribute, '
                           f"has {len(node.attribute)}")
    a = node.attribute[0]
    if a.name == "value":
        arr = b.imp.tensor(a.t, f'node "{b.loc}" (Constant)')
    elif a.name == "value_float":
        arr = np.array(a.f, dtype=np.float32)
    elif a.name == "value_floats":
        arr = np.array(list(a.floats), dtype=np.float32)
    elif a.name == "value_int":
        arr = np.array(a.i, dtype=np.int64)
    elif a.name == "value_ints":
        arr = np.array(list(a.ints), dtype=np.int64)
    else:
        raise UnsupportedOp("Constant", node.domain, b.loc, f"Constant attribute {a.name!r} is not supported")
    return [b.const(arr, node.output[0] if node.output else "")]


def _node_uses(node: onnx.NodeProto) -> list[str]:
    """the names a node reads: its inputs and its subgraphs' free names"""
    out = list(node.input)
    for a in node.attribute:
        for sg in [a.g] if a.type == _ATTR.GRAPH else a.graphs if a.type == _ATTR.GRAPHS else []:
            out += free_vars(sg)
    return out


def free_vars(g: onnx.GraphProto) -> list[str]:
    """Names a subgraph uses but does not define (through nested subgraphs), in first-use order."""
    defined = {vi.name for vi in g.input} | {t.name for t in g.initializer}
    defined |= {t.values.name for t in g.sparse_initializer}
    out: list[str] = []

    def use(n: str) -> None:
        if n and n not in defined and n not in out:
            out.append(n)

    for node in g.node:
        for n in node.input:
            use(n)
        for a in node.attribute:
            if a.type == _ATTR.GRAPH:
                for n in free_vars(a.g):
                    use(n)
            elif a.type == _ATTR.GRAPHS:
                for sg in a.graphs:
                    for n in free_vars(sg):
                        use(n)
        defined.update(n for n in node.output if n)
    for o in g.output:
        use(o.name)
    return out


def _dims_of(vi: onnx.ValueInfoProto):
    if vi.type.HasField("tensor_type") and vi.type.tensor_type.HasField("shape"):
        return list(vi.type.tensor_type.shape.dim)
    return []


def _c_array(arr, dtype=None) -> np.ndarray:
    """A C-contiguous array that owns its data (np.ascontiguousarray would make 0-d arrays 1-d)."""
    return np.array(arr, dtype=dtype, order="C", copy=True)


def _trim(names: list[str]) -> list[str]:
    """Drop trailing empty names (absent optional inputs / unused optional outputs)."""
    names = list(names)
    while names and not names[-1]:
        names.pop()
    return names


def _ident(s: str) -> str:
    """A legal ASCII identifier for a symbol or module name (never a dim-expression keyword)."""
    out = re.sub(r"[^A-Za-z0-9_]", "_", identifier(s))
    if out[0].isdigit():
        out = "d" + out
    return out + "_" if out in _RESERVED else out


def _one_line(e: BaseException) -> str:
    s = str(e).strip().splitlines()
    return s[0] if s else type(e).__name__


def _placeholder(s: str) -> bool:
    """A dim_param that names no dim ("?", "-1", "*"): exporters (paddle2onnx among them) write it
    for every unknown dim, so two of them are not the same dim; each gets a symbol of its own,
    as an unnamed dim does (onnxruntime does not tie them either)."""
    t = s.strip()
    return not any(c.isalpha() for c in t) and not t.isdigit()
