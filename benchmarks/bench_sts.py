"""Benchmark: wall time of the confidence calibration fit (`fit_sts_detail`, what `calibrate` runs).

    .venv/bin/python benchmarks/bench_sts.py [--steps 4000] [--repeats 5] [--against PATH]

Synthetic rollouts of the shape `calibrate` fits (gamma 4 slots, 40% of them copied slots whose
acceptance their logits under-state, requests of 20 steps): each repeat fits them once, with the
default 32 bootstrap resamples and 2-fold cross-validation. Prints the median wall time over the
repeats, the load average, and the fit's temperatures and copied-slot calibration.

With `--against PATH` (another checkout's repository root, e.g. a `git worktree` of an older
commit), the two are run alternately in fresh processes, repeat by repeat, and the ratio of their
medians is printed with a check that both fitted the same values.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def rollouts(n: int, seed: int = 0, shift: float = 2.0, scale: float = 4.0, gamma: int = 4):
    """Steps whose conditional survival is sigmoid(s) on ordinary slots and sigmoid(s / scale +
    shift) on copied ones (raw logits s)."""
    import numpy as np

    from dspark_sim.calibration.sts import RolloutSteps

    rng = np.random.default_rng(seed)
    s = rng.normal(0.0, 1.5, (n, gamma))
    copied = rng.random((n, gamma)) < 0.4
    p = 1 / (1 + np.exp(-np.where(copied, s / scale + shift, s)))
    ok = rng.random((n, gamma)) < p
    accepted = np.where(ok.all(axis=1), gamma, np.argmin(ok, axis=1))
    return RolloutSteps(z=s, accepted=accepted.astype(np.int16), copied=copied)


def one_fit(steps: int) -> dict:
    """Fit once in this process: wall seconds and what was fitted."""
    import numpy as np

    from dspark_sim.calibration.sts import fit_sts_detail

    data = rollouts(steps)
    t0 = time.perf_counter()
    temps, copy_cal, _ = fit_sts_detail(data, groups=np.arange(steps) // 20)
    return {"seconds": time.perf_counter() - t0, "temps": temps.tolist(), "copy_cal": copy_cal.tolist()}


def run_in(root: Path, steps: int) -> dict:
    """`one_fit` in a fresh process that imports dspark_sim from `root`."""
    env = dict(os.environ, PYTHONPATH=str(root))
    out = subprocess.run([sys.executable, __file__, "--child", "--steps", str(steps)], env=env,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=4000, help="rollout steps fitted (default 4000)")
    ap.add_argument("--repeats", type=int, default=5, help="fits per checkout (default 5)")
    ap.add_argument("--against", type=Path, help="another checkout's root, run alternately")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(one_fit(args.steps)))
        return
    roots = {"this": REPO} | ({"against": args.against.resolve()} if args.against else {})
    run_in(REPO, min(args.steps, 400))                       # warm-up: imports, page cache
    times: dict[str, list[float]] = {name: [] for name in roots}
    fitted: dict[str, dict] = {}
    for r in range(args.repeats):
        order = list(roots) if r % 2 == 0 else list(reversed(roots))
        for name in order:
            res = run_in(roots[name], args.steps)
            times[name].append(res["seconds"])
            fitted[name] = res
    print(f"fit_sts_detail on {args.steps} steps, {args.repeats} repeats, load average "
          f"{os.getloadavg()[0]:.2f}")
    for name, root in roots.items():
        print(f"  {name} ({root}): median {statistics.median(times[name]):.2f} s "
              f"(all: {', '.join(f'{t:.2f}' for t in times[name])})")
    print(f"  temperatures {fitted['this']['temps']}, copied slots (Tc, d) {fitted['this']['copy_cal']}")
    if args.against:
        same = all(fitted["this"][k] == fitted["against"][k] for k in ("temps", "copy_cal"))
        ratio = statistics.median(times["against"]) / statistics.median(times["this"])
        print(f"  against / this: x{ratio:.1f} (medians); same fitted values: {same}")


if __name__ == "__main__":
    main()
