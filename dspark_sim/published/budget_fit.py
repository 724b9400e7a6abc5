"""What a published verification budget says that the baseline arm cannot: a diagnostic.

The baseline arm (one verify width per request) fixes the cost a user adds to an iteration, not
its split between per-token and per-request cost (published/predict.py), and it says nothing of
how much the drafter's confidences know about each step's run (`confidence_correlation`, the
parametric sampler's rho). Both decide how many tokens a confidence-scheduled policy verifies at
each load: a costlier extra verify token (a low per-request share) makes it verify less as load
rises, better-informed confidences make it skip hopeless tails even when verifying is cheap.

Where a speculative arm publishes its verification budget (tokens verified per request per
iteration, by load: the DSpark paper's Fig. 8 (c, d)), this module searches a grid of
(per-request share, rho) for the pair whose simulated budget is nearest the published one, and
reports the arm's gains under it. It reads the arm's budget, never its throughput; it is not the
prediction (that stays the baseline-only fit), and each row keeps both.

The share grid keeps the fit's cost per added user at the baseline's verify width (so the
baseline arm is reproduced at every share, as the split prior's draws are); rho applies to the
budgeted arm's acceptance only.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable

import numpy as np

from ..profiles.acceptance import AcceptanceProfile
from ..sweep.calibrate import Calibration, FitResult
from ..sweep.load_replay import FitConfig, simulate_load
from ..sweep.split_prior import request_share, user_tokens_and_context
from .cases import Arm, Case

SHARES = (0.0, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6)      # per-request share of the cost per added user
RHOS = (0.0, 0.2, 0.4, 0.6, 0.8)                  # confidence correlation of the budgeted arm


@dataclass
class BudgetFit:
    """The (share, rho) nearest one arm's published budget, and what the arm gains under it."""

    arm: str
    share: float
    rho: float
    mismatch: float                          # mean |log(simulated / published budget)| over loads
    budgets: list[float]                     # simulated, per load
    gains: dict[int, float] = field(default_factory=dict)      # load -> arm / baseline
    fitted_share: float = 0.0                # the baseline fit's own per-request share
    grid: str = ""


def with_share(params: dict[str, float], tokens: float, share: float) -> dict[str, float]:
    """`params` with the cost per added user (tokens x per_token_s + per_request_s) kept and a
    `share` of it per-request."""
    total = tokens * params["per_token_s"] + params.get("per_request_s", 0.0)
    return {**params, "per_token_s": (1.0 - share) * total / tokens, "per_request_s": share * total}


def with_rho(acc: AcceptanceProfile, rho: float) -> AcceptanceProfile:
    """The acceptance profile with every parametric task's confidence correlation set to `rho`."""
    tasks = {k: replace(t, confidence_correlation=rho) if t.kind == "parametric" else t
             for k, t in acc.tasks.items()}
    return replace(acc, tasks=tasks)


def budgeted_arms(case: Case) -> list[Arm]:
    """Speculative arms that publish a verification budget that varies with load."""
    return [a for a in case.arms if a.name != case.baseline and a.budget is not None
            and a.acceptance is not None and len(set(a.budget.values)) > 1]


def grid_steps(case: Case) -> int:
    """Progress steps `fit_budgets` reports for the case (one per grid point per budgeted arm)."""
    return len(budgeted_arms(case)) * len(SHARES) * len(RHOS)


def fit_budgets(case: Case, points_of: Callable, result: FitResult, cfg: FitConfig,
                progress: Callable[[str], None] | None = None) -> list[BudgetFit]:
    """The grid search for every budgeted arm of the case (`points_of(arm)`: the arm's load
    points, the baseline's as fitted)."""
    arms = budgeted_arms(case)
    if not arms:
        return []
    base_points = points_of(case.arm(case.baseline))
    cal = Calibration(base_points, cfg)
    tokens = user_tokens_and_context(cal)[0]
    out = []
    for arm in arms:
        pub = np.asarray(arm.budget.values, dtype=float)
        arm_points = points_of(arm)
        best = None
        for share in SHARES:
            prof = cal.profile(with_share(result.params, tokens, share))
            base_thr = [simulate_load(prof, obs, users, cfg).throughput_tok_s_per_gpu
                        for users, obs in zip(case.loads, base_points)]
            for rho in RHOS:
                acc = with_rho(arm.acceptance, rho)
                sims = [simulate_load(prof, obs, users, cfg, acc) for users, obs in zip(case.loads, arm_points)]
                budgets = np.array([s.verify_tokens for s in sims])
                miss = float(np.mean(np.abs(np.log(budgets / pub))))
                if best is None or miss < best.mismatch - 1e-12:
                    best = BudgetFit(arm.name, share, rho, miss, [float(b) for b in budgets],
                                     {u: s.throughput_tok_s_per_gpu / b
                                      for u, s, b in zip(case.loads, sims, base_thr)})
                if progress:
                    progress(f"{arm.name} budget grid: share {share:.0%}, rho {rho:g}")
        best.fitted_share = request_share(result.params, tokens)
        best.grid = (f"shares {', '.join(f'{s:.0%}' for s in SHARES)} x confidence correlations "
                     f"{', '.join(f'{r:g}' for r in RHOS)}")
        out.append(best)
    return out


def add_budget_rows(rows: list[dict], fits: list[BudgetFit]) -> None:
    """Each budgeted arm's rows get the budget-informed gain and its error."""
    by_arm = {f.arm: f for f in fits}
    for r in rows:
        f = by_arm.get(r["arm"])
        if f is None or r["baseline"]:
            continue
        g = float(f.gains[r["load"]])
        r["budget_informed_gain"] = g
        r["budget_informed_gain_error"] = g / r["published_gain"] - 1


def describe(fit: BudgetFit, case: Case, rows: list[dict], target: float = 0.15) -> str:
    """One paragraph for the report."""
    arm = case.arm(fit.arm)
    mine = [r for r in rows if r["arm"] == fit.arm and not r["baseline"]]
    within = sum(abs(r["budget_informed_gain_error"]) <= target for r in mine)
    loads = " / ".join(str(u) for u in case.loads)
    return (f"{arm.label}: budget-informed diagnostic (uses the arm's published verification budget, "
            f"never its throughput; not the prediction): over a grid of {fit.grid}, the simulated "
            f"budget nearest the published one (mean |log ratio| {fit.mismatch:.3f}) is at a "
            f"per-request share of {fit.share:.0%}{_edge(fit.share, SHARES)} (the baseline fit's: "
            f"{fit.fitted_share:.0%}) and confidence correlation {fit.rho:g}{_edge(fit.rho, RHOS)}: budget "
            + " / ".join(f"{b:.2f}" for b in fit.budgets)
            + " against the published " + " / ".join(f"{b:.2f}" for b in arm.budget.values)
            + f" at loads {loads}; gains under it "
            + " ".join(f"x{r['budget_informed_gain']:.2f}" for r in mine)
            + " (errors " + " ".join(f"{r['budget_informed_gain_error']:+.0%}" for r in mine)
            + f"), within {target:.0%} on {within} of {len(mine)}.")


def _edge(value: float, grid: tuple[float, ...]) -> str:
    """A warning when the nearest budget lies at an end of the grid (the best may lie beyond)."""
    return " (the grid's end)" if value in (grid[0], grid[-1]) else ""
