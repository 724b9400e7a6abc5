"""Must hold: on synthetic cases with known answers the sweep's frontier points and SLA table
equal the closed-form values.

1. Lock step (exact): C identical users (prompt 1, output L), step_time(B) = s0 + s1 B,
   unlimited batching, every draft accepted. A static-k policy (ar: k = 0, mtp1: k = 1) turns
   every request into one prefill iteration S(C) and (L-1)/(k+1) decode iterations
   S(C(k+1)), so tps_user = (k+1) / S(C(k+1)) for every request and
   throughput = C L / (S(C) + (L-1)/(k+1) S(C(k+1))).
2. Random acceptance (constant step S, position acceptance alpha): the steps N a request
   needs have a distribution computed exactly by recursion over the tokens still owed;
   throughput = C L / (S (1 + E[N])) and the median tps_user = (L-1) / (S median(N)).
"""
import numpy as np
import pytest
from sweepkit import write_constant_hw, write_identical_trace, write_linear_hw, write_parametric

from dspark_sim.sweep.frontier import tps_column
from dspark_sim.sweep.run import SweepConfig, run_sweep

S0, S1, L = 0.005, 0.0002, 61
USERS = [1, 2, 4, 8, 16, 32, 64]
SLAS = [40.0, 80.0, 150.0, 250.0]


@pytest.fixture(scope="module")
def lock_step(tmp_path_factory):
    d = tmp_path_factory.mktemp("lock")
    cfg = SweepConfig(trace=str(write_identical_trace(d / "t.jsonl", 5, 1, L)),
                      policies=["ar", "mtp1", "static-3"], hw=str(write_linear_hw(d / "hw.yaml", S0, S1)),
                      acceptance={"mtp1": str(write_parametric(d / "m.acceptance.json", [1.0], "mtp1")),
                                  "static-3": str(write_parametric(d / "d.acceptance.json", [1.0] * 3))},
                      points=len(USERS), load_range=(1, 64), requests_per_user=3, slas=SLAS,
                      percentile=50, baseline="mtp1")
    return run_sweep(cfg)


def closed_form(k: int, users: np.ndarray, prefill: str = "local") -> tuple[np.ndarray, np.ndarray]:
    step = lambda b: S0 + S1 * b  # noqa: E731
    tps = (k + 1) / step(users * (k + 1))
    decode = (L - 1) // (k + 1) * step(users * (k + 1))
    if prefill == "disaggregated":      # decode tokens only, no prefill iteration
        return tps, users * (L - 1) / decode
    return tps, users * L / (step(users) + decode)


def test_disaggregated_lock_step_matches_closed_form(tmp_path):
    cfg = SweepConfig(trace=str(write_identical_trace(tmp_path / "t.jsonl", 5, 300, L)),
                      policies=["ar", "static-3"], hw=str(write_linear_hw(tmp_path / "hw.yaml", S0, S1)),
                      acceptance={"static-3": str(write_parametric(tmp_path / "d.acceptance.json", [1.0] * 3))},
                      points=len(USERS), load_range=(1, 64), requests_per_user=3, slas=[80.0],
                      prefill="disaggregated", baseline=None)
    res = run_sweep(cfg).results
    for policy, k in (("ar", 0), ("static-3", 3)):
        rows = res[res["policy"] == policy].sort_values("load")
        tps, thr = closed_form(k, rows["load"].to_numpy(), "disaggregated")
        np.testing.assert_allclose(rows[tps_column(50)], tps, rtol=1e-6)
        np.testing.assert_allclose(rows["throughput_tok_s_per_gpu"], thr, rtol=1e-6)
        np.testing.assert_allclose(rows["ttft_p99_s"], 0.0, atol=1e-12)


def test_lock_step_points_match_closed_form(lock_step):
    res = lock_step.results
    for policy, k in (("ar", 0), ("mtp1", 1), ("static-3", 3)):
        rows = res[res["policy"] == policy].sort_values("load")
        users = rows["load"].to_numpy()
        np.testing.assert_array_equal(users, USERS)
        tps, thr = closed_form(k, users)
        for col in (tps_column(10), tps_column(50), tps_column(90), "tps_user_mean"):
            np.testing.assert_allclose(rows[col], tps, rtol=1e-6, err_msg=f"{policy} {col}")
        np.testing.assert_allclose(rows["throughput_tok_s_per_gpu"], thr, rtol=1e-6, err_msg=policy)
        np.testing.assert_allclose(rows["verify_tokens"], k + 1)
        np.testing.assert_allclose(rows["concurrency"], users, rtol=1e-9)


def test_lock_step_sla_table_matches_closed_form(lock_step):
    sla = lock_step.sla.set_index(["policy", "sla_tps_user"])
    expect = {}
    for policy, k in (("ar", 0), ("mtp1", 1), ("static-3", 3)):
        tps, thr = closed_form(k, np.array(USERS, dtype=float))
        order = np.argsort(tps)          # every point is on the frontier: tps falls as C grows
        for s in SLAS:
            row = sla.loc[(policy, s)]
            if s > tps.max():
                assert row["status"] == "unmet" and np.isnan(row["throughput_tok_s_per_gpu"])
                expect[policy, s] = 0.0
            elif s <= tps.min():
                assert row["status"] == "lower-bound"
                assert row["throughput_tok_s_per_gpu"] == pytest.approx(thr.max(), rel=1e-6)
                expect[policy, s] = thr.max()
            else:
                assert row["status"] == "interpolated"
                value = np.interp(s, tps[order], thr[order])
                assert row["throughput_tok_s_per_gpu"] == pytest.approx(value, rel=1e-6), (policy, s)
                expect[policy, s] = value
    # the statuses the cases were chosen to cover
    assert sla.loc[("ar", 250.0), "status"] == "unmet"
    assert sla.loc[("static-3", 40.0), "status"] == "lower-bound"
    assert sla.loc[("ar", 80.0), "status"] == "interpolated"
    for s in SLAS:
        base = expect["mtp1", s]
        for policy in ("ar", "static-3"):
            gain = sla.loc[(policy, s), "gain_vs_baseline"]
            if base > 0:
                assert gain == pytest.approx(expect[policy, s] / base - 1, rel=1e-6, abs=1e-9)
            elif expect[policy, s] > 0:
                assert np.isinf(gain)


def steps_distribution(alpha: float, k: int, tokens: int) -> np.ndarray:
    """P(N = n): decode steps to emit `tokens` when a step emits 1 + min(A, k) tokens and
    P(A >= j) = alpha^j."""
    px = np.array([alpha ** j * (1 - alpha) for j in range(k)] + [alpha ** k])   # P(X = 1 + j)
    dist = [np.eye(1, tokens + 1, 0)[0]]                          # 0 tokens owed: N = 0
    for m in range(1, tokens + 1):
        d = np.zeros(tokens + 1)
        for j, p in enumerate(px):
            d[1:] += p * dist[max(m - (j + 1), 0)][:-1]
        dist.append(d)
    return dist[tokens]


def test_random_acceptance_matches_renewal_closed_form(tmp_path):
    step, alpha, k, users = 0.01, 0.8, 3, 48
    cfg = SweepConfig(trace=str(write_identical_trace(tmp_path / "t.jsonl", 7, 1, L)),
                      policies=["static-3"], hw=str(write_constant_hw(tmp_path / "hw.yaml", step)),
                      acceptance={"static-3": str(write_parametric(tmp_path / "a.acceptance.json",
                                                                   [alpha] * k))},
                      points=1, load_range=(users, users), requests_per_user=40, slas=[100.0],
                      percentile=50, baseline=None)
    res = run_sweep(cfg).results
    row = res[res["policy"] == "static-3"].iloc[0]
    p = steps_distribution(alpha, k, L - 1)
    n = np.arange(len(p))
    mean_n = float((n * p).sum())
    assert row["measured_requests"] > 1000
    assert row["throughput_tok_s_per_gpu"] == pytest.approx(users * L / (step * (1 + mean_n)), rel=0.02)
    cdf = np.cumsum(p)
    n_lo, n_hi = int(np.searchsorted(cdf, 0.4)), int(np.searchsorted(cdf, 0.6))
    assert (L - 1) / (step * n_hi) <= row[tps_column(50)] <= (L - 1) / (step * n_lo)
    mean_tps = float(((L - 1) / (step * np.maximum(n, 1)) * p).sum())
    assert row["tps_user_mean"] == pytest.approx(mean_tps, rel=0.02)
    # tau of the drafts (1 + accepted drafts per step), and tps_user ~ tau / S
    tau = 1 + sum(alpha ** j for j in range(1, k + 1))
    assert row["mean_tau"] == pytest.approx(tau, rel=0.03)
