"""`dspark-sim validate-published`: replay published GPU sweeps from their baseline arm
(dspark_sim/published/, docs/hardware.md "Published GPU cases")."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..errors import InputError


def register(app: typer.Typer) -> None:
    # A sibling of `validate` (whose first argument is a trace path, so it cannot take a
    # `published` subcommand without breaking `validate TRACE`).
    @app.command("validate-published")
    def validate_published(
        cases: Optional[list[str]] = typer.Argument(None, metavar="[CASE]...", help="Shipped case "
                                                    "names (dspark_sim/data/published_cases/) or case "
                                                    "files [every shipped case]."),
        out: Path = typer.Option(Path("runs/validate-published"), "--out", help="Output directory: "
                                 "table.md / table.json (error table) and CASE.png (overlay)."),
        requests_per_user: int = typer.Option(4, "--requests-per-user", help="Closed-loop requests "
                                              "per simulated user, fit and prediction."),
        rounds: int = typer.Option(2, "--rounds", help="Simulator correction rounds of the fit."),
        bootstrap: int = typer.Option(40, "--bootstrap", help="Bootstrap samples of the fit's spread."),
        seed: int = typer.Option(0, "--seed", help="Simulation and bootstrap seed."),
        list_cases: bool = typer.Option(False, "--list", help="List the shipped cases and exit."),
    ) -> None:
        """Fit each case's baseline arm with `profile fit`, predict every speculative arm at every
        published load with the simulator, and write the error table and overlay plots (with no
        CASE given, the published cost models are also compared with the roofline)."""
        from rich.console import Console
        from rich.progress import Progress

        from ..published.cases import resolve_cases, shipped_cases
        from ..published.cost_models import compare, load_cost_model, markdown, shipped_cost_models
        from ..published.predict import run_case
        from ..published.report import write_report

        if list_cases:
            for name, path in shipped_cases().items():
                typer.echo(f"{name}\t{path}")
            return
        if requests_per_user < 2 or rounds < 0 or bootstrap < 0:
            raise InputError("--requests-per-user >= 2, --rounds >= 0, --bootstrap >= 0",
                             field="requests-per-user")
        loaded = resolve_cases(cases or [])
        effort = {"requests_per_user": requests_per_user, "rounds": rounds, "bootstrap": bootstrap,
                  "seed": seed}
        console = Console(stderr=True)
        results = []
        with Progress(console=console, transient=True) as bar:
            for case in loaded:
                n = len(case.loads) * (rounds + 1 + len(case.arms) - 1)
                task = bar.add_task(case.name, total=n)
                results.append(run_case(case, effort, lambda _label, t=task: bar.advance(t)))
                console.print(f"{case.name}: {results[-1].draft_summary}")
        meta = {"cases": [c.name for c in loaded],
                "settings": f"requests per user {requests_per_user}, fit rounds {rounds}, "
                            f"bootstrap {bootstrap}, seed {seed}"}
        models = [] if cases else [(markdown(cm, rows), rows) for cm in map(load_cost_model, shipped_cost_models())
                                   for rows in [compare(cm)]]
        written = write_report(results, out, meta, models)
        typer.echo(written[0].read_text())
        typer.echo("wrote " + ", ".join(str(w) for w in written))
