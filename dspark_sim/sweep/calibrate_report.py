"""The fit report of `profile fit`: residuals per observation, parameters with their spread, the
observed-vs-fitted frontier plot, and the fitted profile's `fit` block."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..hardware.observations import LoadPoint
from ..plots import new_figure, save_figure
from .calibrate import Calibration, FitResult
from .load_replay import simulate_load
from .ttft_check import warning


def max_abs_error(result: FitResult) -> float:
    """The largest relative error of the simulator (or the fitted step) on an observation."""
    res = result.residuals()
    errs = [abs(r["throughput_rel_error"]) for r in res if r["kind"] == "load"] + \
           [abs(r["tps_rel_error"]) for r in res if r["kind"] == "load"] + \
           [abs(r["rel_error"]) for r in res if r["kind"] == "step"]
    return float(max(errs)) if errs else 0.0


def fit_block(result: FitResult, cal: Calibration, sources: list[str]) -> dict[str, Any]:
    """What the profile records about its own fit (kept under `fit` in the YAML)."""
    res = result.residuals()
    return {
        "method": "simulator-in-the-loop least squares (defect correction of a steady-state "
                  "surrogate, dspark_sim/sweep/calibrate.py); residuals are the simulator's",
        "observations": sources,
        "family": cal.fam.as_dict(),
        "parameters": {k: float(f"{v:.6g}") for k, v in result.params.items()},
        "uncertainty": {k: {kk: float(f"{vv:.4g}") for kk, vv in v.items()}
                        for k, v in result.uncertainty.items()},
        "uncertainty_method": result.bootstrap_method,
        "bootstrap_samples": result.bootstrap_kept,
        "singular_values": [float(f"{v:.4g}") for v in result.singular_values],
        "max_abs_rel_error": max_abs_error(result),
        "simulation": {"requests_per_user": cal.cfg.requests_per_user, "seed": cal.cfg.seed,
                       "rounds": cal.cfg.rounds},
        "draft_costs": {**cal.draft_costs(result.params).as_dict(),
                        **({"band": band} if (band := cal.draft_band()) else {})},
        "priors": ({"centres": {k: float(f"{v:.6g}") for k, v in cal.priors.items()},
                    "spread_log": cal.cfg.prior_spread,
                    **({"spread_log_draft_scale": cal.spreads["draft_scale"]} if "draft_scale" in cal.spreads else {}),
                    "posterior_over_prior_spread": {k: float(f"{v:.3g}") for k, v in result.prior_share.items()}}
                   if cal.priors else None),
        "observed_range": result.observed_range,
        "draws": [{k: float(f"{v:.6g}") for k, v in d.items()} for d in result.draws],
        "residuals": [{k: (float(f"{v:.6g}") if isinstance(v, float) else v)
                       for k, v in r.items() if v is not None} for r in res],
    }


def report_markdown(result: FitResult) -> str:
    """Human-readable report: parameters and residuals."""
    lines = ["# profile fit report", "", "| parameter | value | std | 5% | 95% |", "|---|---|---|---|---|"]
    for p, v in result.params.items():
        u = result.uncertainty.get(p)
        lines.append(f"| {p} | {v:.4g} | " + (f"{u['std']:.2g} | {u['p05']:.4g} | {u['p95']:.4g} |"
                                              if u else "fixed | | |"))
    lines += ["", f"Uncertainty: {result.bootstrap_method}, {result.bootstrap_kept} samples."]
    if "per_request_s" not in result.uncertainty and result.params.get("per_request_s", 0.0) == 0.0:
        lines.append("per_request_s is 0, not fitted: observations at one verify width per policy "
                     "cannot tell a cost per request from a cost per token, and at 0 every verified "
                     "draft is priced like a decoding request (the split least favourable to "
                     "speculation). Give --roofline (priors), observations at other verify widths, or "
                     "--fix per_request_s=VALUE to see another split.")
    led = [p for p, r in result.prior_share.items() if r > 0.5]
    if led:
        lines.append(f"Set mostly by the prior (posterior spread > half the prior's): {', '.join(led)}.")
    lines += ["",
              "| observation | policy | users | tok/s/user obs -> sim | error | tok/s/GPU obs -> sim | error |",
              "|---|---|---|---|---|---|---|"]
    for r in result.residuals():
        if r["kind"] == "step":
            lines.append(f"| {r['label'] or r['where']} (step) | | | {r['observed_s'] * 1e3:.3f} ms -> "
                         f"{r['fitted_s'] * 1e3:.3f} ms | {r['rel_error']:+.1%} | | |")
            continue
        users = f"{r['users']}" + (f" (whole run of {r['requests']:,} requests)"
                                   if r.get("window") == "whole-run" else "")
        lines.append(f"| {r['label'] or r['where']} | {r['policy']} | {users} | "
                     f"{r['observed_tps_user']:.1f} -> {r['simulated_tps_user']:.1f} ({r['tps_stat']}) | "
                     f"{r['tps_rel_error']:+.1%} | {r['observed_throughput']:,.0f} -> "
                     f"{r['simulated_throughput']:,.0f} | {r['throughput_rel_error']:+.1%} |")
    ttft = [r for r in result.residuals() if r["kind"] == "load" and r["observed_ttft_s"] is not None]
    if ttft:   # reported, not fitted: TTFT depends on queueing the closed loop may not share
        lines += ["", "TTFT (not fitted): " + "; ".join(
            f"{r['label'] or r['where']}: {r['observed_ttft_s'] * 1e3:.0f} ms observed, "
            f"{r['simulated_ttft_s'] * 1e3:.0f} ms simulated (p50)" for r in ttft)]
        note = warning([(r["observed_ttft_s"], r["simulated_ttft_s"]) for r in ttft], "observed")
        if note:
            lines += ["", note]
    return "\n".join(lines) + "\n"


def fitted_frontiers(cal: Calibration, result: FitResult, points: int = 8,
                     progress: Callable[[str], None] | None = None) -> dict[str, np.ndarray]:
    """Per observed (policy, acceptance) group: simulated (users, tps, throughput) over a
    concurrency range spanning its observations (x0.5 .. x2)."""
    groups: dict[str, list[LoadPoint]] = {}
    for p in cal.loads:
        groups.setdefault(f"{p.policy} ({p.acceptance or 'no drafts'})", []).append(p)
    out = {}
    for label, obs in groups.items():
        users = [cal.meta[cal.points.index(p)]["users"] for p in obs]
        grid = np.unique(np.rint(np.geomspace(max(1, min(users) / 2), max(users) * 2, points)).astype(int))
        rows = []
        for u in grid:
            s = simulate_load(result.profile, replace(obs[0], concurrency=int(u)), int(u), cal.cfg)
            rows.append((u, s.tps_user, s.throughput_tok_s_per_gpu))
            if progress:
                progress(f"{label} {u} users")
        out[label] = np.array(rows, dtype=float)
    return out


def frontier_plot(cal: Calibration, result: FitResult, curves: dict[str, np.ndarray],
                  path: str | Path) -> Path:
    """Observed points and the fitted profile's simulated frontier, throughput vs tok/s/user."""
    fig, ax = new_figure(size=(7.0, 4.8))
    import matplotlib

    cmap = matplotlib.colormaps["tab10"]
    for i, (label, arr) in enumerate(curves.items()):
        ax.plot(arr[:, 1], arr[:, 2], "-", color=cmap(i), label=f"fitted: {label}")
    sims = dict(zip(map(id, result.points), result.simulated))
    for p in cal.loads:
        i = list(curves).index(f"{p.policy} ({p.acceptance or 'no drafts'})")
        s = sims[id(p)]
        ax.plot(p.tps_user, p.throughput_tok_s_per_gpu, "o", color=cmap(i), ms=7)
        ax.plot(s.tps_user, s.throughput_tok_s_per_gpu, "x", color=cmap(i), ms=7)
        ax.annotate(f"{s.throughput_tok_s_per_gpu / p.throughput_tok_s_per_gpu - 1:+.1%}",
                    (p.tps_user, p.throughput_tok_s_per_gpu), textcoords="offset points",
                    xytext=(5, 5), fontsize=8)
    ax.plot([], [], "ko", label="observed")
    ax.plot([], [], "kx", label="simulated at the observed load")
    ax.set_xlabel("tok/s/user")
    ax.set_ylabel("throughput per GPU (tok/s)")
    ax.set_title(f"{result.profile.name}: observed vs fitted")
    ax.legend(fontsize=8)
    return save_figure(fig, path)
