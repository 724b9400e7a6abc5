"""A prior on the split a fit cannot see: per-token against per-request cost.

Observations at one verify width per request (no speculation: 1; MTP-1: 2) fix the cost a user
adds to an iteration, not how it divides between what grows with the tokens verified (GEMMs,
experts touched) and what grows with requests (attention over each request's KV, sampling,
per-sequence and host work). Speculation multiplies tokens, not requests, so that split prices
every extra verify token, and holding the per-request part at 0 (the fit's default without a
prior) is its least favourable end.

`refit_with_split` takes a fit made with the per-request part held at 0, keeps its cost per added
user, and fits again with log-normal priors on both parts centred where that cost divides as in
a published GPU step model (`published/*.cost.yaml`: per-request / per-token = c_kv x context /
c_compute at the observations' mean context), with a stated spread. The bootstrap draws the
centres too, so the fit's draws, and the intervals `sweep`, `plan` and `recommend` build from
them, carry the split. Used by `profile fit --split-prior` and by `validate-published`.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

import numpy as np

from ..errors import InputError
from ..hardware.curve_family import with_prior_freed
from .calibrate import Calibration, FitResult


@dataclass(frozen=True)
class SplitPrior:
    """Per-request / per-token cost per KV token of context, the prior's spread, its source."""

    ratio_per_context_token: float       # c_kv / c_compute of the published model
    spread: float                        # log-normal spread of both priors
    source: str


def check_split_family(cal: Calibration) -> None:
    """The split prior prices the per-request part; it needs that part held and the context term
    fixed (the published model's per-request cost is its KV read)."""
    fam = cal.fam
    if "per_request_s" in fam.fixed or "per_request_s" in fam.free:
        raise InputError("the split prior sets per_request_s's prior; do not --fix it or give it "
                         "another prior (--roofline)", field="split-prior")
    if "per_context_token_s" in fam.free:
        raise InputError("the split prior's per-request part is the published model's KV read; fix "
                         "the context term (--fix per_context_token_s=0) to use it", field="split-prior")
    if not cal.loads:
        raise InputError("the split prior needs load points (step points alone have no users)",
                         field="split-prior")


def user_tokens_and_context(cal: Calibration) -> tuple[float, float]:
    """Mean tokens a user adds to an iteration (verify width, plus its prompt spread over its
    output's iterations with local prefill) and mean KV context per request, over the loads."""
    meta = [m for m in cal.meta if m]
    tokens = float(np.mean([1 + m["k"] + m["prefill_per_user"] for m in meta]))
    return tokens, float(np.mean([m["ctx"] for m in meta]))


def split_centres(split: SplitPrior, tokens: float, context: float,
                  held: dict[str, float]) -> tuple[dict[str, float], float]:
    """Prior centres of per_token_s and per_request_s that keep the held fit's cost per added
    user, and the per-request / per-token ratio they divide it by."""
    ratio = split.ratio_per_context_token * context
    per_token = (tokens * held["per_token_s"] + held["per_request_s"]) / (tokens + ratio)
    return {"per_token_s": per_token, "per_request_s": ratio * per_token}, ratio


def request_share(params: dict[str, float], tokens: float) -> float:
    """Share of the cost per added user that is per-request cost."""
    total = tokens * params["per_token_s"] + params["per_request_s"]
    return params["per_request_s"] / total if total > 0 else 0.0


def refit_with_split(cal: Calibration, held: FitResult, split: SplitPrior,
                     progress: Callable[[str], None] | None = None
                     ) -> tuple[Calibration, FitResult, str]:
    """The fit again with the split prior (per_request_s freed); the new calibration, its result
    and a sentence for the report."""
    check_split_family(cal)
    tokens, context = user_tokens_and_context(cal)
    centres, ratio = split_centres(split, tokens, context, held.params)
    fam = with_prior_freed(cal.fam, centres, {})
    cfg = replace(cal.cfg, family=fam, priors={**cal.cfg.priors, **centres}, prior_spread=split.spread)
    new = Calibration(cal.points, cfg)
    result = new.fit(progress)
    shares = [request_share(d, tokens) for d in result.draws]
    note = (f"Split prior ({split.source}): per-request / per-token cost = {ratio:.2f} at "
            f"{context:g} context tokens, centres per_token_s = {centres['per_token_s']:.4g}, "
            f"per_request_s = {centres['per_request_s']:.4g}, log-normal spread {split.spread:g}. "
            f"With the per-request cost held at 0 the fit gave per_token_s = "
            f"{held.params['per_token_s']:.4g}. Per-request share of the cost per added user: fitted "
            f"{request_share(result.params, tokens):.0%}, "
            + (f"over the {len(shares)} draws {np.percentile(shares, 10):.0%}.."
               f"{np.percentile(shares, 90):.0%} (p10..p90)." if shares else "no bootstrap draws."))
    return new, result, note


def interval_draws(result: FitResult, tokens: float, n: int) -> list[dict[str, float]]:
    """The fit's draws at evenly spaced quantiles (0.1 .. 0.9) of the per-request share."""
    if n < 1 or not result.draws:
        return []
    order = np.argsort([request_share(d, tokens) for d in result.draws], kind="stable")
    qs = np.linspace(0.1, 0.9, n) if n > 1 else np.array([0.5])
    picks = dict.fromkeys(int(order[int(round(q * (len(order) - 1)))]) for q in qs)
    return [result.draws[i] for i in picks]
