"""Loop capacities in the dispatcher: a loop-carried dim nothing bounds at compile time (a
while loop on data that appends to its state, ops/loop_capacity.py) has its buffers sized by a
capacity symbol that the dispatcher sets before the run, `initial << shift`.

The kernel checks every new extent against the capacity before writing the state and fails
with ERR_CAPACITY (kernel code 5) when it would pass it. On that code:
- `NAME_run_alloc` frees the outputs it allocated, doubles the capacity (shift + 1), sizes
  the outputs and the per-call workspace (heap, `onnxcc_call_version`) again and re-runs,
  until the run fits or the capacity would pass the limit: then the error names the loop
  node, the value and the capacity reached;
- `NAME_run` re-runs the same way when no output's size depends on a capacity; when one
  does, the caller allocated it for the first capacity (`NAME_output_shape`) and it cannot
  grow: the error says that the output size is known only after the run, use NAME_run_alloc.
The shift is per thread and back to 0 after every call, so `NAME_output_shape` answers for
the initial capacity.
"""

from __future__ import annotations

import sympy

from .abi import ArtifactSpec
from .ctext import c_comment, c_string

#: the kernel's code for a capacity passed (kernel/expr.py ERR_CAPACITY)
KERNEL_CODE = 5


def has_capacity(spec: ArtifactSpec) -> bool:
    return bool(spec.cap_dims)


def output_grows(spec: ArtifactSpec) -> bool:
    """Whether some output's allocation is sized by a capacity (its run-determined dims'
    bounds read one): the caller of NAME_run cannot allocate it for a larger one."""
    caps = set(spec.cap_dims)

    def names(e) -> set[str]:
        return {str(x) for x in sympy.sympify(e).free_symbols}

    for t in spec.outputs:
        for d in t.shape:
            for x in names(d):
                if x in caps or (x in spec.run_dims and names(spec.run_dims[x]) & caps):
                    return True
    return False


def _max_shift(spec: ArtifactSpec) -> int:
    """The doublings allowed: the largest k with initial << k <= limit."""
    k = 0
    while (spec.cap_initial << (k + 1)) <= spec.cap_limit:
        k += 1
    return k


def statics(spec: ArtifactSpec) -> str:
    if not has_capacity(spec):
        return ""
    which = "; ".join(f'node \\"{c_string(info["node"])}\\" {c_string(info["what"])}'
                      for info in spec.cap_dims.values())
    return f"""
/* loop capacities (codegen/c/capacity.py): initial << cap_shift_tl rows beyond the initial
 * extent, doubled on a kernel's ERR_CAPACITY up to the limit */
#define CAP_INITIAL ((int64_t){spec.cap_initial})
#define CAP_MAX_SHIFT {_max_shift(spec)}
static __thread int cap_shift_tl = 0;
static const char cap_loops[] = "{which}";

/* 1 when the run failed because a loop state outgrew its capacity */
static int capacity_exceeded(int rc) {{
  return rc == ONNXCC_ERR_KERNEL && onnxcc_last_kernel_code() == {KERNEL_CODE};
}}

/* the next capacity, or the limit's error (rc kept) when it is reached */
static int capacity_grow(int rc) {{
  if (cap_shift_tl >= CAP_MAX_SHIFT) {{
    onnxcc_error_set("%s: the run needs more than the capacity limit of this build, %lld rows (beyond a "
                     "carried value's initial extent), compile with a larger --loop-capacity INITIAL:LIMIT",
                     cap_loops, (long long)(CAP_INITIAL << cap_shift_tl));
    cap_shift_tl = 0;
    return rc;
  }}
  ++cap_shift_tl;
  return 0;
}}
"""


def bind_lines(spec: ArtifactSpec, names: dict[str, str]) -> list[str]:
    """In bind_inputs, before the run-determined bounds (which read them): the capacities."""
    if not has_capacity(spec):
        return []
    return ["  /* loop capacities: set per call, doubled on ERR_CAPACITY (capacity.py) */",
            *(f"  {names[name]} = CAP_INITIAL << cap_shift_tl;" for name in spec.cap_dims)]


def run_wrapper(spec: ArtifactSpec, code) -> str:
    """NAME_run around `run_once` (the plain dispatcher): re-runs with a doubled capacity
    where the caller's outputs do not depend on it, else names NAME_run_alloc."""
    n = spec.name
    if output_grows(spec):
        retry = f"""  if (capacity_exceeded(rc))
    onnxcc_error_set("{n}_run: %s: the run needs more than the capacity of %lld rows its outputs were "
                     "allocated for: output size known only after the run: use {n}_run_alloc", cap_loops,
                     (long long)CAP_INITIAL);
  return rc;"""
    else:
        retry = """  while (capacity_exceeded(rc)) {
    if (capacity_grow(rc) != 0) return rc;
    rc = run_once(inputs, n_inputs, outputs, n_outputs);
  }
  cap_shift_tl = 0;
  return rc;"""
    return f"""
/* NAME.h: {n}_run; a loop state that outgrows its capacity: see codegen/c/capacity.py */
int {n}_run(const DLTensor *inputs, int n_inputs, DLTensor *outputs, int n_outputs) {{
  cap_shift_tl = 0;
  int rc = run_once(inputs, n_inputs, outputs, n_outputs);
{retry}
}}"""


def header_doc(spec: ArtifactSpec) -> list[str]:
    """NAME.h: what the capacities are and what NAME_run / NAME_run_alloc do about them."""
    if not has_capacity(spec):
        return []
    n, up = spec.name, spec.name.upper()
    lines = [" *", " * loop capacities (a while loop whose grown state nothing bounds): the buffers of",
             *(f' *   {name}: node "{c_comment(info["node"])}" {c_comment(info["what"])}'
               for name, info in spec.cap_dims.items()),
             f" * start at {spec.cap_initial} rows (beyond a carried value's initial extent; the symbols above",
             f" * hold it, as {n}_output_shape reports) and are doubled while a run needs more, up to",
             f" * {spec.cap_limit} rows: {n}_run_alloc re-runs with the larger capacity (allocating the outputs",
             f" * again, the earlier ones freed); past the limit it fails with {up}_ERR_KERNEL naming the loop."]
    if output_grows(spec):
        lines += [f" * {n}_run cannot grow outputs the caller allocated: a run that needs more than they",
                  f' * hold fails with {up}_ERR_KERNEL ("output size known only after the run: use',
                  f' * {n}_run_alloc"), never writing past their end.']
    else:
        lines.append(f" * {n}_run re-runs the same way (only its workspace grows).")
    return lines


def metadata(spec: ArtifactSpec) -> dict:
    """NAME.json: the capacities, where they come from, the initial size and the limit."""
    if not has_capacity(spec):
        return {}
    return {"loop_capacity": {"initial": spec.cap_initial, "limit": spec.cap_limit,
                              "symbols": {k: dict(v) for k, v in spec.cap_dims.items()},
                              "run_grows_outputs": output_grows(spec)}}


__all__ = ["KERNEL_CODE", "bind_lines", "has_capacity", "header_doc", "metadata", "output_grows", "run_wrapper",
           "statics"]
