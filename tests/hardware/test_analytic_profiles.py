"""Analytic profiles: round trip through the file format, and the shipped ones reproduce."""
import numpy as np
import pytest

from dspark_sim.cli import main
from dspark_sim.hardware.analytic_profile import analytic_profile, batch_grid
from dspark_sim.hardware.gpus import get_gpu
from dspark_sim.hardware.models import load_model_shape
from dspark_sim.hardware.roofline import Roofline, RooflineSettings
from dspark_sim.profiles import HardwareProfile, load_hw_profile, shipped_hw_names

SHIPPED = [n for n in shipped_hw_names() if n.endswith("-roofline")]


def test_batch_grid():
    grid = batch_grid(4096)
    assert grid[0] == 1 and grid[-1] == 4096 and grid == sorted(set(grid))
    assert 40 <= len(grid) <= 60


def test_round_trip_keeps_tables_and_assumptions(tmp_path):
    roof = Roofline(load_model_shape("qwen3-8b"), get_gpu("H100"), RooflineSettings(tp=2))
    prof = analytic_profile(roof, "t")
    prof.save(tmp_path / "a.yaml")
    again = HardwareProfile.load(tmp_path / "a.yaml")
    again.save(tmp_path / "b.yaml")
    assert HardwareProfile.load(tmp_path / "b.yaml").to_dict() == again.to_dict()
    assert again.source == "roofline" and again.gpus_per_replica == 2
    assert again.per_draft_kinds == {"eagle3"}
    assert again.extra["assumptions"]["settings"]["tp"] == 2
    assert again.extra["assumptions"]["gpu"]["source"].startswith("NVIDIA H100")
    B = np.array([1, 100, 3000])
    np.testing.assert_allclose(again.step_time(B), roof.step_time(B), rtol=2e-3)  # table + rounding
    assert again.kv_capacity_tokens == roof.kv_capacity_tokens


def test_shipped_analytic_profiles_exist():
    assert {"h200-qwen3-8b-roofline", "h200x8-deepseek-v3-ep8-roofline"} <= set(SHIPPED)
    moe = load_hw_profile("h200x8-deepseek-v3-ep8-roofline")
    assert moe.gpus_per_replica == 8 and moe.extra["assumptions"]["settings"]["ep"] == 8


@pytest.mark.parametrize("name", SHIPPED)
def test_shipped_profile_is_what_the_code_computes_from_its_assumptions(name):
    prof = load_hw_profile(name)
    a = prof.extra["assumptions"]
    roof = Roofline(load_model_shape(a["model"]["name"]), get_gpu(a["gpu"]["name"]),
                    RooflineSettings(**a["settings"]))
    rebuilt = analytic_profile(roof, prof.name, prof.max_batch_tokens, prof.max_batch_requests,
                               tuple(prof.draft_curves))
    assert rebuilt.to_dict()["step_time"] == prof.to_dict()["step_time"]
    assert rebuilt.to_dict()["draft_time"] == prof.to_dict()["draft_time"]
    assert rebuilt.kv_capacity_tokens == prof.kv_capacity_tokens


def test_roofline_cli_writes_profile_and_plot(tmp_path, capsys):
    out = tmp_path / "hw.yaml"
    rc = main(["roofline", "--model", "llama-3.1-8b", "--gpu", "B200", "--dtype", "fp8",
               "--max-batch-tokens", "2048", "--drafters", "dspark", "--out", str(out)])
    assert rc == 0
    prof = HardwareProfile.load(out)
    assert prof.step_curve.x[-1] == 2048 and set(prof.draft_curves) == {"dspark"}
    assert (tmp_path / "hw.png").stat().st_size > 10_000
    assert "tokens/s per GPU" in capsys.readouterr().out
    assert main(["profiles", "check", str(out)]) == 0


@pytest.mark.parametrize("args, message", [
    (["--model", "qwen3-8b", "--gpu", "TPU"], "unknown GPU"),
    (["--model", "nope", "--gpu", "H200"], "presets"),
    (["--model", "deepseek-v3", "--gpu", "H200"], "GB of weights per GPU"),
    (["--model", "qwen3-8b", "--gpu", "H200", "--dtype", "int4"], "dtype"),
])
def test_roofline_cli_bad_input_exits_2(args, message, capsys, tmp_path):
    assert main(["roofline", *args, "--out", str(tmp_path / "x.yaml")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error:") and message in err and "Traceback" not in err
    assert not (tmp_path / "x.yaml").exists()
