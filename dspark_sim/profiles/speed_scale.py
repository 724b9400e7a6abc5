"""A hardware profile at another speed of the same machine: every decode-side time scaled by one
factor, the prefill chunks by another.

A speed check of a server (vllm/speed_check.py) measures how much slower or faster it runs
now than when it was profiled; the run it precedes is simulated on the profile scaled so.
"""
from __future__ import annotations

from dataclasses import replace

from .cudagraph import CudaGraph
from .curve import Curve
from .hardware import DraftSlope, HardwareProfile


def _times(curve: Curve, factor: float) -> Curve:
    return Curve(curve.x.copy(), curve.y * factor)


def speed_scaled(hw: HardwareProfile, decode: float, prefill: float | None = None) -> HardwareProfile:
    """`hw` with the step table, the context and request terms, every drafter's cost and the
    eager term above the capture limit times `decode`, and a prefill chunk of P tokens costing
    `prefill` x what it cost before (default: `decode`).

    A profile without a prefill curve prices chunks on the step table; when the two factors
    differ it gets a prefill curve, the step table's points times `prefill`, so a chunk costs
    prefill x step(P) and the decode tokens beside it decode x (step(B) - step(P)). Factors 1
    and 1 give a profile that prices every iteration as `hw` does."""
    prefill = decode if prefill is None else prefill
    if not (decode > 0 and prefill > 0):
        raise ValueError(f"speed factors must be > 0, got {decode} and {prefill}")
    cudagraph = hw.cudagraph
    if cudagraph is not None and cudagraph.has_eager:
        cudagraph = CudaGraph(cudagraph.max_capture_size,
                              None if cudagraph.eager_table is None else _times(cudagraph.eager_table, decode),
                              cudagraph.floor_s * decode, cudagraph.per_token_s * decode, cudagraph.source)
    if hw.prefill_curve is not None:
        prefill_curve = _times(hw.prefill_curve, prefill)
    elif prefill != decode and hw.step_curve is not None:
        prefill_curve = _times(hw.step_curve, prefill)
    else:
        prefill_curve = None
    constant = None if hw.step_constant_s is None else hw.step_constant_s * decode
    if hw.step_curve is None and prefill != decode:
        raise ValueError("a constant-step profile has no prefill chunks to scale apart")
    return replace(
        hw, step_curve=None if hw.step_curve is None else _times(hw.step_curve, decode),
        step_constant_s=constant, per_context_token_s=hw.per_context_token_s * decode,
        per_request_s=hw.per_request_s * decode, prefill_curve=prefill_curve, cudagraph=cudagraph,
        draft_curves={k: _times(c, decode) for k, c in hw.draft_curves.items()},
        draft_slopes={k: DraftSlope(s.drafts, _times(s.per_draft, decode))
                      for k, s in hw.draft_slopes.items()},
        machine=dict(hw.machine), extra=dict(hw.extra))
