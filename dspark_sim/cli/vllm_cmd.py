"""`dspark-sim import-aiperf`: an AIPerf run's records as the simulator's run files. (The
`--engine vllm` side of profile, serve-replay, validate and measure is in dspark_sim/vllm;
their commands call it.)"""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer


def register(app: typer.Typer) -> None:
    @app.command("import-aiperf")
    def import_aiperf(
        export: Path = typer.Argument(..., metavar="EXPORT", help="AIPerf's per-request records "
                                      "(profile_export.jsonl)."),
        out: Path = typer.Option(..., "--out", help="Directory for requests.csv and summary.json."),
        trace: Optional[Path] = typer.Option(None, "--trace", help="The trace AIPerf replayed, its "
                                             "ids = the records' conversation ids (serve-replay "
                                             "writes them so) [the records themselves: arrival = "
                                             "when AIPerf issued each request]."),
        policy: str = typer.Option("unknown", "--policy", help="Label of the served policy."),
    ) -> None:
        """An AIPerf run's records (yours or serve-replay's) as the simulator's requests.csv /
        summary.json, with the replay's send-time error."""
        from ..vllm.aiperf import import_run

        fidelity = import_run(export, trace, policy, out)
        typer.echo(f"wrote {out / 'requests.csv'} and {out / 'summary.json'} ({fidelity['records']} of "
                   f"{fidelity['requests']} requests recorded)")
