"""`dspark-sim recommend`: a valid vLLM speculative config per SLA, justified by the sweep."""
import json
import sys
from pathlib import Path

import pandas as pd
import pytest

from sweepkit import write_constant_hw, write_linear_hw, write_parametric

from dspark_sim.cli import main
from dspark_sim.sim.speculation.spec_config import BatchSchedule
from dspark_sim.sweep.deploy import check_sglang_flags
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


def _recommend(tmp_path, *extra, sla="30,60"):
    trace = tmp_path / "t.jsonl"
    trace.write_text(TRACE)
    out = tmp_path / "rec"
    assert main(["recommend", "--trace", str(trace), "--sla", sla, "--points", "3",
                 "--load-range", "2,16", "--requests-per-user", "4", "--workers", "1",
                 "--out", str(out), *extra]) == 0
    return out, json.loads((out / "recommend.json").read_text())


def test_recommend_prints_valid_vllm_configs(tmp_path, capsys):
    out, doc = _recommend(tmp_path)
    printed = capsys.readouterr().out
    assert [c["sla_tps_user"] for c in doc["choices"]] == [30, 60]
    configs = [line.split("'")[1] for line in printed.splitlines() if "--speculative-config" in line]
    assert configs, printed
    for c, text in zip([c for c in doc["choices"] if c["speculative_config"]], configs):
        spec = json.loads(text)
        assert spec == c["speculative_config"]
        assert spec["method"] == "dspark" and 1 <= spec["num_speculative_tokens"] <= 5
        assert c["throughput_tok_s_per_gpu"] >= c["best_fixed_tok_s_per_gpu"] > 0
        assert c["sglang_flags"][:2] == ["--speculative-algorithm", "DSPARK"]
        assert check_sglang_flags(c["sglang_flags"]) == []
        assert f"SGLang: {' '.join(c['sglang_flags'])}" in printed
        try:
            import vllm.config.speculative  # noqa: F401
        except ImportError:
            continue
        _vllm_parse(spec)
    sla = (out / "sla.md").read_text()
    # no speculation is always a candidate and the baseline; Qwen3-8B has no MTP head: no MTP-1
    for policy in ("ar", "static-1", "static-5", "vllm-adaptive", "vllm-schedule"):
        assert policy in sla
    assert "mtp1" not in sla and doc["baseline"] == "ar" and "gain vs ar (no speculation)" in sla
    assert all(c["baseline"] == "ar" for c in doc["choices"])


def test_recommend_names_the_draft_model_for_vllm_and_sglang(tmp_path, capsys):
    out, doc = _recommend(tmp_path, "--acceptance", "eagle3-llama31-8b-g7", "--hw", "constant-10ms")
    spec = doc["choices"][0]["speculative_config"]
    # a constant step time: every verified draft is free, so speculation wins
    assert spec["method"] == "eagle3" and spec["model"] == "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
    k = spec["num_speculative_tokens"]
    assert doc["choices"][0]["sglang_flags"][:10] == [
        "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path",
        "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B", "--speculative-num-steps", str(k),
        "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", str(k + 1)]
    assert doc["choices"][0]["gain_vs_baseline"] > 0
    _, doc = _recommend(tmp_path, "--acceptance", "eagle3-llama31-8b-g7", "--hw", "constant-10ms",
                        "--draft-model", "/models/my-eagle3")
    assert doc["choices"][0]["speculative_config"]["model"] == "/models/my-eagle3"
    _, doc = _recommend(tmp_path, "--acceptance", "vllm-ngram-smollm2-135m-g7-t0", "--hw", "constant-10ms")
    spec = doc["choices"][0]["speculative_config"]
    assert spec["method"] == "ngram" and "model" not in spec
    assert (spec["prompt_lookup_min"], spec["prompt_lookup_max"]) == (1, 4)   # as measured
    assert doc["choices"][0]["sglang_flags"][:2] == ["--speculative-algorithm", "NGRAM"]


def test_recommend_chooses_no_speculation_when_drafts_do_not_pay(tmp_path, capsys):
    hw = write_linear_hw(tmp_path / "hw.yaml", 0.001, 0.002)        # every token costs a full token
    acc = write_parametric(tmp_path / "weak.acceptance.json", [0.2, 0.2], kind="eagle3")
    out, doc = _recommend(tmp_path, "--hw", str(hw), "--acceptance", str(acc), sla="5")
    choice = doc["choices"][0]
    assert choice["policy"] == "ar" and choice["speculative_config"] is None
    assert choice["sglang_flags"] == [] and "without --speculative-config" in choice["notes"][0]
    assert "@ 5 tok/s/user: no speculation" in capsys.readouterr().out


def test_recommend_baseline_is_mtp1_for_a_model_with_an_mtp_head(tmp_path):
    hw = write_constant_hw(tmp_path / "hw.yaml", 0.01)
    text = hw.read_text().replace("name: constant", "name: constant\nmodel: deepseek-v3")
    hw.write_text(text)
    out, doc = _recommend(tmp_path, "--hw", str(hw))
    assert doc["baseline"] == "mtp1" and "MTP head" in doc["baseline_reason"]
    assert "mtp1" in (out / "sla.md").read_text() and "gain vs mtp1" in (out / "sla.md").read_text()


def test_recommend_unreachable_sla_reports_the_fastest(tmp_path, capsys):
    out, doc = _recommend(tmp_path, sla="100000")
    choice = doc["choices"][0]
    assert choice["policy"] is None and choice["speculative_config"] is None
    assert "unmet by every policy; the fastest reached is" in choice["notes"][0]
    assert choice["notes"][0] in capsys.readouterr().out


def test_recommend_bad_input_exits_2(tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    trace.write_text(TRACE)
    assert main(["recommend", "--trace", str(trace), "--sla", "0", "--out", str(tmp_path / "x")]) == 2
    assert "sla" in capsys.readouterr().err
    assert main(["recommend", "--trace", str(trace), "--baseline", "mtp1", "--out", str(tmp_path / "y")]) == 2
    assert "field 'baseline'" in capsys.readouterr().err and not (tmp_path / "y").exists()


def test_recommend_prefers_a_fixed_k_unless_the_rest_pays(tmp_path):
    trace = tmp_path / "t.jsonl"
    trace.write_text(TRACE)
    args = ["recommend", "--trace", str(trace), "--sla", "30", "--points", "2", "--load-range", "2,8",
            "--requests-per-user", "3", "--workers", "1", "--cache", str(tmp_path / "cache")]
    assert main(args + ["--min-gain", "5", "--out", str(tmp_path / "a")]) == 0
    doc = json.loads((tmp_path / "a" / "recommend.json").read_text())
    choice = doc["choices"][0]
    assert choice["policy"] in ("ar", choice["best_fixed"])       # never the schedule or adaptive
    if choice["policy"] != "ar":
        assert choice["gain_vs_best_fixed"] == 0
        assert set(choice["speculative_config"]) == {"method", "num_speculative_tokens"}
    assert main(args + ["--min-gain", "10", "--out", str(tmp_path / "b")]) == 2


def test_recommend_sees_the_cuda_graph_capture_limit(tmp_path):
    """Issue 41: the same GPU with a 16-token capture limit and a 200 ms eager step above it.
    Without the limit a fixed K of 3 or more is recommended at a loose SLA; with it the best
    fixed K shrinks (verify batches above 16 tokens run eagerly) and the answer's throughput
    falls with it."""
    flat = dict(s0=0.01, s1=1e-5)
    free = write_linear_hw(tmp_path / "free.yaml", **flat)
    capped = write_linear_hw(tmp_path / "capped.yaml", **flat, cudagraph={
        "max_capture_size": 16, "eager": {"floor_s": 0.2, "per_token_s": 0.0, "source": "given"}})
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    _, without = _recommend(tmp_path / "a", "--hw", str(free), sla="5")
    _, with_limit = _recommend(tmp_path / "b", "--hw", str(capped), sla="5")
    free_k, capped_k = (int(d["choices"][0]["best_fixed"].split("-")[1]) for d in (without, with_limit))
    assert without["choices"][0]["policy"] == f"static-{free_k}" and free_k >= 3
    assert capped_k < free_k           # the best fixed K shrinks to stay near the graphs
    assert with_limit["choices"][0]["throughput_tok_s_per_gpu"] < \
        0.5 * without["choices"][0]["throughput_tok_s_per_gpu"]
