"""Must hold: an overloaded point never yields an SLA value (docs/sweeps.md, "Overload")."""
import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sweepkit import write_constant_hw, write_identical_trace

from dspark_sim.sweep.frontier import sla_table
from dspark_sim.sweep.overload import QUEUE_GROWTH_LIMIT, overload_reason, queue_growth
from dspark_sim.sweep.run import SweepConfig, run_sweep
from dspark_sim.sweep.tables import sla_markdown


def test_queue_growth_tells_a_growing_queue_from_a_stable_one():
    arrival = np.arange(400) * 0.1
    stable = 0.2 + 0.05 * np.sin(arrival)                  # waits that come and go
    growing = 0.2 + 0.3 * arrival                           # 0.3 s more wait per s of trace
    assert abs(queue_growth(arrival, stable)) < QUEUE_GROWTH_LIMIT
    assert queue_growth(arrival, growing) == pytest.approx(0.3, rel=1e-6)
    assert queue_growth(arrival[:5], growing[:5]) is None
    assert overload_reason({"queue_growth": 0.3, "ttft_p99_s": 1.0}, 30.0).startswith("queue grows")
    assert overload_reason({"queue_growth": None, "ttft_p99_s": 45.0}, 30.0) == "TTFT p99 45.0 s > 30 s"
    assert overload_reason({"queue_growth": 0.0, "ttft_p99_s": 45.0}, None) == ""


def _rows(points):
    """(load, tps, throughput, overloaded) per point, one policy, one seed."""
    return pd.DataFrame([{"policy": "p", "load": float(load), "seed": 0, "tps_user_p50": tps,
                          "throughput_tok_s_per_gpu": thr, "overloaded": bad,
                          "overload_reason": "x" if bad else "", "ttft_p50_s": 0.1,
                          "ttft_p99_s": 99.0 if bad else 0.5, "tpot_p99_ms": 10.0}
                         for load, tps, thr, bad in points])


def test_no_sla_is_interpolated_across_the_knee():
    # the case: 3,530 tok/s/GPU at x2.83 meets the SLA, x4 (overloaded) would give 4,475
    rows = _rows([(1.0, 120.0, 1500.0, False), (2.83, 95.0, 3530.0, False), (4.0, 70.0, 4475.0, True)])
    row = sla_table(rows, [80.0], 50, None).iloc[0]
    assert row["throughput_tok_s_per_gpu"] == 3530.0 and row["status"] == "before-overload"
    assert row["load_at_sla"] == 2.83 and row["ttft_p99_s"] == 0.5
    md = sla_markdown(sla_table(rows, [80.0], 50, None), rows, "rate")
    assert "3,530 (max before overload)" in md and "Overloaded, left out of every frontier (1): p at x4 rate" in md
    # an SLA only the overloaded point reaches is unmet, with the best speed reached below the knee
    row = sla_table(rows, [130.0], 50, None).iloc[0]
    assert row["status"] == "unmet" and row["best_tps_user"] == 120.0


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(1, 300), st.floats(1, 5000), st.booleans()), min_size=1, max_size=8),
       st.floats(1, 300))
def test_sla_values_ignore_every_load_from_the_first_overloaded_one(points, sla):
    pts = [(i + 1, tps, thr, bad) for i, (tps, thr, bad) in enumerate(points)]
    rows = _rows(pts)
    knee = min([load for load, _, _, bad in pts if bad], default=np.inf)
    kept = rows[rows["load"] < knee]
    got = sla_table(rows, [sla], 50, None).iloc[0]
    if len(kept) == 0:
        assert got["status"] == "unmet" and np.isnan(got["best_tps_user"])
        return
    want = sla_table(kept.assign(overloaded=False), [sla], 50, None).iloc[0]
    np.testing.assert_equal(got["throughput_tok_s_per_gpu"], want["throughput_tok_s_per_gpu"])
    if np.isfinite(got["throughput_tok_s_per_gpu"]):
        assert got["load_at_sla"] < knee
        assert got["throughput_tok_s_per_gpu"] <= kept["throughput_tok_s_per_gpu"].max() + 1e-9


def test_rate_sweep_marks_the_overloaded_points(tmp_path):
    """Identical requests, 0.05 s apart, each 40 decode steps of 10 ms with at most 2 in a batch:
    the replica drains 2 requests per 0.41 s (4.9/s) against 20/s offered at x1: x1 and above
    overload (the queue grows), x0.125 (2.5/s) does not."""
    trace = write_identical_trace(tmp_path / "t.jsonl", 120, 10, 40, gap_s=0.05)
    hw = write_constant_hw(tmp_path / "hw.yaml", 0.01, max_batch_requests=2)
    res = run_sweep(SweepConfig(trace=str(trace), policies=["ar"], hw=str(hw), load_mode="rate",
                                points=4, load_range=(0.125, 8), slas=[50.0], baseline=None))
    by_load = res.results.set_index("load")
    assert not by_load.loc[0.125, "overloaded"]
    for load in (2.0, 8.0):
        assert by_load.loc[load, "overloaded"] and by_load.loc[load, "overload_reason"].startswith("queue grows")
    row = res.sla.iloc[0]
    assert row["load_at_sla"] < by_load.index[by_load["overloaded"]].min()
    assert row["overloaded_loads"] == int(by_load["overloaded"].sum())
