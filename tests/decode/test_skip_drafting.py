"""The one-request scheduler as the decode loop's draft gate (serve/single.py): it skips draft
steps, with a growing back-off, while the latest confidences say drafting does not pay, and
never decides from the current step's drafts."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from dspark_sim.decode.context import Context
from dspark_sim.decode.drafters.base import Draft
from dspark_sim.decode.loop_profile import speedup_bound, survival_from_tau_histogram
from dspark_sim.profiles.curve import Curve
from dspark_sim.profiles.hardware import DraftSlope, HardwareProfile
from dspark_sim.serve.single import ScheduledVerify

GAMMA = 4


def _hw(step_ms: dict[int, float], draft_ms: float) -> HardwareProfile:
    xs = sorted(step_ms)
    return HardwareProfile(name="toy", source="measured",
                           step_curve=Curve.of(xs, [step_ms[x] / 1e3 for x in xs]),
                           per_context_token_s=0.0, max_batch_tokens=16, max_batch_requests=1,
                           draft_curves={"dspark": Curve.of([1], [draft_ms / 1e3])})


# a CPU-like curve: a second token costs 40% more, a draft step 12 ms of a 50 ms step
CPU = _hw({1: 50, 2: 70, 3: 72, 4: 74, 5: 76, 16: 100}, 12)


def _draft(conf: list[float]) -> Draft:
    return Draft(torch.arange(len(conf)), confidence=torch.tensor(conf))


def _ctx() -> Context:
    return Context(tokens=[1, 2, 3], prompt_len=3)


def test_the_gate_backs_off_while_drafting_does_not_pay_and_resets_when_it_does():
    hook = ScheduledVerify(CPU, "dspark", GAMMA, skip_drafting=True, max_skip=4, smoothing=1.0)
    pattern = []
    weak, strong = [0.2, 0.2, 0.2, 0.2], [0.99, 0.99, 0.99, 0.99]
    for conf in [weak, weak, weak, weak, strong, weak]:
        assert hook.draft_budget(_ctx()) > 0        # a probe: drafting happens
        hook(_draft(conf), _ctx())
        skipped = 0
        while hook.draft_budget(_ctx()) == 0:
            skipped += 1
        pattern.append(skipped)
        hook._skip_left = 0                         # the probe above consumed the gate
    assert pattern == [1, 2, 4, 4, 0, 1]


def test_the_smoothed_gate_keeps_drafting_through_one_weak_step_after_strong_ones():
    strong, weak = [0.99] * GAMMA, [0.2] * GAMMA
    latest = ScheduledVerify(CPU, "dspark", GAMMA, skip_drafting=True, smoothing=1.0)
    smooth = ScheduledVerify(CPU, "dspark", GAMMA, skip_drafting=True, smoothing=0.3)
    for hook in (latest, smooth):
        for conf in (strong, strong, weak):
            hook(_draft(conf), _ctx())
    assert latest.draft_budget(_ctx()) == 0          # the weak step alone decides: skip
    assert smooth.draft_budget(_ctx()) > 0           # 0.7 x (strong gain) + 0.3 x (weak) > 0
    weak_steps = 1
    while smooth.draft_budget(_ctx()) > 0:           # weak steps in a row pull it below 0:
        smooth(_draft(weak), _ctx())                 # gain 1.78 x 0.7^n - 0.26 x (1 - 0.7^n)
        weak_steps += 1
        assert weak_steps < 20
    assert weak_steps == 6
    with pytest.raises(ValueError):
        ScheduledVerify(CPU, "dspark", GAMMA, smoothing=0.0)


def test_drafting_gain_compares_against_a_plain_step_without_the_draft_cost():
    hook = ScheduledVerify(CPU, "dspark", GAMMA, skip_drafting=True)
    # one draft at 0.9: (1 + 0.9) / (70 + 12) ms = 23.2 tok/s  vs  1 / 50 ms = 20 tok/s
    assert hook.drafting_gain(np.array([0.9, 0.0, 0.0, 0.0]), 0) > 0
    # at 0.6 the scheduler would still verify it once drafted (1.6 / 82 > 1 / 62) but drafting
    # does not pay against a plain step (1.6 / 82 < 1 / 50)
    assert hook.drafting_gain(np.array([0.6, 0.0, 0.0, 0.0]), 0) <= 0
    assert hook(_draft([0.6, 0.0, 0.0, 0.0]), _ctx()) == 1


def test_without_skip_drafting_the_gate_always_drafts():
    hook = ScheduledVerify(CPU, "dspark", GAMMA)
    hook(_draft([0.01] * GAMMA), _ctx())
    assert all(hook.draft_budget(_ctx()) > 0 for _ in range(5))


def test_the_speedup_bound():
    step = {1: 0.050, 2: 0.070, 3: 0.072, 4: 0.074, 5: 0.076}
    # every draft accepted: tau(4) = 5 at 76 + 10 ms  ->  5 x 50 / 86
    bound, k = speedup_bound(step.__getitem__, 0.010, np.ones(4))
    assert k == 4 and bound == pytest.approx(5 * 50 / 86)
    # nothing accepted: plain decoding (k = 0) is the best, bound 1
    assert speedup_bound(step.__getitem__, 0.010, np.zeros(4)) == (1.0, 0)
    # a draft step that costs 2 ms per draft made: k = 1 at 2 ms beats k = 4 at 8 ms
    half = np.array([0.6, 0.0, 0.0, 0.0])
    bound, k = speedup_bound(step.__getitem__, lambda k: 0.002 * k, half)
    assert k == 1 and bound == pytest.approx(1.6 * 50 / 72)
    surv = survival_from_tau_histogram([0, 1, 4, 2, 3], [4, 4, 4, 4, 2], 4)
    assert surv.tolist() == [0.75, 0.5, 0.25, 0.25]


def test_the_decode_loop_profile_times_every_width_the_draft_step_and_prefill():
    from toys import tiny_llama

    from dspark_sim.decode.drafters import make_drafter
    from dspark_sim.decode.loop_profile import measure_decode_loop_profile
    from dspark_sim.decode.target import HFTarget
    from dspark_sim.hardware.profiler import ProfileGrid

    target = HFTarget(tiny_llama(seed=0, vocab=260))
    grid = ProfileGrid((1,), (1, 2, 5), (32,), (16,), repeats=2, warmup=1)
    prof, fit = measure_decode_loop_profile(target, [make_drafter("ngram", target)], grid, 4, "cpu",
                                            "toy-loop", "tiny")
    ops = [(m["op"], m["width"]) for m in prof.extra["measurements"]]
    assert ("decode", 1) in ops and ("decode", 5) in ops and prof.extra["runner"] == "decode-loop"
    assert prof.draft_time("ngram", 1) > 0
    with pytest.raises(ValueError):
        measure_decode_loop_profile(target, [], ProfileGrid((1, 2), (1,), (8,), ()), 1, "cpu", "x", "y")


def test_the_draft_budget_is_the_depth_the_scheduler_could_ever_admit():
    # the 4th token costs far more than the 3rd: with every confidence 1, tau x SPS grows
    # 1/62 -> 2/64 -> 3/66 and falls at 4/102, so no more than 2 drafts are ever verified
    jump = _hw({1: 50, 2: 52, 3: 54, 4: 90, 5: 92, 16: 100}, 12)
    hook = ScheduledVerify(jump, "dspark", 7)
    assert hook.depth(0) == 2 and hook.draft_budget(_ctx()) == 2
    assert hook(_draft([1.0] * 2), _ctx()) == 2
    # on a flat curve every draft may pay: the budget is gamma
    assert ScheduledVerify(CPU, "dspark", GAMMA).draft_budget(_ctx()) == GAMMA
    # while the skip-drafting back-off lasts, the budget is 0; then it is one more than the most
    # drafts verified in the recent draft steps (here none: 1), growing by one while all are
    skipping = ScheduledVerify(jump, "dspark", 7, skip_drafting=True)
    skipping(_draft([0.01, 0.01]), _ctx())
    assert skipping.draft_budget(_ctx()) == 0 and skipping.draft_budget(_ctx()) == 1
    assert skipping(_draft([1.0]), _ctx()) == 1 and skipping.draft_budget(_ctx()) == 2
    flat = ScheduledVerify(CPU, "dspark", GAMMA)
    flat(_draft([1.0, 0.01, 0.01, 0.01]), _ctx())
    assert flat.decisions == [1] and flat.draft_budget(_ctx()) == 2
    # the window of draft steps whose most verified drafts cap the budget (`recent`)
    for recent, want in ((1, 2), (2, 4)):
        hook = ScheduledVerify(CPU, "dspark", GAMMA, recent=recent)
        hook(_draft([1.0, 1.0, 1.0, 0.01]), _ctx())
        hook(_draft([1.0, 0.01, 0.01, 0.01]), _ctx())
        assert hook.decisions == [3, 1] and hook.draft_budget(_ctx()) == want
    with pytest.raises(ValueError, match="recent"):
        ScheduledVerify(CPU, "dspark", GAMMA, recent=0)


def test_a_block_drafter_is_priced_at_the_drafts_it_makes():
    # 20 ms at 7 drafts, 2 ms less per draft not made: a 2-draft step costs 10 ms of drafting
    slope = HardwareProfile(name="toy", source="measured",
                            step_curve=Curve.of([1, 2, 3, 4, 8], [0.050, 0.052, 0.054, 0.090, 0.1]),
                            per_context_token_s=0.0, max_batch_tokens=16, max_batch_requests=1,
                            draft_curves={"dspark": Curve.of([1], [0.020])},
                            draft_slopes={"dspark": DraftSlope(7, Curve.of([1], [0.002]))})
    hook = ScheduledVerify(slope, "dspark", 7)
    assert hook.depth(0) == 2
    assert hook.sps(np.array([1]), 0, drafts=2)[0] == pytest.approx(1 / (0.050 + 0.010))
    assert hook.sps(np.array([1]), 0)[0] == pytest.approx(1 / (0.050 + 0.020))
    # a 0.3 first draft pays against a plain step after a 2-draft step, not after a 7-draft one
    assert hook.drafting_gain(np.array([0.3, 0.0]), 0) > 0
    assert hook.drafting_gain(np.array([0.3] + [0.0] * 6), 0) <= 0


# an AVX-512 EPYC's decode loop (2026-12-03): 4 tokens cost less than 2 or 3
JAGGED = _hw({1: 39.0, 2: 62.8, 3: 79.7, 4: 58.9, 5: 68.3, 8: 71.7, 16: 100.0}, 6.4)


def test_algorithm1_stops_before_the_cheap_width_and_the_lagged_budget_reaches_it():
    conf = [0.5, 0.9, 0.9, 0.1]                      # survivals 0.5, 0.45, 0.405, 0.04
    early = ScheduledVerify(JAGGED, "dspark", GAMMA)
    assert early(_draft(conf), _ctx()) == 0          # l = 1 does not pay: the search stops
    lagged = ScheduledVerify(JAGGED, "dspark", GAMMA, lagged=True)
    assert lagged(_draft(conf), _ctx()) == 0         # the first step: Algorithm 1 on its own
    assert lagged._lagged_k == 3                     # the unconstrained maximum: w = 4
    assert lagged(_draft([0.1] * GAMMA), _ctx()) == 3   # verified whatever this step drafted
    assert lagged(_draft(conf), _ctx()) == 0         # sized on the weak step before


def test_the_lagged_decision_never_reads_the_current_step():
    history = [[0.9, 0.6, 0.6, 0.1], [0.5, 0.5, 0.5, 0.5], [0.95, 0.9, 0.2, 0.2]]
    for now in ([0.0] * GAMMA, [1.0] * GAMMA, [0.7, 0.1, 0.9, 0.3]):
        hook = ScheduledVerify(JAGGED, "dspark", GAMMA, lagged=True)
        decisions = [hook(_draft(c), _ctx()) for c in history + [now]]
        expected = ScheduledVerify(JAGGED, "dspark", GAMMA, lagged=True)
        want = [expected(_draft(c), _ctx()) for c in history + [[0.5] * GAMMA]]
        assert decisions == want                    # the last step's count is the same


def test_the_lagged_draft_budget_is_the_unconstrained_depth_and_not_capped():
    hook = ScheduledVerify(JAGGED, "dspark", GAMMA, lagged=True)
    widths = np.arange(1, GAMMA + 2)
    value = widths * hook.sps(widths, len(_ctx().tokens))
    assert hook.draft_budget(_ctx()) == int(value.argmax()) == GAMMA
    for _ in range(3):
        hook(_draft([0.05] * GAMMA), _ctx())          # nothing verified ...
    assert hook.draft_budget(_ctx()) == GAMMA        # ... the budget still drafts deep enough
    capped = ScheduledVerify(JAGGED, "dspark", GAMMA)
    capped(_draft([0.05] * GAMMA), _ctx())
    assert capped.draft_budget(_ctx()) == 1
