"""`dspark-sim generate` and `measure`: end to end on a tiny local model, and clear bad-input errors."""
import json
import subprocess
import sys

import pytest
from toys import save_tiny_model

from dspark_sim.cli import main
from tests.strict_json import register_input
from dspark_sim.profiles import AcceptanceProfile


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return str(save_tiny_model(tmp_path_factory.mktemp("tiny") / "model"))


def test_generate_json_with_plain_comparison(model_dir, capsys):
    rc = main(["generate", "--target", model_dir, "--drafter", "ngram", "--prompt", "abcabcabc",
               "--max-new-tokens", "40", "--gamma", "4", "--json", "--compare-ar", "--device", "cpu"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0
    assert out["identical"] is True and out["output_ids"] == out["ar"]["output_ids"]
    assert 1 <= len(out["output_ids"]) <= 40 and out["steps"] == len(out["accepted"])
    assert out["mean_tau"] == pytest.approx(sum(out["accepted"]) / out["steps"] + 1, abs=1e-3)
    assert out["ar"]["mean_tau"] == 1.0 and isinstance(out["text"], str)


def test_generate_sampling_prints_text(model_dir, capsys):
    rc = main(["generate", "--target", model_dir, "--prompt", "hello", "--max-new-tokens", "8",
               "--temperature", "0.8", "--top-k", "20", "--seed", "3"])
    captured = capsys.readouterr()
    assert rc == 0 and "tok/s" in captured.err


def test_measure_writes_profile_report_and_resumes(model_dir, tmp_path, capsys):
    prompts = tmp_path / "p.jsonl"
    prompts.write_text("".join(json.dumps({"task": t, "prompt": f"{t} {i} " * 3}) + "\n"
                               for t in ("math", "chat") for i in range(3)))
    out = tmp_path / "tiny-ngram.acceptance.json"
    args = ["measure", "--target", model_dir, "--tasks", f"{prompts},code={prompts}", "--n", "2",
            "--max-new-tokens", "24", "--gamma", "4", "--out", str(out)]
    assert main(args) == 0
    prof = AcceptanceProfile.load(out)
    assert set(prof.tasks) == {"math", "chat", "code"} and prof.gamma == 4
    assert prof.drafter == "ngram" and prof.default_task == "chat"
    assert all(len(t.requests) == 2 for t in prof.tasks.values())
    report = json.loads((tmp_path / "tiny-ngram.report.json").read_text())
    for name in ("math", "chat", "code"):
        t = report["tasks"][name]
        lo, hi = t["mean_tau_ci95"]
        assert lo <= t["mean_tau"] <= hi or lo != lo   # NaN-safe
        assert t["identical_to_plain"] == "2/2" and t["speedup"] > 0
        assert len(t["position_accept"]) == 4 and abs(sum(t["run_distribution"]) - 1) < 1e-9
        assert t["mean_tau"] == pytest.approx(prof.tasks[name].mean_tau(4))
    md = (tmp_path / "tiny-ngram.report.md").read_text()
    assert "| math |" in md and "95% CI" in md
    for plot in ("position-accept", "tau-hist"):
        assert (tmp_path / f"tiny-ngram.{plot}.png").stat().st_size > 1000
    records = (tmp_path / "tiny-ngram.records.jsonl").read_text().splitlines()
    assert len(records) == 1 + 6
    before = out.read_text()
    assert main(args) == 0                              # every record reused: same profile
    assert out.read_text() == before


@pytest.mark.parametrize("args,needle", [
    (["generate", "--prompt", "x", "--gamma", "0"], "--gamma"),
    (["generate", "--prompt", "x", "--temperature", "-1"], "--temperature"),
    (["generate", "--prompt", "x", "--top-p", "1.5"], "--top-p"),
    (["generate", "--prompt", "x", "--max-new-tokens", "0"], "--max-new-tokens"),
    (["generate", "--prompt", "x", "--target", "/no/such/model"], "no such model directory"),
    (["generate", "--prompt", "x", "--target", "nobody/no-such-model-xyz"], "not cached locally"),
    (["generate", "--prompt", "x", "--target", "/no/such/file.gguf"], "no such GGUF file"),
    (["generate", "--prompt", "x", "--device", "tpu"], "--device"),
    (["measure", "--out", "o.json", "--gamma", "0"], "--gamma"),
    (["measure", "--out", "o.json", "--temperature", "-0.1"], "--temperature"),
    (["measure", "--out", "o.json", "--n", "0"], "--n"),
    (["measure", "--out", "o.json", "--tasks", "nope"], "--tasks"),
])
def test_bad_inputs_exit_2_without_traceback(args, needle, capsys, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and needle in err and "Traceback" not in err


def test_missing_drafter_and_malformed_prompt_file(model_dir, tmp_path, capsys):
    assert main(["generate", "--prompt", "x", "--target", model_dir, "--drafter", "nope"]) == 2
    assert "unknown drafter" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "fine"}\n{"prompt": \n')
    register_input(bad)                        # bad input on purpose (tests/strict_json.py)
    assert main(["measure", "--out", str(tmp_path / "o.acceptance.json"), "--target", model_dir,
                 "--tasks", f"math={bad}"]) == 2
    assert f"error: {bad}:2: not valid JSON" in capsys.readouterr().err


def test_console_script_exit_status_and_help():
    proc = subprocess.run([sys.executable, "-m", "dspark_sim", "generate", "--prompt", "x",
                           "--gamma", "0"], capture_output=True, text=True)
    assert proc.returncode == 2 and "--gamma" in proc.stderr and "Traceback" not in proc.stderr
    for cmd in ("generate", "measure"):
        proc = subprocess.run([sys.executable, "-m", "dspark_sim", cmd, "--help"],
                              capture_output=True, text=True)
        assert proc.returncode == 0 and "--target" in proc.stdout and "--gamma" in proc.stdout


@pytest.mark.parametrize("verify", ["scheduled", "lagged"])
def test_generate_with_the_scheduler_matches_plain_decoding(model_dir, capsys, verify):
    rc = main(["generate", "--target", model_dir, "--drafter", "ngram", "--prompt", "abcabcabc",
               "--max-new-tokens", "24", "--gamma", "4", "--json", "--compare-ar", "--device", "cpu",
               "--verify", verify, "--hw", "constant-10ms"])
    out = json.loads(capsys.readouterr().out)
    assert rc == 0 and out["identical"] is True


def test_generate_rejects_an_unknown_verify_mode(model_dir, capsys):
    rc = main(["generate", "--target", model_dir, "--prompt", "x", "--verify", "sometimes"])
    assert rc != 0 and "--verify" in capsys.readouterr().err
