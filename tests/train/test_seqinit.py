"""DSpark's sequential head starts from the data's bigram statistics, not from a saddle."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from dspark_sim.train.objectives import LossWeights, compute_loss
from dspark_sim.train.seqinit import bigram_counts, centred_pmi, init_seq_head_from_bigrams
from dspark_sim.train.targethead import TargetHead
from dspark_sim.train.trainer import Trainer, TrainConfig

from .conftest import VOCAB, bound_module, tiny_config

W = LossWeights(anchors_per_row=24, chunk=128)
W_DRAFT = LossWeights(anchors_per_row=24, chunk=128, confidence=0.0)   # the bias path alone


def _dspark(target, vocab_ids, head="markov", seed=0):
    return bound_module(tiny_config("dspark", target, seq_head=head), target, vocab_ids, seed=seed)


def _head_grads(mod, target, cache, weights: LossWeights = W_DRAFT) -> dict[str, float]:
    """Gradient norms of the head's parameters from the drafting loss (the confidence head,
    which also reads W1, left out unless `weights` says otherwise)."""
    from dspark_sim.train.batches import epoch_rows, make_batch, split_entries

    train_ids, _ = split_entries(cache, 0.15)
    rows = epoch_rows(cache, train_ids, 128, 0, 0)[:2]
    loss, _ = compute_loss(mod, make_batch(cache, rows, 128), TargetHead.from_model(target), weights,
                           torch.Generator().manual_seed(0))
    mod.zero_grad()
    loss.backward()
    return {n: float(p.grad.norm()) for n, p in mod.seq_head.named_parameters() if p.grad is not None}


def test_bigram_counts_match_a_direct_count(cache, vocab_ids):
    n_rows = vocab_ids.numel()
    row_of = np.full(VOCAB, n_rows)
    row_of[vocab_ids.numpy()] = np.arange(n_rows)
    counts = bigram_counts(cache, row_of, n_rows)
    direct = np.zeros_like(counts)
    for e in cache.entries:
        toks = cache.tokens[e.offset:e.offset + e.length]
        for t in range(max(1, e.prompt_len), e.length):
            if row_of[toks[t]] < n_rows:
                direct[row_of[toks[t - 1]], row_of[toks[t]]] += 1
    assert counts.sum() > 100 and np.array_equal(counts, direct)
    pmi = centred_pmi(counts)
    assert np.allclose(pmi.mean(1), 0, atol=1e-4)          # a softmax ignores a per-row constant


@pytest.mark.parametrize("head", ["markov", "rnn"])
def test_the_bigram_start_gives_the_head_gradients_from_the_first_step(head, target, cache, vocab_ids):
    zero = _dspark(target, vocab_ids, head)
    g0 = _head_grads(zero, target, cache)
    if head == "markov":
        assert g0["w1.weight"] == 0.0                      # dL/dW1 = W2^T g with W2 = 0
        assert g0["w2.weight"] < 1e-2                      # dL/dW2 = g W1^T with W1 ~ N(0, 0.02)

    mod = _dspark(target, vocab_ids, head)
    info = init_seq_head_from_bigrams(mod.seq_head, cache, mod.vocab.ids, VOCAB)
    assert info["pairs"] > 100
    g = _head_grads(mod, target, cache)
    for name in ("w1.weight", "w2.weight"):
        assert g[name] > 1e-3, (name, g)
    if head == "markov":
        assert g["w2.weight"] > 10 * g0["w2.weight"]
    if head == "rnn":                                       # the state path is not a saddle either
        assert g["joint.weight"] > 1e-3


def _val_tv(mod, target, cache) -> float:
    tr = Trainer(mod, cache, TargetHead.from_model(target), TrainConfig(steps=1, row_len=128,
                 val_fraction=0.15, loss=W), "unused")
    return tr.validate()["tv"]


def test_a_head_fitted_on_the_bigram_source_lowers_the_tv_of_a_frozen_backbone(target, cache, vocab_ids,
                                                                                tmp_path):
    """The tiny target's next token is nearly a function of its current one: a bigram source.
    With the backbone frozen, the bigram start already lowers the held-out TV, and training the
    head alone lowers it further; the zero start moves far less in the same steps."""
    results = {}
    for init in ("zero", "bigram"):
        mod = _dspark(target, vocab_ids)
        if init == "bigram":
            init_seq_head_from_bigrams(mod.seq_head, cache, mod.vocab.ids, VOCAB)
        for name, p in mod.named_parameters():
            p.requires_grad_(name.startswith("seq_head."))
        start = _val_tv(mod, target, cache)
        cfg = TrainConfig(steps=15, row_len=128, rows_per_batch=2, lr=3e-3, val_fraction=0.15,
                          loss=LossWeights(anchors_per_row=24, chunk=128, confidence=0.0))
        Trainer(mod, cache, TargetHead.from_model(target), cfg, tmp_path / init).run()
        results[init] = (start, _val_tv(mod, target, cache))
    (z0, z1), (b0, b1) = results["zero"], results["bigram"]
    print("held-out TV (start, after 15 head-only steps):", results)
    assert b0 < z0 - 0.02, results            # the start alone is a bigram correction
    assert b1 < b0 and b1 < z1 - 0.02, results
    assert (z0 - z1) < (z0 - b1), results
