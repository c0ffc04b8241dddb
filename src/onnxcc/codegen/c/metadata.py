"""NAME.json: the artifact's metadata (signature, symbols, constraints, versions with their
guards and workspaces, layouts) for loaders, `onnxcc inspect` and the tests."""

from __future__ import annotations

import sympy

from . import capacity, layout
from .abi import ArtifactSpec, TensorSig
from .ctext import guard_text
from .exprs import text
from .target import ABI_VERSION, ERROR_CODES, link_target


def _onnxcc_version() -> str:
    from ...version import __version__

    return __version__


def generate_metadata(spec: ArtifactSpec) -> dict:
    spec.validate()

    def tensor(t: TensorSig) -> dict:
        d = {"name": t.name, "dtype": t.dtype.value, "shape": [text(d) for d in t.shape]}
        run = sorted({s.name for x in t.shape for s in sympy.sympify(x).free_symbols} & set(spec.run_dims))
        if run:  # allocated for the bound; NAME_output_dims gives the true shape after a run
            d["run_determined"] = run
            # bound mid-run: compact in the true shape at the start (else: the leading corner)
            d["run_layout"] = "prefix" if set(run) <= set(spec.late_dims) else "corner"
        return d

    return {
        "name": spec.name,
        "abi_version": ABI_VERSION,
        "build_id": spec.build_id,
        **({"cpu_features": list(spec.cpu_features)} if spec.cpu_features else {}),
        **({"cpu_levels": dict(spec.cpu_levels)} if spec.cpu_levels else {}),
        "onnxcc_version": _onnxcc_version(),
        "target": spec.target,
        "triple": spec.triple,
        **({"arch": spec.device.arch, "kernels": len(spec.device.kernels)} if spec.device is not None else {}),
        "library": f"lib{spec.name}.so",
        "header": f"{spec.name}.h",
        "error_codes": dict(ERROR_CODES),
        "inputs": [tensor(t) for t in spec.inputs],
        "outputs": [tensor(t) for t in spec.outputs],
        "symbols": [{"name": s.name, "lo": s.lo, "hi": s.hi, "multiple_of": s.multiple_of, "origin": s.origin}
                    for s in spec.symbols],
        "constraints": [{"text": text(e), "origin": o} for e, o in spec.constraints],
        **({"run_dims": {k: text(v) for k, v in spec.run_dims.items()}} if spec.run_dims else {}),
        **({"late_dims": list(spec.late_dims)} if spec.late_dims else {}),
        **capacity.metadata(spec),
        **({"data_dims": {k: {"input": spec.inputs[i].name, "element": j} for k, (i, j) in spec.data_dims.items()}}
           if spec.data_dims else {}),
        **({"version_dims": {k: [None if d is None else text(d) for d in per]
                             for k, per in spec.version_dims.items()}} if spec.version_dims else {}),
        "versions": [{"index": k, "symbol": v.symbol, "kind": v.kind, "guard": guard_text(v),
                      "subs": dict(v.subs), "workspace_bytes": text(v.workspace_bytes), "info": v.info,
                      **({"cpu": v.cpu} if v.cpu else {}),
                      **({"value_guards": [{"input": g.name, "value": g.text} for g in v.value_guards]}
                         if v.value_guards else {}),
                      **({"launches": [{"kernel": la.kernel, "work": text(la.work)} for la in v.launches]}
                         if v.launches else {})}
                     for k, v in enumerate(spec.versions)],
        **layout.metadata(spec, layout.reads_host(link_target(spec).devices, link_target(spec).shape_devices)),
        "metadata": spec.metadata,
    }
