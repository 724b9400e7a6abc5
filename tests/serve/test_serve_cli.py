"""`dspark-sim serve-replay` and `dspark-sim validate` on a tiny local model directory."""
import json

import pandas as pd
import pytest
from toys import save_tiny_model

from dspark_sim.cli import main
from dspark_sim.sim.output.metrics import REQUEST_COLUMNS

HW = """schema: dspark-sim/hw/v1
name: tiny
source: fitted
step_time: {batch_tokens: [1, 8, 64], seconds: [0.001, 0.0012, 0.003]}
draft_time: {ngram: {requests: [1, 4], seconds: [0.0001, 0.0003]}}
max_batch_tokens: 48
max_batch_requests: 3
"""
TRACE = [
    {"id": "a", "arrival_s": 0.0, "prompt_tokens": 30, "output_tokens": 20, "task": "code"},
    {"id": "b", "arrival_s": 0.0, "prompt_tokens": 70, "output_tokens": 12, "task": "math"},
    {"id": "c", "arrival_s": 0.01, "prompt_tokens": 5, "output_tokens": 25, "task": "chat"},
    {"id": "d", "arrival_s": 0.02, "prompt_tokens": 40, "output_tokens": 1},
]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("serve")
    save_tiny_model(d / "model", eos=None)
    (d / "hw.yaml").write_text(HW)
    (d / "t.jsonl").write_text("".join(json.dumps(r) + "\n" for r in TRACE))
    return d


def _common(d):
    return ["--target", str(d / "model"), "--hw", str(d / "hw.yaml"), "--drafter", "ngram",
            "--acceptance", "smollm2-135m-ngram-g7-t0", "--threads", "1"]


def test_serve_replay_writes_the_simulators_outputs(files, tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["serve-replay", str(files / "t.jsonl"), "--policy", "ar,static-2",
                 *_common(files), "--out", str(out)]) == 0
    for pol in ("ar", "static-2"):
        frame = pd.read_csv(out / pol / "requests.csv")
        assert list(frame.columns) == REQUEST_COLUMNS and list(frame["id"]) == ["a", "b", "c", "d"]
        assert list(frame["output_tokens"]) == [20, 12, 25, 1]
        summary = json.loads((out / pol / "summary.json").read_text())
        assert summary["completed"] == 4 and summary["engine"] == "real"
        outputs = [json.loads(line) for line in (out / pol / "outputs.jsonl").read_text().splitlines()]
        assert [len(o["output_ids"]) for o in outputs] == [20, 12, 25, 1]
        assert len(pd.read_csv(out / pol / "iterations.csv")) == summary["iterations"]
    ar = (out / "ar" / "outputs.jsonl").read_text().splitlines()
    spec = (out / "static-2" / "outputs.jsonl").read_text().splitlines()
    assert [json.loads(a)["output_ids"] for a in ar] == [json.loads(s)["output_ids"] for s in spec]
    assert "throughput" in capsys.readouterr().out


def test_validate_writes_the_error_table(files, tmp_path, capsys):
    out = tmp_path / "val"
    assert main(["validate", str(files / "t.jsonl"), "--policies", "ar,dspark", *_common(files),
                 "--repeats", "2", "--out", str(out)]) == 0
    doc = json.loads((out / "validation.json").read_text())
    table = pd.DataFrame(doc["table"])
    assert set(table["policy"]) == {"ar", "dspark"} and (table["runs"] == 2).all()
    row = table[(table.policy == "ar") & (table.metric == "throughput_tok_s")].iloc[0]
    assert row["engine_min"] <= row["engine_mean"] <= row["engine_max"]
    assert row["sim_error"] == pytest.approx(row["sim"] / row["engine_mean"] - 1)
    assert doc["outputs"]["requests_differing"] == 0 and doc["outputs"]["runs"] == 4
    assert len(doc["iteration_cost"]["dspark"]) == 2
    for pol in ("ar", "dspark"):
        for k in (0, 1):
            assert (out / "engine" / pol / f"run-{k}" / "requests.csv").exists()
            assert (out / "sim" / pol / f"seed-{k}" / "summary.json").exists()
    assert (out / "overlay.png").stat().st_size > 10_000
    assert "| ar | throughput" in (out / "validation.md").read_text()
    assert "sim error" in capsys.readouterr().out


@pytest.mark.parametrize("args, message", [
    (["--policy", "oracle"], "cannot run oracle"),
    (["--policy", "dspark", "--acceptance", "no-such-profile"], "no-such-profile"),
    (["--policy", "static-9"], "gamma = 7"),
    (["--policy", "ar", "--time-scale", "0"], "--time-scale"),
])
def test_serve_replay_bad_input_exits_2(files, tmp_path, capsys, args, message):
    out = tmp_path / "x"
    common = [a for a in _common(files)]
    if "--acceptance" in args:
        i = common.index("--acceptance")
        del common[i:i + 2]
    assert main(["serve-replay", str(files / "t.jsonl"), *common, *args, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not out.exists()


def test_missing_shipped_acceptance_and_bad_trace(files, tmp_path, capsys):
    out = tmp_path / "x"
    assert main(["serve-replay", str(files / "t.jsonl"), "--policy", "dspark", "--drafter", "none",
                 "--target", str(files / "model"), "--hw", str(files / "hw.yaml"),
                 "--out", str(out)]) == 2
    assert "pass --acceptance" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(TRACE[0]) + "\n" + '{"arrival_s": 1, "prompt_tokens": 0, "output_tokens": 3}\n')
    assert main(["serve-replay", str(bad), *_common(files), "--out", str(out)]) == 2
    assert f"{bad}:2" in capsys.readouterr().err
    assert not out.exists()
