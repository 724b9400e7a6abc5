"""Replay one published case: fit its baseline arm with `profile fit`'s own code, predict the rest.

1. The baseline arm's loads become `profile fit` load points (closed loop at the published
   concurrency, the case's mean lengths and prefill placement; tok/s/user as published, or from
   Little's law) and are fitted with `sweep.calibrate.Calibration` (the product's fit: family,
   fixed parameters and draft-cost source from the case).
2. Every speculative arm is simulated at every published load under the fitted profile, with the
   acceptance profile built from the arm's published acceptance (marked as such).
3. Each row: predicted and published gain over the baseline arm at that load, the throughput
   error, whether the prediction needed batch sizes the fit never saw (`extrapolated`), and for
   a published loss (gain < 1) whether the prediction is on the same side.

What a baseline arm cannot tell: at one verify width per request (no speculation; MTP-1 is two)
the cost per token and the cost per request rise together with load, so the arm fixes the cost
a user adds, not its split, and the split is what prices speculation's extra verify tokens. A
case with `fit.split_prior` is refitted with priors on both parts (`sweep/split_prior.py`, the
code `profile fit --split-prior` runs), and each arm is also simulated under the fit's draws at
evenly spaced quantiles (10th..90th) of the per-request share; the row's gain interval is the
range over those and the point estimate. Where the case gives sourced bounds, the draw least
favourable to speculation also takes the highest eager cost (`eager_range`) and each arm's lowest
acceptance (`acceptance.range.low`), the most favourable the lowest eager cost and the highest
acceptance. Where drafting is priced from a shape and the baseline arm cannot see it (every
shipped case), the least favourable draw also takes draft_scale at the shape pricing's measured
band (x SHAPE_PRICING_BAND, hardware/draft_cost.py) and the most favourable at its inverse, so the
width also spans the drafter's cost. A baseline arm that drafts itself (MTP-1) has its own
drafting scaled with it, and the draw is re-solved at that price so that the side still meets
the baseline arm's observations (`Calibration.resolve_draw`; until the seventeenth stop of issue
41 the side kept the target step its draw was solved with at its own sampled price).
"""
from __future__ import annotations

import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from ..errors import InputError
from ..hardware.curve_family import family_from_dict, family_values_of, with_prior_freed
from ..hardware.draft_cost import choose_draft_costs, parse_layer_shares
from ..hardware.observations import LoadPoint, check_physical
from ..profiles.cudagraph import CudaGraph
from ..sweep.calibrate import Calibration, FitResult
from ..sweep.load_replay import MIN_REQUESTS_PER_USER, FitConfig, drafts_and_tau, simulate_load
from ..sweep.per_token_reading import fit_reading
from ..sweep.split_prior import SplitPrior, refit_with_split, user_tokens_and_context
from ..sweep.split_prior import interval_draws as split_interval_draws
from ..sweep.ttft_check import beyond
from .budget_fit import BudgetFit, add_budget_rows, fit_budgets
from .cases import Arm, Case
from .cost_models import resolve_cost_model
from .one_cell import OneCellFit, fit_one_cell


# How hard to work (FitConfig fields): the command's defaults; the tests use smaller ones.
DEFAULT_EFFORT = {"requests_per_user": 4, "max_requests_per_user": 64, "rounds": 2, "bootstrap": 40,
                  "seed": 0}
INTERVAL_DRAWS = 2      # draws simulated per case for the gain interval (quantiles 0.1 .. 0.9)


@dataclass
class CaseResult:
    """The fit of the baseline and the prediction table of one case."""

    case: Case
    fit: FitResult
    draft_summary: str
    rows: list[dict] = field(default_factory=list)      # one per (arm, load), baseline included
    split_note: str = ""                                # the split prior and the interval's draws
    budget_fits: list[BudgetFit] = field(default_factory=list)   # budget-informed diagnostics
    one_cell: list[OneCellFit] = field(default_factory=list)     # one speculative cell fitted too


def _points(case: Case, arm: Arm, acceptance: str | None) -> list[LoadPoint]:
    thr, tps = case.per_gpu(arm), case.tps_user(arm)
    return [LoadPoint(policy=arm.policy, throughput_tok_s_per_gpu=float(t), tps_user=float(u),
                      tps_stat="mean", acceptance=acceptance, concurrency=int(c), prefill=case.prefill,
                      prompt_tokens=case.prompt_tokens.values[0], output_tokens=case.output_tokens.values[0],
                      label=f"{arm.name} @ {c}", where=f"{case.path}:{arm.name}",
                      requests=case.requests_at(j), window=case.window)
            for j, (c, t, u) in enumerate(zip(case.loads, thr, tps))]


def case_split(case: Case) -> SplitPrior | None:
    """The case's `fit.split_prior` as the fit takes it (its published cost model's c_kv /
    c_compute, its spread, where the choice came from)."""
    spec = case.fit.get("split_prior")
    if not spec:
        return None
    cm = resolve_cost_model(spec["cost_model"], field="fit.split_prior.cost_model")
    return SplitPrior(cm.target["c_kv"] / cm.target["c_compute"], spec["spread"],
                      f"{spec['basis']}: {spec['how']}; the ratio is {Path(spec['cost_model']).name}'s "
                      f"c_kv x context / c_compute")


def fit_config(case: Case, effort: dict) -> FitConfig:
    """The case's fit: family and fixed parameters, draft costs, the closed-loop settings."""
    fam = family_from_dict({"family": case.fit.get("family", "roofline"), "fixed": case.fit.get("fix") or {},
                            "max_batch_tokens": int(case.fit.get("max_batch_tokens", 16384)),
                            **{k: case.fit["moe"][k] for k in ("experts", "top_k") if case.fit.get("moe")}},
                           file=case.path)
    shares = parse_layer_shares(",".join(f"{k}={v}" for k, v in
                                         (case.draft_costs.get("layer_share") or {}).items()))
    if case.cudagraph is not None:
        fam = replace(fam, cudagraph=case.cudagraph)
    roof = case_roofline(case)
    priors, spread = {}, 0.5
    if roof is not None:                  # as `profile fit --roofline` does
        values = family_values_of(fam, roof)
        fam = with_prior_freed(fam, values, {})
        priors = {k: v for k, v in values.items() if k in fam.free}
        spread = case.fit["roofline"]["spread"]
    drafts = choose_draft_costs(None, roof, shares)
    if drafts.source == "layer_share":            # the roofline's tables name themselves
        drafts.origin = f"{case.draft_costs['basis']}: {case.draft_costs['how']}"
    return FitConfig(fam, name=f"{case.name}-baseline-fit", gpus=case.gpus, draft_costs=drafts,
                     priors=priors, prior_spread=spread, **{**DEFAULT_EFFORT, **effort})


def case_roofline(case: Case):
    """The case's `fit.roofline` profile (`dspark-sim roofline` with the case's model, GPU, TP and
    weight type, defaults otherwise), or None."""
    spec = case.fit.get("roofline")
    if not spec:
        return None
    from ..hardware.analytic_profile import analytic_profile
    from ..hardware.gpus import get_gpu
    from ..hardware.models import load_model_shape
    from ..hardware.roofline import Roofline
    from ..hardware.roofline_settings import RooflineSettings

    roof = Roofline(load_model_shape(spec["model"]), get_gpu(spec["gpu"]),
                    RooflineSettings(tp=spec["tp"], dtype=spec["dtype"]))
    return analytic_profile(roof, f"{spec['model']}-{spec['gpu']}-tp{spec['tp']}-roofline")


def run_case(case: Case, effort: dict, progress: Callable[[str], None] | None = None,
             interval_draws: int = INTERVAL_DRAWS, with_one_cell: bool = True) -> CaseResult:
    """Fit the baseline arm, simulate every arm at every load (and under `interval_draws` of the
    fit's draws where the case has a split prior), and tabulate; with `with_one_cell`, also the
    one-speculative-cell diagnostic (one_cell.py)."""
    with tempfile.TemporaryDirectory(prefix="dspark-case-") as tmp:
        paths = {}
        bounds: dict[str, dict[str, str]] = {"low": {}, "high": {}}
        for arm in case.arms:
            if arm.acceptance is not None:
                path = Path(tmp) / f"{arm.name}.acceptance.json"
                arm.acceptance.save(path)
                paths[arm.name] = str(path)
            if arm.acceptance_range is not None:
                for side in bounds:
                    path = Path(tmp) / f"{arm.name}.{side}.acceptance.json"
                    getattr(arm.acceptance_range, side).save(path)
                    bounds[side][arm.name] = str(path)
        base = case.arm(case.baseline)
        points = _points(case, base, paths.get(base.name))
        check_physical(points, case.gpus)
        split, draws = case_split(case), []
        result, cfg, note, split_note, cal = _fit(points, fit_config(case, effort), split, progress)
        if split is not None:
            draws = split_interval_draws(result, user_tokens_and_context(cal)[0], interval_draws)
        rows = _rows(case, result, cfg, paths, progress)
        if draws:
            runs = _interval_runs(case, points, cfg, draws, paths, bounds, result.defect_factors)
            if cfg.family.family == "moe":
                runs.append(_per_token_reading(case, points, cfg, split, paths, bounds, progress))
            _add_intervals(case, rows, runs, cfg, progress)
        budget_fits = fit_budgets(case, lambda arm: _points(case, arm, paths.get(arm.name)), result, cfg, progress)
        add_budget_rows(rows, budget_fits)
        one_cell = fit_one_cell(case, lambda name: _points(case, case.arm(name), paths.get(name)),
                                lambda pts: _fit(pts, fit_config(case, effort), split, progress)[:2],
                                progress) if with_one_cell else []
    if cfg.priors and case.fit.get("roofline"):
        spec = case.fit["roofline"]
        note += (f"Priors from the roofline of {spec['model']} on {spec['gpu']} (TP{spec['tp']}, "
                 f"{spec['dtype']}; {spec['basis']}: {spec['how']}): "
                 + ", ".join(f"{k} = {v:.4g}" for k, v in cfg.priors.items())
                 + f", log-normal spread {cfg.prior_spread:g}. ")
    if case.cudagraph is not None:
        eager = case.cudagraph.eager_seconds(case.cudagraph.max_capture_size + 1)
        note += (f"CUDA graphs up to {case.cudagraph.max_capture_size} batch tokens, eager above: "
                 f"{eager * 1e3:.3g} ms"
                 + (f" (range {case.eager_range[0] * 1e3:.3g}..{case.eager_range[1] * 1e3:.3g} ms, spanned "
                    f"by the interval)" if case.eager_range else "") + f" ({case.cudagraph_note}). ")
    band = (f"; the interval spans them x/÷ {cfg.draft_band:g} (the shape pricing's measured band, "
            "hardware/draft_cost.py)" if draws and cal.draws_draft_scale else "")
    return CaseResult(case, result, note + cfg.draft_costs.describe() + band, rows, split_note,
                      budget_fits, one_cell)


def _fit(points: list[LoadPoint], cfg: FitConfig, split: SplitPrior | None,
         progress: Callable[[str], None] | None) -> tuple[FitResult, FitConfig, str, str, Calibration]:
    """`profile fit`'s fit of `points` under the case's configuration, split-refitted with the
    case's split prior when it has one: (result, the configuration it ended with, a note, the
    split's note, its calibration)."""
    note = ""
    try:
        result = Calibration(points, cfg).fit(progress)
    except InputError as exc:
        if "weight_s" not in exc.message or "weight_s" in cfg.family.fixed:
            raise
        # every load lies above the roofline's knee: the flat part was never observed
        cfg = replace(cfg, family=replace(cfg.family, fixed={**cfg.family.fixed, "weight_s": 0.0}))
        result = Calibration(points, cfg).fit(progress)
        note = "the roofline family's flat part (weight_s) was not identified: every load lies " \
               "above its knee, so weight_s = 0 (floor + per-token, linear). "
    cal, split_note = Calibration(points, cfg), ""
    if split is not None:
        cal, result, split_note = refit_with_split(cal, result, split, progress)
    return result, cal.cfg, note, split_note, cal


def _rows(case: Case, result: FitResult, cfg: FitConfig, paths: dict[str, str],
          progress: Callable[[str], None] | None) -> list[dict]:
    base = case.arm(case.baseline)
    base_pub = case.per_gpu(base)
    base_sims = {s.users: s for s in result.simulated if s is not None}
    top = result.observed_range["batch_tokens"][1]
    rows = []
    for arm in case.arms:
        pub = case.per_gpu(arm)
        points = _points(case, arm, paths.get(arm.name))
        verify = 1 + drafts_and_tau(points[0])[0]       # tokens per request at the widest verify
        for j, (users, obs) in enumerate(zip(case.loads, points)):
            if arm.name == base.name:
                sim = base_sims[users]
            else:
                sim = simulate_load(result.profile, obs, users, cfg)
                if progress:
                    progress(f"{arm.name} @ {users}")
            pred = sim.throughput_tok_s_per_gpu
            pub_gain, pred_gain = pub[j] / base_pub[j], pred / base_sims[users].throughput_tok_s_per_gpu
            rows.append({
                "case": case.name, "arm": arm.name, "label": arm.label, "policy": arm.policy,
                "baseline": arm.name == base.name, "load": users,
                "published_tok_s_per_gpu": float(pub[j]), "predicted_tok_s_per_gpu": float(pred),
                "throughput_error": float(pred / pub[j] - 1),
                "published_gain": float(pub_gain), "predicted_gain": float(pred_gain),
                "gain_error": float(pred_gain / pub_gain - 1),
                "extrapolated": bool(users * verify > top * 1.0001),
                # the published run had fewer than the replay's 3 requests per user: it never
                # reached the steady state the replay measures (a whole-run cell replays its run)
                "short_run": bool(obs.window == "steady" and obs.requests is not None
                                  and obs.requests < MIN_REQUESTS_PER_USER * users),
                "published_below_baseline": bool(pub_gain < 1),
                "same_side": bool((pub_gain < 1) == (pred_gain < 1)),
                "predicted_verify_tokens": float(sim.verify_tokens),
                "published_verify_tokens": float(arm.budget.values[j]) if arm.budget else None,
                "predicted_accept_length": float(sim.accept_length),
                "published_accept_length": (arm.accept_length or {}).get(users),
                "published_ttft_ms": float(arm.ttft_ms.values[j]) if arm.ttft_ms else None,
                "predicted_ttft_ms": float(sim.ttft_s * 1e3),
            })
    return rows


def _interval_runs(case: Case, points: list[LoadPoint], cfg: FitConfig, draws: list[dict[str, float]],
                   paths: dict[str, str], bounds: dict[str, dict[str, str]],
                   factors: list[list[float]]) -> list[tuple]:
    """(profile, acceptance paths) per interval draw. The draw least favourable to speculation
    (lowest per-request share, first) runs with the highest eager cost of the case's eager_range
    and each arm's lowest acceptance, the most favourable (last) with the lowest eager cost and
    the highest acceptance, so the range spans the unknowns together; draws between keep the
    case's eager cost and acceptance."""
    sides = [("low" if i == 0 else "high" if i == len(draws) - 1 else None) if len(draws) >= 2 else None
             for i in range(len(draws))]
    return [_draw_run(case, points, cfg, d, paths, bounds, side, factors) for d, side in zip(draws, sides)]


def _draw_run(case: Case, points: list[LoadPoint], cfg: FitConfig, draw: dict[str, float],
              paths: dict[str, str], bounds: dict[str, dict[str, str]], side: str | None,
              factors: list[list[float]]) -> tuple:
    """(profile, acceptance paths) of one draw; on a `side` ("low" / "high") with the eager cost,
    each arm's acceptance and, where the baseline arm cannot see drafting, the draft pricing's
    band at that end of the case's ranges (the band's centre between the sides). A baseline arm
    that drafts itself (MTP-1) has the draw re-solved at that price (`Calibration.resolve_draw`,
    with the fit's defect correction `factors`), so it still meets the baseline's observations."""
    run_cfg = cfg
    if side is not None and case.eager_range is not None and case.cudagraph is not None:
        eager = case.eager_range[1] if side == "low" else case.eager_range[0]
        graph = CudaGraph(case.cudagraph.max_capture_size, floor_s=eager, source="given")
        run_cfg = replace(cfg, family=replace(cfg.family, cudagraph=graph))
    acc = {**paths, **bounds[side]} if side is not None else paths
    cal = Calibration(points, run_cfg)
    if cal.draws_draft_scale:
        band = run_cfg.draft_band
        scale = band if side == "low" else 1 / band if side == "high" else 1.0
        if cal.observations_draft and factors and scale != draw.get("draft_scale", 1.0):
            draw = cal.resolve_draw(draw, factors, scale)
        draw = {**draw, "draft_scale": scale}
    return cal.profile(draw), acc


def _per_token_reading(case: Case, points: list[LoadPoint], cfg: FitConfig, split: SplitPrior,
                       paths: dict[str, str], bounds: dict[str, dict[str, str]],
                       progress: Callable[[str], None] | None) -> tuple:
    """The interval's least favourable run under the per-token reading of an MoE baseline arm
    (sweep/per_token_reading.py): its draw with the lowest per-request share runs with the
    highest eager cost and the lowest acceptance, beside the `moe` draws."""
    cal, result = fit_reading(points, cfg, split, progress=progress)
    low = (split_interval_draws(result, user_tokens_and_context(cal)[0], 2) or [result.params])[0]
    return _draw_run(case, points, cal.cfg, low, paths, bounds, "low", result.defect_factors)


def _add_intervals(case: Case, rows: list[dict], runs: list[tuple], cfg: FitConfig,
                   progress: Callable[[str], None] | None) -> None:
    """Every arm at every load under each draw's profile and acceptance: the rows' gain interval
    (the range over the draws and the point estimate) and whether the published gain lies in it."""
    base = case.arm(case.baseline)
    gains: dict[tuple[str, int], list[float]] = {}
    for prof, acc in runs:
        sims = {}
        for arm in case.arms:
            for users, obs in zip(case.loads, _points(case, arm, acc.get(arm.name))):
                sims[arm.name, users] = simulate_load(prof, obs, users, cfg).throughput_tok_s_per_gpu
                if progress:
                    progress(f"{arm.name} @ {users} (draw)")
        for (name, users), thr in sims.items():
            gains.setdefault((name, users), []).append(thr / sims[base.name, users])
    for r in rows:
        if r["baseline"]:
            continue
        vals = gains[r["arm"], r["load"]] + [r["predicted_gain"]]
        r["predicted_gain_low"], r["predicted_gain_high"] = float(min(vals)), float(max(vals))
        r["published_in_interval"] = bool(min(vals) <= r["published_gain"] <= max(vals))


def summary(rows: list[dict], target: float = 0.15) -> dict:
    """Counts against the issue's target: gain within `target` everywhere, losses on the same side."""
    spec = [r for r in rows if not r["baseline"]]
    within = [r for r in spec if abs(r["gain_error"]) <= target]
    losses = [r for r in spec if r["published_below_baseline"]]
    return {"speculative_cells": len(spec), "within_target": len(within), "target": target,
            "published_losses": len(losses), "losses_same_side": sum(r["same_side"] for r in losses),
            "max_abs_gain_error": float(max((abs(r["gain_error"]) for r in spec), default=0.0)),
            "extrapolated_cells": sum(r["extrapolated"] for r in spec),
            "cells_with_interval": sum("published_in_interval" in r for r in spec),
            "budget_informed_cells": sum("budget_informed_gain" in r for r in spec),
            "budget_informed_within_target": sum(abs(r["budget_informed_gain_error"]) <= target
                                                 for r in spec if "budget_informed_gain" in r),
            "published_in_interval": sum(r.get("published_in_interval", False) for r in spec),
            "ttft_cells": sum(r["published_ttft_ms"] is not None for r in rows),
            "ttft_beyond_factor": sum(r["published_ttft_ms"] is not None
                                      and beyond(r["published_ttft_ms"], r["predicted_ttft_ms"]) for r in rows)}
