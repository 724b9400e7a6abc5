"""The simulator prices the cost terms validation asked for: a block drafter's draft time by
the drafts made, prefill chunks on their own curve; every engine agrees, and the terms reduce
exactly to the old pricing when they say nothing new."""
import numpy as np
import pytest
from simkit import assert_same_outcome, make_trace, parametric, table_hw

from dspark_sim.sim.cluster.run import simulate
from dspark_sim.sim.cost.iteration import IterationCost

STEP = ([1, 4, 16, 64, 256], [0.01, 0.011, 0.014, 0.03, 0.09])
ENGINES = ("reference", "fast", "block")


def hw_with(draft_extra=None, prefill=None, **limits):
    draft = {"dspark": {"requests": [1, 8], "seconds": [0.004, 0.012], **(draft_extra or {})}}
    if prefill is not None:
        limits["prefill_time"] = prefill
    return table_hw(*STEP, draft=draft, **limits)


def test_first_token_of_a_lone_request_is_priced_on_the_prefill_curve():
    """One 100-token prompt, nothing decoding: the first iteration is a pure prefill and costs
    prefill(100); every decode iteration after it costs step(1) (AR drafts nothing)."""
    hw = hw_with(prefill={"prefill_tokens": [10, 210], "seconds": [0.002, 0.022]})
    trace = make_trace([0.0], [100], [4])
    for engine in ENGINES:
        t = simulate(trace, "ar", hw, None, engine=engine).table
        assert t.first_token_ns[0] == round(0.011 * 1e9), engine     # 0.002 + 90 x 1e-4
        assert t.finish_ns[0] - t.first_token_ns[0] == 3 * round(0.01 * 1e9), engine
    old = simulate(trace, "ar", hw_with(), None).table
    assert old.first_token_ns[0] == round(float(hw.step_time(100)) * 1e9)   # the decode curve


def test_static_k_pays_for_the_drafts_it_makes():
    """A single request under static-k with every draft accepted: each decode iteration costs
    step(1 + k) + fixed(1) + k x slope(1), fixed = seconds - drafts x per_draft_seconds."""
    hw = hw_with({"drafts": 7, "per_draft_seconds": [0.0005, 0.001]})
    acc = parametric({"chat": [1.0] * 7})
    trace = make_trace([0.0], [4], [1 + 3 * 5])
    for k in (1, 3, 7):
        expect = float(hw.step_time(1 + k)) + 0.004 - 7 * 0.0005 + k * 0.0005
        for engine in ENGINES:
            t = simulate(make_trace([0.0], [4], [1 + (k + 1) * 5]), f"static-{k}", hw, acc,
                         engine=engine).table
            assert t.steps[0] == 5
            assert t.finish_ns[0] - t.first_token_ns[0] == 5 * round(expect * 1e9), (k, engine)
    # without per_draft_seconds the block costs the same whatever k
    flat = hw_with()
    a = simulate(trace, "static-1", flat, acc).table
    b = simulate(trace, "static-3", flat, acc).table
    assert (a.finish_ns[0] - a.first_token_ns[0]) / a.steps[0] - (b.finish_ns[0] - b.first_token_ns[0]) / b.steps[0] \
        == pytest.approx((float(flat.step_time(2)) - float(flat.step_time(4))) * 1e9, abs=2)


def test_iteration_cost_tables_match_the_profile():
    hw = hw_with({"drafts": 7, "per_draft_seconds": [0.0005, 0.001]},
                 {"prefill_tokens": [10, 200], "seconds": [0.002, 0.022]})
    cost = IterationCost(hw, "dspark")
    r, b, p, d = np.array([1, 3, 8, 2]), np.array([2, 40, 250, 9]), np.array([0, 30, 200, 7]), np.array([1, 4, 7, 0])
    expect = np.rint((np.where(d > 0, hw.draft_time("dspark", r, d), 0.0) + hw.step_time(b, 0, p)) * 1e9)
    got = np.array([cost.iteration_ns(r[i:i + 1], b[i:i + 1], np.zeros(1), d[i:i + 1], int(p[i]))[0]
                    for i in range(4)])
    np.testing.assert_allclose(got, expect, atol=2)


@pytest.mark.parametrize("policy", ["ar", "static-3", "dspark", "goodput", "mtp1"])
def test_terms_that_change_nothing_give_identical_results(policy):
    """A prefill curve equal to the step curve and zero per-draft seconds price exactly as a
    profile without them, on a busy trace with chunked prefill, in every engine."""
    rng = np.random.default_rng(3)
    n = 150
    trace = make_trace(np.cumsum(rng.exponential(0.02, n)), rng.integers(1, 700, n), rng.integers(1, 90, n))
    acc = parametric({"chat": [0.8, 0.7, 0.6, 0.5, 0.4]})
    limits = dict(max_batch_tokens=300, max_batch_requests=16)
    plain = hw_with(**limits)
    same = hw_with({"drafts": 5, "per_draft_seconds": [0.0, 0.0]},
                   {"prefill_tokens": STEP[0], "seconds": STEP[1]}, **limits)
    for engine in ENGINES:
        ref = simulate(trace, policy, plain, acc, replicas=2, engine=engine)
        assert_same_outcome(simulate(trace, policy, same, acc, replicas=2, engine=engine), ref, engine)


@pytest.mark.parametrize("extra,prefill,per_context", [
    (None, None, 0.0),
    ({"drafts": 7, "per_draft_seconds": [0.0005, 0.001]}, None, 1e-6),
    (None, {"prefill_tokens": [8, 64, 300], "seconds": [0.02, 0.01, 0.04]}, 1e-6),
    ({"per_draft": True}, {"prefill_tokens": [10, 210], "seconds": [0.002, 0.022]}, 0.0),
])
def test_one_iteration_forms_equal_the_numpy_form(extra, prefill, per_context):
    """The cost entry's python forms (the loop engine's: drafting_one, draft_ns_one,
    iteration_ns_one, stretch_base with the kernel's rounding) give the numpy forms' values to the
    bit, tables grown on demand as far as the run looks."""
    draft = {"dspark": {"requests": [1, 8], "seconds": [0.004, 0.012], **(extra or {})}}
    limits = {"prefill_time": prefill} if prefill is not None else {}
    hw = table_hw(*STEP, per_context=per_context, draft=draft, **limits)
    cost = IterationCost(hw, "dspark")
    rng = np.random.default_rng(3)
    for _ in range(400):
        r = int(rng.integers(0, 300))
        k = int(rng.integers(0, 6))
        batch = r * (1 + k) + int(rng.integers(0, 6000))
        prefill_tokens = int(rng.integers(0, batch + 1)) if rng.random() < 0.5 else 0
        context = int(rng.integers(0, 10 ** 6))
        want = cost.iteration_ns(np.array([r]), np.array([batch]), np.array([context]),
                                 np.array([k]), prefill_tokens)[0]
        fixed = cost.draft_ns_one(r, k)
        assert fixed == cost.fixed_drafts(k)[r]
        assert cost.iteration_ns_one(fixed, batch, prefill_tokens, context) == want
        if not prefill_tokens:      # the stretch kernel's end of an iteration
            base = cost.stretch_base(fixed, batch)
            assert round(base + cost.context_ns * context if cost.context_ns else base) == want
