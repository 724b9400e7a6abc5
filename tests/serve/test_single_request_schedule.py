"""DSpark's scheduler for one request inside the decode core's loop: its decisions against a
hand calculation of Algorithm 1, and losslessness of the loop when it verifies fewer drafts."""
from __future__ import annotations

import numpy as np
import torch
from servekit import TinySetup, burst_trace
from simkit import table_hw

from dspark_sim.decode.context import Context
from dspark_sim.decode.drafters.base import Draft
from dspark_sim.decode.speculate import speculative_generate
from dspark_sim.serve.single import ScheduledVerify


def _draft(conf) -> Draft:
    return Draft(torch.arange(len(conf)), confidence=torch.tensor(conf, dtype=torch.float32))


def _ctx(n: int = 10) -> Context:
    return Context(tokens=list(range(n)), prompt_len=n)


def _best_prefix(conf, step_s, draft_s):
    """Algorithm 1 at R = 1 by hand: admit drafts while tau * SPS keeps growing."""
    surv = np.cumprod(conf)
    best, tau, l_best = 1.0 / (step_s[1] + draft_s), 1.0, 0
    for j, a in enumerate(surv, start=1):
        tau += a
        v = tau / (step_s[1 + j] + draft_s)
        if v > best:
            best, l_best = v, j
        else:
            break
    return l_best


def test_decisions_match_a_hand_calculation():
    steps = [0.050, 0.050, 0.085, 0.088, 0.090, 0.095]           # seconds at 0..5 batch tokens
    hw = table_hw(range(1, 6), steps[1:], draft={"dspark": {"requests": [1], "seconds": [0.01]}})
    sched = ScheduledVerify(hw, "dspark", gamma=4)
    cases = [[0.95, 0.9, 0.9, 0.9], [0.3, 0.9, 0.9, 0.9], [0.8, 0.2, 0.9, 0.9], [0.6, 0.6, 0.6, 0.6]]
    got = [sched(_draft(c), _ctx()) for c in cases]
    want = [_best_prefix(np.array(c), steps, 0.01) for c in cases]
    assert got == want and sched.decisions == got
    assert got[0] == 4 and got[1] == 0          # confident: verify all; first draft unlikely: none


def test_flat_curve_verifies_everything_and_context_cost_is_counted():
    flat = table_hw([1, 64], [0.02, 0.02], draft={"dspark": {"requests": [1], "seconds": [0.0]}})
    assert ScheduledVerify(flat, "dspark", 5)(_draft([0.1] * 5), _ctx()) == 5
    steep = table_hw([1, 2, 8], [0.010, 0.030, 0.040], per_context=1e-4)
    s = ScheduledVerify(steep, "dspark", 3)
    # 1 + 0.7 tokens at 0.030 + ctx vs 1 token at 0.010 + ctx: a long context makes verifying pay
    assert s(_draft([0.7, 0.0, 0.0]), _ctx(10)) == 0
    assert s(_draft([0.7, 0.0, 0.0]), _ctx(1000)) == 1
    assert ScheduledVerify(steep, "none", 3)(Draft(torch.arange(3)), _ctx()) == 3   # no head: all


def test_scheduled_loop_is_lossless_on_a_tiny_target():
    setup = TinySetup(burst_trace(6, seed=3), seed=3)
    hw = table_hw([1, 2, 3, 5], [0.010, 0.016, 0.017, 0.030])
    decisions = []
    for prompt, (ref, _) in zip(setup.prompts, setup.refs):
        drafter = setup.replay_drafter()
        sched = ScheduledVerify(hw, drafter.kind, 4)
        gen = speculative_generate(setup.target, drafter, prompt, max_new_tokens=len(ref), gamma=4,
                                   verify_len=sched)
        assert gen.output_ids == ref
        assert gen.verified == sched.decisions
        decisions += sched.decisions
    assert len(set(decisions)) > 1       # the scheduler did cut drafts, not verify all
