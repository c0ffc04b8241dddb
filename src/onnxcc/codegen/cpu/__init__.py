"""The CPU backend: kernel IR -> LLVM (emit, control flow, GEMM), the build tail, the test JIT."""
