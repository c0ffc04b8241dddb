"""Views that reinterpret bits (BitCast's lowering, LowerCtx.bits_view): the verifier takes a
view of another type of the same width and refuses another width or a packed type; a load
through the view reads the bits (JIT)."""

from __future__ import annotations

import numpy as np
import pytest

from onnxcc.codegen.cpu.jit import JitKernel
from onnxcc.errors import VerifyError
from onnxcc.ir import DType
from onnxcc.kernel import Buffer, KernelProgram


def program(view_dtype: DType) -> KernelProgram:
    p = KernelProgram("bits", [], {}, [], [])
    x = p.input("x", DType.f32, (4,))
    v = p.add_buffer(Buffer("v", view_dtype, (4,), "temp", alias_of=x.name))
    y = p.output("y", view_dtype, (4,))
    p.compute(y, lambda i: v[(i,)])
    return p


def test_same_width_view_reads_the_bits():
    p = program(DType.i32)
    p.verify()
    x = np.array([1.0, -2.5, np.inf, -0.0], np.float32)
    np.testing.assert_array_equal(JitKernel(p)(x)[0], x.view(np.int32))


@pytest.mark.parametrize("dt", [DType.i64, DType.i16, DType.i4])
def test_other_width_view_is_refused(dt):
    with pytest.raises(VerifyError, match=f"view v is {dt.value}, its buffer x is f32"):
        program(dt).verify()
