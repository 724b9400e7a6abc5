"""Does step-time noise decide the burst trace's phase race? Re-simulate stored vLLM runs with
every simulated iteration's time multiplied by lognormal noise.

The simulator prices an iteration deterministically, so a race between a step's end and two
requests' arrival a few ms apart (docs/vllm.md, "a third end-to-end run") is decided the same way
on every replay. A real server's step times scatter: the profile's own measurements put the
p10..p90 of one iteration at about +-2.5% (sigma ~ 0.02 of a lognormal). This script replays the
runs stored by `dspark-sim validate --engine vllm --out DIR` (DIR/engine/POLICY/run-K) under
sigma = 0.02 and 0.05, several noise seeds each, through the product's own `validate
--engine-runs` path (each run on the profile scaled to its speed check), with the noise added by
wrapping `IterationCost.iteration_ns` and the per-iteration reference engine forced (the fast
engines price stretches of iterations at once). Nothing in the product changes.

    python benchmarks/phase_race_jitter.py RUNS_DIR PROFILE.yaml [--trace traces/validate-burst.jsonl]
        [--policy static-2] [--request r14] [--sigmas 0,0.02,0.05] [--seeds 5]

Prints, per sigma and noise seed, each simulated run's median tok/s/user and the named request's
TTFT (which side of the race it fell on), then the engine's own values for comparison.
"""
from __future__ import annotations

import argparse
import contextlib
import io
import tempfile
from pathlib import Path

import numpy as np
import pandas as pd


def _replays(runs: Path, hw: str, trace: str, policy: str, repeats: int, sigma: float, seed: int,
             out: Path) -> list[pd.DataFrame]:
    import dspark_sim.serve.validate as sv
    from dspark_sim.cli import main
    from dspark_sim.sim.cost.iteration import IterationCost

    rng = np.random.default_rng(seed)
    exact, replay = IterationCost.iteration_ns, sv.replay

    def noisy(self, *a, **k):
        ns = exact(self, *a, **k)
        return np.rint(ns * np.exp(rng.normal(-sigma ** 2 / 2, sigma, size=np.shape(ns)))) if sigma else ns

    IterationCost.iteration_ns = noisy
    sv.replay = lambda *a, **k: replay(*a, **{**k, "engine": "reference"})
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            main(["validate", trace, "--engine", "vllm", "--policies", policy, "--repeats", str(repeats),
                  "--hw", hw, "--engine-runs", str(runs), "--out", str(out)])
    finally:
        IterationCost.iteration_ns, sv.replay = exact, replay
    return [pd.read_csv(out / "sim" / policy / f"seed-{k}" / "requests.csv").set_index("id")
            for k in range(repeats)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", type=Path, help="a validate --engine vllm output directory")
    ap.add_argument("hw", help="the hardware profile those runs were validated on")
    ap.add_argument("--trace", default="traces/validate-burst.jsonl")
    ap.add_argument("--policy", default="static-2")
    ap.add_argument("--request", default="r14", help="request whose TTFT shows the race's side")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--sigmas", default="0,0.02,0.05")
    ap.add_argument("--seeds", type=int, default=5, help="noise seeds per sigma > 0")
    a = ap.parse_args()
    engine = [pd.read_csv(a.runs / "engine" / a.policy / f"run-{k}" / "requests.csv").set_index("id")
              for k in range(a.repeats)]
    print("engine runs: " + " | ".join(f"p50 {e.tps_user.median():.2f} {a.request} TTFT {e.ttft_s[a.request]:.3f}"
                                        for e in engine))
    with tempfile.TemporaryDirectory() as tmp:
        for sigma in (float(s) for s in a.sigmas.split(",")):
            for seed in range(a.seeds if sigma else 1):
                sims = _replays(a.runs, a.hw, a.trace, a.policy, a.repeats, sigma, seed,
                                Path(tmp) / f"{sigma}-{seed}")
                print(f"sigma {sigma:g} seed {seed}: " + " | ".join(
                    f"p50 {s.tps_user.median():.2f} {a.request} TTFT {s.ttft_s[a.request]:.3f}" for s in sims))


if __name__ == "__main__":
    main()
