"""The scheduler's view of the engine: Algorithm 1 weighs verify tokens against the whole
iteration (drafting and attention over a typical context included), not the target step alone."""
import numpy as np
import pytest
from simkit import make_trace, parametric, table_hw

from dspark_sim.sim.cluster.run import simulate
from dspark_sim.sim.cost.iteration import IterationCost

# step time 10 ms per batch token: verifying a draft costs as much as a whole extra token
BATCH, SECONDS = [1, 2, 100], [0.01, 0.02, 1.0]


def test_scheduler_sps_counts_drafting_and_typical_context():
    hw = table_hw(BATCH, SECONDS, per_context=1e-6,
                  draft={"dspark": {"requests": [1, 10], "seconds": [0.1, 0.2]},
                         "eagle3": {"requests": [1, 10], "seconds": [0.01, 0.02], "per_draft": True}})
    cost = IterationCost(hw, "dspark", scheduler_drafts=5, scheduler_context=1000.0)
    # R = 1: step(3) + draft(1) + 1e-6 * 1000 * 1
    assert cost.scheduler_sps(3, 1) == pytest.approx(1 / (0.03 + 0.1 + 1e-3))
    np.testing.assert_allclose(cost.scheduler_sps(np.array([[2, 4]]), np.array([[10]])),
                               [[1 / (0.02 + 0.2 + 1e-2), 1 / (0.04 + 0.2 + 1e-2)]])
    table = cost.scheduler_sps_table(10, 8)
    assert table[4] == cost.scheduler_sps(4, 10)                     # same arithmetic, same bits
    assert cost.scheduler_sps_list(10, 8)[4] == table[4]
    eagle = IterationCost(hw, "eagle3", scheduler_drafts=5, scheduler_context=0.0)
    assert eagle.scheduler_sps(1, 1) == pytest.approx(1 / (0.01 + 5 * 0.01))   # 5 sequential passes


@pytest.mark.parametrize("engine", ["fast", "reference"])
def test_dspark_verifies_more_when_drafting_is_expensive(engine):
    # One request at a time, flat conditional acceptance 0.5. With free drafting tau * SPS falls
    # from B = 1 (1 / 0.01) to B = 2 (1.5 / 0.02): plain decoding. With 100 ms of drafting per
    # iteration, B = 3 is best (1.75 / 0.13 > 1.5 / 0.12 > 1 / 0.11; B = 4: 1.875 / 0.14 is
    # lower): two drafts verified per step.
    acc = parametric({"chat": [0.5] * 5})
    trace = make_trace([0.0], [4], [400])
    free = simulate(trace, "dspark", table_hw(BATCH, SECONDS), acc, engine=engine)
    costly = simulate(trace, "dspark", table_hw(BATCH, SECONDS, draft={"dspark": {
        "requests": [1], "seconds": [0.1]}}), acc, engine=engine)
    assert free.table.verified[0] == 0
    assert costly.table.verified[0] == 2 * costly.table.steps[0]
