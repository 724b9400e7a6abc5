"""Importers: public trace formats (Azure LLM inference, BurstGPT, Mooncake) -> Trace.

Every reader keeps source line numbers, so a malformed row fails with `FILE:LINE`, the
field and exit status 2, like the JSONL trace loader. Rows whose prompt or output length is
zero (failed requests in BurstGPT) are skipped and counted, not silently kept.
"""
from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import InputError
from ..fileio import read_text
from .schema import (DEFAULT_TASK, HASH_BLOCK_TOKENS, MAX_TOKENS, Trace, hash_ids_field,
                     iter_json_lines, load_trace)

FORMATS = ("azure", "burstgpt", "mooncake")


@dataclass
class Imported:
    """A converted trace plus what the conversion dropped or reordered."""

    trace: Trace
    skipped_zero: int = 0       # rows with zero prompt or output tokens (failed requests)
    reordered: int = 0          # rows that were out of time order and were sorted


def _open(path: Path, **kwargs):
    """Open a text file; a missing or unreadable one is bad input naming the file."""
    try:
        return path.open(**kwargs)
    except FileNotFoundError:
        raise InputError("file not found", file=path) from None
    except OSError as exc:
        raise InputError(f"cannot read: {exc.strerror}", file=path) from None


def _open_csv(path: Path) -> tuple[list[str], list[tuple[int, list[str]]]]:
    text = read_text(path).removeprefix("\ufeff")
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader, None)
        if header is None:
            raise InputError("empty file", file=path, line=1)
        rows = [(reader.line_num, row) for row in reader if row and any(c.strip() for c in row)]
    except csv.Error as exc:
        raise InputError(f"not valid CSV ({exc})", file=path, line=reader.line_num) from None
    return [h.strip() for h in header], rows


def _column(header: list[str], name: str, path: Path) -> int:
    try:
        return header.index(name)
    except ValueError:
        raise InputError(f"missing column '{name}' (header: {','.join(header)})",
                         file=path, line=1, field=name) from None


def _cell(row: list[str], col: int, name: str, path: Path, line: int) -> str:
    if col >= len(row):
        raise InputError(f"row has {len(row)} columns, expected at least {col + 1}",
                         file=path, line=line, field=name)
    return row[col].strip()


def _count(text: str, name: str, path: Path, line: int) -> int:
    try:
        value = float(text)
    except ValueError:
        raise InputError(f"expected a token count, got {text!r}", file=path, line=line, field=name) from None
    if not math.isfinite(value) or value < 0 or not value.is_integer():
        raise InputError(f"expected a non-negative integer, got {text!r}", file=path, line=line, field=name)
    if value > MAX_TOKENS:
        raise InputError(f"must be <= {MAX_TOKENS:,}, got {text!r}", file=path, line=line, field=name)
    return int(value)


def _seconds(text: str, name: str, path: Path, line: int) -> float:
    try:
        value = float(text)
    except ValueError:
        raise InputError(f"expected a number, got {text!r}", file=path, line=line, field=name) from None
    if not math.isfinite(value):
        raise InputError(f"expected a finite number, got {text!r}", file=path, line=line, field=name)
    return value


def _build(path: Path, lines: list[int], times: np.ndarray, prompts: list[int], outputs: list[int],
           task: str, hash_ids: list | None = None) -> Imported:
    """Drop zero-length rows, sort by time (stable), shift arrivals to start at 0; `hash_ids`
    (Mooncake's, one tuple or None per row) go along."""
    if not lines:
        raise InputError("no requests in file", file=path)
    lines_a = np.asarray(lines)
    prompt_a = np.asarray(prompts, dtype=np.int64)
    output_a = np.asarray(outputs, dtype=np.int64)
    keep = (prompt_a >= 1) & (output_a >= 1)
    skipped = int((~keep).sum())
    if not keep.any():
        raise InputError("every row has zero prompt or output tokens", file=path)
    times, lines_a, prompt_a, output_a = times[keep], lines_a[keep], prompt_a[keep], output_a[keep]
    extra = {}
    if hash_ids is not None and any(h is not None for h in hash_ids):
        column = np.empty(len(hash_ids), dtype=object)
        column[:] = hash_ids
        extra["hash_ids"] = column[keep]
    order = np.argsort(times, kind="stable")
    extra = {key: col[order] for key, col in extra.items()}
    reordered = int((order != np.arange(len(order))).sum())
    times = times[order]
    arrival = times - times[0]
    trace = Trace(ids=np.array([str(v) for v in lines_a[order]], dtype=object), arrival_s=arrival,
                  prompt_tokens=prompt_a[order], output_tokens=output_a[order],
                  task=np.full(len(arrival), task, dtype=object), name=path.stem, **extra)
    return Imported(trace, skipped_zero=skipped, reordered=reordered)


def import_azure(path: str | Path, task: str = DEFAULT_TASK) -> Imported:
    """Azure LLM inference trace CSV (`TIMESTAMP,ContextTokens,GeneratedTokens`)."""
    path = Path(path)
    header, rows = _open_csv(path)
    cols = [_column(header, n, path) for n in ("TIMESTAMP", "ContextTokens", "GeneratedTokens")]
    if not rows:
        raise InputError("no requests in file", file=path)
    lines, stamps, prompts, outputs = [], [], [], []
    for line, row in rows:
        stamps.append(_cell(row, cols[0], "TIMESTAMP", path, line))
        prompts.append(_count(_cell(row, cols[1], "ContextTokens", path, line), "ContextTokens", path, line))
        outputs.append(_count(_cell(row, cols[2], "GeneratedTokens", path, line), "GeneratedTokens", path, line))
        lines.append(line)
    parsed = pd.to_datetime(pd.Series(stamps), errors="coerce", format="mixed")
    bad = np.flatnonzero(parsed.isna().to_numpy())
    if len(bad):
        i = int(bad[0])
        raise InputError(f"not a timestamp: {stamps[i]!r}", file=path, line=lines[i], field="TIMESTAMP")
    times = (parsed - parsed.iloc[0]).dt.total_seconds().to_numpy(dtype=float)
    return _build(path, lines, times, prompts, outputs, task)


def import_burstgpt(path: str | Path, task: str = DEFAULT_TASK) -> Imported:
    """BurstGPT CSV (`Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type`)."""
    path = Path(path)
    header, rows = _open_csv(path)
    names = ("Timestamp", "Request tokens", "Response tokens")
    cols = [_column(header, n, path) for n in names]
    lines, times, prompts, outputs = [], [], [], []
    for line, row in rows:
        times.append(_seconds(_cell(row, cols[0], names[0], path, line), names[0], path, line))
        prompts.append(_count(_cell(row, cols[1], names[1], path, line), names[1], path, line))
        outputs.append(_count(_cell(row, cols[2], names[2], path, line), names[2], path, line))
        lines.append(line)
    return _build(path, lines, np.asarray(times, dtype=float), prompts, outputs, task)


def import_mooncake(path: str | Path, task: str = DEFAULT_TASK) -> Imported:
    """Mooncake JSONL (`timestamp` in ms, `input_length`, `output_length`, optional `hash_ids`:
    one id per 512-token block of the input, equal ids = equal content and prefix)."""
    path = Path(path)
    lines, times, prompts, outputs, hashes = [], [], [], [], []
    for line, rec in iter_json_lines(path):
        for key in ("timestamp", "input_length", "output_length"):
            value = rec.get(key)
            if key not in rec:
                raise InputError("missing required field", file=path, line=line, field=key)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise InputError(f"expected a number, got {value!r}", file=path, line=line, field=key)
            if key != "timestamp" and (value < 0 or not float(value).is_integer()
                                       or value > MAX_TOKENS):
                raise InputError(f"expected an integer in 0..{MAX_TOKENS:,}, got {value!r}",
                                 file=path, line=line, field=key)
        ids = rec.get("hash_ids")
        if ids is not None:
            ids = hash_ids_field(ids, int(rec["input_length"]), HASH_BLOCK_TOKENS, path, line,
                                 "input_length")
        times.append(rec["timestamp"] / 1000.0)
        prompts.append(int(rec["input_length"]))
        outputs.append(int(rec["output_length"]))
        hashes.append(ids)
        lines.append(line)
    return _build(path, lines, np.asarray(times, dtype=float), prompts, outputs, task, hashes)


IMPORTERS = {"azure": import_azure, "burstgpt": import_burstgpt, "mooncake": import_mooncake}


def import_trace(fmt: str, path: str | Path, task: str = DEFAULT_TASK) -> Imported:
    """Convert a file of a public format (`azure`, `burstgpt`, `mooncake`) into a Trace."""
    if fmt not in IMPORTERS:
        raise InputError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}", field="format")
    return IMPORTERS[fmt](path, task)


def detect_format(path: str | Path) -> str:
    """'trace' (our JSONL), 'azure', 'burstgpt' or 'mooncake', from the file's first line."""
    path = Path(path)
    with _open(path, mode="rb") as handle:
        first = next((ln for ln in handle if ln.strip()), b"")
    # only to tell the formats apart: the reader then names a bad byte's line
    head = first.decode("utf-8", errors="replace").removeprefix("\ufeff").strip()
    if not head:
        return "trace"          # empty: the trace loader says so
    if head.startswith("{"):
        try:
            rec = json.loads(head)
        except json.JSONDecodeError:
            return "trace"      # let the trace loader report the line
        return "mooncake" if isinstance(rec, dict) and "input_length" in rec else "trace"
    if "ContextTokens" in head and "TIMESTAMP" in head:
        return "azure"
    if "Request tokens" in head:
        return "burstgpt"
    raise InputError("unrecognised format (expected a JSONL trace, Azure CSV, BurstGPT CSV or "
                     "Mooncake JSONL)", file=path, line=1)


def read_any(path: str | Path, task: str = DEFAULT_TASK) -> Trace:
    """Read a trace JSONL or any importable format, detected from the file's first line."""
    fmt = detect_format(path)
    if fmt == "trace":
        return load_trace(path)
    return import_trace(fmt, path, task).trace
