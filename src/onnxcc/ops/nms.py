"""NonMaxSuppression: per batch and class, greedily keep the best-scoring boxes whose
IoU with every box already kept is at most the threshold; the result [n, 3] lists
(batch, class, box) per kept box, batch by batch, class by class, best score first.

n is a run-time symbol (data_dependent.py). The lowering ranks the boxes by score (ties:
lower index first), then runs the greedy pass as a loop over the rank r with the batches
and classes as parallel computes: box order[b, c, r] is kept when it passes the score
threshold, its class has kept fewer than the maximum, and no kept box suppresses it. The
kept flags are then compacted into the result in one selection pass.
"""

from __future__ import annotations

import numpy as np

from ..ir import DType, TensorType
from ..kernel import (
    Expr,
    LoopStmt,
    Var,
    WriteAt,
    cast,
    dim_to_expr,
    maximum,
    minimum,
    rsum,
    select,
    unflatten_index,
)
from .data_dependent import count_symbol, select_pass
from .registry import OpDef, onnx_inputs, register
from .shape_util import emit, scalar

I64 = DType.i64


def _extent(box, center: int, lo_k: int, hi_k: int):
    """(min, max) of a box along one axis: corners in either order, or center and size."""
    a, b = box(lo_k), box(hi_k)
    if center:
        return a - b / 2, a + b / 2
    return minimum(a, b), maximum(a, b)


def suppresses(box_a, box_b, center: int, thr: Expr) -> Expr:
    """Whether kept box a suppresses box b: IoU(a, b) > thr (ONNX's rules: an empty
    intersection or a degenerate box never suppresses)."""
    # [y1, x1, y2, x2] (corners) or [x_center, y_center, w, h] (center_point_box=1)
    ax = _extent(box_a, center, 0, 2) if center else _extent(box_a, center, 1, 3)
    bx = _extent(box_b, center, 0, 2) if center else _extent(box_b, center, 1, 3)
    ay = _extent(box_a, center, 1, 3) if center else _extent(box_a, center, 0, 2)
    by = _extent(box_b, center, 1, 3) if center else _extent(box_b, center, 0, 2)
    ix0, ix1 = maximum(ax[0], bx[0]), minimum(ax[1], bx[1])
    iy0, iy1 = maximum(ay[0], by[0]), minimum(ay[1], by[1])
    inter = (ix1 - ix0) * (iy1 - iy0)
    area_a = (ax[1] - ax[0]) * (ay[1] - ay[0])
    area_b = (bx[1] - bx[0]) * (by[1] - by[0])
    union = area_a + area_b - inter
    zero = cast(0, inter.dtype)
    ok = (ix1 > ix0) & (iy1 > iy0) & (inter > zero) & (area_a > zero) & (area_b > zero) & (union > zero)
    safe = select(ok, union, cast(1, union.dtype))
    return ok & ((inter / safe) > thr)


@register("onnx.NonMaxSuppression")
class NonMaxSuppressionOp(OpDef):
    arity = (2, 5)

    def infer(self, ctx):
        boxes, scores = ctx.in_types[0], ctx.in_types[1]
        if boxes.rank != 3 or scores.rank != 3:
            raise ctx.error(f"boxes must be [batches, boxes, 4] and scores [batches, classes, boxes], "
                            f"got {boxes} and {scores}")
        ctx.require_eq(boxes.shape[2], 4, "boxes' last dim is 4")
        ctx.require_eq(boxes.shape[0], scores.shape[0], "boxes and scores have the same batches")
        ctx.require_eq(boxes.shape[1], scores.shape[2], "boxes and scores have the same boxes")
        b, c, n = scores.shape
        bound = b * c * n
        n = count_symbol(ctx, "selected", "count of selected boxes (data-dependent)", bound, 0, 0)
        return [TensorType(I64, (n, 3))]

    def lower(self, ctx):
        ins = onnx_inputs(ctx.op, list(ctx.inputs))
        boxes, scores, maxo, iou, sthr = ins + [None] * (5 - len(ins))  # trailing absent inputs
        if scores.dtype is not boxes.dtype:
            raise ctx.unsupported(f"boxes are {boxes.dtype.value} and scores {scores.dtype.value}")
        p = ctx.program
        nb, nc, nn = scores.shape
        center = int(ctx.attr("center_point_box", 0))
        dt = scores.dtype
        max_out = cast(scalar(maxo), I64) if maxo is not None else dim_to_expr(0)
        thr = cast(scalar(iou), dt) if iou is not None else cast(0, dt)
        # rank of box i among its class's scores (ties: the lower index first), and its inverse
        rank = ctx.temp(I64, (nb, nc, nn), "nms_rank")
        j = Var("j_rank")
        emit(ctx, rank, lambda ix: rsum([(j, nn)], cast(
            (scores[(ix[0], ix[1], j)] > scores[ix]) | (scores[(ix[0], ix[1], j)].eq(scores[ix]) & (j < ix[2])), I64)))
        order = ctx.temp(I64, (nb, nc, nn), "nms_order")
        k = Var("k_order")
        emit(ctx, order, lambda ix: rsum([(k, nn)], select(rank[(ix[0], ix[1], k)].eq(ix[2]), k, dim_to_expr(0))))
        kept = ctx.temp(DType.bool, (nb, nc, nn), "nms_kept")
        emit(ctx, kept, lambda ix: dim_to_expr(0).eq(1))
        nkept = ctx.temp(I64, (nb, nc), "nms_nkept")
        emit(ctx, nkept, lambda ix: dim_to_expr(0))
        # the greedy pass over the ranks, every batch and class at once
        r = ctx.temp(I64, (), "nms_r")
        ok = ctx.temp(DType.bool, (nb, nc), "nms_ok")
        nk2 = ctx.temp(I64, (nb, nc), "nms_nkept_next")
        body: list = []
        with ctx.lowerer.into(body):
            def ok_body(ix):
                b, c = ix
                i = order[(b, c, r[()])]
                q = Var("q_kept")
                hit = rsum([(q, nn)], cast(kept[(b, c, q)] & suppresses(
                    lambda t: boxes[(b, q, dim_to_expr(t))], lambda t: boxes[(b, i, dim_to_expr(t))], center, thr),
                    I64))
                good = (nkept[(b, c)] < max_out) & hit.eq(0)
                if sthr is not None:
                    good = good & (scores[(b, c, i)] > cast(scalar(sthr), dt))
                return good

            emit(ctx, ok, ok_body)
            vb, vc = Var("wb_nms"), Var("wc_nms")
            p.body.append(WriteAt(kept.name, ((vb, nb), (vc, nc)), (vb, vc, order[(vb, vc, r[()])]), ok[(vb, vc)]))
            emit(ctx, nk2, lambda ix: nkept[ix] + cast(ok[ix], I64))
            emit(ctx, nkept, lambda ix: nk2[ix])
        p.body.append(LoopStmt(body, index=r.name, trips=dim_to_expr(nn)))
        out = ctx.out(0)
        shape = (nb, nc, nn)

        def keep(t: Expr) -> Expr:
            b, c, rr = unflatten_index(t, shape)
            return kept[(b, c, order[(b, c, rr)])]

        def write(pos: Expr, t: Expr):
            b, c, rr = unflatten_index(t, shape)
            vals = (b, c, order[(b, c, rr)])
            return [WriteAt(out.name, (), (pos, dim_to_expr(d)), cast(v, I64)) for d, v in enumerate(vals)]

        select_pass(ctx, str(ctx.out_type(0).shape[0]), nb * nc * nn, keep, write)

    def reference(self, ctx, boxes, scores, *rest):
        maxo, iou, sthr = (_aligned(ctx, list(rest)) + [None, None, None])[:3]
        max_out = int(np.asarray(maxo).reshape(-1)[0]) if maxo is not None and np.size(maxo) else 0
        thr = float(np.asarray(iou).reshape(-1)[0]) if iou is not None and np.size(iou) else 0.0
        s_thr = float(np.asarray(sthr).reshape(-1)[0]) if sthr is not None and np.size(sthr) else None
        center = int(ctx.attr("center_point_box", 0))
        out = []
        for b in range(scores.shape[0]):
            for c in range(scores.shape[1]):
                sc = scores[b, c]
                cand = [i for i in range(sc.shape[0]) if s_thr is None or sc[i] > s_thr]
                cand.sort(key=lambda i: (-float(sc[i]), i))
                kept: list[int] = []
                for i in cand:
                    if len(kept) >= max_out:
                        break
                    if not any(_iou(boxes[b, q], boxes[b, i], center) > thr for q in kept):
                        kept.append(i)
                out += [(b, c, i) for i in kept]
        return [np.array(out, dtype=np.int64).reshape(-1, 3)]


def _aligned(ctx, rest):
    """The optional inputs after boxes and scores, with absent ones as None."""
    full = onnx_inputs(ctx.op, [None, None, *rest])
    return full[2:]


def _iou(a, b, center: int) -> float:
    """IoU by ONNX's rules (0 when the boxes do not overlap or one is degenerate)."""
    def ext(box, k0, k1):
        if center:
            return box[k0] - box[k1] / 2, box[k0] + box[k1] / 2
        return min(box[k0], box[k1]), max(box[k0], box[k1])

    (ax0, ax1), (bx0, bx1) = (ext(a, 0, 2), ext(b, 0, 2)) if center else (ext(a, 1, 3), ext(b, 1, 3))
    (ay0, ay1), (by0, by1) = (ext(a, 1, 3), ext(b, 1, 3)) if center else (ext(a, 0, 2), ext(b, 0, 2))
    ix0, ix1, iy0, iy1 = max(ax0, bx0), min(ax1, bx1), max(ay0, by0), min(ay1, by1)
    if ix1 <= ix0 or iy1 <= iy0:
        return 0.0
    inter = (ix1 - ix0) * (iy1 - iy0)
    aa, ab = (ax1 - ax0) * (ay1 - ay0), (bx1 - bx0) * (by1 - by0)
    union = aa + ab - inter
    if inter <= 0 or aa <= 0 or ab <= 0 or union <= 0:
        return 0.0
    return float(inter / union)
