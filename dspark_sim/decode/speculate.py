"""The speculative decoding loop for one request: draft, verify in one target forward, commit,
roll back. With `NoDrafter` the same loop is plain autoregressive decoding.

Per step, with committed tokens s_0..s_t (anchor s_t, KV cache holding s_0..s_{t-1}):

    draft  x_1..x_k = drafter.propose(ctx, k)        k = draft_budget(ctx) <= gamma (0: no draft step)
    l      = verify_len(draft) or k                  a scheduler may verify fewer
    logits = target.forward([s_t, x_1..x_l])         (l + 1, V), KV cache grows by l + 1
    n, y   = verify(x_1..x_l, logits)                n accepted drafts, then token y
    crop KV cache to s_0..s_t, x_1..x_n;  commit x_1..x_n, y  (y is the next anchor)
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import torch

from .context import Context
from .drafters.base import Draft, Drafter, NoDrafter
from .sampling import Sampling
from .target import Target
from .verify import verify


@dataclass
class Generation:
    """Output and per-step statistics of one request."""

    prompt_ids: list[int]
    output_ids: list[int] = field(default_factory=list)
    accepted: list[int] = field(default_factory=list)      # drafts accepted per verification step
    verified: list[int] = field(default_factory=list)      # drafts verified per step (l)
    confidence: list[list[float]] = field(default_factory=list)  # c_1..c_k per step, if any
    copied: list[list[bool]] = field(default_factory=list)       # copy-biased slots per step, if any
    skipped: int = 0                                       # steps whose draft step was skipped
    finish: str = "length"                                 # "eos" | "length"
    wall_s: float = 0.0                                    # prefill + decode, wall clock

    @property
    def steps(self) -> int:
        """Verification steps (target forwards after the prefill)."""
        return len(self.accepted)

    @property
    def mean_tau(self) -> float:
        """Tokens per verification step: mean accepted drafts + 1 (1.0 for plain decoding)."""
        return sum(self.accepted) / self.steps + 1.0 if self.steps else 1.0

    @property
    def tokens_per_s(self) -> float:
        """Generated tokens per second of wall clock, prefill included."""
        return len(self.output_ids) / self.wall_s if self.wall_s > 0 else 0.0


VerifyLen = Callable[[Draft, Context], int]
DraftBudget = Callable[[Context], int]


def speculative_generate(target: Target, drafter: Drafter, prompt_ids: list[int], *,
                         max_new_tokens: int, gamma: int, sampling: Sampling = Sampling(),
                         generator: torch.Generator | None = None,
                         verify_len: VerifyLen | None = None,
                         draft_budget: DraftBudget | None = None) -> Generation:
    """Generate up to `max_new_tokens` after `prompt_ids`, exactly as the target alone would.

    The first token comes from the prefill. An emitted EOS ends the request. The last step may
    verify drafts beyond the token budget: its acceptance is recorded as measured, but no
    more than `max_new_tokens` tokens are ever emitted. `draft_budget(ctx)`, asked before each
    draft step, says how many drafts to propose (at most gamma; 0 skips the draft step, which
    then verifies the anchor alone, a plain decoding step); it must decide from earlier steps
    only, so the output stays exactly the target's.
    """
    if gamma < 1 or max_new_tokens < 1:
        raise ValueError(f"need gamma >= 1 and max_new_tokens >= 1, got {gamma}, {max_new_tokens}")
    if not prompt_ids:
        raise ValueError("empty prompt")
    taps = drafter.taps
    gen = Generation(prompt_ids=list(prompt_ids))
    start = time.perf_counter()
    cache = target.new_cache()
    out = target.forward(torch.tensor(prompt_ids, dtype=torch.long), cache, taps, last_only=True)
    last = int(sampling.sample(out.logits[-1], generator).item())
    ctx = Context(tokens=list(prompt_ids), prompt_len=len(prompt_ids), taps=taps)
    ctx.commit([last], out.features)
    gen.output_ids.append(last)
    drafter.begin(ctx)

    while len(gen.output_ids) < max_new_tokens and last not in target.eos_token_ids:
        k = gamma if draft_budget is None else max(0, min(gamma, int(draft_budget(ctx))))
        if k == 0:
            draft = Draft.empty(target.device)
            gen.skipped += 1
        else:
            draft = drafter.propose(ctx, k, sampling, generator)
        l = min(len(draft), gamma)
        if verify_len is not None and len(draft) > 0:
            l = max(0, min(l, verify_len(draft, ctx)))
        draft = draft.head(l)
        ids = torch.cat([torch.tensor([ctx.anchor], device=draft.tokens.device), draft.tokens])
        out = target.forward(ids, cache, taps)
        verdict = verify(draft.tokens, out.logits, draft.q, sampling, generator)
        n = verdict.accepted
        target.crop(cache, len(ctx.tokens) + n)          # keep s_0..s_t and x_1..x_n
        new = draft.tokens[:n].tolist() + [verdict.token]
        new = _until_eos(new, target.eos_token_ids)
        gen.accepted.append(min(n, len(new)))           # an accepted EOS ends the run there
        gen.verified.append(l)
        if draft.confidence is not None:
            gen.confidence.append(draft.confidence.float().tolist())
        if draft.copied is not None:
            gen.copied.append(draft.copied.tolist())
        new = new[: max_new_tokens - len(gen.output_ids)]
        # Features of the anchor and the committed drafts: one row per newly committed token.
        ctx.commit(new, None if out.features is None else out.features[: len(new)])
        gen.output_ids.extend(new)
        last = new[-1]
    if gen.output_ids[-1] in target.eos_token_ids:
        gen.finish = "eos"
    gen.wall_s = time.perf_counter() - start
    return gen


def plain_generate(target: Target, prompt_ids: list[int], *, max_new_tokens: int,
                   sampling: Sampling = Sampling(),
                   generator: torch.Generator | None = None) -> Generation:
    """Plain autoregressive decoding through the same loop (no drafts: every step has tau = 1)."""
    return speculative_generate(target, NoDrafter(target), prompt_ids, max_new_tokens=max_new_tokens,
                                gamma=1, sampling=sampling, generator=generator)


def _until_eos(tokens: list[int], eos: frozenset[int]) -> list[int]:
    """`tokens` up to and including the first EOS."""
    for i, t in enumerate(tokens):
        if t in eos:
            return tokens[: i + 1]
    return tokens
