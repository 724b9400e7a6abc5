"""vLLM's paged KV (`kv_semantics="blocks"`): blocks on demand, preemption by recompute.

Every policy, random traces and profiles: every request finishes with exactly its tokens and
nothing is lost (also when the pool is tight and requests are preempted), the pool is whole
again at the end, and while KV never runs out the results are byte for byte those of the
reserving engines."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from simkit import assert_same_outcome, make_trace, parametric, table_hw
from test_conservation import POLICIES, acceptance, check_conservation, hardware, traces

from dspark_sim.errors import InputError
from dspark_sim.sim.kv.paged import PagedPool, blocks_for
from dspark_sim.sim.cluster.run import Cluster, simulate
from dspark_sim.sim.core.requests import DONE, RequestTable
from dspark_sim.sim.speculation.spec_config import BatchSchedule

ALL = POLICIES + ["vllm-schedule", "vllm-adaptive"]
# K <= 2 <= every drawn gamma, as parse_schedule guarantees (with K above gamma a lone request could
# need more blocks than check_kv_fits allows for, preempt itself and stall the replica)
SCHEDULE = BatchSchedule(((1, 2, 2), (3, 5, 1), (8, 8, 2)), 2)


def _run(sc, engine="fast", kv="reserve", hw=None):
    return simulate(sc["trace"], sc["policy"], hw or sc["hw"], sc["acc"], replicas=sc["replicas"],
                    router=sc["router"], seed=sc["seed"], engine=engine, kv_semantics=kv,
                    schedule=SCHEDULE)


@st.composite
def scenarios(draw, tight=False, trace_strategy=None):
    """A replay to run: a random trace (from `trace_strategy`, default test_conservation's),
    profiles, policy, replicas, router, seed; with `tight`, a pool just big enough."""
    trace = draw(trace_strategy if trace_strategy is not None else traces())
    hw = draw(hardware(trace))
    acc = draw(acceptance())
    if tight:       # a pool just big enough for the longest request's last step
        need = int((trace.prompt_tokens + trace.output_tokens).max()) - 1 + acc.gamma
        block = draw(st.sampled_from([1, 4, 16]))
        blocks = blocks_for(need, block) + draw(st.integers(0, 12))
        hw.kv_capacity_tokens, hw.kv_block_size = blocks * block, block
    return dict(trace=trace, hw=hw, acc=acc, policy=draw(st.sampled_from(ALL)),
                replicas=draw(st.integers(1, 3)), router=draw(st.sampled_from(["rr", "least-outstanding"])),
                seed=draw(st.integers(0, 3)))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_blocks_equal_reserve_when_kv_never_runs_out(sc):
    hw = sc["hw"]
    hw.kv_capacity_tokens = None          # never runs out (the reserving run: no KV limit either)
    reserve = _run(sc, "fast")
    paged = _run(sc, "fast", "blocks")
    assert paged.preemptions == 0
    assert_same_outcome(paged, reserve, sc["policy"])


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(tight=True))
def test_blocks_with_preemption_conserve_requests_and_tokens(sc):
    table = RequestTable(sc["trace"])
    cluster = Cluster(table, sc["replicas"], "round-robin", sc["hw"], sc["policy"], sc["acc"],
                      sc["seed"], kv_semantics="blocks", schedule=SCHEDULE)
    cluster.run()
    from dspark_sim.sim.cluster.run import SimOutcome
    check_conservation(sc, SimOutcome(table, 0, 0.0))
    for rep in cluster.replicas:          # every block is back in the pool
        pool = rep.sched.pool
        assert pool.free_blocks == pool.num_blocks and not pool.held
        assert not rep.sched.waiting and not rep.sched.prefilling and not rep.decoders
    assert (table.phase == DONE).all()
    assert int(table.preemptions.sum()) == sum(rep.preemptions for rep in cluster.replicas)


def test_tight_pool_preempts_and_recomputes():
    """Eight 320-token requests in a 1,000-token pool: preemptions happen, every request still
    gets exactly its tokens, later than with an unlimited pool."""
    trace = make_trace(np.zeros(8), [200] * 8, [120] * 8)
    acc = parametric({"chat": [0.8] * 3})
    base = dict(draft={"dspark": {"requests": [1, 8], "seconds": [0.001, 0.003]}}, max_batch_tokens=512)
    roomy = simulate(trace, "static-3", table_hw([1, 64], [0.01, 0.02], **base), acc, kv_semantics="blocks")
    tight_hw = table_hw([1, 64], [0.01, 0.02], kv_capacity_tokens=1000, **base)
    tight = simulate(trace, "static-3", tight_hw, acc, kv_semantics="blocks")
    assert roomy.preemptions == 0 and tight.preemptions > 0
    assert (tight.table.generated == 120).all()
    assert tight.table.finish_ns.max() > roomy.table.finish_ns.max()
    # reserving prompt + output: three requests at a time, never preempted
    reserve = simulate(trace, "static-3", tight_hw, acc)
    assert (reserve.table.generated == 120).all()


def test_a_request_that_can_never_finish_is_bad_input():
    trace = make_trace([0.0], [100], [50])
    hw = table_hw([1, 64], [0.01, 0.02], kv_capacity_tokens=150)
    with pytest.raises(InputError, match="KV blocks"):
        simulate(trace, "static-3", hw, parametric({"chat": [0.8] * 3}), kv_semantics="blocks")


def test_paged_kv_refuses_the_block_engine():
    """Paged KV runs on the loop and reference engines; the numpy block engine refuses it and
    names the engines that can."""
    trace = make_trace([0.0], [10], [5])
    with pytest.raises(InputError, match="reference or loop engine only, not 'block'"):
        simulate(trace, "mtp1", table_hw([1, 64], [0.01, 0.02]), parametric({"chat": [0.8]}),
                 engine="block", kv_semantics="blocks")


def test_paged_pool():
    bm = PagedPool(100, 16)
    assert bm.num_blocks == 6 and bm.can_allocate(96) and not bm.can_allocate(97)
    bm.allocate(1, 17)
    assert bm.held[1] == 2 and bm.free_blocks == 4
    assert bm.needed(1, 32) == 0 and bm.needed(1, 33) == 1
    bm.allocate(1, 20)          # shrinking never gives blocks back
    assert bm.held[1] == 2
    assert not bm.may_append(2, 16 * 5)
    with pytest.raises(RuntimeError):
        bm.allocate(2, 16 * 5)
    bm.deallocate(1)
    assert bm.free_blocks == 6 and not bm.held


@pytest.mark.parametrize("policy", ["mtp1", "dspark", "vllm-adaptive"])
def test_closed_loop_with_paged_kv(policy):
    """Users send their next request when one finishes: equal to reserving while KV never runs
    out; with a tight pool every request still finishes with its tokens."""
    from dspark_sim.sim.cluster.load import ClosedLoop

    rng = np.random.default_rng(5)
    trace = make_trace(np.zeros(60), rng.integers(20, 300, 60), rng.integers(1, 80, 60))
    acc = parametric({"chat": [0.8] * 4})
    loop = ClosedLoop(users=6, requests_per_user=5, think_s=0.01, offset=0)
    roomy = table_hw([1, 64], [0.01, 0.02], max_batch_tokens=256)
    a = simulate(trace, policy, roomy, acc, closed_loop=loop)
    b = simulate(trace, policy, roomy, acc, closed_loop=loop, kv_semantics="blocks")
    assert_same_outcome(b, a, policy)
    tight = table_hw([1, 64], [0.01, 0.02], max_batch_tokens=256, kv_capacity_tokens=800)
    c = simulate(trace, policy, tight, acc, closed_loop=loop, kv_semantics="blocks")
    assert c.preemptions > 0 and (c.table.generated == c.table.output).all()
    assert (c.table.finish_ns >= 0).all()


def test_the_victim_is_the_most_recently_admitted():
    """Three 16-token prompts in four 16-token blocks, no speculation: when the decoders grow
    past their first block the last admitted request is preempted first, the first never."""
    trace = make_trace([0.0, 0.0, 0.0], [16, 16, 16], [40, 40, 40])
    hw = table_hw([1, 64], [0.01, 0.01], kv_capacity_tokens=64, kv_block_size=16)
    out = simulate(trace, "ar", hw, None, kv_semantics="blocks")
    assert out.table.preemptions[0] == 0 and out.table.preemptions[2] >= 1
    assert out.table.finish_ns[0] < out.table.finish_ns[1] < out.table.finish_ns[2]
    assert (out.table.generated == 40).all() and out.preemptions == int(out.table.preemptions.sum())
