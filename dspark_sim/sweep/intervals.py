"""Intervals from a fitted profile's spread: what `sweep`, `plan` and `recommend` do not know.

A profile made by `profile fit` keeps, in its `fit` block, 50 parameter draws (bootstrap over the
observations, with the roofline priors drawn too) and the loads it saw (`observed_range`). Running
every sweep point under all 50 would cost 50 sweeps; instead a few *representative* draws are
chosen and the command runs once more per draw (cached points, like any other):

- two cheap proxies are computed for every draw from its step curve alone (no simulation), at
  the operating points the point estimate's run found (batch and context tokens per iteration
  of each policy at each SLA): *speed*, the mean log ratio of the draw's step time to the point
  estimate's, and *gain*, that ratio at the speculative policies' points less at the
  baseline's (a draw whose big batches are relatively cheaper favours speculation); when the
  draws carry a `draft_scale` (fitted to a speculative observation, or drawn from the shape
  pricing's band when the observations could not see drafting, sweep/calibrate.py), the
  speculative points' drafting is added to their step, so a draw with dearer drafting counts as
  less favourable to speculation;
- the draws at the 10th and 90th percentile of speed, then of gain, are taken (then medians
  and quartiles, for more draws; `--spread-draws N`, default 4);
- an MoE fit's per-token reading (`fit.per_token_reading`, sweep/per_token_reading.py) adds one
  draw to those: the reading's draw with the highest gain proxy (least favourable to
  speculation), so the interval spans both readings;
- the interval is the range (min..max) of each answer over the point estimate and those draws.
  It approximates the p10-p90 band of the answer over the fit's draws along the two directions
  that move it: a throughput scale (all policies together) and the shape of the step curve
  (speculation's gain). The point estimate is included because the draws are picked for the
  whole table at once: at one SLA the picked draws need not be the extremes, and a range that
  left out the fitted value itself would understate what is not known there. Taking the
  envelope of N + 1 simulations instead of percentiles of 50 keeps the cost at N + 1 sweeps.

Profiles without draws (rooflines, measured profiles, fits made before draws existed) give no
interval and the output says "no fit spread" with the reason. Operating points whose batch
tokens per iteration lie outside the fit's observed range are flagged: there the curve is the
family's extrapolation, not the data.
"""
from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..errors import InputError
from ..hardware.curve_family import HELD, CurveFamily, family_from_dict
from ..hardware.draft_cost import DraftCosts, LayerShare
from ..profiles.hardware import HardwareProfile

SPREAD_DRAWS = 4                 # default representative draws per command
MAX_SPREAD_DRAWS = 8
_ORDER = (("speed", 0.1), ("speed", 0.9), ("gain", 0.1), ("gain", 0.9),
          ("speed", 0.5), ("gain", 0.5), ("speed", 0.25), ("speed", 0.75))
NO_SPREAD = "no fit spread"


@dataclass
class FitSpread:
    """A fitted profile, its family and its parameter draws."""

    profile: HardwareProfile
    family: CurveFamily
    draws: list[dict[str, float]]
    observed_range: dict[str, list[float]]
    reading_from: int | None = None      # draws from here on: an MoE fit's per-token reading

    @property
    def has_draft_scale(self) -> bool:
        """Whether the draws carry a draft_scale (fitted to a speculative observation, or drawn
        from the shape pricing's band)."""
        return any("draft_scale" in d for d in self.draws)

    @property
    def own_draws(self) -> int:
        """How many draws are the fit's own (those before an MoE fit's per-token reading)."""
        return len(self.draws) if self.reading_from is None else self.reading_from


def check_spread_draws(n: int) -> None:
    """0 (point estimate only) or 2..MAX_SPREAD_DRAWS."""
    if n != 0 and not 2 <= n <= MAX_SPREAD_DRAWS:
        raise InputError(f"must be 0 (no interval) or 2..{MAX_SPREAD_DRAWS} draws, got {n}",
                         field="spread-draws")


def fit_spread(hw: HardwareProfile, file: str | Path | None = None) -> FitSpread | None:
    """The profile's fit draws, or None when it has none (see `no_spread_reason`); a malformed
    fit block is an InputError naming `file` (the profile's path) and the field."""
    fit = hw.extra.get("fit")
    if not isinstance(fit, dict) or not fit.get("draws"):
        return None
    file = file or hw.name
    fam = family_from_dict(fit.get("family") or {}, file)
    draws = fit["draws"]
    if not isinstance(draws, list) or not all(isinstance(d, dict) for d in draws):
        raise InputError("expected a list of parameter mappings", file=file, field="fit.draws")
    reading = fit.get("per_token_reading") or {}
    more = reading.get("draws") if isinstance(reading, dict) else None
    if more is not None and (fam.family != "moe" or not isinstance(more, list)
                             or not all(isinstance(d, dict) for d in more)):
        raise InputError("expected a list of moe parameter mappings (an moe fit's reading)",
                         file=file, field="fit.per_token_reading.draws")
    reading_from = len(draws) if more else None
    draws = draws + list(more or [])
    # a held parameter the fit estimated after all (a prior freed it) varies with the draws;
    # families written before `freed` was recorded say so only through the draws
    fitted_held = tuple(k for k in HELD if k not in fam.fixed and
                        any(isinstance(d.get(k), (int, float)) and d.get(k) > 0 for d in draws))
    if fitted_held:
        fam = replace(fam, freed=tuple(dict.fromkeys(fam.freed + fitted_held)))
    out = []
    for i, d in enumerate(draws):
        missing = set(fam.free) - set(d)
        where = f"fit.draws[{i}]" if reading_from is None or i < reading_from else \
            f"fit.per_token_reading.draws[{i - reading_from}]"
        if missing:
            raise InputError(f"lacks {', '.join(sorted(missing))}", file=file, field=where)
        try:
            values = {k: float(v) for k, v in d.items()}
        except (TypeError, ValueError):
            raise InputError(f"expected numbers, got {d}", file=file, field=where) from None
        # parameters the fit did not estimate (fixed, or held such as per_request_s in a
        # profile fitted before that term existed) take the family's value
        out.append({**fam.full(values), **values})
        if any(not np.isfinite(v) or v < 0 for v in out[-1].values()):
            raise InputError(f"expected finite numbers >= 0, got {d}", file=file, field=where)
    return FitSpread(hw, fam, out, dict(fit.get("observed_range") or {}), reading_from)


def no_spread_reason(hw: HardwareProfile) -> str:
    """'no fit spread: ...' for a profile without draws."""
    return (f"{NO_SPREAD}: {hw.name} is a {hw.source} profile without `profile fit` draws, so "
            "no interval is given (the figures are its point values)")


_PROFILE_FIELDS = {f.name for f in fields(HardwareProfile)}


def draw_profile(spread: FitSpread, draw: dict[str, float], name: str) -> HardwareProfile:
    """The fitted profile with its family's parameters at `draw`: the step curve, the context
    term and any profile field named like a family parameter come from the draw, everything
    else (draft tables, limits, capture sizes) from the fitted profile; layer-share draft costs
    are re-tabulated on the draw's step."""
    base = spread.profile
    made = spread.family.profile(draw, name)
    out = copy.deepcopy(base)
    out.name = name
    for key in {"step_curve", "step_constant_s", "per_context_token_s"} | \
            (set(spread.family.params) & _PROFILE_FIELDS):
        setattr(out, key, copy.deepcopy(getattr(made, key)))
    fit = dict(base.extra.get("fit") or {})
    costs = fit.get("draft_costs") or {}
    point_scale = float(costs.get("scale", 1.0))
    scale = float(draw.get("draft_scale", point_scale))       # fitted, or a band draw's
    if costs.get("source") == "layer_share" and costs.get("layer_share"):
        shares = {k: LayerShare.from_dict(k, v) for k, v in costs["layer_share"].items()}
        DraftCosts("layer_share", "", shares=shares, scale=scale).apply(out)
    elif scale != point_scale:                     # copied tables, already x the point's scale
        DraftCosts("tables", base.name, tables=copy.deepcopy(out), scale=scale / point_scale).apply(out)
    out.extra = {k: v for k, v in base.extra.items() if k != "fit"}
    out.extra["fit_draw"] = {"of": base.name, "parameters": {k: float(f"{v:.6g}") for k, v in draw.items()}}
    return out


@dataclass(frozen=True)
class Operating:
    """Where the point estimate's answer was read: batch tokens and context tokens per
    iteration, and whether a speculative policy runs there."""

    batch_tokens: float
    context_tokens: float
    speculative: bool
    requests: float = 0.0           # decoding requests there (0: unknown; no draft term)


def _grid(prof: HardwareProfile) -> list[Operating]:
    """Without operating points (nothing met): a log grid of batch sizes, no context."""
    top = float(prof.max_batch_tokens or 1024)
    return [Operating(float(b), 0.0, b > 8) for b in np.geomspace(1, top, 12)]


def _iteration_time(prof: HardwareProfile, where: list[Operating], drafting: bool) -> np.ndarray:
    """Step time at each operating point, plus, with `drafting`, the mean draft cost of the
    profile's drafter kinds at the speculative points whose requests are known (their drafts
    per request from the batch: B / R - 1, at least 1)."""
    B = np.array([w.batch_tokens for w in where], dtype=float)
    X = np.array([w.context_tokens for w in where], dtype=float)
    out = np.asarray(prof.step_time(B, X), dtype=float)
    if drafting and prof.draft_curves:
        extra = [float(np.mean([prof.draft_time(k, w.requests, max(w.batch_tokens / w.requests - 1.0, 1.0))
                                for k in sorted(prof.draft_curves)]))
                 if w.speculative and w.requests > 0 else 0.0 for w in where]
        out = out + np.array(extra)
    return out


def _proxies(profs: list[HardwareProfile], point: HardwareProfile,
             where: list[Operating], drafting: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Per draw: speed (mean log iteration-time ratio to the point estimate at the operating
    points; lower is faster) and gain (that ratio at the speculative points less at the others;
    lower favours speculation). The iteration is the step, and with `drafting` (draws that carry
    a draft_scale) the drafting too."""
    where = where or _grid(point)
    spec = np.array([w.speculative for w in where])
    ref = np.log(_iteration_time(point, where, drafting))
    logs = np.array([np.log(_iteration_time(p, where, drafting)) - ref for p in profs])
    speed = logs.mean(axis=1)
    gain = (logs[:, spec].mean(axis=1) if spec.any() else 0.0) - \
        (logs[:, ~spec].mean(axis=1) if (~spec).any() else 0.0)
    return speed, np.asarray(gain) + np.zeros(len(profs))


def pick_draws(spread: FitSpread, n: int, where: list[Operating]) -> list[int]:
    """Indices of `n` representative draws: the 10th/90th percentiles of speed, then of gain,
    then medians and quartiles (module docstring), each draw at most once; with an MoE fit's
    per-token reading these come from the fit's own draws and the reading's draw least
    favourable to speculation is one more."""
    check_spread_draws(n)
    if n == 0:
        return []
    profs = [draw_profile(spread, d, f"{spread.profile.name}-draw{i}") for i, d in enumerate(spread.draws)]
    speed, gain = _proxies(profs, spread.profile, where, drafting=spread.has_draft_scale)
    own = spread.own_draws
    values = {"speed": speed[:own], "gain": gain[:own]}
    chosen: list[int] = []
    for axis, q in _ORDER[: min(n, own)]:
        order = np.argsort(values[axis], kind="stable")
        target = int(round(q * (len(order) - 1)))
        # the nearest rank not taken yet, towards the middle first
        ranks = sorted(range(len(order)), key=lambda r: (abs(r - target), abs(r - len(order) / 2)))
        chosen.append(next(int(order[r]) for r in ranks if int(order[r]) not in chosen))
    if own < len(spread.draws):
        # an MoE fit's per-token reading (sweep/per_token_reading.py): one draw more, its least
        # favourable to speculation, so the interval spans both readings
        chosen.append(own + int(np.argmax(gain[own:])))
    return chosen


def write_draw_profiles(spread: FitSpread, indices: list[int], folder: str | Path) -> list[Path]:
    """The chosen draws' profiles as YAML files named by their content (cached points follow
    the file's bytes; a name per content keeps loaders' caches honest)."""
    folder = Path(folder)
    out = []
    for i in indices:
        prof = draw_profile(spread, spread.draws[i], f"{spread.profile.name}-draw{i}")
        digest = hashlib.sha256(repr(sorted(prof.to_dict().items())).encode()).hexdigest()[:10]
        path = folder / f"{prof.name}-{digest}.yaml"
        if not path.exists():
            prof.save(path)
        out.append(path)
    return out


def describe(spread: FitSpread | None, indices: list[int], hw: HardwareProfile) -> dict[str, Any]:
    """What the outputs record about the interval (JSON)."""
    if spread is None:
        return {"interval": None, "note": no_spread_reason(hw)}
    if not indices:
        return {"interval": None, "note": "interval not computed (--spread-draws 0)",
                "observed_range": spread.observed_range}
    own = spread.own_draws
    reading = "" if own == len(spread.draws) else (
        f", and the draw of its per-token reading (one of {len(spread.draws) - own}) least "
        "favourable to speculation")
    what = "step time plus drafting (the draws' draft_scale too)" if spread.has_draft_scale else "step time"
    return {"interval": f"range over the point estimate and {sum(i < own for i in indices)} of the "
                        f"fit's {own} draws{reading} "
                        f"(10th/90th percentiles of {what} and of its speculative/baseline ratio at the "
                        "operating points; docs/sweeps.md)",
            "draws": indices, "draw_parameters": [spread.draws[i] for i in indices],
            "observed_range": spread.observed_range}


def interval_text(spread: FitSpread | None, indices: list[int], hw: HardwareProfile) -> str:
    """One line for the console and the Markdown under a table."""
    doc = describe(spread, indices, hw)
    if doc["interval"] is None:
        return f"Intervals: {doc['note']}."
    rng = spread.observed_range.get("batch_tokens")
    seen = f"; the fit saw {rng[0]:,.0f}-{rng[1]:,.0f} batch tokens per iteration" if rng else ""
    return (f"Intervals [low-high]: {doc['interval']}{seen}. They carry the fit's uncertainty "
            "only, not acceptance or the model's own error (docs/trust.md).")


def outside_observed(observed_range: dict[str, list[float]] | None, batch_tokens: float,
                     speculative: bool = False) -> str:
    """'' inside the fit's observed batch tokens per iteration, else what lies beyond; at a
    `speculative` operating point of a fit that estimated draft_scale, also whether it lies
    beyond the speculative observations' batch tokens (where that cost was measured)."""
    if batch_tokens is None or not np.isfinite(batch_tokens):
        return ""
    parts = []
    rng = (observed_range or {}).get("batch_tokens")
    if rng:
        parts.append(_beyond(batch_tokens, rng, "observed"))
    spec = (observed_range or {}).get("speculative_batch_tokens")
    if speculative and spec:
        parts.append(_beyond(batch_tokens, spec, "the speculative observations' (draft_scale)"))
    return "; ".join(p for p in parts if p)


def _beyond(batch_tokens: float, rng: list[float], what: str) -> str:
    lo, hi = float(rng[0]), float(rng[1])
    if batch_tokens > hi * 1.001:
        return f"extrapolated: {_tokens(batch_tokens)} batch tokens > {what} {_tokens(hi)}"
    if batch_tokens < lo * 0.999:
        return f"extrapolated: {_tokens(batch_tokens)} batch tokens < {what} {_tokens(lo)}"
    return ""


def _tokens(v: float) -> str:
    """Batch tokens for a flag: whole numbers from 100 up, three digits below (3.96 < 4)."""
    return f"{v:,.0f}" if v >= 100 else f"{v:.3g}"


def value_range(values: list[float], unmet_as_zero: bool = True) -> tuple[float, float]:
    """(min, max) over draws; an unmet answer (NaN) counts as 0 when `unmet_as_zero`; NaN, NaN
    when every value is missing."""
    arr = np.asarray(values, dtype=float)
    if unmet_as_zero:
        arr = np.where(np.isnan(arr), 0.0, arr)
    arr = arr[~np.isnan(arr)]
    if not len(arr) or (unmet_as_zero and not np.any(arr > 0)):
        return float("nan"), float("nan")
    return float(arr.min()), float(arr.max())


def merge_intervals(table, draw_tables: list, key: tuple[str, ...], columns: dict[str, bool]):
    """`table` with COL_low / COL_high per column: the range over the point estimate (`table`)
    and the draws' tables (rows matched on `key`; `columns[COL]`: an unmet (NaN) answer counts
    as 0, e.g. throughput), and `interval_draws`."""
    out = table.copy()
    index = [d.set_index(list(key)) for d in [table] + list(draw_tables)]
    rows = [tuple(r) for r in table[list(key)].itertuples(index=False)]
    for col, zero in columns.items():
        if col not in table:
            continue
        ranges = []
        for row in rows:
            vals = [float(d[col].get(row if len(key) > 1 else row[0], np.nan)) if col in d else np.nan
                    for d in index]
            ranges.append(value_range(vals, zero))
        out[f"{col}_low"] = [r[0] for r in ranges]
        out[f"{col}_high"] = [r[1] for r in ranges]
    out["interval_draws"] = len(draw_tables)
    return out


def operating_batch_tokens(results, policy: str, load: float) -> float:
    """Batch tokens per iteration at a sweep's operating point: requests decoding per replica x
    tokens each verifies (seed means; prefill chunks left out, as in the fit's observed range)."""
    rows = results[(results["policy"] == policy) & (results["load"] == load)]
    if not len(rows) or "decoding" not in rows or "verify_tokens" not in rows:
        return float("nan")
    return float((rows["decoding"] * rows["verify_tokens"]).mean())


def flag_outside(table, results, spread: FitSpread | None):
    """`table` (an SLA table) with `outside_observed` per row: '' or what lies beyond the fit's
    observed batch tokens at the row's operating point."""
    out = table.copy()
    rng = spread.observed_range if spread else None
    out["outside_observed"] = [
        outside_observed(rng, operating_batch_tokens(results, r.policy, r.load_at_sla), r.policy != "ar")
        if np.isfinite(r.load_at_sla) else "" for r in table.itertuples()]
    return out


def rerun_on_draws(result: Any, hw: HardwareProfile, n: int, where: list[Operating], cache_dir,
                   rerun: Callable[[str, str], Any], file: str | Path | None = None
                   ) -> tuple[FitSpread | None, list[int], list[Any]]:
    """Pick the draws (`prepare_draws`; `file`: the profile's path, for errors), call
    `rerun(hw_path, progress_label)` once per draw, add the reruns' cached / computed counts to
    `result`'s; the spread, the draws, the reruns."""
    spread, indices, paths = prepare_draws(hw, n, where, cache_dir, file)
    subs = [rerun(str(p), f"fit draw {i + 1}/{len(paths)}") for i, p in enumerate(paths)]
    for attr in ("cached", "computed"):
        if hasattr(result, attr):
            setattr(result, attr, getattr(result, attr) + sum(getattr(s, attr) for s in subs))
    return spread, indices, subs


def operating_points(table, results, context_per_request: float, baseline: str | None) -> list[Operating]:
    """The operating points of an SLA table (its rows that met the SLA)."""
    out = []
    for r in table.itertuples():
        if not np.isfinite(r.load_at_sla):
            continue
        B = operating_batch_tokens(results, r.policy, r.load_at_sla)
        rows = results[(results["policy"] == r.policy) & (results["load"] == r.load_at_sla)]
        decoding = float(rows["decoding"].mean()) if "decoding" in rows and len(rows) else r.load_at_sla
        if np.isfinite(B):
            out.append(Operating(B, decoding * context_per_request, r.policy not in ("ar", baseline),
                                 decoding))
    return out


def context_per_request(trace) -> float:
    """Mean KV tokens a decoding request holds: its prompt and half its output."""
    return float(np.mean(trace.prompt_tokens + trace.output_tokens / 2.0)) if len(trace) else 0.0


def prepare_draws(hw: HardwareProfile, n: int, where: list[Operating], cache_dir: str | Path | None,
                  file: str | Path | None = None) -> tuple[FitSpread | None, list[int], list[Path]]:
    """The spread of `hw`, the chosen draws and their profile files (beside the cache, or in
    the temp folder without one). No spread or n = 0: nothing to run."""
    check_spread_draws(n)
    spread = fit_spread(hw, file)
    if spread is None or n == 0:
        return spread, [], []
    indices = pick_draws(spread, n, where)
    import tempfile

    folder = Path(cache_dir) / "fit-draws" if cache_dir is not None else \
        Path(tempfile.gettempdir()) / "dspark-sim-fit-draws"
    return spread, indices, write_draw_profiles(spread, indices, folder)
