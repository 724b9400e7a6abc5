"""Builders for the serving-engine tests: a tiny target, traces, prompts, a drafter with confidences."""
from __future__ import annotations

import numpy as np
import torch
from greedy_check import reference
from simkit import make_trace, parametric, table_hw
from toys import tiny_llama

from dspark_sim.decode.context import Context
from dspark_sim.decode.drafters.base import Draft, Drafter
from dspark_sim.decode.target import HFTarget

VOCAB = 260
GAMMA = 4
POLICIES = ["ar", "mtp1", "static-3", "dspark", "dspark-lagged", "goodput"]


def burst_trace(n: int = 9, seed: int = 0):
    """Bursts of simultaneous arrivals; prompts longer than the token budget (chunked prefill)
    and outputs from 1 to 40 tokens."""
    rng = np.random.default_rng(seed)
    arrival = np.sort(np.repeat(rng.uniform(0, 0.06, (n + 2) // 3), 3)[:n])
    prompt = rng.integers(3, 60, n)
    output = rng.integers(1, 41, n)
    output[1] = 1
    return make_trace(arrival, prompt, output, task=["math", "code", "chat"] * (n // 3) + ["chat"] * (n % 3))


def random_prompts(trace, seed: int = 0) -> list[list[int]]:
    """Token prompts of the trace's lengths; half repeat their own opening (n-gram matches)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i, n in enumerate(trace.prompt_tokens):
        p = torch.randint(0, VOCAB, (int(n),), generator=g).tolist()
        if i % 2 and n > 6:
            half = int(n) // 2
            p = p[:half] + p[: int(n) - half]
        out.append(p)
    return out


def hw(max_batch_tokens: int = 24, max_batch_requests: int = 3):
    """A step curve that makes Algorithm 1 stop at different lengths as the batch grows."""
    return table_hw([1, 4, 16, 64], [0.010, 0.011, 0.016, 0.040],
                    max_batch_tokens=max_batch_tokens, max_batch_requests=max_batch_requests)


def acceptance(kind: str = "replay"):
    return parametric({"chat": [0.7, 0.6, 0.5, 0.4], "math": [0.8, 0.7, 0.6, 0.6],
                       "code": [0.9, 0.8, 0.8, 0.7]}, kind=kind)


class ConfidentReplay(Drafter):
    """Proposes the request's true greedy continuation, corrupting some drafts, with random
    confidences (so Algorithm 1 sees varied survivals); per-request state set in `begin`."""

    name = kind = "replay"

    def __init__(self, continuations: dict[tuple[int, ...], list[int]], seed: int = 0) -> None:
        self.continuations = continuations
        self.seed = seed
        self.seq: list[int] = []
        self.g: torch.Generator | None = None

    def begin(self, ctx: Context) -> None:
        prompt = ctx.tokens[: ctx.prompt_len]
        self.seq = prompt + self.continuations[tuple(prompt)]
        self.g = torch.Generator().manual_seed(self.seed + len(prompt))

    def propose(self, ctx, gamma, sampling, generator=None) -> Draft:
        t = len(ctx.tokens)
        assert ctx.tokens == self.seq[:t], "context diverged from the greedy continuation"
        tokens = list(self.seq[t:t + gamma])
        if tokens and torch.rand(1, generator=self.g).item() < 0.5:
            k = int(torch.randint(len(tokens), (1,), generator=self.g))
            tokens[k] = (tokens[k] + 1) % VOCAB
        conf = 0.2 + 0.75 * torch.rand(len(tokens), generator=self.g)
        return Draft(torch.tensor(tokens, dtype=torch.long), confidence=conf)


class TinySetup:
    """A tiny random Llama target and the greedy references of a trace's prompts."""

    def __init__(self, trace, seed: int = 0) -> None:
        self.model = tiny_llama(seed=seed, vocab=VOCAB)
        self.target = HFTarget(self.model)
        self.trace = trace
        self.prompts = random_prompts(trace, seed)
        self.refs = [reference(self.model, p, int(n)) for p, n in zip(self.prompts, trace.output_tokens)]

    def replay_drafter(self) -> ConfidentReplay:
        return ConfidentReplay({tuple(p): ref for p, (ref, _) in zip(self.prompts, self.refs)})
