"""Small text helpers of the generated C: string literals, comments, shapes, guard and
version texts, and `Msg`, a printf message built piece by piece."""

from __future__ import annotations

from .abi import VersionSpec
from .exprs import text


def c_string(s: str, fmt: bool = False) -> str:
    """The body of a C string literal for s; with fmt, '%' is doubled for printf."""
    out = []
    for ch in s:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "%" and fmt:
            out.append("%%")
        elif ch == "?":
            out.append("\\?")  # no accidental trigraphs
        elif 32 <= ord(ch) < 127:
            out.append(ch)
        else:
            out.extend(f"\\{b:03o}" for b in ch.encode("utf-8"))
    return "".join(out)


def c_comment(s: str) -> str:
    return s.replace("*/", "* /")


def shape_text(shape) -> str:
    return "[" + ", ".join(text(d) for d in shape) + "]"


class Msg:
    """A printf format and its arguments, built piece by piece."""

    def __init__(self, *pieces: str):
        self.fmt, self.args = "", []
        for p in pieces:
            self.text(p)

    def text(self, s: str) -> Msg:
        self.fmt += c_string(s, fmt=True)
        return self

    def value(self, c_expr: str) -> Msg:
        self.fmt += "%lld"
        self.args.append(f"(long long)({c_expr})")
        return self

    def copy(self) -> Msg:
        c = Msg()
        c.fmt, c.args = self.fmt, list(self.args)
        return c

    def fail(self, code: str, before: str = "") -> str:
        """A C block that sets the message and returns code (running `before` first)."""
        args = "".join(", " + a for a in self.args)
        return f'{{ {before}onnxcc_error_set("{self.fmt}"{args}); return {code}; }}'


def guard_text(v: VersionSpec) -> str:
    return v.guard_text or text(v.guard)


def version_info_text(k: int, v: VersionSpec) -> str:
    subs = ", ".join(f"{a}={b}" for a, b in v.subs.items()) or "none"
    cpu = f"cpu {v.cpu}, " if v.cpu else ""
    ws = text(v.workspace_bytes)
    if len(ws) > 60 or "Piecewise" in ws:  # a symbolic plan: `onnxcc inspect` shows it by ranges
        ws = "symbolic (see NAME.json or onnxcc inspect)"
    else:
        ws += " bytes"
    return f"version {k} ({v.kind}, {cpu}{v.symbol}): guard {guard_text(v)}; subs {subs}; workspace {ws}"
