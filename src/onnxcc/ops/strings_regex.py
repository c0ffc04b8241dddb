"""RegexFullMatch's patterns: RE2 syntax (what ONNX specifies) translated for POSIX <regex.h>.

The native library has only libc, whose regex is POSIX extended (ERE) with leftmost-longest
matching. For a FULL match only whether some match of the whole string exists matters, so
greedy, lazy and leftmost-longest all agree; what differs is syntax and a few meanings. The
translation accepts the RE2 subset both dialects can honour and refuses the rest by name:

  accepted   literals (ASCII), `.`, `[...]` / `[^...]` sets with ranges and escapes, `\\d \\D
             \\w \\W \\s \\S` (ASCII classes, as RE2 has them), `\\n \\t \\r \\f \\v`, escaped
             punctuation, `( ) (?: ) (?P<name> )`, `|`, `* + ? {n} {n,} {n,m}` (a trailing `?`,
             laziness, is dropped: it never changes whether a full match exists), `^ $`
  GNU        `\\b \\B` (word boundaries): glibc's regcomp extension; another libc's regcomp may
             refuse them, which the runtime reports as an error
  refused    flags `(?i)`, lookaround, `\\A \\z`, back-references, `\\p{..}`, `\\x..`,
             `\\Q..\\E`, POSIX classes `[[:alpha:]]`, non-ASCII characters in the pattern

One meaning still differs: POSIX in the "C" locale (the runtime sets it per call) applies `.`
and negated sets to one BYTE, RE2 to one UTF-8 character, and RE2's `.` never matches a
newline. Patterns with such parts are marked `byte_sensitive`: the runtime refuses an input
element holding a non-ASCII byte or a newline for them instead of answering differently.

The same tokens render as a Python `re` pattern for the numpy reference (Python's `.` and
sets work on characters, like RE2's; `\\Z` for RE2's `$`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_ERE_SPECIAL = set(".[]()*+?{}|^$\\")
_CLASSES = {"d": [("0", "9")], "w": [("0", "9"), ("A", "Z"), ("a", "z"), ("_", "_")],
            "s": [("\t", "\t"), ("\n", "\n"), ("\f", "\f"), ("\r", "\r"), (" ", " ")]}
_CONTROL = {"n": "\n", "t": "\t", "r": "\r", "f": "\f", "v": "\v"}
_REPEAT = re.compile(r"\{(\d+)(,(\d*))?\}")


class PatternError(ValueError):
    """A pattern the translation refuses (the message says what and why)."""


@dataclass(frozen=True)
class Translated:
    posix: str
    """the anchored POSIX ERE: ^(...)$"""
    python: str
    """the Python `re` pattern for re.fullmatch"""
    byte_sensitive: bool


def _set_posix(neg: bool, ranges: list[tuple[str, str]]) -> str:
    # `]` first, `-` last, `^` anywhere but first: the only places POSIX reads them literally
    close = [r for r in ranges if r == ("]", "]")][:1]
    dash = [r for r in ranges if r == ("-", "-")][:1]
    rest = [r for r in ranges if r not in close and r not in dash]
    rest.sort(key=lambda r: r[0] == "^")
    if any(c in "]-^[" and lo != hi for lo, hi in rest for c in (lo, hi)):
        raise PatternError("a range in a character set starts or ends at ] - ^ or [")
    body = "".join(lo if lo == hi else f"{lo}-{hi}" for lo, hi in close + rest + dash)
    if body == "^" and not neg:  # `[^]` would read as a negation: the literal instead
        return "\\^"
    return "[" + ("^" if neg else "") + body + "]"


def _set_python(neg: bool, ranges: list[tuple[str, str]]) -> str:
    def esc(c: str) -> str:
        return "\\" + c if c in "\\]^-[" else (re.escape(c) if not c.isprintable() else c)
    body = "".join(esc(lo) if lo == hi else f"{esc(lo)}-{esc(hi)}" for lo, hi in ranges)
    return "[" + ("^" if neg else "") + body + "]"


class _Reader:
    def __init__(self, pattern: str):
        self.p, self.i = pattern, 0
        self.posix: list[str] = []
        self.python: list[str] = []
        self.sensitive = False

    def fail(self, what: str) -> PatternError:
        return PatternError(f"{what} at offset {self.i} of {self.p!r} (the RE2 subset POSIX regex can honour: "
                            "see onnxcc/ops/strings_regex.py)")

    def emit(self, posix: str, python: str) -> None:
        self.posix.append(posix)
        self.python.append(python)

    def lit(self, c: str) -> None:
        self.emit("\\" + c if c in _ERE_SPECIAL else c, re.escape(c))

    def set_(self, neg: bool, ranges: list[tuple[str, str]]) -> None:
        self.sensitive |= neg
        self.emit(_set_posix(neg, ranges), _set_python(neg, ranges))

    def run(self) -> None:
        p = self.p
        if any(ord(c) > 127 for c in p):
            raise self.fail("a non-ASCII character (POSIX in the C locale would read its bytes one by one)")
        while self.i < len(p):
            c = p[self.i]
            self.i += 1
            if c == "\\":
                self.escape()
            elif c == "[":
                self.bracket()
            elif c == ".":
                self.sensitive = True
                self.emit(".", ".")
            elif c == "(":
                if p.startswith("?:", self.i):
                    self.i += 2
                elif p.startswith("?P<", self.i) and ">" in p[self.i:]:
                    self.i = p.index(">", self.i) + 1
                elif p.startswith("?", self.i):
                    raise self.fail("a group with flags or lookaround `(?`")
                self.emit("(", "(")
            elif c in ")|":
                self.emit(c, c)
            elif c in "*+?":
                self.emit(c, c)
                self.lazy()
            elif c == "{" and (m := _REPEAT.match(p, self.i - 1)) is not None:
                self.i = m.end()
                self.emit(m.group(0), m.group(0))
                self.lazy()
            elif c == "^":
                self.emit("^", "\\A")
            elif c == "$":
                self.emit("$", "\\Z")
            else:  # a literal, `{` that is no repetition included (RE2 reads it so too)
                self.lit(c)

    def lazy(self) -> None:
        if self.p.startswith("?", self.i):  # lazy: the same full matches
            self.i += 1
        if self.i < len(self.p) and self.p[self.i] in "*+":
            raise self.fail("a repetition of a repetition")

    def escape(self) -> None:
        if self.i >= len(self.p):
            raise self.fail("a trailing backslash")
        c = self.p[self.i]
        self.i += 1
        if c.lower() in _CLASSES:
            self.set_(c.isupper(), _CLASSES[c.lower()])
        elif c in _CONTROL:
            self.lit(_CONTROL[c])
        elif c in "bB":  # word boundaries: glibc's GNU extension, ASCII words in the C locale as in RE2
            self.sensitive = True  # a non-ASCII letter is a word character to Python, not to RE2
            self.emit("\\" + c, "\\" + c)
        elif not c.isalnum():
            self.lit(c)
        else:
            raise self.fail(f"the escape \\{c}")

    def bracket(self) -> None:
        p = self.p
        neg = p.startswith("^", self.i)
        self.i += neg
        ranges: list[tuple[str, str]] = []
        first = True
        while True:
            if self.i >= len(p):
                raise self.fail("an unclosed character set")
            c = p[self.i]
            self.i += 1
            if c == "]" and not first:
                break
            first = False
            if c == "[" and p.startswith(":", self.i):
                raise self.fail("a POSIX class [:name:]")
            if c == "\\":
                if self.i >= len(p):
                    raise self.fail("a trailing backslash")
                e = p[self.i]
                self.i += 1
                if e in _CLASSES:
                    ranges += _CLASSES[e]
                    continue
                if e.lower() in _CLASSES:
                    raise self.fail(f"a negated class \\{e} inside a set")
                if e in _CONTROL:
                    c = _CONTROL[e]
                elif not e.isalnum():
                    c = e
                else:
                    raise self.fail(f"the escape \\{e} inside a set")
            lo = c
            if p.startswith("-", self.i) and self.i + 1 < len(p) and p[self.i + 1] != "]":
                hi = p[self.i + 1]
                self.i += 2
                if hi == "\\":
                    if self.i >= len(p) or p[self.i].isalnum():
                        raise self.fail("an escape as the end of a range")
                    hi = p[self.i]
                    self.i += 1
                if hi < lo:
                    raise self.fail(f"the reversed range {lo}-{hi}")
                ranges.append((lo, hi))
            else:
                ranges.append((lo, lo))
        if not ranges:
            raise self.fail("an empty character set")
        self.set_(neg, ranges)


def translate(pattern: str) -> Translated:
    """The POSIX and Python forms of an RE2 pattern, or PatternError."""
    r = _Reader(pattern)
    r.run()
    body_posix, body_py = "".join(r.posix), "".join(r.python)
    for form, body in (("POSIX", body_posix), ("Python", body_py)):
        if "\0" in body:
            raise PatternError(f"a NUL character in the pattern ({form} form)")
    try:
        re.compile(body_py, re.ASCII)
    except re.error as e:
        raise PatternError(f"not a valid pattern: {e}") from None
    return Translated(f"^({body_posix})$", body_py, r.sensitive)


__all__ = ["PatternError", "Translated", "translate"]
