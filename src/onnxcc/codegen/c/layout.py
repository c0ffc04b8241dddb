"""The dispatcher's layout guards: strided inputs and outputs, in-place (aliased) outputs.

Strided inputs (non-compact strides, negative or zero ones, any byte_offset) are served by
compacting them into scratch before the chosen version runs (`onnxcc_compact_inputs`, in
runtime/onnxcc_layout.c, says why a copy rather than strided kernels); compact inputs are
read in place, so the compact call pays one flag test per input. Only a target whose
dispatcher reads host memory can copy, and an input whose data the dispatcher itself reads
(a value guard's, a data-bound symbol's) must stay compact.

Strided outputs (non-compact strides, negative ones, any byte_offset) are the mirror: the
version writes a compact scratch slot (`onnxcc_stage_outputs`) that the dispatcher scatters
into the caller's tensor after a successful run (`onnxcc_scatter_outputs`), so a failed
call leaves it untouched. Strides under which two elements share an address (a zero stride,
overlapping steps) are refused: two writes to one byte would race, and which one wins
would be the scatter's order, not the model's.

In-place calls: an output aliasing an input exactly (same bytes, same shape) is served by a
version whose program was proved to read each element of that input before writing the
same element of the output (`VersionSpec.in_place`, from `kernel.in_place_pairs`); every
other overlap is refused by `onnxcc_check_overlap`, naming both tensors.
"""

from __future__ import annotations

import sympy

from .abi import ArtifactSpec


def reads_host(devices: tuple[str, ...], shape_devices: tuple[str, ...] | None) -> bool:
    """Whether the dispatcher can read the tensors' bytes (CPU memory, the only kind)."""
    return "kDLCPU" in devices and shape_devices is None


def strided_ok(spec: ArtifactSpec, host: bool) -> list[bool]:
    """Per input: may it come strided (the dispatcher compacts it)?"""
    if not host:
        return [False] * len(spec.inputs)
    read = {i for i, _ in spec.data_dims.values()}
    read |= {g.input for v in spec.versions for g in v.value_guards}
    return [k not in read and t.dtype.bits >= 8 for k, t in enumerate(spec.inputs)]


def strided_outputs_ok(spec: ArtifactSpec, host: bool) -> list[bool]:
    """Per output: may it come strided (the version writes a compact scratch copy that the
    dispatcher scatters into it after a successful run)? Not an output with run-determined
    dims: its data is laid out in the allocated shape by rules of its own (NAME.h)."""
    if not host:
        return [False] * len(spec.outputs)
    run = set(spec.run_dims)
    return [t.dtype.bits >= 8 and not ({str(s) for d in t.shape for s in sympy.sympify(d).free_symbols} & run)
            for t in spec.outputs]


def staging(spec: ArtifactSpec, in_ok: list[bool], out_ok: list[bool]) -> tuple[list[str], str, list[str]]:
    """NAME_run's lines around the version call for strided tensors (in_ptrs, out_ptrs,
    in_sp, out_sp, rc in scope): (before it, what an early return must free first, after
    it). A compact call pays one flag test per tensor that may come strided."""
    before, after, free = [], [], ""
    if any(in_ok):  # strided inputs: copied compact first (runtime/onnxcc_layout.c says why)
        any_in = " | ".join(f"in_sp[{k}].strided" for k, ok in enumerate(in_ok) if ok)
        before += ["  void *compact_buf = NULL;",
                   "  _Alignas(64) unsigned char compact_small[ONNXCC_COMPACT_SMALL];",
                   f"  if (({any_in}) && (rc = onnxcc_compact_inputs(inputs, in_sp, {len(in_ok)}, in_ptrs, "
                   "compact_small, sizeof compact_small, &compact_buf)) != 0) return rc;"]
        free = "onnxcc_aligned_free(compact_buf); "
        after.append("  if (compact_buf != NULL) onnxcc_aligned_free(compact_buf);")
    if any(out_ok):  # strided outputs: written compact into scratch, scattered after a good run
        any_out = " | ".join(f"out_sp[{k}].strided" for k, ok in enumerate(out_ok) if ok)
        before += ["  void *staged_buf = NULL;",
                   "  _Alignas(64) unsigned char staged_small[ONNXCC_COMPACT_SMALL];",
                   f"  const int out_strided = {any_out};",
                   f"  if (out_strided && (rc = onnxcc_stage_outputs(out_sp, {len(out_ok)}, out_ptrs, staged_small, "
                   f"sizeof staged_small, &staged_buf)) != 0) {{ {free}return rc; }}"]
        free += "onnxcc_aligned_free(staged_buf); "
        after = [f"  if (rc == 0 && out_strided) onnxcc_scatter_outputs(outputs, out_sp, {len(out_ok)}, out_ptrs);",
                 "  if (staged_buf != NULL) onnxcc_aligned_free(staged_buf);", *after]
    return before, free, after


def has_in_place(spec: ArtifactSpec) -> bool:
    return any(v.in_place for v in spec.versions)


def in_place_table(spec: ArtifactSpec) -> str:
    """`in_place_ok[v][k * n_inputs + i]`: version v may write output k over input i."""
    nin, nout = max(1, len(spec.inputs)), max(1, len(spec.outputs))
    rows = []
    for k, v in enumerate(spec.versions):
        flags = [0] * (nin * nout)
        for o, i in v.in_place:
            flags[o * nin + i] = 1
        rows.append("  {" + ", ".join(map(str, flags)) + f"}},  /* version {k} */")
    return (f"/* per version: output k may alias input i exactly (proved safe in place) */\n"
            f"static const unsigned char in_place_ok[{len(spec.versions)}][{nin * nout}] = {{\n"
            + "\n".join(rows) + "\n};")


#: up to this many tensor pairs, NAME_run tests the byte ranges inline and calls the runtime
#: only when two meet (to refuse them, or to let a proved in-place alias through)
INLINE_PAIRS = 16


def aliasing_call(spec: ArtifactSpec) -> str:
    """NAME_run's overlap check (v, in_sp, out_sp in scope)."""
    table = "in_place_ok[v]" if has_in_place(spec) else "NULL"
    call = (f"(rc = onnxcc_check_overlap(in_sp, {len(spec.inputs)}, input_names, out_sp, "
            f"{len(spec.outputs)}, output_names, {table})) != 0")
    nin, nout = len(spec.inputs), len(spec.outputs)
    pairs = [(f"out_sp[{k}]", f"in_sp[{i}]") for k in range(nout) for i in range(nin)]
    pairs += [(f"out_sp[{k}]", f"out_sp[{j}]") for k in range(nout) for j in range(k)]
    if not pairs:
        return ""
    if len(pairs) > INLINE_PAIRS:
        return f"  if ({call}) return rc;"
    meet = " ||\n      ".join(f"({a}.lo < {b}.hi && {b}.lo < {a}.hi)" for a, b in pairs)
    return f"  /* do any two tensors share a byte? (empty ones span nothing) */\n  if (({meet}) && {call}) return rc;"


def header_doc(spec: ArtifactSpec, host: bool) -> list[str]:
    """NAME.h's paragraph on strides and in-place calls."""
    ok = strided_ok(spec, host)
    names = [t.name for t, o in zip(spec.inputs, ok, strict=True) if o]
    lines = [" *", " * strides and aliasing:"]
    if names:
        lines += [" *   inputs may have any strides (negative, zero, gaps; in elements) and byte_offset:",
                  " *   a strided input is copied compact into scratch first (one pass), then the version",
                  " *   chosen as for a compact call runs; compact inputs (strides NULL or compact) are",
                  " *   read in place. Served strided: " + _c(", ".join(names))]
    else:
        lines.append(" *   every input must be compact row-major (strides NULL or compact)")
    if len(names) < len(spec.inputs):
        rest = [t.name for t, o in zip(spec.inputs, ok, strict=True) if not o]
        lines.append(" *   must be compact: " + _c(", ".join(rest)) + (" (their data is read by the dispatcher, or "
                                                                   "they are sub-byte)" if names else ""))
    outs = [t.name for t, o in zip(spec.outputs, strided_outputs_ok(spec, host), strict=True) if o]
    if outs:
        lines += [" *   outputs may have any strides under which every element has bytes of its own",
                  " *   (negative, gaps, transposed; zero or overlapping ones are refused with ERR_SHAPE)",
                  " *   and byte_offset: the version writes a compact scratch copy, scattered into the",
                  " *   output after a successful run (a failed call leaves it untouched). Served strided: "
                  + _c(", ".join(outs))]
    if len(outs) < len(spec.outputs):
        rest = [t.name for t in spec.outputs if t.name not in outs]
        lines.append(" *   outputs that must be compact: " + _c(", ".join(rest)))
    pairs = _in_place_text(spec)
    if pairs:
        lines.append(" *   in place: an output may alias an input EXACTLY (same data pointer + byte_offset,")
        lines.append(" *   same shape, both compact) in these versions, proved safe:")
        lines += [f" *     {p}" for p in pairs]
    lines.append(" *   any other overlap of an output with an input or another output is refused (ERR_ARGS);")
    lines.append(" *   a strided tensor occupies the whole byte range its strides reach.")
    if host:  # benchmarks/alignment.py: a cache-resident elementwise call ran ~1.7x faster aligned
        lines.append(" *   alignment: any pointer is served; 64-byte aligned data runs small tensors faster.")
    return lines


def _c(s: str) -> str:
    return s.replace("*/", "* /")


def _in_place_text(spec: ArtifactSpec) -> list[str]:
    out = []
    for k, v in enumerate(spec.versions):
        for o, i in v.in_place:
            out.append(f'version {k}: "{_c(spec.outputs[o].name)}" over "{_c(spec.inputs[i].name)}"')
    return out


def metadata(spec: ArtifactSpec, host: bool) -> dict:
    """NAME.json's entries: which inputs may come strided, which versions run in place."""
    ok = strided_ok(spec, host)
    out_ok = strided_outputs_ok(spec, host)
    return {"strided_inputs": [t.name for t, o in zip(spec.inputs, ok, strict=True) if o],
            "strided_outputs": [t.name for t, o in zip(spec.outputs, out_ok, strict=True) if o],
            "in_place": [{"version": k, "output": spec.outputs[o].name, "input": spec.inputs[i].name}
                         for k, v in enumerate(spec.versions) for o, i in v.in_place]}
