"""Measured hardware profile: time a model, fit the profile, compare with the roofline if asked."""
from __future__ import annotations

from dataclasses import asdict
from typing import Callable

import numpy as np

from ..profiles.hardware import DraftSlope, HardwareProfile
from ..profiles.curve import Curve
from .analytic_profile import significant
from .fit import PointError, StepFit, draft_curve, draft_slope, fit_step_smooth, fit_step_time
from ..profiles.machine import cpu_identity, this_machine
from .profiler import ProfileGrid, Timing, profile_target
from .roofline import Roofline


def describe_device(device: str) -> str:
    """Human-readable device text for the profile: GPU name, or CPU model, ISA and threads."""
    import torch

    if device == "cuda":
        return f"{torch.cuda.get_device_name(0)} (CUDA {torch.version.cuda}, torch {torch.__version__})"
    cpu = cpu_identity()
    isa = f" [{'/'.join(cpu['isa'])}]" if cpu["isa"] else ""
    threads = torch.get_num_threads()
    return (f"{cpu['cpu']}{isa}, {threads} torch thread{'s' if threads != 1 else ''} "
            f"(torch {torch.__version__})")


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
                    progress: Callable[[Timing], None] | None = None,
                    prefill_curve: bool = False) -> tuple[HardwareProfile, StepFit]:
    """Time `model` (transformers' own forward) over `grid`, fit a `source: measured` profile."""
    timings = profile_target(model, grid, device, seed=seed, progress=progress)
    return measured_profile(timings, grid, device, name, model_name, seed, roofline,
                            prefill_curve=prefill_curve)


def measure_engine_profile(target, grid: ProfileGrid, device: str, name: str, model_name: str,
                           seed: int = 0, roofline: Roofline | None = None,
                           drafters: tuple[str, ...] = (), draft_requests: tuple[int, ...] | None = None,
                           draft_context: int = 256,
                           progress: Callable[[Timing], None] | None = None,
                           prefill_curve: bool = False) -> tuple[HardwareProfile, StepFit]:
    """Time the serving engine's iteration step over `grid` and each drafter kind's draft step
    (gamma drafts per request, mtp1 one; block drafters at every depth 1..gamma), then fit the
    profile (with a separate prefill curve when `prefill_curve`)."""
    from ..decode.drafters.config import draft_depths
    from .engine_profile import profile_drafter, profile_drafter_for, profile_engine_target

    timings = profile_engine_target(target, grid, seed=seed, progress=progress)
    draft_timings: list[Timing] = []
    for kind in drafters:
        drafter = profile_drafter_for(kind, target, seed)
        gamma = getattr(getattr(drafter, "cfg", None), "gamma", None) or max(grid.widths) - 1
        for depth in draft_depths(kind, gamma):
            draft_timings += profile_drafter(drafter, target, draft_requests or grid.batches,
                                             draft_context, depth, grid.repeats, grid.warmup, seed,
                                             progress)
    return measured_profile(timings, grid, device, name, model_name, seed, roofline,
                            draft_timings, runner="engine", prefill_curve=prefill_curve)


RUNNER_NOTES = {
    "hf": ("one target forward with a transformers DynamicCache per verify step (R requests x w "
           "tokens at each context) and one request's prefill chunk from an empty cache"),
    "engine": ("the serving engine's own iteration step (dspark_sim/serve: one batched forward of "
               "R ragged requests x w tokens over per-request KV regions at each context, then "
               "each row's greedy verification) and one request's prefill chunk from an empty "
               "region; draft_time is the engine's draft step for R requests (each committing one "
               "token, then proposing)"),
    "decode-loop": ("the decode loop's own steps for one request (dspark_sim/decode/loop_profile.py): "
                    "the target's forward of w tokens with the drafter's feature taps over a "
                    "transformers cache of each context, the drafter's propose() after committing "
                    "one token, and one prompt chunk's prefill from an empty cache"),
    "vllm": ("a vLLM server's own iterations (dspark_sim/vllm/profile.py): bursts of R requests "
             "of C prompt tokens decoding together, each steady iteration's model time from vLLM's "
             "iteration log plus the burst's engine overhead per iteration (its span minus the "
             "summed model time), grouped by the iteration's tokens (R + drafts); prefill = one "
             "request's prompt in one iteration; the n-gram proposer runs inside the measured step"),
}


def draft_profile(draft_timings: list[Timing]) -> tuple[dict[str, Curve], frozenset[str],
                                                       dict[str, DraftSlope], list[dict]]:
    """draft_time curves by kind (median seconds per request count; per sequential draft for
    autoregressive drafters; at the deepest depth, with the slope by drafts, for block drafters
    timed at several depths) and the measured points."""
    from ..decode.drafters.config import AUTOREGRESSIVE_KINDS

    curves, per_draft, slopes, points = {}, set(), {}, []
    for kind in dict.fromkeys(t.op.split(":", 1)[1] for t in draft_timings):
        mine = [t for t in draft_timings if t.op == f"draft:{kind}"]
        if kind not in AUTOREGRESSIVE_KINDS and len({t.width for t in mine}) > 1:
            curve, depth, slope = draft_slope(mine)
            slopes[kind] = DraftSlope(depth, Curve.of(curve.x, significant(slope)))
        else:
            curve = draft_curve(mine)
        if kind in AUTOREGRESSIVE_KINDS:
            per_draft.add(kind)
            curve = Curve.of(curve.x, np.asarray(curve.y) / mine[0].width)
        curves[kind] = Curve.of(curve.x, significant(np.asarray(curve.y)))
        for t in mine:
            points.append({**t.as_dict(), "kind": kind, "per_draft": kind in per_draft})
    return curves, frozenset(per_draft), slopes, points


def measured_profile(timings: list[Timing], grid: ProfileGrid, device: str, name: str,
                     model_name: str, seed: int = 0, roofline: Roofline | None = None,
                     draft_timings: list[Timing] | None = None,
                     runner: str = "hf", prefill_curve: bool = False) -> tuple[HardwareProfile, StepFit]:
    """Fit a `source: measured` profile to timings; keep every point and its error.

    With `prefill_curve` (and both decode and prefill timings) step_time is fitted to the
    decode points alone and the prefill chunks' medians become `prefill_time`."""
    decode = [t for t in timings if t.op != "prefill"]
    chunks = sorted((t for t in timings if t.op == "prefill"), key=lambda t: t.width)
    separate = prefill_curve and bool(decode) and bool(chunks)
    # a serving engine's iterations come at many ragged sizes: the smooth family with a
    # per-request term, not a knot at every observed size
    fitter = fit_step_smooth if runner == "vllm" else fit_step_time
    fit = fitter(decode if separate else timings)
    prefill = Curve.of([t.width for t in chunks], significant(np.array([t.median_s for t in chunks]))) \
        if separate else None
    points = fit.points + ([PointError(t, float(prefill(t.width))) for t in chunks] if separate else [])
    how = ("step_time is fitted to the decode points, prefill_time is the prefill chunks' "
           "medians" if separate else "the prefill chunks are step_time points")
    extra = {
        "notes": (f"Measured with dspark-sim profile: {RUNNER_NOTES[runner]}; medians over the "
                  "repeats after warm-up, spread p10..p90. step_time is the least-squares fit "
                  "(relative error) of T(B) + per_context_token_s x (KV tokens of the batch's "
                  f"requests){' + per_request_s x requests (smooth family)' if runner == 'vllm' else ''}; {how}; `measurements` lists every point with the profile's "
                  "prediction and error."),
        "runner": runner,
        "grid": {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(grid).items()},
        "seed": seed,
        "fit": fit.summary(),
        "measurements": [p.as_dict() for p in points],
    }
    curves, per_draft, slopes, draft_points = draft_profile(draft_timings or [])
    if draft_points:
        extra["draft_measurements"] = draft_points
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
        per_context_token_s=float(significant(fit.per_context_token_s)),
        per_request_s=float(significant(fit.per_request_s)) if fit.per_request_s else 0.0,
        device=describe_device(device), machine=this_machine(device),
        model=model_name, gpus_per_replica=1, max_batch_tokens=max_tokens,
        max_batch_requests=int(max(grid.batches)), draft_curves=curves, per_draft_kinds=per_draft,
        draft_slopes=slopes, prefill_curve=prefill, extra=extra)
    return profile, fit


def refit_measured(prof: HardwareProfile) -> tuple[HardwareProfile, StepFit]:
    """Fit a measured profile's stored points again with today's fit for its runner (the smooth
    family with the per-request term for vLLM). Each point is rebuilt from its stored median and
    p10/p90, so the step fit (on medians) is what a fresh `profile` would give on the same
    timings; pooled draft medians can move slightly. Device, machine, limits and the other
    recorded blocks are kept."""
    from ..errors import InputError

    points = prof.extra.get("measurements")
    if prof.source != "measured" or not points:
        raise InputError(f"profile {prof.name!r} has no measured points to refit (source "
                         f"{prof.source})", field="measurements")

    def timing(m: dict, tokens: bool) -> Timing:
        return Timing(m["op"], m["requests"], m["width"], m["context"],
                      [m["p10_s"], m["median_s"], m["p90_s"]], tokens=m["batch_tokens"] if tokens else None)

    timings = [timing(m, True) for m in points]
    drafts = [timing(m, False) for m in prof.extra.get("draft_measurements", [])]
    grid = ProfileGrid(**{k: tuple(v) if isinstance(v, list) else v for k, v in prof.extra["grid"].items()})
    runner = prof.extra.get("runner", "hf")
    new, fit = measured_profile(timings, grid, "cpu", prof.name, prof.model, prof.extra.get("seed", 0),
                                draft_timings=drafts, runner=runner,
                                prefill_curve=prof.prefill_curve is not None)
    new.device, new.machine = prof.device, dict(prof.machine)
    new.max_batch_tokens, new.max_batch_requests = prof.max_batch_tokens, prof.max_batch_requests
    new.kv_capacity_tokens, new.capture_sizes = prof.kv_capacity_tokens, prof.capture_sizes
    new.extra = {**prof.extra, **{k: v for k, v in new.extra.items() if k != "runner"}}
    return new, fit
