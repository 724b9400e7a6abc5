"""Cost tables as vLLM's adaptive verification builds them at start-up.

vLLM (`vllm/v1/worker/gpu/spec_decode/adaptive_verification.py`, 0.32) times dummy steps at
the CUDA-graph capture sizes and at a few sizes past the largest one, takes the median per
size, and expands the samples into dense tables: draft milliseconds by request count and
verify milliseconds by token count. Below the largest capture size a step pads up to the
next captured size, so the table is a step function (the next sample at or above the size);
above it nothing pads and the table interpolates linearly between the samples that are
themselves above the limit; past the last sample it extrapolates from the last two. Costs are
made non-decreasing first (a running maximum).

The simulator cannot time an engine, so the samples are the hardware profile's own costs at
the sizes vLLM would profile (`profile_sizes`); `IterationCost.vllm_tables` builds them.
"""
from __future__ import annotations

import numpy as np


def profile_sizes(capture_sizes: list[int] | tuple[int, ...], max_num_tokens: int) -> list[int]:
    """Token counts vLLM profiles: the capture sizes, then 1.5x the largest and doublings of it
    up to max_num_batched_tokens (those not already captured)."""
    sizes = [int(s) for s in capture_sizes]
    size = sizes[-1] if sizes else 0
    tail: set[int] = set()
    if size:
        tail.add(min(size + size // 2, max_num_tokens))
        while size < max_num_tokens:
            size = min(size * 2, max_num_tokens)
            tail.add(size)
        tail -= set(sizes)
    return sizes + sorted(tail)


def build_table(limit: int, curve: list[tuple[int, float]], cudagraph_limit: int = 0) -> np.ndarray:
    """Dense table over sizes 0..limit from (size, cost) samples (see the module docstring)."""
    xs, ys = np.asarray(curve, dtype=np.float64).T
    ys = np.maximum.accumulate(ys)
    values = np.arange(limit + 1)
    result = ys[np.minimum(np.searchsorted(xs, values, side="left"), len(xs) - 1)]
    if cudagraph_limit:
        smooth = values > cudagraph_limit
        above = xs > cudagraph_limit
        if smooth.any() and above.any():
            result[smooth] = np.interp(values[smooth], xs[above], ys[above])
    if len(xs) > 1:
        after = values > xs[-1]
        slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2])
        result[after] = ys[-1] + slope * (values[after] - xs[-1])
    return result


def build_cost_tables(draft_curve: list[tuple[int, float]], verify_curve: list[tuple[int, float]],
                      max_num_reqs: int, max_batch_tokens: int,
                      cudagraph_limit: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(draft ms by request count 0..max_num_reqs, verify ms by tokens 0..max_batch_tokens);
    draft costs floored at 0, verify costs at 1e-6 ms, as vLLM does. Each entry depends only
    on the samples, so a shorter table is a prefix of a longer one (the simulator builds them
    only as far as a run looks them up)."""
    draft = np.maximum(build_table(max_num_reqs, draft_curve, cudagraph_limit), 0.0)
    verify = np.maximum(build_table(max_batch_tokens, verify_curve, cudagraph_limit), 1e-6)
    return draft, verify
