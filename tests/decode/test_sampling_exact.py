"""Speculative sampling is distribution-exact: chi-square of the first generated tokens against
the toy target's exact joint distribution; deliberately biased rules fail the same test."""
from collections import Counter

import numpy as np
import pytest
import torch
from scipy import stats
from toys import TableTarget, WrongFixedDrafter, WrongSampledDrafter

import dspark_sim.decode.verify as verify_mod
from dspark_sim.decode.sampling import Sampling, sample_from
from dspark_sim.decode.speculate import speculative_generate
from dspark_sim.decode.verify import Verdict

V, SAMPLES, TOKENS, GAMMA, PROMPT = 5, 20_000, 3, 2, [1, 3]


def chi_square_p(target, drafter, sampling, seed=0) -> float:
    """p-value of the first TOKENS generated tokens (joint) against the exact distribution;
    cells with expected count < 5 are pooled."""
    g = torch.Generator().manual_seed(seed)
    counts, full, partial = Counter(), 0, 0
    for _ in range(SAMPLES):
        out = speculative_generate(target, drafter, PROMPT, max_new_tokens=TOKENS, gamma=GAMMA,
                                   sampling=sampling, generator=g)
        counts[tuple(out.output_ids)] += 1
        full += out.accepted[0] == out.verified[0]
        partial += out.accepted[0] < out.verified[0]
    # The wrong drafter must be both accepted and rejected often, or the test proves little.
    assert full > SAMPLES // 20 and partial > SAMPLES // 20, (full, partial)
    exact = target.joint(PROMPT, TOKENS, sampling)
    total = sum(exact.values())
    assert abs(total - 1) < 1e-5                  # float32 rounding only
    observed = np.array([counts[k] for k in exact], dtype=float)
    expected = np.array([SAMPLES * p / total for p in exact.values()])
    assert observed.sum() == SAMPLES              # nothing outside the exact support
    small = expected < 5
    obs = np.append(observed[~small], observed[small].sum())
    exp = np.append(expected[~small], expected[small].sum())
    keep = exp > 0
    return float(stats.chisquare(obs[keep], exp[keep]).pvalue)


def no_residual_sampled(drafts, p, q, generator=None):
    """Biased: min(1, p/q) acceptance but resampling a rejection from p, not norm(max(0, p - q))."""
    l = drafts.numel()
    rows = torch.arange(l)
    u = torch.rand(l, generator=generator)
    ok = (u * q[rows, drafts] < p[rows, drafts]).long()
    n = int(torch.cumprod(ok, 0).sum())
    return Verdict(n, int(sample_from(p[n], generator)))


def accept_by_p_deterministic(drafts, p, generator=None):
    """Biased: accept a deterministic draft with probability p(x), else resample from p."""
    l = drafts.numel()
    u = torch.rand(l, generator=generator)
    ok = (u < p[torch.arange(l), drafts]).long()
    n = int(torch.cumprod(ok, 0).sum())
    return Verdict(n, int(sample_from(p[n], generator)))


@pytest.fixture
def target():
    return TableTarget(vocab=V, seed=0)


def test_sampled_drafts_are_exact(target):
    assert chi_square_p(target, WrongSampledDrafter(V, seed=1), Sampling(1.0)) > 1e-3


def test_sampled_drafts_exact_with_warping(target):
    """Temperature, top-k and top-p warp target and draft alike."""
    warp = Sampling(temperature=0.7, top_k=4, top_p=0.9)
    assert chi_square_p(target, WrongSampledDrafter(V, seed=1, scale=0.5), warp, seed=1) > 1e-3


def test_deterministic_drafts_are_exact(target):
    assert chi_square_p(target, WrongFixedDrafter(V), Sampling(1.0)) > 1e-3


def test_sampled_without_residual_is_caught(target, monkeypatch):
    monkeypatch.setattr(verify_mod, "verify_sampled", no_residual_sampled)
    assert chi_square_p(target, WrongSampledDrafter(V, seed=1), Sampling(1.0)) < 1e-3


def test_deterministic_accept_by_p_is_caught(target, monkeypatch):
    monkeypatch.setattr(verify_mod, "verify_deterministic", accept_by_p_deterministic)
    assert chi_square_p(target, WrongFixedDrafter(V), Sampling(1.0)) < 1e-3
