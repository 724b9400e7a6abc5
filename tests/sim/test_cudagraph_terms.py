"""Issue 41's two iteration-cost terms: per_request_s x requests, and the eager cost of a step
above the CUDA-graph capture limit (`cudagraph`). Each is a term of its own in IterationCost;
the simulated time, the schedulers' views and vLLM's adaptive tables all see it; absent, every
table is today's (tests/sim/test_golden.py)."""
import numpy as np
import pytest
from simkit import make_trace, parametric, table_hw

from dspark_sim.errors import InputError
from dspark_sim.profiles import HardwareProfile
from dspark_sim.profiles.cudagraph import vllm_default_capture_size
from dspark_sim.sim.cluster.load import ClosedLoop
from dspark_sim.sim.cluster.run import simulate
from dspark_sim.sim.core.units import NS
from dspark_sim.sim.cost.iteration import IterationCost

STEP = dict(batch=[1, 512, 4096], seconds=[0.010, 0.012, 0.060])   # flat, then compute-bound
GRAPH = {"max_capture_size": 512, "eager": {"floor_s": 0.1, "per_token_s": 0.0, "source": "given"}}


def _hw(graph=None, per_request=0.0, **extra) -> HardwareProfile:
    hw = table_hw(STEP["batch"], STEP["seconds"], per_context=1e-7,
                  draft={"dspark": {"requests": [1, 64], "seconds": [0.0004, 0.002]}},
                  cudagraph=graph, **extra)
    hw.per_request_s = per_request
    return hw


def test_eager_term_is_added_above_the_limit_only():
    plain, graph = _hw(), _hw(GRAPH)
    b = np.array([1, 256, 512, 513, 1024, 4000])
    extra = graph.table_time(b) - plain.table_time(b)
    assert extra.tolist() == pytest.approx([0, 0, 0, 0.1, 0.1, 0.1])
    table = _hw({"max_capture_size": 512, "eager": {"batch_tokens": [1024, 1536],
                                                    "seconds": [0.02, 0.08], "source": "measured"}})
    extra = table.table_time(b) - plain.table_time(b)
    # linear between the table's points, flat beyond them, 0 at or below the limit
    assert extra.tolist() == pytest.approx([0, 0, 0, 0.02, 0.02, 0.08])


def test_profile_fields_round_trip_and_bad_values_name_the_field(tmp_path):
    hw = _hw(GRAPH, per_request=2e-5)
    path = tmp_path / "hw.yaml"
    hw.save(path)
    again = HardwareProfile.load(path)
    assert again.per_request_s == 2e-5 and again.cudagraph == hw.cudagraph
    text = path.read_text()
    for old, new, field in [("per_request_s: 2.0e-05", "per_request_s: -1", "step_time.per_request_s"),
                            ("max_capture_size: 512", "max_capture_size: 0", "cudagraph.max_capture_size"),
                            ("source: given", "source: guessed", "cudagraph.eager.source")]:
        assert old in text, (old, text)
        bad = tmp_path / "bad.yaml"
        bad.write_text(text.replace(old, new))
        with pytest.raises(InputError) as err:
            HardwareProfile.load(bad)
        assert err.value.field == field and err.value.line is not None and str(bad) in str(err.value)
    doc = hw.to_dict()
    doc["capture_sizes"] = [1, 2, 4, 256]
    with pytest.raises(InputError) as err:
        HardwareProfile.from_dict(doc)
    assert err.value.field == "cudagraph.max_capture_size"
    doc = hw.to_dict()
    doc["cudagraph"]["eager"] = {"batch_tokens": [400, 1024], "seconds": [0.0, 0.1]}
    with pytest.raises(InputError) as err:                   # a point at or below the limit
        HardwareProfile.from_dict(doc)
    assert err.value.field == "cudagraph.eager.batch_tokens[0]"


def test_vllm_default_capture_size():
    # vllm/config/vllm.py: min(max_num_seqs x (1 + K) x 2, 512), then <= max_num_batched_tokens
    assert vllm_default_capture_size(256) == 512
    assert vllm_default_capture_size(16) == 32
    assert vllm_default_capture_size(16, 7) == 256
    assert vllm_default_capture_size(256, 0, 128) == 128


@pytest.mark.parametrize("drafts", [0, 3, 7])
def test_python_forms_equal_the_numpy_form_to_the_bit(drafts):
    hw = _hw(GRAPH, per_request=3.3e-5)
    hw.prefill_curve = None
    cost = IterationCost(hw, "dspark", scheduler_drafts=7)
    rng = np.random.default_rng(drafts)
    r = rng.integers(0, 200, 300)
    b = r * (1 + drafts) + rng.integers(0, 600, 300)
    ctx = rng.integers(0, 100_000, 300)
    numpy_ns = cost.iteration_ns(r, b, ctx, drafts)
    table = cost.fixed_drafts(drafts)
    for i in range(len(r)):
        one = cost.draft_ns_one(int(r[i]), drafts)
        assert one == table[r[i]]
        assert cost.iteration_ns_one(one, int(b[i]), 0, int(ctx[i])) == numpy_ns[i]
        assert round(cost.stretch_base(one, int(b[i])) + cost.context_ns * int(ctx[i])) == numpy_ns[i]
    # the per-request term is per_request_s x R on top of the same iteration without it
    base = IterationCost(_hw(GRAPH), "dspark", scheduler_drafts=7)
    diff = numpy_ns - base.iteration_ns(r, b, ctx, drafts)
    np.testing.assert_allclose(diff, 3.3e-5 * NS * r, atol=1.0)
    # a prefill chunk's request pays it too (counted once)
    assert cost.iteration_ns_one(0.0, 64, 64, 0) - base.iteration_ns_one(0.0, 64, 64, 0) == \
        pytest.approx(3.3e-5 * NS, abs=1.0)


def test_scheduler_view_and_vllm_tables_see_both_terms():
    plain = IterationCost(_hw(), "dspark", scheduler_drafts=7)
    cost = IterationCost(_hw(GRAPH, per_request=1e-4), "dspark", scheduler_drafts=7)
    sps_plain, sps = plain.scheduler_sps([512, 513], 64), cost.scheduler_sps([512, 513], 64)
    assert 1 / sps[0] - 1 / sps_plain[0] == pytest.approx(64 * 1e-4)
    assert 1 / sps[1] - 1 / sps_plain[1] == pytest.approx(64 * 1e-4 + 0.1)
    draft_ms, verify_ms = cost.vllm_tables(256, 2048)
    draft0, verify0 = plain.vllm_tables(256, 2048)
    assert verify_ms[513] - verify0[513] == pytest.approx(100.0)
    assert verify_ms[512] == pytest.approx(verify0[512])
    assert draft_ms[64] - draft0[64] == pytest.approx(64 * 0.1)


def _throughput(policy: str, hw: HardwareProfile, users: int) -> float:
    trace = make_trace([0.0] * users, [64] * users, [96] * users)
    acc = parametric({"chat": [0.8] * 7})
    out = simulate(trace, policy, hw, None if policy == "ar" else acc, prefill="disaggregated",
                   closed_loop=ClosedLoop(users, 2))
    return float(out.table.output.sum() / (out.table.finish_ns.max() / NS))


def test_capture_limit_makes_fixed_k_lose_at_high_concurrency_where_it_won():
    """static-7 verifies 8 tokens a request: at 128 users 1,024 batch tokens, above a 512-token
    capture limit. Without the limit it beats no speculation there; with it (eager floor
    100 ms) it falls below, while at 32 users (256 tokens, inside the graphs) it still wins.
    vLLM's adaptive verification (its cost tables) and DSpark's scheduler (its SPS view) see the
    cliff and stay above no speculation."""
    plain, graph = _hw(max_batch_requests=256), _hw(GRAPH, max_batch_requests=256)
    high = {p: _throughput(p, graph, 128) for p in ("ar", "static-7", "vllm-adaptive", "dspark")}
    assert _throughput("static-7", plain, 128) > 1.5 * _throughput("ar", plain, 128)
    assert high["static-7"] < high["ar"]
    assert _throughput("static-7", graph, 32) > 1.5 * _throughput("ar", graph, 32)
    assert high["vllm-adaptive"] > high["ar"] and high["dspark"] > high["ar"], high
