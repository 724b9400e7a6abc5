"""Measure a drafter's acceptance per task on a real target, with plain decoding timed side by
side, and turn the records into an empirical acceptance profile (formats.md).

Records are appended to a JSONL checkpoint as each prompt finishes, so an interrupted run
resumes where it stopped when started again with the same settings.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import torch

from ..fileio import append_json_line, write_jsonl_atomic
from ..profiles import AcceptanceProfile, EmpiricalRequest, TaskAcceptance
from .drafters.base import Drafter
from .prompts import Prompt, encode_prompt
from .sampling import Sampling
from .speculate import plain_generate, speculative_generate
from .target import Target


@dataclass
class Settings:
    """What a measurement run depends on; a checkpoint is reused only if these match."""

    target: str
    drafter: str
    drafter_kind: str
    gamma: int
    temperature: float
    top_k: int
    top_p: float
    max_new_tokens: int
    seed: int
    chat: bool
    plain: bool


@dataclass
class Record:
    """One measured prompt."""

    task: str
    source: str
    prompt_tokens: int
    output_tokens: int
    accepted: list[int]                   # drafts accepted per step (full-gamma verification)
    verified: list[int]                   # drafts proposed and verified per step
    confidence: list[list[float]] = field(default_factory=list)
    finish: str = "length"
    spec_wall_s: float = 0.0
    plain_wall_s: float | None = None
    plain_output_tokens: int | None = None
    identical: bool | None = None         # greedy only: same tokens as plain decoding


def _request_generator(device: torch.device, seed: int, index: int, stream: int) -> torch.Generator:
    """An independent, reproducible random stream per request (and per spec/plain run)."""
    return torch.Generator(device=device).manual_seed((seed * 1_000_003 + index) * 2 + stream)


def measure_prompt(target: Target, drafter: Drafter, prompt: Prompt, index: int,
                   settings: Settings, sampling: Sampling) -> Record:
    """Run one prompt speculatively (and plainly when asked) and record the steps."""
    ids = encode_prompt(target.tokenizer, prompt.text, settings.chat)

    def spec():
        return speculative_generate(target, drafter, ids, max_new_tokens=settings.max_new_tokens,
                                    gamma=settings.gamma, sampling=sampling,
                                    generator=_request_generator(target.device, settings.seed, index, 0))

    def plain():
        return plain_generate(target, ids, max_new_tokens=settings.max_new_tokens, sampling=sampling,
                              generator=_request_generator(target.device, settings.seed, index, 1))

    # Alternate which runs first, so slow drift of a shared machine hits both sides alike.
    if settings.plain and index % 2:
        ar, sp = plain(), spec()
    else:
        sp = spec()
        ar = plain() if settings.plain else None
    rec = Record(task=prompt.task, source=prompt.source, prompt_tokens=len(ids),
                 output_tokens=len(sp.output_ids), accepted=sp.accepted, verified=sp.verified,
                 confidence=[[round(c, 5) for c in row] for row in sp.confidence],
                 finish=sp.finish, spec_wall_s=sp.wall_s)
    if ar is not None:
        rec.plain_wall_s, rec.plain_output_tokens = ar.wall_s, len(ar.output_ids)
        if sampling.greedy:
            rec.identical = ar.output_ids == sp.output_ids
    return rec


def _read_checkpoint(path: Path, settings: Settings) -> list[Record]:
    """Records of an earlier run with the same settings (a torn last line is dropped)."""
    if not path.is_file():
        return []
    lines = path.read_text(encoding="utf-8").splitlines()
    try:
        if not lines or json.loads(lines[0]).get("settings") != asdict(settings):
            return []
    except json.JSONDecodeError:
        return []
    records = []
    for line in lines[1:]:
        try:
            records.append(Record(**json.loads(line)))
        except (json.JSONDecodeError, TypeError):
            break
    return records


def checkpoint_note(path: Path, settings: Settings) -> str | None:
    """What an existing record file means for this run: resumed (same settings) or replaced
    (other settings); None when there is none."""
    if not path.is_file():
        return None
    done = _read_checkpoint(path, settings)
    if done:
        return f"resuming: {len(done)} prompts already measured in {path}"
    lines = sum(1 for line in path.read_text(encoding="utf-8").splitlines() if line.strip())
    return (f"note: {path} holds {max(lines - 1, 0)} records measured with other settings (or "
            f"unreadable); they are replaced")


def run_measurement(target: Target, drafter: Drafter, tasks: dict[str, list[Prompt]],
                    settings: Settings, checkpoint: Path,
                    on_record: Callable[[Record], None] | None = None) -> list[Record]:
    """Measure every prompt of every task, resuming from `checkpoint` and appending to it."""
    sampling = Sampling(settings.temperature, settings.top_k, settings.top_p)
    done = _read_checkpoint(checkpoint, settings)
    # rewrite (drops a torn tail), then append one record per finished prompt
    write_jsonl_atomic(checkpoint, [{"settings": asdict(settings)}] + [asdict(r) for r in done])
    seen = {(r.task, r.source) for r in done}
    records = list(done)
    for rec in done:
        if on_record:
            on_record(rec)
    if len(done) < sum(map(len, tasks.values())):
        _warm_up(target, drafter, settings, sampling)
    for index, prompt in enumerate(_all_prompts(tasks)):
        if (prompt.task, prompt.source) in seen:
            continue
        rec = measure_prompt(target, drafter, prompt, index, settings, sampling)
        records.append(rec)
        append_json_line(checkpoint, asdict(rec))
        if on_record:
            on_record(rec)
    return records


def _all_prompts(tasks: dict[str, list[Prompt]]) -> Iterator[Prompt]:
    for prompts in tasks.values():
        yield from prompts


def _warm_up(target: Target, drafter: Drafter, settings: Settings, sampling: Sampling) -> None:
    """One short untimed run, so allocator and kernel warm-up do not land on the first prompt."""
    ids = encode_prompt(target.tokenizer, "Hello", settings.chat)
    speculative_generate(target, drafter, ids, max_new_tokens=8, gamma=settings.gamma,
                         sampling=sampling, generator=torch.Generator(device=target.device))


def task_calibration(records: list[Record], gamma: int) -> dict[str, Any] | None:
    """Calibration of the confidences the drafter reported on one task's records, per position
    with sample counts and bootstrap intervals over requests (calibration/positions.py); None
    when the drafter reported none."""
    from ..calibration.positions import request_calibration

    return request_calibration([(r.confidence, r.accepted, r.verified) for r in records], gamma)


def build_profile(records: list[Record], settings: Settings, name: str,
                  default_task: str | None = None, extra: dict[str, Any] | None = None) -> AcceptanceProfile:
    """The empirical acceptance profile of the records: per task, per request, per step."""
    tasks: dict[str, TaskAcceptance] = {}
    for rec in records:
        if not rec.accepted:           # ended at the prefill token: no verification step
            continue
        conf = np.asarray(rec.confidence, dtype=float) if rec.confidence else None
        if conf is not None and conf.shape != (len(rec.accepted), settings.gamma):
            conf = None                # the drafter gave fewer than gamma confidences somewhere
        req = EmpiricalRequest(np.asarray(rec.accepted, dtype=np.int64), conf)
        tasks.setdefault(rec.task, TaskAcceptance("empirical")).requests.append(req)
    if not tasks:
        raise ValueError("no prompt produced a verification step; nothing to profile")
    default = default_task if default_task in tasks else ("chat" if "chat" in tasks else next(iter(tasks)))
    extra = dict(extra or {})
    calibration = {}
    for task in tasks:
        cal = task_calibration([r for r in records if r.task == task], settings.gamma)
        if cal is not None:
            calibration[task] = {"headline": cal["headline"], "positions": cal["positions"]}
    if calibration:
        from ..calibration.positions import METRIC
        extra["calibration"] = {"metric": METRIC, "temperature": settings.temperature,
                                "tasks": calibration}
    return AcceptanceProfile(name=name, gamma=settings.gamma, tasks=tasks, default_task=default,
                             drafter_kind=settings.drafter_kind, drafter=settings.drafter,
                             target=settings.target, temperature=settings.temperature,
                             extra=extra)
