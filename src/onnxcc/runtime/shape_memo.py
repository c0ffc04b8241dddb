"""Which artifacts may remember their output shapes per input-shape signature.

run() asks NAME_output_shape for every output with a symbolic dim, once per output per call
(about a microsecond each through ctypes). Where every output dim is a function of the input
shapes alone, the answer for one tuple of input shapes is the answer for every call with those
shapes, so run() keeps it (a small dict per model, keyed by the shapes tuple). NAME_run still
checks every guard and constraint on each call: the memo only skips the question, never a check.

Not memoised: an output dim that uses a symbol bound by anything but a plain input dim (an
input's value: data_dims; the version picked: version_dims; the run: run_dims / late_dims;
a loop's capacity), artifacts with value versions (the version, hence a shape, may follow the
data), and outputs sized by the run.
"""

from __future__ import annotations

import re

#: entries per model before the memo is emptied and refilled (a bound, not a working-set guess:
#: a serving loop sees a handful of shape signatures; a sweep over thousands would only churn)
MAX_ENTRIES = 256

_IDENT = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")


def shapes_follow_input_shapes(meta: dict) -> bool:
    """True where every output shape is fixed by the input shapes alone (see the docstring)."""
    if any(t.get("run_determined") for t in meta["outputs"]):
        return False
    if any(v.get("value_guards") for v in meta.get("versions", ())):
        return False
    bound_elsewhere = (set(meta.get("run_dims") or ()) | set(meta.get("late_dims") or ())
                       | set(meta.get("data_dims") or ()) | set(meta.get("version_dims") or ())
                       | set(((meta.get("loop_capacity") or {}).get("symbols")) or ()))
    if meta.get("loop_capacity"):
        return False
    symbols = {s["name"] for s in meta.get("symbols", ())}
    plain_input_dims = {str(d) for t in meta["inputs"] for d in t["shape"]}
    for t in meta["outputs"]:
        for d in t["shape"]:
            for name in _IDENT.findall(str(d)):
                if name not in symbols:
                    continue  # a function of the printed expression (floor, Max, ...)
                if name in bound_elsewhere or name not in plain_input_dims:
                    return False
    return True
