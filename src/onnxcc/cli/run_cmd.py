"""`onnxcc run MODEL.onnx|DIR --inputs in.npz --outputs out.npz`: run a model or a built artifact.

A `.onnx` model is compiled through the artifact cache (reused when the model and flags are
the same) and the cached build's directory is printed, so it can be inspected; a directory
that `onnxcc compile` wrote is loaded as it is, with no compile.
"""

from __future__ import annotations

from pathlib import Path

import click
import ml_dtypes
import numpy as np

from ..errors import OnnxccError
from ..ir import parse_dim
from ..runtime.loader import DTYPES
from .exit_codes import EXIT_MISMATCH
from .options import compile_flags, parse_assignments


def _read_inputs(path: Path, input_names: list[str]) -> dict[str, np.ndarray]:
    """An .npz keyed by input name, or an .npy for a model with one input."""
    try:
        loaded = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise OnnxccError(f"{path}: cannot read inputs ({e}); expected an .npz keyed by input name") from e
    if isinstance(loaded, np.ndarray):
        if len(input_names) != 1:
            raise OnnxccError(f"{path}: an .npy holds one array but the model takes {len(input_names)} inputs "
                              f"({', '.join(input_names)}); give an .npz keyed by input name")
        return {input_names[0]: loaded}
    with loaded as z:
        return {k: z[k] for k in z.files}


@click.command("run")
@click.argument("model", type=click.Path(path_type=Path))
@click.option("--inputs", "inputs_path", type=click.Path(dir_okay=False, path_type=Path),
              help=".npz with one array per graph input, keyed by input name (.npy for one input); "
                   "element K of a sequence input NAME is NAME.K, an absent optional has no key")
@click.option("--random", "random_dims", default=None, metavar="SYM=V,...",
              help="instead of --inputs: random inputs with these symbol values (seeded)")
@click.option("--outputs", "outputs_path", type=click.Path(dir_okay=False, path_type=Path),
              help="write one array per graph output (keyed by output name) to this .npz")
@click.option("--cache-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="artifact cache (default: $ONNXCC_CACHE_DIR or ~/.cache/onnxcc)")
@click.option("--check", is_flag=True,
              help="also run onnxruntime on the same inputs; exit 4 if an output differs beyond the tolerance")
@click.option("--rtol", type=click.FloatRange(min=0), default=1e-4, show_default=True,
              help="--check: relative tolerance")
@click.option("--atol", type=click.FloatRange(min=0), default=1e-5, show_default=True,
              help="--check: absolute tolerance")
@compile_flags
def run(model: Path, inputs_path: Path | None, random_dims: str | None, outputs_path: Path | None,
        cache_dir: Path | None, check: bool, rtol: float, atol: float, options) -> None:
    """Run MODEL (an .onnx file, compiled through the cache) or DIR (an artifact `compile` wrote)."""
    from ..runtime import load

    if (inputs_path is None) == (random_dims is None):
        raise OnnxccError("give exactly one of --inputs FILE.npz or --random SYM=V,...")
    if model.is_dir():
        if check:
            raise OnnxccError(f"{model}: --check needs the .onnx model to run onnxruntime on, not a built artifact")
        try:
            compiled = load(model)
        except FileNotFoundError as e:
            raise OnnxccError(str(e)) from None
        origin = f"artifact {model}"
    elif model.is_file():
        from ..compiler import compile_cached
        from ..compiler.value_versions import build_for_inputs
        from ..runtime.cache import ArtifactCache

        cache = ArtifactCache(cache_dir)
        if inputs_path is not None:  # sequences / optionals: the build takes its structure from the file
            options = _with_structure(model, options, inputs_path)
        # shapes that depend on some inputs' values (a Reshape target, Slice starts...): value
        # versions for the values in --inputs
        path, hit = build_for_inputs(
            lambda o: compile_cached(model, o, cache), options,
            lambda names: None if inputs_path is None else _read_inputs(inputs_path, names),
            lambda line: click.echo(line, err=True))
        compiled = load(path)
        origin = f"{'cached' if hit else 'compiled'} build {path}"
    else:
        raise OnnxccError(f"{model}: no such file or directory")
    if inputs_path is not None:
        feeds = _read_inputs(inputs_path, [t["name"] for t in compiled.inputs])
    else:
        feeds = _random_inputs(compiled, parse_assignments(random_dims, "--random"))
    structure = getattr(compiled, "structure", None)
    if structure is not None:
        from ..io_structure import flatten_outputs, group_flat_inputs

        feeds = group_flat_inputs(structure, feeds)
        outs = flatten_outputs(compiled.run(feeds))
    else:
        outs = compiled.run(feeds)
    v = compiled.last_version
    # version_info reads "version V (kind, symbol): guard G; subs S; workspace W": keep kind and guard
    info = compiled.version_info(v) or ""
    click.echo(f"{origin}; ran {info.split(';')[0]}", err=True)
    for k, a in outs.items():
        if a.dtype == object:  # strings: the first few instead of a mean
            click.echo(f"{k}: str{list(a.shape)} {a.reshape(-1)[:4].tolist()}{' ...' if a.size > 4 else ''}")
        else:
            click.echo(f"{k}: {a.dtype}{list(a.shape)} mean {float(np.mean(a)) if a.size else 0:.6g}")
    if outputs_path is not None:
        # strings as numpy str arrays, which --inputs (allow_pickle=False) reads back
        np.savez(outputs_path, **{k: a.astype(str) if a.dtype == object else a for k, a in outs.items()})
    if check and not _check_against_onnxruntime(model, feeds, outs, rtol, atol):
        raise click.exceptions.Exit(EXIT_MISMATCH)


def _with_structure(model: Path, options, inputs_path: Path):
    """`options` with the structure of the model's sequence / optional inputs read off the
    keys of the --inputs file (io_structure.structure_from_keys)."""
    from dataclasses import replace

    import onnx

    if model.suffix.lower() != ".onnx":
        return options
    try:
        graph = onnx.load(str(model), load_external_data=False).graph
    except Exception:
        return options  # the compile says what is wrong with the file
    kinds = {"sequence_type": "sequence", "optional_type": "optional"}
    declared = [(vi.name, kinds[vi.type.WhichOneof("value")]) for vi in graph.input
                if vi.type.WhichOneof("value") in kinds]
    if not declared:
        return options
    from ..io_structure import structure_from_keys

    try:
        with np.load(inputs_path, allow_pickle=False) as z:
            keys = list(z.files)
    except (OSError, ValueError, AttributeError):
        return options  # _read_inputs says what is wrong with it
    return replace(options, input_structure={**structure_from_keys(declared, keys), **options.input_structure})


def _check_against_onnxruntime(model: Path, feeds, outs, rtol: float, atol: float) -> bool:
    """Print each output's max abs difference from onnxruntime; True when all are within tolerance."""
    try:
        from ..testing import ort_run
    except ImportError as e:
        raise OnnxccError(f"--check needs onnxruntime ({e}); install onnxcc[test]") from None
    from ..io_structure import flatten_outputs

    try:
        wants = flatten_outputs(ort_run(str(model), feeds))
    except Exception as e:  # onnxruntime's own refusal: nothing to compare with, not an onnxcc bug
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise OnnxccError(f"--check: onnxruntime could not run {model.name} on these inputs, so there is "
                          f"nothing to compare with (onnxcc's outputs are above): {first[:600]}") from None
    ok = True
    for k, want in wants.items():
        got = outs[k]
        if got.shape != want.shape:
            click.echo(f"{k}: MISMATCH shape {list(got.shape)}, onnxruntime gives {list(want.shape)}")
            ok = False
            continue
        if want.dtype.kind in "OUS":  # strings: equal or not
            same = np.asarray(got, dtype=object).astype(str).tolist() == want.astype(str).tolist()
            ok &= same
            click.echo(f"{k}: strings {'equal to' if same else 'MISMATCH against'} onnxruntime's")
            continue
        w, g = want.astype(np.float64), got.astype(np.float64)
        err = float(np.max(np.abs(w - g))) if w.size else 0.0
        within = bool(np.all(np.isclose(g, w, rtol=rtol, atol=atol, equal_nan=True)))
        ok &= within
        click.echo(f"{k}: max abs diff vs onnxruntime {err:.3g} ({'ok' if within else 'MISMATCH'}: "
                   f"rtol {rtol:g}, atol {atol:g})")
    return ok


def _random_inputs(compiled, dims: dict[str, int]) -> dict[str, np.ndarray]:
    """Inputs for a compiled model whose symbolic dims take the given values."""
    import sympy

    rng = np.random.default_rng(0)
    shapes = {t["name"]: [parse_dim(str(d)) for d in t["shape"]] for t in compiled.inputs}
    known = {s.name for dims_ in shapes.values() for d in dims_ if not isinstance(d, int) for s in d.free_symbols}
    unknown = sorted(set(dims) - known)
    if unknown:
        raise OnnxccError(f"--random: the model has no symbol {', '.join(unknown)} "
                          f"(its inputs' symbols: {', '.join(sorted(known)) or 'none'})")
    env = {sympy.Symbol(k, integer=True, positive=True): v for k, v in dims.items()}
    feeds = {}
    for t in compiled.inputs:
        shape = []
        for d in shapes[t["name"]]:
            e = sympy.sympify(d).subs(env)
            if not e.is_Integer:
                missing = ", ".join(sorted(str(s) for s in e.free_symbols))
                raise OnnxccError(f'input "{t["name"]}" dim {d}: give a value with --random (e.g. {missing}=4)')
            shape.append(int(e))
        # bf16 as ml_dtypes.bfloat16 (the loader takes it as well as uint16 bits)
        dt = np.dtype(ml_dtypes.bfloat16) if t["dtype"] == "bf16" else np.dtype(DTYPES[t["dtype"]][0])
        if dt.kind == "V" and dt.name.startswith(("int", "uint")):  # the sub-byte integers
            feeds[t["name"]] = rng.integers(0, 2, size=shape).astype(dt)
        elif dt.kind in "fV":
            feeds[t["name"]] = (rng.standard_normal(shape) * 0.5).astype(dt)
        elif dt.kind == "b":
            feeds[t["name"]] = rng.random(shape) < 0.5
        else:
            feeds[t["name"]] = rng.integers(0, 10, size=shape).astype(dt)
    return feeds
