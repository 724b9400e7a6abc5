"""The measurement report: per-task tau with a 95% CI, per-position conditional acceptance,
accepted-run distribution, speculative vs plain tokens/s, and two plots."""
from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
from scipy import stats

from ..fileio import write_json_atomic, write_text_atomic
from .measure import Record, Settings, task_calibration


def pooled_tau(accepted_sums: np.ndarray, steps: np.ndarray) -> float:
    """Tokens per step over all steps of the given requests (accepted drafts + 1)."""
    return float(accepted_sums.sum() / steps.sum() + 1.0)


def tau_ci(accepted_sums: np.ndarray, steps: np.ndarray, seed: int = 0) -> tuple[float, float]:
    """95% CI of the pooled tau, bootstrapping whole requests (steps of a request correlate)."""
    if len(steps) < 2:
        return (float("nan"), float("nan"))
    res = stats.bootstrap((accepted_sums, steps), lambda a, s: a.sum() / s.sum() + 1.0,
                          paired=True, vectorized=False, n_resamples=2000, method="percentile",
                          confidence_level=0.95, rng=np.random.default_rng(seed))
    return float(res.confidence_interval.low), float(res.confidence_interval.high)


def task_summary(records: list[Record], gamma: int) -> dict[str, Any]:
    """Statistics of one task's records."""
    stepped = [r for r in records if r.accepted]
    acc_sums = np.array([sum(r.accepted) for r in stepped], dtype=float)
    steps = np.array([len(r.accepted) for r in stepped], dtype=float)
    runs = np.concatenate([np.asarray(r.accepted) for r in stepped]) if stepped else np.zeros(0, int)
    drafted = np.concatenate([np.asarray(r.verified) for r in stepped]) if stepped else np.zeros(0, int)
    reached = np.array([(runs >= k - 1).sum() for k in range(1, gamma + 1)], dtype=float)
    passed = np.array([(runs >= k).sum() for k in range(1, gamma + 1)], dtype=float)
    # Conditional acceptance among steps that proposed at least k drafts (what the drafter offered).
    offered = np.array([((runs >= k - 1) & (drafted >= k)).sum() for k in range(1, gamma + 1)], dtype=float)
    out: dict[str, Any] = {
        "requests": len(records),
        "steps": int(steps.sum()),
        "output_tokens": int(sum(r.output_tokens for r in records)),
        "mean_tau": pooled_tau(acc_sums, steps) if len(steps) else float("nan"),
        "mean_tau_ci95": tau_ci(acc_sums, steps),
        "request_tau": [float(a / s + 1.0) for a, s in zip(acc_sums, steps)],
        "position_accept": np.divide(passed, reached, out=np.zeros(gamma), where=reached > 0).tolist(),
        "position_reached": reached.astype(int).tolist(),
        "position_accept_when_drafted": np.divide(passed, offered, out=np.zeros(gamma),
                                                  where=offered > 0).tolist(),
        "run_distribution": (np.bincount(runs, minlength=gamma + 1) / max(len(runs), 1)).tolist(),
        "mean_drafted": float(drafted.mean()) if len(drafted) else 0.0,
        "no_draft_steps": float((drafted == 0).mean()) if len(drafted) else 0.0,
        "eos_finished": sum(r.finish == "eos" for r in records),
        "spec_tokens_per_s": _rate([r.output_tokens for r in records], [r.spec_wall_s for r in records]),
    }
    timed = [r for r in records if r.plain_wall_s]
    if timed:
        out["plain_tokens_per_s"] = _rate([r.plain_output_tokens for r in timed], [r.plain_wall_s for r in timed])
        spec_same = _rate([r.output_tokens for r in timed], [r.spec_wall_s for r in timed])
        out["speedup"] = spec_same / out["plain_tokens_per_s"]
        per_request = [(r.output_tokens / r.spec_wall_s) / (r.plain_output_tokens / r.plain_wall_s)
                       for r in timed]
        out["speedup_median_request"] = float(np.median(per_request))
    checked = [r.identical for r in records if r.identical is not None]
    if checked:
        out["identical_to_plain"] = f"{sum(checked)}/{len(checked)}"
    calibration = task_calibration(records, gamma)
    if calibration is not None:
        out["calibration"] = calibration
    return out


def _rate(tokens: list[int], seconds: list[float]) -> float:
    return float(sum(tokens) / sum(seconds)) if sum(seconds) > 0 else float("nan")


def summarize(records: list[Record], settings: Settings) -> dict[str, Any]:
    """Per-task statistics in task order of first appearance."""
    tasks: dict[str, list[Record]] = {}
    for r in records:
        tasks.setdefault(r.task, []).append(r)
    return {"settings": asdict(settings),
            "tasks": {name: task_summary(recs, settings.gamma) for name, recs in tasks.items()}}


def _fmt(x: float | None, digits: int = 2, unit: str = "") -> str:
    """`x` to `digits` places with `unit` after it; "n/a" (no unit) when it was not measured."""
    return "n/a" if x is None or not np.isfinite(x) else f"{x:.{digits}f}{unit}"


def markdown(summary: dict[str, Any], command: str, environment: str) -> str:
    """The report as Markdown tables."""
    s, tasks = summary["settings"], summary["tasks"]
    gamma = s["gamma"]
    lines = [f"# Acceptance of `{s['drafter']}` on {s['target']}", "",
             f"gamma = {gamma}, temperature = {s['temperature']}, top-k = {s['top_k']}, "
             f"top-p = {s['top_p']}, max new tokens = {s['max_new_tokens']}, seed = {s['seed']}, "
             f"chat template = {s['chat']}.", "", f"Environment: {environment}", "",
             "Command:", "", f"    {command}", "",
             "## Accepted length and speed", "",
             "tau = tokens per verification step (accepted drafts + 1), pooled over all steps; the "
             "95% CI bootstraps whole requests. tokens/s = generated tokens / wall clock (prefill "
             "included), speculative and plain decoding run side by side on each prompt.", "",
             "| task | requests | steps | mean tau | 95% CI | spec tok/s | plain tok/s | speedup | "
             "median request speedup | mean drafts/step | steps without draft | same output as plain |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, t in tasks.items():
        lo, hi = t["mean_tau_ci95"]
        lines.append(f"| {name} | {t['requests']} | {t['steps']} | {_fmt(t['mean_tau'], 3)} | "
                     f"[{_fmt(lo, 3)}, {_fmt(hi, 3)}] | {_fmt(t['spec_tokens_per_s'], 1)} | "
                     f"{_fmt(t.get('plain_tokens_per_s'), 1)} | {_fmt(t.get('speedup'), unit='x')} | "
                     f"{_fmt(t.get('speedup_median_request'), unit='x')} | {_fmt(t['mean_drafted'])} | "
                     f"{_fmt(100 * t['no_draft_steps'], 1)}% | {t.get('identical_to_plain', 'n/a')} |")
    head = " | ".join(f"k={k}" for k in range(1, gamma + 1))
    lines += ["", "## Conditional acceptance by position", "",
              "P(draft k accepted | drafts 1..k-1 accepted), over all steps (a step that proposed "
              "fewer than k drafts counts as a rejection at k, as in the acceptance profile).", "",
              f"| task | {head} |", "|---|" + "---|" * gamma]
    for name, t in tasks.items():
        lines.append(f"| {name} | " + " | ".join(_fmt(v, 3) for v in t["position_accept"]) + " |")
        lines.append(f"| {name} (steps reaching k) | " + " | ".join(str(v) for v in t["position_reached"]) + " |")
    lines += ["", "Same, counting only steps that proposed at least k drafts:", "",
              f"| task | {head} |", "|---|" + "---|" * gamma]
    for name, t in tasks.items():
        lines.append(f"| {name} | " + " | ".join(_fmt(v, 3) for v in t["position_accept_when_drafted"]) + " |")
    lines += _calibration_markdown(tasks, gamma)
    head = " | ".join(str(k) for k in range(gamma + 1))
    lines += ["", "## Distribution of accepted runs", "",
              "Fraction of steps that accepted exactly n drafts.", "",
              f"| task | {head} |", "|---|" + "---|" * (gamma + 1)]
    for name, t in tasks.items():
        lines.append(f"| {name} | " + " | ".join(_fmt(v, 3) for v in t["run_distribution"]) + " |")
    return "\n".join(lines) + "\n"


def _calibration_markdown(tasks: dict[str, Any], gamma: int) -> list[str]:
    """The confidence calibration table (tasks whose drafter reported confidences)."""
    from ..calibration.positions import METRIC, format_headline

    rows = [(name, t["calibration"]) for name, t in tasks.items() if t.get("calibration")]
    if not rows:
        return []
    head = " | ".join(f"k={k}" for k in range(1, gamma + 1))
    lines = ["", "## Confidence calibration by position", "", METRIC, "",
             "ECE in % [95% interval] (n):", "", f"| task | headline | {head} |",
             "|---|---|" + "---|" * gamma]
    for name, cal in rows:
        cells = []
        for r in cal["positions"]:
            if r["ece"] is None:
                cells.append("- (0)")
                continue
            ci = r["ece_ci95"]
            band = f" [{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]" if ci else ""
            cells.append(f"{100 * r['ece']:.1f}{band} ({r['n']})")
        lines.append(f"| {name} | {format_headline(cal['headline'])} | " + " | ".join(cells) + " |")
    return lines


def plot(summary: dict[str, Any], stem: Path) -> list[Path]:
    """Per-position acceptance per task, and the per-request tau histogram."""
    from ..plots import new_figure, save_figure

    gamma, tasks = summary["settings"]["gamma"], summary["tasks"]
    fig, ax = new_figure()
    for name, t in tasks.items():
        ax.plot(range(1, gamma + 1), t["position_accept"], marker="o", label=name)
    ax.set(xlabel="draft position k", ylabel="P(accept k | 1..k-1 accepted)", ylim=(0, 1),
           title=f"{summary['settings']['drafter']}: conditional acceptance by position")
    ax.legend()
    paths = [save_figure(fig, stem.with_name(stem.name + ".position-accept.png"))]
    fig, ax = new_figure()
    taus = [t["request_tau"] for t in tasks.values()]
    hi = max((max(v) for v in taus if v), default=gamma + 1)
    ax.hist(taus, bins=np.linspace(1, max(hi, 1.5), 25), label=list(tasks), alpha=0.8)
    ax.set(xlabel="mean tau of a request (tokens per step)", ylabel="requests",
           title=f"{summary['settings']['drafter']}: accepted length per request")
    ax.legend()
    paths.append(save_figure(fig, stem.with_name(stem.name + ".tau-hist.png")))
    return paths


def write_report(records: list[Record], settings: Settings, out: Path, command: str,
                 environment: str) -> list[Path]:
    """Write STEM.report.json, STEM.report.md and the plots next to the profile `out`."""
    name = out.name[: -len(".acceptance.json")] if out.name.endswith(".acceptance.json") else out.stem
    stem = out.with_name(name)
    summary = summarize(records, settings)
    summary["command"], summary["environment"] = command, environment
    json_path = stem.with_name(name + ".report.json")
    md_path = stem.with_name(name + ".report.md")
    write_json_atomic(json_path, summary)
    write_text_atomic(md_path, markdown(summary, command, environment))
    return [json_path, md_path, *plot(summary, stem)]
