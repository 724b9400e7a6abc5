"""Train/inference parity: a drafter's incremental decoding path (its own caches, fed
features as a speculative loop would) computes exactly what its training forward computes."""
from __future__ import annotations

import torch

from dspark_sim.train.batches import make_batch

from .conftest import bound_module, tiny_config


def _one_sequence(cache, i=0):
    b = make_batch(cache, [[i]], cache.entries[i].length)
    return b.tokens[0], b.taps[0], b.last[0]


def test_block_drafters_match_their_training_forward(target, cache, vocab_ids):
    tokens, taps, _ = _one_sequence(cache)
    L = tokens.shape[0]
    for kind in ("dflash", "dspark"):
        mod = bound_module(tiny_config(kind, target), target, vocab_ids).eval()
        anchors = torch.tensor([[10, 17, L - 5]])
        with torch.no_grad():
            h_train = mod.forward_blocks(taps[None], tokens[None], torch.zeros(1, L, dtype=torch.long),
                                         anchors, torch.ones_like(anchors, dtype=torch.bool))[0]
            for n, a in enumerate(anchors[0].tolist()):
                state = mod.new_state()
                mod.extend(state, taps[: a - 3])         # features arrive in pieces, as in decoding
                mod.extend(state, taps[a - 3: a])
                h_inf = mod.block_hidden(state, int(tokens[a]))
                assert torch.allclose(h_inf, h_train[n], atol=1e-5), (kind, a)


def test_a_shorter_block_is_the_training_forward_of_that_block_size(target, cache, vocab_ids):
    """Asked for k < gamma drafts, a block drafter runs a block of k slots (the anchor and k - 1
    masks): the same computation as the training forward of a gamma = k copy of the module."""
    import dataclasses

    tokens, taps, _ = _one_sequence(cache)
    L = tokens.shape[0]
    mod = bound_module(tiny_config("dspark", target), target, vocab_ids).eval()
    short = bound_module(dataclasses.replace(mod.cfg, gamma=2), target, vocab_ids).eval()
    short.load_state_dict(mod.state_dict())
    anchors = torch.tensor([[12, L - 4]])
    with torch.no_grad():
        h_train = short.forward_blocks(taps[None], tokens[None], torch.zeros(1, L, dtype=torch.long),
                                       anchors, torch.ones_like(anchors, dtype=torch.bool))[0]
        for n, a in enumerate(anchors[0].tolist()):
            state = mod.new_state()
            mod.extend(state, taps[:a])
            h_inf = mod.block_hidden(state, int(tokens[a]), 2)
            assert h_inf.shape[0] == 2
            assert torch.allclose(h_inf, h_train[n], atol=1e-5), a
            # and it is not the first two slots of the full block (those see 5 more masks)
            assert not torch.allclose(h_inf, mod.block_hidden(state, int(tokens[a]))[:2], atol=1e-5)


def test_eagle3_steps_match_the_training_time_test_unroll(target, cache, vocab_ids):
    tokens, taps, _ = _one_sequence(cache)
    L = tokens.shape[0]
    mod = bound_module(tiny_config("eagle3", target), target, vocab_ids).eval()
    with torch.no_grad():
        outs = mod.forward_ttt(taps[None], tokens[None], torch.zeros(1, L, dtype=torch.long), 4)
        t = 20                                           # last position with features; anchor at t+1
        state = mod.new_state()
        mod.extend(state, taps[:12], tokens[1:13])
        mod.extend(state, taps[12:t + 1], tokens[13:t + 2])
        h, extra = state.last_hidden, []
        assert torch.allclose(h, outs[0][0, t], atol=1e-5)
        for j in range(1, 4):                            # drafted tokens = the true next tokens
            h = mod.step(state, h, tokens[t + 1 + j], j, extra)
            assert torch.allclose(h, outs[j][0, t], atol=1e-5), j


def test_mtp1_matches_its_training_forward(target, cache, vocab_ids):
    tokens, _, last = _one_sequence(cache)
    L = tokens.shape[0]
    mod = bound_module(tiny_config("mtp1", target), target, vocab_ids).eval()
    with torch.no_grad():
        h_train = mod.forward_train(last[None], tokens[None], torch.zeros(1, L, dtype=torch.long))[0]
        state = mod.new_state()
        for lo, hi in ((0, 9), (9, 10), (10, 25)):
            mod.extend(state, last[lo:hi], tokens[lo + 1:hi + 1])
            assert torch.allclose(state.last_hidden, h_train[hi - 1], atol=1e-5), hi
