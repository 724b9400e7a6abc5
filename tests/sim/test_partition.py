"""A round-robin replay partitioned by replica (sim/cluster/partition.py) gives the single-process
results byte for byte: every policy, both KV semantics, random traces and profiles, also with
the long-trace code paths (lazily drawn uniforms, per-task survival lookups) forced on."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from simkit import ENGINE_FIELDS, assert_same_outcome
from test_paged_kv import SCHEDULE, scenarios

import dspark_sim.sim.acceptance.sampler as acceptance_mod
import dspark_sim.sim.acceptance.uniforms as uniforms_mod
from dspark_sim.errors import InputError
from dspark_sim.sim.cluster.run import simulate
from dspark_sim.sim.cluster.partition import simulate_partitioned
from dspark_sim.sim.core.requests import RequestTable


def _whole(sc, kv):
    return simulate(sc["trace"], sc["policy"], sc["hw"], sc["acc"], replicas=sc["replicas"],
                    router="rr", seed=sc["seed"], kv_semantics=kv, schedule=SCHEDULE)


def _parts(sc, kv, executor="inline"):
    return simulate_partitioned(sc["trace"], sc["policy"], sc["hw"], sc["acc"],
                                replicas=sc["replicas"], router="rr", seed=sc["seed"],
                                kv_semantics=kv, schedule=SCHEDULE, executor=executor)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.sampled_from(["reserve", "blocks"]), st.booleans())
def test_partitioned_equals_one_process(sc, kv, long_paths):
    if kv == "blocks":
        sc["hw"].kv_capacity_tokens = None
    ref = _whole(sc, kv)
    saved = uniforms_mod.WHOLE_LIMIT, acceptance_mod.ROW_TABLE_LIMIT
    if long_paths:
        uniforms_mod.WHOLE_LIMIT, acceptance_mod.ROW_TABLE_LIMIT = 0, 0
    try:
        parts = _parts(sc, kv)
        lazy = _whole(sc, kv)
    finally:
        uniforms_mod.WHOLE_LIMIT, acceptance_mod.ROW_TABLE_LIMIT = saved
    fields = ENGINE_FIELDS + ("preemptions",)
    assert_same_outcome(parts, ref, sc["policy"], fields)
    assert_same_outcome(lazy, ref, sc["policy"], fields)
    assert parts.preemptions == ref.preemptions


def test_least_outstanding_and_closed_loop_are_refused(tmp_path):
    from simkit import constant_hw, make_trace
    from dspark_sim.sim.cluster.load import ClosedLoop
    trace = make_trace([0, 0.1, 0.2], [10, 10, 10], [5, 5, 5])
    with pytest.raises(InputError, match="least-outstanding.*couples the replicas"):
        simulate_partitioned(trace, "ar", constant_hw(), None, replicas=2, router="lo")
    with pytest.raises(InputError, match="closed loop"):
        simulate_partitioned(trace, "ar", constant_hw(), None, replicas=2,
                             closed_loop=ClosedLoop(users=2, requests_per_user=1))
    # one replica has nothing to couple: least-outstanding is round-robin then
    out = simulate_partitioned(trace, "ar", constant_hw(), None, replicas=1, router="lo")
    assert (out.table.finish_ns > 0).all()


def test_more_replicas_than_requests():
    from simkit import constant_hw, make_trace
    trace = make_trace([0, 0.05], [10, 20], [4, 6])
    ref = simulate(trace, "ar", constant_hw(), None, replicas=5)
    parts = simulate_partitioned(trace, "ar", constant_hw(), None, replicas=5, executor="inline")
    assert_same_outcome(parts, ref)
    np.testing.assert_array_equal(parts.table.replica, [0, 1])


@pytest.mark.ray
def test_ray_partitions_equal_one_process():
    ray = pytest.importorskip("ray", reason="ray is not installed (pip install 'dspark-sim[ray]')")
    from simkit import make_trace, parametric, table_hw
    rng = np.random.default_rng(3)
    n = 300
    trace = make_trace(np.cumsum(rng.exponential(0.02, n)), rng.integers(20, 400, n),
                       rng.integers(2, 120, n), task=rng.choice(["chat", "code"], n).tolist())
    hw = table_hw([1, 64, 512], [0.01, 0.012, 0.03], per_context=1e-7, max_batch_tokens=512,
                  kv_capacity_tokens=20000)
    acc = parametric({"chat": [0.8, 0.6, 0.4], "code": [0.9, 0.8, 0.7]})
    sc = dict(trace=trace, hw=hw, acc=acc, policy="dspark", replicas=4, seed=1)
    ref = _whole(sc, "reserve")
    parts = _parts(sc, "reserve", executor="ray")
    assert not ray.is_initialized()                 # the local instance it started is shut down
    assert_same_outcome(parts, ref, "ray", ENGINE_FIELDS + ("preemptions",))
    assert isinstance(parts.table, RequestTable)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.sampled_from([0.003, 0.05, 1.0]))
def test_progress_reports_do_not_change_results(sc, every_s):
    from dspark_sim.sim.cluster.run import Cluster
    ref = _whole(sc, "reserve")
    table = RequestTable(sc["trace"])
    cluster = Cluster(table, sc["replicas"], "round-robin", sc["hw"], sc["policy"], sc["acc"],
                      sc["seed"], schedule=SCHEDULE)
    seen = []
    cluster.run(seen.append, every_s=every_s)
    assert seen == sorted(seen) and len(seen) >= 1
    for name in ENGINE_FIELDS:
        np.testing.assert_array_equal(getattr(table, name), getattr(ref.table, name), err_msg=name)
    assert sum(r.iterations for r in cluster.replicas) == ref.iterations
