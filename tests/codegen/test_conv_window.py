"""Window mode of the conv GEMM (kernel/conv_window.py, codegen/cpu/gemm_window.py): which
convs take it, and numerics against numpy (padding on any side, dilation, kernels of
several shapes, channel counts that leave partial row panels, widths below and above a
tile, batches padded one at a time), serial and on the thread pool."""

from __future__ import annotations

import numpy as np
import pytest

from onnxcc.codegen.cpu.jit import JitKernel
from onnxcc.ir import DType, sym
from onnxcc.kernel import KernelProgram, Var, relu, rsum, select
from onnxcc.kernel.conv_window import match_conv_window, window_offsets
from onnxcc.kernel.schedule import TargetInfo, schedule_program

F32 = DType.f32
Bt, H, W = sym("Bt"), sym("H"), sym("W")
rng = np.random.default_rng(11)


def randf(*shape):
    return rng.standard_normal(shape).astype(np.float32)


def conv_ref(x, w, pads, dil, bias=None, stride=(1, 1)):
    """Plain numpy conv: pads (top, left, bottom, right), dilation (dy, dx), stride (sy, sx)."""
    n, _c, h, wd = x.shape
    m, _, kh, kw = w.shape
    sy, sx = stride
    xp = np.pad(x, ((0, 0), (0, 0), (pads[0], pads[2]), (pads[1], pads[3])))
    oh = (h + pads[0] + pads[2] - dil[0] * (kh - 1) - 1) // sy + 1
    ow = (wd + pads[1] + pads[3] - dil[1] * (kw - 1) - 1) // sx + 1
    y = np.zeros((n, m, oh, ow), np.float32)
    for i in range(kh):
        for j in range(kw):
            win = xp[:, :, i * dil[0]:i * dil[0] + sy * (oh - 1) + 1:sy, j * dil[1]:j * dil[1] + sx * (ow - 1) + 1:sx]
            y += np.einsum("nchw,mc->nmhw", win, w[:, :, i, j])
    return y if bias is None else y + bias[None, :, None, None]


def add_conv(p, x, cin, h, w, name, m, k, pads, dil, bias=True, act=True, stride=(1, 1)):
    """Y = [relu](conv(X) [+ b]) as the lowering writes it (guarded loads, one rsum)."""
    kh, kw = k
    sy, sx = stride
    wt = p.const(f"W{name}", randf(m, cin, kh, kw))
    b = p.const(f"b{name}", randf(m)) if bias else None
    oh = (h + pads[0] + pads[2] - dil[0] * (kh - 1) - 1) // sy + 1
    ow = (w + pads[1] + pads[3] - dil[1] * (kw - 1) - 1) // sx + 1
    y = p.output(f"Y{name}", F32, (Bt, m, oh, ow))
    c, ky, kx = Var(f"c{name}"), Var(f"ky{name}"), Var(f"kx{name}")

    def body(n, f, oy, ox):
        iy, ix = oy * sy + ky * dil[0] - pads[0], ox * sx + kx * dil[1] - pads[1]
        v = select((iy >= 0) & (iy < h) & (ix >= 0) & (ix < w), x[n, c, iy, ix], 0.0)
        acc = rsum([(c, cin), (ky, kh), (kx, kw)], v * wt[f, c, ky, kx])
        acc = acc + b[f] if b is not None else acc
        return relu(acc) if act else acc

    p.compute(y, body)


def build(specs, cin, parallel):
    p = KernelProgram.new("win", ["Bt", "H", "W"])
    x = p.input("X", F32, (Bt, cin, H, W))
    for name, m, k, pads, dil, extra in specs:
        add_conv(p, x, cin, H, W, name, m, k, pads, dil, **extra)
    schedule_program(p, TargetInfo(parallel=parallel, gemm_min_work=1))
    return p, JitKernel(p, parallel=parallel)


SPECS = [
    ("a", 7, (3, 3), (1, 1, 1, 1), (1, 1), {}),
    ("b", 20, (5, 3), (1, 0, 2, 1), (1, 1), {"act": False}),  # 20 rows: full and partial panels
    ("c", 16, (3, 3), (2, 1, 2, 1), (2, 1), {"bias": False, "act": False}),  # dilation, no epilogue
    ("d", 9, (1, 3), (0, 2, 0, 0), (1, 3), {}),  # one kernel row, dilated columns, padding on one side
    ("e", 8, (3, 3), (1, 1, 1, 1), (1, 1), {"stride": (2, 2)}),  # stride 2: 2x2 phase planes
    ("f", 6, (3, 5), (0, 2, 1, 1), (2, 1), {"stride": (3, 2)}),  # strides 3 and 2 with a dilation
]


@pytest.mark.parametrize("parallel", [False, True], ids=["serial", "pool"])
def test_window_convs_match_numpy(parallel):
    p, kern = build(SPECS, 5, parallel)
    for cmp in p.computes():
        assert cmp.schedule.gemm.window is not None, cmp.schedule.describe()
    for n, h, w in [(1, 1, 4), (3, 7, 9), (1, 5, 61), (2, 13, 50), (1, 3, 130)]:
        x = randf(n, 5, h, w)
        got = kern(x, syms={"Bt": n, "H": h, "W": w})
        for (name, _m, _k, pads, dil, extra), y in zip(SPECS, got, strict=True):
            bias = p.buffers[f"b{name}"].data if extra.get("bias", True) else None
            want = conv_ref(x, p.buffers[f"W{name}"].data, pads, dil, bias, extra.get("stride", (1, 1)))
            if extra.get("act", True):
                want = np.maximum(want, 0)
            np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4, err_msg=f"{name} at {(n, h, w)}")


def test_window_batches_one_at_a_time_and_long_k():
    """32 channels at 66x66: a batch's planes (590 KB) are padded and multiplied one batch
    at a time; K = 288 is more than one default k block (window mode takes it whole)."""
    p, kern = build([("w", 24, (3, 3), (1, 1, 1, 1), (1, 1), {})], 32, True)
    g = p.body[0].schedule.gemm
    assert g.window is not None and g.kc >= 288
    for n, h in [(2, 66), (3, 20)]:
        x = randf(n, 32, h, h)
        (y,) = kern(x, syms={"Bt": n, "H": h, "W": h})
        want = np.maximum(conv_ref(x, p.buffers["Ww"].data, (1, 1, 1, 1), (1, 1), p.buffers["bw"].data), 0)
        np.testing.assert_allclose(y, want, rtol=1e-4, atol=2e-4)


@pytest.mark.parametrize("parallel", [False, True], ids=["serial", "pool"])
def test_in_place_1x1_and_kx1_match_numpy(parallel):
    """A 1x1 conv reads X in place (masked loads: the last tile ends at X's end); a 3x1
    kernel padded in y goes through the copy with whole-row tiles."""
    p = KernelProgram.new("inplace", ["Bt", "H", "W"])
    x = p.input("X", F32, (Bt, 6, H, W))
    w1 = p.const("W1", randf(20, 6))
    b1 = p.const("B1", randf(20))
    y1 = p.output("Y1", F32, (Bt, 20, H, W))
    c = Var("c")
    p.compute(y1, lambda n, f, oy, ox: relu(rsum([(c, 6)], x[n, c, oy, ox] * w1[f, c]) + b1[f]))
    add_conv(p, x, 6, H, W, "k31", 8, (3, 1), (1, 0, 1, 0), (1, 1))
    schedule_program(p, TargetInfo(parallel=parallel, gemm_min_work=1))
    g1, g31 = (cmp.schedule.gemm for cmp in p.computes())
    assert g1.window.source == "X" and g31.window is not None and g31.window.source is None
    kern = JitKernel(p, parallel=parallel)
    for n, h, w in [(1, 1, 1), (3, 7, 9), (2, 11, 50), (1, 4, 130)]:
        xv = randf(n, 6, h, w)
        y1v, y31 = kern(xv, syms={"Bt": n, "H": h, "W": w})
        want1 = np.maximum(np.einsum("nchw,fc->nfhw", xv, p.buffers["W1"].data) + p.buffers["B1"].data[:, None, None],
                           0)
        np.testing.assert_allclose(y1v, want1, rtol=1e-4, atol=1e-4, err_msg=f"1x1 at {(n, h, w)}")
        want31 = np.maximum(conv_ref(xv, p.buffers["Wk31"].data, (1, 0, 1, 0), (1, 1), p.buffers["bk31"].data), 0)
        np.testing.assert_allclose(y31, want31, rtol=1e-4, atol=1e-4, err_msg=f"3x1 at {(n, h, w)}")


def test_which_convs_take_the_window():
    """Convs with a kernel window do (through a padded copy; strides through phase planes),
    a 1x1 kernel reads its input in place; a position that is no affine form does not."""
    p = KernelProgram.new("which", ["Bt", "H", "W"])
    x = p.input("X", F32, (Bt, 4, H, W))
    add_conv(p, x, 4, H, W, "s1", 8, (3, 3), (1, 1, 1, 1), (1, 1))
    y2 = p.output("Y2", F32, (Bt, 8, H, W))
    wt = p.const("W2", randf(8, 4, 3, 3))
    c, ky, kx = Var("c"), Var("ky"), Var("kx")
    p.compute(y2, lambda n, f, oy, ox: rsum([(c, 4), (ky, 3), (kx, 3)],
                                            x[n, c, (oy * 2 + ky) % H, ox + kx - 1 + 0 * ky] * wt[f, c, ky, kx]))
    y1 = p.output("Y1", F32, (Bt, 8, H, W))
    w1 = p.const("W1", randf(8, 4))
    p.compute(y1, lambda n, f, oy, ox: rsum([(c, 4)], x[n, c, oy, ox] * w1[f, c]))
    schedule_program(p, TargetInfo(gemm_min_work=1))
    g3, g2, g1 = (cmp.schedule.gemm for cmp in p.computes())
    assert g3.window is not None and (g3.window.ey, g3.window.ex, g3.window.dy, g3.window.dx) == (-1, -1, 1, 1)
    assert g2 is not None and g2.window is None  # y position is no affine form of (oy, ky)
    assert g1 is not None and g1.window is not None and g1.window.source == "X"  # 1x1: X read in place
    assert g3.window.source is None  # a kernel window: a padded copy
    # strided along x: 2 phase planes per channel; stride 5: beyond MAX_STRIDE
    ext = {"oy": H, "ox": W, "n": Bt}
    strided = x[Var("n"), Var("c"), Var("oy") + Var("ky"), Var("ox") * 2 + Var("kx")]
    ws = match_conv_window(strided, ("oy", "ox"), [("c", 4), ("ky", 3), ("kx", 3)], ("n",), ext)
    assert ws is not None and (ws.sy, ws.sx, ws.planes) == (1, 2, 8)
    # tap (c=1, kh=2, kw=1) in 6x10 phase planes: plane (1*1 + 0)*2 + 1 = 3, row 2, column 0
    assert window_offsets(ws, [("c", 4), ("ky", 3), ("kx", 3)], 10, 6)[1 * 9 + 2 * 3 + 1] == 3 * 60 + 2 * 10 + 0
    wide = x[Var("n"), Var("c"), Var("oy") + Var("ky"), Var("ox") * 5 + Var("kx")]
    assert match_conv_window(wide, ("oy", "ox"), [("c", 4), ("ky", 3), ("kx", 3)], ("n",), ext) is None
    # the offsets table: plane stride Y*X, row offsets dy*X, column offsets dx
    w = g3.window
    assert (w.plane_vars, w.ky, w.kx) == (("cs1",), "kys1", "kxs1")
    offs = window_offsets(w, [("cs1", 2), ("kys1", 3), ("kxs1", 3)], 10, 6)
    assert offs[:10] == [0, 1, 2, 10, 11, 12, 20, 21, 22, 60]


def test_row_epilogues_in_registers_match_numpy():
    """Chains of per-row steps run in the micro-kernel (scale, shift, sub, clip with max and
    min, relu, a residual of the output's shape; operands on either side); a residual read
    at other indices keeps the separate pass. NaN inputs stay NaN through relu and the
    clip, as in the separate pass. Widths below a tile (3x5: every tile across padding
    columns, the residual then through the separate pass) and above (9x70)."""
    from onnxcc.kernel.expr import maximum, minimum

    p = KernelProgram.new("rowepi", ["Bt", "H", "W"])
    x = p.input("X", F32, (Bt, 4, H, W))
    r = p.input("R", F32, (Bt, 10, H, W))
    wt = p.const("Wt", randf(10, 4, 3, 3))
    s = p.const("S", randf(1, 10, 1, 1))
    t = p.const("T", randf(10))
    c, ky, kx = Var("c"), Var("ky"), Var("kx")

    def acc(n, f, oy, ox):
        iy, ix = oy + ky - 1, ox + kx - 1
        v = select((iy >= 0) & (iy < H) & (ix >= 0) & (ix < W), x[n, c, iy, ix], 0.0)
        return rsum([(c, 4), (ky, 3), (kx, 3)], v * wt[f, c, ky, kx])

    bodies = {
        "bnclip": lambda n, f, oy, ox: minimum(maximum(s[0, f, 0, 0] * acc(n, f, oy, ox) + t[f] - 0.5, -1.0), 2.0),
        "relu_first": lambda n, f, oy, ox: relu(acc(n, f, oy, ox)) * 3.0 + t[f],
        "residual": lambda n, f, oy, ox: relu(acc(n, f, oy, ox) + t[f] + r[n, f, oy, ox]),
        "swapped": lambda n, f, oy, ox: acc(n, f, oy, ox) + r[n, f, ox % H, oy % W],
    }
    outs = {k: p.output(k, F32, (Bt, 10, H, W)) for k in bodies}
    for k, fn in bodies.items():
        p.compute(outs[k], fn)
    schedule_program(p, TargetInfo(parallel=True, gemm_min_work=1))
    gs = {k: cmp.schedule.gemm for k, cmp in zip(bodies, p.computes(), strict=True)}
    assert [o.op for o in gs["bnclip"].row_ops] == ["mul", "add", "sub", "max", "min"]
    assert [o.op for o in gs["relu_first"].row_ops] == ["relu", "mul", "add"]
    res = gs["residual"].row_ops
    assert [(o.op, o.tile) for o in res] == [("add", False), ("add", True), ("relu", False)]
    assert gs["swapped"].row_ops is None  # R read at other indices: the separate pass
    kern = JitKernel(p, parallel=True)
    sv, tv = p.buffers["S"].data.reshape(1, 10, 1, 1), p.buffers["T"].data.reshape(1, 10, 1, 1)
    for n, h, w in [(1, 3, 5), (3, 9, 70)]:
        xv, rv = randf(n, 4, h, w), randf(n, 10, h, w)
        xv[0, 0, 0, 0] = np.nan
        base = conv_ref(xv, p.buffers["Wt"].data, (1, 1, 1, 1), (1, 1))
        want = {"bnclip": np.minimum(np.maximum(sv * base + tv - 0.5, -1.0), 2.0),
                "relu_first": np.maximum(base, 0) * 3.0 + tv,
                "residual": np.maximum(base + tv + rv, 0),
                "swapped": base + rv[:, :, np.arange(w)[None, :] % h, np.arange(h)[:, None] % w]}
        got = dict(zip(bodies, kern(xv, rv, syms={"Bt": n, "H": h, "W": w}), strict=True))
        for k in bodies:
            np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=1e-4, err_msg=f"{k} at {(n, h, w)}")
