"""A starting point for DSpark's sequential head that is not a saddle: the bigram statistics of
the training data.

The Markov head adds B(x) = W2 W1[x] to the backbone's logits, where x is the previously drafted
token (the anchor at slot 0). Started at W2 = 0 (and W1 small), both factors' gradients vanish
together (dL/dW1 = W2^T g = 0, dL/dW2 = g W1^T ~ 0): the head stays near zero for the few hundred
steps a CPU budget allows. Here it starts as the best rank-r approximation of the centred
pointwise mutual information of the data's response bigrams over the draft vocabulary,

    M[x, y] = log P(y | x) - log P(y),  P(y | x) = (c(x, y) + beta P(y)) / (c(x) + beta),

(smoothed towards the unigram so rare previous tokens get a small correction; clipped; each row
centred, since a softmax ignores a per-row constant), split as W1 = U sqrt(S), W2 = V sqrt(S) by
a truncated SVD. That is a bigram correction the backbone's logits lack (the backbone sees the
context up to the anchor, never the tokens drafted after it), scaled by `scale`, with both
factors nonzero so both receive gradients from the first step. The RNN head starts as the same
bigram map through its output gate (o ~ W1[x]; the state and hidden-state inputs damped).
"""
from __future__ import annotations

import numpy as np
import torch

from ..decode.drafters.seqheads import MarkovHead, RNNHead
from .featcache import FeatureCache


def bigram_counts(cache: FeatureCache, row_of: np.ndarray, n_rows: int,
                  entries: list[int] | None = None) -> np.ndarray:
    """Counts [n_rows + 1, n_rows] of (previous token row, response token row) pairs over the
    cache's `entries` (default: all; training passes its training split only).

    `row_of[token]` is the draft-vocabulary row of a token (n_rows = outside); the previous
    token may be any token (its shared row is n_rows), the next one must be draftable."""
    pairs = []
    for e in (cache.entries if entries is None else [cache.entries[i] for i in entries]):
        toks = np.asarray(cache.tokens[e.offset:e.offset + e.length], dtype=np.int64)
        start = max(1, e.prompt_len)
        if start >= len(toks):
            continue
        prev, nxt = row_of[toks[start - 1:-1]], row_of[toks[start:]]
        keep = nxt < n_rows
        pairs.append(prev[keep] * n_rows + nxt[keep])
    flat = np.concatenate(pairs) if pairs else np.zeros(0, dtype=np.int64)
    counts = np.bincount(flat, minlength=(n_rows + 1) * n_rows)
    return counts.reshape(n_rows + 1, n_rows)


def centred_pmi(counts: np.ndarray, beta: float = 8.0, clip: float = 6.0) -> np.ndarray:
    """Row-centred, smoothed and clipped log P(y | x) - log P(y) of a bigram count matrix."""
    c = counts.astype(np.float64)
    unigram = c.sum(0) + 1.0
    unigram /= unigram.sum()
    cond = (c + beta * unigram) / (c.sum(1, keepdims=True) + beta)
    pmi = np.clip(np.log(cond) - np.log(unigram), -clip, clip)
    pmi -= pmi.mean(1, keepdims=True)
    return pmi.astype(np.float32)


def low_rank_factors(matrix: np.ndarray, rank: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(A [rows, r], B [cols, r]) with A B^T the best rank-r approximation (randomised SVD),
    the singular values split evenly between the factors."""
    m = torch.from_numpy(matrix)
    gen_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        u, s, v = torch.svd_lowrank(m, q=min(rank + 16, min(m.shape)), niter=4)
    finally:
        torch.random.set_rng_state(gen_state)
    root = s[:rank].sqrt()
    return u[:, :rank] * root, v[:, :rank] * root


@torch.no_grad()
def init_seq_head_from_bigrams(head: MarkovHead, cache: FeatureCache, vocab_ids: torch.Tensor,
                               vocab_size: int, *, scale: float = 1.0, beta: float = 8.0,
                               seed: int = 0, entries: list[int] | None = None) -> dict:
    """Set the head's W1 / W2 from the bigram statistics of the cache's `entries` (default all);
    returns what was fitted."""
    n_rows = int(vocab_ids.numel())
    row_of = np.full(vocab_size, n_rows, dtype=np.int64)
    row_of[vocab_ids.long().numpy()] = np.arange(n_rows)
    counts = bigram_counts(cache, row_of, n_rows, entries)
    pmi = centred_pmi(counts, beta=beta)
    a, b = low_rank_factors(pmi, head.rank, seed)
    if isinstance(head, RNNHead):
        # o = W1[x] through tanh: W1 scaled to RMS 0.5, so typical entries stay in tanh's
        # near-linear range and only the largest are soft-clipped; W2 takes the inverse scale.
        # (Scaling by the largest entry instead made W2 10-20x larger than the Markov head's,
        # which amplified every step on o into the logits.)
        shrink = 0.5 / float(a.pow(2).mean().sqrt().clamp_min(1e-6))
        head.w1.weight.copy_(a * shrink)
        head.w2.weight.copy_(b * (scale / shrink))
        # Output-gate rows: W1[x] through an identity and nothing else, so B starts as the
        # Markov head's soft-clipped bigram map; their state and hidden-state columns start at
        # zero but get gradients (their inputs are not zero past the first slot); the gate
        # and candidate rows keep their random start, so the state moves from the first step.
        r = head.rank
        head.joint.weight[2 * r:].zero_()
        head.joint.weight[2 * r:, r:2 * r] = torch.eye(r)
        head.joint.bias[2 * r:].zero_()
    else:
        head.w1.weight.copy_(a)
        head.w2.weight.copy_(b * scale)
    approx = (a @ b.T).numpy()
    err = float(np.linalg.norm(pmi - approx) / max(np.linalg.norm(pmi), 1e-12))
    return {"pairs": int(counts.sum()), "rows_seen": int((counts.sum(1) > 0).sum()),
            "rank": head.rank, "scale": scale, "beta": beta, "relative_error": round(err, 4)}
