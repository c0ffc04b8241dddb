"""The exit codes of `onnxcc`, one meaning each (documented in the README and `onnxcc --help`)."""

EXIT_OK = 0
#: a user error: bad input, a model onnxcc refuses, a call whose shapes no version serves
EXIT_USER = 1
#: a usage error: an unknown flag or a malformed flag value (click's own code)
EXIT_USAGE = 2
#: the model uses an op (or a form of one) that onnxcc does not support
EXIT_UNSUPPORTED = 3
#: `run --check`: an output differs from onnxruntime's beyond the tolerance
EXIT_MISMATCH = 4
#: a bug in onnxcc (an internal error)
EXIT_INTERNAL = 70
#: interrupted (Ctrl-C)
EXIT_INTERRUPTED = 130

HELP = ("Exit codes: 0 ok, 1 user error, 2 usage error, 3 unsupported op, 4 run --check mismatch, "
        "70 internal error, 130 interrupted.")
