"""Plain-text descriptions of profiles (`dspark-sim profiles show`), and the check that an
acceptance profile and a hardware profile describe the same target model."""
from __future__ import annotations

import re

import numpy as np

from .acceptance import AcceptanceProfile
from .hardware import HardwareProfile


def describe_acceptance(prof: AcceptanceProfile) -> list[str]:
    """Header, per-task acceptance and, where `measure` recorded it, the confidence calibration
    per position with its sample counts and intervals."""
    g = prof.gamma
    lines = [f"acceptance profile '{prof.name}'",
             f"  target: {prof.target or '-'}; drafter: {prof.drafter or '-'} "
             f"(kind {prof.drafter_kind or '-'}); gamma {g}; temperature {prof.temperature}",
             "  per task: mean tau (all drafts verified) and P(draft k accepted | 1..k-1 accepted):"]
    for name, task in prof.tasks.items():
        acc = " ".join(f"{a:.2f}" for a in task.conditional_accept(g))
        size = (f"{len(task.requests)} requests, "
                f"{sum(len(r.accepted) for r in task.requests)} steps"
                if task.kind == "empirical" else "parametric")
        lines.append(f"    {name}: tau {task.mean_tau(g):.3f} ({size}); k=1..{g}: {acc}")
    from ..calibration.positions import format_headline, format_position

    stored = prof.extra.get("calibration")
    tasks = stored.get("tasks") if isinstance(stored, dict) else None
    source = "as `measure` recorded it"
    if not isinstance(tasks, dict):
        tasks, source = profile_calibration(prof), "computed from the profile's recorded confidences"
    if tasks:
        lines.append(f"  confidence calibration ({source}): ECE of c_k on the steps that reached "
                     f"position k, 95% bootstrap interval over requests, n = those steps:")
        for name, task in tasks.items():
            lines.append(f"    {name}: {format_headline(task.get('headline', {}))}")
            lines.append("      " + "; ".join(format_position(r) for r in task.get("positions", [])))
    return lines


def profile_calibration(prof: AcceptanceProfile) -> dict[str, dict]:
    """Per task, the calibration of the confidences an empirical profile recorded (none for
    drafters without confidences)."""
    from ..calibration.positions import request_calibration

    out = {}
    for name, task in prof.tasks.items():
        cal = request_calibration([(r.confidence, r.accepted, r.drafted) for r in task.requests
                                   if r.confidence is not None], prof.gamma)
        if cal is not None:
            out[name] = {"headline": cal["headline"], "positions": cal["positions"]}
    return out


def describe_hardware(prof: HardwareProfile) -> list[str]:
    """Header and the step-time curve of a hardware profile."""
    lines = [f"hardware profile '{prof.name}' ({prof.source})",
             f"  device: {prof.device or '-'}; model: {prof.model or '-'}; "
             f"GPUs per replica: {prof.gpus_per_replica}"]
    if prof.step_curve is not None:
        xs = np.asarray(prof.step_curve.x)
        ys = np.asarray(prof.step_curve.y)
        lines.append("  step time (batch tokens: ms): "
                     + ", ".join(f"{int(x)}: {1e3 * y:.3g}" for x, y in zip(xs, ys)))
    elif prof.step_constant_s is not None:
        lines.append(f"  step time: {1e3 * prof.step_constant_s:.3g} ms (constant)")
    if prof.draft_curves:
        lines.append(f"  drafters: {', '.join(prof.draft_curves)}")
    return lines


def _model_key(name: str) -> list[str]:
    """A model name as comparable tokens: no org prefix, no parenthesised notes, no
    instruct/chat/base suffix, lower case, split at '-', '_', '.', ' '."""
    name = re.sub(r"\(.*?\)", "", name or "").strip().lower()
    name = name.rsplit("/", 1)[-1]
    tokens = [t for t in re.split(r"[-_\s]+", name) if t]
    while tokens and tokens[-1] in ("instruct", "chat", "base", "it", "hf"):
        tokens.pop()
    return tokens


def model_mismatch(acceptance: AcceptanceProfile, hardware: HardwareProfile) -> str | None:
    """A warning when the acceptance profile was measured with another target model than the
    one the hardware profile times; None when they match, or when either does not say (or the
    hardware profile is for 'any' model). Names match when one's tokens begin with the
    other's (DeepSeek-V4 and DeepSeek-V4-Flash; SmolLM2-135M and SmolLM2-135M-Instruct)."""
    a, h = _model_key(acceptance.target), _model_key(hardware.model)
    if not a or not h or h == ["any"]:
        return None
    n = min(len(a), len(h))
    if a[:n] == h[:n]:
        return None
    return (f"acceptance profile '{acceptance.name}' was measured with target "
            f"'{acceptance.target}', but hardware profile '{hardware.name}' times "
            f"'{hardware.model}': the simulation mixes two models")


def model_mismatch_warnings(hw: str, acceptance: dict[str, str | None]) -> list[str]:
    """model_mismatch of the hardware profile `hw` against each acceptance profile named in
    `acceptance` (policy -> shipped name or path, None: no speculation), one line each."""
    from .registry import load_acceptance_profile, load_hw_profile

    hardware = load_hw_profile(hw)
    out, seen = [], set()
    for name in acceptance.values():
        if name is None or name in seen:
            continue
        seen.add(name)
        warning = model_mismatch(load_acceptance_profile(name), hardware)
        if warning:
            out.append(warning)
    return out
