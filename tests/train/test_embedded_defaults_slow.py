"""On the embedded target (slow: real model): `calibrate` runs with its defaults from a
directory outside the checkout (no ../shared beside it), storing into a copy and leaving the
installed package unchanged; a published-layout EAGLE-3 drafter built here for the embedded
target loads, decodes losslessly and is measured per task."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from .test_calibration_store import PACKAGE_DATA, tree_digest

pytestmark = pytest.mark.slow


def _cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "dspark_sim", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=1800)


def test_calibrate_defaults_run_outside_the_checkout(tmp_path):
    work = tmp_path / "elsewhere"
    work.mkdir()
    assert not (work.parent / "shared").exists()
    run = _cli(["calibrate", "--n", "4", "--dry-run", "--report", "cal", "--threads", "1"], work)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "ECE (held out" in run.stdout and "dry run: nothing stored" in run.stdout
    cal = json.loads((work / "cal" / "calibration.json").read_text())
    assert cal["prompts"] == 12 and cal["headline"]["raw"]["n"] > 0
    before = tree_digest(PACKAGE_DATA)
    run = _cli(["calibrate", "--rollouts", "cal/rollouts.npz", "--report", "cal"], work)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "stays unchanged" in run.stdout and (work / "cal" / "drafter" / "calibration.sts.json").is_file()
    assert tree_digest(PACKAGE_DATA) == before


def test_a_published_eagle3_drafter_for_the_embedded_target(tmp_path):
    """Random weights in the published layout (LM head: the target's rows of the shipped
    drafters' 8,192-token draft vocabulary; vLLM's default aux layers 2, 15, 27 of 30)."""
    from safetensors.torch import load_file

    from dspark_sim.cli import main
    from dspark_sim.decode.drafters import make_drafter
    from dspark_sim.decode.loading import load_target
    from dspark_sim.decode.prompts import encode_prompt
    from dspark_sim.decode.speculate import plain_generate, speculative_generate
    from .test_eagle3_published import eagle3_config, new_module, write_weights

    target = load_target("embedded", "cpu")
    ids = load_file(str(PACKAGE_DATA / "drafters" / "eagle3" / "model.safetensors"))["vocab.ids"]
    config = eagle3_config(target.model, int(ids.numel()), [])
    del config["eagle_aux_hidden_state_layer_ids"]
    folder = write_weights(new_module(target.model, tmp_path / "eagle3", config, ids), tmp_path / "eagle3")
    drafter = make_drafter(str(folder), target)
    assert drafter.taps == (1, 14, 26)
    for text in ("What is 12 times 7?", "Write a Python function that reverses a list."):
        prompt = encode_prompt(target.tokenizer, text)
        gen = speculative_generate(target, drafter, prompt, max_new_tokens=32, gamma=4)
        assert gen.output_ids == plain_generate(target, prompt, max_new_tokens=32).output_ids
    out = tmp_path / "e3.acceptance.json"
    assert main(["measure", "--drafter", str(folder), "--tasks", "math,code,chat", "--n", "1",
                 "--max-new-tokens", "24", "--gamma", "4", "--out", str(out), "--threads", "1"]) == 0
    report = json.loads(out.with_name("e3.report.json").read_text())
    assert set(report["tasks"]) == {"math", "code", "chat"}
    assert all(t["identical_to_plain"] == "1/1" for t in report["tasks"].values())
