"""The order the importer converts a graph's nodes in.

ONNX asks for topologically sorted nodes, but tools write graphs that are not:
onnxruntime's float16 converter (`convert_float_to_float16(keep_io_types=True)`) appends the
Casts of the graph inputs after the nodes that read them, and onnxruntime runs such graphs
(it sorts them itself). So do we: a graph already in order keeps it; otherwise each node waits
until every name it uses is defined. A name that is never defined (or a cycle) leaves its
nodes in their place, so the importer names the missing value as before."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import onnx


def topological(nodes: Sequence[onnx.NodeProto], defined: Iterable[str],
                uses: Callable[[onnx.NodeProto], Iterable[str]]) -> list[tuple[int, onnx.NodeProto]]:
    """(original index, node) in an order where every node follows the producers of what it
    `uses` (its inputs and its subgraphs' free names); stable: ties keep the file's order."""
    # only names a node of this graph produces are waited for: anything else (an input, an
    # outer scope's name, a missing one) is the importer's to resolve or refuse
    produced = {o for node in nodes for o in node.output if o}
    known = set(defined)
    needs = [{n for n in uses(node) if n in produced and n not in known} for node in nodes]
    waiting = list(range(len(nodes)))
    order: list[int] = []
    progress = True
    while waiting and progress:  # one sweep in file order: a sorted graph takes one sweep
        progress, left = False, []
        for i in waiting:
            if needs[i] <= known:
                order.append(i)
                known.update(o for o in nodes[i].output if o)
                progress = True
            else:
                left.append(i)
        waiting = left
    return [(i, nodes[i]) for i in order + waiting]
