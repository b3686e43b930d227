"""Tables that survive pipes: a rich Console drawn at the terminal's width on a terminal, and at the
content's own width (nothing cut to "Qw…") when stdout is a pipe or a file; plus the `--json` printer.

Every command that prints a table also has `--json`; the table is for people, the JSON for scripts.
"""
from __future__ import annotations

import json
import os
import sys
from typing import IO, Any

# wide enough that no table or line is ever cut or wrapped when the output is not a terminal
PIPE_WIDTH = 4000


def is_terminal(stream: IO | None = None) -> bool:
    stream = stream or sys.stdout
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def console(stream: IO | None = None):
    """A rich Console for `stream` (stdout): terminal width on a terminal, unlimited width otherwise.

    A reader that stops early (`| head`) is not an error: the rest is dropped and the exit code is 0,
    the same as the CLI's own BrokenPipeError handling (rich's default would exit 1)."""
    from rich.console import Console

    class PipeConsole(Console):
        def on_broken_pipe(self) -> None:
            self.quiet = True
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise SystemExit(0)

    stream = stream or sys.stdout
    if is_terminal(stream):
        return PipeConsole(file=stream)
    return PipeConsole(file=stream, width=PIPE_WIDTH, color_system=None, soft_wrap=True)


def print_json(data: Any, stream: IO | None = None) -> None:
    """JSON for scripts: indented, keys in insertion order, non-JSON values as strings."""
    print(json.dumps(data, indent=2, default=str), file=stream or sys.stdout)
