"""Parametric confidences with a signal (`confidence_correlation`): the runs stay the rates' draws,
the confidences become calibrated per-step survivals that know about the run, and every engine
that takes per-step confidences agrees."""
import numpy as np
import pytest
from scipy.special import ndtri
from scipy.stats import rankdata

from dspark_sim.errors import InputError
from dspark_sim.profiles import AcceptanceProfile
from dspark_sim.sim.acceptance.sampler import AcceptanceSampler
from dspark_sim.sim.replay import replay

from simkit import make_trace, table_hw

RATES = [0.85, 0.75, 0.7, 0.6]


def _profile(rho, rates=RATES, kind="dspark"):
    task = {"kind": "parametric", "position_accept": rates}
    if rho is not None:
        task["confidence_correlation"] = rho
    return AcceptanceProfile.from_dict({
        "schema": "dspark-sim/acceptance/v1", "name": f"rho{rho}", "gamma": len(rates),
        "drafter_kind": kind, "default_task": "chat", "tasks": {"chat": task}})


def _draws(rho, n=100_000):
    s = AcceptanceSampler(_profile(rho), np.array(["chat"]), np.array([n + 1]), seed=3)
    steps = np.arange(n)[None, :]
    return s, s.accepted(np.array([0]), steps)[0], s.survival(np.array([0]), steps)[0]


def _auc(score, outcome):
    r = rankdata(score)
    pos, neg = outcome.sum(), (~outcome).sum()
    return (r[outcome].sum() - pos * (pos + 1) / 2) / (pos * neg)


def test_runs_unchanged_confidences_calibrated_and_informative():
    flat, runs0, surv0 = _draws(None)
    assert flat.static_confidence
    np.testing.assert_allclose(surv0, np.broadcast_to(np.cumprod(RATES), surv0.shape))
    aucs = []
    for rho in (0.3, 0.6, 0.9):
        s, runs, surv = _draws(rho)
        assert not s.static_confidence
        np.testing.assert_array_equal(runs, runs0)                    # the same acceptance
        assert np.all(np.diff(surv, axis=1) <= 1e-12)                 # survivals never rise
        for j in range(len(RATES)):
            reached = runs >= j + 1
            assert surv[:, j].mean() == pytest.approx(reached.mean(), abs=0.01)   # calibrated
            k = ndtri(np.clip(surv[:, j], 1e-12, 1 - 1e-12)).std()
            assert k == pytest.approx(rho / np.sqrt(1 - rho * rho), rel=0.05)     # the model's spread
        aucs.append(_auc(surv[:, 0], runs >= 1))
    assert 0.5 < aucs[0] < aucs[1] < aucs[2]                          # more correlation, more known


def test_profile_field_is_checked_and_round_trips(tmp_path):
    prof = _profile(0.45)
    assert prof.tasks["chat"].confidence_correlation == 0.45
    again = AcceptanceProfile.from_dict(prof.to_dict())
    assert again.tasks["chat"].confidence_correlation == 0.45
    assert "confidence_correlation" not in _profile(None).to_dict()["tasks"]["chat"]
    for bad in (1.0, -0.1, "high"):
        with pytest.raises(InputError) as err:
            _profile(bad)
        assert "tasks.chat.confidence_correlation" in str(err.value)


@pytest.mark.parametrize("policy", ["dspark", "vllm-adaptive"])
def test_engines_agree_with_signalled_confidences(policy):
    trace = make_trace(list(np.linspace(0.0, 0.4, 24)), [30] * 24, [60] * 24)
    hw = table_hw([1, 8, 64, 512], [0.010, 0.012, 0.030, 0.200])
    prof = _profile(0.6)
    ref = replay(trace, policy, hw, prof, seed=2, engine="reference")
    for engine in ("fast", "block"):
        try:
            out = replay(trace, policy, hw, prof, seed=2, engine=engine)
        except InputError:            # an engine that cannot run this policy says so
            continue
        for col in ("first_token_s", "finish_s", "steps", "verified_tokens", "output_tokens"):
            np.testing.assert_array_equal(out.requests[col].to_numpy(), ref.requests[col].to_numpy(),
                                          err_msg=f"{policy} {engine} {col}")
        assert out.summary["iterations"] == ref.summary["iterations"]


def test_a_scheduler_that_knows_more_wastes_fewer_verified_tokens():
    """vllm-adaptive at a load where it trims: with informative confidences it keeps the drafts
    likely to survive, so fewer verified tokens are rejected per token kept."""
    trace = make_trace([0.0] * 64, [30] * 64, [80] * 64)
    hw = table_hw([1, 64, 128, 256, 512], [0.010, 0.012, 0.016, 0.040, 0.090])
    waste = {}
    for rho in (None, 0.8):
        res = replay(trace, "vllm-adaptive", hw, _profile(rho), seed=4, engine="reference")
        req = res.requests
        waste[rho] = float((req["verified_tokens"].sum() - (req["output_tokens"] - req["steps"]).sum())
                           / req["output_tokens"].sum())
    assert waste[0.8] < 0.9 * waste[None], waste
