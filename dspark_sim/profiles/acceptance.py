"""Acceptance profile (formats.md): how a drafter's drafts survive verification, per task."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..fileio import LineMap, json_text, read_json, write_text_atomic
from .validate import FieldChecker

ACCEPTANCE_SCHEMA = "dspark-sim/acceptance/v1"
_KNOWN_KEYS = {"schema", "name", "target", "drafter", "drafter_kind", "gamma", "temperature",
               "default_task", "tasks"}


@dataclass
class EmpiricalRequest:
    """One measured request: drafts accepted per step under full-gamma verification."""

    accepted: np.ndarray                    # (steps,) ints in 0..gamma
    confidence: np.ndarray | None = None    # (steps, gamma) calibrated conditional confidences
    drafted: np.ndarray | None = None       # (steps,) drafts proposed, accepted..gamma; None = gamma
    request_id: str | None = None           # the trace request it was measured on (a replay of
                                            # that trace walks this record for that request)


@dataclass
class TaskAcceptance:
    """Acceptance behaviour of one task: parametric per-position rates or measured requests."""

    kind: str                                        # "parametric" | "empirical"
    position_accept: np.ndarray | None = None        # (gamma,) conditional acceptance
    requests: list[EmpiricalRequest] = field(default_factory=list)
    # parametric only: how much a step's confidences know about its run (0: every step's
    # confidences are the rates; sim/acceptance/sampler.py, "confidence_correlation")
    confidence_correlation: float = 0.0

    def conditional_accept(self, gamma: int) -> np.ndarray:
        """P(draft k accepted | drafts 1..k-1 accepted), k = 1..gamma (measured for empirical)."""
        if self.kind == "parametric":
            return np.asarray(self.position_accept, dtype=float)
        runs = np.concatenate([r.accepted for r in self.requests])
        reached = np.array([(runs >= k - 1).sum() for k in range(1, gamma + 1)], dtype=float)
        passed = np.array([(runs >= k).sum() for k in range(1, gamma + 1)], dtype=float)
        return np.divide(passed, reached, out=np.zeros(gamma), where=reached > 0)

    def mean_tau(self, gamma: int) -> float:
        """Expected tokens per step (accepted drafts + 1) when all gamma drafts are verified."""
        if self.kind == "empirical":
            return float(np.concatenate([r.accepted for r in self.requests]).mean() + 1.0)
        return float(1.0 + np.cumprod(self.position_accept[:gamma]).sum())


@dataclass
class AcceptanceProfile:
    """Per-task acceptance of one drafter against one target at one temperature and gamma."""

    name: str
    gamma: int
    tasks: dict[str, TaskAcceptance]
    default_task: str
    drafter_kind: str = ""
    drafter: str = ""
    target: str = ""
    temperature: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)

    def for_task(self, task: str) -> TaskAcceptance:
        """The task's acceptance, or the default task's when the profile lacks it."""
        return self.tasks.get(task) or self.tasks[self.default_task]

    # --- serialisation -------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        tasks: dict[str, Any] = {}
        for name, t in self.tasks.items():
            if t.kind == "parametric":
                tasks[name] = {"kind": "parametric",
                               "position_accept": [float(v) for v in t.position_accept]}
                if t.confidence_correlation:
                    tasks[name]["confidence_correlation"] = float(t.confidence_correlation)
            else:
                reqs = []
                for r in t.requests:
                    item: dict[str, Any] = {"accepted": [int(v) for v in r.accepted]}
                    if r.request_id is not None:
                        item = {"id": r.request_id, **item}
                    if r.drafted is not None:
                        item["drafted"] = [int(v) for v in r.drafted]
                    if r.confidence is not None:
                        item["confidence"] = np.round(r.confidence.astype(float), 5).tolist()
                    reqs.append(item)
                tasks[name] = {"kind": "empirical", "requests": reqs}
        out = {"schema": ACCEPTANCE_SCHEMA, "name": self.name, "target": self.target,
               "drafter": self.drafter, "drafter_kind": self.drafter_kind, "gamma": self.gamma,
               "temperature": self.temperature, "default_task": self.default_task, "tasks": tasks}
        out.update(self.extra)
        return out

    def save(self, path: str | Path) -> None:
        """Write the profile as JSON, atomically, one measured request per line."""
        write_text_atomic(path, dumps_profile(self.to_dict()))

    @classmethod
    def load(cls, path: str | Path) -> "AcceptanceProfile":
        """Read and validate an acceptance profile; errors name FILE:LINE and the field."""
        data, lines = read_json(path)
        return cls.from_dict(data, file=path, lines=lines)

    @classmethod
    def from_dict(cls, data: Any, file: str | Path | None = None,
                  lines: LineMap | None = None) -> "AcceptanceProfile":
        """Validate a parsed acceptance-profile document."""
        check = FieldChecker(file, lines)
        data = check.mapping(data, "(document)")
        check.schema(data, ACCEPTANCE_SCHEMA)
        name = check.string(check.require(data, "name"), "name")
        gamma = check.integer(check.require(data, "gamma"), "gamma", 1)
        temperature = check.number(data.get("temperature", 0.0), "temperature", 0.0)
        raw_tasks = check.mapping(check.require(data, "tasks"), "tasks")
        if not raw_tasks:
            raise check.fail("tasks", "must name at least one task")
        tasks = {str(k): _task(check, v, f"tasks.{k}", gamma) for k, v in raw_tasks.items()}
        default = data.get("default_task", next(iter(tasks)))
        if not isinstance(default, str):
            raise check.fail("default_task", f"expected a task name, got {default!r}")
        if default not in tasks:
            raise check.fail("default_task", f"names task {default!r}, which is not in 'tasks'")
        for key in ("target", "drafter", "drafter_kind"):
            if key in data and not isinstance(data[key], str):
                raise check.fail(key, "expected a string")
        extra = {k: v for k, v in data.items() if k not in _KNOWN_KEYS}
        return cls(name=name, gamma=gamma, tasks=tasks, default_task=default,
                   drafter_kind=data.get("drafter_kind", ""), drafter=data.get("drafter", ""),
                   target=data.get("target", ""), temperature=temperature, extra=extra)


def _task(check: FieldChecker, spec: Any, prefix: str, gamma: int) -> TaskAcceptance:
    spec = check.mapping(spec, prefix)
    kind = check.require(spec, "kind", prefix)
    if kind == "parametric":
        pa = check.number_list(check.require(spec, "position_accept", prefix),
                               f"{prefix}.position_accept", 0.0, maximum=1.0)
        if len(pa) != gamma:
            raise check.fail(f"{prefix}.position_accept", f"has {len(pa)} values, gamma is {gamma}")
        rho = check.number(spec.get("confidence_correlation", 0.0), f"{prefix}.confidence_correlation", 0.0)
        if rho >= 1.0:
            raise check.fail(f"{prefix}.confidence_correlation", f"must be in [0, 1), got {rho:g}")
        return TaskAcceptance("parametric", position_accept=np.array(pa), confidence_correlation=rho)
    if kind != "empirical":
        raise check.fail(f"{prefix}.kind", f"must be 'parametric' or 'empirical', got {kind!r}")
    raw = check.require(spec, "requests", prefix)
    if not isinstance(raw, list) or not raw:
        raise check.fail(f"{prefix}.requests", "expected a non-empty list of measured requests")
    requests, seen = [], {}
    for i, item in enumerate(raw):
        field_ = f"{prefix}.requests[{i}]"
        item = check.mapping(item, field_)
        accepted = check.require(item, "accepted", field_)
        if (not isinstance(accepted, list) or not accepted
                or any(isinstance(a, bool) or not isinstance(a, int) or not 0 <= a <= gamma
                       for a in accepted)):
            raise check.fail(f"{field_}.accepted", f"expected a non-empty list of integers 0..{gamma}")
        conf = None
        if item.get("confidence") is not None:
            try:
                conf = np.asarray(item["confidence"], dtype=float)
            except (TypeError, ValueError):
                raise check.fail(f"{field_}.confidence", "expected a list of lists of numbers") from None
            if conf.shape != (len(accepted), gamma):
                raise check.fail(f"{field_}.confidence",
                                 f"expected shape ({len(accepted)}, {gamma}) (steps x gamma), got {conf.shape}")
            if not np.all((conf >= 0) & (conf <= 1)):
                raise check.fail(f"{field_}.confidence", "values must lie in [0, 1]")
        drafted = _drafted(check, item.get("drafted"), accepted, f"{field_}.drafted", gamma)
        rid = item.get("id")
        if rid is not None:
            rid = check.string(rid, f"{field_}.id")
            if rid in seen:
                raise check.fail(f"{field_}.id", f"{rid!r} is also requests[{seen[rid]}]'s id")
            seen[rid] = i
        requests.append(EmpiricalRequest(np.asarray(accepted, dtype=np.int64), conf, drafted, rid))
    return TaskAcceptance("empirical", requests=requests)


def _drafted(check: FieldChecker, raw: Any, accepted: list[int], field_: str,
             gamma: int) -> np.ndarray | None:
    """Validate the optional per-step draft counts: accepted[t] <= drafted[t] <= gamma."""
    if raw is None:
        return None
    if (not isinstance(raw, list) or len(raw) != len(accepted)
            or any(isinstance(d, bool) or not isinstance(d, int) for d in raw)):
        raise check.fail(field_, f"expected a list of {len(accepted)} integers (one per step)")
    for t, (a, d) in enumerate(zip(accepted, raw)):
        if not a <= d <= gamma:
            raise check.fail(f"{field_}[{t}]", f"must lie in accepted[{t}]..gamma = {a}..{gamma}, got {d}")
    return np.asarray(raw, dtype=np.int64)


def dumps_profile(doc: dict[str, Any]) -> str:
    """JSON text of a profile document: header keys one per line, each measured request on one
    line, so that files stay diffable and error messages can point at a request's line."""
    lines = ["{"]
    items = list(doc.items())
    for i, (key, value) in enumerate(items):
        comma = "," if i < len(items) - 1 else ""
        if key != "tasks":
            lines.append(f"  {json_text(key)}: {json_text(value)}{comma}")
            continue
        lines.append('  "tasks": {')
        task_items = list(value.items())
        for j, (task, spec) in enumerate(task_items):
            tcomma = "," if j < len(task_items) - 1 else ""
            if spec.get("kind") != "empirical":
                lines.append(f"    {json_text(task)}: {json_text(spec)}{tcomma}")
                continue
            head = {k: v for k, v in spec.items() if k != "requests"}
            head_text = json_text(head)[1:-1]
            lines.append(f"    {json_text(task)}: {{{head_text}, \"requests\": [")
            reqs = spec["requests"]
            for k, req in enumerate(reqs):
                lines.append(f"      {json_text(req, separators=(',', ':'))}{',' if k < len(reqs) - 1 else ''}")
            lines.append(f"    ]}}{tcomma}")
        lines.append(f"  }}{comma}")
    lines.append("}")
    return "\n".join(lines) + "\n"
