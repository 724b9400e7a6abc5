"""`dspark-sim sweep` and `dspark-sim plan` end to end: outputs, plots, parallel workers, bad input."""
import json

import numpy as np
import pandas as pd
import pytest
from sweepkit import REPO, write_constant_hw, write_identical_trace

from dspark_sim.cli import main
from dspark_sim.profiles.registry import acceptance_profile_path
from dspark_sim.sim.replay import default_acceptance
from dspark_sim.sweep.plan import PlanConfig, passes, plan_capacity
from dspark_sim.sweep.point import run_point
from dspark_sim.sweep.spec import Point

CHAT = str(REPO / "traces" / "chat-heavy-hour.jsonl")


def assert_png(path):
    """A real, non-blank PNG."""
    import matplotlib.image as mpimg

    assert path.stat().st_size > 10_000
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    img = mpimg.imread(path)
    assert img.shape[0] > 300 and img.shape[1] > 300 and float(img[..., :3].std()) > 0.02


def test_sweep_cli_concurrency_with_seeds_and_workers(tmp_path, capsys):
    out = tmp_path / "sweep"
    rc = main(["sweep", "--trace", CHAT, "--policies", "mtp1,static-3,dspark", "--points", "3",
               "--load-range", "1,16", "--requests-per-user", "4", "--requests", "400",
               "--seeds", "2", "--workers", "2", "--sla", "80,120", "--out", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "24 points: 0 from the cache, 24 simulated" in text      # ar is always swept
    res = pd.read_csv(out / "results.csv")
    assert len(res) == 4 * 3 * 2 and set(res["seed"]) == {0, 1}
    assert set(res["load"]) == {1.0, 4.0, 16.0}
    assert (res["throughput_tok_s_per_gpu"] > 0).all() and (res["tps_user_p50"] > 0).all()
    assert (res.loc[res["policy"] == "mtp1", "verify_tokens"] == 2.0).all()
    assert pd.read_parquet(out / "results.parquet").shape == res.shape
    sla = pd.read_csv(out / "sla-p50.csv")
    assert set(sla["policy"]) == {"ar", "mtp1", "static-3", "dspark"} and set(sla["sla_tps_user"]) == {80, 120}
    # Qwen3-8B has no MTP head: the gains are stated against no speculation
    assert (sla["baseline"] == "ar").all()
    assert "gain vs ar (no speculation)" in (out / "sla-p50.md").read_text()
    assert_png(out / "frontier-p50.png")
    assert_png(out / "concurrency.png")
    doc = json.loads((out / "sweep.json").read_text())
    assert doc["computed"] == 24 and doc["load_values"] == [1.0, 4.0, 16.0] and doc["baseline"] == "ar"
    # a second run reads every point from the cache and writes the same table
    assert main(["sweep", "--trace", CHAT, "--policies", "mtp1,static-3,dspark", "--points", "3",
                 "--load-range", "1,16", "--requests-per-user", "4", "--requests", "400",
                 "--seeds", "2", "--workers", "2", "--sla", "80,120", "--out", str(out)]) == 0
    assert "24 points: 24 from the cache, 0 simulated" in capsys.readouterr().out
    pd.testing.assert_frame_equal(pd.read_csv(out / "results.csv"), res)


def test_sweep_cli_rate_load(tmp_path):
    out = tmp_path / "rate"
    assert main(["sweep", "--trace", CHAT, "--policies", "mtp1,dspark", "--load", "rate",
                 "--points", "3", "--load-range", "1,16", "--requests", "300", "--workers", "1",
                 "--sla-percentile", "mean", "--out", str(out)]) == 0
    res = pd.read_csv(out / "results.csv")
    sla = pd.read_csv(out / "sla-mean.csv")
    assert (sla["percentile"] == "mean").all() and "(mean of requests)" in (out / "sla-mean.md").read_text()
    assert list(res["load"].unique()) == [1.0, 4.0, 16.0]
    offered = res.groupby("load")["offered_rate_req_s"].first().to_numpy()
    np.testing.assert_allclose(offered / offered[0], [1, 4, 16], rtol=1e-9)
    # more offered load: more requests in the system, more throughput (not yet saturated)
    for _, g in res.groupby("policy"):
        assert np.all(np.diff(g.sort_values("load")["concurrency"]) > 0)
    assert_png(out / "frontier-mean.png")


@pytest.mark.parametrize("args, field", [
    (["--load", "bursty"], "load"),
    (["--sla", "80,fast"], "sla"),
    (["--load-range", "8"], "load-range"),
    (["--load-range", "0.5,8"], "load-range"),
    (["--policies", "mtp1,static-9"], "policy"),
    (["--requests-per-user", "1"], "requests-per-user"),
    (["--requests-per-user", "2"], "requests-per-user"),   # the steady window would hold 1 request
    (["--warmup", "2", "--requests-per-user", "3"], "requests-per-user"),
    (["--executor", "slurm"], "executor"),
    (["--sla-percentile", "101"], "sla-percentile"),
    (["--sla-percentile", "median"], "sla-percentile"),
    (["--prefill", "remote"], "prefill"),
    (["--router", "random"], "router"),
    (["--baseline", "static-4"], "baseline"),              # not among the swept policies
    (["--overload-ttft-p99", "0"], "overload-ttft-p99"),
])
def test_sweep_bad_options_exit_2_and_write_nothing(tmp_path, capsys, args, field):
    out = tmp_path / "out"
    rc = main(["sweep", "--trace", CHAT, "--points", "2", "--load-range", "1,2", "--requests", "50",
               "--out", str(out)] + args)
    assert rc == 2
    err = capsys.readouterr().err
    assert f"field '{field}'" in err and "Traceback" not in err
    assert not out.exists()


def test_sweep_bad_trace_names_file_and_line(tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"arrival_s": 0, "prompt_tokens": 5, "output_tokens": 3}\n'
                   '{"arrival_s": 1, "prompt_tokens": 0, "output_tokens": 3}\n')
    out = tmp_path / "out"
    assert main(["sweep", "--trace", str(bad), "--out", str(out)]) == 2
    assert f"{bad}:2: field 'prompt_tokens'" in capsys.readouterr().err
    assert not out.exists()


def test_error_in_a_worker_process_exits_2(tmp_path, capsys):
    """A request whose last paged-KV step (drafts included) can never fit the pool is found by
    the simulation, in a worker: prompt + output fit the 512 tokens, + 5 drafts do not."""
    trace = write_identical_trace(tmp_path / "t.jsonl", 4, 500, 12)
    hw = write_constant_hw(tmp_path / "hw.yaml", 0.01, kv_capacity_tokens=512)
    out = tmp_path / "out"
    assert main(["sweep", "--trace", str(trace), "--hw", str(hw), "--policies", "static-3",
                 "--kv-semantics", "blocks", "--points", "2", "--load-range", "1,2",
                 "--requests-per-user", "3", "--workers", "2", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "field 'kv_capacity_tokens'" in err and "Traceback" not in err
    assert not (out / "results.csv").exists()


def test_oversized_request_names_the_trace_file_and_line(tmp_path, capsys):
    """Found before anything is simulated, with the trace's file, line and field."""
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"arrival_s": 0, "prompt_tokens": 50, "output_tokens": 10}\n\n'
                     '{"arrival_s": 1, "prompt_tokens": 95, "output_tokens": 10, "id": "huge"}\n')
    hw = write_constant_hw(tmp_path / "hw.yaml", 0.01, kv_capacity_tokens=100)
    for cmd in (["sweep", "--points", "1"], ["plan", "--sla", "10"]):
        out = tmp_path / cmd[0]
        assert main(cmd + ["--trace", str(trace), "--hw", str(hw), "--policies", "ar",
                           "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"error: {trace}:3: field 'prompt_tokens': prompt 95 + output 10"), err
        assert "kv_capacity_tokens 100" in err and "Traceback" not in err and not out.exists()


def test_profile_without_kv_capacity_is_stated(tmp_path, capsys):
    trace = write_identical_trace(tmp_path / "t.jsonl", 4, 50, 10)
    hw = write_constant_hw(tmp_path / "hw.yaml", 0.01, max_batch_requests=8)
    assert main(["sweep", "--trace", str(trace), "--hw", str(hw), "--policies", "ar", "--points", "1",
                 "--load-range", "2,2", "--requests-per-user", "3", "--workers", "1",
                 "--out", str(tmp_path / "o")]) == 0
    text = capsys.readouterr().out
    assert "sets no kv_capacity_tokens; KV memory is taken as unlimited" in text
    assert "unlimited" in json.loads((tmp_path / "o" / "sweep.json").read_text())["kv_note"]


def test_plan_equals_exhaustive_search(tmp_path):
    """Every replica count 1..12 evaluated: the plan returns the smallest that passes."""
    trace = write_identical_trace(tmp_path / "t.jsonl", 40, 1, 61, gap_s=0.05)
    hw = write_constant_hw(tmp_path / "hw.yaml", 0.01, max_batch_requests=2)
    cfg = PlanConfig(trace=str(trace), policies=["ar", "mtp1"], sla=80.0, hw=str(hw),
                     ttft_p99_s=0.5, max_replicas=64)
    result = plan_capacity(cfg, cache_dir=tmp_path / "cache")
    table = result.table.set_index("policy")
    base = Point(trace=str(trace), hw=str(hw), policy="", acceptance=None, load_mode="rate",
                 load=1.0, router="least-outstanding")
    for policy in ("ar", "mtp1"):
        acc = default_acceptance(policy)
        acc = str(acceptance_profile_path(acc).resolve()) if acc else None
        ok = [n for n in range(1, 13)
              if passes([run_point(Point(**{**vars(base), "policy": policy, "acceptance": acc,
                                            "replicas": n}))], cfg)]
        assert ok, policy
        assert table.loc[policy, "replicas"] == ok[0]
        assert ok == list(range(ok[0], 13))          # monotone on this case, as the search assumes
        assert ok[0] > 1
    # MTP-1 speeds every request up, so it needs no more replicas than plain decoding
    assert table.loc["mtp1", "replicas"] <= table.loc["ar", "replicas"]
    # passing = the SLA, the TTFT bound and no growing queue (overload.py)
    assert (result.evaluations["passes"] == result.evaluations.apply(
        lambda r: r["tps_user"] >= 80 and r["ttft_p99_s"] <= 0.5 and not r["overload_reason"], axis=1)).all()
    assert result.evaluations["overload_reason"].str.startswith("queue grows").any()


def test_plan_cli(tmp_path, capsys):
    out = tmp_path / "plan"
    rc = main(["plan", "--trace", CHAT, "--sla", "120", "--policies", "mtp1,dspark",
               "--rate-scale", "4", "--requests", "1500", "--gpu-hour-cost", "3.5",
               "--workers", "2", "--out", str(out)])
    assert rc == 0
    table = pd.read_csv(out / "plan.csv").set_index("policy")
    assert (table["status"] == "ok").all()
    assert (table["gpus"] == table["replicas"]).all()           # 1 GPU per replica
    assert (table["cost_per_hour"] == table["gpus"] * 3.5).all()
    evals = pd.read_csv(out / "evaluations.csv")
    for policy, row in table.iterrows():
        mine = evals[evals["policy"] == policy]
        assert mine.loc[mine["replicas"] == row["replicas"], "passes"].all()
        smaller = mine[mine["replicas"] == row["replicas"] - 1]
        assert row["replicas"] == 1 or (len(smaller) == 1 and not smaller["passes"].any())
    assert "GPUs saved vs ar (no speculation)" in (out / "plan.md").read_text()
    assert "ar" in set(table.index)                               # always a candidate
    assert "replicas serving" in capsys.readouterr().out


def test_plan_of_a_burst_has_no_arrival_rate_and_does_not_divide_by_zero(tmp_path):
    trace = write_identical_trace(tmp_path / "burst.jsonl", 20, 50, 20)      # every arrival at 0 s
    hw = write_constant_hw(tmp_path / "hw.yaml", 0.01)
    out = tmp_path / "plan"
    assert main(["plan", "--trace", str(trace), "--hw", str(hw), "--policies", "ar", "--sla", "10",
                 "--workers", "1", "--out", str(out)]) == 0
    evals = pd.read_csv(out / "evaluations.csv")
    assert len(evals) and (evals["throughput_tok_s_per_gpu"] > 0).all()
    point = Point(trace=str(trace), hw=str(hw), policy="ar", acceptance=None, load_mode="rate", load=1.0)
    assert run_point(point)["offered_rate_req_s"] is None
