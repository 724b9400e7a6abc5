"""Results of the shipped drafters in the shape of the DSpark paper's Table 1: tau per task
per drafter at T = 0 and T = 1, macro gains of DSpark, position-wise conditional acceptance,
DSpark tokens/s vs plain decoding, calibration per position, training cost.

Reads the measure reports (STEM.report.json) and the training / calibration outputs written
by scripts/ship_drafters.sh (the training summaries are snapshotted to OUT/training.json, which
stands in for them when the runs are gone; a calibration section whose reports are gone is kept
from the existing OUT/results.md, with a notice), and optionally a bench_decode.py --json file of
plain / full-gamma / scheduled DSpark decoding; writes OUT/results.md and plots into OUT/.
Usage: python -m dspark_sim.train.reports.drafters_table --measure runs/train/measure --runs runs/train --out docs/drafters
"""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import numpy as np

from dspark_sim.fileio import json_text, write_text_atomic
from dspark_sim.plots import new_figure, save_figure

KINDS = ("mtp1", "eagle3", "dflash", "dspark")
TASKS = ("math", "code", "chat")
NAMES = {"mtp1": "MTP-1 (gamma 1)", "eagle3": "Eagle3", "dflash": "DFlash", "dspark": "DSpark"}


def load_reports(measure: Path) -> dict[tuple[str, int], dict]:
    out = {}
    for kind in KINDS:
        g = 1 if kind == "mtp1" else 7
        for t in (0, 1):
            p = measure / f"smollm2-135m-{kind}-g{g}-t{t}.report.json"
            if p.is_file():
                out[kind, t] = json.loads(p.read_text())
    return out


def tau_table(reports: dict, t: int) -> list[str]:
    lines = [f"| drafter (T = {t}) | " + " | ".join(f"{x} tau [95% CI]" for x in TASKS) + " | macro mean |",
             "|---|" + "---|" * (len(TASKS) + 1)]
    for kind in KINDS:
        r = reports.get((kind, t))
        if r is None:
            continue
        cells, vals = [], []
        for task in TASKS:
            s = r["tasks"].get(task)
            if s is None:
                cells.append("n/a")
                continue
            lo, hi = s["mean_tau_ci95"]
            cells.append(f"{s['mean_tau']:.2f} [{lo:.2f}, {hi:.2f}]")
            vals.append(s["mean_tau"])
        lines.append(f"| {NAMES[kind]} | " + " | ".join(cells) + f" | {np.mean(vals):.2f} |")
    return lines


def macro_gain(reports: dict, t: int, a: str, b: str) -> float | None:
    """Mean over tasks of tau_a / tau_b - 1 (the paper's macro gain)."""
    ra, rb = reports.get((a, t)), reports.get((b, t))
    if ra is None or rb is None:
        return None
    return float(np.mean([ra["tasks"][x]["mean_tau"] / rb["tasks"][x]["mean_tau"] - 1 for x in TASKS]))


def position_plot(reports: dict, t: int, out: Path) -> Path:
    fig, axes = new_figure(1, len(TASKS), size=(4.2 * len(TASKS), 3.6))
    for ax, task in zip(axes, TASKS):
        for kind in KINDS:
            r = reports.get((kind, t))
            if r is None or kind == "mtp1":
                continue
            acc = r["tasks"][task]["position_accept"]
            ax.plot(range(1, len(acc) + 1), acc, marker="o", label=NAMES[kind])
        ax.set(title=f"{task}, T = {t}", xlabel="draft position k", ylim=(0, 1),
               ylabel="P(accept k | 1..k-1 accepted)")
        ax.legend(fontsize=8)
    return save_figure(fig, out / f"position-accept-t{t}.png")


def speed_table(reports: dict) -> list[str]:
    lines = ["| T | task | DSpark tau | DSpark tok/s | plain tok/s | speedup | median request speedup |",
             "|---|---|---|---|---|---|---|"]
    for t in (0, 1):
        r = reports.get(("dspark", t))
        if r is None:
            continue
        for task in TASKS:
            s = r["tasks"][task]
            if "plain_tokens_per_s" not in s:
                continue
            lines.append(f"| {t} | {task} | {s['mean_tau']:.2f} | {s['spec_tokens_per_s']:.1f} | "
                         f"{s['plain_tokens_per_s']:.1f} | {s['speedup']:.2f}x | "
                         f"{s['speedup_median_request']:.2f}x |")
    return lines


def calibration_table(runs: Path) -> list[str]:
    lines = []
    for t in (0, 1):
        p = runs / f"calibration-t{t}" / "calibration.json"
        if not p.is_file():
            continue
        c = json.loads(p.read_text())
        g = len(c["temperatures"])
        if c.get("heldout_rollouts"):
            where = (f"fitted on all {c['fit_steps']} steps of the calibration prompts, evaluated on "
                     f"{c['heldout_steps']} steps of other prompts (`{c['heldout_rollouts']}`)")
        else:
            where = (f"fitted on {c['fit_steps']} steps (even requests), evaluated on "
                     f"{c['heldout_steps']} held-out steps (odd requests)")
        if "headline" in c:        # sample-weighted (calibration/positions.py)
            raw, sts = c["headline"]["raw"]["ece"], c["headline"]["sts"]["ece"]
            label = "ECE weighted by the steps reaching each position"
        else:                      # reports written before: a plain mean over positions
            raw, sts, label = c["mean_ece_raw"], c["mean_ece_sts"], "mean ECE over positions"
        lines += [f"", f"T = {t}: {where}; {label} {100 * raw:.2f}% raw -> "
                  f"{100 * sts:.2f}% after STS.", "",
                  "| position k | " + " | ".join(str(k) for k in range(1, g + 1)) + " |",
                  "|---|" + "---|" * g]
        for label, rows in (("ECE raw", c["raw"]), ("ECE STS", c["sts"])):
            lines.append(f"| {label} | " + " | ".join("-" if r["ece"] is None else f"{100 * r['ece']:.1f}%"
                                                     for r in rows) + " |")
        if "headline" in c:
            lines.append("| n (steps reaching k) | " + " | ".join(str(r["n"]) for r in c["sts"]) + " |")
        for label, key in (("AUROC STS", "auroc"), ("Brier STS", "brier")):
            lines.append(f"| {label} | " + " | ".join("-" if r[key] is None else f"{r[key]:.3f}"
                                                     for r in c["sts"]) + " |")
        if "headline" in c:
            lines.append("| P(k accepted given 1..k-1) | " + " | ".join(
                "-" if r["accept_rate"] is None else f"{r['accept_rate']:.3f}" for r in c["sts"]) + " |")
        else:
            lines.append("| P(1..k accepted) | " + " | ".join(f"{r['accept_rate']:.3f}" for r in c["sts"]) + " |")
        lines.append("| T_k | " + " | ".join(f"{x:.2f}" for x in c["temperatures"]) + " |")
        if "fit" in c:
            lines.append("| fit rule | " + " | ".join(_rule_label(f["rule"]) for f in c["fit"]) + " |")
            label = "fit positives" if c.get("heldout_rollouts") else "fit-half positives"
            lines.append(f"| {label} | " + " | ".join(str(f["positives"]) for f in c["fit"]) + " |")
    return lines


def _rule_label(rule: str) -> str:
    """A short table label of an STS fit rule (sts.fit_sts_detail's `rule` text)."""
    if rule == "fitted":
        return "fitted"
    if "cross-validated" in rule:
        return "kept 1 (no CV gain)"
    m = re.match(r"kept 1: fewer than (\d+) (accepted prefixes|failures)", rule)
    if m:
        return f"kept 1 (< {m.group(1)} {'positives' if m.group(2) == 'accepted prefixes' else 'failures'})"
    return rule


def previous_section(results: Path, title: str) -> list[str]:
    """The body of section `## title` in an earlier results.md (empty if it has none)."""
    if not results.is_file():
        return []
    body, inside = [], False
    for line in results.read_text().splitlines():
        if line.startswith("## "):
            inside = line[3:].strip() == title
        elif inside:
            body.append(line)
    while body and not body[-1].strip():
        body.pop()
    return body


def training_rows(runs: Path, snapshot: Path, suffix: str = "") -> list[dict]:
    """One row per drafter from the training summaries (runs/KIND{suffix}/summary.json); they are
    also saved to `snapshot`, which stands in for them on a machine where the runs are gone (a
    kind whose run is gone keeps its snapshot row, so re-shipping one drafter keeps the others)."""
    saved = {r["kind"]: r for r in json.loads(snapshot.read_text())["drafters"]} if snapshot.is_file() else {}
    fresh = {}
    for kind in KINDS:
        p = runs / f"{kind}{suffix}" / "summary.json"
        if not p.is_file():
            continue
        s = json.loads(p.read_text())
        acc = s["validation"].get("accept@k") or s["validation"].get("agree@k") or []
        fresh[kind] = {"kind": kind, "parameters": s["parameters"], "steps": s.get("total_steps", s["steps"]),
                       "train_seconds": s["train_seconds"], "prior_steps": s.get("prior_steps", 0),
                       "records": s["data"]["records"], "tokens": s["data"]["tokens"], "accept_at_k": acc}
    merged = {**saved, **fresh}
    rows = [merged[kind] for kind in KINDS if kind in merged]
    if fresh:
        write_text_atomic(snapshot, json_text({"source": str(runs), "drafters": rows}, indent=1) + "\n")
    return rows


def training_table(rows: list[dict]) -> list[str]:
    lines = ["| drafter | parameters (own) | optimizer steps | train time (last run) | data (sequences / tokens) | held-out accept@1..k (1 - TV) |",
             "|---|---|---|---|---|---|"]
    for s in rows:
        prior = s.get("prior_steps", 0)
        steps = f"{s['steps']}" + (f" ({prior} + {s['steps'] - prior}, warm restart)" if prior else "")
        lines.append(f"| {NAMES[s['kind']]} | {s['parameters'] / 1e6:.2f} M | {steps} | "
                     f"{s['train_seconds'] / 60:.1f} min | {s['records']} / {s['tokens']} | "
                     + " ".join(f"{a:.2f}" for a in s["accept_at_k"]) + " |")
    return lines


def bound_cell(bound: dict | None) -> str:
    """`1.17x (k = 2)` from bench_decode's per-task bound, or `-` when the run has none."""
    return "-" if not bound else f"{bound['bound']:.2f}x (k = {bound['best_k']})"


def scheduled_speed_table(path: Path | None) -> list[str]:
    """Per task: plain, full-gamma and scheduled DSpark tokens/s from bench_decode.py --json."""
    if path is None or not path.is_file():
        return []
    d = json.loads(path.read_text())
    recs = d["records"]
    repeats = d["args"].get("repeats", 1)
    lines = ["", f"Side by side per prompt (`benchmarks/bench_decode.py`, {d['args']['prompts']} prompts per "
             f"task, {d['args']['tokens']} new tokens, {repeats} interleaved run(s) of each decoder per "
             f"prompt, the median-time one counting; scheduler curve `{d['args']['hw']}`; "
             f"{d.get('device', 'device not recorded')}, load average {d.get('load_after', float('nan')):.1f} "
             "after the run): medians over "
             "prompts, ratios are medians of per-prompt ratios; the bound is max over k of "
             "tau(k) x S(1) / (S(k + 1) + draft(k)) from the full-gamma steps.", "",
             "| task | plain tok/s | full gamma tok/s | scheduled tok/s | tau full / scheduled | "
             "drafts verified per step (scheduled) | draft steps skipped | full / plain | scheduled / plain | "
             "bound (best k) | outputs identical |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    bounds = d.get("bounds", {})

    def rate(r, k):
        return r[k]["tokens"] / r[k]["wall_s"]
    for task in dict.fromkeys(r["task"] for r in recs):
        rows = [r for r in recs if r["task"] == task]
        med = {k: float(np.median([rate(r, k) for r in rows])) for k in ("plain", "full", "scheduled")}
        ratio = {k: float(np.median([rate(r, k) / rate(r, "plain") for r in rows])) for k in ("full", "scheduled")}
        lines.append(f"| {task} | {med['plain']:.1f} | {med['full']:.1f} | {med['scheduled']:.1f} | "
                     f"{np.mean([r['full']['tau'] for r in rows]):.2f} / {np.mean([r['scheduled']['tau'] for r in rows]):.2f} | "
                     f"{np.mean([r['scheduled']['verified'] for r in rows]):.2f} | "
                     f"{np.mean([r['scheduled']['skipped'] for r in rows]):.0%} | {ratio['full']:.2f}x | "
                     f"{ratio['scheduled']:.2f}x | {bound_cell(bounds.get(task))} | "
                     f"{sum(r['identical'] for r in rows)}/{len(rows)} |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--measure", type=Path, default=Path("runs/train/measure"))
    ap.add_argument("--runs", type=Path, default=Path("runs/train"))
    ap.add_argument("--run-suffix", default="", help="training runs are RUNS/KIND+SUFFIX (e.g. -s0-400)")
    ap.add_argument("--out", type=Path, default=Path("docs/drafters"))
    ap.add_argument("--speed", type=Path, default=None,
                    help="bench_decode.py --json output with plain/full/scheduled DSpark runs")
    a = ap.parse_args()
    if not a.measure.is_dir():
        ap.error(f"--measure {a.measure}: no such directory (the measure reports STEM.report.json)")
    reports = load_reports(a.measure)
    if not reports:
        ap.error(f"--measure {a.measure}: no smollm2-135m-KIND-gG-tT.report.json in it")
    a.out.mkdir(parents=True, exist_ok=True)
    lines = ["# Shipped drafters on SmolLM2-135M-Instruct: results", "",
             "Generated by `python -m dspark_sim.train.reports.drafters_table` from the measure reports.", ""]
    for t in (0, 1):
        some = next((r for (k, tt), r in reports.items() if tt == t), None)
        setting = "" if some is None else (f", {some['settings']['max_new_tokens']} new tokens, "
                                           f"{some['tasks'][TASKS[0]]['requests']} prompts per task")
        lines += [f"## Accepted length tau, T = {t} (gamma = 7{setting})", ""] + tau_table(reports, t)
        gains = [(b, macro_gain(reports, t, "dspark", b)) for b in ("dflash", "eagle3", "mtp1")]
        lines += [""] + [f"- macro gain of DSpark over {NAMES[b]}: {100 * g:+.1f}%" for b, g in gains if g is not None]
        lines += ["", f"![position-wise acceptance](position-accept-t{t}.png)", ""]
        if any((k, t) in reports for k in KINDS):
            position_plot(reports, t, a.out)
    lines += ["## DSpark speculative decoding vs plain decoding (wall clock, this CPU)", ""]
    measured = speed_table(reports)
    if len(measured) > 2:                  # a header alone: the profiles were measured --no-plain
        lines += ["From `dspark-sim measure --plain` (every draft verified; the measured prompts, "
                  "plain decoding run beside each one):", ""] + measured
    lines += scheduled_speed_table(a.speed)
    calib_title = "Confidence calibration (DSpark, survival a_k vs P(drafts 1..k accepted))"
    calibration = calibration_table(a.runs)
    if not calibration:
        calibration = previous_section(a.out / "results.md", calib_title)
        if calibration:
            print(f"note: no calibration reports under {a.runs}; the calibration section is kept "
                  f"from {a.out / 'results.md'}")
    lines += ["", f"## {calib_title}"] + calibration
    lines += ["", "## Training", ""] + training_table(training_rows(a.runs, a.out / "training.json", a.run_suffix))
    write_text_atomic(a.out / "results.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
