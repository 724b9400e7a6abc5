"""Per-request spec-decode metrics (vLLM responses, AIPerf records) -> measured request steps.

Inputs are JSON Lines, one request per line, of either
- OpenAI-compatible responses of vLLM 0.32 started with `--per-request-spec-decode-metrics
  detailed` (a completions or chat body, or the final usage chunk of a stream): `usage.
  completion_tokens` and `metrics.speculative_decoding.{num_spec_tokens, per_step_accepted,
  per_step_drafted, ...}` (vllm/v1/metrics/stats.py `RequestSpecDecodeMetrics.to_dict`); or
- AIPerf 0.13 `profile_export.jsonl` records: `metadata`, `metrics` and `spec_decode_acceptance`
  (the same per-step arrays plus `completion_tokens`).

vLLM records only the verify steps that had drafts (an ngram drafter proposes nothing when it
finds no match). A request of C completion tokens took C - 1 decode steps after its prefill; the
N0 = (C - 1) - sum(accepted + 1) steps it did not report emitted one token with no drafts.
vLLM does not say where they fell, so they are placed evenly among the reported steps (see
`interleave`). The final step may emit fewer than accepted + 1 tokens when the request stops
inside it (max_tokens, EOS: vLLM counts acceptance before it trims the step's tokens).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError
from ..fileio import read_json
from ..traces.schema import iter_json_lines

AIPERF, RESPONSE = "aiperf", "response"
_DEFAULT_KEY = {AIPERF: "metadata.conversation_id", RESPONSE: "id"}


@dataclass
class RequestSteps:
    """One request's reported verify steps, its token count, task, and where it was read."""

    file: str
    line: int
    task: str
    completion_tokens: int
    gamma: int | None                     # None: AIPerf record without spec-decode data
    spec_accepted: list[int] = field(default_factory=list)
    spec_drafted: list[int] = field(default_factory=list)
    token_field: str = "completion_tokens"
    gamma_field: str = "num_spec_tokens"
    key: str | None = None                # the record's request key (AIPerf: its conversation id)

    def steps(self) -> tuple[np.ndarray, np.ndarray]:
        """(accepted, drafted) per decode step, the no-draft steps placed in (see `interleave`)."""
        try:
            return interleave(self.spec_accepted, self.spec_drafted, self.completion_tokens)
        except ValueError as exc:
            raise InputError(str(exc), file=self.file, line=self.line, field=self.token_field) from None


def interleave(spec_accepted: list[int], spec_drafted: list[int],
               completion_tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """All C - 1 decode steps: the reported ones in order, the N0 no-draft ones spread evenly.

    No-draft step i (0..N0-1) of n = S + N0 steps goes to position floor((i + 1/2) n / N0),
    the middle of the i-th of N0 equal blocks; the S reported steps fill the rest in order.
    When the tokens fall short of sum(accepted + 1) by at most the last step's accepted drafts,
    the request stopped inside its last step: N0 = 0 and the counts are kept as verified.
    """
    s = len(spec_accepted)
    emitted = sum(spec_accepted) + s
    missing = (completion_tokens - 1) - emitted
    if missing < 0:
        if s == 0 or -missing > spec_accepted[-1]:
            raise ValueError(f"{completion_tokens} completion tokens cannot hold the reported steps: "
                             f"1 (prefill) + sum(accepted + 1) = {1 + emitted}, and a stop inside "
                             f"the last step can leave out at most {spec_accepted[-1] if s else 0}")
        missing = 0
    n = s + missing
    accepted = np.zeros(n, dtype=np.int64)
    drafted = np.zeros(n, dtype=np.int64)
    spec = np.ones(n, dtype=bool)
    if missing:
        spec[((2 * np.arange(missing) + 1) * n) // (2 * missing)] = False
    accepted[spec] = spec_accepted
    drafted[spec] = spec_drafted
    return accepted, drafted


# --- task of a record ---------------------------------------------------------------------

def lookup(obj: Any, path: str) -> Any:
    """The value at a dotted path (`metadata.conversation_id`, `a.0.b`); KeyError if absent."""
    for part in path.split("."):
        if isinstance(obj, dict) and part in obj:
            obj = obj[part]
        elif isinstance(obj, list) and part.isdigit() and int(part) < len(obj):
            obj = obj[int(part)]
        else:
            raise KeyError(path)
    return obj


@dataclass
class TaskRule:
    """How a record's task is found: one name, a field, or a field looked up in a map."""

    name: str | None = None               # --task: every record
    path: str | None = None               # --task-field: the task (or, with a map, its key)
    mapping: dict[str, str] | None = None  # --task-map contents
    map_file: str | None = None

    def task_of(self, rec: dict, source: str, file: str, line: int) -> str:
        """The task of one record; InputError naming the record's line when it has none."""
        if self.name is not None:
            return self.name
        path = self.path or (_DEFAULT_KEY[source] if self.mapping is not None else "task")
        try:
            value = lookup(rec, path)
        except KeyError:
            if self.path is None and self.mapping is None:
                return "default"
            raise InputError("record has no such field (for its task)", file=file, line=line,
                             field=path) from None
        if isinstance(value, bool) or not isinstance(value, (str, int)) or value == "":
            raise InputError(f"expected a string naming the task, got {value!r}", file=file,
                             line=line, field=path)
        if self.mapping is None:
            return str(value)
        if str(value) not in self.mapping:
            raise InputError(f"{value!r} is not in the task map {self.map_file}", file=file,
                             line=line, field=path)
        return self.mapping[str(value)]

    def key_of(self, rec: dict, source: str) -> str | None:
        """The record's request key (the field a task map is keyed by; AIPerf: the conversation
        id, which a trace replay sets to the trace request's id), None when it has none."""
        try:
            return _key_text(lookup(rec, self.path if self.mapping is not None and self.path
                                    else _DEFAULT_KEY[source]))
        except KeyError:
            return None


def _key_text(value: Any) -> str | None:
    return str(value) if isinstance(value, (str, int)) and not isinstance(value, bool) and value != "" else None


def load_task_map(path: str | Path) -> dict[str, str]:
    """A task map: a JSON object of record key -> task name."""
    data, lines = read_json(path)
    if not isinstance(data, dict) or not data:
        raise InputError("expected a non-empty JSON object of key -> task", file=path,
                         line=lines.line("(document)"))
    for key, task in data.items():
        if not isinstance(task, str) or not task:
            raise InputError("expected a non-empty task name", file=path, line=lines.line(key),
                             field=key)
    return dict(data)


# --- reading records ----------------------------------------------------------------------

@dataclass
class RecordsRead:
    """Requests read from one or more files, and what was left out."""

    requests: list[RequestSteps] = field(default_factory=list)
    failed: int = 0          # AIPerf records of failed or cancelled requests
    models: set[str] = field(default_factory=set)


def read_records(path: str | Path, rule: TaskRule, into: RecordsRead | None = None) -> RecordsRead:
    """Read one JSONL file of vLLM responses or AIPerf records; any defect names FILE:LINE."""
    out = into if into is not None else RecordsRead()
    file = str(path)
    found = False
    for line, rec in iter_json_lines(path, "records file"):
        found = True
        if "metadata" in rec and "metrics" in rec and "choices" not in rec:
            meta = rec["metadata"] if isinstance(rec["metadata"], dict) else {}
            if rec.get("error") or meta.get("was_cancelled"):
                out.failed += 1
                continue
            req = _aiperf(rec, file, line)
            source = AIPERF
        elif "choices" in rec or "usage" in rec:
            req = _response(rec, file, line)
            source = RESPONSE
            if isinstance(rec.get("model"), str):
                out.models.add(rec["model"])
        else:
            raise InputError("neither a vLLM response (choices, usage) nor an AIPerf record "
                             "(metadata, metrics)", file=file, line=line)
        req.task = rule.task_of(rec, source, file, line)
        req.key = rule.key_of(rec, source)
        out.requests.append(req)
    if not found:
        raise InputError("no records (empty file)", file=file)
    return out


def _count(value: Any, file: str, line: int, field_: str, minimum: int = 0) -> int:
    """An integer >= minimum, else InputError naming the field."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise InputError(f"expected an integer >= {minimum}, got {value!r}", file=file, line=line,
                         field=field_)
    return value


def _get(obj: Any, key: str, file: str, line: int, prefix: str) -> Any:
    """obj[key], else InputError naming prefix.key as missing."""
    if not isinstance(obj, dict):
        raise InputError(f"expected an object, got {type(obj).__name__}", file=file, line=line,
                         field=prefix)
    if obj.get(key) is None:
        raise InputError("missing field", file=file, line=line, field=f"{prefix}.{key}" if prefix else key)
    return obj[key]


def _response(rec: dict, file: str, line: int) -> RequestSteps:
    """A vLLM completions/chat response (or final usage chunk) with per-request metrics."""
    usage = _get(rec, "usage", file, line, "")
    tokens = _count(_get(usage, "completion_tokens", file, line, "usage"), file, line,
                    "usage.completion_tokens")
    metrics = rec.get("metrics")
    if not isinstance(metrics, dict) or metrics.get("speculative_decoding") is None:
        raise InputError("missing field (start vLLM with --per-request-spec-decode-metrics "
                         "detailed; n must be 1)", file=file, line=line,
                         field="metrics.speculative_decoding")
    return _spec_block(metrics["speculative_decoding"], tokens, file, line,
                       "metrics.speculative_decoding", "usage.completion_tokens")


def _aiperf(rec: dict, file: str, line: int) -> RequestSteps:
    """An AIPerf profile_export.jsonl record; without `spec_decode_acceptance` it had no verify steps."""
    block = rec.get("spec_decode_acceptance")
    prefix = "spec_decode_acceptance"
    if block is not None and isinstance(block, dict) and block.get("completion_tokens") is not None:
        tokens_field = f"{prefix}.completion_tokens"
        tokens = _count(block["completion_tokens"], file, line, tokens_field)
    else:
        tokens_field = "metrics.usage_completion_tokens.value"
        try:
            value = lookup(rec, tokens_field)
        except KeyError:
            raise InputError("missing field (no completion token count in the record)", file=file,
                             line=line, field=f"{prefix}.completion_tokens") from None
        tokens = _count(value, file, line, tokens_field)
    if block is None:
        return RequestSteps(file, line, "", tokens, None, token_field=tokens_field)
    return _spec_block(block, tokens, file, line, prefix, tokens_field)


def _spec_block(block: Any, tokens: int, file: str, line: int, prefix: str,
                tokens_field: str) -> RequestSteps:
    """Validate one request's spec-decode metrics (vLLM's `SpeculativeDecodingMetrics` fields)."""
    gamma = _count(_get(block, "num_spec_tokens", file, line, prefix), file, line,
                   f"{prefix}.num_spec_tokens", 1)
    steps = block.get("num_spec_steps")
    if steps is not None:
        steps = _count(steps, file, line, f"{prefix}.num_spec_steps")
    acc, dr = block.get("per_step_accepted"), block.get("per_step_drafted")
    if acc is None and dr is None:
        if steps:
            raise InputError("missing field: per-step counts are reported only with "
                             "--per-request-spec-decode-metrics detailed", file=file, line=line,
                             field=f"{prefix}.per_step_accepted")
        acc, dr = [], []
    for key, value in (("per_step_accepted", acc), ("per_step_drafted", dr)):
        if not isinstance(value, list):
            raise InputError("missing field, or not a list" if value is None else "expected a list",
                             file=file, line=line, field=f"{prefix}.{key}")
    if len(acc) != len(dr):
        raise InputError(f"has {len(dr)} steps, per_step_accepted {len(acc)}", file=file,
                         line=line, field=f"{prefix}.per_step_drafted")
    if steps is not None and len(acc) != steps:
        raise InputError(f"is {steps}, but the per-step arrays have {len(acc)} steps", file=file,
                         line=line, field=f"{prefix}.num_spec_steps")
    for t, (a, d) in enumerate(zip(acc, dr)):
        _count(a, file, line, f"{prefix}.per_step_accepted[{t}]")
        _count(d, file, line, f"{prefix}.per_step_drafted[{t}]")
        if not a <= d <= gamma:
            raise InputError(f"step {t} accepted {a} of {d} drafts with num_spec_tokens {gamma}: "
                             "expected accepted <= drafted <= num_spec_tokens", file=file,
                             line=line, field=f"{prefix}.per_step_accepted[{t}]")
    for key, total in (("num_accepted_draft_tokens", sum(acc)), ("num_draft_tokens", sum(dr))):
        if block.get(key) is not None and block[key] != total:
            raise InputError(f"is {block[key]!r}, but the per-step counts sum to {total}",
                             file=file, line=line, field=f"{prefix}.{key}")
    return RequestSteps(file, line, "", tokens, gamma, list(acc), list(dr), tokens_field,
                        f"{prefix}.num_spec_tokens")
