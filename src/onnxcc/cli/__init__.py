"""The `onnxcc` command line: a click group `main`, one module per command.

Commands stay thin: parse flags, call the library, print. Errors are handled here, once:
  - an OnnxccError prints `error: <message>` (one line) on stderr and exits with its
    `exit_code` (1 for user errors, 3 for UnsupportedOp);
  - Ctrl-C prints `interrupted` and exits 130;
  - anything else is a bug: `internal error: ...` plus a hint to report it, exit 70.
Usage errors (unknown flags, malformed values) are click's: exit 2. The codes are in
exit_codes.py. Set ONNXCC_DEBUG=1 to get the full traceback as well.
"""

from __future__ import annotations

import os
import sys
import traceback

import click

from ..errors import OnnxccError, PassError
from ..version import __version__
from .exit_codes import EXIT_INTERNAL, EXIT_INTERRUPTED, HELP


def _debug() -> bool:
    return os.environ.get("ONNXCC_DEBUG", "") not in ("", "0")


def _first_line(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return lines[0] if lines else type(e).__name__


class _Group(click.Group):
    """A click group that turns exceptions into one-line messages and exit codes."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except (click.exceptions.ClickException, click.exceptions.Exit):
            raise
        except (KeyboardInterrupt, click.exceptions.Abort):
            click.echo("interrupted", err=True)
            ctx.exit(EXIT_INTERRUPTED)
        except BrokenPipeError:  # output piped into `head` and closed: not an error
            sys.stderr.close()
            ctx.exit(0)
        except Exception as e:
            internal = not isinstance(e, OnnxccError) or (
                isinstance(e, PassError) and not isinstance(e.cause, OnnxccError))
            if _debug():
                traceback.print_exc(file=sys.stderr)
            if internal:
                what = _first_line(e)
                if not isinstance(e, OnnxccError):
                    what = f"{type(e).__name__}: {what}"
                click.echo(f"internal error: {what}", err=True)
                click.echo("this is a bug in onnxcc; please report it with the model and the command line"
                           + ("" if _debug() else " (ONNXCC_DEBUG=1 shows the traceback)"), err=True)
                ctx.exit(EXIT_INTERNAL)
            click.echo(f"error: {_first_line(e)}", err=True)
            ctx.exit(getattr(e, "exit_code", 1))


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]}, epilog=HELP)
@click.version_option(__version__, prog_name="onnxcc")
def main() -> None:
    """onnxcc: ahead-of-time compiler for ONNX models with symbolic shapes."""


# One module per command (compile, run, inspect, simulate join here as they are written).
from .cache_cmd import cache  # noqa: E402
from .compile_cmd import compile_  # noqa: E402
from .inspect_cmd import inspect  # noqa: E402
from .ir_cmd import ir  # noqa: E402
from .run_cmd import run  # noqa: E402
from .simulate_cmd import simulate  # noqa: E402

for _command in (ir, compile_, run, inspect, simulate, cache):
    main.add_command(_command)
