"""What the CLI's long real-model commands (distill, train, calibrate) share: a progress bar,
plain progress lines when stderr is not a terminal (logs), and the target loaded with a
thread count. Not a command module."""
from __future__ import annotations

import sys

import typer


def progress_bar(description: str):
    """A rich progress bar on stderr (disabled when stderr is not a terminal: see log_line)."""
    from rich.console import Console
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn,
                               TimeElapsedColumn, TimeRemainingColumn)

    return Progress(TextColumn(description), BarColumn(), MofNCompleteColumn(),
                    TextColumn("{task.fields[info]}"), TimeElapsedColumn(), TimeRemainingColumn(),
                    console=Console(stderr=True), disable=not sys.stderr.isatty())


def log_line(line: str) -> None:
    """A progress line on stderr where the bar is off (stderr redirected to a log)."""
    if not sys.stderr.isatty():
        typer.echo(line, err=True)


def load_target_threads(spec: str, device: str, threads: int):
    """The target `spec` on `device`, with torch limited to `threads` threads (0: torch's default)."""
    import torch

    from ..decode.loading import load_target

    if threads > 0:
        torch.set_num_threads(threads)
    return load_target(spec, device)
