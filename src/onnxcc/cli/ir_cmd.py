"""`onnxcc ir MODEL`: import a model (or read textual IR), run a pass pipeline, print the IR."""

from __future__ import annotations

from pathlib import Path

import click


@click.command("ir")
@click.argument("model", type=click.Path(path_type=Path))
@click.option("-p", "--pipeline", default=None, metavar="PIPELINE",
              help='passes to run, e.g. "shape-inference,canonicalize" (default: the graph pipeline; '
                   '"" runs none)')
@click.option("--print-ir-after-all", is_flag=True, help="print the IR after every pass (stderr)")
@click.option("--print-ir-after", "print_after", multiple=True, metavar="PASS",
              help="print the IR after this pass (stderr); repeatable")
@click.option("--dump-dir", type=click.Path(file_okay=False, path_type=Path),
              help="write the IR after each pass to DIR/NNN_<pass>.onnxir")
@click.option("--time-passes", is_flag=True, help="report the time each pass took (stderr)")
@click.option("--no-verify", is_flag=True, help="do not verify the IR on input and after each pass")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path),
              help="write the final IR here instead of stdout")
@click.option("--format", "fmt", type=click.Choice(["text", "dot"]), default="text", show_default=True,
              help="text: the IR (parses back); dot: Graphviz (types on edges, big constants elided)")
def ir(model: Path, pipeline: str | None, print_ir_after_all: bool, print_after: tuple[str, ...],
       dump_dir: Path | None, time_passes: bool, no_verify: bool, output: Path | None, fmt: str) -> None:
    """Print MODEL (.onnx or .onnxir) as IR after running PIPELINE on it."""
    from .. import load_model, print_ir
    from ..ir.verify import verify
    from ..passes import (
        DumpDir,
        PassContext,
        PrintAfter,
        TimePasses,
        VerifyAfterEach,
        get_pass,
        parse_pipeline,
        run_pipeline,
    )
    from ..passes.pipelines import DEFAULT_GRAPH_PIPELINE

    passes = parse_pipeline(DEFAULT_GRAPH_PIPELINE if pipeline is None else pipeline)
    for name in print_after:
        get_pass(name)  # an unknown pass name is an error, not a silent no-op
    module = load_model(model)
    instruments = []
    if not no_verify:
        verify(module)
        instruments.append(VerifyAfterEach())
    if print_ir_after_all or print_after:
        instruments.append(PrintAfter(None if print_ir_after_all else set(print_after)))
    if dump_dir is not None:
        instruments.append(DumpDir(dump_dir))
    timer = TimePasses() if time_passes else None
    if timer is not None:
        instruments.append(timer)

    run_pipeline(module, passes, PassContext(instruments=instruments))
    if fmt == "dot":
        from .dot import module_dot

        text = module_dot(module)
    else:
        text = print_ir(module)
    if output is not None and fmt == "text":
        from ..frontend.model_file import write_ir

        write_ir(module, output, print_ir)  # the weights beside it: the file compiles on its own
    elif output is not None:
        output.write_text(text)
    else:
        click.echo(text, nl=False)
    if timer is not None:
        click.echo(timer.report(), err=True)
