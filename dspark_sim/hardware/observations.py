"""Observations a hardware profile is fitted to (`dspark-sim profile fit`), and their readers.

Two kinds:
- a **load point**: a policy served at one load, with the throughput per GPU and the per-user
  speed measured there (and optionally TTFT, the concurrency, the request lengths);
- a **step point**: one measured target forward (batch tokens, context tokens, seconds).

Files (the reader is picked by the suffix; every error names FILE:LINE and the field):
- CSV, one observation per row, header = field names below (a row with `seconds` is a step point);
- YAML: `schema: dspark-sim/observations/v1`, optional `defaults:` (fields shared by every point),
  `points:` (load points) and `step_points:` lists;
- JSON: a `vllm bench serve --save-result` file (one per --max-concurrency): concurrency =
  `max_concurrency` (or `num_prompts` when unset), throughput = `output_throughput` / GPUs,
  tok/s/user p50 = 1000 / `median_tpot_ms` (the median of 1/TPOT is 1 / median TPOT), TTFT =
  `median_ttft_ms`, mean lengths = total input / output tokens per completed request, requests =
  `completed`, window = whole-run (output_throughput is every output token over the benchmark's
  duration, ramp-up and drain included).

Load-point fields: policy (ar | mtp1 | static-K | dspark ...), acceptance (profile name or path;
speculative policies), throughput_tok_s_per_gpu, tps_user, tps_stat (mean | p50 | pNN; default
mean), concurrency (users of the closed loop; optional for decode-only points, where Little's
law gives it: throughput x GPUs / tps_user), prefill (local | disaggregated; default
disaggregated), ttft_s, prompt_tokens and output_tokens (mean lengths), trace (a trace file whose
lengths and tasks the users send; overrides the mean lengths), requests (how many requests the
run measured: the simulated closed loop then runs as long as the run did, requests / concurrency
per user, instead of `--requests-per-user`; sweep/load_replay.py `replay_requests_per_user`),
window (steady | whole-run; default steady: how the throughput was measured, over a steady
window, or, as a benchmark client reports it, every output token over the whole run from the
first send to the last finish; whole-run needs `requests`, and the simulated loop then sends
exactly that many requests at the point's concurrency), label.
Step-point fields: batch_tokens, context_tokens (default 0), seconds.
"""
from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..fileio import read_json, read_text, read_yaml
from ..profiles.validate import FieldChecker
from ..sim.speculation.registry import check_policy_name

OBS_SCHEMA = "dspark-sim/observations/v1"
PREFILL = ("disaggregated", "local")
_LOAD_NUMBERS = ("throughput_tok_s_per_gpu", "tps_user", "concurrency", "ttft_s",
                 "prompt_tokens", "output_tokens", "requests")
_LOAD_FIELDS = set(_LOAD_NUMBERS) | {"policy", "acceptance", "tps_stat", "prefill", "trace", "label", "window"}
WINDOWS = ("steady", "whole-run")      # as sweep/point.py `measure` takes them
_STEP_FIELDS = {"batch_tokens", "context_tokens", "seconds", "label"}


@dataclass(frozen=True)
class LoadPoint:
    """A policy measured at one load: what the simulator must reproduce."""

    policy: str
    throughput_tok_s_per_gpu: float
    tps_user: float
    tps_stat: str = "mean"
    acceptance: str | None = None
    concurrency: int | None = None
    prefill: str = "disaggregated"
    ttft_s: float | None = None
    prompt_tokens: float = 1000.0
    output_tokens: float = 200.0
    trace: str | None = None
    label: str = ""
    where: str = ""                  # FILE:LINE the point came from
    requests: int | None = None      # requests the run measured (how long it ran)
    window: str = "steady"           # throughput over a steady window, or the whole run (WINDOWS)

    def users(self, gpus: int) -> int:
        """Closed-loop users: as given, else Little's law for a decode-only point."""
        if self.concurrency is not None:
            return self.concurrency
        return max(1, round(self.throughput_tok_s_per_gpu * gpus / self.tps_user))


@dataclass(frozen=True)
class StepPoint:
    """One measured target forward."""

    batch_tokens: float
    context_tokens: float
    seconds: float
    label: str = ""
    where: str = ""


def _load_point(rec: dict, check: FieldChecker, prefix: str, where: str, base_dir: Path) -> LoadPoint:
    unknown = set(rec) - _LOAD_FIELDS
    if unknown:
        raise check.fail(f"{prefix}{sorted(unknown)[0]}", f"unknown field; known: {', '.join(sorted(_LOAD_FIELDS))}")
    policy = check.string(check.require(rec, "policy", prefix.rstrip(".")), f"{prefix}policy")
    try:
        check_policy_name(policy)
    except InputError as exc:
        raise check.fail(f"{prefix}policy", exc.message) from None
    nums: dict[str, Any] = {}
    for key in _LOAD_NUMBERS:
        if rec.get(key) not in (None, ""):
            nums[key] = check.number(rec[key], f"{prefix}{key}", 0.0, exclusive=True)
    for key in ("throughput_tok_s_per_gpu", "tps_user"):
        if key not in nums:
            raise check.fail(f"{prefix}{key}", f"missing required field '{key}'")
    for key, what in (("concurrency", "users"), ("requests", "requests")):
        if key in nums:
            if not float(nums[key]).is_integer():
                raise check.fail(f"{prefix}{key}", f"expected a whole number of {what}, got {nums[key]}")
            nums[key] = int(nums[key])
    stat = str(rec.get("tps_stat") or "mean").strip().lower()
    if stat != "mean" and not (stat.startswith("p") and stat[1:].isdigit() and 0 <= int(stat[1:]) <= 100):
        raise check.fail(f"{prefix}tps_stat", f"expected mean or p0..p100, got {stat!r}")
    prefill = str(rec.get("prefill") or "disaggregated")
    if prefill not in PREFILL:
        raise check.fail(f"{prefix}prefill", f"must be one of {', '.join(PREFILL)}, got {prefill!r}")
    if prefill == "local" and "concurrency" not in nums:
        raise check.fail(f"{prefix}concurrency", "needed with local prefill (Little's law gives "
                         "it only for decode-only points)")
    window = str(rec.get("window") or "steady").strip().lower()
    if window not in WINDOWS:
        raise check.fail(f"{prefix}window", f"must be one of {', '.join(WINDOWS)}, got {window!r}")
    if window == "whole-run" and ("requests" not in nums or "concurrency" not in nums):
        raise check.fail(f"{prefix}window", "whole-run needs 'requests' (how many the run sent) and "
                         "'concurrency' (its cap): the simulated loop sends as many")
    acceptance = rec.get("acceptance") or None
    if policy != "ar" and acceptance is None:
        raise check.fail(f"{prefix}acceptance", f"policy {policy} needs an acceptance profile")
    trace = rec.get("trace") or None
    if trace is not None and not Path(trace).is_absolute():
        trace = str(base_dir / trace) if (base_dir / trace).exists() else str(trace)
    return LoadPoint(policy=policy, tps_stat=stat, acceptance=acceptance, prefill=prefill,
                     trace=trace, label=str(rec.get("label") or ""), where=where, window=window, **nums)


def _step_point(rec: dict, check: FieldChecker, prefix: str, where: str) -> StepPoint:
    unknown = set(rec) - _STEP_FIELDS
    if unknown:
        raise check.fail(f"{prefix}{sorted(unknown)[0]}", f"unknown field; known: {', '.join(sorted(_STEP_FIELDS))}")
    b = check.number(check.require(rec, "batch_tokens", prefix.rstrip(".")), f"{prefix}batch_tokens", 1.0)
    ctx = check.number(rec.get("context_tokens") or 0.0, f"{prefix}context_tokens", 0.0)
    sec = check.number(check.require(rec, "seconds", prefix.rstrip(".")), f"{prefix}seconds", 0.0, exclusive=True)
    return StepPoint(b, ctx, sec, str(rec.get("label") or ""), where)


def _number_or_text(text: str) -> Any:
    try:
        value = float(text)
    except ValueError:
        return text.strip()
    return int(value) if value.is_integer() and "." not in text and "e" not in text.lower() else value


def read_csv(path: Path) -> list[LoadPoint | StepPoint]:
    """One observation per row; the header names the fields."""
    text = read_text(path)
    rows = list(csv.reader(text.splitlines()))
    if not rows or not any(rows[0]):
        raise InputError("empty file: expected a header row of field names", file=path, line=1)
    header = [h.strip() for h in rows[0]]
    out: list[LoadPoint | StepPoint] = []
    for lineno, row in enumerate(rows[1:], start=2):
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(header):
            raise InputError(f"has {len(row)} cells but the header has {len(header)}",
                             file=path, line=lineno)
        rec = {h: _number_or_text(c) for h, c in zip(header, row) if c.strip() != ""}
        check = _LineChecker(path, lineno)
        where = f"{path}:{lineno}"
        out.append(_step_point(rec, check, "", where) if "seconds" in rec
                   else _load_point(rec, check, "", where, path.parent))
    return out


class _LineChecker(FieldChecker):
    """FieldChecker whose every field sits on one known line (a CSV row)."""

    def __init__(self, file: Path, line: int) -> None:
        super().__init__(file)
        self._line = line

    def fail(self, field: str, message: str) -> InputError:
        return InputError(message, file=self.file, line=self._line, field=field)


def read_yaml_observations(path: Path) -> list[LoadPoint | StepPoint]:
    """`schema: dspark-sim/observations/v1` with `defaults`, `points`, `step_points`."""
    data, lines = read_yaml(path)
    check = FieldChecker(path, lines)
    data = check.mapping(data, "(document)")
    check.schema(data, OBS_SCHEMA)
    defaults = check.mapping(data.get("defaults") or {}, "defaults")
    out: list[LoadPoint | StepPoint] = []
    for key, parse in (("points", "load"), ("step_points", "step")):
        items = data.get(key) or []
        if not isinstance(items, list):
            raise check.fail(key, "expected a list")
        for i, rec in enumerate(items):
            prefix = f"{key}[{i}]"
            rec = check.mapping(rec, prefix)
            where = f"{path}:{lines.line(prefix) or '?'}"
            if parse == "load":
                out.append(_load_point({**defaults, **rec}, check, f"{prefix}.", where, path.parent))
            else:
                out.append(_step_point(rec, check, f"{prefix}.", where))
    if not out:
        raise check.fail("points", "no observations: give 'points' or 'step_points'")
    return out


def read_vllm_result(path: Path, policy: str, acceptance: str | None, gpus: int,
                     prefill: str) -> LoadPoint:
    """One `vllm bench serve --save-result` JSON file -> a load point (tok/s/user p50)."""
    data, lines = read_json(path)
    check = FieldChecker(path, lines)
    data = check.mapping(data, "(document)")

    def num(key: str) -> float:
        return check.number(check.require(data, key), key, 0.0, exclusive=True)

    completed = num("completed")
    concurrency = data.get("max_concurrency")
    if concurrency is None:
        concurrency = data.get("num_prompts") if str(data.get("request_rate", "inf")) == "inf" else None
    if concurrency is not None:
        concurrency = check.integer(concurrency, "max_concurrency", 1)
    rec: dict[str, Any] = {
        "policy": policy, "acceptance": acceptance, "prefill": prefill, "tps_stat": "p50",
        "throughput_tok_s_per_gpu": num("output_throughput") / gpus,
        "tps_user": 1000.0 / num("median_tpot_ms"),
        "prompt_tokens": max(1.0, num("total_input_tokens") / completed),
        "output_tokens": max(2.0, num("total_output_tokens") / completed),
        "requests": int(completed), "label": f"{path.name}",
    }
    if data.get("median_ttft_ms") is not None:
        rec["ttft_s"] = num("median_ttft_ms") / 1000.0
    if concurrency is not None:
        rec["concurrency"] = concurrency
        rec["window"] = "whole-run"      # output_throughput: total output tokens / duration
    return _load_point(rec, check, "", f"{path}:{lines.line('median_tpot_ms') or 1}", path.parent)


def split_run_spec(spec: str | Path, policy: str, acceptance: str | None) -> tuple[Path, str, str | None]:
    """`RUN.json[@POLICY[@ACCEPTANCE]]` -> (path, policy, acceptance): a vLLM result file may name
    its own policy and acceptance profile (a run with speculation beside runs without), else it
    takes the defaults. A path that exists as written is never split."""
    text = str(spec)
    if Path(text).exists() or "@" not in Path(text).name:
        return Path(text), policy, acceptance
    head, _, tail = text.partition("@")
    own_policy, _, own_acceptance = tail.partition("@")
    if not own_policy:
        raise InputError(f"expected RUN.json@POLICY[@ACCEPTANCE], got {text!r}", field="observations")
    return Path(head), own_policy, own_acceptance or acceptance


def read_observations(paths: list[str | Path], *, policy: str = "ar", acceptance: str | None = None,
                      gpus: int = 1, prefill: str = "disaggregated") -> list[LoadPoint | StepPoint]:
    """Every observation of the given files (.csv, .yaml/.yml, .json = vllm bench serve result).
    `policy`, `acceptance` and `prefill` describe the vLLM runs, which do not record them; a run
    given as `RUN.json@POLICY[@ACCEPTANCE]` names its own policy and acceptance."""
    out: list[LoadPoint | StepPoint] = []
    for spec in paths:
        p, run_policy, run_acceptance = split_run_spec(spec, policy, acceptance)
        suffix = p.suffix.lower()
        if suffix == ".csv":
            out += read_csv(p)
        elif suffix in (".yaml", ".yml"):
            out += read_yaml_observations(p)
        elif suffix == ".json":
            out.append(read_vllm_result(p, run_policy, run_acceptance, gpus, prefill))
        else:
            raise InputError("unknown observation file type; use .csv, .yaml or a vllm bench "
                             "serve result .json", file=p)
    if not out:
        raise InputError("no observations given", field="observations")
    return out



# A mean is exact under Little's law; a percentile of tok/s/user can sit somewhat below the mean.
LITTLE_TOLERANCE = {"mean": 1.05}
PERCENTILE_TOLERANCE = 1.5


def check_physical(points: list[LoadPoint | StepPoint], gpus: int) -> None:
    """Refuse (InputError naming the point) observations no serving system can produce: with C
    users each receiving at most their tok/s/user, a replica of G GPUs emits at most
    C x tok/s/user / G tok/s per GPU (Little's law: every user decoding all the time; prefill or
    think time only lowers it). A mean tok/s/user may exceed it by 5% (rounding), a percentile by
    50% (the spread of per-user speeds)."""
    for p in points:
        if not isinstance(p, LoadPoint) or p.concurrency is None:
            continue
        bound = p.concurrency * p.tps_user / gpus
        tol = LITTLE_TOLERANCE.get(p.tps_stat, PERCENTILE_TOLERANCE)
        if p.throughput_tok_s_per_gpu > bound * tol:
            file, _, line = p.where.rpartition(":")
            raise InputError(
                f"{p.label or 'load point'}: {p.throughput_tok_s_per_gpu:,.0f} tok/s/GPU is impossible "
                f"for {p.concurrency} users at {p.tps_user:g} tok/s/user ({p.tps_stat}) on {gpus} GPU(s): "
                f"at most {bound:,.0f} (users x tok/s/user / GPUs, Little's law)",
                file=file or None, line=int(line) if line.isdigit() else None,
                field="throughput_tok_s_per_gpu")
