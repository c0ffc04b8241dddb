"""`CallStmt`: a call of a function of the C runtime from a kernel program.

Some ops are not loop nests over numbers: string processing (concatenation, comparison,
regular expressions, lookups in a table of strings) is a few lines of C over `const char *`
elements and has no useful form as compute expressions. Such an op lowers to ordinary
computes for everything numeric (broadcasting, index arithmetic) and one `CallStmt` for the
part that is string work. The statement is opaque to fusion and scheduling (fusion never
inlines a producer into it), and memory planning sees the buffers it names.

The called function has ONE C signature, whatever it does:

    int32_t fn(const int64_t *sizes, void *const *buffers);

`sizes` holds the i64 values of `sizes` (element counts, flags), `buffers` the data pointers
of `buffers` in order. It returns 0, or nonzero after setting the thread's error message
(the kernel then fails with ERR_ASSERT and the dispatcher appends the message). Text form:

    call onnxcc_str_concat(n; A, B, Y) -> Y

(sizes before the `;`, buffers after it, the buffers it writes after `->`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from onnxcc.errors import VerifyError
from onnxcc.ir import DType

from .expr import Expr, buffers_read, free_vars, symbols_used
from .expr_text import format_expr
from .program import KernelProgram, Stmt

_FN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True, eq=False)
class CallStmt(Stmt):
    """`fn(sizes; buffers)`: a runtime call that reads `buffers` and writes `outs` (a subset)."""

    fn: str
    sizes: tuple[Expr, ...]
    buffers: tuple[str, ...]
    outs: tuple[str, ...]

    def __post_init__(self):
        object.__setattr__(self, "sizes", tuple(self.sizes))
        object.__setattr__(self, "buffers", tuple(self.buffers))
        object.__setattr__(self, "outs", tuple(self.outs))

    def reads(self) -> set[str]:
        out = {b for b in self.buffers if b not in self.outs}
        for e in self.sizes:
            out |= buffers_read(e)
        return out

    def writes(self) -> set[str]:
        return set(self.outs)

    def format(self, indent: str = "  ") -> list[str]:
        sizes = ", ".join(format_expr(e) for e in self.sizes)
        return [f"{indent}call {self.fn}({sizes}; {', '.join(self.buffers)}) -> {', '.join(self.outs)}"]

    def verify_in(self, p: KernelProgram, known_syms: set[str]) -> None:
        where = f"kernel {p.name}: {self.format('')[0]}"
        if not _FN.match(self.fn):
            raise VerifyError(f"{where}: {self.fn!r} is not a C function name")
        for b in self.buffers:
            if b not in p.buffers:
                raise VerifyError(f"{where}: unknown buffer {b}")
        for o in self.outs:
            if o not in self.buffers:
                raise VerifyError(f"{where}: writes {o}, which is not among its buffers")
            if p.buffers[p.root(o)].kind in ("input", "const"):
                raise VerifyError(f"{where}: writes {p.buffers[p.root(o)].kind} buffer {o}")
        roots = [p.root(o) for o in self.outs]
        if any(p.root(b) in roots for b in self.buffers if b not in self.outs) or len(set(roots)) != len(roots):
            raise VerifyError(f"{where}: an output shares memory with another buffer of the call")
        for e in self.sizes:
            if e.dtype is not DType.i64:
                raise VerifyError(f"{where}: size {format_expr(e)} is {e.dtype.value}, expected i64")
            unknown = sorted(symbols_used(e) - known_syms) + sorted(buffers_read(e) - set(p.buffers))
            if unknown or free_vars(e):
                raise VerifyError(f"{where}: size {format_expr(e)} uses unknown names "
                                  f"{', '.join(unknown + sorted(free_vars(e)))}")


__all__ = ["CallStmt"]
