"""What the importer checks of a model before it converts anything (issue 17): the things the
ONNX checker and onnxruntime refuse, each refused here with one line naming the problem.

  - ir_version: 0 (not set) or newer than the installed onnx knows;
  - the graph: no outputs, two graph outputs of one name, an output whose elem_type is 0
    (UNDEFINED) or no type onnx knows;
  - initializers: a negative dim;
  - every node, subgraphs included, against its op's schema at the model's opset: the
    number of inputs and outputs, required inputs left empty, required attributes missing,
    and each attribute's type (Scan's num_scan_inputs given as STRINGS, a float where an
    int is expected).

Ops without a schema in the installed onnx (custom domains) are left to their converters.
"""

from __future__ import annotations

import onnx
import onnx.defs
from onnx import AttributeProto

from ..errors import ImportError_

_ONNX_DOMAINS = ("", "ai.onnx")
_SINGLE = onnx.defs.OpSchema.FormalParameterOption.Single


def _attr_type_name(t: int) -> str:
    return AttributeProto.AttributeType.Name(t) if t in AttributeProto.AttributeType.values() else str(t)


def _known_elem_type(t: int) -> bool:
    return t in onnx.TensorProto.DataType.values() and t != onnx.TensorProto.UNDEFINED


def validate_model(proto: onnx.ModelProto, opset: int, what: str) -> None:
    """Raise ImportError_ naming the first problem found; return quietly if none."""
    if proto.ir_version <= 0:
        raise ImportError_(f"{what}: the model's ir_version is not set (0); the ONNX checker refuses it")
    if proto.ir_version > onnx.IR_VERSION:
        raise ImportError_(f"{what}: ir_version {proto.ir_version} is newer than the installed onnx knows "
                           f"(at most {onnx.IR_VERSION})")
    g = proto.graph
    if not len(g.output):
        raise ImportError_(f"{what}: the graph has no outputs")
    seen: set[str] = set()
    for o in g.output:
        if o.name in seen:
            raise ImportError_(f'{what}: graph output name "{o.name}" is used twice')
        seen.add(o.name)
        if o.type.HasField("tensor_type") and not _known_elem_type(o.type.tensor_type.elem_type):
            t = o.type.tensor_type.elem_type
            kind = "0 (UNDEFINED)" if t == 0 else f"{t}, which is no ONNX data type"
            raise ImportError_(f'{what}: graph output "{o.name}" has elem_type {kind}')
    versions = {o.domain: o.version for o in proto.opset_import}
    _graph(g, opset, versions, what, "")


def _graph(g: onnx.GraphProto, opset: int, versions: dict, what: str, prefix: str) -> None:
    for t in g.initializer:
        if any(d < 0 for d in t.dims):
            raise ImportError_(f'{what}: initializer "{t.name}" has a negative dim {list(t.dims)}')
    for i, node in enumerate(g.node):
        loc = node.name or f"{prefix}{node.op_type}_{i}"
        _node(node, loc, opset, versions, what)
        for a in node.attribute:
            if a.type == AttributeProto.GRAPH:
                _graph(a.g, opset, versions, what, loc + "/")
            elif a.type == AttributeProto.GRAPHS:
                for sg in a.graphs:
                    _graph(sg, opset, versions, what, loc + "/")


def _schema(node: onnx.NodeProto, opset: int, versions: dict):
    domain = "" if node.domain in _ONNX_DOMAINS else node.domain
    version = opset if domain == "" else versions.get(domain)
    if version is None:
        return None
    try:
        return onnx.defs.get_schema(node.op_type, version, domain)
    except Exception:  # no schema: an unknown op, or a custom domain onnx does not describe
        return None


def _trimmed(names) -> list[str]:
    names = list(names)
    while names and not names[-1]:
        names.pop()
    return names


def _node(node: onnx.NodeProto, loc: str, opset: int, versions: dict, what: str) -> None:
    schema = _schema(node, opset, versions)
    if schema is None:
        return
    head = f'{what}: node "{loc}" ({node.op_type}, opset {schema.since_version})'
    ins, outs = list(node.input), _trimmed(node.output)
    n_in = len(_trimmed(ins))
    if not schema.min_input <= n_in <= schema.max_input:
        raise ImportError_(f"{head} has {n_in} inputs, takes {_range(schema.min_input, schema.max_input)}")
    for k, fp in enumerate(schema.inputs):
        if fp.option == _SINGLE and (k >= len(ins) or not ins[k]):
            raise ImportError_(f'{head}: required input {k} ("{fp.name}") is missing')
    if not schema.min_output <= len(outs) <= schema.max_output:
        raise ImportError_(f"{head} has {len(outs)} outputs, gives "
                           f"{_range(schema.min_output, schema.max_output)}")
    given = {a.name for a in node.attribute}
    for a in node.attribute:
        spec = schema.attributes.get(a.name)
        if spec is None:
            continue  # an attribute the schema does not know is not read
        want = int(spec.type.value)
        if a.type != want:
            raise ImportError_(f"{head}: attribute {a.name!r} must be {_attr_type_name(want)}, "
                               f"got {_attr_type_name(a.type)}")
    for name, spec in schema.attributes.items():
        if spec.required and name not in given:
            raise ImportError_(f"{head}: required attribute {name!r} is missing")


def _range(lo: int, hi: int) -> str:
    if lo == hi:
        return f"exactly {lo}"
    if hi >= 2**31 - 1:
        return f"at least {lo}"
    return f"{lo} to {hi}"
