"""Named default pipelines, as plain lists of pass specs (one comment per step).

Each is joined into the pipeline text the pass manager and `onnxcc ir -p` read.
"""

#: ONNX import -> clean graph IR
DEFAULT_GRAPH_PIPELINE = ",".join([
    "shape-inference",  # recompute symbolic result types, propagate shape-chain values, record constraints
    "canonicalize",     # fold constants and shape chains, simplify identities, drop dead ops
])
