"""`onnxcc run MODEL --inputs in.npz --outputs out.npz`: compile (cached), run, save outputs."""

from __future__ import annotations

from pathlib import Path

import click
import numpy as np

from ..errors import OnnxccError
from .options import compile_flags, parse_assignments


def _read_inputs(path: Path) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (OSError, ValueError) as e:
        raise OnnxccError(f"{path}: cannot read inputs ({e}); expected an .npz keyed by input name") from e


@click.command("run")
@click.argument("model", type=click.Path(path_type=Path))
@click.option("--inputs", "inputs_path", type=click.Path(dir_okay=False, path_type=Path),
              help=".npz with one array per graph input, keyed by input name")
@click.option("--random", "random_dims", default=None, metavar="SYM=V,...",
              help="instead of --inputs: random inputs with these symbol values (seeded)")
@click.option("--outputs", "outputs_path", type=click.Path(dir_okay=False, path_type=Path),
              help="write one array per graph output (keyed by output name) to this .npz")
@click.option("--cache-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="artifact cache (default: $ONNXCC_CACHE_DIR or ~/.cache/onnxcc)")
@click.option("--check", is_flag=True, help="also run onnxruntime and report the max abs difference")
@compile_flags
def run(model: Path, inputs_path: Path | None, random_dims: str | None, outputs_path: Path | None,
        cache_dir: Path | None, check: bool, options) -> None:
    """Compile MODEL (reusing a cached build of the same model and flags) and run it."""
    from ..compiler import compile_cached
    from ..runtime import load
    from ..runtime.cache import ArtifactCache

    if (inputs_path is None) == (random_dims is None):
        raise OnnxccError("give exactly one of --inputs FILE.npz or --random SYM=V,...")
    if not model.is_file():
        raise OnnxccError(f"{model}: no such file")
    cache = ArtifactCache(cache_dir)
    path, hit = compile_cached(model, options, cache)
    compiled = load(path)
    if inputs_path is not None:
        feeds = _read_inputs(inputs_path)
    else:
        feeds = _random_inputs(compiled, parse_assignments(random_dims, "--random"))
    outs = compiled.run(feeds)
    v = compiled.last_version
    # version_info reads "version V (kind, symbol): guard G; subs S; workspace W": keep kind and guard
    info = compiled.version_info(v) or ""
    click.echo(f"{'cached' if hit else 'compiled'} {path.name[:12]}; ran {info.split(';')[0]}", err=True)
    for k, a in outs.items():
        click.echo(f"{k}: {a.dtype}{list(a.shape)} mean {float(np.mean(a)) if a.size else 0:.6g}")
    if outputs_path is not None:
        np.savez(outputs_path, **outs)
    if check:
        from ..testing import ort_run

        want = ort_run(str(model), feeds)
        for k, w in want.items():
            err = float(np.max(np.abs(w.astype(np.float64) - outs[k].astype(np.float64)))) if w.size else 0.0
            click.echo(f"{k}: max abs diff vs onnxruntime {err:.3g}")


def _random_inputs(compiled, dims: dict[str, int]) -> dict[str, np.ndarray]:
    """Inputs for a compiled model whose symbolic dims take the given values."""
    import sympy

    rng = np.random.default_rng(0)
    feeds = {}
    env = {sympy.Symbol(k, integer=True, positive=True): v for k, v in dims.items()}
    for t in compiled.inputs:
        shape = []
        for d in t["shape"]:
            e = sympy.sympify(d, locals={str(s): s for s in env}).subs(env)
            if not e.is_Integer:
                raise OnnxccError(f'input "{t["name"]}" dim {d}: give a value with --random (e.g. {d}=4)')
            shape.append(int(e))
        dt = np.dtype({"f32": "float32", "f16": "float16", "f64": "float64", "i64": "int64", "i32": "int32",
                       "bool": "bool", "u8": "uint8", "i8": "int8"}.get(t["dtype"], "float32"))
        if dt.kind == "f":
            feeds[t["name"]] = (rng.standard_normal(shape) * 0.5).astype(dt)
        elif dt.kind == "b":
            feeds[t["name"]] = rng.random(shape) < 0.5
        else:
            feeds[t["name"]] = rng.integers(0, 10, size=shape).astype(dt)
    return feeds
