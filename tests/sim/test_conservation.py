"""Property tests over random traces, hardware and acceptance profiles, for every policy:
every request finishes with exactly its output tokens, nothing is lost or duplicated, and the
fast engines (vectorised blocks; the python loop where plans decide) give exactly the
per-iteration reference engine's results."""
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from simkit import assert_same_outcome, constant_hw, empirical, make_trace, parametric, table_hw

from dspark_sim.sim.cluster.run import simulate
from dspark_sim.sim.output.metrics import requests_frame

POLICIES = ["ar", "mtp1", "static-2", "dspark", "dspark-lagged", "goodput", "oracle"]
TASKS = ["chat", "code", "math"]


@st.composite
def traces(draw, max_requests=25):
    n = draw(st.integers(1, max_requests))
    gaps = draw(st.lists(st.one_of(st.just(0.0), st.floats(0.0, 0.3)), min_size=n, max_size=n))
    prompt = draw(st.lists(st.integers(1, 400), min_size=n, max_size=n))
    output = draw(st.lists(st.one_of(st.integers(1, 3), st.integers(1, 120)), min_size=n, max_size=n))
    task = draw(st.lists(st.sampled_from(TASKS + ["other"]), min_size=n, max_size=n))
    return make_trace(np.cumsum(gaps), prompt, output, task)


@st.composite
def hardware(draw, trace):
    need = int((trace.prompt_tokens + trace.output_tokens).max())
    limits = dict(
        max_batch_tokens=draw(st.one_of(st.none(), st.integers(8, 600))),
        max_batch_requests=draw(st.one_of(st.none(), st.integers(1, 12))),
        kv_capacity_tokens=draw(st.one_of(st.none(), st.integers(need, need * 4))))
    if draw(st.booleans()):
        return constant_hw(draw(st.sampled_from([0.01, 0.0123])), **limits)
    jagged = draw(st.booleans())
    seconds = [0.01, 0.009, 0.012, 0.011, 0.03] if jagged else [0.01, 0.01, 0.012, 0.02, 0.05]
    draft = {"dspark": {"requests": [1, 8], "seconds": [0.001, 0.003]},
             "mtp1": {"requests": [1, 8], "seconds": [0.0005, 0.001]},
             "eagle3": {"requests": [1, 8], "seconds": [0.0004, 0.0006], "per_draft": True}}
    if draw(st.booleans()):      # the cost terms of item 5: drafts made, a separate prefill curve
        draft["dspark"].update(drafts=draw(st.integers(1, 7)), per_draft_seconds=[0.0001, 0.00021])
        limits["prefill_time"] = {"prefill_tokens": [8, 64, 300],
                                  "seconds": draw(st.sampled_from([[0.004, 0.008, 0.03],
                                                                   [0.02, 0.01, 0.04]]))}
    return table_hw([1, 4, 16, 64, 256], seconds,
                    per_context=draw(st.sampled_from([0.0, 1e-6])), draft=draft, **limits)


@st.composite
def acceptance(draw):
    gamma = draw(st.integers(2, 5))
    kind = draw(st.sampled_from(["dspark", "eagle3", "mtp1"]))
    if draw(st.booleans()):
        rates = {t: draw(st.lists(st.sampled_from([0.0, 0.4, 0.7, 0.9, 1.0]), min_size=gamma,
                                  max_size=gamma)) for t in TASKS[:draw(st.integers(1, 3))]}
        return parametric(rates, kind=kind)
    with_conf = draw(st.booleans())
    reqs = {}
    for t in TASKS[:draw(st.integers(1, 3))]:
        items = []
        for _ in range(draw(st.integers(1, 3))):
            steps = draw(st.integers(1, 6))
            item = {"accepted": draw(st.lists(st.integers(0, gamma), min_size=steps, max_size=steps))}
            if with_conf:
                item["confidence"] = draw(st.lists(st.lists(st.sampled_from([0.1, 0.5, 0.8, 0.95, 1.0]),
                                                            min_size=gamma, max_size=gamma),
                                                   min_size=steps, max_size=steps))
            items.append(item)
        reqs[t] = items
    return empirical(reqs, gamma, kind=kind)


@st.composite
def scenarios(draw):
    trace = draw(traces())
    return dict(trace=trace, hw=draw(hardware(trace)), acc=draw(acceptance()),
                policy=draw(st.sampled_from(POLICIES)), replicas=draw(st.integers(1, 3)),
                router=draw(st.sampled_from(["rr", "least-outstanding"])),
                seed=draw(st.integers(0, 3)))


def run(sc, engine):
    return simulate(sc["trace"], sc["policy"], sc["hw"], sc["acc"], replicas=sc["replicas"],
                    router=sc["router"], seed=sc["seed"], engine=engine)


def check_conservation(sc, out):
    t = out.table
    trace = sc["trace"]
    assert (t.finish_ns >= 0).all(), "every request finishes"
    assert (t.generated == t.output).all(), "each with exactly its output tokens"
    assert (t.prefilled == t.prompt).all()
    assert ((t.replica >= 0) & (t.replica < sc["replicas"])).all()
    assert (t.arrival_ns <= t.first_token_ns).all() and (t.first_token_ns <= t.finish_ns).all()
    # a decode step emits 1..gamma + 1 tokens (and a recompute after a preemption, one)
    assert (t.steps <= t.output - 1).all()
    assert (t.steps * (sc["acc"].gamma + 1) + t.preemptions >= t.output - 1).all()
    assert (t.accepted <= t.verified).all() and (t.verified <= t.drafted).all()
    frame = requests_frame(t)
    assert list(frame["id"]) == list(trace.ids)                 # nothing lost or duplicated
    assert frame["id"].is_unique
    if sc["policy"] == "ar":
        assert (t.steps + t.preemptions >= t.output - 1).all() and (t.drafted == 0).all()
    if sc["policy"] == "oracle":
        assert (t.accepted == t.verified).all()


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_conservation_every_policy(sc):
    check_conservation(sc, run(sc, "fast"))



@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_fast_engines_equal_reference(sc):
    ref = run(sc, "reference")
    check_conservation(sc, ref)
    for engine in ("fast", "block"):       # fast: the python loop for planned policies
        assert_same_outcome(run(sc, engine), ref, engine)


def test_fast_equals_reference_on_a_busy_trace():
    """A longer seeded trace with bursts, chunked prefill and KV pressure, every policy."""
    rng = np.random.default_rng(7)
    n = 400
    trace = make_trace(np.cumsum(rng.exponential(0.02, n)), rng.integers(1, 900, n),
                       rng.integers(1, 150, n), rng.choice(TASKS, n))
    hw = table_hw([1, 4, 16, 64, 256], [0.01, 0.01, 0.012, 0.02, 0.05], per_context=1e-6,
                  draft={"dspark": {"requests": [1, 8], "seconds": [0.001, 0.003]}},
                  max_batch_tokens=512, max_batch_requests=24, kv_capacity_tokens=6000)
    acc = parametric({"chat": [0.7] * 5, "code": [0.85] * 5, "math": [0.9, 0.9, 0.8, 0.8, 0.7]})
    for policy in POLICIES + ["static-5"]:
        for replicas, router in ((1, "rr"), (2, "least-outstanding")):
            sc = dict(trace=trace, hw=hw, acc=acc, policy=policy, replicas=replicas, router=router, seed=1)
            ref = run(sc, "reference")
            for engine in ("fast", "block"):
                out = run(sc, engine)
                check_conservation(sc, out)
                assert_same_outcome(out, ref, f"{engine} {policy} {replicas}")
