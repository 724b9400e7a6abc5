"""The decode loop's own step curve: what one verification step and one draft step cost inside
`speculative_generate` (one request, the target's `forward` with the drafter's taps and a
transformers cache, the drafter's `propose`), not the serving engine's batched step.

`--verify scheduled` prices its choices with this curve (`dspark-sim profile --runner
decode-loop`), and `speedup_bound` gives the best speedup over plain decoding that a step curve
and a measured acceptance allow:

    max over k of  tau(k) x S(1) / (S(k + 1) + draft(k)),   tau(k) = 1 + a_1 + ... + a_k,

where S(w) is the step time at w verified tokens, draft(k) the draft step making k drafts and
a_j the probability that drafts 1..j are all accepted (k = 0 is plain decoding: the bound is
never below 1).
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from ..hardware.profiler import ProfileGrid, Timing, device_sync, time_call, time_round_robin
from .context import Context
from .drafters.base import Drafter
from .drafters.config import draft_depths
from .sampling import Sampling
from .target import Target


def _ids(generator: torch.Generator, vocab: int, n: int) -> torch.Tensor:
    return torch.randint(0, vocab, (n,), generator=generator)


def profile_decode_loop(target: Target, drafter: Drafter | None, grid: ProfileGrid, gamma: int,
                        seed: int = 0, progress: Callable[[Timing], None] | None = None
                        ) -> tuple[list[Timing], list[Timing]]:
    """Time the loop's verify step (w tokens after a context of c, with the drafter's taps) at
    every grid width and context, round-robin, and the drafter's draft step at each context, of
    `gamma` drafts (block drafters: of every depth 1..gamma, since a block of fewer slots costs
    less); returns (decode timings, draft timings). Only R = 1 exists here."""
    gen = torch.Generator().manual_seed(seed)
    taps = target.resolve_taps(drafter.taps) if drafter is not None and drafter.taps else ()
    sync = device_sync(target.device)
    report = progress or (lambda t: None)
    decode: list[Timing] = []
    draft: list[Timing] = []
    for c in grid.contexts:
        cache = target.new_cache()
        prompt = _ids(gen, target.vocab_size, c)
        out = target.forward(prompt, cache, taps, last_only=True)
        points = []
        for w in grid.widths:
            t = Timing("decode", 1, w, c)
            ids = _ids(gen, target.vocab_size, w)
            points.append((t, lambda ids=ids, cache=cache: target.forward(ids, cache, taps),
                           lambda cache=cache, c=c: target.crop(cache, c)))
        time_round_robin(points, grid, sync)
        for t, _, _ in points:
            decode.append(t)
            report(t)
        if drafter is not None:
            for depth in draft_depths(drafter.kind, _most_drafts(drafter, gamma)):
                draft.append(_time_draft(drafter, target, prompt.tolist(), out.features, depth, grid, gen))
                report(draft[-1])
    for chunk in grid.prefill_chunks:
        ids = _ids(gen, target.vocab_size, chunk)
        samples = time_call(lambda: target.forward(ids, target.new_cache(), taps, last_only=True),
                            grid.repeats, grid.warmup, sync)
        decode.append(Timing("prefill", 1, chunk, 0, samples))
        report(decode[-1])
    return decode, draft


def measure_decode_loop_profile(target: Target, drafters: list[Drafter], grid: ProfileGrid, gamma: int,
                                device: str, name: str, model_name: str, seed: int = 0,
                                progress: Callable[[Timing], None] | None = None,
                                prefill_curve: bool = False):
    """A `source: measured` hardware profile of the decode loop (R = 1): verify steps with the
    first drafter's taps, each drafter's draft step of `gamma` drafts (MTP-1: one; block
    drafters at every depth 1..gamma, fitted as `per_draft_seconds`); with
    `prefill_curve` the prompt chunks' timings become a separate `prefill_time` curve and
    step_time is fitted to the verify steps alone (measured_profile)."""
    from ..hardware.measure import measured_profile

    if tuple(grid.batches) != (1,):
        raise ValueError("the decode loop serves one request: batches must be (1,)")
    first = drafters[0] if drafters else None
    timings, draft_timings = profile_decode_loop(target, first, grid, gamma, seed, progress)
    for other in drafters[1:]:
        _, extra = profile_decode_loop(target, other, ProfileGrid((1,), (), grid.contexts, (),
                                                                  grid.repeats, grid.warmup),
                                       gamma, seed, progress)
        draft_timings += extra
    return measured_profile(timings, grid, device, name, model_name, seed, None, draft_timings,
                            runner="decode-loop", prefill_curve=prefill_curve)


def _most_drafts(drafter: Drafter, gamma: int) -> int:
    """The drafts one draft step makes when asked for `gamma`: a trained drafter makes at most
    its own trained gamma."""
    return min(gamma, getattr(getattr(drafter, "cfg", None), "gamma", gamma))


def _time_draft(drafter: Drafter, target: Target, prompt: list[int], features: torch.Tensor | None,
                depth: int, grid: ProfileGrid, gen: torch.Generator) -> Timing:
    """The draft step as the loop pays it, making `depth` drafts (at most `_most_drafts`):
    commit one token (with its features), then propose."""
    ctx = Context(tokens=list(prompt), prompt_len=len(prompt), taps=tuple(drafter.taps))
    ctx.commit([int(_ids(gen, target.vocab_size, 1))], features)   # as after the prefill
    drafter.begin(ctx)
    sampling = Sampling()
    drafter.propose(ctx, depth, sampling)                 # absorbs the context
    timing = Timing(f"draft:{drafter.kind}", 1, depth, len(prompt))     # width = drafts made
    width = None if features is None else features.shape[1:]

    def grow() -> None:
        rows = None if width is None else torch.randn((1, *width), generator=gen).to(features.dtype)
        ctx.commit([int(_ids(gen, target.vocab_size, 1))], rows)

    points = [(timing, lambda: drafter.propose(ctx, depth, sampling), grow)]
    grow()
    time_round_robin(points, grid, device_sync(target.device))
    return timing


def survival_from_tau_histogram(accepted: list[int], verified: list[int], gamma: int) -> np.ndarray:
    """a_1..a_gamma (P(drafts 1..j all accepted)) from per-step accepted counts of steps that
    verified all gamma drafts."""
    full = np.array([a for a, v in zip(accepted, verified) if v >= gamma], dtype=np.int64)
    if full.size == 0:
        return np.zeros(gamma)
    return np.array([(full >= j).mean() for j in range(1, gamma + 1)])


def speedup_bound(step_s: Callable[[int], float], draft_s: float | Callable[[int], float],
                  survival: np.ndarray) -> tuple[float, int]:
    """(best speedup over plain decoding, the k that gives it) for a step-time function of the
    verified tokens, a draft time (seconds, or a function of the drafts made k: a block drafter
    asked for k drafts runs a k-slot block) and survival probabilities a_1..a_gamma."""
    draft = draft_s if callable(draft_s) else (lambda k: draft_s)
    best, best_k = 1.0, 0
    base = step_s(1)
    tau = 1.0
    for k, a in enumerate(survival, start=1):
        tau += float(a)
        ratio = tau * base / (step_s(k + 1) + draft(k))
        if ratio > best:
            best, best_k = ratio, k
    return best, best_k
