"""Small inputs for the sweep tests, written to files (sweeps take paths, like the CLI)."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from dspark_sim.profiles import AcceptanceProfile, HardwareProfile
from dspark_sim.traces import Trace
from dspark_sim.traces.schema import write_trace

REPO = Path(__file__).resolve().parents[2]


def write_identical_trace(path: Path, n: int, prompt: int, output: int, gap_s: float = 0.0) -> Path:
    """n identical chat requests, `gap_s` apart."""
    write_trace(path, Trace(ids=np.array([f"r{i}" for i in range(n)], dtype=object),
                            arrival_s=np.arange(n) * gap_s, prompt_tokens=np.full(n, prompt),
                            output_tokens=np.full(n, output), task=np.full(n, "chat", dtype=object)))
    return path


def write_linear_hw(path: Path, s0: float, s1: float, **limits) -> Path:
    """step_time(B) = s0 + s1 B exactly (two table points, linear extrapolation), free drafts."""
    doc = {"schema": "dspark-sim/hw/v1", "name": "linear", "source": "fitted",
           "step_time": {"batch_tokens": [1, 2], "seconds": [s0 + s1, s0 + 2 * s1]}}
    doc.update({k: v for k, v in limits.items() if v is not None})
    HardwareProfile.from_dict(doc).save(path)
    return path


def write_constant_hw(path: Path, step_s: float, **limits) -> Path:
    doc = {"schema": "dspark-sim/hw/v1", "name": "constant", "source": "constant",
           "step_time": {"constant_s": step_s}}
    doc.update({k: v for k, v in limits.items() if v is not None})
    HardwareProfile.from_dict(doc).save(path)
    return path


def write_parametric(path: Path, alphas: list[float], kind: str = "dspark") -> Path:
    AcceptanceProfile.from_dict({
        "schema": "dspark-sim/acceptance/v1", "name": path.stem, "gamma": len(alphas),
        "drafter_kind": kind, "default_task": "chat",
        "tasks": {"chat": {"kind": "parametric", "position_accept": list(alphas)}}}).save(path)
    return path
