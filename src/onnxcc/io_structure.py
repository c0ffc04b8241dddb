"""Sequence and optional inputs and outputs: how a build fixes their structure and how the
Python side flattens them into the C ABI's tensors and groups the results back.

A build is specialised on the structure of every sequence / optional graph input (its
length, whether it is present), written as a spec string:

    seq:N[:ranks=R0,R1,...]   a sequence of N tensors (the ranks where the model leaves
                              the element's shape out)
    none                      an absent optional
    some                      a present optional tensor
    some:seq:N[:ranks=...]    a present optional holding a sequence of N tensors

In the C ABI each element of a sequence is a tensor argument of its own named `NAME.K`
(K = 0..N-1), a present optional tensor is the argument `NAME`, an absent one has none.
Outputs likewise. NAME.json's `metadata.structure` holds the ONNX inputs and outputs in
order, each with its spec (`tensor` for a plain tensor), which this module reads; it
imports nothing but errors (the importer and the loader share it).
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import GuardError, OnnxccError


@dataclass(frozen=True)
class Spec:
    """A parsed spec: `optional` (declared optional), `present`, `length` (None: a tensor),
    `ranks` (element ranks, where given)."""

    optional: bool
    present: bool
    length: int | None
    ranks: tuple[int, ...] | None = None

    def text(self) -> str:
        if not self.present:
            return "none"
        seq = "" if self.length is None else f"seq:{self.length}"
        if seq and self.ranks is not None:
            seq += ":ranks=" + ",".join(map(str, self.ranks))
        if self.optional:
            return "some" + (":" + seq if seq else "")
        return seq or "tensor"


def parse_spec(text: str, name: str = "?") -> Spec:
    """'seq:3', 'seq:2:ranks=1,2', 'none', 'some', 'some:seq:1', 'tensor' -> Spec."""
    t = text.strip()
    optional = False
    if t == "none":
        return Spec(True, False, None)
    if t == "tensor":
        return Spec(False, True, None)
    if t == "some":
        return Spec(True, True, None)
    if t.startswith("some:"):
        optional, t = True, t[5:]
    parts = t.split(":")
    try:
        if parts[0] != "seq" or len(parts) not in (2, 3):
            raise ValueError
        n = int(parts[1])
        ranks = None
        if len(parts) == 3:
            key, _, vals = parts[2].partition("=")
            if key != "ranks":
                raise ValueError
            ranks = tuple(int(x) for x in vals.split(",")) if vals else ()
            if len(ranks) != n:
                raise ValueError
        if n < 0:
            raise ValueError
    except ValueError:
        raise OnnxccError(f"input structure of {name!r}: {text!r} is not one of seq:N[:ranks=R,...], none, some, "
                          "some:seq:N") from None
    return Spec(optional, True, n, ranks)


def spec_of(value, optional: bool) -> str:
    """The spec of a Python value for an input declared sequence (`optional` False) or
    optional: a list / tuple of arrays is a sequence, None an absent optional."""
    import numpy as np

    if value is None:
        if not optional:
            raise OnnxccError("an input declared a sequence got None")
        return "none"
    if isinstance(value, (list, tuple)):
        ranks = tuple(np.ndim(x) for x in value)
        return Spec(optional, True, len(value), ranks).text()
    if not optional:
        raise OnnxccError(f"an input declared a sequence got a {type(value).__name__}, not a list")
    return "some"


def flat_names(name: str, spec: Spec) -> list[str]:
    """The C ABI argument names that carry one ONNX input or output."""
    if not spec.present:
        return []
    if spec.length is None:
        return [name]
    return [f"{name}.{k}" for k in range(spec.length)]


def structure_of(attrs: dict) -> dict | None:
    """{"inputs": [[name, spec]...], "outputs": [...]} from a module's `input_structure` /
    `output_structure` attrs (each a list of "SPEC NAME"), or None when it has neither."""
    if "input_structure" not in attrs:
        return None

    def pairs(items):
        return [list(reversed(x.split(" ", 1))) for x in items]

    return {"inputs": pairs(attrs["input_structure"]), "outputs": pairs(attrs.get("output_structure", []))}


def flatten_inputs(structure: dict, inputs, model: str = "model") -> dict:
    """The ONNX-level inputs (a list in input order, or a dict by name) as {C argument name:
    array}; a sequence's length and an optional's presence are checked against the build."""
    entries = [(n, parse_spec(s, n)) for n, s in structure["inputs"]]
    names = [n for n, _ in entries]
    if isinstance(inputs, dict):
        unknown = sorted(set(inputs) - set(names))
        if unknown:
            raise GuardError(f"model {model} has no input(s) {', '.join(unknown)}; inputs are {names}")
        absent_ok = {n for n, sp in entries if sp.optional}
        missing = [n for n in names if n not in inputs and n not in absent_ok]
        if missing:
            raise GuardError(f"missing input(s) {', '.join(missing)} of model {model}")
        values = [inputs.get(n) for n in names]
    else:
        values = list(inputs)
        if len(values) != len(names):
            raise GuardError(f"model {model} takes {len(names)} inputs, got {len(values)}")
    out: dict = {}
    for (name, sp), v in zip(entries, values):
        if not sp.present:
            if v is not None:
                raise GuardError(f'input "{name}": this build of model {model} was compiled for it absent (None); '
                                 "got a value")
            continue
        if v is None:
            raise GuardError(f'input "{name}": this build of model {model} was compiled for it present; got None')
        if sp.length is None:
            if isinstance(v, (list, tuple)) and sp.optional:
                raise GuardError(f'input "{name}": this build takes a tensor there, got a list')
            out[name] = v
            continue
        if not isinstance(v, (list, tuple)):
            raise GuardError(f'input "{name}" is a sequence: pass a list of arrays, not a {type(v).__name__}')
        if len(v) != sp.length:
            raise GuardError(f'input "{name}": this build of model {model} was compiled for a sequence of '
                             f"{sp.length} tensor{'s' if sp.length != 1 else ''}, got {len(v)} (compile another "
                             "for that length)")
        out.update(zip(flat_names(name, sp), v))
    return out


def group_outputs(structure: dict, flat: dict) -> dict:
    """{C output name: array} -> {ONNX output name: array, list of arrays, or None}."""
    out: dict = {}
    for name, s in structure["outputs"]:
        sp = parse_spec(s, name)
        if not sp.present:
            out[name] = None
        elif sp.length is None:
            out[name] = flat[name]
        else:
            out[name] = [flat[n] for n in flat_names(name, sp)]
    return out


# ---- flat files (`onnxcc run --inputs x.npz`): element K of sequence NAME is the key NAME.K ----

def structure_from_keys(declared: list[tuple[str, str]], keys) -> dict[str, str]:
    """The specs of the sequence / optional inputs `declared` [(name, "sequence" |
    "optional")] from the keys of a flat file: NAME.0 .. NAME.N-1 make a sequence of N (none:
    an empty one), NAME (or NAME.K) a present optional, no key an absent one."""
    keys = set(keys)
    out = {}
    for name, kind in declared:
        n = 0
        while f"{name}.{n}" in keys:
            n += 1
        if kind == "sequence":
            out[name] = f"seq:{n}"
        elif name in keys:
            out[name] = "some"
        else:
            out[name] = f"some:seq:{n}" if n else "none"
    return out


def group_flat_inputs(structure: dict, flat: dict) -> dict:
    """{NAME.K / NAME: array} (a flat file) -> the ONNX-level inputs run() takes."""
    out: dict = {}
    for name, s in structure["inputs"]:
        sp = parse_spec(s, name)
        if not sp.present:
            out[name] = None
        elif sp.length is None:
            if name in flat:
                out[name] = flat[name]
        else:
            missing = [k for k in flat_names(name, sp) if k not in flat]
            if missing:
                raise GuardError(f'input "{name}" is a sequence of {sp.length} in this build: missing '
                                 f"{', '.join(missing)}")
            out[name] = [flat[k] for k in flat_names(name, sp)]
    return out


def flatten_outputs(grouped: dict) -> dict:
    """run()'s outputs with each sequence as NAME.K keys and absent optionals left out (for
    a flat file)."""
    out: dict = {}
    for name, v in grouped.items():
        if isinstance(v, list):
            out.update({f"{name}.{k}": a for k, a in enumerate(v)})
        elif v is not None:
            out[name] = v
    return out
