"""Converters for ONNX ops whose import is not a 1:1 node -> op copy.

Most nodes go through the importer's generic path: `onnx.<OpType>` with the node's
attributes converted and its inputs as operands (see onnx_import.py). Old opsets are
upgraded before the import (opset_compat.py: the version converter plus per-op rules keyed
by (op_type, since_version)). An op whose opset-13+ form still needs rewriting on the way
in (an op expanded into several ops, ...) gets an entry here:

    CONVERTERS["OpType"] = fn(node: onnx.NodeProto, b: GraphBuilder) -> list[Value]

`b` is the importer's builder for the graph being imported: `b.inputs(node)` gives the
operands (None for an absent optional input), `b.attrs(node)` the converted attributes,
`b.emit(name, operands, attrs, n_results)` appends a typed op, `b.const(array)` a
constant. The returned values are bound, in order, to the node's output names.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

from onnx import helper

#: ai.onnx op type -> converter; ops not listed take the generic path
CONVERTERS: dict[str, Callable] = {}


def _roi_align(node, b) -> list:
    """RoiAlign before opset 16 had no coordinate_transformation_mode and meant what 16 calls
    output_half_pixel (16's default is half_pixel): an old node gets its meaning spelled out."""
    if b.module.attrs.get("opset", 16) < 16 and all(a.name != "coordinate_transformation_mode"
                                                    for a in node.attribute):
        node = copy.deepcopy(node)
        node.attribute.append(helper.make_attribute("coordinate_transformation_mode", "output_half_pixel"))
    return b.generic(node, "onnx.RoiAlign")


CONVERTERS["RoiAlign"] = _roi_align
