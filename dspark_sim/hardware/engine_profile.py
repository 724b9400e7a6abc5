"""Time what the serving engine does per iteration: its batched target step and its draft step.

The target step is the engine's own `ModelRunner.run` over R requests x w tokens, each request
holding `context` tokens in its KV region, followed by the engine's per-row verification; a
prefill point is one request's chunk from an empty region (last-row logits, as the engine
asks for). The draft step is the engine's `DraftPool.propose` for R requests, each of which
first commits one new token (with target features), as in steady-state decoding. So the
simulator is fed the cost of exactly the code the real engine runs.
"""
from __future__ import annotations

import warnings
from typing import Callable

import torch

from ..decode.context import Context
from ..decode.drafters.base import Drafter
from ..decode.target import HFTarget
from ..decode.verify import verify_greedy
from ..serve.drafting import DraftPool
from ..serve.runner import ModelRunner, Segment
from .profiler import ProfileGrid, Timing, device_sync, time_call, time_round_robin


def _ids(generator: torch.Generator, vocab: int, n: int) -> list[int]:
    return torch.randint(0, vocab, (n,), generator=generator).tolist()


def engine_step(runner: ModelRunner, kvs, ids: list[list[int]]) -> None:
    """One decode iteration of the engine: a batched forward over every row, then each row's
    greedy verification (the drafts being the row's tokens after its anchor)."""
    outs = runner.run([Segment(kv, row, "all") for kv, row in zip(kvs, ids)])
    for row, out in zip(ids, outs):
        verify_greedy(torch.tensor(row[1:]), out.logits)


def profile_engine_target(target: HFTarget, grid: ProfileGrid, seed: int = 0,
                          progress: Callable[[Timing], None] | None = None) -> list[Timing]:
    """Time the engine's target step over `grid` (decode points round-robin per R, as
    `profiler.profile_target` does) and its prefill chunks."""
    runner = ModelRunner(target)
    generator = torch.Generator().manual_seed(seed)
    vocab = target.vocab_size
    sync = device_sync(target.device)
    report = progress or (lambda t: None)
    timings: list[Timing] = []
    top = max(grid.widths)
    for requests in grid.batches:
        regions = {}
        for c in grid.contexts:
            kvs = [runner.new_kv(c + top + 1) for _ in range(requests)]
            for kv in kvs:
                for start in range(0, c, 512):
                    runner.run([Segment(kv, _ids(generator, vocab, min(512, c - start)), "none")])
            regions[c] = kvs
        points = [(Timing("decode", requests, w, c),
                   [_ids(generator, vocab, w) for _ in range(requests)], regions[c])
                  for c in grid.contexts for w in grid.widths]
        time_round_robin([(point, lambda kvs=kvs, ids=ids: engine_step(runner, kvs, ids),
                           lambda kvs=kvs, c=point.context: [kv.crop(c) for kv in kvs])
                          for point, ids, kvs in points], grid, sync)
        for point, _, _ in points:
            timings.append(point)
            report(point)
        del regions, points
    for chunk in grid.prefill_chunks:
        ids = _ids(generator, vocab, chunk)

        def prefill():
            runner.run([Segment(runner.new_kv(chunk), ids, "last")])

        timings.append(Timing("prefill", 1, chunk, 0, time_call(prefill, grid.repeats, grid.warmup, sync)))
        report(timings[-1])
    return timings


def profile_drafter(drafter: Drafter, target: HFTarget, requests: tuple[int, ...], context: int,
                    drafts: int, repeats: int, warmup: int, seed: int = 0,
                    progress: Callable[[Timing], None] | None = None) -> list[Timing]:
    """Time the engine's draft step for `drafter`: R requests at `context` tokens each, every
    call first committing one token per request, then proposing `drafts` tokens each."""
    from ..decode.sampling import Sampling

    generator = torch.Generator().manual_seed(seed)
    taps = target.resolve_taps(drafter.taps) if drafter.taps else ()
    sampling = Sampling()
    sync = device_sync(target.device)
    out = []
    for r in requests:
        pool = DraftPool(drafter, target.device)
        ctxs = []
        for rid in range(r):
            ctx = Context(tokens=_ids(generator, target.vocab_size, context), prompt_len=context, taps=taps)
            ctx.commit(_ids(generator, target.vocab_size, 1), _features(ctx, context, target, generator))
            pool.begin(rid, ctx)
            ctxs.append(ctx)
        rids = list(range(r))
        pool.propose(rids, ctxs, [drafts] * r, sampling, None)        # absorbs the context

        def grow():
            for ctx in ctxs:
                ctx.commit(_ids(generator, target.vocab_size, 1), _features(ctx, 1, target, generator))

        grow()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            samples = time_call(lambda: pool.propose(rids, ctxs, [drafts] * r, sampling, None),
                                repeats, warmup, sync, after=grow)
        out.append(Timing(f"draft:{drafter.kind}", r, drafts, context, samples))
        if progress is not None:
            progress(out[-1])
    return out


def _features(ctx: Context, n: int, target: HFTarget, generator: torch.Generator) -> torch.Tensor | None:
    if not ctx.taps:
        return None
    return torch.randn((n, len(ctx.taps), target.hidden_size), generator=generator).to(
        device=target.device, dtype=target.dtype)


def profile_drafter_for(kind: str, target: HFTarget, seed: int = 0) -> Drafter:
    """The drafter to time for `kind`: the registered one when it loads (ngram, shipped
    checkpoints), else a random-init module of the shipped configuration (timing does not
    depend on weight values)."""
    from ..decode.drafters import make_drafter
    from ..errors import InputError

    try:
        return make_drafter(kind, target)
    except InputError:
        from ..decode.drafters.config import KINDS

        if kind not in KINDS:
            raise
    return random_trained_drafter(kind, target, seed)


# The shipped drafters' settings (scripts/ship_drafters.sh): gamma 7, 8192-token draft
# vocabulary, Markov head of rank 64, the other fields from the target's shape.
SHIPPED_SETTINGS = {"gamma": 7, "draft_vocab": 8192, "seq_rank": 64}


def random_trained_drafter(kind: str, target: HFTarget, seed: int = 0) -> Drafter:
    """A trained-drafter module of the shipped configuration with random weights."""
    from ..decode.drafters.checkpoint import build_module
    from ..decode.drafters.config import DrafterConfig
    from ..decode.drafters.trained import TrainedDrafter

    torch.manual_seed(seed)
    cfg = DrafterConfig.for_target(kind, target.model.config, **SHIPPED_SETTINGS)
    return TrainedDrafter(build_module(cfg), target, name=f"{kind} (random init)")
