"""Measured hardware profile: time a model, fit the profile, compare with the roofline if asked."""
from __future__ import annotations

import platform
from dataclasses import asdict
from typing import Callable

import numpy as np

from ..profiles.hardware import HardwareProfile
from ..profiles.curve import Curve
from .analytic_profile import significant
from .fit import StepFit, fit_step_time
from .profiler import ProfileGrid, Timing, profile_target
from .roofline import Roofline


def describe_device(device: str) -> str:
    """Human-readable device text for the profile: GPU name, or CPU model and threads."""
    import torch

    if device == "cuda":
        return f"{torch.cuda.get_device_name(0)} (CUDA {torch.version.cuda}, torch {torch.__version__})"
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    threads = torch.get_num_threads()
    return f"{cpu}, {threads} torch thread{'s' if threads != 1 else ''} (torch {torch.__version__})"


def analytic_errors(roof: Roofline, timings: list[Timing]) -> list[dict]:
    """Roofline prediction vs measured median, per measured point."""
    rows = []
    for t in timings:
        if t.op == "decode":
            predicted = roof.decode_time(t.requests, t.width, t.context)
        elif t.op == "prefill":
            predicted = roof.prefill_time(t.width, t.context)
        else:
            continue
        rows.append({"op": t.op, "requests": t.requests, "width": t.width, "context": t.context,
                     "measured_s": t.median_s, "analytic_s": predicted,
                     "analytic_over_measured": predicted / t.median_s})
    return rows


def measure_profile(model, grid: ProfileGrid, device: str, name: str, model_name: str,
                    seed: int = 0, roofline: Roofline | None = None,
                    progress: Callable[[Timing], None] | None = None) -> tuple[HardwareProfile, StepFit]:
    """Time `model` over `grid`, fit a `source: measured` profile, keep every point and its error."""
    timings = profile_target(model, grid, device, seed=seed, progress=progress)
    fit = fit_step_time(timings)
    extra = {
        "notes": ("Measured with dspark-sim profile: one target forward with a transformers "
                  "DynamicCache per verify step (R requests x w tokens at each context) and one "
                  "request's prefill chunk from an empty cache; medians over the repeats after "
                  "warm-up, spread p10..p90. step_time is the least-squares fit (relative error) "
                  "of T(B) + per_context_token_s x (KV tokens of the batch's requests); "
                  "`measurements` lists every point with the fit's prediction and error."),
        "grid": {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(grid).items()},
        "seed": seed,
        "fit": fit.summary(),
        "measurements": [p.as_dict() for p in fit.points],
    }
    if roofline is not None:
        rows = analytic_errors(roofline, timings)
        ratios = np.array([r["analytic_over_measured"] for r in rows])
        extra["analytic_comparison"] = {
            "gpu": roofline.gpu.name, "settings": asdict(roofline.s),
            "median_analytic_over_measured": float(np.median(ratios)),
            "points": rows}
    max_tokens = int(max(t.batch_tokens for t in timings))
    profile = HardwareProfile(
        name=name, source="measured", step_curve=Curve.of(fit.batch_tokens, significant(fit.seconds)),
        per_context_token_s=float(significant(fit.per_context_token_s)), device=describe_device(device),
        model=model_name, gpus_per_replica=1, max_batch_tokens=max_tokens,
        max_batch_requests=int(max(grid.batches)), extra=extra)
    return profile, fit
