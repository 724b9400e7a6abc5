"""`serve`: replay a trace against the real engine on the wall clock; the simulator's outputs.

One replica on this device: SimPy's real-time environment releases the trace's arrivals on
the wall clock (optionally compressed by `time_scale`), the simulator's `Cluster` routes them
to a `ServingReplica`, and the results are written with the simulator's own metrics code
(requests.csv, summary.json), plus outputs.jsonl with every request's generated token ids.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd
import simpy.rt
import torch

from ..decode.drafters.base import Drafter
from ..decode.sampling import Sampling
from ..decode.target import HFTarget
from ..errors import InputError
from ..fileio import write_text_atomic
from ..profiles.acceptance import AcceptanceProfile
from ..profiles.hardware import HardwareProfile
from ..sim.cluster.run import Cluster
from ..sim.core.requests import RequestTable
from ..sim.kv.semantics import check_kv_fits
from ..sim.output.metrics import requests_csv, requests_frame, summarise
from ..sim.replay import write_results
from ..sim.speculation.registry import check_policy_name, make_policy
from ..traces.schema import Trace
from .drafting import DraftPool
from .replica import ITERATION_COLUMNS, EngineParts, ServingReplica
from .runner import ModelRunner

UNSUPPORTED_POLICIES = {"oracle": "it needs to know which drafts will be accepted before "
                                  "verifying them (simulator only)"}


@dataclass
class ServeResult:
    """One policy served for real: per-request rows, the summary, and what was generated."""

    policy: str
    requests: pd.DataFrame
    summary: dict[str, Any]
    outputs: list[list[int]] = field(default_factory=list)        # by request, trace order
    steps: list[list[tuple[int, int, int]]] = field(default_factory=list)  # (drafted, verified, accepted)
    iterations: pd.DataFrame | None = None                          # ITERATION_COLUMNS, one row each


def scale_trace(trace: Trace, time_scale: float) -> Trace:
    """The trace with arrival times divided by `time_scale` (> 1 compresses it)."""
    if not time_scale > 0:
        raise InputError(f"must be > 0, got {time_scale}", field="--time-scale")
    if time_scale == 1.0:
        return trace
    return Trace(ids=trace.ids, arrival_s=np.asarray(trace.arrival_s) / time_scale,
                 prompt_tokens=trace.prompt_tokens, output_tokens=trace.output_tokens,
                 task=trace.task, name=trace.name, **trace.prefix_fields())


def check_engine_policy(policy: str) -> str:
    """A policy the real engine can run (every simulator policy but the oracle)."""
    check_policy_name(policy)
    if policy in UNSUPPORTED_POLICIES:
        raise InputError(f"the real engine cannot run {policy}: {UNSUPPORTED_POLICIES[policy]}",
                         field="policy")
    return policy


def warm_up(parts: EngineParts, prompt: list[int]) -> None:
    """Run the engine's code paths once before the clock starts, as a serving engine does at
    start-up (first calls allocate buffers and pick kernels): a prefill of `prompt` (the first
    request's), a draft step and a verify row of gamma + 1 tokens, on a KV region, drafter
    state and generator of their own (the served requests see none of it)."""
    from ..decode.context import Context
    from .runner import Segment

    runner, pool = parts.runner, parts.drafters
    kv = runner.new_kv(len(prompt) + parts.gamma + 2)
    out = runner.run([Segment(kv, list(prompt), "last")], pool.taps)[0]
    generator = torch.Generator(device=runner.device).manual_seed(0)
    ctx = Context(tokens=list(prompt), prompt_len=len(prompt), taps=pool.taps)
    ctx.commit([int(parts.sampling.sample(out.logits[-1], generator).item())], out.features)
    pool.begin(-1, ctx)
    try:
        draft = pool.propose([-1], [ctx], [parts.gamma], parts.sampling, generator)[0]
        runner.run([Segment(kv, [ctx.anchor] + draft.tokens.tolist(), "all")], pool.taps)
    finally:
        pool.end(-1)


def serve(trace: Trace, policy: str, target: HFTarget, drafter: Drafter, hw: HardwareProfile,
          acceptance: AcceptanceProfile | None, prompts: list[list[int]], *, gamma: int,
          sampling: Sampling = Sampling(), seed: int = 0, trace_name: str | None = None,
          hw_name: str | None = None, acceptance_name: str | None = None,
          progress: Callable[[int], None] | None = None) -> ServeResult:
    """Serve `trace` for real under `policy` (one replica, this device) and collect the results.

    `prompts[i]` are request i's prompt ids (`prompts.build_prompts`); `acceptance` gives the
    task means a policy uses where the drafter has no confidence head (and goodput's), exactly
    as in the simulator; its gamma must equal the engine's."""
    check_engine_policy(policy)
    traits = make_policy(policy, gamma)
    if traits.speculative:
        if acceptance is None:
            raise InputError(f"policy {policy} needs an acceptance profile", field="acceptance")
        if acceptance.gamma != gamma:
            raise InputError(f"the acceptance profile drafts gamma = {acceptance.gamma} but the "
                             f"engine drafts gamma = {gamma}", field="acceptance")
    if len(prompts) != len(trace):
        raise ValueError(f"{len(prompts)} prompts for {len(trace)} requests")
    table = RequestTable(trace)
    check_kv_fits(table, hw)
    generator = torch.Generator(device=target.device).manual_seed(seed)
    parts = EngineParts(ModelRunner(target), DraftPool(drafter, target.device), prompts, gamma,
                        sampling, generator, progress=progress)
    if prompts:
        warm_up(parts, prompts[0])
    env = simpy.rt.RealtimeEnvironment(factor=1e-9, strict=False)     # time in nanoseconds
    cluster = Cluster(table, 1, "round-robin", hw, policy, acceptance if traits.speculative else None,
                      seed, env=env, replica_cls=partial(ServingReplica, parts=parts))
    replica = cluster.replicas[0]
    load = os.getloadavg()
    start = time.perf_counter()
    env.sync()
    cluster.run()
    wall = time.perf_counter() - start
    frame = requests_frame(table)
    summary = summarise(frame, policy=policy, trace=trace_name or trace.name, hw=hw_name or hw.name,
                        acceptance=(acceptance_name or acceptance.name) if traits.speculative else None,
                        seed=seed, gpus=hw.gpus_per_replica, iterations=replica.iterations,
                        sim_wall_s=wall)
    summary.update({
        "engine": "real", "replicas": 1, "router": "round-robin", "gpus": hw.gpus_per_replica,
        "target": target.name, "drafter": getattr(drafter, "name", type(drafter).__name__),
        "drafter_kind": drafter.kind, "gamma": gamma, "temperature": sampling.temperature,
        "torch_threads": torch.get_num_threads(), "device": str(target.device),
        "load_average_before": [round(v, 2) for v in load],
        "load_average_after": [round(v, 2) for v in os.getloadavg()],
        "engine_wall_s": {k: round(v, 4) for k, v in replica.wall_s.items()},
    })
    n = len(trace)
    return ServeResult(policy, frame, summary, [parts.outputs.get(i, []) for i in range(n)],
                       [parts.steps.get(i, []) for i in range(n)],
                       pd.DataFrame(parts.iterations, columns=ITERATION_COLUMNS))


def outputs_jsonl(result: ServeResult, ids) -> str:
    """One JSON line per request: id, generated ids, and per decode step (drafted, verified, accepted)."""
    from ..fileio import json_text

    lines = [json_text({"id": str(i), "output_ids": out, "steps": [list(s) for s in steps]})
             for i, out, steps in zip(ids, result.outputs, result.steps)]
    return "\n".join(lines) + "\n"


def write_serve_results(results: list[ServeResult], ids, out_dir: str | Path) -> list[Path]:
    """The simulator's DIR/{requests.csv, summary.json} (DIR/<policy>/ for several policies),
    plus outputs.jsonl and iterations.csv."""
    written = write_results(results, out_dir)
    for res, where in zip(results, written):
        write_text_atomic(where / "outputs.jsonl", outputs_jsonl(res, ids))
        if res.iterations is not None:
            write_text_atomic(where / "iterations.csv", requests_csv(res.iterations))
    return written


def read_serve_results(where: str | Path, policy: str) -> ServeResult:
    """One run `write_serve_results` wrote (requests.csv, summary.json, outputs.jsonl and, when
    present, iterations.csv), to simulate again against it without serving."""
    import json

    where = Path(where)
    try:
        frame = pd.read_csv(where / "requests.csv", dtype={"id": str, "task": str})
        summary = json.loads((where / "summary.json").read_text())
        lines = [json.loads(line) for line in (where / "outputs.jsonl").read_text().splitlines() if line]
        iterations = pd.read_csv(where / "iterations.csv") if (where / "iterations.csv").exists() else None
    except (OSError, ValueError) as exc:
        raise InputError(f"no engine run of {policy} here ({exc})", file=where, field="--engine-runs") from None
    return ServeResult(policy, frame, summary, [line.get("output_ids", []) for line in lines],
                       [[tuple(s) for s in line.get("steps", [])] for line in lines], iterations)
