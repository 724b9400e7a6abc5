"""What the commands print: rich tables, their number formats, and progress bars.

Command modules import this module, options.py and the library, never each other
(tests/foundation/test_cli_layers.py). rich is imported inside the functions, so that
`dspark-sim --help` starts fast.
"""
from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Callable, Iterator

import typer

if TYPE_CHECKING:
    from ..profiles.hardware import HardwareProfile
    from ..vllm.acceptance_import import ImportResult

# (label, summary key path, format[, scale]); None values print as "-".
SUMMARY_ROWS = [
    ("throughput (tok/s)", "throughput_tok_s", "{:,.0f}"),
    ("throughput / GPU (tok/s)", "throughput_tok_s_per_gpu", "{:,.0f}"),
    ("tok/s/user p10", "tps_user.p10", "{:.1f}"),
    ("tok/s/user p50", "tps_user.p50", "{:.1f}"),
    ("TTFT mean (s)", "ttft_s.mean", "{:.3f}"),
    ("TTFT p99 (s)", "ttft_s.p99", "{:.3f}"),
    ("TPOT p50 (ms)", "tpot_s.p50", "{:.2f}", 1000.0),
    ("TPOT p99 (ms)", "tpot_s.p99", "{:.2f}", 1000.0),
    ("mean verify len", "mean_verify_len", "{:.2f}"),
    ("mean tau", "mean_tau", "{:.2f}"),
    ("iterations", "iterations", "{:,}"),
    ("preemptions", "preemptions", "{:,}"),
    ("duration (s)", "duration_s", "{:,.1f}"),
    ("sim wall (s)", "sim_wall_s", "{:.2f}"),
]


def ms(seconds: float | None) -> str:
    """Seconds as '12.3 ms' ('-' for None)."""
    return "-" if seconds is None else f"{1e3 * seconds:.1f} ms"


def _lookup(summary: dict[str, Any], key: str) -> Any:
    value: Any = summary
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def summary_table(summaries: list[dict[str, Any]]):
    """A rich table of summary.json files: one column per policy, one row per metric."""
    from rich.table import Table

    first = summaries[0]
    table = Table(title=f"replay {first['trace']}  hw={first['hw']}  replicas={first['replicas']}  "
                        f"seed={first['seed']}")
    table.add_column("metric")
    for s in summaries:
        table.add_column(s["policy"], justify="right")
    for row in SUMMARY_ROWS:
        label, key, fmt = row[:3]
        scale = row[3] if len(row) > 3 else 1.0
        cells = []
        for s in summaries:
            v = _lookup(s, key)
            cells.append("-" if v is None else fmt.format(v * scale if scale != 1.0 else v))
        table.add_row(label, *cells)
    table.add_row("acceptance", *[str(s["acceptance"] or "-") for s in summaries])
    return table


def print_summaries(summaries: list[dict[str, Any]]) -> None:
    """The summary table on stdout, wide enough for every policy's column."""
    from rich.console import Console

    Console(width=max(100, 28 + 16 * len(summaries))).print(summary_table(summaries))


def print_markdown(markdown: str, title: str) -> None:
    """A markdown table (the sweep, plan and recommend tables) under a bold title."""
    from rich.console import Console
    from rich.markdown import Markdown

    console = Console(width=160)
    console.print(f"[bold]{title}[/bold]")
    console.print(Markdown(markdown))


def print_roofline(console, profile: "HardwareProfile", gpus: int) -> None:
    """An analytic profile's step time, SPS and tokens/s per GPU at round batch sizes."""
    from rich.table import Table

    table = Table(title=f"{profile.name}: {profile.device}")
    for col in ("batch tokens", "step ms", "SPS", "tokens/s per GPU"):
        table.add_column(col, justify="right")
    for b in profile.step_curve.x:
        if b in (1, 8, 32, 64, 128, 256, 512, 1024, 2048, 4096) or b == profile.step_curve.x[-1]:
            t = profile.step_time(b)
            table.add_row(f"{int(b)}", f"{t * 1e3:.2f}", f"{1 / t:.1f}", f"{b / t / gpus:,.0f}")
    console.print(table)


def print_drafts(console, prof: "HardwareProfile") -> None:
    """A measured profile's draft-step timings beside what the profile predicts."""
    from rich.table import Table

    points = prof.extra.get("draft_measurements")
    if not points:
        return
    table = Table(title="draft step per iteration (ms; per_draft: per sequential draft)")
    for col in ("kind", "R", "drafts", "ctx", "median", "p10-p90", "profile"):
        table.add_column(col, justify="right")
    for m in points:
        table.add_row(m["kind"], str(m["requests"]), str(m["width"]), str(m["context"]),
                      f"{m['median_s'] * 1e3:.2f}", f"{m['p10_s'] * 1e3:.2f}-{m['p90_s'] * 1e3:.2f}",
                      f"{prof.draft_time(m['kind'], m['requests'], 1 if m['per_draft'] else m['width']) * 1e3:.2f}"
                      + (" /draft" if m["per_draft"] else ""))
    console.print(table)


def print_points(console, extra: dict) -> None:
    """A measured profile's timed points, its fit and (when present) the roofline's."""
    from rich.table import Table

    analytic = {(r["op"], r["requests"], r["width"], r["context"]): r["analytic_s"]
                for r in extra.get("analytic_comparison", {}).get("points", [])}
    table = Table(title="measured points (ms)")
    cols = ["op", "R", "w", "ctx", "median", "p10-p90", "fit", "fit err"]
    cols += ["analytic", "analytic/measured"] if analytic else []
    for col in cols:
        table.add_column(col, justify="right")
    for m in extra["measurements"]:
        row = [m["op"], str(m["requests"]), str(m["width"]), str(m["context"]),
               f"{m['median_s'] * 1e3:.3f}", f"{m['p10_s'] * 1e3:.3f}-{m['p90_s'] * 1e3:.3f}",
               f"{m['predicted_s'] * 1e3:.3f}", f"{m['rel_error']:+.1%}"]
        key = (m["op"], m["requests"], m["width"], m["context"])
        if analytic:
            row += [f"{analytic[key] * 1e3:.3f}", f"{analytic[key] / m['median_s']:.2f}"]
        table.add_row(*row)
    console.print(table)


def print_fit(console, fit) -> None:
    """One line: how well a measured profile's curve fits its points."""
    summary = fit.summary()
    console.print(f"fit: {summary['within_spread']}/{summary['points']} points within their "
                  f"p10-p90 spread; median |error| {summary['median_abs_rel_error']:.1%}, max "
                  f"{summary['max_abs_rel_error']:.1%}; per_context_token_s = "
                  f"{fit.per_context_token_s:.3e}"
                  + (f"; per_request_s = {fit.per_request_s:.3e}" if fit.per_request_s else ""))


def print_acceptance_report(result: "ImportResult") -> None:
    """Per task: requests, steps, steps with drafts, vLLM's mean acceptance length, P(k | k-1)."""
    from rich.console import Console
    from rich.table import Table

    gamma = result.profile.gamma
    table = Table(title="acceptance imported from vLLM (P(k | k-1) with 95% Wilson CI)")
    for col in ("task", "requests", "steps", "spec steps", "mean acc. len"):
        table.add_column(col, justify="left" if col == "task" else "right")
    for k in range(gamma):
        table.add_column(f"P({k + 1}|{k})", justify="right")
    for r in result.reports:
        cells = [r.task, f"{r.requests:,}" if r.steps is not None else "-",
                 f"{r.steps:,}" if r.steps is not None else "-", f"{r.counts.num_drafts:,}",
                 f"{r.counts.mean_acceptance_length:.3f}"]
        cells += [f"{p.rate:.3f} [{p.ci95[0]:.3f}, {p.ci95[1]:.3f}]" for p in r.counts.positions()]
        table.add_row(*cells)
    Console(width=max(100, 64 + 24 * gamma)).print(table)
    for note in result.notes:
        typer.echo(f"note: {note}")


def print_trace_stats(names: list[str], results: list[dict], rows) -> None:
    """Trace statistics side by side: one column per trace, `rows` = (label, key, format)."""
    from rich.console import Console
    from rich.table import Table

    from ..traces.stats import stat_value

    table = Table(title="trace statistics")
    table.add_column("")
    for name in names:
        table.add_column(name, justify="right")
    for label, key, fmt in rows:
        table.add_row(label, *[fmt.format(stat_value(s, key)) for s in results])
    tasks = sorted({t for s in results for t in s["tasks"]})
    for t in tasks:
        table.add_row(f"task {t}", *[f"{s['tasks'].get(t, 0):,}" for s in results])
    Console(width=max(80, 24 + 18 * len(names))).print(table)


def progress_bar(description: str):
    """A rich progress bar on stderr for the long real-model commands (distill, train,
    calibrate); disabled when stderr is not a terminal: see log_line."""
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


@contextmanager
def counted_progress(console) -> Iterator[Callable[[str, int, int], None]]:
    """A transient progress bar driven by a library's `progress(label, done, total)` callback:
    the first call with a label adds its bar, later ones move it."""
    from rich.progress import Progress

    with Progress(console=console, transient=True) as bar:
        tasks: dict[str, Any] = {}

        def progress(label: str, done: int, total: int) -> None:
            if label not in tasks:
                tasks[label] = bar.add_task(label, total=total)
            bar.update(tasks[label], completed=done, total=total)
        yield progress
