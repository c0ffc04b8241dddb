"""Library-allocated outputs: `NAME_run_alloc`, for artifacts whose output sizes are known
only after the run (run-determined dims: a NonZero count, a Loop's trip count).

The caller-allocated `NAME_run` stays the default; `NAME_run_alloc` is generated beside it
where some output has a run-determined dim. It allocates every output for its bound (what
`NAME_output_shape` reports), runs `NAME_run` on them, then hands each back as a DLPack
`DLManagedTensor` whose shape is the TRUE one (`NAME_output_dims`): for outputs whose dims
are bound mid-run the data is compact at the start of the block; for the others (valid in
the leading corner of the bound) the tensor gets the bound's row-major strides. No copy
either way. The caller owns each tensor and frees it with its deleter.
"""

from __future__ import annotations

import sympy

from .abi import ArtifactSpec


def has_run_alloc(spec: ArtifactSpec, devices, shape_devices) -> bool:
    """Only CPU artifacts with a run-determined output dim get NAME_run_alloc."""
    return bool(spec.run_dims) and "kDLCPU" in devices and shape_devices is None


def _run_determined(spec: ArtifactSpec, k: int) -> tuple[bool, bool]:
    """(output k has a run-determined dim, all of them are bound mid-run)."""
    names = {s.name for d in spec.outputs[k].shape for s in sympy.sympify(d).free_symbols}
    run = names & set(spec.run_dims)
    return bool(run), run <= set(spec.late_dims)


def run_alloc_decl(spec: ArtifactSpec) -> str:
    n, up = spec.name, spec.name.upper()
    return f"""
/* Runs the model like {n}_run, but the library allocates the outputs (each with the size
 * known only after the run, see above) and hands them back as DLPack managed tensors:
 * outputs[k] receives a DLManagedTensor whose dl_tensor has the TRUE shape of output k
 * (compact, or strided inside an allocation made for the bound). Ownership: the caller
 * owns every outputs[k] after a successful call and must call
 * outputs[k]->deleter(outputs[k]) exactly once; its data stays valid until then. On
 * failure nothing is allocated: every outputs[k] is NULL and the code is returned as
 * {n}_run's. */
{up}_API int {n}_run_alloc(const DLTensor *inputs, int n_inputs, DLManagedTensor **outputs, int n_outputs);
"""


def run_alloc_fn(spec: ArtifactSpec, dl_dtype: dict, code) -> str:
    """The definition of NAME_run_alloc; `code(name)` spells a return code. Where a loop's
    capacity may grow (codegen/c/capacity.py) the allocation and the run repeat with the
    capacity doubled until the run fits, each failed attempt's outputs freed first."""
    n, nout = spec.name, len(spec.outputs)
    grows = bool(spec.cap_dims)
    runner = "run_once" if grows else f"{n}_run"
    retry = f"""    if (capacity_exceeded(rc)) {{
      for (k = 0; k < {nout}; ++k) {{ if (held[k] != NULL) held[k]->deleter(held[k]); held[k] = NULL; }}
      if ((rc = capacity_grow(rc)) == 0) continue;
    }}
""" if grows else ""
    max_rank = max([1] + [t.rank for t in spec.outputs])
    ranks = ", ".join(str(t.rank) for t in spec.outputs)
    codes = ", ".join(str(dl_dtype[t.dtype][0]) for t in spec.outputs)
    bits = ", ".join(str(dl_dtype[t.dtype][1]) for t in spec.outputs)
    finish = []
    for k in range(nout):
        run, late = _run_determined(spec, k)
        if not run:
            continue
        finish.append(f"  {{ /* output {k}: its true shape" + ("" if late else ", strided in the bound") + " */")
        finish.append(f"    int64_t *sh = held[{k}]->dl_tensor.shape;")
        if not late:  # the valid corner of a row-major block of the bound's shape
            finish += [f"    int64_t *st = sh + {spec.outputs[k].rank}, acc = 1;",
                       f"    for (int j = {spec.outputs[k].rank} - 1; j >= 0; --j) {{ st[j] = acc; acc *= sh[j]; }}",
                       f"    held[{k}]->dl_tensor.strides = st;"]
        finish += [f"    if ((rc = {n}_output_dims({k}, sh)) != 0) goto fail;", "  }"]
    return f"""
/* NAME.h: library-allocated outputs (codegen/c/managed.py) */
int {n}_run_alloc(const DLTensor *inputs, int n_inputs, DLManagedTensor **outputs, int n_outputs) {{
  static const int32_t ranks[{nout}] = {{{ranks}}};
  static const uint8_t codes[{nout}] = {{{codes}}};
  static const uint8_t bits[{nout}] = {{{bits}}};
  DLTensor outs[{nout}];
  DLManagedTensor *held[{nout}];
  int64_t dims[{max_rank}];
  int rc = 0, k;
  if (n_outputs != {nout} || outputs == NULL) {{
    onnxcc_error_set("{n}_run_alloc: expected {nout} outputs and a non-NULL outputs array, got %d", n_outputs);
    return {code("ERR_ARGS")};
  }}
  for (k = 0; k < {nout}; ++k) {{ outputs[k] = NULL; held[k] = NULL; }}
{"  cap_shift_tl = 0;" if grows else ""}
  for (;;) {{
    for (k = 0; k < {nout}; ++k) {{
      size_t bytes = 0;
      if ((rc = {n}_output_shape(inputs, n_inputs, k, dims)) != 0) goto fail;
      if (onnxcc_tensor_bytes(ranks[k], dims, bits[k], &bytes) != 0 ||
          (held[k] = onnxcc_managed_new(ranks[k], dims, codes[k], bits[k], bytes)) == NULL) {{
        onnxcc_error_set("{n}_run_alloc: output %d cannot be allocated", k);
        rc = {code("ERR_ALLOC")};
        goto fail;
      }}
      outs[k] = held[k]->dl_tensor;
    }}
    if ((rc = {runner}(inputs, n_inputs, outs, {nout})) == 0) break;
{retry}    goto fail;
  }}
{"  cap_shift_tl = 0;" if grows else ""}
{chr(10).join(finish)}
  for (k = 0; k < {nout}; ++k) outputs[k] = held[k];
  return 0;
fail:
{"  cap_shift_tl = 0;" if grows else ""}
  for (k = 0; k < {nout}; ++k) {{
    if (held[k] != NULL) held[k]->deleter(held[k]);
  }}
  return rc;
}}
"""
