"""What an `ExprEmitter` needs from the function it emits into (`FunctionContext`, which each
backend implements), and the part of it both backends derive alike from the kernel program
(`ProgramContext`): dims and strides computed once in the entry block, buffer dtypes and
shapes, and each buffer's pointer made once, an alias's its root's and a temp's at its offset
in the workspace."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Protocol

from llvmlite import ir

from onnxcc.errors import CompileError
from onnxcc.ir import Dim, DType, canon
from onnxcc.kernel.expr import dim_to_expr

from .helpers import I8, I64

if TYPE_CHECKING:
    from onnxcc.kernel.plan_memory import MemoryPlan
    from onnxcc.kernel.program import Buffer, KernelProgram

    from .exprs import ExprEmitter


class FunctionContext(Protocol):
    """The per-function services an `ExprEmitter` uses (implemented by the backend)."""

    module: ir.Module

    def sym(self, name: str) -> ir.Value: ...
    # the least value the function may assume of a symbol (what its loads of the symbol
    # promise LLVM), None where it promises none: what int_bounds.py bounds symbols with
    def sym_lower(self, name: str) -> int | None: ...
    def dim(self, d: Dim) -> ir.Value: ...
    def buffer_ptr(self, name: str) -> ir.Value: ...
    def strides(self, name: str) -> list[ir.Value]: ...
    def buffer_dtype(self, name: str) -> DType: ...
    def buffer_shape(self, name: str) -> tuple[Dim, ...]: ...
    def fail_block(self, code: int) -> ir.Block: ...
    def alloca(self, ty: ir.Type, name: str) -> ir.Value: ...


def row_major_strides(shape) -> list[Dim]:
    """Element strides of a compact row-major tensor, as Dims."""
    out: list[Dim] = []
    acc: Dim = 1
    for d in reversed(shape):
        out.append(acc)
        acc = canon(acc * d)
    return out[::-1]


class ProgramContext:
    """The FunctionContext services both backends derive the same way from the kernel
    program. Subclasses set the attributes below and define `_root_ptr`."""

    program: KernelProgram
    eb: ir.IRBuilder
    """a builder on the entry block"""
    entry_em: ExprEmitter
    """an emitter on the entry block"""
    _strides: dict[str, list[ir.Value]]
    _ptrs: dict[str, ir.Value]

    def dim(self, d: Dim) -> ir.Value:
        """A Dim as an i64 value computed once in the entry block."""
        d = canon(d)
        if isinstance(d, int):
            return ir.Constant(I64, d)
        return self.entry_em.emit(dim_to_expr(d))

    def buffer_dtype(self, name: str) -> DType:
        return self.program.buffers[name].dtype

    def buffer_shape(self, name: str) -> tuple[Dim, ...]:
        return self.program.buffers[name].shape

    def strides(self, name: str) -> list[ir.Value]:
        s = self._strides.get(name)
        if s is None:
            s = [self.dim(d) for d in row_major_strides(self.program.buffers[name].shape)]
            self._strides[name] = s
        return s

    def buffer_ptr(self, name: str) -> ir.Value:
        """The data pointer of buffer `name`, made once: an alias's is its root's."""
        p = self._ptrs.get(name)
        if p is None:
            prog = self.program
            buf = prog.buffers.get(name)
            if buf is None:
                raise CompileError(f"kernel {prog.name}: unknown buffer {name}")
            p = self.buffer_ptr(prog.root(name)) if buf.alias_of is not None else self._root_ptr(name, buf)
            self._ptrs[name] = p
        return p

    @contextmanager
    def redirected(self, name: str, ptr: ir.Value, strides: list[ir.Value]) -> Iterator[None]:
        """Within the with-block, buffer `name`'s elements are addressed from `ptr` by
        `strides` (a row staged away from its buffer: cpu/streaming_stores.py)."""
        saved = self._ptrs.get(name), self._strides.get(name)
        self._ptrs[name], self._strides[name] = ptr, strides
        try:
            yield
        finally:
            for memo, old in ((self._ptrs, saved[0]), (self._strides, saved[1])):
                if old is None:
                    memo.pop(name, None)
                else:
                    memo[name] = old

    def _root_ptr(self, name: str, buf: Buffer) -> ir.Value:
        """The pointer of a buffer that aliases none (the backend's arguments, workspace, globals)."""
        raise NotImplementedError

    def temp_ptr(self, name: str, plan: MemoryPlan, workspace: ir.Value) -> ir.Value:
        """Temp `name`'s pointer: the workspace at the offset `plan` gives it."""
        off = plan.offsets.get(name)
        if off is None:
            raise CompileError(f"kernel {self.program.name}: memory plan has no offset for temp {name}")
        return self.eb.gep(workspace, [self.dim(off)], inbounds=True, name=f"{name}.data", source_etype=I8)
