"""The speculative loop: feature taps and rollback, budget, EOS, and the target wrapper."""
import pytest
import torch
from toys import ReplayDrafter, TableTarget, tiny_llama

from dspark_sim.decode.context import FeatureBuffer
from dspark_sim.decode.drafters import NGramDrafter, make_drafter
from dspark_sim.decode.drafters.base import Draft
from dspark_sim.decode.sampling import Sampling
from dspark_sim.decode.speculate import plain_generate, speculative_generate
from dspark_sim.decode.target import HFTarget, default_taps


class TappingReplay(ReplayDrafter):
    """A replaying drafter that declares taps and checks the context invariant on every step."""

    taps = (0, 1, -1)

    def __init__(self, sequence, vocab):
        super().__init__(sequence, vocab, every=2)
        self.checked = 0
        self.last = None

    def propose(self, ctx, gamma, sampling, generator=None):
        feats = ctx.features
        assert feats.shape == (len(ctx.tokens) - 1, 3, 64)
        self.checked += 1
        self.last = (list(ctx.tokens), feats.clone())
        return super().propose(ctx, gamma, sampling, generator)


@pytest.fixture(scope="module")
def tiny():
    return tiny_llama(seed=0, vocab=260, layers=3)


def test_features_are_those_of_the_committed_prefix(tiny):
    """After rejections and cache crops, the features handed to the drafter equal those of one
    fresh forward over the committed tokens; tap -1 is the pre-norm last hidden state."""
    target = HFTarget(tiny)
    prompt = list(range(20, 40))
    seq = prompt + plain_generate(target, prompt, max_new_tokens=64).output_ids
    drafter = TappingReplay(seq, 260)
    gen = speculative_generate(target, drafter, prompt, max_new_tokens=64, gamma=4)
    assert gen.output_ids == seq[len(prompt):] and drafter.checked == gen.steps
    assert any(a < v for a, v in zip(gen.accepted, gen.verified)), "no rejection exercised"
    tokens, feats = drafter.last
    with torch.no_grad():
        full = tiny(torch.tensor([tokens[:-1]]), output_hidden_states=True)
    hidden = full.hidden_states                         # (embeddings, layer 0 out, ...)
    torch.testing.assert_close(feats[:, 0], hidden[1][0], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(feats[:, 1], hidden[2][0], atol=1e-4, rtol=1e-4)
    logits = target.lm_head(target.final_norm(feats[:, 2]))
    torch.testing.assert_close(logits, full.logits[0], atol=1e-4, rtol=1e-4)


def test_plain_decoding_pays_no_taps_and_cache_tracks_commits(tiny):
    target = HFTarget(tiny)
    lengths = []
    orig = target.forward

    def spy(ids, cache, taps=(), last_only=False):
        out = orig(ids, cache, taps, last_only)
        lengths.append((target.cache_len(cache), len(ids), out.features))
        return out

    target.forward = spy
    gen = plain_generate(target, [5, 6, 7], max_new_tokens=10)
    assert len(gen.output_ids) == 10 and gen.mean_tau == 1.0 and gen.accepted == [0] * 9
    assert all(f is None for _, _, f in lengths)
    assert [n for n, _, _ in lengths] == list(range(3, 13))   # cache = prompt + committed - anchor


def test_budget_is_never_exceeded_but_acceptance_is_recorded():
    target = TableTarget(vocab=5, seed=0)
    seq = [1, 3] + plain_generate(target, [1, 3], max_new_tokens=40).output_ids
    for budget in range(1, 12):
        gen = speculative_generate(target, ReplayDrafter(seq, 5, every=10 ** 9), [1, 3],
                                   max_new_tokens=budget, gamma=4)
        assert gen.output_ids == seq[2: 2 + budget]
        assert all(a == 4 for a in gen.accepted)      # full-gamma acceptance, even at the end


def test_accepted_eos_ends_the_request():
    target = TableTarget(vocab=5, seed=0)
    seq = [1, 3] + plain_generate(target, [1, 3], max_new_tokens=30).output_ids
    eos = seq[2 + 6]                                    # the 7th generated token
    first = seq.index(eos, 2) - 2                       # index of its first generated occurrence
    target.eos_token_ids = frozenset([eos])
    gen = speculative_generate(target, ReplayDrafter(seq, 5, every=10 ** 9), [1, 3],
                               max_new_tokens=30, gamma=4)
    assert gen.output_ids == seq[2: 2 + first + 1] and gen.finish == "eos"
    # Each step emits its accepted drafts plus one token, except when an accepted draft is the
    # EOS (generated indices 5, 10, .. are bonus tokens of a full-acceptance step, not drafts).
    eos_was_draft = first > 0 and first % 5 != 0
    assert 1 + sum(gen.accepted) + gen.steps - eos_was_draft == len(gen.output_ids)


def test_eos_from_prefill_means_no_steps():
    target = TableTarget(vocab=5, seed=0)
    first = plain_generate(target, [1, 3], max_new_tokens=1).output_ids[0]
    target.eos_token_ids = frozenset([first])
    gen = speculative_generate(target, NGramDrafter(), [1, 3], max_new_tokens=10, gamma=3)
    assert gen.output_ids == [first] and gen.steps == 0 and gen.finish == "eos"


def test_sampling_is_reproducible_per_seed():
    target = TableTarget(vocab=5, seed=0)
    runs = [speculative_generate(target, NGramDrafter(), [1, 3, 1, 3], max_new_tokens=30, gamma=3,
                                 sampling=Sampling(1.0),
                                 generator=torch.Generator().manual_seed(s)).output_ids
            for s in (7, 7, 8)]
    assert runs[0] == runs[1] != runs[2]


def test_bad_loop_arguments():
    target = TableTarget()
    with pytest.raises(ValueError):
        speculative_generate(target, NGramDrafter(), [1], max_new_tokens=5, gamma=0)
    with pytest.raises(ValueError):
        speculative_generate(target, NGramDrafter(), [], max_new_tokens=5, gamma=2)
    with pytest.raises(ValueError):
        Draft(torch.tensor([1, 2]), q=torch.ones(1, 5))


def test_default_taps_spread_below_the_top():
    assert default_taps(36) == (1, 9, 17, 25, 33)
    assert default_taps(30) == (1, 8, 14, 20, 27)
    assert all(t < 29 for t in default_taps(30))


def test_feature_buffer_grows_without_losing_rows():
    buf = FeatureBuffer()
    rows = [torch.full((n, 2, 3), float(i)) for i, n in enumerate([1, 70, 5, 200])]
    for r in rows:
        buf.append(r)
    assert torch.equal(buf.view(), torch.cat(rows)) and len(buf) == 276


def test_registry_errors_are_input_errors(tmp_path):
    from dspark_sim.errors import InputError

    with pytest.raises(InputError, match="unknown drafter"):
        make_drafter("no-such-drafter", TableTarget())
    (tmp_path / "ckpt").mkdir()
    with pytest.raises(InputError, match="not a drafter checkpoint"):
        make_drafter(str(tmp_path / "ckpt"), TableTarget())
    (tmp_path / "ckpt" / "config.json").write_text('{"kind": "mystery"}')
    with pytest.raises(InputError, match="not known"):
        make_drafter(str(tmp_path / "ckpt"), TableTarget())
