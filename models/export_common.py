"""What the held-out generators share (models/export_tv.py, export_heldout2.py, export_zoo2.py):
one export per exporter kind, and the one-line report of an exporter's refusal.

A kind is `tsNN` (the TorchScript exporter at opset NN, `dynamic_axes`) or `dynNN` (the dynamo
exporter at opset NN, one `torch.export.Dim` per symbol name). Needs torch; imported only by the
generators, never by onnxcc or its tests.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path

import torch


def by_signature(module: torch.nn.Module, per: list) -> tuple:
    """dynamic_shapes in forward's structure: one entry per named argument, the rest of the
    inputs as one tuple for a `*args` parameter"""
    out: list = []
    for p in inspect.signature(module.forward).parameters.values():
        if p.kind == p.VAR_POSITIONAL:
            out.append(tuple(per[len(out):]))
            return tuple(out)
        out.append(per[len(out)])
    return tuple(out)


def export_kind(module: torch.nn.Module, args: tuple, path: Path, names: list[str], dyn: dict, kind: str, *,
                dim_min: Callable[[str], int] = lambda s: 1, external_data: bool = True) -> None:
    """export `module` at `args` as `kind` to `path`; raises what the exporter raises"""
    with torch.no_grad():
        if kind.startswith("ts"):
            torch.onnx.export(module, args, str(path), input_names=names, dynamic_axes=dyn,
                              opset_version=int(kind[2:]), dynamo=False)
            return
        syms = sorted({s for d in dyn.values() for s in d.values()})
        dims = {s: torch.export.Dim(s, min=dim_min(s), max=4096) for s in syms}
        per = [{ax: dims[s] for ax, s in dyn.get(n, {}).items()} or None for n in names]
        torch.onnx.export(module, args, str(path), input_names=names, dynamic_shapes=by_signature(module, per),
                          opset_version=int(kind[3:]), dynamo=True, external_data=external_data)


def export_or_report(module: torch.nn.Module, args: tuple, path: Path, names: list[str], dyn: dict, kind: str,
                     **kw) -> bool:
    """export_kind, printing `exported PATH` or, on the exporter's refusal, one line saying why
    (and writing nothing): a generator runs on through the rest of its list"""
    try:
        export_kind(module, args, path, names, dyn, kind, **kw)
    except Exception as e:  # an exporter's refusal: report it, write nothing
        lines = str(e).splitlines()
        why = " | ".join(lines[:1] + [ln for ln in lines if "rror" in ln][:3])[:600]
        print("export failed", path, type(e).__name__, why, flush=True)
        return False
    print("exported", path, flush=True)
    return True
