"""`run_sweep`: policies x loads x seeds -> results table, SLA table, frontier and concurrency plots.

Inputs are loaded and validated before anything is simulated; each point's metrics are cached
as soon as it finishes (cache.py), so a rerun recomputes only the points that are missing.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd

from ..errors import InputError
from ..fileio import atomic_path, write_json_atomic, write_text_atomic
from ..profiles.registry import (ACCEPTANCE_SUFFIX, acceptance_profile_path, hw_profile_path,
                                 load_acceptance_profile, load_hw_profile)
from ..sim.cluster.router import ROUTER_ALIASES
from ..sim.cluster.run import PREFILL_MODES
from ..sim.defaults import DEFAULT_HW
from ..sim.kv.semantics import KV_SEMANTICS
from ..sim.replay import default_acceptance
from ..sim.speculation.registry import make_policy
from ..sim.speculation.spec_config import parse_schedule
from ..traces import shipped_trace
from ..traces.schema import iter_json_lines, load_trace
from .baseline import AUTO, resolve_baseline, with_ar
from .cache import PointCache
from .executors import run_points
from .frontier import THROUGHPUT, parse_statistic, sla_table, stat_label, tps_column
from .intervals import (SPREAD_DRAWS, check_spread_draws, context_per_request, describe, fit_spread,
                        flag_outside, interval_text, merge_intervals, operating_points,
                        rerun_on_draws)
from .overload import DEFAULT_TTFT_P99_BOUND_S, overload_reason
from .point import PERCENTILES, least_requests_per_user
from .tables import sla_markdown
from .spec import LOAD_MODES, Point, load_grid, sim_version

DEFAULT_USERS_MAX = 256          # top of the default users range when the profile sets no batch limit
DEFAULT_RATE_RANGE = (0.25, 4.0)


@dataclass
class SweepConfig:
    """What to sweep (see `dspark-sim sweep --help` for each field's meaning)."""

    trace: str
    policies: list[str]
    hw: str = DEFAULT_HW
    acceptance: dict[str, str | None] = field(default_factory=dict)   # per policy; missing: default
    load_mode: str = "concurrency"
    points: int = 10
    load_range: tuple[float, float] | None = None
    seeds: int = 1
    replicas: int = 1
    router: str = "round-robin"
    requests_per_user: int = 16
    warmup: int = 1
    think_s: float = 0.0
    max_requests: int | None = None
    prefill: str = "local"
    slas: list[float] = field(default_factory=lambda: [80.0, 120.0])
    percentile: int | str = 50      # or "mean"
    baseline: str | None = AUTO     # auto: mtp1 if the model has an MTP head, else ar; or a policy
    sim_engine: str = "fast"        # the simulator's engine (sim/engines/capability.py ENGINES)
    kv_semantics: str = "reserve"
    schedule: str | None = None     # vllm-schedule's batch-size schedule (vLLM's JSON)
    add_ar: bool = True             # no speculation is always a candidate
    overload_ttft_p99_s: float | None = DEFAULT_TTFT_P99_BOUND_S   # overload.py
    spread_draws: int = SPREAD_DRAWS   # fitted profiles: representative draws for intervals (intervals.py)


@dataclass
class SweepResult:
    """Per-point rows, the SLA table and what the run cost."""

    config: SweepConfig
    results: pd.DataFrame
    sla: pd.DataFrame
    cached: int
    computed: int
    wall_s: float
    load_values: list[float] = field(default_factory=list)
    baseline_reason: str = ""
    kv_note: str = ""
    fit_spread: dict[str, Any] = field(default_factory=dict)    # intervals.describe
    spread_note: str = ""                                       # intervals.interval_text


def _check(cfg: SweepConfig) -> None:
    if cfg.load_mode not in LOAD_MODES:
        raise InputError(f"unknown load mode {cfg.load_mode!r}; choose {' or '.join(LOAD_MODES)}",
                         field="load")
    if cfg.seeds < 1:
        raise InputError(f"must be >= 1, got {cfg.seeds}", field="seeds")
    if cfg.replicas < 1:
        raise InputError(f"must be >= 1, got {cfg.replicas}", field="replicas")
    cfg.percentile = parse_statistic(cfg.percentile)
    least = least_requests_per_user(cfg.warmup)
    if cfg.load_mode == "concurrency" and cfg.requests_per_user < least:
        raise InputError(f"each user must send at least {least} requests (the {cfg.warmup} the "
                         f"warm-up leaves out and 2 measured: with 1 the steady window holds a "
                         f"single request), got {cfg.requests_per_user}", field="requests-per-user")
    if cfg.router not in ROUTER_ALIASES:
        raise InputError(f"unknown router {cfg.router!r}; choose rr or least-outstanding", field="router")
    if cfg.prefill not in PREFILL_MODES:
        raise InputError(f"unknown prefill mode {cfg.prefill!r}; choose {' or '.join(PREFILL_MODES)}",
                         field="prefill")
    if cfg.kv_semantics not in KV_SEMANTICS:
        raise InputError(f"unknown KV semantics {cfg.kv_semantics!r}; choose "
                         f"{' or '.join(KV_SEMANTICS)}", field="kv-semantics")
    if cfg.max_requests is not None and cfg.max_requests < 1:
        raise InputError(f"must be >= 1, got {cfg.max_requests}", field="requests")
    if cfg.overload_ttft_p99_s is not None and not cfg.overload_ttft_p99_s > 0:
        raise InputError(f"must be > 0, got {cfg.overload_ttft_p99_s}", field="overload-ttft-p99")
    check_spread_draws(cfg.spread_draws)
    if cfg.add_ar:
        cfg.policies = with_ar(cfg.policies)


def resolve_inputs(cfg: SweepConfig) -> tuple[str, str, dict[str, str | None], Any]:
    """Validate the trace and profiles; return the trace, hw and per-policy acceptance paths
    and the loaded hardware profile."""
    trace_path = shipped_trace(cfg.trace)          # a path, or the name of a shipped trace
    trace = load_trace(trace_path)
    if len(trace) == 0:
        raise InputError("the trace has no requests", file=trace_path)
    hw_path = hw_profile_path(cfg.hw)
    hw = load_hw_profile(hw_path)
    check_fits_kv(trace, trace_path, hw, cfg.max_requests)
    accs: dict[str, str | None] = {}
    for policy in cfg.policies:
        spec = cfg.acceptance.get(policy, default_acceptance(policy))
        if spec is None or policy == "ar":
            make_policy(policy, 1)
            accs[policy] = None
            continue
        path = acceptance_profile_path(spec)
        gamma = load_acceptance_profile(path).gamma
        schedule = parse_schedule(cfg.schedule, gamma) if cfg.schedule and policy == "vllm-schedule" else None
        make_policy(policy, gamma, schedule=schedule)    # static-K needs K <= gamma
        accs[policy] = str(path.resolve())
    return str(trace_path.resolve()), str(hw_path.resolve()), accs, hw


def check_fits_kv(trace, path: Path, hw, max_requests: int | None = None) -> None:
    """Bad input, naming the trace's file and line, when a request needs more KV (prompt +
    output tokens) than the hardware profile holds: it could never be admitted."""
    kv = hw.kv_capacity_tokens
    n = len(trace) if max_requests is None else min(len(trace), max_requests)
    if kv is None or n == 0:
        return
    need = trace.prompt_tokens[:n] + trace.output_tokens[:n]
    if int(need.max()) <= kv:
        return
    row = int(need.argmax())
    line = next(lineno for i, (lineno, _) in enumerate(iter_json_lines(path, "trace file")) if i == row)
    raise InputError(f"prompt {int(trace.prompt_tokens[row]):,} + output {int(trace.output_tokens[row]):,} "
                     f"tokens need more KV than the hardware profile {hw.name!r} holds "
                     f"(kv_capacity_tokens {kv:,})", file=path, line=line, field="prompt_tokens")


def kv_note(hw) -> str:
    """The stated default when a hardware profile has no KV capacity ('' when it has one)."""
    if hw.kv_capacity_tokens is not None:
        return ""
    limits = ", ".join(f"{k} {getattr(hw, k):,}" for k in ("max_batch_tokens", "max_batch_requests")
                       if getattr(hw, k) is not None) or "nothing"
    return (f"note: hardware profile {hw.name!r} sets no kv_capacity_tokens; KV memory is taken as "
            f"unlimited (only {limits} bound the batch). Add kv_capacity_tokens to the profile to "
            f"model KV pressure.")


def default_load_range(mode: str, hw, replicas: int) -> tuple[float, float]:
    """Users 1 .. (batch limit x replicas), or arrival-rate factors 0.25 .. 4."""
    if mode == "rate":
        return DEFAULT_RATE_RANGE
    limit = hw.max_batch_requests or hw.max_batch_tokens or DEFAULT_USERS_MAX
    return 1.0, float(limit * replicas)


def build_points(cfg: SweepConfig) -> tuple[list[Point], list[float], Any]:
    """Every (policy, load, seed) point of the sweep, the load values and the hardware profile."""
    _check(cfg)
    trace, hw_path, accs, hw = resolve_inputs(cfg)
    low, high = cfg.load_range or default_load_range(cfg.load_mode, hw, cfg.replicas)
    grid = load_grid(cfg.load_mode, cfg.points, low, high)
    base = Point(trace=trace, hw=hw_path, policy="", acceptance=None, load_mode=cfg.load_mode,
                 load=0.0, replicas=cfg.replicas, router=ROUTER_ALIASES[cfg.router],
                 requests_per_user=cfg.requests_per_user, warmup=cfg.warmup, think_s=cfg.think_s,
                 max_requests=cfg.max_requests, prefill=cfg.prefill, sim_engine=cfg.sim_engine,
                 kv_semantics=cfg.kv_semantics)
    points = [replace(base, policy=p, acceptance=accs[p], load=v, seed=s,
                      schedule=cfg.schedule if p == "vllm-schedule" else None)
              for p in cfg.policies for v in grid.values for s in range(cfg.seeds)]
    return points, grid.values, hw


def drafter_name(acceptance_path: str | None) -> str:
    """The acceptance profile's name (file name less its suffix), 'none' without speculation."""
    if not acceptance_path:
        return "none"
    name = Path(acceptance_path).name
    return name[: -len(ACCEPTANCE_SUFFIX)] if name.endswith(ACCEPTANCE_SUFFIX) else Path(name).stem


def result_row(point: Point, metrics: dict[str, Any], percentile: int | str,
               ttft_p99_bound_s: float | None = DEFAULT_TTFT_P99_BOUND_S) -> dict[str, Any]:
    """One tidy row: the point's settings and metrics, tps_user percentiles as columns, TPOT p99
    and whether the point is overloaded (overload.py)."""
    row = {k: v for k, v in asdict(point).items() if k not in ("trace", "hw", "sim_engine")}
    row["acceptance"] = Path(point.acceptance).name if point.acceptance else None
    row["drafter"] = drafter_name(point.acceptance)
    pct = metrics.get("tps_user_percentiles") or [None] * len(PERCENTILES)
    for p in sorted({10, 50, 90} | ({percentile} - {"mean"})):
        row[tps_column(p)] = pct[p]
    row.update({k: v for k, v in metrics.items() if k != "tps_user_percentiles"})
    row["tpot_p99_ms"] = 1000.0 / pct[1] if pct[1] else float("nan")   # slowest 1% of requests
    row["overload_reason"] = overload_reason(metrics, ttft_p99_bound_s)
    row["overloaded"] = bool(row["overload_reason"])
    return row


def run_sweep(cfg: SweepConfig, *, cache_dir: str | Path | None = None, workers: int = 1,
              executor: str = "local", show_progress: bool = False,
              ray_address: str | None = None, what: str = "sweep") -> SweepResult:
    """Run (or read from the cache) every point; build the results and SLA tables. A fitted
    profile with draws is swept again under `cfg.spread_draws` representative draws, and the
    SLA table gets their range (intervals.py)."""
    t0 = time.perf_counter()
    points, values, hw = build_points(cfg)
    fit_spread(hw, hw_profile_path(cfg.hw))          # a malformed fit block: bad input, before any run
    baseline, why = resolve_baseline(cfg.baseline, cfg.policies, hw.model)
    cache = PointCache(cache_dir)
    keys = {p: p.key() for p in points}
    metrics: dict[Point, dict[str, Any]] = {}
    for p in points:
        hit = cache.get(keys[p])
        if hit is not None:
            metrics[p] = hit
    todo = [p for p in points if p not in metrics]
    todo.sort(key=lambda p: -p.load)          # heaviest first: better packing on the workers

    def keep(point: Point, m: dict[str, Any]) -> None:
        cache.put(keys[point], point, m)
        metrics[point] = m

    run_points(todo, keep, workers=workers, executor=executor, show_progress=show_progress,
               ray_address=ray_address, what=what)
    rows = [result_row(p, metrics[p], cfg.percentile, cfg.overload_ttft_p99_s) for p in points]
    results = pd.DataFrame(rows)
    sla = sla_table(results, cfg.slas, cfg.percentile, baseline)
    out = SweepResult(cfg, results, sla, cached=len(points) - len(todo), computed=len(todo),
                      wall_s=time.perf_counter() - t0, load_values=values, baseline_reason=why,
                      kv_note=kv_note(hw))
    _add_intervals(out, hw, baseline, cache_dir, dict(workers=workers, executor=executor,
                                                      show_progress=show_progress, ray_address=ray_address))
    out.wall_s = time.perf_counter() - t0
    return out


def _add_intervals(out: SweepResult, hw, baseline: str | None, cache_dir, run_kw: dict[str, Any]) -> None:
    """Sweep again under the fit's representative draws (a fitted profile with draws, and
    spread_draws > 0): their range into the SLA table; operating points beyond the fit's loads
    flagged; the interval's description (or 'no fit spread') for the outputs."""
    cfg = out.config
    spread = fit_spread(hw, hw_profile_path(cfg.hw))
    where = operating_points(out.sla, out.results, context_per_request(load_trace(shipped_trace(cfg.trace))),
                             baseline) if spread is not None and cfg.spread_draws else []
    spread, indices, subs = rerun_on_draws(
        out, hw, cfg.spread_draws, where, cache_dir, file=hw_profile_path(cfg.hw),
        rerun=lambda path, label: run_sweep(replace(cfg, hw=path, spread_draws=0), cache_dir=cache_dir,
                                            what=label, **run_kw))
    if subs:
        out.sla = merge_intervals(out.sla, [s.sla for s in subs], ("policy", "sla_tps_user"),
                                  {THROUGHPUT: True, "gain_vs_baseline": False})
    if spread is not None:
        out.sla = flag_outside(out.sla, out.results, spread)
    out.fit_spread, out.spread_note = describe(spread, indices, hw), interval_text(spread, indices, hw)


def write_table(frame: pd.DataFrame, path: Path) -> list[Path]:
    """CSV, and Parquet beside it when pyarrow is installed."""
    write_text_atomic(path, frame.to_csv(index=False, lineterminator="\n"))
    written = [path]
    try:
        import pyarrow  # noqa: F401
    except ImportError:
        return written
    parquet = path.with_suffix(".parquet")
    with atomic_path(parquet) as tmp:
        frame.to_parquet(tmp, index=False)
    return written + [parquet]


def sweep_markdown(result: SweepResult) -> str:
    """sla-P.md: the SLA table with the overloaded points and the KV note."""
    text = sla_markdown(result.sla, result.results, result.config.load_mode)
    text += f"\n{result.spread_note}\n" if result.spread_note else ""
    return text + (f"\n{result.kv_note}\n" if result.kv_note else "")


def write_sweep(result: SweepResult, out_dir: str | Path) -> list[Path]:
    """results.csv/.parquet, sla-P.csv, sla-P.md, frontier-P.png (P: the SLA statistic, so
    sweeps of another statistic into the same directory sit beside them), concurrency.png,
    sweep.json."""
    from .plots import concurrency_plot, frontier_plot

    cfg = result.config
    out = Path(out_dir)
    stat = stat_label(cfg.percentile)
    written = write_table(result.results, out / "results.csv")
    written += write_table(result.sla, out / f"sla-{stat}.csv")
    write_text_atomic(out / f"sla-{stat}.md", sweep_markdown(result))
    title = (f"{Path(cfg.trace).name} on {Path(str(cfg.hw)).stem} x{cfg.replicas}\n"
             f"{cfg.load_mode} load, {cfg.prefill} prefill, {cfg.seeds} seed(s)")
    written += [out / f"sla-{stat}.md",
                frontier_plot(result.results, result.sla, cfg.percentile, out / f"frontier-{stat}.png", title),
                concurrency_plot(result.results, out / "concurrency.png", title)]
    doc = {"config": asdict(cfg), "load_values": result.load_values, "points": len(result.results),
           "cached": result.cached, "computed": result.computed, "wall_s": result.wall_s,
           "baseline": result.sla["baseline"].iloc[0] if len(result.sla) else None,
           "baseline_reason": result.baseline_reason, "kv_note": result.kv_note,
           "overloaded_points": int(result.results["overloaded"].sum()),
           "fit_spread": result.fit_spread,
           "sim_version": sim_version()}
    write_json_atomic(out / "sweep.json", doc)
    return written + [out / "sweep.json"]
