"""Verification rules and logit warping as pure functions."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dspark_sim.decode.sampling import Sampling, sample_from
from dspark_sim.decode.verify import (verify, verify_deterministic, verify_greedy,
                                      verify_sampled)
from dspark_sim.errors import InputError


def onehot_logits(tokens, vocab=6):
    logits = torch.zeros(len(tokens), vocab)
    logits[torch.arange(len(tokens)), torch.tensor(tokens)] = 5.0
    return logits


def test_greedy_accepts_matching_prefix_then_corrects():
    logits = onehot_logits([2, 3, 4, 5])            # target wants 2, 3, 4 then 5
    assert verify_greedy(torch.tensor([2, 3, 4]), logits).__dict__ == {"accepted": 3, "token": 5}
    assert verify_greedy(torch.tensor([2, 0, 4]), logits).__dict__ == {"accepted": 1, "token": 3}
    assert verify_greedy(torch.tensor([1, 3, 4]), logits).__dict__ == {"accepted": 0, "token": 2}
    assert verify_greedy(torch.tensor([], dtype=torch.long), logits[:1]).token == 2


def test_sampled_identical_distributions_always_accept():
    p = torch.softmax(torch.randn(4, 6), -1)
    g = torch.Generator().manual_seed(0)
    for _ in range(50):
        drafts = sample_from(p[:3], g)
        assert verify_sampled(drafts, p, p[:3].clone(), g).accepted == 3


def test_sampled_rejection_resamples_from_residual_only():
    p = torch.tensor([[0.5, 0.5, 0.0], [0.2, 0.3, 0.5]])
    q = torch.tensor([[0.0, 0.0, 1.0]])                # draft proposes token 2, which p forbids
    g = torch.Generator().manual_seed(0)
    seen = {verify_sampled(torch.tensor([2]), p, q, g).token for _ in range(200)}
    assert seen == {0, 1}                               # never 2: residual max(0, p - q)


def test_deterministic_draft_is_the_sampled_token_when_accepted():
    p = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    g = torch.Generator()
    assert verify_deterministic(torch.tensor([1]), p, g).__dict__ == {"accepted": 1, "token": 2}
    assert verify_deterministic(torch.tensor([0]), p, g).__dict__ == {"accepted": 0, "token": 1}


def test_verify_dispatches_and_checks_shapes():
    logits = onehot_logits([2, 3])
    assert verify(torch.tensor([2]), logits, None, Sampling(0.0)).accepted == 1
    with pytest.raises(ValueError):
        verify(torch.tensor([2, 3]), logits, None, Sampling(0.0))


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10_000), temp=st.floats(0.1, 3.0), top_k=st.integers(0, 8),
       top_p=st.floats(0.05, 1.0))
def test_warp_is_a_distribution_on_the_kept_tokens(seed, temp, top_k, top_p):
    logits = torch.randn(3, 8, generator=torch.Generator().manual_seed(seed)) * 3
    s = Sampling(temp, top_k, top_p)
    probs = s.probs(logits)
    assert torch.allclose(probs.sum(-1), torch.ones(3), atol=1e-5)
    kept = (probs > 0).sum(-1)
    if top_k:
        assert (kept <= top_k).all()
    # top-p keeps the smallest prefix of the sorted tempered distribution reaching top_p
    tempered = torch.softmax(logits / temp, -1)
    if not top_k:
        for row in range(3):
            sorted_p = tempered[row].sort(descending=True).values
            need = int((torch.cumsum(sorted_p, 0) < top_p - 1e-6).sum()) + 1
            assert kept[row] <= max(need, 1) + 1      # +1: ties at the boundary
            assert probs[row].argmax() == logits[row].argmax()


def test_greedy_probs_are_one_hot_and_sample_is_argmax():
    logits = torch.tensor([[0.1, 2.0, -1.0]])
    s = Sampling(0.0)
    assert s.probs(logits).tolist() == [[0.0, 1.0, 0.0]]
    assert s.sample(logits).tolist() == [1]


def test_sample_from_matches_probabilities():
    p = torch.tensor([0.1, 0.0, 0.6, 0.3])
    g = torch.Generator().manual_seed(0)
    draws = sample_from(p.expand(20_000, 4), g)
    freq = torch.bincount(draws, minlength=4).float() / 20_000
    assert freq[1] == 0
    assert torch.allclose(freq, p, atol=0.015)


@pytest.mark.parametrize("kwargs,field", [({"temperature": -0.5}, "--temperature"),
                                          ({"top_k": -1}, "--top-k"),
                                          ({"top_p": 0.0}, "--top-p"),
                                          ({"temperature": float("nan")}, "--temperature")])
def test_bad_sampling_options(kwargs, field):
    with pytest.raises(InputError) as err:
        Sampling(**kwargs)
    assert err.value.field == field
