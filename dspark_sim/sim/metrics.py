"""Per-request results (requests.csv) and the run summary (summary.json), as formats.md defines."""
from __future__ import annotations

import io
from typing import Any

import numpy as np
import pandas as pd

from .costs import NS
from .requests import RequestTable

REQUEST_COLUMNS = ["id", "task", "replica", "arrival_s", "first_token_s", "finish_s",
                   "prompt_tokens", "output_tokens", "steps", "drafted_tokens", "verified_tokens",
                   "accepted_tokens", "ttft_s", "tpot_s", "tps_user"]


def requests_frame(table: RequestTable) -> pd.DataFrame:
    """One row per request, in trace order."""
    first = table.first_token_ns / NS
    finish = table.finish_ns / NS
    arrival = table.arrival_ns / NS
    decode_tokens = table.output - 1
    with np.errstate(divide="ignore", invalid="ignore"):
        tpot = np.where(decode_tokens > 0, (finish - first) / np.maximum(decode_tokens, 1), np.nan)
        tps = np.where(tpot > 0, 1.0 / tpot, np.nan)
    return pd.DataFrame({
        "id": table.ids, "task": table.task, "replica": table.replica, "arrival_s": arrival,
        "first_token_s": first, "finish_s": finish, "prompt_tokens": table.prompt,
        "output_tokens": table.output, "steps": table.steps, "drafted_tokens": table.drafted,
        "verified_tokens": table.verified, "accepted_tokens": table.accepted,
        "ttft_s": first - arrival, "tpot_s": tpot, "tps_user": tps})


def requests_csv(frame: pd.DataFrame) -> str:
    """CSV text of the requests frame (floats round-trip exactly; empty cells for NaN)."""
    buf = io.StringIO()
    frame.to_csv(buf, index=False, lineterminator="\n")
    return buf.getvalue()


def _dist(values: pd.Series, low: bool = False) -> dict[str, float | None]:
    v = values.dropna().to_numpy(dtype=float)
    if len(v) == 0:
        keys = ["mean", "p10", "p50", "p90", "p99"] if low else ["mean", "p50", "p90", "p99"]
        return {k: None for k in keys}
    out = {"mean": float(v.mean())}
    if low:
        out["p10"] = float(np.percentile(v, 10))
    for q in (50, 90, 99):
        out[f"p{q}"] = float(np.percentile(v, q))
    return out


def summarise(frame: pd.DataFrame, *, policy: str, trace: str, hw: str, acceptance: str | None,
              seed: int, gpus: int, iterations: int, sim_wall_s: float) -> dict[str, Any]:
    """summary.json: throughput (per GPU too), latency distributions, speculation statistics."""
    start = float(frame["arrival_s"].min())
    end = float(frame["finish_s"].max())
    duration = end - start
    output = int(frame["output_tokens"].sum())
    steps = int(frame["steps"].sum())
    throughput = output / duration if duration > 0 else float("nan")
    return {
        "policy": policy, "trace": trace, "hw": hw, "acceptance": acceptance, "seed": seed,
        "requests": int(len(frame)), "completed": int(frame["finish_s"].notna().sum()),
        "output_tokens": output, "duration_s": duration, "throughput_tok_s": throughput,
        "throughput_tok_s_per_gpu": throughput / gpus,
        "ttft_s": _dist(frame["ttft_s"]), "tpot_s": _dist(frame["tpot_s"]),
        "tps_user": _dist(frame["tps_user"], low=True),
        "mean_verify_len": int(frame["verified_tokens"].sum()) / steps if steps else 0.0,
        "mean_tau": (int(frame["accepted_tokens"].sum()) + steps) / steps if steps else 1.0,
        "iterations": iterations, "sim_wall_s": sim_wall_s,
    }
