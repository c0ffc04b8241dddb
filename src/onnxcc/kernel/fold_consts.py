"""Constant remaps evaluated at compile time: a compute that only moves elements of const
buffers (slices, concats, transposes, pads of weights) becomes a const buffer.

    folded = fold_const_remaps(program)     # names of the temps that became consts

Exporters rearrange weights with graph ops: PyTorch's LSTM export slices W and R into gate
blocks and concatenates them in ONNX's gate order (silero_vad: two [512, 128] weights), and
canonicalize only folds results up to 64 elements (the graph IR prints its constants).
Lowered as they are, those computes ran at every call, and the GEMMs reading them packed
their B operand at every call, where a const B is packed once at compile time
(`schedule.GemmPlan.b_packed`).

Only pure data movement is folded, so the folded values are the kernel's bit for bit: every
float node is a load, a select or a constant; index arithmetic (i64) and conditions (bool)
may be anything `_eval` knows; nothing can fail (no checks, no division by a non-constant).
Half and small float types stay (their kernel arithmetic widens to f32). The temp must have
static dims, one writer (a top-level compute), at most `LIMIT_BYTES` and not much more than
the consts it reads (`GROWTH_BYTES`: no fills or broadcasts); its views become
consts of their own shape, and const buffers nothing reads any more are dropped.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from onnxcc.ir import DType, canon

from .expr import Binary, Const, Expr, Load, Select, Var, walk
from .program import Buffer, Compute, KernelProgram

LIMIT_BYTES = 64 << 20
"""largest remap folded (it becomes part of the library's constants)"""
GROWTH_BYTES = 4096
"""a folded remap may be at most this much bigger than the consts it reads (an Expand or a
ConstantOfShape of a big shape stays a compute: the library would carry every element)"""

_INT_OPS = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "max": np.maximum, "min": np.minimum,
    "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal, "eq": np.equal,
    "ne": np.not_equal, "and": np.logical_and, "or": np.logical_or,
}
"""i64 / bool binaries and their numpy forms (floor division and modulo by a positive
constant are handled apart)"""

_PLAIN = frozenset({DType.f32, DType.f64, DType.i8, DType.i16, DType.i32, DType.i64, DType.u8, DType.u16,
                    DType.u32, DType.u64, DType.bool})
"""element types whose const data are their values (not bit patterns) and whose loads the
kernel does not widen"""


class _NoFold(Exception):
    pass


def foldable(c: Compute, program: KernelProgram) -> bool:
    """Whether `c` writes a temp with static dims from const buffers by data movement only."""
    buf = program.buffers[c.out]
    if buf.kind != "temp" or buf.alias_of is not None or buf.dtype not in _PLAIN:
        return False
    if not all(isinstance(canon(d), int) for d in buf.shape):
        return False
    nbytes = int(np.prod([int(canon(d)) for d in buf.shape], dtype=np.int64)) * buf.dtype.np.itemsize
    read = sum(program.buffers[b].data.nbytes for b in c.reads() if program.buffers[b].kind == "const")  # type: ignore[union-attr]
    if nbytes > LIMIT_BYTES or nbytes > read + GROWTH_BYTES:
        return False  # a fill or a broadcast: cheaper to run than to ship in the library
    for n in walk(c.body):
        if n.dtype not in _PLAIN and n.dtype is not DType.i64:
            return False
        if isinstance(n, Load):
            src = program.buffers[n.buffer]
            if src.kind != "const" or src.dtype not in _PLAIN:
                return False
        elif isinstance(n, Binary):
            if n.dtype.is_float or n.a.dtype.is_float:
                return False  # float arithmetic: left to the kernel (its rounding, its FMAs)
            if n.op in ("floordiv", "mod"):
                if not (isinstance(n.b, Const) and n.b.value > 0):
                    return False
            elif n.op not in _INT_OPS:
                return False
        elif not isinstance(n, (Var, Const, Select)):
            return False  # casts, unaries, reductions, checks, symbols
    return True


def _eval(e: Expr, env: Mapping[str, np.ndarray], program: KernelProgram) -> np.ndarray:
    """numpy value of a `foldable` body, broadcast over the vars' index grids in `env`."""
    memo: dict[Expr, np.ndarray] = {}
    for n in walk(e):  # children before parents
        if isinstance(n, Var):
            v = env[n.name]
        elif isinstance(n, Const):
            v = np.array(n.value, dtype=n.dtype.np)
        elif isinstance(n, Load):
            data = program.buffers[n.buffer].data
            assert data is not None
            if data.size == 0:  # an empty const (Funnel's opset-14 export slices one): left to the kernel
                raise _NoFold("load from an empty const")
            # NOTE: clipped, so the arm of a select that is not taken reads something valid
            idx = tuple(np.clip(memo[i], 0, max(0, s - 1)) for i, s in zip(n.indices, data.shape, strict=True))
            v = data[idx] if idx else data[()]
        elif isinstance(n, Binary):
            a, b = memo[n.a], memo[n.b]
            if n.op == "floordiv":
                v = np.floor_divide(a, b)
            elif n.op == "mod":
                v = np.mod(a, b)
            else:
                v = _INT_OPS[n.op](a, b)
        elif isinstance(n, Select):
            v = np.where(memo[n.cond], memo[n.a], memo[n.b])
        else:
            raise _NoFold(type(n).__name__)
        memo[n] = np.asarray(v)
    return memo[e]


def fold_const_remaps(program: KernelProgram) -> list[str]:
    """Replace every foldable top-level compute by a const buffer (in place); returns the
    names of the temps folded."""
    folded: list[str] = []
    read_by: set[str] = set()
    for s in program.body:
        if isinstance(s, Compute) and foldable(s, program):
            writers = [t for t in program.body if s.out in {program.root(b) for b in t.writes()}]
            if writers != [s]:
                continue
            buf = program.buffers[s.out]
            views = [n for n in program.buffers if program.root(n) == s.out]
            if any(program.buffers[n].dtype is not buf.dtype for n in views):
                continue  # a BitCast view: left alone
            shape = tuple(int(canon(d)) for d in buf.shape)
            grids = np.meshgrid(*[np.arange(d, dtype=np.int64) for d in shape], indexing="ij", sparse=True)
            try:
                with np.errstate(all="ignore"):
                    vals = _eval(s.body, dict(zip(s.var_names, grids, strict=True)), program)
            except _NoFold:
                continue
            data = np.ascontiguousarray(np.broadcast_to(vals.astype(buf.dtype.np, copy=False), shape))
            for name in views:
                view = program.buffers[name]
                vshape = tuple(int(canon(d)) for d in view.shape)
                program.buffers[name] = Buffer(name, view.dtype, vshape, "const", data=data.reshape(vshape))
            read_by |= s.reads() | set(views)
            folded.append(s.out)
    if folded:
        program.body[:] = [s for s in program.body if not (isinstance(s, Compute) and s.out in folded)]
        still = set().union(*(s.reads() for s in program.body)) if program.body else set()
        for name in read_by - still:
            if program.buffers[name].kind == "const" and not any(b.alias_of == name for b in program.buffers.values()):
                del program.buffers[name]
    return folded
