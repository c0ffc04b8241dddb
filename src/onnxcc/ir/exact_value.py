"""The exact value of a dim expression at given symbol values: Python ints, and Fractions only
below a division (Fraction arithmetic normalises by a gcd at every step), without sympy's
dispatch. The memory planner evaluates thousands of sizes at its sample points this way; the
floor-equality decision (periodic.py) and the quick floor / ceiling (rounding.py) evaluate
candidate expressions at points."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any

import sympy


class NoValue(Exception):
    """the expression holds a symbol the values do not give, or a form this does not evaluate"""


def exact_value(e: Any, env: dict[str, int], memo: dict) -> Fraction | int:
    """`e` (a sympy expression over Integer / Rational / Symbol / Add / Mul / integer Pow /
    floor / ceiling / Max / Min / Mod) at `env` (symbol name -> value). `memo` caches
    subexpressions: keep one per `env`. Raises NoValue, or ZeroDivisionError for a division
    by zero at these values."""
    v = memo.get(e)
    if v is not None:
        return v
    if e.is_Integer:
        v = int(e)
    elif e.is_Rational:
        v = Fraction(int(e.p), int(e.q))
    elif e.is_Symbol:
        if e.name not in env:
            raise NoValue
        v = env[e.name]
    elif e.is_Add:
        v = sum(exact_value(a, env, memo) for a in e.args)
    elif e.is_Mul:
        v = 1
        for a in e.args:
            v *= exact_value(a, env, memo)
    elif e.is_Pow and e.exp.is_Integer:
        k = int(e.exp)
        base = exact_value(e.base, env, memo)
        v = base ** k if k >= 0 else Fraction(base) ** k
    elif isinstance(e, sympy.floor):
        v = math.floor(exact_value(e.args[0], env, memo))
    elif isinstance(e, sympy.ceiling):
        v = math.ceil(exact_value(e.args[0], env, memo))
    elif isinstance(e, (sympy.Max, sympy.Min)):
        vals = [exact_value(a, env, memo) for a in e.args]
        v = max(vals) if isinstance(e, sympy.Max) else min(vals)
    elif isinstance(e, sympy.Mod):
        a, m = exact_value(e.args[0], env, memo), exact_value(e.args[1], env, memo)
        v = a - m * math.floor(Fraction(a) / m)
    else:
        raise NoValue
    memo[e] = v
    return v
