"""What the artifact cache key hashes about the model and about onnxcc itself.

A cached artifact may be served only when it is what compiling now would build, so the key
covers every byte the build reads: the model (file, serialized bytes, proto or IR module
with its weights), every external-data file its tensors point at (a weight file rewritten
next to an unchanged .onnx must miss), and onnxcc's own sources (a fixed version string
would serve artifacts built by older code after an edit or upgrade).
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
from pathlib import Path

import onnx

from ..digest import file_sha256
from ..errors import OnnxccError
from ..ir import Module

#: the package's source files that decide what gets built (Python, the C runtime)
_SOURCE_SUFFIXES = (".py", ".c", ".h")


@functools.cache
def source_digest() -> str:
    """sha256 over onnxcc's own source files (relative path + bytes), computed once per process."""
    root = Path(__file__).resolve().parents[1]  # the onnxcc package
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.suffix not in _SOURCE_SUFFIXES or not p.is_file() or "__pycache__" in p.parts:
            continue
        h.update(p.relative_to(root).as_posix().encode() + b"\0")
        h.update(hashlib.sha256(p.read_bytes()).digest())
    return h.hexdigest()


def model_digest(model) -> str:
    """sha256 of the model's content: its bytes (file, serialized, proto; or IR text + weights)
    and, in order of their names, the bytes of every external-data file its tensors read."""
    h = hashlib.sha256()
    if isinstance(model, Module):
        h.update(str(model).encode())
        for k in sorted(model.weights):
            h.update(k.encode())
            h.update(model.weights[k].tobytes())
        return h.hexdigest()
    base = ""  # the importer reads a proto's or bytes' external data relative to the cwd
    if isinstance(model, (str, os.PathLike)):
        p = Path(model)
        if not p.is_file():
            raise OnnxccError(f"{p}: no such file")
        data = p.read_bytes()
        base = str(p.parent)
    elif isinstance(model, (bytes, bytearray, memoryview)):
        data = bytes(model)
    else:
        data = model.SerializeToString()
    h.update(data)
    locations = _external_locations(data)
    if isinstance(model, (str, os.PathLike)) and Path(model).suffix.lower() == ".onnxir":
        # the weights file write_ir saved beside the text, as its module attribute names it
        locations = re.findall(rb'weights_file = "([^"]+)"', data.split(b"\n", 1)[0])
        locations = [x.decode(errors="replace") for x in locations]
    for loc in locations:
        h.update(b"\0external\0" + loc.encode() + b"\0")
        f = Path(base or ".") / loc
        try:
            h.update(file_sha256(f).encode())
        except OSError as e:  # the importer reports it; the key only needs to differ
            h.update(f"unreadable:{type(e).__name__}".encode())
    return h.hexdigest()



def _external_locations(data: bytes) -> list[str]:
    """The `location` of every tensor stored outside the model, sorted (none when the
    bytes do not parse: the importer reports that)."""
    try:
        proto = onnx.load_from_string(data)
    except Exception:  # protobuf raises assorted types on garbage
        return []
    locs: set[str] = set()
    for t in _tensors(proto):
        if t.data_location == onnx.TensorProto.EXTERNAL:
            for entry in t.external_data:
                if entry.key == "location":
                    locs.add(entry.value)
    return sorted(locs)


def _tensors(proto: onnx.ModelProto):
    graphs = [proto.graph]
    for fn in proto.functions:
        yield from _node_tensors(fn.node, graphs)
    while graphs:
        g = graphs.pop()
        yield from g.initializer
        for s in g.sparse_initializer:
            yield s.values
            yield s.indices
        yield from _node_tensors(g.node, graphs)


def _node_tensors(nodes, graphs: list):
    """The tensors in the nodes' attributes; their subgraphs are appended to `graphs`."""
    for n in nodes:
        for a in n.attribute:
            if a.HasField("t"):
                yield a.t
            yield from a.tensors
            if a.HasField("sparse_tensor"):
                yield a.sparse_tensor.values
                yield a.sparse_tensor.indices
            if a.HasField("g"):
                graphs.append(a.g)
            graphs.extend(a.graphs)
