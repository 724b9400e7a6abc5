"""Anchors, block masks, targets and loss terms of the drafter objectives."""
from __future__ import annotations

import math

import torch

from dspark_sim.train.batches import epoch_rows, make_batch
from dspark_sim.train.objectives import (LossWeights, block_targets, compute_loss, head_terms,
                                         position_weights, sample_anchors)
from dspark_sim.train.targethead import TargetHead

from .conftest import KINDS, bound_module, tiny_config


def _batch(cache, rows=2, row_len=160):
    ids = list(range(len(cache.entries)))
    return make_batch(cache, epoch_rows(cache, ids, row_len, seed=0, epoch=0)[:rows], row_len)


def test_anchors_are_valid_distinct_and_seeded(cache):
    batch = _batch(cache)
    a1, v1 = sample_anchors(batch, 20, torch.Generator().manual_seed(3))
    a2, v2 = sample_anchors(batch, 20, torch.Generator().manual_seed(3))
    assert torch.equal(a1, a2) and torch.equal(v1, v2)
    for r in range(a1.shape[0]):
        real = a1[r][v1[r]]
        assert real.unique().numel() == real.numel()
        assert bool(batch.loss_mask[r, real + 1].all())                      # next token is a response token
        assert bool((batch.segment[r, real + 1] == batch.segment[r, real]).all())


def test_block_targets_are_the_next_tokens_and_a_contiguous_prefix(cache):
    batch = _batch(cache)
    anchors, valid = sample_anchors(batch, 30, torch.Generator().manual_seed(0))
    labels, lab_pos, ok = block_targets(batch, anchors, valid, 4)
    assert torch.equal(lab_pos[..., 0][valid], (anchors + 1)[valid])
    b = torch.arange(anchors.shape[0]).view(-1, 1, 1)
    assert torch.equal(labels, batch.tokens[b, lab_pos])
    assert bool((ok[..., 1:] <= ok[..., :-1]).all())                       # once False, stays False


def test_position_weights_follow_exp_decay():
    w = position_weights(7, 4.0, torch.device("cpu"))
    assert torch.allclose(w, torch.tensor([math.exp(-k / 4.0) for k in range(7)]))


def test_block_sees_context_strictly_before_its_anchor_in_its_own_sequence(target, cache):
    mod = bound_module(tiny_config("dflash", target), target).eval()
    batch = _batch(cache, rows=1, row_len=160)
    seg = batch.segment[0]
    # an anchor in the second packed sequence, with context before it in that sequence
    start = int((seg == 1).nonzero()[0])
    a = start + 12
    anchors, valid = torch.tensor([[a]]), torch.tensor([[True]])

    def block_out(taps):
        with torch.no_grad():
            return mod.forward_blocks(taps, batch.tokens, batch.segment, anchors, valid)

    base = block_out(batch.taps)
    later = batch.taps.clone()
    later[0, a:] += 5.0                      # the anchor's own features and everything after
    other = batch.taps.clone()
    other[0, :start] += 5.0                  # another sequence of the packed row
    before = batch.taps.clone()
    before[0, a - 1] += 5.0                  # the context right before the anchor
    assert torch.allclose(block_out(later), base)
    assert torch.allclose(block_out(other), base)
    assert not torch.allclose(block_out(before), base)


def test_tv_over_a_draft_vocabulary_is_exact(target, cache, vocab_ids):
    """TV computed on the draft vocabulary with the cached log-sum-exp equals the TV of the
    full distributions with q = 0 outside the draft vocabulary."""
    mod = bound_module(tiny_config("dspark", target), target, vocab_ids).eval()
    head = TargetHead.from_model(target)
    batch = _batch(cache, rows=1)
    h = torch.randn(10, 32)
    pos = torch.arange(20, 30)
    with torch.no_grad():
        terms = head_terms(mod, head, 4, h, tgt_hidden=batch.last[0, pos], tgt_lse=batch.lse[0, pos],
                           tgt_top=batch.top[0, pos])
        q_full = torch.softmax(mod.vocab.to_full(mod.output_logits(h)), -1)
        p_full = torch.softmax(head.logits(batch.last[0, pos]), -1)
    tv = 0.5 * (q_full - p_full).abs().sum(-1)
    assert torch.allclose(terms[:, 2], tv, atol=1e-4)
    assert torch.equal(terms[:, 3], (q_full.argmax(-1) == p_full.argmax(-1)).float())


def test_dspark_loss_is_the_weighted_sum_of_its_terms(target, cache, vocab_ids):
    mod = bound_module(tiny_config("dspark", target), target, vocab_ids)
    head = TargetHead.from_model(target)
    w = LossWeights(anchors_per_row=16, chunk=50)
    loss, m = compute_loss(mod, _batch(cache), head, w, torch.Generator().manual_seed(0))
    assert math.isclose(loss.item(), 0.1 * m["ce"] + 0.9 * m["tv"] + 1.0 * m["bce"], rel_tol=1e-5)
    assert len(m["accept@k"]) == 4 and all(0.0 <= x <= 1.0 for x in m["accept@k"])


def test_every_kind_has_finite_loss_and_gradients(target, cache, vocab_ids):
    head = TargetHead.from_model(target)
    for kind in KINDS:
        mod = bound_module(tiny_config(kind, target), target, vocab_ids)
        loss, _ = compute_loss(mod, _batch(cache), head, LossWeights(anchors_per_row=16, chunk=64),
                               torch.Generator().manual_seed(0))
        loss.backward()
        grads = [p.grad for p in mod.parameters() if p.requires_grad]
        assert torch.isfinite(loss) and any(g is not None and g.abs().sum() > 0 for g in grads), kind
