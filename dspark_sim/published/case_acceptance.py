"""A published case arm's acceptance: the point the prediction uses, and the bounds the sources allow.

    acceptance: {gamma, drafter_kind, basis, how, source,
                 position_accept: [...] | position_rates: [...] | accept_length: L,
                 range?: {low: {<one of the three>, basis, how, source},
                          high: {<one of the three>, basis, how, source}},
                 confidence_correlation?: {value, basis, how}}

`position_accept` is the conditional rate per position, `position_rates` vLLM's unconditional
per-position metric (conditional = rate_j / rate_(j-1)), `accept_length` the mean tokens per
verify step at gamma drafts (a flat per-position rate is solved from it). A `range` gives the
lowest and highest acceptance the sources allow where the case's own is not published: the
gain interval of published/predict.py spans it (the low end with the draw least favourable to
speculation, the high end with the most favourable). Each bound must not exceed the point's
tokens per verify at the low end, nor fall under it at the high end. `confidence_correlation`
(rho in [0, 1), profiles/acceptance.py) says how much the drafter's per-step confidences know
about the step's run, for the arms whose scheduler reads them (dspark, vllm-adaptive); it
applies to the point and both bounds, and without it the confidences are the flat rates.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..profiles.acceptance import AcceptanceProfile, TaskAcceptance
from ..profiles.validate import FieldChecker
from .provenance import basis, text

FORMS = ("position_accept", "position_rates", "accept_length")


@dataclass
class ArmAcceptance:
    """The point acceptance of an arm and, when the case gives them, its sourced bounds."""

    point: AcceptanceProfile
    note: dict[str, str]
    low: AcceptanceProfile | None = None
    high: AcceptanceProfile | None = None
    bound_notes: dict[str, dict[str, str]] = field(default_factory=dict)


def flat_rate(length: float, gamma: int) -> float:
    """The per-position acceptance a with 1 + a + a^2 + ... + a^gamma = length (bisection)."""
    lo, hi = 0.0, 1.0
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if 1 + sum(mid ** j for j in range(1, gamma + 1)) < length else (lo, mid)
    return (lo + hi) / 2


def tokens_per_verify(prof: AcceptanceProfile) -> float:
    """1 + expected accepted drafts at the profile's gamma (its default task)."""
    cond = prof.tasks[prof.default_task].position_accept
    return float(1 + np.cumprod(cond).sum())


def _provenance(check: FieldChecker, spec: dict, key: str) -> dict[str, str]:
    return {"basis": basis(check, spec, key), "how": text(check, spec, "how", key),
            "source": text(check, spec, "source", key)}


def _conditional(check: FieldChecker, spec: dict, key: str, gamma: int) -> tuple[list[float], str]:
    """The conditional per-position rates of one acceptance form, and how they were derived."""
    given = [k for k in FORMS if k in spec]
    if len(given) != 1:
        raise check.fail(key, "give exactly one of position_accept, position_rates, accept_length")
    if given[0] == "accept_length":
        length = check.number(spec["accept_length"], f"{key}.accept_length", 1.0, exclusive=True)
        if length >= gamma + 1:
            raise check.fail(f"{key}.accept_length", f"{length} is not below gamma + 1 = {gamma + 1}")
        alpha = flat_rate(length, gamma)
        return [alpha] * gamma, (f"flat per-position acceptance {alpha:.4f} solves 1 + sum_j a^j = "
                                 f"{length:g} (j = 1..{gamma})")
    vals = check.number_list(spec[given[0]], f"{key}.{given[0]}", 0.0)
    if len(vals) != gamma or any(v > 1 for v in vals):
        raise check.fail(f"{key}.{given[0]}", f"expected {gamma} rates in [0, 1]")
    if given[0] == "position_accept":
        return vals, ""
    if any(b > a + 1e-12 for a, b in zip(vals, vals[1:])):
        raise check.fail(f"{key}.position_rates", "unconditional rates must not increase")
    return ([vals[0]] + [b / a if a > 0 else 0.0 for a, b in zip(vals, vals[1:])],
            "conditional rates = rate_j / rate_(j-1) of the published per-position rates")


def _profile(name: str, gamma: int, kind: str, cond: list[float], note: dict[str, str],
             rho: float = 0.0) -> AcceptanceProfile:
    task = TaskAcceptance("parametric", np.asarray(cond, dtype=float), confidence_correlation=rho)
    return AcceptanceProfile(name=name, gamma=gamma, tasks={"default": task},
                             default_task="default", drafter_kind=kind,
                             extra={"source": note["source"], "notes": f"{note['basis']}: {note['how']}"})


def arm_acceptance(check: FieldChecker, spec: Any, key: str, name: str) -> ArmAcceptance:
    """Read an arm's `acceptance` (errors name FILE:LINE and the field)."""
    spec = check.mapping(spec, key)
    gamma = check.integer(check.require(spec, "gamma", key), f"{key}.gamma", 1)
    kind = text(check, spec, "drafter_kind", key)
    note = _provenance(check, spec, key)
    cond, derived = _conditional(check, spec, key, gamma)
    if derived:
        note["derived"] = derived
    rho = 0.0
    if spec.get("confidence_correlation") is not None:
        ckey = f"{key}.confidence_correlation"
        cspec = check.mapping(spec["confidence_correlation"], ckey)
        rho = check.number(check.require(cspec, "value", ckey), f"{ckey}.value", 0.0)
        if rho >= 1.0:
            raise check.fail(f"{ckey}.value", f"must be in [0, 1), got {rho:g}")
        note["confidence"] = f"confidence correlation {rho:g} ({basis(check, cspec, ckey)}: {text(check, cspec, 'how', ckey)})"
    out = ArmAcceptance(_profile(name, gamma, kind, cond, note, rho), note)
    if spec.get("range") is None:
        return out
    rng = check.mapping(spec["range"], f"{key}.range")
    point_tau = tokens_per_verify(out.point)
    for side in ("low", "high"):
        bkey = f"{key}.range.{side}"
        bspec = check.mapping(check.require(rng, side, f"{key}.range"), bkey)
        bnote = _provenance(check, bspec, bkey)
        bcond, bderived = _conditional(check, bspec, bkey, gamma)
        if bderived:
            bnote["derived"] = bderived
        prof = _profile(f"{name}-{side}", gamma, kind, bcond, bnote, rho)
        tau = tokens_per_verify(prof)
        if (side == "low" and tau > point_tau + 1e-9) or (side == "high" and tau < point_tau - 1e-9):
            raise check.fail(bkey, f"{tau:.3f} tokens per verify is on the wrong side of the point's "
                             f"{point_tau:.3f}")
        setattr(out, side, prof)
        out.bound_notes[side] = bnote
    return out
