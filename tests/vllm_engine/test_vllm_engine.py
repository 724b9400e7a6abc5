"""A real vLLM engine serves a tiny trace end to end (AIPerf on the fixed schedule), and what it
measured comes back as an acceptance profile the simulator reproduces.

Needs `make setup-vllm` (conftest.py: skipped without it, failed under DSPARK_SIM_REQUIRE_VLLM=1)."""
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from dspark_sim.cli import main
from dspark_sim.profiles.acceptance import AcceptanceProfile
from dspark_sim.profiles.registry import hw_profile_path, load_hw_profile
from dspark_sim.sim.replay import replay
from dspark_sim.traces.schema import load_trace
from dspark_sim.vllm.prometheus import scrape_counts

pytestmark = pytest.mark.vllm
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def served(tmp_path_factory, vllm_interpreter, aiperf_executable):
    tmp = tmp_path_factory.mktemp("vllm")
    lines = (REPO / "traces" / "validate-burst.jsonl").read_text().splitlines()[:8]
    recs = [json.loads(x) for x in lines]
    for r in recs:                                   # a few seconds of decoding on two cores
        r["output_tokens"] = min(r["output_tokens"], 40)
        r["arrival_s"] = round(r["arrival_s"] / 4, 6)
    trace = tmp / "tiny.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in recs))
    out = tmp / "run"
    rc = main(["serve-replay", str(trace), "--engine", "vllm", "--policy", "static-3",
               "--vllm-drafter", "ngram:1-4", "--out", str(out), "--timeout", "300"])
    assert rc in (0, None)
    return trace, out


def test_serve_replay_writes_the_trace_served(served):
    trace_path, out = served
    trace = load_trace(trace_path)
    frame = pd.read_csv(out / "requests.csv")
    summary = json.loads((out / "summary.json").read_text())
    assert list(frame["id"]) == list(trace.ids)
    assert (frame["output_tokens"].to_numpy() == trace.output_tokens).all()
    assert (frame["prompt_tokens"].to_numpy() == trace.prompt_tokens).all()
    assert summary["completed"] == summary["requests"] == len(trace)
    assert summary["output_tokens"] == int(trace.output_tokens.sum())
    fid = summary["replay_fidelity"]
    assert fid["records"] == len(trace) and fid["prompt_tokens_differing"] == 0
    assert fid["output_tokens_differing"] == 0 and fid["error_count"] == 0
    assert (frame["ttft_s"] > 0).all() and (frame["finish_s"] >= frame["first_token_s"]).all()
    assert summary["engine"] == "vllm" and summary["speculative_config"]["num_speculative_tokens"] == 3
    assert (out / "iterations.csv").stat().st_size > 0


def test_imported_acceptance_reproduces_what_vllm_reported(served, tmp_path):
    trace_path, out = served
    trace = load_trace(trace_path)
    tasks = tmp_path / "tasks.json"
    tasks.write_text(json.dumps({str(i): str(t) for i, t in zip(trace.ids, trace.task)}))
    acc = tmp_path / "acc.json"
    assert main(["acceptance", "import", "vllm", str(out / "aiperf" / "profile_export.jsonl"),
                 "--task-map", str(tasks), "--out", str(acc)]) in (0, None)
    prof = AcceptanceProfile.load(acc)
    assert prof.gamma == 3
    # the server's own counters over the run agree with the per-request records
    counts, _ = scrape_counts(out / "metrics-after.txt", before=out / "metrics-before.txt")
    frame = pd.read_csv(out / "requests.csv")
    assert counts.num_accepted_tokens == frame["accepted_tokens"].sum()
    assert counts.num_draft_tokens == frame["drafted_tokens"].sum()
    # vLLM's mean acceptance length (over steps that drafted) is the imported profile's
    imported = json.loads(acc.read_text())["vllm"]
    spec_steps = sum(t["num_drafts"] for t in imported["tasks"].values())
    assert spec_steps == counts.num_drafts
    # the simulator, walking the imported steps, makes vLLM's tokens per decode step and verifies
    # as many drafts as vLLM drafted (within the sampling error of picking measured requests)
    hw = load_hw_profile(hw_profile_path("constant-10ms"))
    per_request = (frame["output_tokens"] - 1) / frame["steps"]
    real_tau = (frame["output_tokens"] - 1).sum() / frame["steps"].sum()
    se = float(per_request.std(ddof=1) / np.sqrt(len(frame)))
    taus, verified = [], []
    for seed in range(8):
        sim = replay(trace, "static-3", hw, prof, seed=seed)
        taus.append(sim.summary["mean_tau"])
        verified.append(sim.requests["verified_tokens"].sum())
    assert abs(np.mean(taus) - real_tau) <= 3 * se + 0.02, (taus, real_tau, se)
    drafted = frame["drafted_tokens"].sum()
    assert abs(np.mean(verified) / drafted - 1) < 0.35, (verified, drafted)
    assert np.mean(verified) < 3 * frame["steps"].sum()      # no-draft steps verify nothing


def test_validate_engine_vllm_simulates_again_against_the_served_run(served, tmp_path, capsys):
    # validate --engine vllm --engine-runs: dspark_sim/vllm/validate.py on the run served above
    # (laid out as validate writes its engine runs), nothing served again; the acceptance is
    # imported from the run's own AIPerf records
    import shutil

    trace_path, out = served
    runs = tmp_path / "runs"
    shutil.copytree(out, runs / "engine" / "static-3")
    dest = tmp_path / "validation"
    assert main(["validate", str(trace_path), "--engine", "vllm", "--policies", "static-3",
                 "--repeats", "1", "--engine-runs", str(runs), "--out", str(dest)]) in (0, None)
    doc = json.loads((dest / "validation.json").read_text())
    assert doc["engine"] == "vllm" and doc["policies"] == ["static-3"] and doc["repeats"] == 1
    assert doc["hw"] == "cpu-2core-smollm2-135m-vllm" and doc["engine_runs"] == str(runs)
    assert doc["acceptance"]["static-3"] == str(runs / "engine" / "static-3" / "acceptance.json")
    assert doc["command"].startswith("dspark-sim ")
    assert "static-3" in capsys.readouterr().out and (dest / "validation.md").is_file()


def test_validate_times_each_runs_server_before_its_trace_and_simulates_at_that_speed(
        tmp_path, vllm_interpreter, aiperf_executable):
    # validate --engine vllm, served: a speed check on the run's own server just before its
    # trace (vllm/speed_check.py), kept beside the run and out of the run's own records, and the
    # run simulated on the profile scaled by the check's factors
    from dspark_sim.profiles.speed_scale import speed_scaled
    from dspark_sim.vllm.speed_check import SpeedCheck

    lines = (REPO / "traces" / "validate-burst.jsonl").read_text().splitlines()[:4]
    recs = [json.loads(x) for x in lines]
    for r in recs:
        r["output_tokens"] = min(r["output_tokens"], 24)
    trace_path = tmp_path / "tiny.jsonl"
    trace_path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    dest = tmp_path / "validation"
    assert main(["validate", str(trace_path), "--engine", "vllm", "--policies", "ar", "--repeats", "1",
                 "--out", str(dest), "--timeout", "300"]) in (0, None)
    doc = json.loads((dest / "validation.json").read_text())
    run = dest / "engine" / "ar"
    check = SpeedCheck.load(run / "speed-check.json")
    assert check.drafter is None
    assert {t.requests for t in check.timings if t.op == "decode"} == {1, 4, 8}
    assert {t.batch_tokens for t in check.timings if t.op == "prefill"} == {256, 512}
    hw = load_hw_profile(hw_profile_path(doc["hw"]))      # the shipped one, or this machine's cached
    decode, prefill = check.factors(hw)
    assert doc["speed_check"] == {"ar": [{"decode": round(decode, 4), "prefill": round(prefill, 4)}]}
    # the run's own iterations hold its trace's prompts and none of the check's
    trace = load_trace(trace_path)
    iterations = pd.read_csv(run / "iterations.csv")
    assert iterations["ctx_tokens"].sum() == trace.prompt_tokens.sum()
    # simulated at that speed: the simulator's run is the replay on the scaled profile
    sim = pd.read_csv(dest / "sim" / "ar" / "seed-0" / "requests.csv")
    again = replay(trace, "ar", speed_scaled(hw, decode, prefill), None, seed=0)
    np.testing.assert_allclose(sim["finish_s"], again.requests["finish_s"])
    # and the same run simulated on the profile as it is
    plain = tmp_path / "plain"
    assert main(["validate", str(trace_path), "--engine", "vllm", "--policies", "ar", "--repeats", "1",
                 "--engine-runs", str(dest), "--no-speed-check", "--out", str(plain)]) in (0, None)
    assert json.loads((plain / "validation.json").read_text())["speed_check"] is None
