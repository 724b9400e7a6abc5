"""What vLLM measured -> an acceptance profile (formats.md), per task, with a report of each task.

Prometheus scrapes give vLLM's aggregate tallies -> a parametric profile (one task). Per-request
records give every request's steps -> an empirical profile per task (or, with kind
"parametric", the same tallies vLLM would have counted, per task).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError
from ..fileio import read_text
from ..profiles.acceptance import AcceptanceProfile, EmpiricalRequest, TaskAcceptance
from .prometheus import scrape_counts
from .records import RecordsRead, TaskRule, read_records
from .spec_counts import SpecDecodeCounts

PROMETHEUS, RECORDS = "prometheus", "records"
KINDS = ("auto", "empirical", "parametric")


@dataclass
class TaskReport:
    """One task's import: requests, decode steps, steps with drafts, and vLLM's tallies."""

    task: str
    requests: int
    steps: int | None          # all decode steps (None from Prometheus: not reported)
    counts: SpecDecodeCounts

    def summary(self) -> dict[str, Any]:
        """The report as kept in the profile's `vllm.tasks`."""
        head: dict[str, Any] = {"requests": self.requests}
        if self.steps is not None:
            head["steps"] = self.steps
        return {**head, **self.counts.summary()}


@dataclass
class ImportResult:
    """The profile to write and what to tell the user."""

    profile: AcceptanceProfile
    reports: list[TaskReport]
    notes: list[str] = field(default_factory=list)


def detect(path: str | Path) -> str:
    """RECORDS when the first non-blank line looks like JSON, else PROMETHEUS."""
    for raw in read_text(path).splitlines():
        if raw.strip():
            return RECORDS if raw.lstrip().startswith("{") else PROMETHEUS
    raise InputError("empty file", file=path)


def import_vllm(files: list[Path], name: str, kind: str = "auto", rule: TaskRule | None = None,
                before: list[Path] | None = None, model_name: str | None = None,
                drafter_kind: str = "", keep_ids: bool = False) -> ImportResult:
    """Read vLLM scrapes or per-request records into an acceptance profile (nothing is written).
    `keep_ids`: each empirical request keeps its record's key as `id` (records of a trace
    replay, keyed by the trace's request ids), so a replay of that trace walks each request's
    own measured steps."""
    if kind not in KINDS:
        raise InputError(f"expected one of {', '.join(KINDS)}, got {kind!r}", field="kind")
    if not files:
        raise InputError("give at least one FILE", field="FILE")
    rule = rule or TaskRule()
    detected = {str(f): detect(f) for f in files}
    if len(set(detected.values())) > 1:
        raise InputError(f"mixes Prometheus scrapes and JSONL records: {detected}", field="FILE")
    source = next(iter(detected.values()))
    before = list(before or [])
    if source == PROMETHEUS:
        if kind == "empirical":
            raise InputError("a Prometheus scrape holds only totals; an empirical profile needs "
                             "per-request records (JSONL)", field="kind")
        if rule.path is not None or rule.mapping is not None:
            raise InputError("a Prometheus scrape has no per-request tasks; use --task NAME",
                             field="task-field" if rule.path else "task-map")
        return _from_scrapes(files, before, name, rule.name or "default", model_name, drafter_kind)
    if before:
        raise InputError("--before differences Prometheus scrapes, not JSONL records", field="before")
    return _from_records(files, name, kind, rule, drafter_kind, keep_ids)


def _from_scrapes(files: list[Path], before: list[Path], name: str, task: str,
                  model_name: str | None, drafter_kind: str) -> ImportResult:
    """Sum the (differenced) tallies of each scrape into one parametric task."""
    if before and len(before) != len(files):
        raise InputError(f"give one --before per FILE ({len(files)}), got {len(before)}",
                         field="before")
    total: SpecDecodeCounts | None = None
    model = model_name
    for i, path in enumerate(files):
        counts, model = scrape_counts(path, before[i] if before else None, model_name)
        if total is not None and counts.gamma != total.gamma:
            raise InputError(f"{counts.gamma} draft positions; {files[0]} has {total.gamma}",
                             file=path, field="vllm:spec_decode_num_accepted_tokens_per_pos_total")
        total = counts if total is None else total.add(counts)
    assert total is not None
    report = TaskReport(task, 0, None, total)
    profile = AcceptanceProfile(name=name, gamma=total.gamma, tasks={task: total.parametric()},
                                default_task=task, drafter_kind=drafter_kind, target=model or "")
    profile.extra["vllm"] = {"source": PROMETHEUS, "files": [str(f) for f in files],
                             "before": [str(b) for b in before], "model_name": model,
                             "tasks": {task: _scrape_summary(report)}}
    notes = [] if before else ["no --before scrape: the counts are everything since the server started"]
    return ImportResult(profile, [report], notes)


def _scrape_summary(report: TaskReport) -> dict[str, Any]:
    """A Prometheus task's summary (no request count: the counters do not give one)."""
    out = report.summary()
    out.pop("requests")
    return out


def _from_records(files: list[Path], name: str, kind: str, rule: TaskRule,
                  drafter_kind: str, keep_ids: bool = False) -> ImportResult:
    """Every request's steps, per task: empirical requests, or their tallies as a parametric task."""
    read = RecordsRead()
    for path in files:
        read_records(path, rule, read)
    gamma = _common_gamma(read)
    by_task: dict[str, list[EmpiricalRequest]] = {}
    counts: dict[str, SpecDecodeCounts] = {}
    steps: Counter[str] = Counter()
    short = 0
    keys = Counter(r.key for r in read.requests) if keep_ids else Counter()
    if None in keys or any(n > 1 for n in keys.values()):
        raise InputError("records without a key, or two with the same one: no request ids to keep",
                         file=files[0])
    for req in read.requests:
        accepted, drafted = req.steps()
        tally = counts.setdefault(req.task, SpecDecodeCounts(gamma))
        for a, d in zip(req.spec_accepted, req.spec_drafted):
            tally.observe(d, a)
        if len(accepted) == 0:
            short += 1          # one token, from prefill: no decode step to replay
            continue
        steps[req.task] += len(accepted)
        by_task.setdefault(req.task, []).append(
            EmpiricalRequest(accepted, None, None if np.all(drafted == gamma) else drafted,
                             req.key if keep_ids else None))
    if not by_task:
        raise InputError("no request took a decode step (every request has <= 1 completion token)",
                         file=files[0])
    if kind == "parametric":
        empty = [t for t, c in counts.items() if c.num_drafts == 0]
        if empty:
            raise InputError(f"tasks {', '.join(sorted(empty))} have no verify step with drafts: "
                             "no per-position acceptance to estimate", file=files[0], field="kind")
        tasks = {t: counts[t].parametric() for t in sorted(counts)}
    else:
        tasks = {t: TaskAcceptance("empirical", requests=by_task[t]) for t in sorted(by_task)}
    sizes = Counter({t: len(by_task.get(t, [])) for t in tasks})
    default = sorted(sizes, key=lambda t: (-sizes[t], t))[0]
    reports = [TaskReport(t, sizes[t], steps[t], counts[t]) for t in tasks]
    profile = AcceptanceProfile(name=name, gamma=gamma, tasks=tasks, default_task=default,
                                drafter_kind=drafter_kind,
                                target=next(iter(read.models)) if len(read.models) == 1 else "")
    profile.extra["vllm"] = {"source": RECORDS, "files": [str(f) for f in files],
                             "no_draft_steps": "placed evenly among the reported steps",
                             "tasks": {r.task: r.summary() for r in reports}}
    notes = []
    if read.failed:
        notes.append(f"skipped {read.failed} AIPerf records of failed or cancelled requests")
    if short:
        notes.append(f"skipped {short} requests with a single completion token (no decode step)")
    return ImportResult(profile, reports, notes)


def _common_gamma(read: RecordsRead) -> int:
    """The one num_spec_tokens of all records; InputError naming the first record that differs."""
    gamma = None
    for req in read.requests:
        if req.gamma is None:
            continue
        if gamma is None:
            gamma, first = req.gamma, req
        elif req.gamma != gamma:
            raise InputError(f"num_spec_tokens {req.gamma}, but {first.file}:{first.line} has {gamma}",
                             file=req.file, line=req.line, field=req.gamma_field)
    if gamma is None:
        raise InputError("no record carries spec-decode metrics (was speculative decoding on, "
                         "and --per-request-spec-decode-metrics detailed?)",
                         file=read.requests[0].file if read.requests else None)
    return gamma
