"""Prometheus text exposition -> vLLM's spec-decode counters (summed over engines, differenced).

A small strict reader of the text format (version 0.0.4, as `prometheus_client` writes it and
vLLM serves it at /metrics): every line is blank, a `#` comment (`# HELP`, `# TYPE`), or one
sample `name{label="value",...} value [timestamp]`; a file that does not end with a newline
was cut off. Anything else is an InputError naming FILE:LINE.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError
from ..fileio import read_text
from .spec_counts import SpecDecodeCounts

_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\\n]|\\.)*)"\s*')
_VALUE = re.compile(r"[+-]?(?:(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?|[iI][nN][fF]|[nN][aA][nN])")
_TIMESTAMP = re.compile(r"-?\d+")
_ESCAPES = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}
_TYPES = {"counter", "gauge", "histogram", "summary", "untyped", "unknown", "info", "stateset",
          "gaugehistogram"}

PREFIX = "vllm:spec_decode_"
COUNTERS = {"num_drafts": "vllm:spec_decode_num_drafts_total",
            "num_draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
            "num_accepted_tokens": "vllm:spec_decode_num_accepted_tokens_total"}
PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"


@dataclass(frozen=True)
class Sample:
    """One sample line: metric name, labels, value, and where it was read."""

    name: str
    labels: dict[str, str]
    value: float
    file: str
    line: int

    def series(self) -> str:
        """The series in PromQL notation, for messages: name{a="x",b="y"}."""
        inner = ",".join(f'{k}="{v}"' for k, v in sorted(self.labels.items()))
        return f"{self.name}{{{inner}}}" if inner else self.name


def parse_exposition(text: str, file: str | Path) -> list[Sample]:
    """All samples of a Prometheus text exposition; InputError naming FILE:LINE on any defect."""
    file = str(file)
    lines = text.split("\n")
    if lines[-1] != "":
        raise InputError("file ends inside a line (truncated scrape?)", file=file, line=len(lines))
    samples: list[Sample] = []
    seen: dict[tuple[str, tuple[tuple[str, str], ...]], int] = {}
    ended = False
    for number, raw in enumerate(lines[:-1], 1):
        line = raw.rstrip("\r")
        if not line.strip():
            continue
        if ended:
            raise InputError("content after '# EOF'", file=file, line=number)
        if line.startswith("#"):
            ended = _comment(line, file, number)
            continue
        sample = _sample(line, file, number)
        key = (sample.name, tuple(sorted(sample.labels.items())))
        if key in seen:
            raise InputError(f"duplicate series (first on line {seen[key]})", file=file,
                             line=number, field=sample.series())
        seen[key] = number
        samples.append(sample)
    if not samples:
        raise InputError("no samples: empty or not a Prometheus text exposition", file=file)
    return samples


def _comment(line: str, file: str, number: int) -> bool:
    """Check a `#` line; True when it is OpenMetrics' `# EOF` terminator."""
    parts = line[1:].split(None, 3)
    if parts[:1] == ["EOF"] and len(parts) == 1:
        return True
    if parts[:1] == ["TYPE"]:
        if len(parts) != 3 or not _NAME.fullmatch(parts[1]) or parts[2] not in _TYPES:
            raise InputError(f"malformed TYPE line: {line!r}", file=file, line=number)
    elif parts[:1] == ["HELP"] and (len(parts) < 2 or not _NAME.fullmatch(parts[1])):
        raise InputError(f"malformed HELP line: {line!r}", file=file, line=number)
    return False


def _sample(line: str, file: str, number: int) -> Sample:
    """Parse one sample line."""
    m = _NAME.match(line)
    if m is None:
        raise InputError(f"expected a metric name at the start of {line!r}", file=file, line=number)
    name, pos = m.group(), m.end()
    labels: dict[str, str] = {}
    if line[pos:pos + 1] == "{":
        pos += 1
        while True:
            if line[pos:].lstrip().startswith("}"):
                pos = line.index("}", pos) + 1
                break
            lm = _LABEL.match(line, pos)
            if lm is None:
                raise InputError(f"malformed labels in {line!r}", file=file, line=number, field=name)
            label, value = lm.group(1), _unescape(lm.group(2), file, number, name)
            if label in labels:
                raise InputError(f"label {label!r} given twice", file=file, line=number, field=name)
            labels[label] = value
            pos = lm.end()
            if line[pos:pos + 1] == ",":
                pos += 1
            elif line[pos:pos + 1] != "}":
                raise InputError(f"malformed labels in {line!r}", file=file, line=number, field=name)
    rest = line[pos:]
    fields = rest.split()
    if not rest[:1].isspace() or len(fields) not in (1, 2) or not _VALUE.fullmatch(fields[0]) \
            or (len(fields) == 2 and not _TIMESTAMP.fullmatch(fields[1])):
        raise InputError(f"expected 'value [timestamp]' after the series, got {rest.strip()!r}",
                         file=file, line=number, field=name)
    return Sample(name, labels, float(fields[0]), file, number)


def _unescape(value: str, file: str, number: int, name: str) -> str:
    """Resolve the three escapes the text format allows in label values."""
    def repl(m: re.Match) -> str:
        if m.group() not in _ESCAPES:
            raise InputError(f"invalid escape {m.group()!r} in a label value", file=file,
                             line=number, field=name)
        return _ESCAPES[m.group()]
    return re.sub(r"\\.", repl, value)


def read_scrape(path: str | Path) -> list[Sample]:
    """The samples of one /metrics scrape saved to a file."""
    return parse_exposition(read_text(path), path)


# --- spec-decode counters -------------------------------------------------------------------

SeriesKey = tuple[str, str, str]   # (counter, engine, position or "")


def spec_series(samples: list[Sample], model_name: str | None = None) -> tuple[dict[SeriesKey, Sample], str]:
    """The spec-decode counter samples of one model, keyed by (counter, engine, position)."""
    file = samples[0].file if samples else None
    wanted = set(COUNTERS.values()) | {PER_POS}
    spec = [s for s in samples if s.name in wanted]
    models = sorted({s.labels.get("model_name", "") for s in spec})
    if not spec:
        raise InputError("no vllm:spec_decode_*_total counters (was the server started with "
                         "--speculative-config?)", file=file)
    if model_name is None and len(models) > 1:
        raise InputError(f"counters of several models ({', '.join(models)}): choose one with "
                         "--model-name", file=file)
    chosen = models[0] if model_name is None else model_name
    if chosen not in models:
        raise InputError(f"no spec-decode counters for model_name {chosen!r} (found: "
                         f"{', '.join(models)})", file=file, field="model_name")
    out: dict[SeriesKey, Sample] = {}
    for s in spec:
        if s.labels.get("model_name", "") != chosen:
            continue
        if not (math.isfinite(s.value) and s.value >= 0 and s.value == int(s.value)):
            raise InputError(f"a counter must be a non-negative integer, got {s.value!r}",
                             file=s.file, line=s.line, field=s.series())
        position = s.labels.get("position", "") if s.name == PER_POS else ""
        if s.name == PER_POS and not position.isdigit():
            raise InputError(f"expected a 'position' label 0, 1, ..., got {position!r}",
                             file=s.file, line=s.line, field=s.series())
        key = (s.name, s.labels.get("engine", ""), position)
        if key in out:
            raise InputError(f"a second series for engine {key[1]!r} (the first is on line "
                             f"{out[key].line}): labels beyond model_name, engine and position "
                             "are not understood", file=s.file, line=s.line, field=s.series())
        out[key] = s
    return out, chosen


def difference(after: dict[SeriesKey, Sample], before: dict[SeriesKey, Sample]) -> dict[SeriesKey, float]:
    """after - before per series; a counter that decreased or vanished is an InputError."""
    for key, old in before.items():
        if key not in after:
            raise InputError(f"series of the earlier scrape (line {old.line}) is missing here: "
                             "was the server restarted between the scrapes?",
                             file=next(iter(after.values())).file, field=old.series())
    out = {}
    for key, new in after.items():
        old_value = before[key].value if key in before else 0.0
        if new.value < old_value:
            raise InputError(f"counter decreased from {old_value:g} ({before[key].file}:"
                             f"{before[key].line}) to {new.value:g}: was the server restarted "
                             "between the scrapes?", file=new.file, line=new.line, field=new.series())
        out[key] = new.value - old_value
    return out


def counts_from_series(values: dict[SeriesKey, float], where: dict[SeriesKey, Sample]) -> SpecDecodeCounts:
    """Sum the per-engine counters into vLLM's four tallies and check they are consistent."""
    first = next(iter(where.values()))
    engines = sorted({key[1] for key in values})
    gammas = {}
    for engine in engines:
        seen = next(s for k, s in where.items() if k[1] == engine)
        positions = sorted(int(k[2]) for k in values if k[0] == PER_POS and k[1] == engine)
        if positions != list(range(len(positions))) or not positions:
            raise InputError(f"engine {engine!r} (as on this line): expected positions 0..gamma-1 "
                             f"of {PER_POS}, found {positions}", file=seen.file, line=seen.line,
                             field=PER_POS)
        for counter in COUNTERS.values():
            if (counter, engine, "") not in values:
                raise InputError(f"engine {engine!r} (as on this line): counter missing",
                                 file=seen.file, line=seen.line, field=counter)
        gammas[engine] = len(positions)
    if len(set(gammas.values())) != 1:
        raise InputError(f"engines disagree on the number of draft positions: {gammas}",
                         file=first.file, line=first.line, field=PER_POS)
    gamma = next(iter(gammas.values()))
    total = {name: int(sum(values[(c, e, "")] for e in engines)) for name, c in COUNTERS.items()}
    per_pos = [int(sum(values[(PER_POS, e, str(k))] for e in engines)) for k in range(gamma)]
    counts = SpecDecodeCounts(gamma, total["num_drafts"], total["num_draft_tokens"],
                              total["num_accepted_tokens"], per_pos)
    _check_consistent(counts, where)
    return counts


def _check_consistent(c: SpecDecodeCounts, where: dict[SeriesKey, Sample]) -> None:
    """The identities vLLM's increments keep (a scrape of a busy server may break them)."""
    def fail(counter: str, message: str) -> InputError:
        sample = next(s for k, s in where.items() if k[0] == counter)
        return InputError(message, file=sample.file, line=sample.line, field=counter)

    if c.num_drafts == 0:
        raise fail(COUNTERS["num_drafts"], "no verify step with drafts was counted (between the scrapes)")
    reached = c.num_drafts
    for k, accepted in enumerate(c.accepted_per_pos):
        if accepted > reached:
            raise fail(PER_POS, f"position {k} accepted {accepted} times, more than the "
                       f"{reached} steps that reached it")
        reached = accepted
    if sum(c.accepted_per_pos) != c.num_accepted_tokens:
        raise fail(COUNTERS["num_accepted_tokens"], f"is {c.num_accepted_tokens}, but the per-position "
                   f"counts sum to {sum(c.accepted_per_pos)} (scraped while the server was busy?)")
    if not c.num_accepted_tokens <= c.num_draft_tokens <= c.gamma * c.num_drafts:
        raise fail(COUNTERS["num_draft_tokens"], f"is {c.num_draft_tokens}; expected between the "
                   f"accepted tokens ({c.num_accepted_tokens}) and gamma x drafts "
                   f"({c.gamma * c.num_drafts})")


def scrape_counts(after: str | Path, before: str | Path | None = None,
                  model_name: str | None = None) -> tuple[SpecDecodeCounts, str]:
    """vLLM's spec-decode tallies of a scrape (minus an earlier one), and the model they are of."""
    new, model = spec_series(read_scrape(after), model_name)
    old = spec_series(read_scrape(before), model)[0] if before is not None else {}
    return counts_from_series(difference(new, old), new), model
