"""NAME_dispatch.c: the generated C behind NAME_run, NAME_output_shape and the introspection
functions.

For every call the dispatcher validates the DLTensors, binds the model's symbols from the
input dims, checks ranges, repeated dims and constraints (each failure is an error code plus
a message naming the input, the dim, what was expected and what was got), picks the first
version whose guard holds, checks the outputs, allocates the workspace and calls the version.
The binding plan is decided in Python (binding.py), so the C is straight-line code with every
message spelled out."""

from __future__ import annotations

import sympy

from onnxcc.errors import CompileError
from onnxcc.ir.dims import canon

from . import capacity, layout
from . import strings as str_abi
from .abi import ArtifactSpec, TensorSig
from .binding import Binding, plan_bindings
from .cpu_check import cpu_check_fn, cpu_levels_fn, cpu_version_guard
from .ctext import Msg, c_comment, c_string, guard_text, shape_text, version_info_text
from .exprs import C_HELPERS, UnsupportedExpr, c_bool, c_int, c_int_checked_lets, text
from .managed import has_run_alloc, run_alloc_fn
from .package import signature_defs
from .target import ABI_VERSION, DISPATCH_STATICS, DL_DTYPE, ERROR_CODES, api_names, link_target


def identity_defs(spec: ArtifactSpec) -> str:
    n, up = spec.name, spec.name.upper()
    return f"""/* the artifact's identity (NAME.h: {up}_BUILD_ID, {up}_ABI_VERSION) */
const char *{n}_build_id(void) {{ return "{spec.build_id}"; }}

int {n}_abi_version(void) {{ return {ABI_VERSION}; }}
"""


class _Dispatch:
    """Generates NAME_dispatch.c for one spec."""

    def __init__(self, spec: ArtifactSpec):
        spec.validate()
        self.target = target = link_target(spec)
        if any(v.value_guards for v in spec.versions) and "kDLCPU" not in target.devices:
            raise CompileError(f"artifact {spec.name}: value versions compare the input's data in the "
                               f"dispatcher, which target {spec.target} cannot read (use --target cpu)")
        target.validate(spec)
        own = DISPATCH_STATICS | target.statics | set(api_names(spec.name, target, True, True))
        clash = sorted({v.symbol for v in spec.versions} & own)
        if clash or any(v.symbol.startswith("onnxcc_") for v in spec.versions):
            raise CompileError(f"artifact {spec.name}: kernel symbol(s) {clash or 'onnxcc_*'} clash with the "
                               "dispatcher's own names")
        self.spec = spec
        self.n = spec.name
        self.up = spec.name.upper()
        self.plan = plan_bindings(spec)
        self.bind = {b.symbol: b for b in self.plan.bindings}
        self.names = {s.name: f"s[{k}]" for k, s in enumerate(spec.symbols)}
        self.host = layout.reads_host(target.devices, target.shape_devices)
        self.strided = layout.strided_ok(spec, self.host)
        self.strided_out = layout.strided_outputs_ok(spec, self.host)

    def code(self, key: str) -> str:
        return f"{self.up}_{key}"

    def fail(self, msg: Msg, key: str, before: str = "") -> str:
        return msg.fail(self.code(key), before)

    def ci(self, e) -> str:
        return c_int(e, self.names)

    def sym_sources(self, msg: Msg, e) -> None:
        """' (k = 5 from input "a" dim 1; k2 = 6 from input "b" dim 0)' for the symbols of e:
        a failed constraint names where each of its symbols was bound."""
        index = self.spec.symbol_index()
        syms = sorted((s.name for s in sympy.sympify(e).free_symbols), key=lambda n: index[n])
        for k, name in enumerate(syms):
            msg.text("; " if k else " (").text(f"{name} = ").value(self.names[name])
            if name in self.bind:
                msg.text(f" from {self.bind[name].source}")
            elif name in self.spec.run_dims:
                msg.text(" (its upper bound; determined by the run)")
        if syms:
            msg.text(")")

    def sym_context(self, msg: Msg, e, only: bool = False) -> None:
        """' (seq = 7 bound by input "y" dim 0; ...)' for the symbols of e."""
        index = self.spec.symbol_index()
        syms = sorted((s.name for s in sympy.sympify(e).free_symbols), key=lambda n: index[n])
        if not syms:
            return
        msg.text(" (")
        for k, name in enumerate(syms):
            if k:
                msg.text("; ")
            msg.text(f"{name} = ").value(self.names[name])
            if not only and name in self.bind:
                msg.text(f" {self.bind[name].provenance}")
        msg.text(")")

    # -- pieces ------------------------------------------------------------------------
    def prelude(self) -> str:
        s = self.spec
        decls = self.target.declarations(s, self.names)
        infos = ",\n".join(f'  "{c_string(version_info_text(k, v))}"' for k, v in enumerate(s.versions))
        devices = ", ".join(self.target.devices)
        asserts = "\n".join(f'_Static_assert((int){self.up}_{k} == (int)ONNXCC_{k}, "return codes drifted");'
                            for k in ERROR_CODES)
        return f"""/* {self.n}_dispatch.c: generated by onnxcc. Do not edit. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "{self.n}.h"
#include "onnxcc_rt.h"
{str_abi.dispatcher_include(s)}{C_HELPERS}
#define SYM_CAP {max(1, len(s.symbols))}

/* the versions, one native function each */
{decls}

static const char *const version_infos[{len(s.versions)}] = {{
{infos}
}};

/* thread-local, so concurrent callers each see their own */
static __thread int last_version_tl = -1;
{self.run_statics()}{capacity.statics(s)}
/* device types this target's kernels can read */
static const int32_t devices[] = {{{devices}}};
#define NUM_DEVICES ((int)(sizeof devices / sizeof devices[0]))

{asserts}
"""

    def tensor_sigs(self) -> str:
        """One onnxcc_tensor_sig per input and output: what onnxcc_check_tensor checks."""
        def sig(kind: str, t: TensorSig, strided: str) -> str:
            code, bits = DL_DTYPE[t.dtype]
            return (f'  {{"{kind}", "{c_string(t.name)}", "{t.dtype.value}", "{c_string(shape_text(t.shape))}", '
                    f"{t.rank}, {code}, {bits}, {strided}}},")
        s = self.spec
        ins = [sig("input", t, "ONNXCC_STRIDED_READ" if ok else "0")
               for t, ok in zip(s.inputs, self.strided, strict=True)] or ["  {0},"]
        outs = [sig("output", t, "ONNXCC_STRIDED_WRITE" if ok else "0")
                for t, ok in zip(s.outputs, self.strided_out, strict=True)] or ["  {0},"]
        return "\n".join([f"static const onnxcc_tensor_sig in_sigs[{max(1, len(s.inputs))}] = {{", *ins, "};",
                          f"static const onnxcc_tensor_sig out_sigs[{max(1, len(s.outputs))}] = {{", *outs, "};"])

    def tensor_check_call(self, kind: str, arr: str, k: int, devs: str, n_devs: str, spans: str) -> str:
        sigs = "in_sigs" if kind == "input" else "out_sigs"
        return (f"  if ((rc = onnxcc_check_tensor(&{arr}[{k}], &{sigs}[{k}], {devs}, {n_devs}, &{spans}[{k}])) != 0) "
                "return rc;")

    def bind_fn(self) -> str:
        s = self.spec
        count = Msg(f"expected {len(s.inputs)} inputs ({', '.join(t.name for t in s.inputs)}), got ")
        out = [self.tensor_sigs(), "",
               "/* Validates the inputs (on one of devs[]), records their spans and binds s[] from their dims. */",
               "static int bind_inputs(const DLTensor *inputs, int n_inputs, int64_t *s, const int32_t *devs, "
               "int n_devs, onnxcc_span *in_sp) {",
               "  int rc = 0;", "  (void)s; (void)rc;",
               f"  if (n_inputs != {len(s.inputs)}) " + count.value("n_inputs").fail(self.code("ERR_ARGS")),
               "  if (inputs == NULL && n_inputs > 0) " + Msg("inputs is NULL").fail(self.code("ERR_ARGS"))]
        for k in range(len(s.inputs)):
            out.append(self.tensor_check_call("input", "inputs", k, "devs", "n_devs", "in_sp"))
        out.append("  /* bind each symbol where it first appears, then check its range at once */")
        for b in self.plan.bindings:
            out += self.binding(b)
        out += self.data_bindings()
        out.append("  /* every other input dim must agree with the bound symbols */")
        for i, j, d in self.plan.checks:
            out += self.dim_check(i, j, d)
        out += capacity.bind_lines(s, self.names)
        if s.run_dims:
            out.append("  /* run-determined dims: the upper bound (the kernel writes back the true value) */")
        for name, bound in s.run_dims.items():
            out.append(f"  {self.names[name]} = {self.ci(canon(bound))};")
        if s.constraints:
            out.append("  /* the model's own constraints */")
        for expr, origin in s.constraints:
            msg = Msg(f"constraint {text(expr)} does not hold")
            self.sym_sources(msg, expr)
            if origin:
                msg.text(f", needed by {origin}")
            try:
                cond = c_bool(expr, self.names)
            except UnsupportedExpr as e:
                needed = f" (needed by {origin})" if origin else ""
                raise CompileError(f"building lib{s.name}.so: constraint {text(expr)}{needed} "
                                   f"cannot be checked: {e}") from None
            out.append(f"  if (!{cond}) {msg.fail(self.code('ERR_CONSTRAINT'))}")
        out += ["  return 0;", "}"]
        return "\n".join(out)

    def data_bindings(self) -> list[str]:
        """Symbols read from an int64 input's data (value symbols), range-checked at once."""
        s = self.spec
        if not s.data_dims:
            return []
        if "kDLCPU" not in self.target.devices or self.target.shape_devices is not None:
            raise CompileError(f"artifact {s.name}: symbols read from input data need a target whose "
                               f"dispatcher reads host memory (--target cpu), not {s.target}")
        out = ["  /* symbols read from the data of size inputs, before any kernel runs */"]
        for name, (i, j) in s.data_dims.items():
            info = s.symbols[s.symbol_index()[name]]
            var = self.names[name]
            out.append(f"  {var} = ((const int64_t *)((const char *)inputs[{i}].data + "
                       f"inputs[{i}].byte_offset))[{j}];")
            msg = Msg(f'input "{s.inputs[i].name}" element {j}: {name} = ').value(var)
            msg.text(f", out of range [{info.lo}, {info.hi}] (sizes only; compile a version for this value "
                     f"with --specialize-value {s.inputs[i].name}=...)")
            out.append(f"  if ({var} < {info.lo} || {var} > {info.hi}) " + msg.fail(self.code("ERR_SHAPE")))
        return out

    def binding(self, b: Binding) -> list[str]:
        info = self.spec.symbols[b.index]
        dim = f"inputs[{b.input}].shape[{b.dim}]"
        var = self.names[b.symbol]
        lines = []
        if b.expr is None:
            lines.append(f"  {var} = {dim};")
            head = Msg(f"{b.where}: {b.symbol} = ").value(var)
        else:
            num = f"({dim} - {self.ci(b.offset)})" if b.offset != 0 else dim
            not_multiple = Msg(f"{b.where}: expected {text(b.expr)}")
            self.sym_context(not_multiple, b.offset)
            not_multiple.text(", got ").value(dim)
            not_multiple.text(f", which is not {text(b.expr)} for any integer {b.symbol}")
            lines += [f"  if (onnxcc_mod({num}, {b.coeff}) != 0) {not_multiple.fail(self.code('ERR_SHAPE'))}",
                      f"  {var} = {num} / {b.coeff};"]
            head = Msg(f"{b.where}: {text(b.expr)} = ").value(dim).text(f" gives {b.symbol} = ").value(var)
        range_msg = head.copy().text(f", out of range [{info.lo}, {info.hi}]")
        lines.append(f"  if ({var} < {info.lo} || {var} > {info.hi}) " + self.fail(range_msg, "ERR_SHAPE"))
        if info.multiple_of > 1:
            mult_msg = head.copy().text(f", not a multiple of {info.multiple_of}")
            lines.append(f"  if ({var} % {info.multiple_of} != 0) " + self.fail(mult_msg, "ERR_SHAPE"))
        return lines

    def dim_check(self, i: int, j: int, d) -> list[str]:
        t = self.spec.inputs[i]
        dim = f"inputs[{i}].shape[{j}]"
        msg = Msg(f'input "{t.name}" dim {j}: expected ')
        if isinstance(d, int):
            msg.text(str(d))
            return [f"  if ({dim} != {d}) " + msg.text(", got ").value(dim).fail(self.code("ERR_SHAPE"))]
        want = self.ci(d)
        if isinstance(d, sympy.Symbol):
            msg.text(f"{d.name} = ").value(want).text(f" ({self.bind[d.name].provenance})")
        else:
            msg.text(f"{text(d)} = ").value(want)
            self.sym_context(msg, d)
        return [f"  if ({dim} != {want}) " + msg.text(", got ").value(dim).fail(self.code("ERR_SHAPE"))]

    def output_dims_fn(self) -> str:
        out = ["/* The shape of output k under s[]; fails on a negative extent. */",
               "static int output_dims(const int64_t *s, int k, int64_t *dims) {",
               "  (void)s; (void)dims;", "  switch (k) {"]
        for k, t in enumerate(self.spec.outputs):
            out.append(f"  case {k}:")
            for j, d in enumerate(map(canon, t.shape)):
                out.append(f"    dims[{j}] = {self.ci(d)};")
                if not isinstance(d, (int, sympy.Symbol)):  # symbols are range-checked already
                    msg = Msg(f'output "{t.name}" dim {j}: {text(d)} = ').value(f"dims[{j}]")
                    msg.text(" is negative")
                    self.sym_context(msg, d, only=True)
                    out.append(f"    if (dims[{j}] < 0) {msg.fail(self.code('ERR_SHAPE'))}")
            out.append("    return 0;")
        out += ["  }", "  return 0;", "}"]
        return "\n".join(out)

    def run_fn(self) -> str:
        s, n = self.spec, self.n
        max_rank = max([1] + [t.rank for t in s.outputs])
        count = Msg(f"expected {len(s.outputs)} outputs ({', '.join(t.name for t in s.outputs)}), got ")
        # with loop capacities NAME_run wraps this as `run_once` (capacity.py: re-runs)
        head = "static int run_once" if capacity.has_capacity(s) else f"int {n}_run"
        lines = [f"{head}(const DLTensor *inputs, int n_inputs, DLTensor *outputs, int n_outputs) {{",
                 "  int64_t s[SYM_CAP];", "  int rc;",
                 f"  onnxcc_span in_sp[{max(1, len(s.inputs))}], out_sp[{max(1, len(s.outputs))}];",
                 "  onnxcc_error_clear();", *str_abi.run_begin(s), "  last_version_tl = -1;",
                 *(["  run_ok_tl = 0;"] if s.run_dims else []),
                 "  if ((rc = cpu_check()) != 0) return rc;",
                 "  if ((rc = bind_inputs(inputs, n_inputs, s, devices, NUM_DEVICES, in_sp)) != 0) return rc;",
                 "  int v = select_version(inputs, s);",
                 f"  if (v < 0) return {self.code('ERR_GUARD')};",
                 f"  if (n_outputs != {len(s.outputs)}) " + self.fail(count.value("n_outputs"), "ERR_ARGS"),
                 "  if (outputs == NULL && n_outputs > 0) " + self.fail(Msg("outputs is NULL"), "ERR_ARGS"),
                 f"  int64_t dims[{max_rank}];", "  (void)dims;"]
        for k, t in enumerate(s.outputs):
            lines.append(self.tensor_check_call("output", "outputs", k, "devices", "NUM_DEVICES", "out_sp"))
            lines.append(f"  if ((rc = output_dims(s, {k}, dims)) != 0) return rc;")
            for j, d in enumerate(map(canon, t.shape)):
                msg = Msg(f'output "{t.name}" dim {j}: expected ')
                msg.text(f"{text(d)} = " if not isinstance(d, int) else "").value(f"dims[{j}]")
                if not isinstance(d, sympy.Symbol):
                    self.sym_context(msg, d, only=True)
                msg.text(", got ").value(f"outputs[{k}].shape[{j}]")
                lines.append(f"  if (outputs[{k}].shape[{j}] != dims[{j}]) " + self.fail(msg, "ERR_SHAPE"))
        lines.append(layout.aliasing_call(s))
        nin, nout = max(1, len(s.inputs)), max(1, len(s.outputs))
        lines += [f"  void *in_ptrs[{nin}];", f"  void *out_ptrs[{nout}];",
                  "  (void)in_ptrs; (void)out_ptrs;"]
        for arr, ptrs, n_ in (("inputs", "in_ptrs", len(s.inputs)), ("outputs", "out_ptrs", len(s.outputs))):
            lines += [f"  {ptrs}[{k}] = (char *){arr}[{k}].data + {arr}[{k}].byte_offset;" for k in range(n_)]
        lines += self.target.run_prologue()
        # strided tensors: inputs copied compact first, outputs staged compact (layout.py)
        stage, free_first, unstage = layout.staging(s, self.strided, self.strided_out)
        lines += stage
        lines += ["  last_version_tl = v;", "  switch (v) {"]
        for k, v in enumerate(s.versions):
            # the workspace size is evaluated with checked arithmetic: an overflow is refused
            # (ERR_ALLOC, naming the size) instead of wrapping to a small arena
            ws_expr = canon(v.workspace_bytes)
            too_big = Msg(f"version {k}: workspace size {text(ws_expr)} bytes overflows int64")
            self.sym_context(too_big, ws_expr, only=True)
            lines.append(f"  case {k}: {{")
            # each repeated subexpression (a conv net's nested floors) once, as a local
            lets, ws_c = c_int_checked_lets(ws_expr, self.names, "ws_ovf", "ws_")
            lines += ["    int ws_ovf = 0;", *(f"    {x}" for x in lets),
                      f"    int64_t ws = {ws_c};",
                      f"    if (ws_ovf) {self.fail(too_big, 'ERR_ALLOC', free_first)}",
                      f"    {self.target.version_call(k, v, 'ws')} break;", "  }"]
        lines += [f"  default: rc = {self.code('ERR_GUARD')}; break;", "  }"]
        lines += unstage
        if s.run_dims:  # the kernel wrote the run-determined symbols' true values into s[]
            lines += ["  if (rc == 0) {", "    for (int k = 0; k < SYM_CAP; ++k) run_syms_tl[k] = s[k];",
                      "    run_ok_tl = 1;", "  }"]
        lines += [*str_abi.run_end(s), "  return rc;", "}"]
        return "\n".join(lines)

    def aliasing_fn(self) -> str:
        """The names the overlap check's messages use and, where some version runs in place,
        its table (layout.py): every other overlap is refused with ERR_ARGS naming both."""
        def names(ts: list[TensorSig]) -> str:
            return ", ".join(f'"{c_string(t.name)}"' for t in ts) or "NULL"

        s = self.spec
        table = [layout.in_place_table(s)] if layout.has_in_place(s) else []
        return "\n".join([
            f"static const char *const input_names[{max(1, len(s.inputs))}] = {{{names(s.inputs)}}};",
            f"static const char *const output_names[{max(1, len(s.outputs))}] = {{{names(s.outputs)}}};",
            *table])

    def select_version(self) -> str:
        """select_version(inputs, s): the first version whose guard holds (its value guards
        too), with the symbols it fixes set in s[]; -1 with the error set when none does."""
        lines = ["/* The version this call runs: the first whose guard holds; sets the symbols it fixes. */",
                 "static int select_version(const DLTensor *inputs, int64_t *s) {",
                 "  (void)inputs; (void)s;", "  int v = -1;"]
        for k, v in enumerate(self.spec.versions):
            cond = c_bool(v.guard, self.names)
            if v.value_guards:
                cond = f"value_guard_holds({k}, inputs)" if cond == "1" else f"{cond} && value_guard_holds({k}, inputs)"
            cond = cpu_version_guard(self.spec, v, cond)
            if cond == "1":  # the generic version: nothing after it can be reached
                lines.append(f"  {'' if k == 0 else 'else '}v = {k};")
                break
            lines.append(f"  {'if' if k == 0 else 'else if'} ({cond}) v = {k};")
        else:
            lines.append(f"  if (v < 0) {self.guard_failure()}")
        lines += self.set_version_dims()
        lines += ["  return v;", "}"]
        return "\n".join(lines)

    def guard_failure(self) -> str:
        """Sets the error of a call no version accepts (NAME_run returns ERR_GUARD)."""
        msg = Msg("no version accepts this call")
        shown = [x for x in self.spec.symbols if x.name not in self.spec.version_dims]
        for k, sinfo in enumerate(shown):
            msg.text(("; " if k else " (") + f"{sinfo.name} = ").value(self.names[sinfo.name])
        needs = (f"version {k} needs {guard_text(v)}" for k, v in enumerate(self.spec.versions))
        msg.text(("): " if shown else ": ") + "; ".join(needs))
        valued = {}
        for v in self.spec.versions:
            for g in v.value_guards:
                valued.setdefault(g.name, []).append(g.text)
        for name, texts in valued.items():
            msg.text(f'; input "{name}" has another value than the ones compiled ({" | ".join(texts)}): '
                     f"compile a version for it with --specialize-value {name}=...")
        return msg.fail("-1")

    def set_version_dims(self) -> list[str]:
        vd = self.spec.version_dims
        if not vd:
            return []
        lines = ["  switch (v) {"]
        for k in range(len(self.spec.versions)):
            sets = [f"{self.names[name]} = {self.ci(canon(per[k]))};" for name, per in vd.items()
                    if per[k] is not None]
            if sets:
                lines.append(f"  case {k}: " + " ".join(sets) + " break;")
        lines += ["  default: break;", "  }"]
        return lines

    def value_guards_fn(self) -> str:
        """value_guard_holds(k, inputs): the inputs hold the values version k was compiled for
        (element count, then the bytes; the dtype and compactness bind_inputs checked)."""
        out = ["/* 1 when the inputs hold the values version k was compiled for. */",
               "static int value_guard_holds(int k, const DLTensor *inputs) {", "  (void)inputs;",
               "  switch (k) {"]
        tables = []
        for k, v in enumerate(self.spec.versions):
            if not v.value_guards:
                continue
            out.append(f"  case {k}:")
            for j, g in enumerate(v.value_guards):
                t = self.spec.inputs[g.input]
                arr = f"value_{k}_{j}"
                body = ", ".join(str(b) for b in g.data) or "0"
                tables.append(f"static const unsigned char {arr}[{max(1, len(g.data))}] = {{{body}}};"
                              f"  /* {c_comment(t.name)} == {c_comment(g.text)} */")
                numel = " * ".join(f"inputs[{g.input}].shape[{d}]" for d in range(t.rank)) or "1"
                out.append(f"    if (({numel}) != {g.numel}) return 0;")
                if g.data:
                    out.append(f"    if (memcmp((const char *)inputs[{g.input}].data + inputs[{g.input}].byte_offset, "
                               f"{arr}, {len(g.data)}) != 0) return 0;")
            out.append("    return 1;")
        out += ["  default: return 1;", "  }", "}"]
        return "\n".join(tables + out)

    def run_statics(self) -> str:
        if not self.spec.run_dims:
            return ""
        return ("/* this thread's last successful run: its symbols, run-determined ones as the run set them */\n"
                "static __thread int64_t run_syms_tl[SYM_CAP];\nstatic __thread int run_ok_tl = 0;\n")

    def output_dims_api(self) -> str:
        if not self.spec.run_dims:
            return ""
        n, nout = self.n, len(self.spec.outputs)
        return f"""
int {n}_output_dims(int output, int64_t *shape) {{
  if (!run_ok_tl) {{
    onnxcc_error_set("{n}_output_dims: no successful {n}_run on this thread");
    return {self.code("ERR_ARGS")};
  }}
  if (output < 0 || output >= {nout} || shape == NULL) {{
    onnxcc_error_set("{n}_output_dims: output index %d out of range [0, {nout}) or shape is NULL", output);
    return {self.code("ERR_ARGS")};
  }}
  return output_dims(run_syms_tl, output, shape);
}}
"""

    def api_fns(self) -> str:
        n, nout = self.n, len(self.spec.outputs)
        # only shapes and dtypes are read: a device target may take host descriptions too
        devs, shape_devs = "devices, NUM_DEVICES", ""
        if self.target.shape_devices is not None:
            devs = "shape_devices, NUM_SHAPE_DEVICES"
            listed = ", ".join(self.target.shape_devices)
            shape_devs = (f"static const int32_t shape_devices[] = {{{listed}}};\n"
                          "#define NUM_SHAPE_DEVICES ((int)(sizeof shape_devices / sizeof shape_devices[0]))\n\n")
        stream = self.target.api_defs(n)
        head = f"int {n}_output_shape(const DLTensor *inputs, int n_inputs, int output, int64_t *shape) {{"
        # a value version fixes some output dims: the shape is the chosen version's
        select = (f"\n  if (select_version(inputs, s) < 0) return {self.code('ERR_GUARD')};"
                  if self.spec.version_dims else "")
        return shape_devs + head + f"""
  int64_t s[SYM_CAP];
  onnxcc_span in_sp[{max(1, len(self.spec.inputs))}];
  int rc;
  onnxcc_error_clear();
  if ((rc = bind_inputs(inputs, n_inputs, s, {devs}, in_sp)) != 0) return rc;{select}
  if (output < 0 || output >= {nout}) {{
    onnxcc_error_set("output index %d out of range [0, {nout})", output);
    return {self.code("ERR_ARGS")};
  }}
  if (shape == NULL) {{
    onnxcc_error_set("shape is NULL");
    return {self.code("ERR_ARGS")};
  }}
  return output_dims(s, output, shape);
}}

const char *{n}_last_error(void) {{ return onnxcc_error_get(); }}

int {n}_num_versions(void) {{ return {len(self.spec.versions)}; }}

const char *{n}_version_info(int version) {{
  return version >= 0 && version < {len(self.spec.versions)} ? version_infos[version] : NULL;
}}

int {n}_last_version(void) {{ return last_version_tl; }}
{stream}{self.output_dims_api()}"""

    def capacity_fns(self) -> list[str]:
        """NAME_run around run_once where a loop capacity may grow (capacity.py)."""
        if not capacity.has_capacity(self.spec):
            return []
        if not has_run_alloc(self.spec, self.target.devices, self.target.shape_devices):
            raise CompileError(f"artifact {self.n}: a loop state sized by a growing capacity needs a target "
                               f"whose library allocates outputs (--target cpu), not {self.spec.target}")
        return [capacity.run_wrapper(self.spec, self.code)]

    def source(self) -> str:
        parts = [self.prelude(), cpu_check_fn(self.spec), cpu_levels_fn(self.spec), self.bind_fn(),
                 self.value_guards_fn(), self.select_version(), self.output_dims_fn(), self.aliasing_fn(),
                 self.run_fn(), *self.capacity_fns(), self.api_fns(), identity_defs(self.spec),
                 signature_defs(self.spec, DL_DTYPE)]
        if has_run_alloc(self.spec, self.target.devices, self.target.shape_devices):
            parts.append(run_alloc_fn(self.spec, DL_DTYPE, self.code))
        if str_abi.string_outputs(self.spec):
            parts.append(str_abi.api_defs(self.spec))
        return "\n\n".join(p.rstrip("\n") for p in parts) + "\n"


def generate_dispatcher(spec: ArtifactSpec) -> str:
    """The C source of NAME_run, NAME_output_shape and the introspection functions."""
    return _Dispatch(spec).source()
