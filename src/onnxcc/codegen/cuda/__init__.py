"""The CUDA backend: kernel IR -> NVPTX LLVM -> PTX, the host side of the dispatcher, the build tail."""
