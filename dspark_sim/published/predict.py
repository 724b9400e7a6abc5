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
"""
from __future__ import annotations

import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

import numpy as np

from ..errors import InputError
from ..hardware.curve_family import family_from_dict
from ..hardware.draft_cost import choose_draft_costs, parse_layer_shares
from ..hardware.observations import LoadPoint, check_physical
from ..sweep.calibrate import Calibration, FitConfig, FitResult, simulate_load
from .cases import Arm, Case


# How hard to work (FitConfig fields): the command's defaults; the tests use smaller ones.
DEFAULT_EFFORT = {"requests_per_user": 4, "rounds": 2, "bootstrap": 40, "seed": 0}


@dataclass
class CaseResult:
    """The fit of the baseline and the prediction table of one case."""

    case: Case
    fit: FitResult
    draft_summary: str
    rows: list[dict] = field(default_factory=list)      # one per (arm, load), baseline included


def _points(case: Case, arm: Arm, acceptance: str | None) -> list[LoadPoint]:
    thr, tps = case.per_gpu(arm), case.tps_user(arm)
    return [LoadPoint(policy=arm.policy, throughput_tok_s_per_gpu=float(t), tps_user=float(u),
                      tps_stat="mean", acceptance=acceptance, concurrency=int(c), prefill=case.prefill,
                      prompt_tokens=case.prompt_tokens.values[0], output_tokens=case.output_tokens.values[0],
                      label=f"{arm.name} @ {c}", where=f"{case.path}:{arm.name}")
            for c, t, u in zip(case.loads, thr, tps)]


def fit_config(case: Case, effort: dict) -> FitConfig:
    """The case's fit: family and fixed parameters, draft costs, the closed-loop settings."""
    fam = family_from_dict({"family": case.fit.get("family", "roofline"), "fixed": case.fit.get("fix") or {},
                            "max_batch_tokens": int(case.fit.get("max_batch_tokens", 16384))},
                           file=case.path)
    shares = parse_layer_shares(",".join(f"{k}={v}" for k, v in
                                         (case.draft_costs.get("layer_share") or {}).items()))
    if case.cudagraph is not None:
        fam = replace(fam, cudagraph=case.cudagraph)
    drafts = choose_draft_costs(None, None, shares)
    drafts.origin = f"{case.draft_costs['basis']}: {case.draft_costs['how']}"
    return FitConfig(fam, name=f"{case.name}-baseline-fit", gpus=case.gpus, draft_costs=drafts,
                     **{**DEFAULT_EFFORT, **effort})


def run_case(case: Case, effort: dict, progress: Callable[[str], None] | None = None) -> CaseResult:
    """Fit the baseline arm, simulate every arm at every load, and tabulate."""
    with tempfile.TemporaryDirectory(prefix="dspark-case-") as tmp:
        paths = {}
        for arm in case.arms:
            if arm.acceptance is not None:
                path = Path(tmp) / f"{arm.name}.acceptance.json"
                arm.acceptance.save(path)
                paths[arm.name] = str(path)
        base = case.arm(case.baseline)
        cfg = fit_config(case, effort)
        points = _points(case, base, paths.get(base.name))
        check_physical(points, case.gpus)
        note = ""
        try:
            result = Calibration(points, cfg).fit(progress)
        except InputError as exc:
            if "weight_s" not in exc.message or "weight_s" in cfg.family.fixed:
                raise
            # every load lies above the roofline's knee: the flat part was never observed
            cfg.family = replace(cfg.family, fixed={**cfg.family.fixed, "weight_s": 0.0})
            result = Calibration(points, cfg).fit(progress)
            note = "the roofline family's flat part (weight_s) was not identified: every load lies " \
                   "above its knee, so weight_s = 0 (floor + per-token, linear). "
        rows = _rows(case, result, cfg, paths, progress)
    if case.cudagraph is not None:
        note += (f"CUDA graphs up to {case.cudagraph.max_capture_size} batch tokens, eager above "
                 f"({case.cudagraph_note}). ")
    return CaseResult(case, result, note + cfg.draft_costs.describe(), rows)


def _rows(case: Case, result: FitResult, cfg: FitConfig, paths: dict[str, str],
          progress: Callable[[str], None] | None) -> list[dict]:
    base = case.arm(case.baseline)
    base_pub = case.per_gpu(base)
    base_sim = {s.users: s.throughput_tok_s_per_gpu for s in result.simulated if s is not None}
    top = result.observed_range["batch_tokens"][1]
    rows = []
    for arm in case.arms:
        pub = case.per_gpu(arm)
        for j, users in enumerate(case.loads):
            if arm.name == base.name:
                pred = base_sim[users]
            else:
                obs = _points(case, arm, paths.get(arm.name))[j]
                pred = simulate_load(result.profile, obs, users, cfg).throughput_tok_s_per_gpu
                if progress:
                    progress(f"{arm.name} @ {users}")
            gamma = arm.acceptance.gamma if arm.acceptance else 0
            verify = 1 if arm.policy == "ar" else 2 if arm.policy == "mtp1" else \
                1 + (int(arm.policy.split("-")[1]) if arm.policy.startswith("static-") else gamma)
            pub_gain, pred_gain = pub[j] / base_pub[j], pred / base_sim[users]
            rows.append({
                "case": case.name, "arm": arm.name, "label": arm.label, "policy": arm.policy,
                "baseline": arm.name == base.name, "load": users,
                "published_tok_s_per_gpu": float(pub[j]), "predicted_tok_s_per_gpu": float(pred),
                "throughput_error": float(pred / pub[j] - 1),
                "published_gain": float(pub_gain), "predicted_gain": float(pred_gain),
                "gain_error": float(pred_gain / pub_gain - 1),
                "extrapolated": bool(users * verify > top * 1.0001),
                "published_below_baseline": bool(pub_gain < 1),
                "same_side": bool((pub_gain < 1) == (pred_gain < 1)),
            })
    return rows


def summary(rows: list[dict], target: float = 0.15) -> dict:
    """Counts against the issue's target: gain within `target` everywhere, losses on the same side."""
    spec = [r for r in rows if not r["baseline"]]
    within = [r for r in spec if abs(r["gain_error"]) <= target]
    losses = [r for r in spec if r["published_below_baseline"]]
    return {"speculative_cells": len(spec), "within_target": len(within), "target": target,
            "published_losses": len(losses), "losses_same_side": sum(r["same_side"] for r in losses),
            "max_abs_gain_error": float(max((abs(r["gain_error"]) for r in spec), default=0.0)),
            "extrapolated_cells": sum(r["extrapolated"] for r in spec)}
