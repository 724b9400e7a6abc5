"""The validation arithmetic: error table, pass rule, iteration cost errors, output agreement."""
import numpy as np
import pandas as pd
import pytest
from simkit import table_hw

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
