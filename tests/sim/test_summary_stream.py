"""Streaming outputs: the summary fed in chunks equals the one-frame summary (exact mode), the
sketch's percentiles keep their stated relative-error bound, and requests.csv written in chunks
has the bytes of the one-shot CSV."""
import math

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from simkit import make_trace, parametric, table_hw

from dspark_sim.sim.cluster.run import simulate
from dspark_sim.sim.output.metrics import request_columns, requests_csv, requests_frame, summarise
from dspark_sim.sim.output.files import write_requests
from dspark_sim.sim.output.sketch import QuantileSketch
from dspark_sim.sim.output.summary import SummaryAccumulator

LABELS = dict(policy="dspark", trace="t", hw="h", acceptance="a", seed=0, gpus=2, iterations=7,
              sim_wall_s=0.5)


@pytest.fixture(scope="module")
def outcome():
    rng = np.random.default_rng(0)
    n = 500
    trace = make_trace(np.cumsum(rng.exponential(0.01, n)), rng.integers(10, 300, n),
                       rng.integers(1, 80, n))
    hw = table_hw([1, 64, 512], [0.01, 0.012, 0.03], max_batch_tokens=256)
    return simulate(trace, "dspark", hw, parametric({"chat": [0.8, 0.6, 0.4]}), replicas=2)


@pytest.mark.parametrize("chunk", [1, 7, 128, 10_000])
def test_chunked_outputs_equal_one_shot(outcome, tmp_path, chunk):
    frame = requests_frame(outcome.table)
    acc = SummaryAccumulator()
    path = tmp_path / "requests.csv"
    write_requests(outcome.table, path, acc, chunk_rows=chunk)
    assert path.read_text() == requests_csv(frame)
    assert acc.summary(**LABELS) == summarise(frame, **LABELS)
    assert [p.name for p in tmp_path.iterdir()] == ["requests.csv"]     # no temporary left


def test_parquet_holds_the_same_rows(outcome, tmp_path):
    pytest.importorskip("pyarrow")
    path = tmp_path / "requests.parquet"
    write_requests(outcome.table, path, fmt="parquet", chunk_rows=64)
    pd.testing.assert_frame_equal(pd.read_parquet(path), requests_frame(outcome.table),
                                  check_dtype=False)


def test_failed_write_leaves_nothing(outcome, tmp_path):
    class Boom(SummaryAccumulator):
        def add(self, columns):
            raise RuntimeError("boom")
    with pytest.raises(RuntimeError):
        write_requests(outcome.table, tmp_path / "requests.csv", Boom(), chunk_rows=50)
    assert list(tmp_path.iterdir()) == []


def test_sketch_summary_is_close_and_labelled(outcome):
    cols = request_columns(outcome.table)
    exact, sketch = SummaryAccumulator(), SummaryAccumulator("sketch")
    exact.add(cols)
    for lo in range(0, outcome.table.n, 64):
        sketch.add(request_columns(outcome.table, lo, lo + 64))
    a, b = exact.summary(**LABELS), sketch.summary(**LABELS)
    assert b["quantiles"] == {"method": "sketch", "relative_accuracy": 0.005}
    assert a["throughput_tok_s"] == b["throughput_tok_s"]
    for name in ("ttft_s", "tpot_s", "tps_user"):
        assert b[name]["mean"] == pytest.approx(a[name]["mean"], rel=1e-12)
        v = np.sort(cols[name][~np.isnan(cols[name])])
        for key, est in b[name].items():
            if key != "mean":
                q = int(key[1:]) / 100
                lower = v[math.floor(q * (len(v) - 1))]
                assert abs(est - lower) <= 0.005 * lower * (1 + 1e-9), (name, key)


values = st.lists(st.one_of(st.floats(1e-6, 1e6), st.just(0.0)), min_size=1, max_size=300)


@settings(max_examples=200, deadline=None)
@given(values, st.integers(1, 50), st.sampled_from([0.001, 0.005, 0.02]),
       st.floats(0.0, 1.0))
def test_sketch_relative_error_bound(xs, chunk, accuracy, q):
    sketch = QuantileSketch(accuracy)
    for lo in range(0, len(xs), chunk):
        sketch.add(np.array(xs[lo:lo + chunk]))
    v = np.sort(np.array(xs))
    truth = v[math.floor(q * (len(v) - 1))]
    est = sketch.quantile(q)
    assert abs(est - truth) <= accuracy * truth * (1 + 1e-9)
    assert sketch.count == len(xs)


def test_sketch_empty_and_nan():
    sketch = QuantileSketch()
    sketch.add(np.array([np.nan]))
    assert sketch.quantile(0.5) is None
    with pytest.raises(ValueError):
        sketch.add(np.array([-1.0]))
