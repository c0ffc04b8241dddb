"""The loop-level kernel IR shared by the backends: compute expressions (`expr`), kernel
programs and buffers (`program`), and workspace planning (`plan_memory`).

Import from here: `from onnxcc.kernel import KernelProgram, Var, rsum, select, plan`.
"""

from .expr import (
    BINARY_OPS, ERROR_MESSAGES, ERR_ASSERT, ERR_DIV_ZERO, ERR_INDEX, REDUCE_OPS, UNARY_OPS, Binary, Cast,
    Check, Const, Expr, Load, Reduce, Select, SymRef, Unary, Var, argmax, argmin, binary, broadcast_indices,
    buffers_read, cast, ceil, check, children, clamp, const, dim_to_expr, erf, exp, flatten_index, floor,
    format_expr, format_shared, free_vars, fresh_var, inline_load, lift, log, logical_not, maximum, minimum,
    power, reduce, relu, rem, rmax, rmin, rprod, rsum, select, sigmoid, sqrt, substitute, symbols_used,
    tanh, transform, truncdiv, unary, unflatten_index, walk, wrap_index,
)
from .plan_memory import MemoryPlan, align_up, plan
from .control import IfStmt, LoopStmt, SetSymbol, WriteAt
from .program import BUFFER_KINDS, Buffer, Compute, KernelProgram, Stmt

__all__ = [
    "IfStmt", "LoopStmt", "SetSymbol", "WriteAt",
    "BINARY_OPS", "BUFFER_KINDS", "ERROR_MESSAGES", "ERR_ASSERT", "ERR_DIV_ZERO", "ERR_INDEX", "REDUCE_OPS",
    "UNARY_OPS", "Binary", "Buffer", "Cast", "Check", "Compute", "Const", "Expr", "KernelProgram", "Load",
    "MemoryPlan", "Reduce", "Select", "Stmt", "SymRef", "Unary", "Var", "align_up", "argmax", "argmin",
    "binary", "broadcast_indices", "buffers_read", "cast", "ceil", "check", "children", "clamp", "const",
    "dim_to_expr", "erf", "exp", "flatten_index", "floor", "format_expr", "format_shared", "free_vars",
    "fresh_var", "inline_load", "lift", "log", "logical_not", "maximum", "minimum", "plan", "power",
    "reduce", "relu", "rem", "rmax", "rmin", "rprod", "rsum", "select", "sigmoid", "sqrt", "substitute",
    "symbols_used", "tanh", "transform", "truncdiv", "unary", "unflatten_index", "walk", "wrap_index",
]
