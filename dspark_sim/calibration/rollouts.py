"""Held-out rollouts of a confidence-head drafter, and STS fitted on them.

Every prompt is decoded with full-gamma verification; each step with all gamma drafts
verified (the last step of a request is dropped: an EOS or the token budget may cut it)
gives the raw confidence logits z_1..z_gamma, the drafts accepted and, for a drafter with a copy
bias, the slots where the bias applied. Requests alternate
between a fitting half and an evaluation half, so the reported "after STS" figures are
measured on rollouts the temperatures never saw.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from ..errors import InputError
from ..fileio import json_text
from .positions import position_calibration
from .sts import RolloutSteps, calibrated_logits, fit_sts_detail


def collect(target: Any, drafter: Any, prompts: list[list[int]], *, gamma: int, sampling: Any,
            max_new_tokens: int, seed: int, on_prompt: Callable[[int, int], None] | None = None
            ) -> list[RolloutSteps]:
    """Raw (uncalibrated) confidence logits, accepted drafts and copied slots, one RolloutSteps
    per prompt."""
    from ..decode.speculate import speculative_generate

    saved, saved_copy = dict(drafter.cfg.sts), dict(drafter.cfg.sts_copy)
    drafter.cfg.sts.clear()              # raw sigmoid(z) while collecting
    drafter.cfg.sts_copy.clear()
    out = []
    try:
        for i, ids in enumerate(prompts):
            g = torch.Generator(device=target.device).manual_seed(seed + i)
            gen = speculative_generate(target, drafter, ids, max_new_tokens=max_new_tokens,
                                       gamma=gamma, sampling=sampling, generator=g)
            copied = gen.copied or [[False] * len(c) for c in gen.confidence]
            rows = [(a, c, cp) for a, c, cp in zip(gen.accepted[:-1], gen.confidence[:-1], copied[:-1])
                    if len(c) == gamma]
            c = np.clip(np.array([r[1] for r in rows], dtype=np.float64).reshape(-1, gamma), 1e-7, 1 - 1e-7)
            out.append(RolloutSteps(z=np.log(c) - np.log1p(-c),
                                    accepted=np.array([r[0] for r in rows], dtype=np.int64),
                                    copied=np.array([r[2] for r in rows], dtype=bool).reshape(-1, gamma)))
            if on_prompt is not None:
                on_prompt(i + 1, len(prompts))
    finally:
        drafter.cfg.sts.update(saved)
        drafter.cfg.sts_copy.update(saved_copy)
    return out


def save_rollouts(path: str | Path, per_request: list[RolloutSteps], meta: dict) -> Path:
    """Write the raw rollouts (z, accepted, copied, per-request step counts, metadata) as one
    .npz, so the temperatures can be refitted later without decoding again."""
    path = Path(path)
    gamma = int(meta["gamma"])
    both = _concat(per_request, gamma)
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez_compressed(tmp, z=both.z.astype(np.float32), accepted=both.accepted.astype(np.int16),
                        copied=both.copied.astype(np.uint8),
                        steps_per_request=np.array([p.z.shape[0] for p in per_request], dtype=np.int64),
                        meta=np.array(json_text(meta)))
    tmp.replace(path)
    return path


def load_rollouts(path: str | Path, option: str = "--rollouts") -> tuple[list[RolloutSteps], dict]:
    """The per-request rollouts and metadata written by save_rollouts; a file that is not one
    raises InputError naming it and the array (or meta key) at fault, or `option` (the command
    line option that named the file) where the file cannot be opened as an npz at all. Files
    written before the copy bias have no `copied` array: no slot was copied."""
    path = Path(path)

    def bad(message: str, field: str | None = None) -> InputError:
        return InputError(message, file=path, field=field)
    try:
        f = np.load(path, allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise bad(f"not a rollouts file written by `dspark-sim calibrate` ({exc})",
                  option) from None
    arrays = {}
    with f:
        for key in ("z", "accepted", "steps_per_request", "meta"):
            try:
                arrays[key] = f[key]
            except KeyError:
                raise bad("missing array (not a rollouts file written by `dspark-sim calibrate`)",
                          key) from None
            except (OSError, ValueError) as exc:
                raise bad(f"unreadable array ({exc})", key) from None
        copied = f["copied"] if "copied" in f.files else None
    z, acc, counts = arrays["z"], arrays["accepted"], arrays["steps_per_request"]
    try:
        meta = json.loads(str(arrays["meta"]))
    except ValueError:
        raise bad("expected a JSON object", "meta") from None
    if not isinstance(meta, dict):
        raise bad("expected a JSON object", "meta")
    for key in ("temperature", "gamma", "seed"):
        value = meta.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value):
            raise bad(f"expected a number, got {value!r}", f"meta.{key}")
    gamma = int(meta["gamma"])
    if z.ndim != 2 or z.shape[1] != gamma or z.dtype.kind != "f":
        raise bad(f"expected a float array of shape (steps, gamma = {gamma}), got {z.dtype} "
                  f"{z.shape}", "z")
    if acc.ndim != 1 or acc.dtype.kind not in "iu" or (acc.size and (acc.min() < 0 or acc.max() > gamma)):
        raise bad(f"expected one integer 0..{gamma} per step, got {acc.dtype} {acc.shape}", "accepted")
    if counts.ndim != 1 or counts.dtype.kind not in "iu" or (counts < 0).any() \
            or int(counts.sum()) != z.shape[0] or z.shape[0] != acc.shape[0]:
        raise bad(f"steps_per_request sums to {int(counts.sum()) if counts.dtype.kind in 'iu' else '?'} "
                  f"but z has {z.shape[0]} rows and accepted {acc.shape[0]}", "steps_per_request")
    if copied is None:
        copied = np.zeros(z.shape, dtype=bool)
    elif copied.shape != z.shape or copied.dtype.kind not in "biu" or (copied.size and copied.max() > 1):
        raise bad(f"expected 0/1 flags of shape {z.shape} like z, got {copied.dtype} {copied.shape}",
                  "copied")
    edges = np.concatenate([[0], np.cumsum(counts)])
    return [RolloutSteps(z[a:b], acc[a:b], copied[a:b].astype(bool))
            for a, b in zip(edges[:-1], edges[1:])], meta


def _concat(parts: list[RolloutSteps], gamma: int) -> RolloutSteps:
    return _concat_grouped(parts, gamma)[0]


def _concat_grouped(parts: list[RolloutSteps], gamma: int) -> tuple[RolloutSteps, np.ndarray]:
    """All steps in one RolloutSteps, and the index of the request each step came from."""
    keep = [(i, p) for i, p in enumerate(parts) if p.z.shape[0]]
    if not keep:
        return RolloutSteps(np.zeros((0, gamma)), np.zeros(0, dtype=np.int64)), np.zeros(0, dtype=np.int64)
    groups = np.concatenate([np.full(p.z.shape[0], i) for i, p in keep])
    return RolloutSteps(np.concatenate([p.z for _, p in keep]),
                        np.concatenate([p.accepted for _, p in keep]),
                        np.concatenate([p.copied for _, p in keep])), groups


def fit_and_report(per_request: list[RolloutSteps], gamma: int, *,
                   heldout: list[RolloutSteps] | None = None, copy_calibration: bool = True,
                   **sts_options: Any) -> tuple[np.ndarray, np.ndarray, dict, RolloutSteps]:
    """Fit STS (temperatures, and the copied slots' own calibration) on even-numbered requests,
    evaluate raw vs calibrated on odd-numbered ones; with `heldout` (rollouts of other prompts),
    fit on every request and evaluate on those. `copy_calibration=False` fits temperatures
    alone, over copied and other slots alike (what STS did before the copy bias)."""
    if heldout is None:
        fit, groups = _concat_grouped(per_request[0::2], gamma)
        held, held_groups = _concat_grouped(per_request[1::2], gamma)
    else:
        fit, groups = _concat_grouped(per_request, gamma)
        held, held_groups = _concat_grouped(heldout, gamma)
    if fit.z.shape[0] < 20 or held.z.shape[0] < 20:
        raise ValueError(f"too few rollout steps to calibrate ({fit.z.shape[0]} fit, "
                         f"{held.z.shape[0]} held out); use more or longer prompts")
    copied_share_fit = float(fit.copied.mean()) if fit.z.size else 0.0
    if not copy_calibration:
        fit = RolloutSteps(fit.z, fit.accepted)             # no slot marked copied
    temps, copy_cal, detail = fit_sts_detail(fit, groups=groups, **sts_options)
    raw = heldout_calibration(held, held_groups, None, None)
    cal = heldout_calibration(held, held_groups, temps, copy_cal)
    report = {"temperatures": temps.tolist(), "copy_calibration": copy_cal.tolist(),
              "copied_share_fit": copied_share_fit,
              "copied_share_heldout": float(held.copied.mean()) if held.z.size else 0.0,
              "fit_steps": int(fit.z.shape[0]), "heldout_steps": int(held.z.shape[0]),
              "heldout_requests": int(len(np.unique(held_groups))), "fit": detail,
              "metric": raw["metric"], "raw": _rows(raw), "sts": _rows(cal),
              "headline": {"raw": raw["headline"], "sts": cal["headline"]}}
    return temps, copy_cal, report, held


def heldout_calibration(held: RolloutSteps, groups: np.ndarray, temps: np.ndarray | None,
                        copy_cal: np.ndarray | None) -> dict:
    """positions.position_calibration of the held-out steps' confidences, raw (temps None) or
    calibrated (every step verified all gamma drafts)."""
    conf = 1.0 / (1.0 + np.exp(-calibrated_logits(held.z, temps, copy_cal, held.copied)))
    return position_calibration(conf, held.accepted, groups)


def _rows(calibration: dict) -> list[dict]:
    """Per position: the conditional figures with the survival view nested under `survival`."""
    return [{**row, "survival": surv} for row, surv in zip(calibration["positions"],
                                                           calibration["survival"])]


def copy_cal_differs(temps: np.ndarray, copy_cal: np.ndarray | None) -> bool:
    """Whether copied slots are calibrated differently from the others at any position."""
    return copy_cal is not None and bool(np.any((copy_cal[:, 0] != temps) | (copy_cal[:, 1] != 0)))
