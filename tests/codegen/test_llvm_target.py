"""codegen/llvm/target.py: LLVM's missed-transformation remarks never reach the user's stderr."""

from __future__ import annotations

import contextlib
import os
import tempfile

import pytest

from onnxcc.codegen.llvm.target import emit_object

# a loop with a loop-carried dependence (a[i] = a[i-1] * 3) that carries a forced
# `llvm.loop.vectorize.enable`: LLVM cannot vectorize it and, unfiltered, prints
# "warning: <unknown>:0:0: loop not vectorized: ..." to fd 2
_FORCED_LOOP = r"""
define void @carried(ptr noalias %a, i64 %n) {
entry:
  br label %loop
loop:
  %i = phi i64 [ 1, %entry ], [ %i1, %loop ]
  %im1 = sub i64 %i, 1
  %pp = getelementptr inbounds float, ptr %a, i64 %im1
  %p = getelementptr inbounds float, ptr %a, i64 %i
  %x = load float, ptr %pp
  %y = fmul float %x, 3.0
  store float %y, ptr %p
  %i1 = add i64 %i, 1
  %c = icmp slt i64 %i1, %n
  br i1 %c, label %loop, label %exit, !llvm.loop !0
exit:
  ret void
}
!0 = distinct !{!0, !1, !2}
!1 = !{!"llvm.loop.vectorize.enable", i1 true}
!2 = !{!"llvm.loop.vectorize.width", i32 8}
"""


@contextlib.contextmanager
def c_stderr():
    """Capture what C code writes to fd 2 (LLVM does not go through sys.stderr)."""
    out: dict[str, str] = {}
    with tempfile.TemporaryFile() as tmp:
        saved = os.dup(2)
        os.dup2(tmp.fileno(), 2)
        try:
            yield out
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            tmp.seek(0)
            out["text"] = tmp.read().decode(errors="replace")


def test_forced_vectorize_on_unvectorizable_loop_is_silent():
    with c_stderr() as err:
        obj = emit_object(_FORCED_LOOP, opt=3)
    assert obj  # the loop still compiles (scalar)
    assert "loop not vectorized" not in err["text"], err["text"]
    assert "warning" not in err["text"], err["text"]


# a forced, predicated loop carrying a product from one iteration to the next and reading
# it after the loop (not a reduction LLVM knows): LLVM refuses and, unfiltered, prints
# "remark: ...: loop not vectorized: value that could not be identified as reduction is
# used outside the loop"
_LIVE_OUT_LOOP = r"""
define float @live_out(ptr noalias %a, ptr noalias %b, i64 %n) {
entry:
  br label %loop
loop:
  %i = phi i64 [ 0, %entry ], [ %i1, %loop ]
  %s = phi float [ 0.0, %entry ], [ %y, %loop ]
  %p = getelementptr inbounds float, ptr %a, i64 %i
  %x = load float, ptr %p
  %y = fmul float %x, %s
  %q = getelementptr inbounds float, ptr %b, i64 %i
  store float %y, ptr %q
  %i1 = add i64 %i, 1
  %c = icmp slt i64 %i1, %n
  br i1 %c, label %loop, label %exit, !llvm.loop !0
exit:
  ret float %y
}
!0 = distinct !{!0, !1, !2, !3}
!1 = !{!"llvm.loop.vectorize.enable", i1 true}
!2 = !{!"llvm.loop.vectorize.width", i32 16}
!3 = !{!"llvm.loop.vectorize.predicate.enable", i1 true}
"""


def test_failed_masked_tail_hint_is_silent():
    with c_stderr() as err:
        obj = emit_object(_LIVE_OUT_LOOP, opt=3)
    assert obj
    assert "loop not vectorized" not in err["text"], err["text"]


def test_attention_with_past_compiles_without_llvm_warnings(tmp_path, monkeypatch):
    conformance = pytest.importorskip("onnxcc.conformance")
    import onnxcc

    monkeypatch.setenv("ONNXCC_CACHE_DIR", str(tmp_path / "cache"))  # a real build, not a cache hit
    case = conformance.get_case("test_attention_4d_with_past_and_present_qk_matmul_bias_4d_mask_expanded")
    with c_stderr() as err:
        art = onnxcc.compile(case.model, tmp_path / "att")
    assert art.library is not None and art.library.exists()
    assert "loop not vectorized" not in err["text"], err["text"]
