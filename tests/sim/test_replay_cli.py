"""`dspark-sim replay`: outputs, determinism, defaults, and clean failures on bad input."""
import json
import subprocess
import sys

import pandas as pd
import pytest

from dspark_sim.cli import main
from dspark_sim.sim.metrics import REQUEST_COLUMNS
from dspark_sim.sim.replay import parse_acceptance_option

TRACE = "".join(
    f'{{"id": "q{i}", "arrival_s": {0.05 * i:.3f}, "prompt_tokens": {50 + 37 * i % 400}, '
    f'"output_tokens": {1 + 13 * i % 90}, "task": "{["chat", "code", "math"][i % 3]}"}}\n'
    for i in range(60))


@pytest.fixture
def trace(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(TRACE)
    return path


def test_headline_command_uses_shipped_defaults(trace, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["replay", str(trace), "--policy", "dspark", "--out", str(out)]) == 0
    frame = pd.read_csv(out / "requests.csv")                     # single policy: DIR/requests.csv
    assert list(frame.columns) == REQUEST_COLUMNS
    assert len(frame) == 60 and (frame["finish_s"] >= frame["first_token_s"]).all()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["hw"] == "h200-qwen3-8b-roofline" and summary["acceptance"] == "paper-dspark-g5"
    assert summary["requests"] == summary["completed"] == 60
    assert summary["output_tokens"] == frame["output_tokens"].sum()
    assert set(summary["tps_user"]) == {"mean", "p10", "p50", "p90", "p99"}
    for key in ("policy", "trace", "seed", "duration_s", "throughput_tok_s", "throughput_tok_s_per_gpu",
                "ttft_s", "tpot_s", "mean_verify_len", "mean_tau", "iterations", "sim_wall_s"):
        assert key in summary
    assert "throughput" in capsys.readouterr().out


def test_several_policies_side_by_side(trace, tmp_path, capsys):
    out = tmp_path / "out"
    rc = main(["replay", str(trace), "--policy", "mtp1,static-3,dspark", "--hw", "constant-10ms",
               "--replicas", "2", "--router", "least-outstanding", "--out", str(out)])
    assert rc == 0
    table = capsys.readouterr().out
    for p in ("mtp1", "static-3", "dspark"):
        assert p in table
        summary = json.loads((out / p / "summary.json").read_text())
        assert summary["policy"] == p and summary["gpus"] == 2
    assert json.loads((out / "mtp1" / "summary.json").read_text())["acceptance"] == "paper-mtp1"
    assert json.loads((out / "dspark" / "summary.json").read_text())["acceptance"] == "paper-dspark-g5"


def test_same_seed_byte_identical_requests_csv(trace, tmp_path):
    runs = []
    for name, seed in (("a", 3), ("b", 3), ("c", 4)):
        out = tmp_path / name
        assert main(["replay", str(trace), "--policy", "dspark", "--seed", str(seed), "--out", str(out)]) == 0
        runs.append((out / "requests.csv").read_bytes())
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]


def test_acceptance_option_forms():
    pols = ["ar", "mtp1", "dspark"]
    assert parse_acceptance_option(None, pols) == {"ar": None, "mtp1": "paper-mtp1", "dspark": "paper-dspark-g5"}
    assert parse_acceptance_option("x.json", pols) == {"ar": None, "mtp1": "x.json", "dspark": "x.json"}
    assert parse_acceptance_option("dspark=paper-dspark-g7", pols)["dspark"] == "paper-dspark-g7"


@pytest.mark.parametrize("line, field", [
    ('{"arrival_s": 9, "prompt_tokens": 0, "output_tokens": 3}', "prompt_tokens"),
    ('{"arrival_s": 9, "prompt_tokens": 3}', "output_tokens"),
    ('{"arrival_s": 0.001, "prompt_tokens": 3, "output_tokens": 3}', "arrival_s"),
])
def test_bad_trace_line_exit_2_nothing_written(trace, tmp_path, line, field):
    bad = tmp_path / "bad.jsonl"
    lines = TRACE.splitlines()
    lines.insert(41, line)
    bad.write_text("\n".join(lines) + "\n")
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "dspark_sim", "replay", str(bad), "--policy",
                           "mtp1,dspark", "--out", str(out)], capture_output=True, text=True)
    assert proc.returncode == 2
    assert f"{bad}:42: field '{field}'" in proc.stderr
    assert "Traceback" not in proc.stderr and "Traceback" not in proc.stdout
    assert not out.exists()


@pytest.mark.parametrize("args, field", [
    (["--policy", "static-9"], "policy"),          # K > gamma of the default profile (5)
    (["--policy", "bogus"], "policy"),
    (["--router", "random"], "router"),
    (["--replicas", "0"], "replicas"),
    (["--acceptance", "nope=paper-mtp1"], "acceptance"),
])
def test_bad_options_exit_2(trace, tmp_path, capsys, args, field):
    out = tmp_path / "out"
    assert main(["replay", str(trace), "--out", str(out)] + args) == 2
    assert f"field '{field}'" in capsys.readouterr().err
    assert not out.exists()


def test_missing_profile_names_the_file(trace, tmp_path, capsys):
    assert main(["replay", str(trace), "--hw", "no-such-hw", "--out", str(tmp_path / "o")]) == 2
    assert "no-such-hw" in capsys.readouterr().err


def test_loop_engine_refuses_policies_it_cannot_plan(trace, tmp_path, capsys):
    # dspark with measured per-step confidences decides per iteration: the block engine's job
    acc = tmp_path / "m.acceptance.json"
    acc.write_text(json.dumps({
        "schema": "dspark-sim/acceptance/v1", "name": "m", "gamma": 2, "drafter_kind": "dspark",
        "tasks": {"chat": {"kind": "empirical", "requests": [
            {"accepted": [2, 0], "confidence": [[0.9, 0.8], [0.3, 0.2]]}]}}}))
    args = ["replay", str(trace), "--policy", "dspark", "--acceptance", str(acc)]
    assert main(args + ["--sim-engine", "loop", "--out", str(tmp_path / "o")]) == 2
    assert "field 'engine'" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
    assert main(args + ["--out", str(tmp_path / "p")]) == 0


def test_sim_engine_is_its_own_option(trace, tmp_path, capsys):
    # --sim-engine picks the simulator's engine (all give the same bytes); replay --engine, the
    # name before the rename, exits 2 naming the new option, and writes nothing
    outs = []
    for engine in ("fast", "reference"):
        out = tmp_path / engine
        assert main(["replay", str(trace), "--policy", "mtp1", "--sim-engine", engine,
                     "--out", str(out)]) == 0
        outs.append((out / "requests.csv").read_bytes())
    assert outs[0] == outs[1]
    capsys.readouterr()
    assert main(["replay", str(trace), "--engine", "fast", "--out", str(tmp_path / "old")]) == 2
    err = capsys.readouterr().err
    assert "field '--engine'" in err and "--sim-engine fast" in err and "Traceback" not in err
    assert not (tmp_path / "old").exists()
    assert main(["replay", str(trace), "--sim-engine", "turbo", "--out", str(tmp_path / "bad")]) == 2
    assert "unknown engine 'turbo'" in capsys.readouterr().err
