"""vLLM's speculative configuration as the simulator reads and writes it.

The batch-size schedule is vLLM's `num_speculative_tokens_per_batch_size` (vLLM 0.32,
`vllm/config/speculative.py`, `vllm/v1/spec_decode/dynamic/utils.py`): a list of inclusive
ranges `[range_start, range_end, num_speculative_tokens]`, sorted, non-overlapping, the first
starting at 1. A batch size in a gap takes the K of the range before it, one past the last
range takes the last K, and every K is capped at `num_speculative_tokens`. vLLM's scheduler
looks the K up at the number of requests scheduled in a step, and the drafter then proposes
that many drafts, which the next step verifies.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..fileio import read_text

SCHEDULE_KEY = "num_speculative_tokens_per_batch_size"
_FIELD = "bs-schedule"


@dataclass(frozen=True)
class BatchSchedule:
    """A validated batch-size schedule; `k_at(batch)` is vLLM's dense lookup."""

    ranges: tuple[tuple[int, int, int], ...]
    num_speculative_tokens: int

    def k_at(self, batch: int) -> int:
        """Speculative tokens at `batch` scheduled requests (batch >= 1)."""
        k = self.ranges[0][2]
        for start, _, value in self.ranges:
            if start > batch:
                break
            k = value
        return min(k, self.num_speculative_tokens)

    def to_json(self) -> list[list[int]]:
        return [list(r) for r in self.ranges]


def _entry_lines(text: str, depth: int) -> list[int]:
    """Line numbers of the '[' that open lists at nesting `depth` (outside strings)."""
    lines, level, line, in_str, escape = [], 0, 1, False, False
    for ch in text:
        if ch == "\n":
            line += 1
        if in_str:
            escape = not escape and ch == "\\"
            if ch == '"' and not escape:
                in_str = False
            continue
        if ch == '"':
            in_str = True
        elif ch in "[{":
            if ch == "[" and level == depth:
                lines.append(line)
            level += 1
        elif ch in "]}":
            level -= 1
    return lines


def _is_json(text: str) -> bool:
    return text.lstrip().startswith(("[", "{"))


def schedule_source(text_or_path: str) -> str:
    """The schedule's JSON text: the argument itself, or the file it names."""
    return text_or_path if _is_json(text_or_path) else read_text(text_or_path)


def parse_schedule(text_or_path: str, gamma: int) -> BatchSchedule:
    """Read a schedule given as JSON text or a JSON file: vLLM's list of ranges, or a whole
    speculative-config object holding `num_speculative_tokens_per_batch_size` (and optionally
    `num_speculative_tokens`). K is capped at the drafter's depth `gamma`. Bad input raises
    InputError naming the file, line and field."""
    path = Path(text_or_path)
    is_file = not _is_json(text_or_path) and path.is_file()
    if not is_file and not _is_json(text_or_path):
        raise InputError(f"{text_or_path!r} is neither JSON nor an existing file", field=_FIELD)
    text = read_text(path) if is_file else text_or_path
    where = str(path) if is_file else "--bs-schedule"
    try:
        doc: Any = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"not valid JSON: {exc.msg}", file=where, line=exc.lineno, field=_FIELD) from None
    except RecursionError:
        raise InputError("not valid JSON: nested too deeply", file=where, line=1, field=_FIELD) from None
    limit, depth = gamma, 1
    if isinstance(doc, dict):
        field = SCHEDULE_KEY
        if SCHEDULE_KEY not in doc:
            raise InputError(f"missing '{SCHEDULE_KEY}'", file=where, line=1, field=SCHEDULE_KEY)
        if "num_speculative_tokens" in doc:
            n = doc["num_speculative_tokens"]
            if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= gamma:
                raise InputError(f"must be an integer in 1..{gamma} (the drafter's depth), got {n!r}",
                                 file=where, line=1, field="num_speculative_tokens")
            limit = n
        doc, depth = doc[SCHEDULE_KEY], 2
    else:
        field = _FIELD
    lines = _entry_lines(text, depth)
    if not isinstance(doc, list) or not doc:
        raise InputError("expected a non-empty list of [range_start, range_end, "
                         "num_speculative_tokens]", file=where, line=1, field=field)
    ranges = []
    for i, entry in enumerate(doc):
        line = lines[i] if i < len(lines) else None

        def bad(msg: str, i=i, line=line) -> InputError:
            return InputError(msg, file=where, line=line, field=f"{field}[{i}]")
        if not isinstance(entry, list) or len(entry) != 3 or \
                any(isinstance(v, bool) or not isinstance(v, int) for v in entry):
            raise bad(f"expected [range_start, range_end, num_speculative_tokens] integers, got {entry!r}")
        start, end, k = entry
        if start <= 0 or end <= 0 or start > end:
            raise bad(f"batch-size range ({start}, {end}) must be positive with start <= end")
        if k < 0:
            raise bad(f"num_speculative_tokens must be >= 0, got {k}")
        ranges.append((start, end, k))
    order = sorted(range(len(ranges)), key=lambda j: ranges[j][0])
    previous_end = 0
    for j in order:
        start, end, _ = ranges[j]
        if start <= previous_end:
            raise InputError("batch-size ranges must not overlap", file=where,
                             line=lines[j] if j < len(lines) else None, field=f"{field}[{j}]")
        previous_end = end
    if ranges[order[0]][0] != 1:
        raise InputError("the first batch-size range must start at 1", file=where,
                         line=lines[order[0]] if order[0] < len(lines) else None,
                         field=f"{field}[{order[0]}]")
    return BatchSchedule(tuple(ranges[j] for j in order), limit)


def speculative_config(method: str, num_speculative_tokens: int,
                       schedule: BatchSchedule | None = None, adaptive: bool = False,
                       model: str | None = None, **options: Any) -> dict[str, Any]:
    """The `--speculative-config` JSON object vLLM takes for these settings (`model`: the draft
    checkpoint; `options`: further SpeculativeConfig fields, e.g. prompt_lookup_min)."""
    out: dict[str, Any] = {"method": method}
    if model:
        out["model"] = model
    out["num_speculative_tokens"] = int(num_speculative_tokens)
    out.update(options)
    if schedule is not None:
        out[SCHEDULE_KEY] = schedule.to_json()
    if adaptive:
        out["enable_adaptive_verification"] = True
    return out


# the acceptance profile's drafter kind -> vLLM's `method`
VLLM_METHODS = {"dspark": "dspark", "mtp1": "mtp", "mtp": "mtp", "eagle3": "eagle3",
                "eagle": "eagle", "dflash": "dflash", "ngram": "ngram"}


def vllm_method(drafter_kind: str | None) -> str:
    """vLLM's speculative method for a drafter kind (unknown kinds: 'draft_model')."""
    return VLLM_METHODS.get(drafter_kind or "", "draft_model")
