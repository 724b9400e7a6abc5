"""Held-out rollouts of a confidence-head drafter, and STS fitted on them.

Every prompt is decoded with full-gamma verification; each step with all gamma drafts
verified (the last step of a request is dropped: an EOS or the token budget may cut it)
gives the raw confidence logits z_1..z_gamma and the drafts accepted. Requests alternate
between a fitting half and an evaluation half, so the reported "after STS" figures are
measured on rollouts the temperatures never saw.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from ..fileio import write_json_atomic
from .sts import RolloutSteps, fit_sts, position_report


def collect(target: Any, drafter: Any, prompts: list[list[int]], *, gamma: int, sampling: Any,
            max_new_tokens: int, seed: int, on_prompt: Callable[[int, int], None] | None = None
            ) -> list[RolloutSteps]:
    """Raw (uncalibrated) confidence logits and accepted drafts, one RolloutSteps per prompt."""
    from ..decode.speculate import speculative_generate

    saved = dict(drafter.cfg.sts)
    drafter.cfg.sts.clear()              # raw sigmoid(z) while collecting
    out = []
    try:
        for i, ids in enumerate(prompts):
            g = torch.Generator(device=target.device).manual_seed(seed + i)
            gen = speculative_generate(target, drafter, ids, max_new_tokens=max_new_tokens,
                                       gamma=gamma, sampling=sampling, generator=g)
            rows = [(a, c) for a, c in zip(gen.accepted[:-1], gen.confidence[:-1]) if len(c) == gamma]
            c = np.clip(np.array([r[1] for r in rows], dtype=np.float64).reshape(-1, gamma), 1e-7, 1 - 1e-7)
            out.append(RolloutSteps(z=np.log(c) - np.log1p(-c),
                                    accepted=np.array([r[0] for r in rows], dtype=np.int64)))
            if on_prompt is not None:
                on_prompt(i + 1, len(prompts))
    finally:
        drafter.cfg.sts.update(saved)
    return out


def _concat(parts: list[RolloutSteps], gamma: int) -> RolloutSteps:
    parts = [p for p in parts if p.z.shape[0]]
    if not parts:
        return RolloutSteps(np.zeros((0, gamma)), np.zeros(0, dtype=np.int64))
    return RolloutSteps(np.concatenate([p.z for p in parts]), np.concatenate([p.accepted for p in parts]))


def fit_and_report(per_request: list[RolloutSteps], gamma: int) -> tuple[np.ndarray, dict, RolloutSteps]:
    """Fit STS on even-numbered requests, evaluate raw vs calibrated on odd-numbered ones."""
    fit = _concat(per_request[0::2], gamma)
    held = _concat(per_request[1::2], gamma)
    if fit.z.shape[0] < 20 or held.z.shape[0] < 20:
        raise ValueError(f"too few rollout steps to calibrate ({fit.z.shape[0]} fit, "
                         f"{held.z.shape[0]} held out); use more or longer prompts")
    temps = fit_sts(fit)
    raw, cal = position_report(held, None), position_report(held, temps)
    report = {"temperatures": temps.tolist(), "fit_steps": int(fit.z.shape[0]),
              "heldout_steps": int(held.z.shape[0]), "raw": raw, "sts": cal,
              "mean_ece_raw": float(np.nanmean([r["ece"] for r in raw])),
              "mean_ece_sts": float(np.nanmean([r["ece"] for r in cal]))}
    return temps, report, held


def store_temperatures(checkpoint_dir: str | Path, temperature: float, temps: np.ndarray) -> None:
    """Record STS temperatures for a sampling temperature in the checkpoint's config.json."""
    path = Path(checkpoint_dir) / "config.json"
    cfg = json.loads(path.read_text(encoding="utf-8"))
    cfg.setdefault("sts", {})[str(float(temperature))] = [round(float(t), 5) for t in temps]
    write_json_atomic(path, cfg)
