"""NVIDIA AIPerf as the load generator: a trace as its Mooncake payload file, AIPerf run on a
fixed schedule against a loopback server, and its per-request export read back.

Each trace request becomes one Mooncake line `{"timestamp": ms, "session_id": id, "payload":
{...}}` whose payload AIPerf sends verbatim (aiperf/dataset/loader/models.py `MooncakeTrace`):
a /v1/completions body with the request's prompt as token ids (exactly `prompt_tokens`),
`max_tokens = min_tokens = output_tokens`, `ignore_eos`, greedy, streamed. AIPerf writes one
JSON record per request to `profile_export.jsonl` (`metadata` with the send and end times in
ns, `metrics` with TTFT and latency in ms and the server's token usage, and
`spec_decode_acceptance` with vLLM's per-request spec-decode metrics). `read_export` turns
them into the simulator's request table: arrival = the scheduled time, first token and finish
= the actual send time + AIPerf's TTFT and request latency; the send-time error (actual send
minus schedule) is kept per request.
"""
from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd

from ..errors import InputError
from ..fileio import json_text, write_text_atomic
from ..traces.schema import Trace, iter_json_lines
from .runtime import EngineError

EXPORT = "profile_export.jsonl"


def mooncake_lines(trace: Trace, prompts: list[list[int]], model: str) -> str:
    """The trace as AIPerf's Mooncake payload file (fixed schedule, token-id prompts)."""
    start = float(np.min(trace.arrival_s)) if len(trace) else 0.0
    lines = []
    for i in range(len(trace)):
        out = int(trace.output_tokens[i])
        body = {"model": model, "prompt": prompts[i], "max_tokens": out, "min_tokens": out,
                "ignore_eos": True, "temperature": 0.0, "stream": True,
                "stream_options": {"include_usage": True}}
        lines.append(json_text({"timestamp": round((float(trace.arrival_s[i]) - start) * 1e3, 3),
                                 "session_id": str(trace.ids[i]), "payload": body}))
    return "\n".join(lines) + "\n"


def run_aiperf(aiperf: Path, url: str, model: str, tokenizer: str, input_file: Path, out_dir: Path,
               timeout_s: float, alive: Callable[[], bool] | None = None,
               cpus: set[int] | None = None) -> Path:
    """Run `aiperf profile` on the fixed schedule of `input_file`; the export's path. Stops
    (keeping what AIPerf exported) when `timeout_s` passes or `alive()` turns false. `cpus`
    confines AIPerf's processes (it runs several) to CPUs the engine's worker does not use: on
    two cores, unconfined, they slowed vLLM's decode iterations by ~10% against its profile."""
    out_dir.mkdir(parents=True, exist_ok=True)
    cmd = [str(aiperf), "profile", "--model", model, "--url", url, "--endpoint-type", "completions",
           "--streaming", "--input-file", str(input_file), "--custom-dataset-type", "mooncake_trace",
           "--fixed-schedule", "--fixed-schedule-auto-offset", "--tokenizer", tokenizer,
           "--use-server-token-count", "--artifact-dir", str(out_dir), "--ui-type", "none",
           "--request-timeout-seconds", str(int(timeout_s))]
    env = dict(os.environ)
    # AIPerf's offline mode resolves every tokenizer name through the hub cache, so a local
    # folder fails under HF_HUB_OFFLINE; without it a local folder loads from disk.
    env.pop("HF_HUB_OFFLINE", None)
    env.pop("TRANSFORMERS_OFFLINE", None)
    log_path = out_dir / "aiperf.log"
    with open(log_path, "wb") as log:
        pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, start_new_session=True, preexec_fn=pin)
        deadline = time.monotonic() + timeout_s + 120
        server_died = False
        while proc.poll() is None:
            if time.monotonic() > deadline or (alive is not None and not alive()):
                server_died = alive is not None and not alive()
                os.killpg(proc.pid, 15)
                try:
                    proc.wait(30)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, 9)
                break
            time.sleep(0.5)
    export = out_dir / EXPORT
    tail = "\n".join(log_path.read_text(errors="replace").splitlines()[-15:])
    if server_died:
        raise EngineError(f"the vLLM server died during the replay; AIPerf stopped.\n{tail}")
    if proc.returncode not in (0, None) and not export.exists():
        raise EngineError(f"AIPerf exited with status {proc.returncode} (log {log_path}):\n{tail}")
    if not export.exists():
        raise EngineError(f"AIPerf wrote no {EXPORT} (log {log_path}):\n{tail}")
    return export


def _spec(rec: dict) -> dict | None:
    """vLLM's per-request spec-decode metrics of an AIPerf record (None without speculation)."""
    spec = rec.get("spec_decode_acceptance")
    return spec if isinstance(spec, dict) else None


READ_METRICS = ("time_to_first_token", "request_latency", "usage_completion_tokens",
                "usage_prompt_tokens")


def _check_record(rec: dict, path: Path, line: int) -> None:
    """The fields read_export and trace_from_export read, where present, have the right types
    (numbers where numbers go); else InputError naming FILE:LINE and the field."""
    def bad(field: str, message: str) -> InputError:
        return InputError(message, file=path, line=line, field=field)

    def number(value, field: str) -> None:
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))):
            raise bad(field, f"expected a number, got {value!r}")
    for key in ("metadata", "metrics"):
        if rec.get(key) is not None and not isinstance(rec[key], dict):
            raise bad(key, f"expected an object, got {type(rec[key]).__name__}")
    meta = rec.get("metadata") or {}
    for key in ("request_start_ns", "credit_issued_ns"):
        number(meta.get(key), f"metadata.{key}")
    metrics = rec.get("metrics") or {}
    for name in READ_METRICS:     # others (e.g. inter_chunk_latency, a list) are not read
        m = metrics.get(name)
        if isinstance(m, dict):
            number(m.get("value"), f"metrics.{name}.value")
    for key, value in (_spec(rec) or {}).items():
        if key.startswith("num_"):
            number(value, f"spec_decode_acceptance.{key}")


def _metric(rec: dict, name: str) -> float:
    m = (rec.get("metrics") or {}).get(name)
    return float(m["value"]) if isinstance(m, dict) and m.get("value") is not None else float("nan")


def read_export(path: Path, trace: Trace) -> tuple[pd.DataFrame, dict[str, Any]]:
    """AIPerf's per-request records of a replay of `trace` -> (requests frame in trace order,
    replay fidelity: send-time error, errors, records matched). Records are matched to trace
    requests by the session id written into the Mooncake file."""
    index = {str(i): k for k, i in enumerate(trace.ids)}
    n = len(trace)
    start_ns = np.full(n, np.nan)
    credit_ns = np.full(n, np.nan)
    ttft = np.full(n, np.nan)
    latency = np.full(n, np.nan)
    out_tokens = np.zeros(n, dtype=np.int64)
    steps = np.zeros(n, dtype=np.int64)
    drafted = np.zeros(n, dtype=np.int64)
    accepted = np.zeros(n, dtype=np.int64)
    prompt_seen = np.zeros(n, dtype=np.int64)
    errors: list[str] = []
    for line_no, rec in iter_json_lines(path, "AIPerf export"):
        _check_record(rec, path, line_no)
        meta = rec.get("metadata") or {}
        sid = str(meta.get("conversation_id", ""))
        if sid not in index:
            raise InputError(f"record for unknown request {sid!r}", file=path, line=line_no,
                             field="metadata.conversation_id")
        k = index[sid]
        if rec.get("error"):
            errors.append(f"{sid}: {rec['error']}")
            continue
        start_ns[k] = float(meta.get("request_start_ns", np.nan))
        credit_ns[k] = float(meta.get("credit_issued_ns", np.nan))
        ttft[k] = _metric(rec, "time_to_first_token") / 1e3
        latency[k] = _metric(rec, "request_latency") / 1e3
        tokens = _metric(rec, "usage_completion_tokens")
        out_tokens[k] = int(tokens) if np.isfinite(tokens) else 0
        prompt = _metric(rec, "usage_prompt_tokens")
        prompt_seen[k] = int(prompt) if np.isfinite(prompt) else 0
        spec = _spec(rec)
        if spec is not None:
            drafted[k] = int(spec.get("num_draft_tokens") or 0)
            accepted[k] = int(spec.get("num_accepted_draft_tokens") or 0)
        steps[k] = max(out_tokens[k] - 1 - accepted[k], 0)
    scheduled = np.asarray(trace.arrival_s, dtype=float) - float(np.min(trace.arrival_s))
    have = np.isfinite(start_ns)
    t0 = float(np.min(credit_ns[have] - scheduled[have] * 1e9)) if have.any() else 0.0
    sent = (start_ns - t0) / 1e9
    first = sent + ttft
    finish = sent + latency
    decode = out_tokens - 1
    with np.errstate(divide="ignore", invalid="ignore"):
        tpot = np.where(decode > 0, (finish - first) / np.maximum(decode, 1), np.nan)
        tps = np.where(tpot > 0, 1.0 / tpot, np.nan)
    frame = pd.DataFrame({
        "id": trace.ids, "task": trace.task, "replica": 0, "arrival_s": scheduled,
        "first_token_s": first, "finish_s": finish, "prompt_tokens": trace.prompt_tokens,
        "output_tokens": out_tokens, "steps": steps, "drafted_tokens": drafted,
        "verified_tokens": drafted, "accepted_tokens": accepted, "ttft_s": first - scheduled,
        "tpot_s": tpot, "tps_user": tps})
    send_error = (sent - scheduled)[have]
    fidelity = {"records": int(have.sum()), "requests": n, "errors": errors[:20],
                "error_count": len(errors),
                "prompt_tokens_differing": int((have & (prompt_seen != np.asarray(trace.prompt_tokens))).sum()),
                "output_tokens_differing": int((have & (out_tokens != np.asarray(trace.output_tokens))).sum()),
                "send_error_s": {"median": float(np.median(send_error)) if have.any() else None,
                                 "p99": float(np.percentile(send_error, 99)) if have.any() else None,
                                 "max": float(np.max(send_error)) if have.any() else None}}
    return frame, fidelity


def trace_from_export(path: Path) -> Trace:
    """The trace an AIPerf export replayed, from its records alone (a user's own AIPerf run):
    request = conversation id, arrival = when AIPerf issued it, lengths = the server's usage."""
    rows = []
    for line_no, rec in iter_json_lines(path, "AIPerf export"):
        meta = rec.get("metadata")
        if not isinstance(meta, dict) or meta.get("credit_issued_ns") is None:
            raise InputError("missing field", file=path, line=line_no, field="metadata.credit_issued_ns")
        _check_record(rec, path, line_no)
        if rec.get("error") or meta.get("was_cancelled"):
            continue
        prompt, out = _metric(rec, "usage_prompt_tokens"), _metric(rec, "usage_completion_tokens")
        if not (np.isfinite(prompt) and np.isfinite(out)) or prompt < 1 or out < 1:
            raise InputError("missing or zero token usage (run AIPerf with --use-server-token-count)",
                             file=path, line=line_no, field="metrics.usage_completion_tokens")
        rows.append((str(meta.get("conversation_id") or line_no), float(meta["credit_issued_ns"]),
                     int(prompt), int(out)))
    if not rows:
        raise InputError("no completed records", file=path)
    rows.sort(key=lambda r: r[1])
    t = np.array([r[1] for r in rows])
    return Trace(ids=np.array([r[0] for r in rows], dtype=object), arrival_s=(t - t[0]) / 1e9,
                 prompt_tokens=np.array([r[2] for r in rows], dtype=np.int64),
                 output_tokens=np.array([r[3] for r in rows], dtype=np.int64),
                 task=np.full(len(rows), "default", dtype=object), name=str(path))


def write_input(trace: Trace, prompts: list[list[int]], model: str, path: Path) -> Path:
    write_text_atomic(path, mooncake_lines(trace, prompts, model))
    return path


def import_run(export: Path, trace_path: Path | None, policy: str, out: Path) -> dict[str, Any]:
    """`import-aiperf`: an AIPerf export (replaying `trace_path`, or its own records' arrivals)
    written as the simulator's out/requests.csv and out/summary.json; the replay's fidelity."""
    from ..fileio import write_json_atomic
    from ..sim.output.metrics import requests_csv, summarise
    from ..traces.schema import load_trace

    tr = load_trace(trace_path) if trace_path else trace_from_export(export)
    frame, fidelity = read_export(export, tr)
    summary = summarise(frame, policy=policy, trace=str(trace_path or export), hw="measured",
                        acceptance=None, seed=0, gpus=1, iterations=0, sim_wall_s=0.0)
    summary.update({"engine": "aiperf-export", "replay_fidelity": fidelity,
                    "drafted_tokens": int(frame["drafted_tokens"].sum()),
                    "accepted_tokens": int(frame["accepted_tokens"].sum())})
    write_text_atomic(out / "requests.csv", requests_csv(frame))
    write_json_atomic(out / "summary.json", summary)
    return fidelity
