"""Lossless verification rules (method.md section 1) as small pure functions over one request.

Each rule takes the l drafted tokens of one request and the target's logits at the l + 1
positions [anchor, x_1..x_l] (row k predicts the token after position k) and returns how
many drafts survive plus the one token emitted after them (the correction at the first
rejection, or the bonus token when all l survive). A batched engine calls them per request
row with that row's own l.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .sampling import Sampling, sample_from


@dataclass(frozen=True)
class Verdict:
    """Outcome of verifying one request's drafts."""

    accepted: int   # drafts accepted, 0..l
    token: int      # the correction (first rejected position) or bonus token emitted next


def _first_false(ok: torch.Tensor) -> int:
    """Length of the all-True prefix of a 1-D bool tensor."""
    return int(torch.cumprod(ok.to(torch.int64), dim=0).sum().item()) if ok.numel() else 0


def verify_greedy(drafts: torch.Tensor, logits: torch.Tensor) -> Verdict:
    """T = 0: accept while x_k == argmax p_k, then emit argmax of the next row."""
    best = logits.argmax(dim=-1)                                   # (l + 1,)
    n = _first_false(best[: drafts.numel()] == drafts)
    return Verdict(n, int(best[n].item()))


def verify_sampled(drafts: torch.Tensor, p: torch.Tensor, q: torch.Tensor,
                   generator: torch.Generator | None = None) -> Verdict:
    """Drafts sampled from q: accept x_k with probability min(1, p_k(x_k) / q_k(x_k)); resample
    the first rejected position from norm(max(0, p_k - q_k)); bonus from p_{l+1} if all pass.

    p: (l + 1, V) warped target probabilities; q: (l, V) warped draft probabilities.
    """
    l = drafts.numel()
    rows = torch.arange(l, device=p.device)
    u = torch.rand(l, generator=generator, device=p.device)
    n = _first_false(u * q[rows, drafts] < p[rows, drafts])
    if n == l:
        return Verdict(n, int(sample_from(p[l], generator).item()))
    residual = (p[n] - q[n]).clamp_min(0.0)
    total = residual.sum()
    # A rejection has probability sum(max(0, q - p)) = sum(max(0, p - q)); if rounding makes
    # the residual vanish, p and q agree and p itself is the exact distribution to draw from.
    dist = residual / total if total > 0 else p[n]
    return Verdict(n, int(sample_from(dist, generator).item()))


def verify_deterministic(drafts: torch.Tensor, p: torch.Tensor,
                         generator: torch.Generator | None = None) -> Verdict:
    """Drafts without a distribution (argmax, n-gram): sample y_k ~ p_k and accept while
    y_k == x_k; the first mismatching y_k (or y_{l+1}) is the emitted token."""
    y = sample_from(p, generator)                                  # (l + 1,)
    n = _first_false(y[: drafts.numel()] == drafts)
    return Verdict(n, int(y[n].item()))


def verify(drafts: torch.Tensor, logits: torch.Tensor, q: torch.Tensor | None,
           sampling: Sampling, generator: torch.Generator | None = None) -> Verdict:
    """Pick the rule for this sampling mode and draft kind; warp the target logits with the
    same function the drafter used for q."""
    if drafts.numel() + 1 != logits.shape[0]:
        raise ValueError(f"{drafts.numel()} drafts need {drafts.numel() + 1} logit rows, "
                         f"got {logits.shape[0]}")
    if sampling.greedy:
        return verify_greedy(drafts, logits)
    p = sampling.probs(logits)
    if q is None:
        return verify_deterministic(drafts, p, generator)
    return verify_sampled(drafts, p, q.float(), generator)
