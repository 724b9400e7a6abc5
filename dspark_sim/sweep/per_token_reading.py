"""The other reading of a mixture-of-experts fit: growth per token that never saturates.

The `moe` family explains how a no-speculation (or MTP-1) arm's step grows with load by the
experts its tokens touch, which saturates: once nearly every expert is streamed, an extra verify
token costs only `per_token_s`, so at high load speculation looks almost free. Observations at
one verify width per request cannot tell that from growth that is paid per token and does not
saturate (expert-parallel all-to-all dispatch, grouped GEMMs that grow with tokens, sampling).
The published MiniMax-M2.5 EAGLE-3 sweep on MI355X (docs/trust.md) is the measured case: its
speculative gain falls with load where the `moe` reading's rises.

So an MoE fit is done twice: with its own family, and with floor + per-token (`linear`, which is
`moe` with `expert_s` = 0), the same fixed parameters, capture limit, draft costs and, where
given, split prior. The second fit's draws, written as `moe` parameters with `expert_s` = 0,
join the first's under `fit.per_token_reading` (`profile fit`), and `sweep`, `plan` and
`recommend` span both readings (sweep/intervals.py); `validate-published` runs the reading's
least favourable draw as one more end of each MoE case's interval (published/predict.py).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

from ..hardware.curve_family import PARAMS, family_from_dict
from .calibrate import Calibration, FitResult
from .load_replay import FitConfig
from .split_prior import SplitPrior, refit_with_split

READING = "per-token"


def reading_config(cfg: FitConfig, priors: dict[str, float] | None = None) -> FitConfig:
    """The fit configuration of the per-token reading of an `moe` configuration: the `linear`
    family with the same fixed parameters (those it has), batch range and capture limit, a held
    parameter freed where `priors` give it a centre; `priors` restricted to the linear family's
    parameters (none by default)."""
    fam, priors = cfg.family, priors or {}
    fixed = {k: v for k, v in fam.fixed.items() if k in PARAMS}
    # a held parameter stays freed only with a prior of its own (without one it is not identified)
    freed = tuple(k for k in fam.freed if k in PARAMS and priors.get(k, 0.0) > 0)
    lin = replace(family_from_dict({"family": "linear", "fixed": fixed,
                                    "max_batch_tokens": fam.max_batch_tokens}),
                  cudagraph=fam.cudagraph, freed=freed)
    kept = {k: v for k, v in priors.items() if k in lin.free}
    return replace(cfg, family=lin, priors=kept, name=f"{cfg.name}-per-token-reading")


def fit_reading(points: list, cfg: FitConfig, split: SplitPrior | None = None,
                priors: dict[str, float] | None = None,
                progress: Callable[[str], None] | None = None) -> tuple[Calibration, FitResult]:
    """The per-token reading fitted on `points` (`cfg`: the `moe` fit's configuration), split-
    refitted like the `moe` fit when `split` is given; its calibration and result."""
    cal = Calibration(points, reading_config(cfg, priors))
    result = cal.fit(progress)
    if split is not None:
        cal, result, _ = refit_with_split(cal, result, split, progress)
    return cal, result


def as_moe_draw(params: dict[str, float]) -> dict[str, float]:
    """A per-token reading's parameters as the `moe` family's: no expert term."""
    return {**params, "expert_s": 0.0}


def reading_block(result: FitResult, max_abs_error: float, included: bool,
                  why: str) -> dict[str, Any]:
    """What `profile fit` records of the reading under `fit.per_token_reading`."""
    return {"reading": READING, "family": "linear (moe with expert_s = 0)",
            "parameters": {k: float(f"{v:.6g}") for k, v in as_moe_draw(result.params).items()},
            "max_abs_rel_error": float(f"{max_abs_error:.4g}"), "included": included, "why": why,
            "draws": ([{k: float(f"{v:.6g}") for k, v in as_moe_draw(d).items()} for d in result.draws]
                      if included else [])}


def reading_for_fit(points: list, cfg: FitConfig, split: SplitPrior | None, roof, fitted: FitResult,
                    progress: Callable[[str], None] | None = None) -> tuple[dict[str, Any], str]:
    """`profile fit --family moe`'s second fit: the reading's `fit.per_token_reading` block and
    a sentence for the console. `roof`: the roofline whose linear-family values are the
    reading's priors (as the `moe` fit's come from it), or None. The reading joins the interval
    when it reproduces the observations about as well as the `moe` fit: its largest relative
    error within twice the larger of the observation error and the `moe` fit's own."""
    from ..hardware.curve_family import family_values_of
    from .calibrate_report import max_abs_error

    priors = family_values_of(reading_config(cfg).family, roof) if roof is not None else None
    _, result = fit_reading(points, cfg, split, priors, progress)
    err, own = max_abs_error(result), max_abs_error(fitted)
    limit = 2 * max(cfg.obs_error, own)
    included = err <= limit
    why = (f"largest error {err:.1%} on the observations against the moe fit's {own:.1%} "
           f"(joins the interval within {limit:.1%}: twice the larger of --obs-error and the moe fit's)")
    line = ("per-token reading (floor + per-token: what grows with load never saturates, as the moe "
            f"family's experts do): {why}; "
            + (f"its {len(result.draws)} draws join the fit's, so sweep, plan and recommend intervals "
               "span both readings" if included else "the observations rule it out, left out of the interval"))
    return reading_block(result, err, included, why), line
