"""Serve a trace on vLLM: a loopback server per policy, AIPerf on the trace's fixed schedule,
the simulator's requests.csv / summary.json, plus what vLLM itself measured.

Per policy one server is started (its speculative config differs), warmed up with two short
requests, scraped for Prometheus metrics, given the trace by AIPerf, scraped again; every
repeat of that policy reuses the warm server, or (`fresh_servers`) every run gets a server of
its own, the policies interleaved and their order rotated from one repeat to the next, so the
runs' spread holds how much one server start differs from the next. A run's directory keeps the server's log, its
per-iteration records (iterations.csv, vLLM's own columns), both metric scrapes
(metrics-before.txt / metrics-after.txt, the input of `acceptance import vllm --before`), the
Mooncake input and AIPerf's export.
"""
from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from ..errors import InputError
from ..fileio import write_json_atomic, write_text_atomic
from ..serve.engine import ServeResult
from ..sim.output.metrics import requests_csv, summarise
from ..traces.schema import Trace
from .aiperf import read_export, run_aiperf, write_input
from .client import run_schedule
from .iterations import LogCursor, kv_capacity_tokens, parse_iterations, vllm_version
from .runtime import (EngineError, ServerSpec, VLLMServer, drafter_kind, read_metrics, spare_cpus,
                      speculative_config)
from .settings import ServerLimits, server_spec


@dataclass
class VLLMSetup:
    """Everything a vLLM replay needs besides the trace."""

    python: Path
    aiperf: Path
    base: ServerSpec                 # model, limits; the speculative config is the policy's
    drafter: dict[str, Any]
    tokenizer: str                   # a local folder AIPerf loads (it counts nothing with it)
    url: str | None = None           # attach to a running server instead of starting one
    timeout_s: float | None = None   # per run; default: trace span + 600 s
    schedule: list[list[int]] | None = None   # vllm-schedule's batch-size schedule (vLLM JSON)


def run_dir(policy_dir: Path, k: int, repeats: int) -> Path:
    """Where run k of a policy lives: the policy's folder itself (one repeat) or its run-k."""
    return policy_dir if repeats == 1 else policy_dir / f"run-{k}"


def _spec_for(setup: VLLMSetup, policy: str) -> ServerSpec:
    from dataclasses import replace

    return replace(setup.base, speculative=speculative_config(policy, setup.drafter, setup.schedule))


def _warm_up(url: str, model: str, vocab_ids: list[int]) -> None:
    recs = run_schedule(url, model, [vocab_ids, vocab_ids[::-1]], [8, 8], [0.0, 0.0], timeout_s=120)
    bad = [r.error for r in recs if r.error]
    if bad:
        raise EngineError(f"vLLM refused the warm-up request: {bad[0]}")


class AttachedServer:
    """A running server given by --url: scraped, never started or stopped."""

    def __init__(self, url: str, model: str) -> None:
        from .client import check_loopback

        check_loopback(url)
        self.url, self.log_path, self.start_s = url.rstrip("/"), None, 0.0
        self.spec = ServerSpec(model=model)

    def alive(self) -> bool:
        return True

    def metrics_text(self) -> str:
        return read_metrics(self.url)


def replay_on_server(server, trace: Trace, trace_name: str, policy: str, prompts: list[list[int]],
                     setup: VLLMSetup, run_dir: Path, seed: int = 0, hw_name: str = "vllm") -> ServeResult:
    """One replay of `trace` on a running server (`VLLMServer` or `AttachedServer`)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    cursor = LogCursor(server.log_path) if server.log_path else None
    model = server.spec.served_name
    before = server.metrics_text()
    write_text_atomic(run_dir / "metrics-before.txt", before)
    span = float(max(trace.arrival_s) - min(trace.arrival_s)) if len(trace) else 0.0
    timeout = setup.timeout_s or span + 600.0
    input_file = write_input(trace, prompts, model, run_dir / "aiperf-input.jsonl")
    load = os.getloadavg()
    t0 = time.perf_counter()
    cpus = spare_cpus(setup.base.threads) if not setup.url else None
    export = run_aiperf(setup.aiperf, server.url, model, setup.tokenizer, input_file,
                        run_dir / "aiperf", timeout, server.alive, cpus)
    wall = time.perf_counter() - t0
    after = server.metrics_text() if server.alive() else ""
    write_text_atomic(run_dir / "metrics-after.txt", after)
    frame, fidelity = read_export(export, trace)
    iterations = None
    if cursor is not None:
        time.sleep(0.3)
        iterations = parse_iterations(cursor.read_new())
        write_text_atomic(run_dir / "iterations.csv", requests_csv(iterations))
    summary = summarise(frame, policy=policy, trace=trace_name, hw=hw_name, acceptance=None,
                        seed=seed, gpus=1, iterations=0 if iterations is None else len(iterations),
                        sim_wall_s=wall)
    spec_steps = int((frame["drafted_tokens"] > 0).sum())
    drafted, accepted = int(frame["drafted_tokens"].sum()), int(frame["accepted_tokens"].sum())
    summary.update({
        "engine": "vllm", "replicas": 1, "gpus": 1, "load_generator": "aiperf",
        "load_generator_cpus": sorted(cpus) if cpus else None,
        "speculative_config": server.spec.speculative, "replay_fidelity": fidelity,
        "requests_with_drafts": spec_steps, "drafted_tokens": drafted, "accepted_tokens": accepted,
        "load_average_before": [round(v, 2) for v in load],
        "load_average_after": [round(v, 2) for v in os.getloadavg()],
        "metrics_before": str(run_dir / "metrics-before.txt"),
        "metrics_after": str(run_dir / "metrics-after.txt")})
    return ServeResult(policy, frame, summary, [], [], None)


def _check_speed_before(server, setup: VLLMSetup, run_dir: Path, seed: int) -> None:
    from .runtime import model_vocab
    from .speed_check import SPEED_CHECK_FILE, check_speed

    spec = server.spec.speculative
    run_dir.mkdir(parents=True, exist_ok=True)
    check_speed(server, model_vocab(setup.base.model), drafter_kind(spec) if spec else None,
                seed).save(run_dir / SPEED_CHECK_FILE)


def run_order(policies: list[str], repeats: int, fresh_servers: bool) -> list[list[tuple[str, int]]]:
    """The runs as groups that share one server, in the order they are served: per policy all
    its repeats on one server, or one run per server, repeat by repeat, the policies' order
    rotated by one each repeat (so none is always first after a quiet spell)."""
    if not fresh_servers:
        return [[(pol, k) for k in range(repeats)] for pol in policies]
    n = len(policies)
    return [[(policies[(i + k) % n], k)] for k in range(repeats) for i in range(n)]


def serve_trace_vllm(trace: Trace, trace_name: str, policies: list[str], prompts: list[list[int]],
                     setup: VLLMSetup, policy_dir: Callable[[str], Path], repeats: int = 1,
                     seed: int = 0, on_run: Callable[[str, int, ServeResult], None] | None = None,
                     status: Callable[[str], None] | None = None,
                     fresh_servers: bool = False, speed_check: bool = False) -> dict[str, list[ServeResult]]:
    """Every policy `repeats` times, on one warm server per policy or (`fresh_servers`) on a
    freshly started server per run (run_order); run k of policy P is written to policy_dir(P)
    (one repeat) or policy_dir(P)/run-k, each as soon as it ends. With `speed_check` each run
    is preceded by a speed check of its server (speed_check.py), kept as speed-check.json."""
    if fresh_servers and setup.url:
        raise InputError("a server given by --url cannot be restarted for each run",
                         field="--fresh-servers")
    if speed_check and setup.url:
        raise InputError("a server given by --url writes no iteration log here to time a speed "
                         "check on", field="--speed-check")
    say = status or (lambda s: None)
    results: dict[str, list[ServeResult]] = {pol: [] for pol in policies}
    warm_ids = prompts[0][:48] if prompts and prompts[0] else list(range(100, 148))
    where = (lambda pol, k: run_dir(policy_dir(pol), k, repeats))
    for group in run_order(policies, repeats, fresh_servers):
        pol = group[0][0]
        if setup.url:
            server = AttachedServer(setup.url, setup.base.served_name)
            say(f"{pol}: attached to {setup.url}")
        else:
            log = (where(pol, group[0][1]) if fresh_servers else policy_dir(pol)) / "vllm.log"
            server = VLLMServer(_spec_for(setup, pol), setup.python, log)
            say(f"{pol}: starting vLLM")
            server.start()
        try:
            _warm_up(server.url, server.spec.served_name, warm_ids)
            for _, k in group:
                if speed_check:
                    say(f"{pol}: speed check before replay {k + 1}/{repeats}")
                    _check_speed_before(server, setup, where(pol, k), seed + k)
                say(f"{pol}: replay {k + 1}/{repeats}")
                res = replay_on_server(server, trace, trace_name, pol, prompts, setup, where(pol, k), seed)
                if isinstance(server, VLLMServer):
                    text = server.log_path.read_text(errors="replace")
                    res.summary.update({"vllm_version": vllm_version(text),
                                        "kv_capacity_tokens": kv_capacity_tokens(text),
                                        "server_start_s": round(server.start_s, 1),
                                        "fresh_server": fresh_servers,
                                        "server_args": server.spec.args(0)[2:]})
                write_text_atomic(where(pol, k) / "requests.csv", requests_csv(res.requests))
                write_json_atomic(where(pol, k) / "summary.json", res.summary)
                results[pol].append(res)
                if on_run:
                    on_run(pol, k, res)
        finally:
            if isinstance(server, VLLMServer):
                server.stop()
    return results


def load_engine_runs(runs_dir: Path, policies: list[str], repeats: int) -> dict:
    """vLLM runs a previous `validate --engine vllm` wrote (DIR/engine/<policy>/run-<k>/
    requests.csv and summary.json), to simulate again without serving."""
    import pandas as pd

    engine = {}
    for pol in policies:
        engine[pol] = []
        for k in range(repeats):
            where = run_dir(runs_dir / "engine" / pol, k, repeats)
            try:
                frame = pd.read_csv(where / "requests.csv", dtype={"id": str, "task": str})
                summary = json.loads((where / "summary.json").read_text())
            except (OSError, ValueError) as exc:
                raise InputError(f"no vLLM run of {pol} here ({exc})", file=where,
                                 field="--engine-runs") from None
            engine[pol].append(ServeResult(pol, frame, summary, [], [], None))
    return engine


def imported_acceptance(trace, policy_dir: Path, repeats: int, policy: str):
    """The empirical acceptance profile of a policy's first vLLM run: AIPerf's per-request
    records, each request's task from the trace (`acceptance import vllm` with a task map)."""
    from .acceptance_import import import_vllm
    from .records import TaskRule

    run = run_dir(policy_dir, 0, repeats)
    export = run / "aiperf" / "profile_export.jsonl"
    rule = TaskRule(path="metadata.conversation_id",
                    mapping={str(i): str(t) for i, t in zip(trace.ids, trace.task)}, map_file="trace")
    spec = json.loads((run / "summary.json").read_text()).get("speculative_config") or {}
    prof = import_vllm([export], f"vllm-{policy}", kind="empirical", rule=rule,
                       drafter_kind=drafter_kind(spec), keep_ids=True).profile
    path = run / "acceptance.json"
    prof.save(path)
    return prof, str(path)


def read_schedule(bs_schedule: str | None, policies: list[str]) -> list[list[int]] | None:
    """The validated batch-size schedule (vLLM JSON), required by and only by vllm-schedule."""
    from ..sim.speculation.spec_config import parse_schedule
    from .runtime import SCHEDULE_POLICY

    if (bs_schedule is None) == (SCHEDULE_POLICY in policies):
        raise InputError(f"--bs-schedule goes with the policy {SCHEDULE_POLICY} and it needs one",
                         field="--bs-schedule")
    return parse_schedule(bs_schedule, 1 << 10).to_json() if bs_schedule else None


def replay_inputs(trace_path: Path, policies: list[str], target: str, prompts: str | None,
                  chat: bool, time_scale: float, seed: int, vllm_python: str | None,
                  aiperf: str | None, drafter: str, url: str | None, timeout: float | None,
                  limits: ServerLimits, bs_schedule: str | None = None):
    """Validated trace, policies, prompt ids and the VLLMSetup; nothing is started."""
    from transformers import AutoTokenizer

    from ..serve.engine import scale_trace
    from ..serve.prompts import PromptBuilder, build_prompts, prompt_sets, share_content
    from ..traces.schema import load_trace
    from .client import check_loopback
    from .runtime import aiperf_command, parse_drafter, policy_spec_tokens, resolve_model
    from .runtime import vllm_python as find_python

    schedule = read_schedule(bs_schedule, policies)
    for p in policies:
        policy_spec_tokens(p)
    if timeout is not None and not timeout > 0:
        raise InputError(f"must be > 0, got {timeout}", field="--timeout")
    if url:
        check_loopback(url)
    trace = scale_trace(load_trace(trace_path), time_scale)
    too_long = int((trace.prompt_tokens + trace.output_tokens).max()) if len(trace) else 0
    if too_long > limits.max_model_len:
        raise InputError(f"a request needs {too_long} tokens, more than max_model_len "
                         f"{limits.max_model_len} (--vllm-server)", file=trace_path, field="prompt_tokens")
    drafter_cfg = parse_drafter(drafter)
    python = find_python(vllm_python) if not url else Path("python")
    aiperf_exe = aiperf_command(aiperf)
    model, _ = resolve_model(target)
    if not Path(model).is_dir():
        raise InputError("vLLM replays need a local model folder (AIPerf and the prompts read its "
                         "tokenizer)", field="--target")
    tokenizer = AutoTokenizer.from_pretrained(model)
    ids = share_content(build_prompts(PromptBuilder(tokenizer, prompt_sets(prompts), chat),
                                      trace.task, trace.prompt_tokens, seed), trace)
    spec = server_spec(model, None, limits)
    setup = VLLMSetup(python=python, aiperf=aiperf_exe, base=spec, drafter=drafter_cfg,
                      tokenizer=model, url=url, timeout_s=timeout, schedule=schedule)
    return trace, ids, setup


def serve_replay(trace_path: Path, policies: list[str], out: Path, seed: int,
                 status: Callable[[str], None] | None = None,
                 **inputs) -> tuple[dict[str, list[ServeResult]], list[Path]]:
    """`serve-replay --engine vllm`: each policy once on its own server, written as the
    simulator's files into `out` (one policy) or out/<policy>; the results and those folders.
    `inputs`: the keyword arguments of replay_inputs after `seed`."""
    trace, ids, setup = replay_inputs(trace_path, policies, seed=seed, **inputs)
    where = (lambda p: out) if len(policies) == 1 else (lambda p: out / p)
    results = serve_trace_vllm(trace, str(trace_path), policies, ids, setup, where, 1, seed,
                               status=status)
    return results, [where(p) for p in policies]
