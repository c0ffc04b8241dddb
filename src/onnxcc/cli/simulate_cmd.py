"""`onnxcc simulate MODEL --trace FILE`: replay a trace against four compile policies."""

from __future__ import annotations

from pathlib import Path

import click

from ..errors import OnnxccError
from .options import check_within_dims, compile_flags, parse_assignments


@click.command("simulate")
@click.argument("model", type=click.Path(path_type=Path))
@click.option("--set", "fixed_text", default="", metavar="SYM=V,...",
              help="values of the symbols the trace does not cover (default 1 each)")
@click.option("--repeats", type=int, default=3, show_default=True,
              help="timed runs per distinct value (median)")
@click.option("--jobs", type=int, default=None,
              help="parallel artifact builds (default: half the cores, at most 8)")
@click.option("--chunk", type=int, default=16, show_default=True,
              help="exact versions per artifact for the specialise policy")
@click.option("--chart", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="write the comparison as an SVG bar chart")
@click.option("--json", "json_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="write the results as JSON")
@click.option("--work-dir", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="keep the built artifacts here (default: a temporary directory)")
@compile_flags
def simulate(model: Path, fixed_text: str, repeats: int, jobs: int | None, chunk: int, chart: Path | None,
             json_path: Path | None, work_dir: Path | None, options, trace: Path | None, max_buckets: int,
             bucket_choices: list, auto_buckets: list) -> None:
    """Replay the trace (observed values of one symbol) against specialise-each-shape,
    bucket (given or automatic), pad-to-max and symbolic, measuring compile and run time."""
    from .. import simulate as sim
    from ..passes.bucket_choice import read_trace

    if trace is None:
        raise OnnxccError("simulate needs --trace FILE (observed values, one per line or VALUE,COUNT)")
    if not model.is_file():
        raise OnnxccError(f"{model}: no such file")
    pairs = read_trace(trace)
    fixed = parse_assignments(fixed_text, "--set")
    symbols = list(options.buckets) + [s for s in auto_buckets if s not in options.buckets]
    if len(symbols) > 1:
        raise OnnxccError(f"simulate replays one symbol; --bucket names {', '.join(symbols)}")
    if symbols:
        symbol = symbols[0]
    else:
        m = sim.prepared_module(model, options)
        free = [s.name for s in m.symbols if s.name not in fixed]
        symbol = "seq" if "seq" in free else (free[0] if len(free) == 1 else None)
        if symbol is None:
            raise OnnxccError(f"simulate: say which symbol the trace holds with --bucket SYM=auto "
                              f"(symbols: {', '.join(free)})")
        check_within_dims(options.dims, {symbol: [v for v, _ in pairs]}, "--trace")
        choice = sim.auto_buckets(model, options, symbol, pairs, max_buckets, fixed)
        click.echo(choice.report(), err=True)
        bucket_choices = [choice]
        options.buckets = {symbol: choice.buckets}
    check_within_dims(options.dims, {symbol: [v for v, _ in pairs]}, "--trace")
    buckets = options.buckets[symbol]
    n = sum(c for _, c in pairs)
    click.echo(f"trace: {n} requests, {len(pairs)} distinct {symbol} values in [{pairs[0][0]}, "
               f"{pairs[-1][0]}]; other symbols: {fixed or 'all 1'}", err=True)
    for c in bucket_choices:
        click.echo(f"auto buckets {c.symbol} = {','.join(map(str, c.buckets))} (waste {100 * c.waste:.2f}%); "
                   f"power-of-two {','.join(map(str, c.pow2))} (waste {100 * c.pow2_waste:.2f}%)")
    results = sim.simulate(model, pairs, symbol, buckets, options, fixed, repeats=repeats,
                           jobs=jobs or sim.default_jobs(), chunk=chunk, workdir=work_dir,
                           log=lambda msg: click.echo(msg, err=True))
    click.echo(sim.format_table(results))
    click.echo(sim.METHOD_NOTE)
    if chart is not None:
        chart.write_text(sim.svg_chart(results, f"{model.name}: {n} requests, {symbol} in "
                                                f"[{pairs[0][0]}, {pairs[-1][0]}]"))
        click.echo(f"wrote {chart}")
    if json_path is not None:
        json_path.write_text(sim.results_json(results))
