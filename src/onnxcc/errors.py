"""Every exception onnxcc raises on purpose. Messages: lowercase, no trailing period,
say where, what was expected and what was got."""

from __future__ import annotations


class OnnxccError(Exception):
    """Base of all onnxcc errors; the CLI prints these as one line (exit 1)."""

    exit_code = 1


class ParseError(OnnxccError):
    """Textual IR that does not parse; carries the 1-based line and column."""

    def __init__(self, msg: str, line: int = 0, col: int = 0, filename: str = "<text>"):
        self.line, self.col, self.filename = line, col, filename
        super().__init__(f"{filename}:{line}:{col}: {msg}")


class VerifyError(OnnxccError):
    """IR that breaks an invariant; names the op and its ONNX location."""

    def __init__(self, msg: str, op=None):
        self.op = op
        where = f"{op.name} ({op.loc}): " if op is not None and op.loc else (f"{op.name}: " if op is not None else "")
        super().__init__(where + msg)


class ShapeError(OnnxccError):
    """A shape rule that cannot hold (e.g. static dims that do not broadcast)."""


class ImportError_(OnnxccError):
    """A malformed, truncated or unreadable .onnx file."""


class UnsupportedOp(OnnxccError):
    """An op onnxcc does not implement; names the op, its domain and the node."""

    exit_code = 3

    def __init__(self, op_type: str, domain: str = "", node: str = "", detail: str = ""):
        self.op_type, self.domain, self.node = op_type, domain, node
        dom = domain or "ai.onnx"
        msg = f"unsupported op {op_type} (domain {dom})"
        if node:
            msg += f" at node {node!r}"
        if detail:
            msg += f": {detail}"
        super().__init__(msg)


class PassError(OnnxccError):
    """A pass that failed; names the pass and the passes that ran before it."""

    def __init__(self, pass_name: str, prior: list[str], cause: BaseException):
        self.pass_name, self.prior, self.cause = pass_name, prior, cause
        before = ", ".join(prior) if prior else "none"
        super().__init__(f"pass {pass_name!r} failed (after: {before}): {cause}")


class GuardError(OnnxccError):
    """A call whose shapes violate the model's constraints (no version's guard holds)."""


class CompileError(OnnxccError):
    """The backend could not build the artifact (compiler or linker failure)."""


class ValueDependentError(CompileError):
    """The generic version cannot be built because a shape (or, in the importer, a sequence's
    structure) depends on the values of `inputs` and no value version was asked for."""

    def __init__(self, msg: str, inputs: list[str], all_inputs: list[str] | None = None):
        #: the inputs whose values decide the shapes; every input of the model, in order
        self.inputs, self.all_inputs = inputs, list(all_inputs or inputs)
        super().__init__(msg)


class DimDependentError(CompileError):
    """A sequence's length depends on a symbolic input dim the compile does not fix:
    `dims` lists (input, axis, symbol); a build for the dims' values (`specialize`) can."""

    def __init__(self, msg: str, dims: list[tuple[str, int, str]], all_inputs: list[str]):
        self.dims, self.all_inputs = dims, list(all_inputs)
        super().__init__(msg)


class RuntimeCallError(OnnxccError):
    """A compiled library returned a nonzero code; the message is its last_error()."""

    def __init__(self, msg: str, code: int = 1):
        self.code = code
        super().__init__(msg)
