"""Plots of a hardware profile: SPS(B) and tokens/s per GPU vs batch tokens, measured points on top."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..plots import new_figure, save_figure
from ..profiles.hardware import HardwareProfile


def plot_profile(profile: HardwareProfile, path: str | Path, measurements: list[dict] | None = None,
                 contexts: tuple[float, ...] = (0.0,), draft_points: list[dict] | None = None) -> Path:
    """Two panels: SPS(B) = 1/step_time, and B x SPS(B) / gpus_per_replica (tokens/s per GPU).

    `contexts` are KV tokens per batch token at which to draw the curve (0: the bare table).
    Measured points (dicts with batch_tokens, context_tokens, median_s, p10_s, p90_s) are drawn
    with their p10..p90 spread, beside the profile's curve at the same KV tokens per batch token.
    """
    if draft_points:
        fig, (ax_sps, ax_tok, ax_draft) = new_figure(1, 3, size=(16, 4.2))
        _plot_drafts(ax_draft, profile, draft_points)
    else:
        fig, (ax_sps, ax_tok) = new_figure(1, 2, size=(11, 4.2))
    top = profile.step_curve.x[-1] if profile.step_curve is not None else 4096
    if profile.prefill_curve is not None:
        top = max(top, profile.prefill_curve.x[-1])
    B = np.unique(np.round(np.geomspace(1, top, 200)))
    gpus = profile.gpus_per_replica
    levels = sorted({round(m["context_tokens"] / m["batch_tokens"]) for m in measurements or []}) \
        or list(contexts)
    colors = [f"C{i}" for i in range(len(levels))]
    for level, color in zip(levels, colors):
        step = np.asarray(profile.step_time(B, B * level), dtype=float)
        label = "profile" if level == 0 else f"profile, {level:g} KV tokens per batch token"
        ax_sps.plot(B, 1 / step, color=color, label=label)
        ax_tok.plot(B, B / step / gpus, color=color, label=label)
    if profile.prefill_curve is not None:      # one request's chunk alone (no context term)
        chunk = np.asarray(profile.step_time(B, 0.0, B), dtype=float)
        ax_sps.plot(B, 1 / chunk, color="gray", ls="--", label="profile, prefill chunk")
        ax_tok.plot(B, B / chunk / gpus, color="gray", ls="--", label="profile, prefill chunk")
    for m in measurements or []:
        level = round(m["context_tokens"] / m["batch_tokens"])
        color = colors[levels.index(level)]
        b, med, lo, hi = m["batch_tokens"], m["median_s"], m["p10_s"], m["p90_s"]
        marker = "s" if m.get("op") == "prefill" else "o"
        ax_sps.errorbar([b], [1 / med], yerr=[[1 / med - 1 / hi], [1 / lo - 1 / med]],
                        fmt=marker, color=color, ms=4, capsize=2)
        ax_tok.errorbar([b], [b / med / gpus], yerr=[[b / med / gpus - b / hi / gpus],
                                                      [b / lo / gpus - b / med / gpus]],
                        fmt=marker, color=color, ms=4, capsize=2)
    ax_sps.set(xscale="log", yscale="log", xlabel="batch tokens B",
               ylabel="target steps per second SPS(B)", title=profile.name)
    ax_tok.set(xscale="log", yscale="log", xlabel="batch tokens B",
               ylabel="batch tokens per second per GPU",
               title=f"{profile.source}, {gpus} GPU{'s' if gpus > 1 else ''} per replica")
    fig.suptitle(f"{profile.model} on {profile.device}", fontsize=9)
    for ax in (ax_sps, ax_tok):
        ax.grid(True, which="both", alpha=0.3)
    ax_sps.legend(fontsize=7)
    if measurements:
        ax_tok.plot([], [], "o", color="gray", label="measured decode (median, p10-p90)")
        ax_tok.plot([], [], "s", color="gray", label="measured prefill chunk")
        ax_tok.legend(fontsize=7)
    return save_figure(fig, path)


def _plot_drafts(ax, profile: HardwareProfile, points: list[dict]) -> None:
    """Draft step seconds per iteration vs decoding requests, by drafter kind (gamma drafts
    each; a block drafter timed at several depths at its deepest)."""
    for i, kind in enumerate(dict.fromkeys(m["kind"] for m in points)):
        drafts = max(m["width"] for m in points if m["kind"] == kind)
        mine = [m for m in points if m["kind"] == kind and m["width"] == drafts]
        r = np.array([m["requests"] for m in mine], dtype=float)
        med = np.array([m["median_s"] for m in mine])
        lo, hi = np.array([m["p10_s"] for m in mine]), np.array([m["p90_s"] for m in mine])
        ax.errorbar(r, med * 1e3, yerr=[(med - lo) * 1e3, (hi - med) * 1e3], fmt="o", color=f"C{i}",
                    ms=4, capsize=2)
        grid = np.linspace(r.min(), r.max(), 50)
        ax.plot(grid, np.asarray(profile.draft_time(kind, grid, drafts)) * 1e3, color=f"C{i}",
                label=f"{kind} ({drafts} draft{'s' if drafts > 1 else ''}/request)")
    ax.set(xlabel="decoding requests R", ylabel="draft step per iteration (ms)",
           title="draft cost (median, p10-p90)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
