"""`onnxcc compile MODEL -o DIR`: build libNAME.so + NAME.h + NAME.json (or stop at --emit)."""

from __future__ import annotations

from pathlib import Path

import click

from ..compiler.options import EMIT_STAGES
from .options import compile_flags
from .progress import Progress


@click.command("compile")
@click.argument("model", type=click.Path(path_type=Path))
@click.option("-o", "--output", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              help="artifact directory (default: ./NAME)")
@click.option("--emit", type=click.Choice(EMIT_STAGES), default="lib",
              show_default=True,
              help="stop after this stage; all but lib print the stage's text to stdout")
@click.option("--print-ir-after-all", is_flag=True,
              help="print the IR after every pass, graph and kernel (stderr)")
@click.option("--print-ir-after", "print_after", multiple=True, metavar="PASS",
              help="print the IR after this pass (e.g. canonicalize, fuse, plan-memory; stderr); repeatable")
@click.option("--dump-dir", type=click.Path(file_okay=False, path_type=Path),
              help="IR after each pass, one file each, numbered across the build (NNN_<pass>.onnxir / .kir)")
@click.option("--time-passes", is_flag=True, help="report the time of every pass and build step (stderr)")
@click.option("-q", "--quiet", is_flag=True, help="no progress on the terminal and no summary line")
@compile_flags
def compile_(model: Path, out_dir: Path | None, emit: str, print_ir_after_all: bool,
             print_after: tuple[str, ...], dump_dir: Path | None, time_passes: bool, quiet: bool, options) -> None:
    """Compile MODEL (.onnx or .onnxir) into a guarded multi-version shared library."""
    from ..compiler import compile_model
    from ..passes import DumpDir, PassContext, PrintAfter, TimePasses, VerifyAfterEach, get_pass

    for name in print_after:
        get_pass(name)  # an unknown pass name is an error, not a silent no-op
    instruments = [VerifyAfterEach()]
    if print_ir_after_all or print_after:
        instruments.append(PrintAfter(None if print_ir_after_all else set(print_after)))
    if dump_dir is not None:
        instruments.append(DumpDir(dump_dir))
    timer = TimePasses() if time_passes else None
    if timer:
        instruments.append(timer)
    progress = Progress() if Progress.wanted(quiet or print_ir_after_all or bool(print_after)) else None
    if progress:
        instruments.append(progress)
    out = out_dir or Path(options.name or model.stem)
    try:
        art = compile_model(model, out, options, emit=emit, pass_ctx=PassContext(instruments=instruments))
    finally:
        if progress:
            progress.finish()
    if emit != "lib":
        click.echo(art.text, nl=not art.text.endswith("\n"))
    elif not quiet:
        import json

        meta = json.loads(art.metadata.read_text())
        n = len(meta.get("versions", []))
        click.echo(f"wrote {art.library} ({n} version{'s' if n != 1 else ''}), {art.header}, {art.metadata}")
        for why in meta.get("metadata", {}).get("dropped_versions", []):  # never dropped without a word
            click.echo(f"warning: version {why}", err=True)
    if timer:
        click.echo(timer.report(), err=True)
