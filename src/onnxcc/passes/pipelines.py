"""Named graph pipelines, as plain lists of pass specs (one comment per step).

Each is joined into the pipeline text the pass manager and `onnxcc ir -p` read. The whole
build (these, then versioning, lowering and the kernel passes) is one recipe in
compiler/pipeline.py, which starts with DEFAULT_GRAPH_PIPELINE.
"""

#: ONNX import -> clean graph IR
DEFAULT_GRAPH_PIPELINE = ",".join([
    "shape-inference",  # recompute symbolic result types, propagate shape-chain values, record constraints
    "qdq-fuse",         # DQ -> Conv / MatMul / Gemm / Add -> Q groups into the QLinear ops (int8 kernels)
    "canonicalize",     # fold constants and shape chains, simplify identities, drop dead ops
    "fold-conv-affine", # BatchNormalization / constant per-channel Mul, Add after a Conv -> its weights
    "nhwc-region",      # chains of depthwise / 1x1 convs channels-last, one layout change at each end
    "qnhwc-region",     # chains of quantized convs (QLinearConv) channels-last, one layout change at each end
])
