"""`replay` and `sweep` warn when the acceptance profile was measured with another target model
than the one the hardware profile times (profiles/describe.py), and stay quiet when they match."""
from __future__ import annotations

import pytest

from dspark_sim.cli import main
from dspark_sim.profiles.describe import model_mismatch, model_mismatch_warnings
from dspark_sim.profiles.registry import load_acceptance_profile, load_hw_profile

TRACE = "".join(f'{{"id": "q{i}", "arrival_s": {0.1 * i:.1f}, "prompt_tokens": 40, '
                f'"output_tokens": 12, "task": "chat"}}\n' for i in range(12))


@pytest.mark.parametrize("acc, hw, warns", [
    ("smollm2-135m-dspark-g7-t0", "cpu-2core-smollm2-135m", False),      # SmolLM2-135M-Instruct both
    ("smollm2-135m-dspark-g7-t0", "h200-qwen3-8b-roofline", True),
    ("paper-dspark-g5", "h200-qwen3-8b-roofline", True),                  # Qwen3-4B vs qwen3-8b
    ("production-dspark-g5", "v4-flash-like-mtp1-fit", False),            # DeepSeek-V4 / V4-Flash
    ("paper-mtp1", "v4-flash-like-mtp1-fit", True),                       # DeepSeek-V3 vs V4-Flash
    ("paper-dspark-g5", "constant-10ms", False),                          # model: any
])
def test_model_names_are_compared_by_family(acc, hw, warns):
    warning = model_mismatch(load_acceptance_profile(acc), load_hw_profile(hw))
    assert (warning is not None) == warns
    if warns:
        assert acc in warning and hw in warning


def test_replay_and_sweep_warn_on_mixed_models(tmp_path, capsys):
    trace = tmp_path / "t.jsonl"
    trace.write_text(TRACE)
    assert main(["replay", str(trace), "--policy", "dspark", "--acceptance", "smollm2-135m-dspark-g7-t0",
                 "--hw", "h200-qwen3-8b-roofline", "--out", str(tmp_path / "r1")]) == 0
    err = capsys.readouterr().err
    assert ("warning: acceptance profile 'smollm2-135m-dspark-g7-t0' was measured with target "
            "'SmolLM2-135M-Instruct', but hardware profile 'h200-qwen3-8b-roofline' times 'qwen3-8b'") in err
    assert main(["replay", str(trace), "--policy", "dspark", "--acceptance", "smollm2-135m-dspark-g7-t0",
                 "--hw", "cpu-2core-smollm2-135m", "--out", str(tmp_path / "r2")]) == 0
    assert "warning" not in capsys.readouterr().err
    assert main(["sweep", "--trace", str(trace), "--policies", "mtp1,dspark", "--acceptance",
                 "mtp1=smollm2-135m-mtp1-g1-t0,dspark=smollm2-135m-dspark-g7-t0", "--hw",
                 "h200-qwen3-8b-roofline", "--points", "2", "--load-range", "1,2", "--out",
                 str(tmp_path / "s")]) == 0
    err = capsys.readouterr().err
    assert err.count("warning: acceptance profile") == 2 and "smollm2-135m-mtp1-g1-t0" in err
    assert model_mismatch_warnings("cpu-2core-smollm2-135m", {"ar": None,
                                                              "dspark": "smollm2-135m-dspark-g7-t0"}) == []


def test_plan_and_recommend_warn_on_mixed_models(tmp_path, capsys):
    """plan and recommend simulate through the same sweep: the same warning, before they run."""
    trace = tmp_path / "t.jsonl"
    trace.write_text(TRACE)
    assert main(["plan", "--trace", str(trace), "--sla", "20", "--policies", "dspark", "--acceptance",
                 "smollm2-135m-dspark-g7-t0", "--hw", "h200-qwen3-8b-roofline", "--max-replicas", "2",
                 "--workers", "1", "--out", str(tmp_path / "p")]) == 0
    assert "warning: acceptance profile 'smollm2-135m-dspark-g7-t0' was measured with target " \
        "'SmolLM2-135M-Instruct', but hardware profile 'h200-qwen3-8b-roofline'" in capsys.readouterr().err
    assert main(["recommend", "--trace", str(trace), "--sla", "20", "--acceptance",
                 "smollm2-135m-dspark-g7-t0", "--hw", "cpu-2core-smollm2-135m", "--points", "2",
                 "--load-range", "1,2", "--requests-per-user", "3", "--workers", "1",
                 "--out", str(tmp_path / "r1")]) == 0
    assert "warning: acceptance profile" not in capsys.readouterr().err
    assert main(["recommend", "--trace", str(trace), "--sla", "20", "--acceptance",
                 "eagle3-llama31-8b-g7", "--hw", "cpu-2core-smollm2-135m", "--points", "2",
                 "--load-range", "1,2", "--requests-per-user", "3", "--workers", "1",
                 "--out", str(tmp_path / "r2")]) == 0
    err = capsys.readouterr().err
    assert "warning: acceptance profile 'eagle3-llama31-8b-g7' was measured with target" in err
