"""`dspark-sim recommend`: a valid vLLM speculative config per SLA, justified by the sweep."""
import json
import sys
from pathlib import Path

import pandas as pd
import pytest

from dspark_sim.cli import main
from dspark_sim.sim.speculation.spec_config import BatchSchedule
from dspark_sim.sweep.recommend import derive_schedule

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "sim"))
from test_vllm_reference import _vllm_parse  # noqa: E402

TRACE = "".join(f'{{"arrival_s": {0.1 * i:.1f}, "prompt_tokens": {40 + 17 * i % 300}, '
                f'"output_tokens": {20 + 11 * i % 120}, "task": "chat"}}\n' for i in range(80))


def _results(rows):
    return pd.DataFrame([{"policy": p, "load": load, "seed": 0, "tps_user_p50": 100.0,
                          "throughput_tok_s_per_gpu": v} for p, load, v in rows])


def test_derived_schedule_takes_the_best_k_per_load():
    rows = [("static-1", 1, 10), ("static-3", 1, 30), ("static-1", 4, 40), ("static-3", 4, 60),
            ("static-1", 16, 90), ("static-3", 16, 70), ("static-1", 64, 99), ("static-3", 64, 50)]
    sched = derive_schedule(_results(rows), ["static-1", "static-3"], 3)
    assert sched == BatchSchedule(((1, 8, 3), (9, 64, 1)), 3)
    assert [sched.k_at(b) for b in (1, 4, 8, 9, 16, 64, 200)] == [3, 3, 3, 1, 1, 1, 1]


def test_recommend_prints_valid_vllm_configs(tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    trace.write_text(TRACE)
    out = tmp_path / "rec"
    assert main(["recommend", "--trace", str(trace), "--sla", "30,60", "--points", "3",
                 "--load-range", "2,16", "--requests-per-user", "4", "--workers", "1",
                 "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    doc = json.loads((out / "recommend.json").read_text())
    assert [c["sla_tps_user"] for c in doc["choices"]] == [30, 60]
    configs = [line.split("'")[1] for line in printed.splitlines() if "--speculative-config" in line]
    assert configs, printed
    for c, text in zip([c for c in doc["choices"] if c["speculative_config"]], configs):
        spec = json.loads(text)
        assert spec == c["speculative_config"]
        assert spec["method"] == "dspark" and 1 <= spec["num_speculative_tokens"] <= 5
        assert c["throughput_tok_s_per_gpu"] >= c["best_fixed_tok_s_per_gpu"] > 0
        try:
            import vllm.config.speculative  # noqa: F401
        except ImportError:
            continue
        _vllm_parse(spec)
    sla = (out / "sla.md").read_text()
    for policy in ("mtp1", "static-1", "static-5", "vllm-adaptive", "vllm-schedule"):
        assert policy in sla


def test_recommend_bad_input_exits_2(tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    trace.write_text(TRACE)
    assert main(["recommend", "--trace", str(trace), "--sla", "0", "--out", str(tmp_path / "x")]) == 2
    assert "sla" in capsys.readouterr().err


def test_recommend_prefers_a_fixed_k_unless_the_rest_pays(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text(TRACE)
    args = ["recommend", "--trace", str(trace), "--sla", "30", "--points", "2", "--load-range", "2,8",
            "--requests-per-user", "3", "--workers", "1", "--cache", str(tmp_path / "cache")]
    assert main(args + ["--min-gain", "5", "--out", str(tmp_path / "a")]) == 0
    doc = json.loads((tmp_path / "a" / "recommend.json").read_text())
    choice = doc["choices"][0]
    assert choice["policy"] == choice["best_fixed"] and choice["gain_vs_best_fixed"] == 0
    assert set(choice["speculative_config"]) == {"method", "num_speculative_tokens"}
    assert main(args + ["--min-gain", "10", "--out", str(tmp_path / "b")]) == 2
