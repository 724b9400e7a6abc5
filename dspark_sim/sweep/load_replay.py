"""One observed load point in the simulator: the trace its users send, how long each user's
closed loop runs, and the replay that gives the point's numbers. It is the model `profile fit`
fits (sweep/calibrate.py) and what the published cases predict with (published/)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..hardware.curve_family import CurveFamily
from ..hardware.draft_cost import SHAPE_PRICING_BAND, DraftCosts
from ..hardware.observations import LoadPoint
from ..profiles.acceptance import AcceptanceProfile
from ..profiles.hardware import HardwareProfile
from ..sim.speculation.registry import make_policy
from ..traces.schema import Trace
from .point import cached_acceptance, cached_trace, least_requests_per_user, measure
from .spec import Point


@dataclass
class FitConfig:
    """How to fit (see `dspark-sim profile fit --help`)."""

    family: CurveFamily
    name: str = "fitted"
    gpus: int = 1
    draft_from: HardwareProfile | None = None   # draft_time tables copied into the profile
    kv_capacity_tokens: int | None = None
    max_batch_requests: int | None = None
    requests_per_user: int = 8
    max_requests_per_user: int = 64             # cap on a point's own run length (its `requests`)
    rounds: int = 3
    bootstrap: int = 200
    obs_error: float = 0.05
    seed: int = 0
    draft_costs: DraftCosts | None = None       # where drafting costs come from (None: draft_from or free)
    priors: dict[str, float] = field(default_factory=dict)   # parameter -> prior centre (seconds)
    prior_spread: float = 0.5                   # log-normal spread of every prior (0.5: x/÷ 1.65)
    draft_scale_spread: float = 2.0             # prior spread of draft_scale (centre 1), fitted when
                                                # speculative observations are given; 0: never fitted
    draft_band: float = SHAPE_PRICING_BAND      # p10..p90 factor of draft_scale in the draws when the
                                                # observations cannot see it (shape-priced drafting); <= 1: off
    keep_draws: int = 50                        # bootstrap parameter draws kept in the result

    def __post_init__(self) -> None:
        if self.draft_costs is None:
            self.draft_costs = DraftCosts("tables", "--draft-time-from", tables=self.draft_from) \
                if self.draft_from is not None else DraftCosts()


@dataclass
class Simulated:
    """The simulator's numbers for one load point."""

    users: int
    tps_user: float
    throughput_tok_s_per_gpu: float
    ttft_s: float
    verify_tokens: float = 1.0          # tokens verified per request per iteration, bonus included
    accept_length: float = 1.0          # tokens per verify step (accepted drafts + 1)


def drafts_and_tau(obs: LoadPoint) -> tuple[int, float, str | None]:
    """Drafts verified per request, expected tokens per verify, drafter kind (surrogate only:
    the default task's acceptance, and scheduled policies taken at gamma drafts; the
    simulator's correction rounds absorb the difference)."""
    if obs.policy == "ar":
        return 0, 1.0, None
    acc = cached_acceptance(obs.acceptance)
    make_policy(obs.policy, acc.gamma)                      # K <= gamma, named error otherwise
    k = 1 if obs.policy == "mtp1" else int(obs.policy.split("-")[1]) if obs.policy.startswith("static-") \
        else acc.gamma                                      # scheduled policies: start from gamma
    task = acc.for_task(acc.default_task)
    alpha = task.conditional_accept(acc.gamma)[:k]
    return k, float(1.0 + np.cumprod(alpha).sum()), acc.drafter_kind or None


def load_point_trace(obs: LoadPoint, rows: int = 64) -> Trace:
    """The trace a fitted load point's users send: its file, or constant mean lengths
    (sweep/point.py `point_trace` is a sweep point's)."""
    if obs.trace:
        return cached_trace(obs.trace)
    task = cached_acceptance(obs.acceptance).default_task if obs.acceptance else "default"
    n = rows
    return Trace(ids=np.array([str(i) for i in range(n)], dtype=object), arrival_s=np.zeros(n),
                 prompt_tokens=np.full(n, max(1, round(obs.prompt_tokens)), dtype=np.int64),
                 output_tokens=np.full(n, max(2, round(obs.output_tokens)), dtype=np.int64),
                 task=np.full(n, task, dtype=object), name="mean-lengths")


# A point that says how many requests its run measured is replayed as long: requests / users per
# user, at least MIN_REQUESTS_PER_USER (the closed loop's floor, sweep/point.py
# `least_requests_per_user`, at the default warm-up of 1) and at most
# FitConfig.max_requests_per_user (default 64: a concurrency-1 run of hundreds of requests is
# steady long before that).
MIN_REQUESTS_PER_USER = least_requests_per_user(Point.warmup)


def replay_requests_per_user(obs: LoadPoint, users: int, cfg: FitConfig) -> int:
    """Requests each simulated user sends for `obs` at `users` users: as long as the published
    or measured run (`obs.requests` over its users, rounded, within
    MIN_REQUESTS_PER_USER..cfg.max_requests_per_user) when the point says how many requests it
    measured, else cfg.requests_per_user. How long a
    closed loop runs decides how far its users drift apart from their common start, and with it
    how often prefill chunks of new requests land in the same step as a full decode batch."""
    if not obs.requests:
        return cfg.requests_per_user
    return int(min(cfg.max_requests_per_user, max(MIN_REQUESTS_PER_USER, round(obs.requests / users))))


def replay_length(obs: LoadPoint, users: int, cfg: FitConfig) -> tuple[int, int | None]:
    """Requests per user and in all (None: users x per user) of `obs`'s closed loop at `users`
    users. A point measured over its whole run (`window: whole-run`) sends its `requests` in all,
    as the benchmark's client did (the first requests mod users users send one more), at most
    cfg.max_requests_per_user per user: its ramp-up and drain are part of what it measured.
    Other points run `replay_requests_per_user` each and are measured over their steady window."""
    if obs.window == "whole-run" and obs.requests:
        total = min(int(obs.requests), users * cfg.max_requests_per_user)
        return -(-total // users), total
    return replay_requests_per_user(obs, users, cfg), None


def simulate_load(prof: HardwareProfile, obs: LoadPoint, users: int, cfg: FitConfig,
                  acc: AcceptanceProfile | None = None) -> Simulated:
    """The simulator's closed loop of `users` users for a load point's policy, trace and prefill
    (`acc`: an acceptance profile in memory instead of the point's named one)."""
    from ..sim.cluster.load import ClosedLoop
    from ..sim.replay import replay

    acc = acc or (cached_acceptance(obs.acceptance) if obs.acceptance else None)
    per_user, total = replay_length(obs, users, cfg)
    loop = ClosedLoop(users=users, requests_per_user=per_user, total_requests=total)
    res = replay(load_point_trace(obs), obs.policy, prof, acc, seed=cfg.seed, closed_loop=loop,
                 prefill=obs.prefill)
    pt = Point(trace="", hw="", policy=obs.policy, acceptance=None, load_mode="concurrency",
               load=float(users), requests_per_user=per_user, prefill=obs.prefill)
    met = measure(res.requests, pt, gpus=prof.gpus_per_replica, window=obs.window)
    tps = met["tps_user_mean"] if obs.tps_stat == "mean" else \
        met["tps_user_percentiles"][int(obs.tps_stat[1:])]
    return Simulated(users, float(tps), float(met["throughput_tok_s_per_gpu"]),
                     float(met["ttft_p50_s"]), float(met["verify_tokens"]), float(met["mean_tau"]))
