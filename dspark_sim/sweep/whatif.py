"""What-if transforms of the inputs a planner varies (a better or worse drafter) and the headroom
of a deployment (the traffic at which its SLA breaks)."""
from __future__ import annotations

import copy

import numpy as np
from scipy.optimize import brentq

import pandas as pd

from ..errors import InputError
from ..profiles.acceptance import AcceptanceProfile
from .frontier import tps_column


def improved_acceptance(profile: AcceptanceProfile, tau_factor: float) -> AcceptanceProfile:
    """The drafter made better: per task, every position's acceptance scaled by one factor c
    (capped at 1) so that tau = 1 + sum_k prod_{i<=k} min(1, c alpha_i) is tau_factor x the
    original's (tau_factor = 1.1: a drafter 10% better in accepted length). Parametric tasks only."""
    if not tau_factor > 0:
        raise InputError(f"must be > 0, got {tau_factor}", field="tau_factor")
    out = copy.deepcopy(profile)
    g = profile.gamma
    for name, task in out.tasks.items():
        if task.kind != "parametric":
            raise InputError(f"task {name!r} is empirical; only parametric tasks can be rescaled",
                             field=f"tasks.{name}")
        alpha = np.asarray(task.position_accept, dtype=float)[:g]
        target = tau_factor * task.mean_tau(g)

        def tau(c: float) -> float:
            return 1.0 + float(np.cumprod(np.minimum(1.0, c * alpha)).sum())

        top = 1.0 / max(float(alpha[alpha > 0].min(initial=1.0)), 1e-9)   # every alpha reaches 1
        if not tau(0.0) <= target <= tau(top):
            raise InputError(f"task {name!r}: tau {task.mean_tau(g):.3f} x {tau_factor} = {target:.3f} "
                             f"is outside what gamma = {g} drafts allow ({tau(0.0):.0f}..{tau(top):.3f})",
                             field="tau_factor")
        c = brentq(lambda v: tau(v) - target, 0.0, top, xtol=1e-12)
        _scale_task(task, c)
    out.name = f"{profile.name}-tau-x{tau_factor:g}"
    out.extra = {**profile.extra, "derived_from": profile.name,
                 "notes": f"position acceptance scaled so that every task's tau is x{tau_factor:g}"}
    return out


def _scale_task(task, factor: float) -> None:
    """Every position's conditional acceptance x factor, capped at 1 (in place)."""
    task.position_accept = np.minimum(1.0, factor * np.asarray(task.position_accept, dtype=float))


def scaled_acceptance(profile: AcceptanceProfile, factor: float) -> AcceptanceProfile:
    """Every task's per-position acceptance alpha_k x factor (capped at 1): the sensitivity
    view's input (`dspark-sim sweep --acceptance-scale`). Parametric tasks only."""
    if not factor > 0:
        raise InputError(f"must be > 0, got {factor}", field="acceptance-scale")
    out = copy.deepcopy(profile)
    for name, task in out.tasks.items():
        if task.kind != "parametric":
            raise InputError(f"task {name!r} of {profile.name} is empirical; only parametric "
                             "tasks can be scaled", field="acceptance-scale")
        _scale_task(task, factor)
    out.name = f"{profile.name}-x{factor:g}"
    out.extra = {**profile.extra, "derived_from": profile.name,
                 "notes": f"every position's acceptance x{factor:g} (capped at 1) of {profile.name}"}
    return out


def sla_break(results: pd.DataFrame, policy: str, sla: float, percentile: int | str) -> dict[str, float]:
    """Headroom of one policy in a rate-load sweep (loads = traffic factors): the highest factor up
    to which every swept factor meets the SLA and is not overloaded (`holds_to`), the first that
    fails (`breaks_at`, NaN if none did), seed by seed (a factor holds only if every seed holds)."""
    rows = results[results["policy"] == policy]
    ok = (rows[tps_column(percentile)] >= sla) & ~rows["overloaded"].astype(bool)
    by_load = ok.groupby(rows["load"]).all().sort_index()
    failed = by_load.index[~by_load.to_numpy()]
    first_fail = float(failed.min()) if len(failed) else float("nan")
    held = by_load.index[by_load.index < first_fail] if len(failed) else by_load.index
    return {"holds_to": float(held.max()) if len(held) else float("nan"), "breaks_at": first_fail}
