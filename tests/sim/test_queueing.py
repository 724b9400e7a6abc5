"""Closed-form checks of the serving model: M/D/1 queueing, unlimited batching, speculation maths."""
import numpy as np
import pytest
from simkit import constant_hw, make_trace, parametric

from dspark_sim.sim.cluster.run import simulate
from dspark_sim.sim.output.metrics import requests_frame, summarise

STEP = 0.01


def poisson_arrivals(rate, n, seed):
    return np.cumsum(np.random.default_rng(seed).exponential(1 / rate, n))


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_one_at_a_time_is_md1_lindley(engine):
    # max_batch_requests 1, policy ar, constant step: service = n iterations (prefill emits the
    # first token, then n - 1 decode iterations); each latency follows the Lindley recursion.
    n_tokens, rate = 10, 5.0                   # S = 0.1 s, rho = 0.5
    arrivals = poisson_arrivals(rate, 400 if engine == "reference" else 2000, seed=3)
    trace = make_trace(arrivals, [50] * len(arrivals), [n_tokens] * len(arrivals))
    out = simulate(trace, "ar", constant_hw(STEP, max_batch_requests=1), None, engine=engine)
    latency = (out.table.finish_ns - out.table.arrival_ns) / 1e9
    service = n_tokens * STEP
    finish = np.empty(len(arrivals))
    prev = 0.0
    for i, a in enumerate(arrivals):                    # Lindley: start = max(arrival, previous finish)
        prev = finish[i] = max(a, prev) + service
    np.testing.assert_allclose(latency, finish - arrivals, atol=STEP)
    np.testing.assert_allclose(latency, finish - arrivals, atol=1e-6)   # in fact exact to the ns


def test_md1_mean_sojourn_time():
    n_tokens, rate = 10, 6.0                   # S = 0.1 s, rho = 0.6
    service = n_tokens * STEP
    arrivals = poisson_arrivals(rate, 60_000, seed=11)
    trace = make_trace(arrivals, [20] * len(arrivals), [n_tokens] * len(arrivals))
    out = simulate(trace, "ar", constant_hw(STEP, max_batch_requests=1), None)
    latency = (out.table.finish_ns - out.table.arrival_ns) / 1e9
    rho = rate * service
    theory = rate * service ** 2 / (2 * (1 - rho)) + service      # M/D/1 mean sojourn time
    assert latency.mean() == pytest.approx(theory, rel=0.03)


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_unlimited_batching_latency_is_tokens_times_step(engine):
    rng = np.random.default_rng(5)
    n = 300
    arrivals = np.sort(rng.uniform(0, 20, n))
    outputs = rng.integers(1, 200, n)
    trace = make_trace(arrivals, rng.integers(1, 500, n), outputs)
    out = simulate(trace, "ar", constant_hw(STEP), None, engine=engine)   # no batch or token limits
    latency = (out.table.finish_ns - out.table.arrival_ns) / 1e9
    assert (latency >= outputs * STEP - 1e-9).all()
    assert (latency <= outputs * STEP + STEP + 1e-9).all()      # at most one step of waiting
    assert (latency > outputs * STEP + 1e-9).any()              # ... and some do wait


@pytest.mark.parametrize("k, alpha", [(3, 0.8), (1, 0.87), (5, 0.6)])
def test_static_k_mean_tokens_per_iteration(k, alpha):
    # static-K with a constant conditional acceptance alpha: E[tokens per step] =
    # (1 - alpha^(K+1)) / (1 - alpha).
    n = 40
    trace = make_trace(np.arange(n) * 0.5, [100] * n, [5000] * n)
    acc = parametric({"chat": [alpha] * 5})
    out = simulate(trace, f"static-{k}", constant_hw(STEP), acc, seed=2)
    frame = requests_frame(out.table)
    summary = summarise(frame, policy=f"static-{k}", trace="t", hw="c", acceptance="p", seed=2,
                        gpus=1, iterations=out.iterations, sim_wall_s=0.0)
    expected = (1 - alpha ** (k + 1)) / (1 - alpha)
    assert summary["mean_tau"] == pytest.approx(expected, rel=0.01)
    assert summary["mean_verify_len"] == k
