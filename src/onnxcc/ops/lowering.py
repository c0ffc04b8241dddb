"""What an op's `lower(ctx)` sees: buffers for its operands and results, and the program.

A lowering writes its results with compute definitions in the kernel expression language:

    def lower(self, ctx):
        x, = ctx.inputs            # Buffers; their shapes are the operands' (symbolic) dims
        y = ctx.out(0)             # the Buffer for result 0
        ctx.compute(y, lambda *ix: unary("relu", x[ix]))

`ctx.alias(0, 0)` makes result 0 a no-copy view of operand 0 (Reshape, Squeeze...).
`ctx.const_value(i)` gives operand i's data when it is a compile-time constant (e.g. Pad's
pads, Gather's indices, Slice's starts) and None otherwise; `ctx.known_value(i)` its
symbolic value (object array of Dims) when shape inference knew it.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ..errors import UnsupportedOp
from ..ir import Dim, DType, Op, TensorType
from ..kernel import Buffer, Expr, KernelProgram, Var, dim_to_expr


class LowerCtx:
    def __init__(self, op: Op, program: KernelProgram, inputs: list[Buffer | None], outputs: list[Buffer],
                 consts: list[np.ndarray | None], known: list[np.ndarray | None], namer: Callable[[str], str]):
        self.op = op
        self.program = program
        #: operand buffers, in operand order (absent optional inputs are not operands)
        self.inputs = inputs
        self._outputs = outputs
        self._consts = consts
        self._known = known
        self._namer = namer
        #: results that the lowering made views of operands: {result index: operand index}
        self.aliases: dict[int, int] = {}
        #: the function lowerer (passes/lower.py), set by it: control-flow lowerings use its
        #: `lower_region`, `into`, `declare_run_dim`, `set_symbol`, `bind_symbol` and `is_run_dim`
        self.lowerer = None
        #: whether the target runs attention fused over key blocks (kernel/flash.py): the
        #: backend's `fused_attention`, passed down by lower-to-kernel; without it an
        #: attention lowering keeps its score buffer (the fused form as plain loops would
        #: recompute every score once per value column)
        self.fused_attention = False
        #: whether the target runs the 8-bit GEMM calls (kernel/i8gemm.py: AVX-512 VNNI): the
        #: backend's `int8_dot()`, passed down by lower-to-kernel
        self.int8_dot = False
        #: whether the target runs the f32 implicit-GEMM conv call (kernel/conv_call.py): the
        #: backend's `f32_conv_call()`, passed down by lower-to-kernel
        self.f32_conv_call = False

    # ---- reading the op ------------------------------------------------------------------
    def attr(self, name: str, default=None):
        return self.op.attrs.get(name, default)

    def in_type(self, i: int) -> TensorType:
        return self.op.operands[i].type

    def out_type(self, i: int = 0) -> TensorType:
        return self.op.results[i].type

    def const_value(self, i: int) -> np.ndarray | None:
        return self._consts[i] if i < len(self._consts) else None

    def known_value(self, i: int) -> np.ndarray | None:
        return self._known[i] if i < len(self._known) else None

    def unsupported(self, detail: str) -> UnsupportedOp:
        return UnsupportedOp(self.op.opname, self.op.dialect, self.op.loc, detail)

    def over(self, inputs: list[Buffer | None], outputs: list[Buffer],
             consts: list[np.ndarray | None]) -> LowerCtx:
        """This op's context over other buffers, for a lowering that runs another op's lowering
        on buffers it made (a quantized conv through the float conv's); attrs stay the op's."""
        sub = LowerCtx(self.op, self.program, inputs, outputs, consts, [], self._namer)
        sub.lowerer, sub.fused_attention, sub.int8_dot = self.lowerer, self.fused_attention, self.int8_dot
        sub.f32_conv_call = self.f32_conv_call
        return sub

    # ---- writing results -----------------------------------------------------------------
    def out(self, i: int = 0) -> Buffer:
        return self._outputs[i]

    def temp(self, dtype: DType, shape, hint: str = "t") -> Buffer:
        return self.program.temp(self._namer(hint), dtype, tuple(shape))

    def const(self, data: np.ndarray, hint: str = "k") -> Buffer:
        return self.program.const(self._namer(hint), np.ascontiguousarray(data).reshape(np.shape(data)))

    def compute(self, out: Buffer, fn) -> None:
        self.program.compute(out, fn)

    def alias(self, result: int, operand: int) -> None:
        """Result `result` is operand `operand` reinterpreted with the result's shape."""
        self.aliases[result] = operand

    def bits_view(self, buf: Buffer, dtype: DType, hint: str = "bits") -> Buffer:
        """A view of `buf`'s memory read as `dtype` (same bit width): loads from it
        reinterpret the bits (BitCast); it takes no memory of its own."""
        if dtype.bits != buf.dtype.bits:
            raise self.unsupported(f"cannot view {buf.dtype.value} bits as {dtype.value}")
        return self.program.add_buffer(Buffer(self._namer(hint), dtype, buf.shape, "temp", alias_of=buf.name))

    @staticmethod
    def dim(d: Dim) -> Expr:
        return dim_to_expr(d)

    @staticmethod
    def vars(n: int, prefix: str = "i") -> list[Var]:
        return [Var(f"{prefix}{k}") for k in range(n)]
