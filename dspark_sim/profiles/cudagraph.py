"""The CUDA-graph region of a hardware profile (formats.md `cudagraph`): the largest batch a
graph-capturing engine replays (vLLM's `max_cudagraph_capture_size`) and what a step above it
costs on top of the step table, run eagerly (`eager`). The eager cost is a term of its own,
never a smooth continuation of the table: 0 at or below the limit, then either a table of
extra seconds by batch tokens (linear between its points, flat beyond them, e.g. an engine's
start-up profile) or `floor_s + per_token_s x B`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .curve import Curve
from .validate import FieldChecker

EAGER_SOURCES = ("measured", "fitted", "given", "estimate")
# vLLM's default ceiling on max_cudagraph_capture_size (vllm/config/vllm.py
# `_set_cudagraph_sizes`: 1024 on data-centre Blackwell, 512 elsewhere), before the min with
# max_num_seqs x (1 + speculative tokens) x 2 and max_num_batched_tokens.
VLLM_DEFAULT_CAPTURE_CEILING = 512


def vllm_default_capture_size(max_num_seqs: int, speculative_tokens: int = 0,
                              max_num_batched_tokens: int | None = None,
                              ceiling: int = VLLM_DEFAULT_CAPTURE_CEILING) -> int:
    """vLLM 0.32's default `max_cudagraph_capture_size`: min(max_num_seqs x (1 + K) x 2,
    ceiling), then at most max_num_batched_tokens."""
    size = min(max_num_seqs * (1 + speculative_tokens) * 2, ceiling)
    return min(size, max_num_batched_tokens) if max_num_batched_tokens else size


@dataclass(frozen=True)
class CudaGraph:
    """Capture limit and the eager term above it."""

    max_capture_size: int
    eager_table: Curve | None = None       # extra seconds by batch tokens (above the limit)
    floor_s: float = 0.0                   # or: floor_s + per_token_s x B above the limit
    per_token_s: float = 0.0
    source: str = "given"

    @property
    def has_eager(self) -> bool:
        return self.eager_table is not None or self.floor_s > 0 or self.per_token_s > 0

    def eager_seconds(self, batch_tokens) -> np.ndarray | float:
        """Extra seconds of a step of B batch tokens run outside the graphs (0 for B <= limit)."""
        b = np.asarray(batch_tokens, dtype=float)
        if self.eager_table is not None:
            extra = np.interp(b, self.eager_table.x, self.eager_table.y)   # flat beyond the ends
        else:
            extra = self.floor_s + self.per_token_s * b
        out = np.where(b > self.max_capture_size, extra, 0.0)
        return out if np.ndim(b) else float(out)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"max_capture_size": self.max_capture_size}
        if self.has_eager:
            if self.eager_table is not None:
                eager = {"batch_tokens": [int(v) for v in self.eager_table.x],
                         "seconds": [float(v) for v in self.eager_table.y]}
            else:
                eager = {"floor_s": self.floor_s, "per_token_s": self.per_token_s}
            out["eager"] = {**eager, "source": self.source}
        return out

    @classmethod
    def from_dict(cls, data: Any, check: FieldChecker) -> "CudaGraph":
        data = check.mapping(data, "cudagraph")
        limit = check.integer(check.require(data, "max_capture_size", "cudagraph"),
                              "cudagraph.max_capture_size", 1)
        if data.get("eager") is None:
            return cls(limit)
        eager = check.mapping(data["eager"], "cudagraph.eager")
        source = check.string(eager.get("source", "given"), "cudagraph.eager.source")
        if source not in EAGER_SOURCES:
            raise check.fail("cudagraph.eager.source",
                             f"must be one of {', '.join(EAGER_SOURCES)}, got {source!r}")
        table = "batch_tokens" in eager or "seconds" in eager
        if table and ("floor_s" in eager or "per_token_s" in eager):
            raise check.fail("cudagraph.eager", "give either batch_tokens + seconds or "
                                                "floor_s + per_token_s, not both")
        if not table:
            floor = check.number(eager.get("floor_s", 0.0), "cudagraph.eager.floor_s", 0.0)
            slope = check.number(eager.get("per_token_s", 0.0), "cudagraph.eager.per_token_s", 0.0)
            return cls(limit, None, floor, slope, source)
        xs = check.number_list(check.require(eager, "batch_tokens", "cudagraph.eager"),
                               "cudagraph.eager.batch_tokens", float(limit), exclusive=True)
        ys = check.number_list(check.require(eager, "seconds", "cudagraph.eager"),
                               "cudagraph.eager.seconds", 0.0)
        check.increasing(xs, "cudagraph.eager.batch_tokens")
        if len(xs) != len(ys):
            raise check.fail("cudagraph.eager.seconds", f"has {len(ys)} values but "
                                                        f"cudagraph.eager.batch_tokens has {len(xs)}")
        return cls(limit, Curve.of(xs, ys), source=source)
