"""Builders shared by the simulator tests: traces, hardware and acceptance profiles."""
from __future__ import annotations

import numpy as np

from dspark_sim.profiles import AcceptanceProfile, HardwareProfile
from dspark_sim.traces import Trace


def make_trace(arrival, prompt, output, task=None, name="t") -> Trace:
    n = len(arrival)
    return Trace(ids=np.array([f"r{i}" for i in range(n)], dtype=object),
                 arrival_s=np.asarray(arrival, dtype=float),
                 prompt_tokens=np.asarray(prompt, dtype=np.int64),
                 output_tokens=np.asarray(output, dtype=np.int64),
                 task=np.array(task if task is not None else ["chat"] * n, dtype=object), name=name)


def constant_hw(step_s=0.01, **limits) -> HardwareProfile:
    doc = {"schema": "dspark-sim/hw/v1", "name": "const", "source": "constant",
           "step_time": {"constant_s": step_s}}
    doc.update({k: v for k, v in limits.items() if v is not None})
    return HardwareProfile.from_dict(doc)


def table_hw(batch, seconds, per_context=0.0, draft=None, **limits) -> HardwareProfile:
    doc = {"schema": "dspark-sim/hw/v1", "name": "table", "source": "fitted",
           "step_time": {"batch_tokens": list(batch), "seconds": list(seconds),
                         "per_context_token_s": per_context}}
    if draft:
        doc["draft_time"] = draft
    doc.update({k: v for k, v in limits.items() if v is not None})
    return HardwareProfile.from_dict(doc)


def parametric(rates_by_task: dict[str, list[float]], kind="dspark", default=None) -> AcceptanceProfile:
    gamma = len(next(iter(rates_by_task.values())))
    return AcceptanceProfile.from_dict({
        "schema": "dspark-sim/acceptance/v1", "name": "p", "gamma": gamma, "drafter_kind": kind,
        "default_task": default or next(iter(rates_by_task)),
        "tasks": {t: {"kind": "parametric", "position_accept": r} for t, r in rates_by_task.items()}})


def empirical(requests_by_task: dict[str, list[dict]], gamma: int, kind="dspark") -> AcceptanceProfile:
    return AcceptanceProfile.from_dict({
        "schema": "dspark-sim/acceptance/v1", "name": "e", "gamma": gamma, "drafter_kind": kind,
        "default_task": next(iter(requests_by_task)),
        "tasks": {t: {"kind": "empirical", "requests": r} for t, r in requests_by_task.items()}})


ENGINE_FIELDS = ("replica", "first_token_ns", "finish_ns", "steps", "drafted", "verified", "accepted")


def assert_same_outcome(out, ref, label: str = "", fields=ENGINE_FIELDS) -> None:
    """Two simulations agree on every per-request result and on the iteration count."""
    for name in fields:
        np.testing.assert_array_equal(getattr(out.table, name), getattr(ref.table, name),
                                      err_msg=f"{label} {name}")
    assert out.iterations == ref.iterations, label
