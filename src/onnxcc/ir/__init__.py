"""The graph IR. Import everything IR from here: `from onnxcc.ir import Op, Module, ...`."""

from .core import Block, BlockArg, Constraint, Function, Module, Op, OpResult, Region, Use, Value, WeightRef
from .dims import (
    INT_MAX,
    Dim,
    Divisible,
    Prover,
    SymbolInfo,
    SymbolTable,
    canon,
    evaluate,
    free_symbols,
    identical,
    identifier,
    is_static,
    sym,
)
from .implied import implied_table, prove_le_implied
from .parser import parse_dim, parse_module
from .printer import print_bool, print_dim, print_expr
from .types import DType, TensorType, pack_bits, storage_bytes, storage_np, to_bits

__all__ = [
    "INT_MAX",
    "Block",
    "BlockArg",
    "Constraint",
    "DType",
    "Dim",
    "Divisible",
    "Function",
    "Module",
    "Op",
    "OpResult",
    "Prover",
    "Region",
    "SymbolInfo",
    "SymbolTable",
    "TensorType",
    "Use",
    "Value",
    "WeightRef",
    "canon",
    "evaluate",
    "free_symbols",
    "identical",
    "identifier",
    "implied_table",
    "is_static",
    "pack_bits",
    "parse_dim",
    "parse_module",
    "print_bool",
    "print_dim",
    "print_expr",
    "prove_le_implied",
    "storage_bytes",
    "storage_np",
    "sym",
    "to_bits",
]
