"""Per-request results (requests.csv) and the run summary (summary.json), as formats.md defines."""
from __future__ import annotations

import io
from typing import Any

import numpy as np
import pandas as pd

from ..core.requests import RequestTable
from ..core.units import NS
from .summary import SummaryAccumulator

REQUEST_COLUMNS = ["id", "task", "replica", "arrival_s", "first_token_s", "finish_s",
                   "prompt_tokens", "output_tokens", "steps", "drafted_tokens", "verified_tokens",
                   "accepted_tokens", "ttft_s", "tpot_s", "tps_user"]


def request_columns(table: RequestTable, lo: int = 0, hi: int | None = None) -> dict[str, np.ndarray]:
    """The requests.csv columns of rows [lo, hi) of the table, in trace order."""
    sl = slice(lo, table.n if hi is None else hi)
    first = table.first_token_ns[sl] / NS
    finish = table.finish_ns[sl] / NS
    arrival = table.arrival_ns[sl] / NS
    output = table.output[sl]
    decode_tokens = output - 1
    with np.errstate(divide="ignore", invalid="ignore"):
        tpot = np.where(decode_tokens > 0, (finish - first) / np.maximum(decode_tokens, 1), np.nan)
        tps = np.where(tpot > 0, 1.0 / tpot, np.nan)
    return {
        "id": table.ids[sl], "task": table.task[sl], "replica": table.replica[sl],
        "arrival_s": arrival, "first_token_s": first, "finish_s": finish,
        "prompt_tokens": table.prompt[sl], "output_tokens": output, "steps": table.steps[sl],
        "drafted_tokens": table.drafted[sl], "verified_tokens": table.verified[sl],
        "accepted_tokens": table.accepted[sl], "ttft_s": first - arrival, "tpot_s": tpot,
        "tps_user": tps}


def requests_frame(table: RequestTable) -> pd.DataFrame:
    """One row per request, in trace order."""
    return pd.DataFrame(request_columns(table))


def requests_csv(frame: pd.DataFrame) -> str:
    """CSV text of the requests frame (floats round-trip exactly; empty cells for NaN)."""
    buf = io.StringIO()
    frame.to_csv(buf, index=False, lineterminator="\n")
    return buf.getvalue()


def summarise(frame: pd.DataFrame, *, policy: str, trace: str, hw: str, acceptance: str | None,
              seed: int, gpus: int, iterations: int, sim_wall_s: float) -> dict[str, Any]:
    """summary.json: throughput (per GPU too), latency distributions, speculation statistics."""
    acc = SummaryAccumulator()
    acc.add(frame)
    return acc.summary(policy=policy, trace=trace, hw=hw, acceptance=acceptance, seed=seed,
                       gpus=gpus, iterations=iterations, sim_wall_s=sim_wall_s)
