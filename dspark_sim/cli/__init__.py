"""The `dspark-sim` command line: a typer app assembled from one module per room.

Each command module (`*_cmd.py`) exposes `register(app)`; commands parse options, call the
library and print. They import options.py (the options several commands share), render.py
(tables, number formats, progress bars) and the library, never each other
(tests/foundation/test_cli_layers.py). Heavy libraries (torch, transformers) are imported
inside the commands that need them, so `dspark-sim --help` and the simulator commands start fast.
"""
from __future__ import annotations

import sys
import warnings

import typer

from ..errors import EngineError, InputError

app = typer.Typer(
    name="dspark-sim",
    help="Simulate and plan LLM serving with speculative decoding "
         "(none, MTP-1, static-k, DSpark confidence-scheduled verification).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

# Command modules register themselves here (one per room; see architecture.md).
_COMMAND_MODULES: list[str] = ["profiles_cmd", "hardware_cmd", "traces_cmd", "sim_cmd", "decode_cmd",
                               "train_cmd", "calibrate_cmd", "serve_cmd", "sweep_cmd", "vllm_cmd", "acceptance_cmd",
                               "recommend_cmd", "published_cmd"]
# Modules whose commands join a group that a module above registers: group name -> modules.
_SUBCOMMAND_MODULES: dict[str, list[str]] = {"profile": ["fit_cmd"]}


def _register_all() -> None:
    import importlib

    for name in _COMMAND_MODULES:
        importlib.import_module(f"{__name__}.{name}").register(app)
    groups = {g.name: g.typer_instance for g in app.registered_groups}
    for group, names in _SUBCOMMAND_MODULES.items():
        for name in names:
            importlib.import_module(f"{__name__}.{name}").register(groups[group])


_register_all()


def _format_warning(message, category, filename, lineno, line=None) -> str:
    """A warning as one line on stderr, named by its class (no source line)."""
    return f"warning: {category.__name__}: {message}\n"


def _terminate(signum, frame) -> None:
    """SIGTERM unwinds like an exit, so servers this command started are stopped on the way."""
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; bad input exits with status 2 and a one-line message, never a traceback."""
    import signal
    import threading

    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _terminate)
    warnings.formatwarning = _format_warning
    try:
        rc = app(args=argv, prog_name="dspark-sim", standalone_mode=False)
    except InputError as exc:
        typer.echo(f"error: {exc}", err=True)
        return 2
    except EngineError as exc:
        typer.echo(f"engine error: {exc}", err=True)
        return 1
    except typer.Abort:
        typer.echo("aborted", err=True)
        return 1
    except typer.Exit as exc:
        return exc.exit_code
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        return 130
    except Exception as exc:
        # Usage errors of click (or typer's vendored click): they know how to show themselves.
        if hasattr(exc, "show") and isinstance(getattr(exc, "exit_code", None), int):
            exc.show()
            return exc.exit_code
        raise
    if rc == 130:       # typer turns a Ctrl-C inside a command into exit code 130, silently
        typer.echo("interrupted", err=True)
    return rc if isinstance(rc, int) else 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
