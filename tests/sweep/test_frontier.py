"""Pareto frontier, throughput at an SLA, the SLA table's gains, and the plan's search."""
import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from dspark_sim.sweep.frontier import format_gain, pareto, sla_table, throughput_at
from dspark_sim.sweep.tables import sla_markdown
from dspark_sim.sweep.plan import _Search


def test_pareto_keeps_non_dominated_points_by_speed():
    x = np.array([10, 20, 15, 30, 30, 5, np.nan])
    y = np.array([100, 80, 70, 50, 40, 90, 200])
    idx = pareto(x, y)
    # (15, 70) is dominated by (20, 80); (30, 40) by (30, 50); (5, 90) by (10, 100); NaN dropped
    assert list(idx) == [0, 1, 3]


@given(st.lists(st.tuples(st.floats(1, 100), st.floats(1, 100)), min_size=1, max_size=30))
def test_pareto_property(points):
    x, y = (np.array(v) for v in zip(*points))
    idx = pareto(x, y)
    front = set(idx.tolist())
    for i in range(len(x)):
        dominated = np.any((x >= x[i]) & (y >= y[i]) & ((x > x[i]) | (y > y[i])))
        if i in front:
            assert not dominated
        elif not dominated:      # an exact duplicate of a frontier point
            assert any(x[j] == x[i] and y[j] == y[i] for j in front)
    assert np.all(np.diff(x[idx]) > 0) and np.all(np.diff(y[idx]) < 0)


def test_throughput_at_statuses():
    x, y = np.array([50.0, 100.0, 200.0]), np.array([1000.0, 600.0, 100.0])
    assert throughput_at(x, y, 75.0) == (pytest.approx(800.0), "interpolated")
    assert throughput_at(x, y, 100.0) == (600.0, "measured")
    assert throughput_at(x, y, 20.0) == (1000.0, "lower-bound")
    # more load measured past the throughput peak (dominated): the SLA does not bind at the peak
    load = np.array([3.0, 2.0, 1.0, 4.0])
    xs, ys = np.append(x, 30.0), np.append(y, 700.0)
    assert throughput_at(xs, ys, 20.0, load) == (1000.0, "peak")
    assert throughput_at(x, y, 20.0, load[:3]) == (1000.0, "lower-bound")
    value, status = throughput_at(x, y, 250.0)
    assert np.isnan(value) and status == "unmet"


def test_sla_table_seed_spread_and_gains():
    rows = []
    for seed, shift in ((0, 0.0), (1, 10.0)):
        for policy, scale in (("mtp1", 1.0), ("dspark", 1.5)):
            for load, (tps, thr) in enumerate(((200.0, 100.0), (100.0, 500.0), (50.0, 900.0))):
                rows.append({"policy": policy, "load": float(load), "seed": seed,
                             "tps_user_p50": tps * scale + shift, "throughput_tok_s_per_gpu": thr})
    table = sla_table(pd.DataFrame(rows), [100.0], 50, baseline="mtp1").set_index("policy")
    # seed means: mtp1 (205, 100), (105, 500), (55, 900): at 100 -> between 55 and 105
    mtp1 = 900 + (100 - 55) / (105 - 55) * (500 - 900)
    dspark = 900 + (100 - 80) / (155 - 80) * (500 - 900)
    assert table.loc["mtp1", "throughput_tok_s_per_gpu"] == pytest.approx(mtp1)
    assert table.loc["dspark", "throughput_tok_s_per_gpu"] == pytest.approx(dspark)
    assert table.loc["dspark", "gain_vs_baseline"] == pytest.approx(dspark / mtp1 - 1)
    assert table.loc["mtp1", "seed_min"] < mtp1 < table.loc["mtp1", "seed_max"]
    md = sla_markdown(table.reset_index())
    assert "At 100 tok/s/user" in md and "gain vs mtp1" in md and format_gain(dspark / mtp1 - 1) in md


def test_format_gain():
    assert format_gain(0.514) == "+51%"
    assert format_gain(6.61) == "+661%"
    assert format_gain(float("inf")) == "baseline unmet"
    assert format_gain(float("nan")) == "-"


@given(st.integers(1, 300), st.integers(1, 300))
def test_search_finds_the_smallest_passing_count(threshold, upper):
    search, asked = _Search(upper), []
    while (n := search.next()) is not None:
        asked.append(n)
        search.record(n, n >= threshold)
    assert search.ok == (threshold if threshold <= upper else None)
    assert len(asked) <= 2 * int(np.ceil(np.log2(upper + 1))) + 2


def test_improved_acceptance_scales_tau():
    from dspark_sim.errors import InputError
    from dspark_sim.profiles.registry import load_acceptance_profile
    from dspark_sim.sweep.whatif import improved_acceptance

    base = load_acceptance_profile("paper-dspark-g5")
    better = improved_acceptance(base, 1.10)
    for name, task in base.tasks.items():
        new = better.tasks[name]
        assert new.mean_tau(5) == pytest.approx(1.10 * task.mean_tau(5), rel=1e-9)
        assert np.all(new.position_accept >= task.position_accept) and np.all(new.position_accept <= 1)
    assert base.tasks["chat"].mean_tau(5) == pytest.approx(3.21, abs=0.01)     # unchanged
    with pytest.raises(InputError):
        improved_acceptance(base, 2.0)          # tau 9.2 > gamma + 1
