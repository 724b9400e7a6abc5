"""Closed-loop load (sim/cluster/load.py, sim/cluster/arrivals.py): every engine gives the reference engine's
results, users send their next request exactly think_s after the previous one finishes, and a
time-compressed trace keeps its requests."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from simkit import ENGINE_FIELDS, assert_same_outcome, make_trace, parametric, table_hw
from test_conservation import POLICIES, acceptance, check_conservation, hardware, traces

from dspark_sim.errors import InputError
from dspark_sim.sim.cluster.run import simulate
from dspark_sim.sim.core.units import NS
from dspark_sim.sim.cluster.load import ClosedLoop, scale_arrivals


@st.composite
def closed_scenarios(draw):
    trace = draw(traces(max_requests=8))
    loop = ClosedLoop(users=draw(st.integers(1, 6)), requests_per_user=draw(st.integers(1, 4)),
                      think_s=draw(st.sampled_from([0.0, 0.004, 0.05])),
                      offset=draw(st.integers(0, 7)))
    return dict(trace=trace, loop=loop, hw=draw(hardware(loop.requests(trace))), acc=draw(acceptance()),
                policy=draw(st.sampled_from(POLICIES)), replicas=draw(st.integers(1, 3)),
                router="rr", seed=draw(st.integers(0, 3)))


def run(sc, engine):
    return simulate(sc["trace"], sc["policy"], sc["hw"], sc["acc"], replicas=sc["replicas"],
                    router=sc["router"], seed=sc["seed"], engine=engine, closed_loop=sc["loop"],
                    prefill=sc.get("prefill", "local"))


def assert_engines_agree(sc, check, label=""):
    """The fast and block engines give the reference engine's results; `check` holds for all."""
    ref = run(sc, "reference")
    check(sc, ref)
    for engine in ("fast", "block"):
        out = run(sc, engine)
        check(sc, out)
        assert_same_outcome(out, ref, f"{engine} {label}", ENGINE_FIELDS + ("arrival_ns",))


def check_closed_loop(sc, out):
    """Conservation, plus: each user's requests follow one another think_s apart, on its replica."""
    loop, t = sc["loop"], out.table
    check_conservation(dict(sc, trace=loop.requests(sc["trace"])), out)
    rows = np.arange(t.n)
    user, k = loop.user_of(rows), loop.index_of(rows)
    assert (t.arrival_ns[k == 0] == 0).all()
    later = rows[k > 0]
    np.testing.assert_array_equal(t.arrival_ns[later],
                                  t.finish_ns[later - loop.users] + round(loop.think_s * NS))
    np.testing.assert_array_equal(t.replica, user % sc["replicas"])


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(closed_scenarios())
def test_closed_loop_engines_equal_reference(sc):
    assert_engines_agree(sc, check_closed_loop)


def test_closed_loop_busy_every_policy():
    """Many users, chunked prefill, KV pressure and think time on two replicas."""
    rng = np.random.default_rng(3)
    n = 60
    trace = make_trace(np.zeros(n), rng.integers(1, 700, n), rng.integers(1, 90, n),
                       rng.choice(["chat", "code", "math"], n))
    hw = table_hw([1, 4, 16, 64, 256], [0.01, 0.01, 0.012, 0.02, 0.05], per_context=1e-6,
                  draft={"dspark": {"requests": [1, 8], "seconds": [0.001, 0.003]}},
                  max_batch_tokens=384, max_batch_requests=10, kv_capacity_tokens=5000)
    acc = parametric({"chat": [0.7] * 5, "code": [0.85] * 5, "math": [0.9, 0.9, 0.8, 0.8, 0.7]})
    for policy in POLICIES:
        for prefill in ("local", "disaggregated"):
            sc = dict(trace=trace, loop=ClosedLoop(14, 5, think_s=0.02, offset=3), hw=hw, acc=acc,
                      policy=policy, replicas=2, router="rr", seed=2, prefill=prefill)
            assert_engines_agree(sc, check_closed_loop, f"{policy} {prefill}")


def test_lock_step_closed_form():
    """C identical users, linear step time, every draft accepted: all users move in lock step;
    a request takes one prefill iteration S(C) and (L-1)/(k+1) decode iterations S(C(k+1))."""
    s0, s1, users, out_len = 0.01, 1e-4, 4, 61
    hw = table_hw([1, 2], [s0 + s1, s0 + 2 * s1])
    acc = parametric({"chat": [1.0] * 4})
    step = lambda b: s0 + s1 * b  # noqa: E731
    for policy, k in (("ar", 0), ("mtp1", 1), ("static-3", 3)):
        out = simulate(make_trace([0], [1], [out_len]), policy, hw, acc,
                       closed_loop=ClosedLoop(users, 3))
        cycle = step(users) + (out_len - 1) // (k + 1) * step(users * (k + 1))
        expect = np.repeat(np.arange(1, 4) * cycle, users)
        np.testing.assert_allclose(out.table.finish_ns / NS, expect, rtol=1e-7)


def test_scale_arrivals():
    trace = make_trace([0.0, 1.0, 3.0], [5, 6, 7], [2, 3, 4])
    fast = scale_arrivals(trace, 2.0)
    np.testing.assert_allclose(fast.arrival_s, [0.0, 0.5, 1.5])
    np.testing.assert_array_equal(fast.prompt_tokens, trace.prompt_tokens)
    np.testing.assert_array_equal(fast.output_tokens, trace.output_tokens)
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(InputError):
            scale_arrivals(trace, bad)


def test_closed_loop_with_a_total_sends_that_many():
    """`total_requests` N: rows 0..N-1, so the first N mod C users send one more; each user's
    requests still follow one another and every engine agrees."""
    trace = make_trace(np.zeros(5), [30, 40, 50, 60, 70], [9, 12, 15, 6, 20], ["chat"] * 5)
    loop = ClosedLoop(users=3, requests_per_user=3, total_requests=7, offset=1)
    reqs = loop.requests(trace)
    assert len(reqs) == 7 and loop.count == 7
    np.testing.assert_array_equal(np.bincount(loop.user_of(np.arange(7))), [3, 2, 2])
    sc = dict(trace=trace, loop=loop, hw=table_hw([1, 64], [0.01, 0.02]),
              acc=parametric({"chat": [0.8] * 4}), policy="static-2", replicas=1, router="rr", seed=1)
    assert_engines_agree(sc, check_closed_loop, "total")


def test_closed_loop_bad_input():
    for kwargs in (dict(users=0, requests_per_user=1), dict(users=1, requests_per_user=0),
                   dict(users=1, requests_per_user=1, think_s=-1.0),
                   dict(users=2, requests_per_user=2, total_requests=5),
                   dict(users=2, requests_per_user=2, total_requests=0)):
        with pytest.raises(InputError):
            ClosedLoop(**kwargs)


@st.composite
def disaggregated_scenarios(draw):
    if draw(st.booleans()):
        sc = draw(closed_scenarios())
    else:
        trace = draw(traces(max_requests=20))
        sc = dict(trace=trace, loop=None, hw=draw(hardware(trace)), acc=draw(acceptance()),
                  policy=draw(st.sampled_from(POLICIES)), replicas=draw(st.integers(1, 3)),
                  router=draw(st.sampled_from(["rr", "least-outstanding"])), seed=draw(st.integers(0, 3)))
    return dict(sc, prefill="disaggregated")


def check_disaggregated(sc, out):
    """Prefill elsewhere: the first token comes at admission (no prefill iteration), so a
    request's TTFT is its queueing delay and an idle replica starts it at its arrival."""
    if sc["loop"] is not None:
        check_closed_loop(sc, out)
    else:
        check_conservation(sc, out)
    t = out.table
    first_in = np.zeros(t.n, dtype=bool)
    for rep in range(sc["replicas"]):           # the first request a replica ever gets
        mine = np.flatnonzero(t.replica == rep)
        if len(mine):
            first_in[mine[np.argmin(t.arrival_ns[mine])]] = True
    assert (t.first_token_ns[first_in] == t.arrival_ns[first_in]).all()


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(disaggregated_scenarios())
def test_disaggregated_prefill_engines_equal_reference(sc):
    assert_engines_agree(sc, check_disaggregated)


def test_disaggregated_lock_step_closed_form():
    """Decode only: a request is (L-1)/(k+1) iterations of S(C(k+1)), no prefill iteration."""
    s0, s1, users, out_len = 0.01, 1e-4, 4, 61
    hw = table_hw([1, 2], [s0 + s1, s0 + 2 * s1])
    acc = parametric({"chat": [1.0] * 4})
    for policy, k in (("ar", 0), ("static-3", 3)):
        out = simulate(make_trace([0], [50], [out_len]), policy, hw, acc,
                       closed_loop=ClosedLoop(users, 3), prefill="disaggregated")
        cycle = (out_len - 1) // (k + 1) * (s0 + s1 * users * (k + 1))
        np.testing.assert_allclose(out.table.finish_ns / NS, np.repeat(np.arange(1, 4) * cycle, users),
                                   rtol=1e-7)
        np.testing.assert_array_equal(out.table.first_token_ns, out.table.arrival_ns)
