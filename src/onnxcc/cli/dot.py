"""`onnxcc ir --format dot`: the graph IR as Graphviz text.

One cluster per function (a version: its guard in the label), one node per op (the op, its
ONNX node name and its small attributes), the parameters and results as ellipses, and one
edge per use labelled with the value's type (`f32[batch, 64]`). Constants are nodes with
their type; their values are elided beyond a few elements (`dense<...>` of a weight would make
the file as big as the model). Ops with regions (If, Loop, Scan) hold their bodies as nested
clusters."""

from __future__ import annotations

import numpy as np

from ..ir import Module
from ..ir.core import Block, Op, Value
from ..ir.printer import print_attr, print_bool, print_type

#: constants with at most this many elements show their values
SMALL_CONST = 8
#: attribute texts longer than this are elided
MAX_ATTR = 40


def _q(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _attr_text(k: str, v) -> str:
    if isinstance(v, np.ndarray):
        if v.size > SMALL_CONST:
            return f"{k} = <{v.size} values>"
        return f"{k} = {np.array2string(v.reshape(-1), precision=4, separator=', ')}"
    try:
        s = print_attr(v)
    except Exception:  # an attribute the printer cannot show: its type is enough here
        s = f"<{type(v).__name__}>"
    if len(s) > MAX_ATTR:
        s = s[:MAX_ATTR] + "..."
    return f"{k} = {s}"


class _Dot:
    def __init__(self):
        self.lines: list[str] = []
        self.ids: dict[int, str] = {}
        self.n = 0

    def node(self, key, label: str, indent: str, **style: str) -> str:
        name = f"n{self.n}"
        self.n += 1
        self.ids[id(key)] = name
        extra = "".join(f", {k}={_q(v)}" for k, v in style.items())
        self.lines.append(f"{indent}{name} [label={_q(label)}{extra}];")
        return name

    def source(self, v: Value) -> str | None:
        owner = getattr(v, "op", None)
        return self.ids.get(id(owner if owner is not None else v))

    def edge(self, v: Value, dst: str, indent: str) -> None:
        src = self.source(v)
        if src is not None:
            label = print_type(v.type)
            self.lines.append(f"{indent}{src} -> {dst} [label={_q(label)}];")

    def op_label(self, op: Op) -> str:
        if op.name == "cc.const":
            value = op.attrs.get("value")
            what = (f"@{value.name}" if hasattr(value, "name") and not isinstance(value, np.ndarray)
                    else _attr_text("value", value).removeprefix("value = "))
            named = f"{op.loc} " if op.loc and op.loc != what.lstrip("@") else ""
            return f"const {named}{what}\n{print_type(op.results[0].type)}"
        head = op.opname if op.dialect == "onnx" else op.name
        lines = [head + (f"  ({op.loc})" if op.loc else "")]
        lines += [_attr_text(k, v) for k, v in sorted(op.attrs.items())]
        return "\n".join(lines)

    def block(self, b: Block, indent: str, outputs: list[str] | None = None) -> None:
        for a in b.args:
            self.node(a, f"{a.name or f'arg{a.index}'}\n{print_type(a.type)}", indent, shape="ellipse")
        for op in b.ops:
            if op.name in ("return", "yield"):
                for k, v in enumerate(op.operands):
                    label = outputs[k] if outputs and k < len(outputs) else f"{op.name} #{k}"
                    dst = self.node(("out", id(op), k), f"{label}\n{print_type(v.type)}", indent, shape="ellipse",
                                    style="bold")
                    self.ids.pop(id(("out", id(op), k)), None)
                    self.edge(v, dst, indent)
                continue
            shape = {"shape": "note", "style": "dashed"} if op.name == "cc.const" else {}
            name = self.node(op, self.op_label(op), indent, **shape)
            for v in op.operands:
                self.edge(v, name, indent)
            for r, region in enumerate(op.regions):
                for blk in region.blocks:
                    self.lines.append(f"{indent}subgraph cluster_{name}_{r} {{")
                    self.lines.append(f"{indent}  label={_q(f'{op.opname} region {r}')}; style=dotted;")
                    self.block(blk, indent + "  ")
                    self.lines.append(f"{indent}}}")


def module_dot(m: Module) -> str:
    d = _Dot()
    d.lines += [f"digraph {_q(m.name)} {{", '  node [shape=box, fontname="monospace", fontsize=10];',
                '  edge [fontname="monospace", fontsize=9];']
    for k, f in enumerate(m.functions.values()):
        guard = print_bool(f.guard)
        d.lines.append(f"  subgraph cluster_f{k} {{")
        d.lines.append(f"    label={_q(f'@{f.name}' + ('' if guard == 'true' else f'  guard {guard}'))};")
        d.block(f.body, "    ", list(f.attrs.get("outputs", [])))
        d.lines.append("  }")
    d.lines.append("}")
    return "\n".join(d.lines) + "\n"
