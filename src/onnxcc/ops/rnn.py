"""Recurrent layers: RNN, LSTM and GRU (opset 14 semantics).

Inputs (ONNX positions, optional ones may be absent): X, W, R, B, sequence_lens, initial_h,
initial_c (LSTM), P (LSTM peepholes). Outputs (each optional): Y [seq, dirs, batch, hidden],
Y_h [dirs, batch, hidden], Y_c (LSTM); `layout=1` puts batch first in X, Y, Y_h, Y_c and the
initial states. `direction` forward / reverse / bidirectional; `clip` bounds the inputs of
the activations; sequence_lens stops each batch row after its own length (Y is zero past
it, Y_h holds the last valid step; reverse runs over each row's valid prefix backwards).
Only the default activations (RNN: Tanh; LSTM: Sigmoid, Tanh, Tanh; GRU: Sigmoid, Tanh) are
supported, and LSTM's input_forget=0.

Lowering: one compute for the input projection of every step at once,
`XW[d, t, b, g] = X[t, b] . W[d, g] + biases` (a GEMM with X read in place and W packed at
compile time; a constant B folded into one bias constant), then a LoopStmt over the time steps
whose body, for all directions together, adds the recurrent product (`H . R[d]`, also a
GEMM with R packed at compile time; LSTM adds XW's row in its epilogue), applies the gates (vector
code: vmath's sigmoid and tanh), writes Y's row for the step (WriteAt: direction d reads and
writes time position t, or seq-1-t when it runs in reverse) and copies the new states over
the old. Timing against onnxruntime: benchmarks/rnn.py.
"""

from __future__ import annotations

import numpy as np

from ..errors import UnsupportedOp
from ..ir import DType, TensorType
from ..kernel import LoopStmt, Var, WriteAt, cast, clamp, const, dim_to_expr, rsum, select, sigmoid, tanh
from .registry import InferCtx, OpDef, RefCtx, onnx_inputs, register

DEFAULT_ACTS = {"LSTM": ["Sigmoid", "Tanh", "Tanh"], "GRU": ["Sigmoid", "Tanh"], "RNN": ["Tanh"]}
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
NAMES = {"LSTM": ("X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P"),
         "GRU": ("X", "W", "R", "B", "sequence_lens", "initial_h"),
         "RNN": ("X", "W", "R", "B", "sequence_lens", "initial_h")}


def _check_attrs(kind: str, attr, where, unsupported) -> tuple[int, int]:
    """(directions, layout); raises `unsupported(detail)` for what is not implemented."""
    direction = attr("direction", "forward")
    if direction not in ("forward", "reverse", "bidirectional"):
        raise where(f"direction must be forward, reverse or bidirectional, got {direction!r}")
    nd = 2 if direction == "bidirectional" else 1
    acts = attr("activations", None)
    if acts is not None and [a.lower() for a in acts] != [a.lower() for a in DEFAULT_ACTS[kind] * nd]:
        raise unsupported(f"activations {list(acts)} (only the defaults {DEFAULT_ACTS[kind]} are supported)")
    if kind == "LSTM" and attr("input_forget", 0):
        raise unsupported("input_forget=1 is not supported")
    layout = attr("layout", 0)
    if layout not in (0, 1):
        raise where(f"layout must be 0 or 1, got {layout}")
    return nd, layout


class _RNN(OpDef):
    arity = (3, 8)
    num_results = None
    kind_name = ""

    def operands(self, op) -> dict:
        """ONNX input name -> operand index, for the inputs present."""
        pos = onnx_inputs(op, list(range(len(op.operands))))
        return {n: i for n, i in zip(NAMES[self.kind_name], pos) if i is not None}

    # ---- shape rule ----------------------------------------------------------------------
    def infer(self, ctx: InferCtx):
        k = self.kind_name
        nd, layout = _check_attrs(k, ctx.attr, ctx.error, lambda m: UnsupportedOp(k, "", ctx.loc, m))
        ix = self.operands(ctx.op)
        if len(ctx.op.results) > (3 if k == "LSTM" else 2):
            raise ctx.error(f"expected at most {3 if k == 'LSTM' else 2} results, got {len(ctx.op.results)}")
        x, w, r = (ctx.in_types[ix[n]] for n in ("X", "W", "R"))
        w, r = self.weight_types(ctx, w, r)
        if not x.dtype.is_float or w.dtype != x.dtype or r.dtype != x.dtype:
            raise ctx.error(f"X, W and R must share a float dtype, got {x}, {w}, {r}")
        if (x.rank, w.rank, r.rank) != (3, 3, 3):
            raise ctx.error(f"X, W and R must be 3-D, got {x}, {w}, {r}")
        seq, batch = (x.shape[1], x.shape[0]) if layout else (x.shape[0], x.shape[1])
        hidden = ctx.attr("hidden_size", None)
        if hidden is None:
            hidden = r.shape[2]
        hidden = ctx.require_eq(hidden, r.shape[2], "hidden_size vs R dim 2")
        g = GATES[k]
        for name, t, want in (("W", w, (nd, g * hidden, x.shape[2])), ("R", r, (nd, g * hidden, hidden))):
            for j, (d, e) in enumerate(zip(t.shape, want)):
                ctx.require_eq(d, e, f"{name} dim {j}")
        state = (batch, nd, hidden) if layout else (nd, batch, hidden)
        extra = {"B": (nd, 2 * g * hidden), "sequence_lens": (batch,), "initial_h": state, "initial_c": state,
                 "P": (nd, 3 * hidden)}
        for name, want in extra.items():
            if name in ix:
                t = ctx.in_types[ix[name]]
                if t.rank != len(want):
                    raise ctx.error(f"{name} must have rank {len(want)}, got {t}")
                for j, (d, e) in enumerate(zip(t.shape, want)):
                    ctx.require_eq(d, e, f"{name} dim {j}")
        y = (batch, seq, nd, hidden) if layout else (seq, nd, batch, hidden)
        shapes = [y, state, state]
        return [TensorType(x.dtype, s) for s in shapes[:len(ctx.op.results)]]

    # ---- numpy reference -------------------------------------------------------------------
    def reference(self, ctx: RefCtx, *arrays):
        k = self.kind_name
        nd, layout = _check_attrs(k, ctx.attr, ValueError, NotImplementedError)
        a = self.weight_arrays(ctx, {n: arrays[i] for n, i in self.operands(ctx.op).items()})
        x = a["X"].swapaxes(0, 1) if layout else a["X"]
        seq, batch = x.shape[:2]
        hid = a["R"].shape[2]
        g = GATES[k]
        dt = x.dtype
        zeros = np.zeros((nd, batch, hid), dt)
        h0 = a.get("initial_h", zeros)
        c0 = a.get("initial_c", zeros)
        if layout:
            h0 = h0.swapaxes(0, 1) if "initial_h" in a else h0
            c0 = c0.swapaxes(0, 1) if "initial_c" in a else c0
        b = a.get("B", np.zeros((nd, 2 * g * hid), dt))
        p = a.get("P", np.zeros((nd, 3 * hid), dt))
        lens = a["sequence_lens"].astype(np.int64) if "sequence_lens" in a else np.full(batch, seq, np.int64)
        clip = ctx.attr("clip", None)
        act = (lambda v: np.clip(v, -clip, clip)) if clip is not None else (lambda v: v)
        sig = lambda v: 1 / (1 + np.exp(-act(v)))  # noqa: E731
        th = lambda v: np.tanh(act(v))  # noqa: E731
        y = np.zeros((seq, nd, batch, hid), dt)
        yh, yc = np.zeros_like(zeros), np.zeros_like(zeros)
        rows = np.arange(batch)
        reverse = ctx.attr("direction", "forward") == "reverse"
        for d in range(nd):
            w, r = a["W"][d], a["R"][d]
            wb, rb = b[d][:g * hid], b[d][g * hid:]
            h, c = h0[d].copy(), c0[d].copy()
            for t in range(seq):
                valid = t < lens
                pos = np.where(valid, lens - 1 - t, t) if (reverse or d == 1) else np.full(batch, t)
                xt = x[pos, rows]
                if k == "LSTM":
                    gt = xt @ w.T + h @ r.T + wb + rb
                    i, o, f, cc = np.split(gt, 4, -1)
                    pi, po, pf = np.split(p[d], 3)
                    i, f = sig(i + pi * c), sig(f + pf * c)
                    cn = f * c + i * th(cc)
                    hn = sig(o + po * cn) * th(cn)
                    c = np.where(valid[:, None], cn, c)
                elif k == "RNN":
                    hn = th(xt @ w.T + h @ r.T + wb + rb)
                else:
                    xz, xr, xh = np.split(xt @ w.T + wb, 3, -1)
                    rz, rr, rh = np.split(r, 3)
                    bz, br, bh = np.split(rb, 3)
                    z, rg = sig(xz + h @ rz.T + bz), sig(xr + h @ rr.T + br)
                    if ctx.attr("linear_before_reset", 0):
                        hh = th(xh + rg * (h @ rh.T + bh))
                    else:
                        hh = th(xh + (rg * h) @ rh.T + bh)
                    hn = (1 - z) * hh + z * h
                h = np.where(valid[:, None], hn, h)
                y[pos, d, rows] = np.where(valid[:, None], hn, 0)
            yh[d], yc[d] = h, c
        if layout:
            y, yh, yc = y.transpose(2, 0, 1, 3), yh.swapaxes(0, 1), yc.swapaxes(0, 1)
        return [np.ascontiguousarray(v).astype(dt) for v in (y, yh, yc)[:len(ctx.op.results)]]

    # ---- lowering --------------------------------------------------------------------------
    def lower(self, ctx) -> None:
        _lower_rnn(self, ctx)

    # ---- hooks for variants whose W / R are stored otherwise (DynamicQuantizeLSTM) ----------
    def weight_types(self, ctx: InferCtx, w: TensorType, r: TensorType) -> tuple[TensorType, TensorType]:
        """The types of W and R as this op reads them ([dirs, gates * hidden, input])."""
        return w, r

    def weight_arrays(self, ctx: RefCtx, a: dict) -> dict:
        """The reference's inputs by name, W and R in the ONNX layout."""
        return a

    def weight_buffers(self, ctx, a: dict) -> dict:
        """The lowering's input buffers by name, W and R in the ONNX layout."""
        return a


@register("onnx.LSTM")
class LSTMOp(_RNN):
    kind_name = "LSTM"


@register("onnx.GRU")
class GRUOp(_RNN):
    kind_name = "GRU"


@register("onnx.RNN")
class RNNOp(_RNN):
    kind_name = "RNN"


def _lower_rnn(opdef: _RNN, ctx) -> None:
    k = opdef.kind_name
    nd, layout = _check_attrs(k, ctx.attr, ctx.unsupported, ctx.unsupported)
    L, p = ctx.lowerer, ctx.program
    a = opdef.weight_buffers(ctx, {n: ctx.inputs[i] for n, i in opdef.operands(ctx.op).items()})
    X, W, R = a["X"], a["W"], a["R"]
    dt = X.dtype
    seq, batch = (X.shape[1], X.shape[0]) if layout else (X.shape[0], X.shape[1])
    hid, g = R.shape[2], GATES[k]
    if not isinstance(hid, int):
        raise ctx.unsupported(f"hidden size {hid} is not a compile-time constant")
    lbr = k == "GRU" and bool(ctx.attr("linear_before_reset", 0))
    one, zero = const(1.0, dt), const(0.0, dt)
    clip = ctx.attr("clip", None)
    act = (lambda v: clamp(v, const(-clip, dt), const(clip, dt))) if clip is not None else (lambda v: v)

    def xl(t, b, i):
        return X[b, t, i] if layout else X[t, b, i]

    def bias(d, j):  # B[d, j] (zero when there is no B)
        return a["B"][d, j] if "B" in a else zero

    # 1. the input projection of every time step, all gates, with the biases that add to it
    i = Var("i")

    # a constant B: the biases XW adds (Wb + Rb; GRU with linear_before_reset keeps Rb of
    # h out) folded into one constant at compile time, one load per element
    bconst = ctx.const_value(opdef.operands(ctx.op)["B"]) if "B" in a else None
    if bconst is not None:
        wb, rb = bconst[:, :g * hid], bconst[:, g * hid:].copy()
        if lbr:
            rb[:, 2 * hid:] = 0
        XB = ctx.const((wb + rb).astype(bconst.dtype), "rnn_bias")

    def xw(d, t, b, j):
        acc = rsum([(i, X.shape[2])], xl(t, b, i) * W[d, j, i])
        if "B" not in a:
            return acc
        if bconst is not None:
            return acc + XB[d, j]
        rb = bias(d, j + g * hid)
        if lbr:  # GRU's recurrent bias of h stays inside r * (...)
            rb = select(j < 2 * hid, rb, zero)
        return acc + bias(d, j) + rb

    XW = ctx.temp(dt, (nd, seq, batch, g * hid), "rnn_xw")
    p.compute(XW, xw)
    # 2. states, from the initial values (layout 1 keeps them batch first)
    state = (nd, batch, hid)
    outs = [ctx.out(n) for n in range(len(ctx.op.results))]
    Hs = outs[1] if len(outs) > 1 and not layout else ctx.temp(dt, state, "rnn_h")
    Cs = None
    if k == "LSTM":
        Cs = outs[2] if len(outs) > 2 and not layout else ctx.temp(dt, state, "rnn_c")
    for buf, name in ((Hs, "initial_h"), (Cs, "initial_c")):
        if buf is None:
            continue
        init = a.get(name)
        p.compute(buf, (lambda d, b, h, s=init: s[b, d, h] if layout else s[d, b, h]) if init is not None
                  else (lambda d, b, h: zero))
    # 3. the time loop
    tb = ctx.temp(DType.i64, (), "rnn_t")
    t = tb[()]
    last = dim_to_expr(seq) - 1
    reverse = ctx.attr("direction", "forward") == "reverse"
    sl = a.get("sequence_lens")

    def valid(b):
        return t < cast(sl[b], DType.i64) if sl is not None else None

    def pos(d, b):  # the time position direction d handles at step t
        back = last - t
        if sl is not None:
            n = cast(sl[b], DType.i64)
            back = select(t < n, n - 1 - t, t)  # past its length a row writes its zero rows in order
        if reverse:
            return back
        return select(d.eq(1), back, t) if nd == 2 else t

    def masked(b, new, old):
        v = valid(b)
        return new if v is None else select(v, new, old)

    kk = Var("k")
    with L.into([]) as body:
        if k == "LSTM":
            G = ctx.temp(dt, (nd, batch, 4 * hid), "rnn_gates")
            p.compute(G, lambda d, b, j: XW[d, pos(d, b), b, j]
                      + rsum([(kk, hid)], Hs[d, b, kk] * R[d, j, kk]))
            P = a.get("P")

            def peep(g_, d, n, h, v):  # g_ + P[d, n] * v (no term at all without P)
                return g_ + P[d, n * hid + h] * v if P is not None else g_

            Cn = ctx.temp(dt, state, "rnn_cn")

            def c_new(d, b, h):
                c = Cs[d, b, h]
                ig = sigmoid(act(peep(G[d, b, h], d, 0, h, c)))
                fg = sigmoid(act(peep(G[d, b, 2 * hid + h], d, 2, h, c)))
                return masked(b, fg * c + ig * tanh(act(G[d, b, 3 * hid + h])), c)

            p.compute(Cn, c_new)
            Hn = ctx.temp(dt, state, "rnn_hn")
            p.compute(Hn, lambda d, b, h: masked(
                b, sigmoid(act(peep(G[d, b, hid + h], d, 1, h, Cn[d, b, h]))) * tanh(act(Cn[d, b, h])),
                Hs[d, b, h]))
            updates = [(Hs, Hn), (Cs, Cn)]
        elif k == "RNN":  # H = tanh(X W + biases + H R), the biases already in XW
            G = ctx.temp(dt, state, "rnn_gates")
            p.compute(G, lambda d, b, j: rsum([(kk, hid)], Hs[d, b, kk] * R[d, j, kk]))
            Hn = ctx.temp(dt, state, "rnn_hn")
            p.compute(Hn, lambda d, b, h: masked(b, tanh(act(XW[d, pos(d, b), b, h] + G[d, b, h])),
                                                 Hs[d, b, h]))
            updates = [(Hs, Hn)]
        else:
            width = 3 * hid if lbr else 2 * hid
            G = ctx.temp(dt, (nd, batch, width), "rnn_gates")
            p.compute(G, lambda d, b, j: rsum([(kk, hid)], Hs[d, b, kk] * R[d, j, kk]))

            def gate(d, b, n, h):  # x projection + recurrent product of gate n (z=0, r=1)
                return XW[d, pos(d, b), b, n * hid + h] + G[d, b, n * hid + h]

            if lbr:
                def cand(d, b, h):
                    rg = sigmoid(act(gate(d, b, 1, h)))
                    rec = G[d, b, 2 * hid + h] + bias(d, 5 * hid + h)
                    return XW[d, pos(d, b), b, 2 * hid + h] + rg * rec
            else:
                RH = ctx.temp(dt, state, "rnn_rh")
                p.compute(RH, lambda d, b, h: sigmoid(act(gate(d, b, 1, h))) * Hs[d, b, h])
                G2 = ctx.temp(dt, state, "rnn_rhr")
                p.compute(G2, lambda d, b, h: rsum([(kk, hid)], RH[d, b, kk] * R[d, 2 * hid + h, kk]))

                def cand(d, b, h):
                    return XW[d, pos(d, b), b, 2 * hid + h] + G2[d, b, h]

            Hn = ctx.temp(dt, state, "rnn_hn")

            def h_new(d, b, h):
                z = sigmoid(act(gate(d, b, 0, h)))
                return masked(b, (one - z) * tanh(act(cand(d, b, h))) + z * Hs[d, b, h], Hs[d, b, h])

            p.compute(Hn, h_new)
            updates = [(Hs, Hn)]
        if outs:  # Y's rows for this step (zeros past a row's length)
            d, b, h = Var("d"), Var("b"), Var("h")
            tp = pos(d, b)
            idx = (b, tp, d, h) if layout else (tp, d, b, h)
            dom = ((d, nd), (b, batch), (h, hid))
            body.append(WriteAt(outs[0].name, dom, idx, masked(b, Hn[d, b, h], zero)))
        for dst, src in updates:
            p.compute(dst, lambda d, b, h, s=src: s[d, b, h])
    p.body.append(LoopStmt(body, index=tb.name, trips=dim_to_expr(seq)))
    # 4. layout 1: the final states batch first
    for n, s in ((1, Hs), (2, Cs)):
        if n < len(outs) and layout:
            p.compute(outs[n], lambda b, d, h, s=s: s[d, b, h])
