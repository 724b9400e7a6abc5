"""Turn a Roofline into a hardware profile (formats.md): sampled step and draft tables."""
from __future__ import annotations

import numpy as np

from ..profiles.cudagraph import CudaGraph
from ..profiles.curve import Curve
from ..profiles.hardware import HardwareProfile
from .roofline import DRAFTER_KINDS, SEQUENTIAL_DRAFTERS, Roofline


def batch_grid(max_tokens: int, per_octave: int = 4) -> list[int]:
    """Integer batch sizes from 1 to `max_tokens`, about `per_octave` per doubling."""
    if max_tokens < 1:
        raise ValueError("max_tokens must be >= 1")
    octaves = np.log2(max_tokens)
    points = np.round(2.0 ** np.linspace(0, octaves, int(np.ceil(octaves * per_octave)) + 1))
    return sorted({int(p) for p in points} | {1, int(max_tokens)})


def significant(values, digits: int = 5) -> np.ndarray:
    """Round to `digits` significant figures (keeps profile files readable)."""
    values = np.asarray(values, dtype=float)
    with np.errstate(divide="ignore"):
        exponent = np.floor(np.log10(np.abs(np.where(values == 0, 1.0, values))))
    scale = 10.0 ** (digits - 1 - exponent)
    return np.round(values * scale) / scale


def analytic_profile(roof: Roofline, name: str, max_batch_tokens: int | None = None,
                     max_batch_requests: int | None = None,
                     drafters: tuple[str, ...] = DRAFTER_KINDS,
                     cudagraph: CudaGraph | None = None) -> HardwareProfile:
    """Sample the roofline over a batch-token grid into a `source: roofline` profile (with the
    CUDA-graph capture limit and eager term `cudagraph`, when given)."""
    s = roof.s
    max_batch_tokens = max_batch_tokens or 4096 * roof.dp
    max_batch_requests = max_batch_requests or 256 * roof.dp
    grid = batch_grid(max_batch_tokens)
    step = significant(roof.step_time(grid))
    request_grid = batch_grid(max_batch_requests, per_octave=2)
    draft_curves = {k: Curve.of(request_grid, significant(roof.draft_time(k, request_grid)))
                    for k in drafters}
    parallel = f"TP{s.tp}" + (f" x EP{s.ep}" if s.ep > 1 else "") + \
        (f", {roof.dp} data-parallel attention groups" if roof.dp > 1 else "")
    device = f"{roof.gpus} x {roof.gpu.name} ({parallel}, {s.dtype} weights, {s.kv_dtype} KV)"
    breakdown = roof.step_breakdown([1, 64, 1024, max_batch_tokens])
    return HardwareProfile(
        name=name, source="roofline", step_curve=Curve.of(grid, step),
        per_context_token_s=float(significant(roof.per_context_token_s)), draft_curves=draft_curves,
        per_draft_kinds=frozenset(k for k in drafters if k in SEQUENTIAL_DRAFTERS),
        device=device, model=roof.model.name, gpus_per_replica=roof.gpus,
        kv_capacity_tokens=roof.kv_capacity_tokens, max_batch_tokens=max_batch_tokens,
        max_batch_requests=max_batch_requests, cudagraph=cudagraph,
        extra={
            "notes": _notes(roof),
            "assumptions": roof.assumptions(),
            "step_breakdown_s": {"batch_tokens": [1, 64, 1024, max_batch_tokens],
                                 **{k: significant(np.atleast_1d(v)).tolist() for k, v in breakdown.items()}},
        })


def _notes(roof: Roofline) -> str:
    s = roof.s
    return (
        "Analytic roofline estimate, not a measurement. Step time = sum over weight-bearing "
        "components of max(FLOPs / (peak x compute_efficiency), weight bytes / (HBM x "
        "bandwidth_efficiency)) on the busiest GPU + TP/EP communication (bandwidth + per-call "
        "latency) + per-layer launch cost + fixed overhead; the "
        "table excludes attention over the KV cache, which is per_context_token_s per context "
        "token of the batch's requests (each request's KV counted once) at the attention "
        "kernels' efficiency, taken at "
        f"{s.verify_width} query tokens per request. Routed experts: expected distinct experts "
        "touched E(1-(1-k/E)^B) under uniform routing (perfectly balanced EP, no hot experts). "
        f"Communication overlap with compute: {s.comm_overlap:g}. Every setting's source is in "
        "assumptions.sources. Drafter attention over the context and "
        "the prefill chunk's own causal attention are left out of the tables. See "
        "docs/hardware.md for every formula and the assumptions block below for every number.")
