"""Time a Hugging Face causal LM on the current device: verify steps with a KV cache, prefill chunks.

One `Timing` per grid point keeps every repeat's seconds; medians and the p10-p90 spread come
from them. `fit.py` turns the timings into a hardware profile. Drafter costs use the same
`time_call` (the draft-timing pass plugs drafters in as callables; see `Timing.op`).
"""
from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from typing import Callable

import numpy as np


@dataclass
class Timing:
    """Repeated wall-clock seconds of one operation at one grid point."""

    op: str              # "decode" (verify step), "prefill" (one request's chunk), "draft:KIND"
    requests: int        # requests in the forward
    width: int           # tokens per request in the forward (verify width, chunk length, gamma)
    context: int         # KV tokens each request holds before the forward
    samples_s: list[float] = field(default_factory=list)
    tokens: int | None = None   # batch tokens when the rows are ragged (a serving engine's
                                # iteration: R requests, not all drafting); else R x width

    @property
    def batch_tokens(self) -> int:
        return self.tokens if self.tokens is not None else self.requests * self.width

    @property
    def context_tokens(self) -> int:
        """KV tokens of the batch's requests, each request counted once (the profile's context)."""
        return self.requests * self.context

    @property
    def median_s(self) -> float:
        return float(np.median(self.samples_s))

    @property
    def p10_s(self) -> float:
        return float(np.percentile(self.samples_s, 10))

    @property
    def p90_s(self) -> float:
        return float(np.percentile(self.samples_s, 90))

    def as_dict(self) -> dict:
        """Summary for the profile's `measurements` list."""
        return {"op": self.op, "requests": self.requests, "width": self.width,
                "context": self.context, "batch_tokens": self.batch_tokens,
                "context_tokens": self.context_tokens, "median_s": self.median_s,
                "p10_s": self.p10_s, "p90_s": self.p90_s, "repeats": len(self.samples_s)}


@dataclass(frozen=True)
class ProfileGrid:
    """Where to time: verify steps of R requests x w tokens at each context; prefill chunks."""

    batches: tuple[int, ...] = (1, 2, 4, 8)        # R, requests per verify step
    widths: tuple[int, ...] = (1, 2, 4, 8)         # w, tokens per request (1 .. gamma + 1)
    contexts: tuple[int, ...] = (64, 512)          # KV tokens per request
    prefill_chunks: tuple[int, ...] = (16, 64, 256)  # one request's prompt chunk, empty cache
    repeats: int = 7
    warmup: int = 2

    def points(self) -> int:
        """Number of timed grid points."""
        return len(self.batches) * len(self.widths) * len(self.contexts) + len(self.prefill_chunks)


def device_sync(device) -> Callable[[], None]:
    """A function that waits for queued work on `device` (no-op on CPU)."""
    import torch

    if torch.device(device).type == "cuda":
        return torch.cuda.synchronize
    return lambda: None


def time_call(fn: Callable[[], object], repeats: int, warmup: int,
              sync: Callable[[], None] = lambda: None,
              after: Callable[[], None] = lambda: None) -> list[float]:
    """Seconds of `fn()` over `repeats` runs after `warmup` untimed ones; `after` runs untimed."""
    for _ in range(warmup):
        fn()
        sync()
        after()
    out = []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        fn()
        sync()
        out.append(time.perf_counter() - start)
        after()
    return out


def time_round_robin(points: list[tuple[Timing, Callable[[], object], Callable[[], None]]],
                     grid: "ProfileGrid", sync: Callable[[], None]) -> None:
    """Time every point's call once per round (`grid.warmup` untimed rounds, then
    `grid.repeats` timed ones), so a slow spell of a shared machine falls on all points alike;
    each point's `after` runs untimed after its call."""
    for round_ in range(grid.warmup + grid.repeats):
        for point, fn, after in points:
            seconds = time_call(fn, 1, 0, sync, after=after)
            if round_ >= grid.warmup:
                point.samples_s.extend(seconds)


def _crop(cache, length: int) -> None:
    """Cut a transformers cache back to `length` tokens (the call's convention varies by version)."""
    current = cache.get_seq_length()
    if current == length:
        return
    try:
        cache.crop(length - current)       # newer: negative count of tokens to remove
    except ValueError:
        cache.crop(length)                 # older: the length to keep
    if cache.get_seq_length() != length:
        raise RuntimeError(f"cache crop left {cache.get_seq_length()} tokens, wanted {length}")


def _random_ids(generator, vocab: int, shape: tuple[int, int], device):
    import torch

    return torch.randint(0, vocab, shape, generator=generator).to(device)


def _fill_cache(model, ids, chunk_tokens: int = 8192):
    """A DynamicCache holding `ids` (R x c), filled by chunked prefill, logits only for the last token."""
    from transformers import DynamicCache

    cache = DynamicCache(config=model.config)
    step = max(1, chunk_tokens // ids.shape[0])
    for start in range(0, ids.shape[1], step):
        model(input_ids=ids[:, start:start + step], past_key_values=cache, use_cache=True,
              logits_to_keep=1)
    return cache


def profile_target(model, grid: ProfileGrid, device, seed: int = 0,
                   progress: Callable[[Timing], None] | None = None) -> list[Timing]:
    """Time `model` (a transformers causal LM already on `device`) over `grid`.

    For each R, one KV cache per context is filled; all (context, width) points of that R are
    then timed round-robin (one run of each per round), so that a slow spell of a shared
    machine falls on all of them alike instead of on one point.
    """
    import torch

    generator = torch.Generator().manual_seed(seed)
    vocab = model.config.get_text_config().vocab_size
    sync = device_sync(device)
    timings: list[Timing] = []
    report = progress or (lambda t: None)
    with torch.inference_mode(), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*past_key_values.*deprecated")
        for requests in grid.batches:
            caches = {c: _fill_cache(model, _random_ids(generator, vocab, (requests, c), device))
                      for c in grid.contexts}
            points = [(Timing("decode", requests, w, c),
                       _random_ids(generator, vocab, (requests, w), device), caches[c])
                      for c in grid.contexts for w in grid.widths]
            time_round_robin([(point, lambda ids=ids, cache=cache: model(
                input_ids=ids, past_key_values=cache, use_cache=True),
                lambda cache=cache, c=point.context: _crop(cache, c)) for point, ids, cache in points],
                grid, sync)
            for point, _, _ in points:
                timings.append(point)
                report(point)
            del caches, points
        for chunk in grid.prefill_chunks:
            ids = _random_ids(generator, vocab, (1, chunk), device)

            def prefill():
                from transformers import DynamicCache

                model(input_ids=ids, past_key_values=DynamicCache(config=model.config),
                      use_cache=True, logits_to_keep=1)

            timings.append(Timing("prefill", 1, chunk, 0,
                                  time_call(prefill, grid.repeats, grid.warmup, sync)))
            report(timings[-1])
    return timings
