"""A speed check of a vLLM server just before it serves a trace.

On a shared VM a server runs several percent slower or faster from one hour, and one start, to
the next, and a profile taken earlier prices a run at the speed of its own hour. The check
times, on the very server that then serves the trace, a few of the points `profile --engine
vllm` times, the same way (BurstTimer: vLLM's model time per iteration from its log plus the
burst's engine overhead per iteration): decode bursts of 1, 4 and 8 requests of random prompts
at 128 context tokens (each steady iteration priced at its own tokens, requests and context,
plus, on a speculative server, its proposer's draft cost, which the profile took off the
verify steps) and one-request prefills of 256 and 512 tokens, twice each, ~20 s in all on 2
cores. Against the profile's price of each timed iteration it gives two factors, decode and
prefill (the median ratio of each op's iterations), and
the run is simulated on the profile scaled by them (profiles/speed_scale.py). The timings are
kept beside the run (speed-check.json), so a re-simulation on another profile prices them on
that profile.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError
from ..fileio import read_json, write_json_atomic
from ..hardware.profiler import Timing
from ..profiles.hardware import HardwareProfile
from ..profiles.validate import FieldChecker
from .profile import BurstTimer, VLLMGrid, profile_side_by_side

SPEED_CHECK_FILE = "speed-check.json"
SCHEMA = "dspark-sim/vllm-speed-check/v1"
CHECK_GRID = VLLMGrid(batches=(1, 4, 8), contexts=(128,), prefill_chunks=(256, 512),
                      decode_steps=24, repeats=2, warmup=0)


@dataclass
class SpeedCheck:
    """The check's timings on one server, and the drafter whose proposer ran in them."""

    timings: list[Timing]
    drafter: str | None = None          # the profile's draft_time key, None on a plain server

    def ratios(self, hw: HardwareProfile) -> dict[str, list[float]]:
        """Measured over priced, per timed iteration, by op (decode, prefill)."""
        out: dict[str, list[float]] = {"decode": [], "prefill": []}
        for t in self.timings:
            if t.op == "decode":
                price = float(hw.step_time(t.batch_tokens, t.context_tokens, 0, t.requests))
                if self.drafter:
                    price += float(hw.draft_time(self.drafter, t.requests, 1))
            else:
                price = float(hw.step_time(t.batch_tokens, 0, t.batch_tokens, 1))
            out[t.op] += [v / price for v in t.samples_s]
        return out

    def factors(self, hw: HardwareProfile) -> tuple[float, float]:
        """(decode, prefill): the median ratio over each op's timed iterations (prefill =
        decode when the check timed no prefill)."""
        r = self.ratios(hw)
        if not r["decode"]:
            raise InputError("the speed check timed no decode iteration", field="speed_check")
        decode = float(np.median(r["decode"]))
        return decode, float(np.median(r["prefill"])) if r["prefill"] else decode

    def to_dict(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "drafter": self.drafter,
                "points": [{"op": t.op, "requests": t.requests, "width": t.width,
                            "context": t.context, "batch_tokens": t.batch_tokens,
                            "samples_s": [float(v) for v in t.samples_s]} for t in self.timings]}

    @classmethod
    def from_dict(cls, data: Any, file: str | Path | None = None, lines=None) -> "SpeedCheck":
        check = FieldChecker(file, lines)
        data = check.mapping(data, "(document)")
        check.schema(data, SCHEMA)
        drafter = data.get("drafter")
        if drafter is not None:
            check.string(drafter, "drafter")
        points = check.require(data, "points")
        if not isinstance(points, list) or not points:
            raise check.fail("points", "expected a non-empty list of timed points")
        timings = []
        for i, p in enumerate(points):
            f = f"points[{i}]"
            p = check.mapping(p, f)
            op = check.string(check.require(p, "op", f), f"{f}.op")
            if op not in ("decode", "prefill"):
                raise check.fail(f"{f}.op", f"must be decode or prefill, got {op!r}")
            timings.append(Timing(op, check.integer(check.require(p, "requests", f), f"{f}.requests", 1),
                                  check.integer(check.require(p, "width", f), f"{f}.width", 1),
                                  check.integer(check.require(p, "context", f), f"{f}.context", 0),
                                  check.number_list(check.require(p, "samples_s", f), f"{f}.samples_s",
                                                    0.0, exclusive=True),
                                  tokens=check.integer(check.require(p, "batch_tokens", f),
                                                       f"{f}.batch_tokens", 1)))
        return cls(timings, drafter)

    def save(self, path: str | Path) -> None:
        write_json_atomic(path, self.to_dict())

    @classmethod
    def load(cls, path: str | Path) -> "SpeedCheck":
        data, lines = read_json(path)
        return cls.from_dict(data, file=path, lines=lines)


def check_speed(server, vocab: int, drafter: str | None, seed: int = 0,
                grid: VLLMGrid = CHECK_GRID) -> SpeedCheck:
    """Time the check's points on a running, warmed-up `VLLMServer` (its log has the iteration
    details), walked as `profile --engine vllm` walks its grid (random prompts only). Prefill
    chunks longer than the server's batch-token limit are left out."""
    limit = server.spec.max_num_batched_tokens or max(grid.prefill_chunks, default=0)
    grid = replace(grid, prefill_chunks=tuple(c for c in grid.prefill_chunks if c <= limit))
    timer = BurstTimer(server, grid, "speed-check")
    profile_side_by_side([timer], grid, vocab, seed)
    return SpeedCheck(timer.timings(), drafter)
