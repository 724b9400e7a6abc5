"""A window of a trace, its lengths scaled to another model and its clock stretched.

Production traces (Azure 2023: prompts of ~1,000 tokens, outputs of ~230) are far beyond what a
small target serves on a CPU in a test's time; `slice_trace` keeps the arrival pattern of a
window and the shape of the length distributions while scaling them down: lengths are
multiplied, rounded and clipped to [1, max], and arrival times (from the window's start) are
multiplied by `stretch` (> 1 spreads the arrivals out).
"""
from __future__ import annotations

import numpy as np

from ..errors import InputError
from .schema import Trace


def slice_trace(trace: Trace, start_s: float = 0.0, duration_s: float | None = None,
                prompt_scale: float = 1.0, output_scale: float = 1.0,
                max_prompt_tokens: int | None = None, max_output_tokens: int | None = None,
                stretch: float = 1.0, limit: int | None = None) -> Trace:
    """Requests arriving in [start, start + duration) (first `limit` of them), rescaled."""
    for value, name in ((prompt_scale, "--prompt-scale"), (output_scale, "--output-scale"),
                        (stretch, "--stretch")):
        if not value > 0:
            raise InputError(f"must be > 0, got {value}", field=name)
    if start_s < 0 or (duration_s is not None and not duration_s > 0):
        raise InputError("the window needs start >= 0 and duration > 0", field="--window")
    for value, name in ((max_prompt_tokens, "--max-prompt-tokens"),
                        (max_output_tokens, "--max-output-tokens"), (limit, "--limit")):
        if value is not None and value < 1:
            raise InputError(f"must be >= 1, got {value}", field=name)
    t = np.asarray(trace.arrival_s, dtype=float) - (float(trace.arrival_s[0]) if len(trace) else 0.0)
    keep = (t >= start_s) & (t < start_s + duration_s if duration_s is not None else True)
    idx = np.flatnonzero(keep)[:limit]
    if len(idx) == 0:
        raise InputError(f"no request arrives in the window starting at {start_s} s", field="--window")

    def scaled(values, scale, cap):
        out = np.maximum(np.rint(np.asarray(values, dtype=float)[idx] * scale), 1).astype(np.int64)
        return np.minimum(out, cap) if cap is not None else out

    return Trace(ids=np.asarray(trace.ids, dtype=object)[idx],
                 arrival_s=(t[idx] - t[idx[0]]) * stretch,
                 prompt_tokens=scaled(trace.prompt_tokens, prompt_scale, max_prompt_tokens),
                 output_tokens=scaled(trace.output_tokens, output_scale, max_output_tokens),
                 task=np.asarray(trace.task, dtype=object)[idx], name=trace.name,
                 # shared content stays where the prompts keep their tokens
                 **(trace.prefix_fields(idx) if prompt_scale == 1.0 and max_prompt_tokens is None
                    else {}))
