"""The validation arithmetic: error table, pass rule, iteration cost errors, output agreement."""
import numpy as np
import pandas as pd
import pytest
from simkit import table_hw

from dspark_sim.errors import InputError
from dspark_sim.serve.engine import ServeResult
from dspark_sim.serve.validate import error_table, iteration_cost_errors, outputs_agree
from dspark_sim.sim.replay import ReplayResult


def _summary(throughput, p50):
    return {"throughput_tok_s": throughput, "tps_user": {"mean": p50, "p10": p50, "p50": p50, "p90": p50},
            "ttft_s": {"mean": 1.0, "p50": 1.0, "p90": 1.0}, "tpot_s": {"p50": 0.1},
            "mean_verify_len": 0.0, "mean_tau": 1.0, "duration_s": 10.0}


def _engine(values, outputs=None):
    return [ServeResult("p", pd.DataFrame(), _summary(t, u), outputs or [[1, 2]]) for t, u in values]


def test_error_table_pass_rule():
    engine = {"a": _engine([(100, 10), (110, 10), (90, 10)]), "b": _engine([(100, 10), (101, 10)])}
    sim = {"a": [ReplayResult("a", pd.DataFrame(), _summary(108, 10.4))],
           "b": [ReplayResult("b", pd.DataFrame(), _summary(108, 11.0))]}
    t = error_table(engine, sim).set_index(["policy", "metric"])
    a = t.loc[("a", "throughput_tok_s")]
    assert a["engine_mean"] == 100 and a["engine_min"] == 90 and a["engine_max"] == 110
    assert a["engine_spread"] == pytest.approx(0.10) and a["sim_error"] == pytest.approx(0.08)
    assert a["pass"] and a["within_engine_range"] and not a["within_5pct"]   # 8% but inside the range
    assert t.loc[("a", "tps_user.p50"), "pass"]                               # +4%
    b = t.loc[("b", "throughput_tok_s")]
    assert not b["pass"] and b["sim_error"] == pytest.approx(108 / 100.5 - 1)  # 7.5%, outside range
    assert not t.loc[("b", "tps_user.p50"), "pass"]                            # +10%


def test_iteration_cost_errors_use_the_profiles_cost():
    hw = table_hw([1, 10], [0.01, 0.02], per_context=1e-5,
                  draft={"dspark": {"requests": [1, 10], "seconds": [0.001, 0.01]}})
    it = pd.DataFrame({"start_s": [0.0, 1.0], "end_s": [0.022, 1.011], "decode_requests": [2, 0],
                       "verified_drafts": [3, 0], "prefill_tokens": [0, 1], "batch_tokens": [5, 1],
                       "context_tokens": [100, 0], "drafts_per_request": [7, 0],
                       "draft_s": [0.002, 0.0], "forward_s": [0.018, 0.011]})
    c = iteration_cost_errors(it, hw, "dspark")
    predicted = [0.01 + 4 / 9 * 0.01 + 100 * 1e-5 + 0.002, 0.01]
    assert c["predicted_s"] == pytest.approx(sum(predicted))
    assert c["total_error"] == pytest.approx(sum(predicted) / 0.033 - 1)
    assert c["median_error"] == pytest.approx(np.median([predicted[0] / 0.022 - 1, predicted[1] / 0.011 - 1]))
    assert c["decode_only_error"] == pytest.approx(predicted[0] / 0.022 - 1)
    assert c["with_prefill_error"] == pytest.approx(predicted[1] / 0.011 - 1)


def test_outputs_agree_counts_differing_requests():
    engine = {"a": _engine([(1, 1)], [[1, 2], [3]]), "b": _engine([(1, 1), (1, 1)], [[1, 2], [4]])}
    assert outputs_agree(engine) == {"runs": 3, "requests": 2, "requests_differing": 1}


def test_iteration_cost_errors_price_prefill_and_drafts_made():
    """With a prefill curve and a block drafter's per-draft seconds, the profile's cost of a real
    iteration is step(B) - step(P) + prefill(P) + seconds(R) + (d - D) x per_draft_seconds(R)."""
    hw = table_hw([1, 10], [0.01, 0.02], draft={"dspark": {"requests": [1, 10], "seconds": [0.008, 0.017],
                                                           "drafts": 7, "per_draft_seconds": [0.001, 0.002]}},
                  prefill_time={"prefill_tokens": [1, 10], "seconds": [0.004, 0.013]})
    it = pd.DataFrame({"start_s": [0.0, 1.0], "end_s": [0.03, 1.02], "decode_requests": [1, 1],
                       "verified_drafts": [2, 0], "prefill_tokens": [4, 0], "batch_tokens": [7, 2],
                       "context_tokens": [0, 0], "drafts_per_request": [3, 1],
                       "draft_s": [0.004, 0.002], "forward_s": [0.02, 0.01]})
    c = iteration_cost_errors(it, hw, "dspark")
    step = lambda b: 0.01 + (b - 1) / 9 * 0.01  # noqa: E731
    predicted = [step(7) - step(4) + (0.004 + 3 * 0.001) + 0.008 - 4 * 0.001,
                 step(2) + 0.008 - 6 * 0.001]
    assert c["predicted_s"] == pytest.approx(sum(predicted))
    assert c["with_prefill_error"] == pytest.approx(predicted[0] / 0.03 - 1)


def test_serve_results_read_back_as_written(tmp_path):
    """validate --engine-runs simulates again against runs read back from disk: what
    write_serve_results wrote, read_serve_results returns."""
    from dspark_sim.serve.engine import read_serve_results, write_serve_results

    frame = pd.DataFrame({"id": ["a", "b"], "task": ["chat", "math"], "ttft_s": [0.5, 0.25]})
    iters = pd.DataFrame({"start_s": [0.0], "end_s": [0.1], "prefill_tokens": [3]})
    res = ServeResult("dspark", frame, _summary(5.0, 2.0), [[1, 2], [3]], [[(7, 7, 2)], []], iters)
    [where] = write_serve_results([res], ["a", "b"], tmp_path / "run-0")
    back = read_serve_results(where, "dspark")
    pd.testing.assert_frame_equal(back.requests, frame)
    pd.testing.assert_frame_equal(back.iterations, iters)
    assert back.summary == res.summary and back.outputs == res.outputs and back.steps == res.steps
    with pytest.raises(InputError) as err:
        read_serve_results(tmp_path / "missing", "dspark")
    assert err.value.field == "--engine-runs" and "missing" in str(err.value)
