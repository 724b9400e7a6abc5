"""The scheduler (sim/scheduler.py) keeps every request's phase column (core/requests.py) true to
where the request is: waiting or preempted in the queue, prefilling, decoding, done; with both
KV pools (reservation, and vLLM's paged blocks with preemption), and every request ends done."""
from hypothesis import HealthCheck, given, settings
from test_paged_kv import SCHEDULE, scenarios

from dspark_sim.sim.cluster.run import Cluster
from dspark_sim.sim.core.requests import DECODING, DONE, PREEMPTED, PREFILLING, WAITING, RequestTable
from dspark_sim.sim.core.rules import step_tokens, tokens_emitted
from dspark_sim.sim.engines.reference import ReferenceReplica


def _check_phases(replica) -> None:
    sched, phase = replica.sched, replica.table.phase
    for rid in sched.waiting:
        assert phase[rid] == (PREEMPTED if rid in sched.recompute else WAITING), rid
    for rid in sched.prefilling:
        assert phase[rid] == PREFILLING, rid
    for rid in replica.decoders:
        assert phase[rid] == DECODING, rid
    assert sched.running <= sched.max_requests
    held = set(sched.waiting) | set(sched.prefilling) | set(int(r) for r in replica.decoders)
    assert all(phase[rid] == DONE for rid in range(len(phase))
               if rid not in held and replica.table.finish_ns[rid] >= 0 and
               replica.table.replica[rid] == replica.index)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(tight=True))
def test_phase_column_follows_the_scheduler(sc):
    for kv in ("reserve", "blocks"):
        table = RequestTable(sc["trace"])
        cluster = Cluster(table, sc["replicas"], "round-robin", sc["hw"], sc["policy"], sc["acc"],
                          sc["seed"], engine="reference", kv_semantics=kv, schedule=SCHEDULE)
        checked = []
        original = ReferenceReplica.advance

        def advance(self):
            _check_phases(self)
            checked.append(1)
            return original(self)
        ReferenceReplica.advance = advance
        try:
            cluster.run()
        finally:
            ReferenceReplica.advance = original
        assert checked and (table.phase == DONE).all()


def test_rules_scalar_forms():
    assert step_tokens(3, 2) == 3 and step_tokens(0, 5) == 1 and step_tokens(4, -1) == 0
    assert tokens_emitted(3, 5, 2) == 2 and tokens_emitted(3, 5, 10) == 4
