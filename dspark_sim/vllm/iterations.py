"""vLLM's own per-iteration records, read from its log.

With `--enable-logging-iteration-details` the engine logs one line per iteration
(vllm/v1/metrics/loggers.py, `_log_iteration_details`):

    Engine 000: Iteration(118): 0 context requests, 0 context tokens, 16 generation requests,
    16 generation tokens, iteration elapsed time: 332.00 ms, CPU KV cache usage: 13.2%

"context" = prefill chunks, "generation" = decoding requests and their tokens (1 + scheduled
drafts each); the elapsed time is the model execution of that iteration (vllm/v1/engine/core.py
`capture_iteration_details`: from after scheduling to the sampled output), so the engine's
scheduling and output processing are not in it.
"""
from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

_LINE = re.compile(
    r"Iteration\((?P<iteration>\d+)\): (?P<ctx_requests>\d+) context requests, "
    r"(?P<ctx_tokens>\d+) context tokens, (?P<gen_requests>\d+) generation requests, "
    r"(?P<gen_tokens>\d+) generation tokens, iteration elapsed time: (?P<elapsed_ms>[\d.]+) ms"
    r"(?P<dummy> \(dummy\))?")
COLUMNS = ["iteration", "ctx_requests", "ctx_tokens", "gen_requests", "gen_tokens", "elapsed_ms"]


def parse_iterations(text: str) -> pd.DataFrame:
    """One row per non-dummy iteration line in `text` (COLUMNS; batch_tokens added)."""
    rows = []
    for m in _LINE.finditer(text):
        if m.group("dummy"):
            continue
        rows.append([int(m.group(c)) for c in COLUMNS[:-1]] + [float(m.group("elapsed_ms"))])
    frame = pd.DataFrame(rows, columns=COLUMNS)
    frame["batch_tokens"] = frame["ctx_tokens"] + frame["gen_tokens"]
    return frame


class LogCursor:
    """Reads what a growing log file gained since the last read."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.offset = self.path.stat().st_size if self.path.exists() else 0

    def read_new(self) -> str:
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read()
        # keep a partial last line for the next read
        cut = data.rfind(b"\n") + 1
        self.offset += cut
        return data[:cut].decode("utf-8", errors="replace")


def kv_capacity_tokens(log_text: str) -> int | None:
    """The KV cache size vLLM reports at start-up ("CPU KV cache size: 46,592 tokens" or
    "GPU KV cache size: ...")."""
    m = re.search(r"[CG]PU KV cache size: ([\d,]+) tokens", log_text)
    return int(m.group(1).replace(",", "")) if m else None


def vllm_version(log_text: str) -> str | None:
    m = re.search(r"Initializing a V1 LLM engine \(v([^)]+)\)", log_text)
    return m.group(1) if m else None
