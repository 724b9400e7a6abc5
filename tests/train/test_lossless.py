"""Every trained-drafter kind keeps speculative decoding lossless: greedy output identical
to transformers' generate(do_sample=False), and sampled output distributed exactly as the
target's (chi-square against the exact joint distribution of the first tokens)."""
from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from scipy import stats

from dspark_sim.decode.drafters.base import Draft
from dspark_sim.decode.drafters.trained import TrainedDrafter
from dspark_sim.decode.sampling import Sampling
from dspark_sim.decode.speculate import speculative_generate
from dspark_sim.decode.target import HFTarget
from .conftest import KINDS, VOCAB, bound_module, tiny_config, tiny_target

sys.path.insert(0, str(Path(__file__).parents[1] / "decode"))
from greedy_check import compare, reference  # noqa: E402

N_PROMPTS, NEW_TOKENS = 10, 128     # the slow variants: 20 prompts, 20,000 samples


def _prompts(count: int, seed: int = 5) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(3, VOCAB, (int(torch.randint(4, 30, (1,), generator=g)),), generator=g).tolist()
            for _ in range(count)]


def _greedy_identity(kind, target, trained, n_prompts, gate=None, per_prompt=(10, 2)):
    hf = HFTarget(target)
    drafter = TrainedDrafter(trained[kind][0], hf, kind)
    accepted = rejected = skipped = 0
    for i, p in enumerate(_prompts(n_prompts)):
        ref, logits = reference(target, p, NEW_TOKENS)
        gen = speculative_generate(hf, drafter, p, max_new_tokens=NEW_TOKENS, gamma=4,
                                   draft_budget=gate() if gate else None)
        compare(ref, logits, gen.output_ids, f"{kind} prompt {i}")
        accepted += sum(gen.accepted)
        rejected += sum(a < v for a, v in zip(gen.accepted, gen.verified))
        skipped += gen.skipped
    assert accepted > per_prompt[0] * n_prompts and rejected > per_prompt[1] * n_prompts, \
        (kind, accepted, rejected)
    return skipped


def _skip_in_runs():
    """A draft budget that skips runs of 1-3 draft steps (the drafter must catch up on every
    committed position it did not see; block drafters: their context K/V) and asks for 1..4
    drafts in turn when it drafts (block drafters run blocks of that many slots)."""
    calls = [0]

    def gate(ctx) -> int:
        calls[0] += 1
        return 1 + (calls[0] // 5) % 4 if calls[0] % 5 in (0, 1) else 0
    return gate


@pytest.mark.parametrize("kind", KINDS)
def test_skipping_draft_steps_stays_token_identical(kind, target, trained):
    assert _greedy_identity(kind, target, trained, N_PROMPTS, gate=_skip_in_runs, per_prompt=(4, 1)) > 100


@pytest.mark.parametrize("kind", KINDS)
def test_greedy_speculation_is_token_identical_to_generate(kind, target, trained):
    _greedy_identity(kind, target, trained, N_PROMPTS)


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_greedy_identity_twenty_prompts(kind, target, trained):
    _greedy_identity(kind, target, trained, 20)


V, SAMPLES, TOKENS, PROMPT = 6, 20_000, 3, [1, 4, 2]


def _exact_joint(model, prompt, n, sampling) -> dict[tuple[int, ...], float]:
    """Exact probability of every sequence of the first n generated tokens."""
    out: dict[tuple[int, ...], float] = {}

    def walk(ctx, prob, seq):
        if len(seq) == n:
            out[tuple(seq)] = prob
            return
        with torch.no_grad():
            p = sampling.probs(model(torch.tensor([ctx])).logits[0, -1])
        for t in range(V):
            if p[t] > 0:
                walk(ctx + [t], prob * float(p[t]), seq + [t])
    walk(list(prompt), 1.0, [])
    return out


def chi_square_p(model, drafter, sampling, samples=SAMPLES, seed=0, verify_len=None,
                 draft_budget=None) -> float:
    """p-value of the first TOKENS sampled tokens against their exact joint; `verify_len` /
    `draft_budget` are the loop's hooks, kept across the samples (their state carries over)."""
    target = HFTarget(model)
    g = torch.Generator().manual_seed(seed)
    counts = Counter()
    for _ in range(samples):
        out = speculative_generate(target, drafter, PROMPT, max_new_tokens=TOKENS, gamma=2,
                                   sampling=sampling, generator=g, verify_len=verify_len,
                                   draft_budget=draft_budget)
        counts[tuple(out.output_ids)] += 1
    exact = _exact_joint(model, PROMPT, TOKENS, sampling)
    observed = np.array([counts[k] for k in exact], dtype=float)
    total = sum(exact.values())
    expected = np.array([samples * p / total for p in exact.values()])
    assert observed.sum() == samples                  # nothing outside the exact support
    small = expected < 5
    obs, exp = np.append(observed[~small], observed[small].sum()), np.append(expected[~small], expected[small].sum())
    keep = exp > 0
    return float(stats.chisquare(obs[keep], exp[keep]).pvalue)


@pytest.fixture(scope="module")
def small_vocab_target():
    return tiny_target(seed=3, vocab=V, eos=None, layers=3, sharpen=3.0)


def _random_drafter(kind, model):
    """A random-init (deliberately wrong) drafter whose draft vocabulary omits token 4."""
    cfg = tiny_config(kind, model, draft_vocab=V - 1, gamma=2, taps=[0, 1])
    mod = bound_module(cfg, model, torch.tensor([0, 1, 2, 3, 5]), seed=11)
    with torch.no_grad():                      # make the sequential head matter
        for name, p in mod.named_parameters():
            if name.startswith("seq_head.w"):
                p.normal_(0, 1.0)
    return TrainedDrafter(mod.eval(), HFTarget(model), kind)


@pytest.mark.parametrize("kind", KINDS)
def test_sampled_speculation_is_distribution_exact(kind, small_vocab_target):
    """Top-k / top-p warping applied alike to draft and target. (Sample counts keep the
    default suite short; the slow variant draws 20,000 per kind.)"""
    model = small_vocab_target
    warp = Sampling(temperature=0.9, top_k=5, top_p=0.95)
    samples = 4_000 if kind == "dspark" else 2_000
    assert chi_square_p(model, _random_drafter(kind, model), warp, samples=samples) > 1e-3


@pytest.mark.slow
@pytest.mark.parametrize("kind", KINDS)
def test_sampled_speculation_exact_20k(kind, small_vocab_target):
    model = small_vocab_target
    assert chi_square_p(model, _random_drafter(kind, model), Sampling(1.0), samples=20_000) > 1e-3


def test_a_dishonest_draft_distribution_is_caught(small_vocab_target):
    """Negative control: a drafter that samples from its q but reports a different q (here:
    the second position's q without the sequential bias) biases the output, and the same
    chi-square test detects it."""
    model = small_vocab_target
    honest = _random_drafter("dspark", model)
    m = honest.module

    class Dishonest(TrainedDrafter):
        def propose(self, ctx, gamma, sampling, generator=None):
            draft = super().propose(ctx, gamma, sampling, generator)
            if draft.q is not None and len(draft) > 1:
                with torch.inference_mode():
                    h = m.block_hidden(self._state, ctx.anchor, len(draft))[:2]
                    q = draft.q.clone()
                    q[1] = sampling.probs(m.vocab.to_full(m.output_logits(h[1:2]).float()))[0]
                draft = Draft(draft.tokens, q, draft.confidence)
            return draft

    liar = Dishonest(m, HFTarget(model), "dspark")
    assert chi_square_p(model, liar, Sampling(temperature=1.0), samples=4_000) < 1e-3


def _confidence_reading_drafter(model):
    """The random DSpark drafter with a confidence head that reads only the previous token:
    c_k = 0.88 after draft-vocabulary tokens 0, 2 and 5, 0.12 after 1 and 3 (c_1 reads the
    anchor, c_2 the sampled draft x_1)."""
    drafter = _random_drafter("dspark", model)
    m = drafter.module
    rank = m.cfg.seq_rank
    want = torch.tensor([2.0, -2.0, 2.0, -2.0, 2.0, 0.0])    # logit per W1 row (last: any other token)
    with torch.no_grad():
        w = torch.linalg.lstsq(m.seq_head.w1.weight.float(), want.unsqueeze(1)).solution[:, 0]
        m.conf_head.proj.weight.zero_()
        m.conf_head.proj.weight[0, -rank:] = w
        m.conf_head.proj.bias.zero_()
    return drafter


@pytest.mark.parametrize("lagged", [False, True])
def test_scheduled_sampling_is_distribution_exact(lagged, small_vocab_target):
    """DSpark's scheduler in the loop at T > 0 (Algorithm 1 or the lagged budget, with the
    skip-drafting gate): how many drafts a step verifies depends on confidences that read the
    sampled drafts, the early stop (or the lag) keeps that decision from reading a draft it
    verifies, and the output stays exactly the target's."""
    from dspark_sim.profiles.registry import load_hw_profile
    from dspark_sim.serve.single import ScheduledVerify

    model = small_vocab_target
    hook = ScheduledVerify(load_hw_profile("cpu-2core-smollm2-135m"), "dspark", 2,
                           skip_drafting=True, lagged=lagged)
    p = chi_square_p(model, _confidence_reading_drafter(model), Sampling(temperature=0.9, top_k=5),
                     samples=2_000, verify_len=hook, draft_budget=hook.draft_budget)
    counts = Counter(hook.decisions)
    assert counts[0] > 100 and counts[2] > 100, counts     # steps verify none and both drafts
    assert p > 1e-3


def test_a_verify_length_that_reads_its_own_drafts_is_caught(small_vocab_target):
    """Negative control: Algorithm 1 without its early stop, on the paper's counterexample
    curve SPS(1, 2, 3) = (1, 0.5, 0.45), verifies x_1 and x_2 together only when c_2, which
    reads x_1, is high (with the early stop it verifies nothing there: one draft never pays);
    the output is biased and the same chi-square test sees it (p ~ 1e-5 at 500 samples)."""
    from dspark_sim.sim.speculation.prefix_schedule import prefix_schedule

    model = small_vocab_target
    curve = np.array([1.0, 0.5, 0.45])

    def unstopped(draft, ctx):
        conf = draft.confidence.float().numpy()[None, :]
        return int(prefix_schedule(conf, lambda b: curve[np.asarray(b) - 1], early_stop=False)[0])

    p = chi_square_p(model, _confidence_reading_drafter(model), Sampling(temperature=0.9, top_k=5),
                     samples=1_500, verify_len=unstopped)
    assert p < 1e-3
