"""The real serving engine: lossless batched verification under every policy, the simulator's
semantics (admission, chunked prefill, token budget), wall-clock arrivals, outputs."""
import numpy as np
import pandas as pd
import pytest
import torch
from greedy_check import compare
from servekit import GAMMA, POLICIES, TinySetup, acceptance, burst_trace, hw
from simkit import make_trace

from dspark_sim.decode.drafters import NGramDrafter
from dspark_sim.errors import InputError
from dspark_sim.serve.engine import scale_trace, serve
from dspark_sim.sim.output.metrics import REQUEST_COLUMNS


@pytest.fixture(scope="module")
def tiny():
    return TinySetup(burst_trace(9, seed=1), seed=1)


def _check_lossless(setup, result, label):
    for i, (out, (ref, logits)) in enumerate(zip(result.outputs, setup.refs)):
        assert len(out) == setup.trace.output_tokens[i], f"{label} request {i}"
        compare(ref, logits, out, f"{label} request {i}")


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("drafter", ["replay", "ngram"])
def test_every_policy_is_lossless_with_continuous_batching(tiny, policy, drafter):
    d = tiny.replay_drafter() if drafter == "replay" else NGramDrafter(tiny.target)
    res = serve(tiny.trace, policy, tiny.target, d, hw(), acceptance(d.kind), tiny.prompts,
                gamma=GAMMA)
    _check_lossless(tiny, res, f"{policy}/{drafter}")
    frame, it, s = res.requests, res.iterations, res.summary
    assert list(frame.columns) == REQUEST_COLUMNS
    assert (frame["output_tokens"] == tiny.trace.output_tokens).all()
    assert (frame["first_token_s"] >= frame["arrival_s"]).all()
    assert (frame["finish_s"] >= frame["first_token_s"]).all()
    assert s["completed"] == len(tiny.trace) and s["engine"] == "real"
    # continuous batching: several decoding requests per forward, decode rows mixed with
    # prefill chunks, prompts cut into chunks by the 24-token budget, at most 3 requests
    assert it["decode_requests"].max() >= 2
    assert ((it["decode_requests"] > 0) & (it["prefill_tokens"] > 0)).any()
    assert it["batch_tokens"].max() <= 24 and (tiny.trace.prompt_tokens > 24).any()
    assert it["decode_requests"].max() <= 3
    # the accounting the simulator writes: tokens = first + sum over steps of 1 + accepted
    emitted = frame["steps"] + frame["accepted_tokens"] + 1
    assert (emitted >= frame["output_tokens"]).all()
    assert (frame["verified_tokens"] <= frame["drafted_tokens"]).all()
    assert s["iterations"] == len(it)
    if policy == "ar":
        assert s["mean_verify_len"] == 0.0 and frame["drafted_tokens"].sum() == 0
    else:
        accepted = sum(a for steps in res.steps for _, _, a in steps)
        rejected = sum(a < v for steps in res.steps for _, v, a in steps)
        assert accepted > 10 and (rejected > 3 or drafter == "ngram"), (accepted, rejected)
    if policy in ("mtp1", "static-3"):
        k = int(policy[-1]) if policy != "mtp1" else 1
        assert all(v <= k for steps in res.steps for _, v, _ in steps)


def test_dspark_uses_the_drafters_confidences(tiny):
    """Algorithm 1 on the replay drafter's random confidences picks varied verify lengths."""
    res = serve(tiny.trace, "dspark", tiny.target, tiny.replay_drafter(), hw(), acceptance(),
                tiny.prompts, gamma=GAMMA)
    lengths = {v for steps in res.steps for _, v, _ in steps}
    assert len(lengths) >= 3, lengths


def test_arrivals_follow_the_wall_clock():
    trace = make_trace([0.0, 0.25], [8, 8], [3, 3])
    setup = TinySetup(trace, seed=2)
    res = serve(trace, "ar", setup.target, NGramDrafter(setup.target), hw(), None, setup.prompts,
                gamma=GAMMA)
    frame = res.requests
    assert frame["first_token_s"][1] >= 0.25
    assert frame["finish_s"][0] < 0.25          # the first request did not wait for the second
    assert res.summary["duration_s"] == pytest.approx(frame["finish_s"].max(), abs=1e-9)
    fast = scale_trace(trace, 5.0)
    assert fast.arrival_s[1] == pytest.approx(0.05)


@pytest.mark.parametrize("kwargs, message", [
    (dict(policy="oracle"), "cannot run oracle"),
    (dict(policy="dspark", acc=None), "needs an acceptance profile"),
    (dict(policy="dspark", gamma=3), "gamma = 4"),
])
def test_bad_engine_input(tiny, kwargs, message):
    with pytest.raises(InputError, match=message):
        serve(tiny.trace, kwargs["policy"], tiny.target, NGramDrafter(tiny.target), hw(),
              kwargs.get("acc", acceptance("ngram")), tiny.prompts, gamma=kwargs.get("gamma", GAMMA))


def test_request_larger_than_kv_capacity_is_bad_input(tiny):
    small = hw()
    small.kv_capacity_tokens = 20
    with pytest.raises(InputError, match="kv_capacity_tokens"):
        serve(tiny.trace, "ar", tiny.target, NGramDrafter(tiny.target), small, None, tiny.prompts,
              gamma=GAMMA)
