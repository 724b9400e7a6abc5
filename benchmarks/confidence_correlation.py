"""How much the product's own DSpark confidence head knows about a step's run: the
`confidence_correlation` (rho) of a parametric acceptance profile, measured.

The simulator's parametric confidences (sim/acceptance/sampler.py) give the scheduler, per step,
survival_j = Phi((Phi^-1(a_j) - rho S) / sqrt(1 - rho^2)) with S a standard normal signal, so
the probit of a position's survival varies across steps with standard deviation
k = rho / sqrt(1 - rho^2), i.e. rho = k / sqrt(1 + k^2). This script reads the shipped empirical
acceptance profiles of the SmolLM2-135M DSpark drafter (measured confidences beside the measured
runs), computes k per task, temperature and position from the measured survivals (cumulative
products of the per-position confidences), the implied rho, and, as checks of the model's two
assumptions, the calibration (mean survival against the share of steps that reached the
position) and the AUC of the survival as a predictor of reaching it.

    python benchmarks/confidence_correlation.py [PROFILE.json ...]

Prints one row per (profile, task, position) with at least 20 steps on each side, then the
median rho over the rows: the value the published cases' DSpark and adaptive arms take.
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from scipy.special import ndtri
from scipy.stats import rankdata

from dspark_sim.profiles.acceptance import AcceptanceProfile

DEFAULT = [Path(__file__).resolve().parents[1] / "dspark_sim" / "data" / "acceptance" / f"smollm2-135m-dspark-g7-{t}.acceptance.json"
           for t in ("t0", "t1")]
MIN_SIDE = 20


def _auc(score: np.ndarray, outcome: np.ndarray) -> float:
    ranks = rankdata(score)
    pos, neg = int(outcome.sum()), int((~outcome).sum())
    return float((ranks[outcome].sum() - pos * (pos + 1) / 2) / (pos * neg))


def rows_of(path: Path) -> list[dict]:
    prof = AcceptanceProfile.load(path)
    out = []
    for name, task in prof.tasks.items():
        measured = [r for r in task.requests if r.confidence is not None] if task.kind == "empirical" else []
        if not measured:
            continue
        surv = np.cumprod(np.concatenate([r.confidence for r in measured]), axis=1)
        runs = np.concatenate([r.accepted for r in measured])
        for j in range(surv.shape[1]):
            reached = runs >= j + 1
            if min(reached.sum(), (~reached).sum()) < MIN_SIDE:
                continue
            s = np.clip(surv[:, j], 1e-6, 1 - 1e-6)
            k = float(ndtri(s).std())
            out.append({"profile": path.name, "task": name, "position": j + 1, "steps": len(s),
                        "mean_survival": float(s.mean()), "reached": float(reached.mean()),
                        "auc": _auc(s, reached), "probit_sd": k, "rho": k / np.sqrt(1 + k * k)})
    return out


def main(paths: list[str]) -> None:
    rows = [r for p in (paths or DEFAULT) for r in rows_of(Path(p))]
    print("profile\ttask\tposition\tsteps\tmean survival\treached\tAUC\tprobit sd\trho")
    for r in rows:
        print(f"{r['profile']}\t{r['task']}\t{r['position']}\t{r['steps']}\t{r['mean_survival']:.3f}\t"
              f"{r['reached']:.3f}\t{r['auc']:.3f}\t{r['probit_sd']:.2f}\t{r['rho']:.2f}")
    rho = np.array([r["rho"] for r in rows])
    print(f"median rho over {len(rows)} rows: {np.median(rho):.2f} (p25 {np.percentile(rho, 25):.2f}, "
          f"p75 {np.percentile(rho, 75):.2f})")


if __name__ == "__main__":
    main(sys.argv[1:])
