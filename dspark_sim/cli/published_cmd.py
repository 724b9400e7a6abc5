"""`dspark-sim validate-published`: replay published GPU sweeps from their baseline arm
(dspark_sim/published/, docs/hardware.md "Published GPU cases")."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from .options import check_at_least


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
                                              "per simulated user, fit and prediction, for cases "
                                              "that do not publish how many requests each cell ran "
                                              "(`measured_requests`: those replay as long as the "
                                              "published run, requests / users per user, from 3 "
                                              "to --max-requests-per-user; at least 3: the steady "
                                              "window of a 2-request loop holds one request)."),
        max_requests_per_user: int = typer.Option(64, "--max-requests-per-user", help="Cap on the "
                                                  "requests per user of a case that publishes its "
                                                  "run length."),
        rounds: int = typer.Option(2, "--rounds", help="Simulator correction rounds of the fit."),
        bootstrap: int = typer.Option(40, "--bootstrap", help="Bootstrap samples of the fit's spread."),
        seed: int = typer.Option(0, "--seed", help="Simulation and bootstrap seed."),
        interval_draws: int = typer.Option(2, "--interval-draws", help="Fit draws simulated per case "
                                           "with a split prior, at evenly spaced quantiles (10th..90th) "
                                           "of the per-request share, for each row's gain interval "
                                           "(0: no interval); the first and last also take the ends "
                                           "of the case's eager-cost and acceptance ranges and of the "
                                           "draft pricing's band (x/÷ 2.35, hardware/draft_cost.py)."),
        one_cell: bool = typer.Option(True, "--one-cell/--no-one-cell", help="Diagnostic: per "
                                      "speculative arm with 3+ loads, fit the baseline arm again with "
                                      "the arm's middle cell (so draft_scale, the speculative path's "
                                      "own cost, is fitted too) and predict its other loads; reported "
                                      "beside the prediction, never as it."),
        list_cases: bool = typer.Option(False, "--list", help="List the shipped cases and exit."),
    ) -> None:
        """Fit each case's baseline arm with `profile fit`, predict every speculative arm at every
        published load with the simulator, and write the error table and overlay plots (with no
        CASE given, the published cost models are also compared with the roofline)."""
        from rich.console import Console
        from rich.progress import Progress

        from ..published.budget_fit import grid_steps
        from ..published.cases import resolve_cases, shipped_cases
        from ..published.cost_models import compare, load_cost_model, markdown, shipped_cost_models
        from ..published.predict import run_case
        from ..published.report import write_report
        from ..sweep.load_replay import MIN_REQUESTS_PER_USER

        if list_cases:
            for name, path in shipped_cases().items():
                typer.echo(f"{name}\t{path}")
            return
        check_at_least(("requests-per-user", requests_per_user, MIN_REQUESTS_PER_USER),
                       ("max-requests-per-user", max_requests_per_user, MIN_REQUESTS_PER_USER),
                       ("rounds", rounds, 0), ("bootstrap", bootstrap, 0),
                       ("interval-draws", interval_draws, 0))
        loaded = resolve_cases(cases or [])
        effort = {"requests_per_user": requests_per_user, "max_requests_per_user": max_requests_per_user,
                  "rounds": rounds, "bootstrap": bootstrap, "seed": seed}
        console = Console(stderr=True)
        results = []
        with Progress(console=console, transient=True) as bar:
            for case in loaded:
                fits = 2 if case.fit.get("split_prior") else 1
                draws = interval_draws if fits == 2 else 0
                spec_arms = len(case.arms) - 1 if one_cell and len(case.loads) >= 3 else 0
                n = len(case.loads) * (fits * (rounds + 1) + len(case.arms) - 1 + draws * len(case.arms)) \
                    + grid_steps(case) + spec_arms * (len(case.loads) + 1) * (fits * (rounds + 1) + 2)
                task = bar.add_task(case.name, total=n)
                results.append(run_case(case, effort, lambda _label, t=task: bar.advance(t),
                                        interval_draws=interval_draws, with_one_cell=one_cell))
                console.print(f"{case.name}: {results[-1].draft_summary}")
        meta = {"cases": [c.name for c in loaded],
                "settings": f"requests per user {requests_per_user} (cases with a published run "
                            f"length: as long as the run, at most {max_requests_per_user}), fit rounds {rounds}, "
                            f"bootstrap {bootstrap}, interval draws {interval_draws}, seed {seed}"
                            + ("" if one_cell else ", no one-cell diagnostic")}
        models = [] if cases else [(markdown(cm, rows), rows) for cm in map(load_cost_model, shipped_cost_models())
                                   for rows in [compare(cm)]]
        written = write_report(results, out, meta, models)
        typer.echo(written[0].read_text())
        typer.echo("wrote " + ", ".join(str(w) for w in written))
