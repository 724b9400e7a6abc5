"""The smooth family of serving-engine profiles (power-of-two knots, non-decreasing, with the
per-request term), and measured profiles that say which machine they describe (issue 41)."""
import json

import numpy as np
import pytest

from dspark_sim.cli import main
from dspark_sim.hardware.fit import fit_step_smooth, fit_step_time
from dspark_sim.hardware.measure import measured_profile
from dspark_sim.hardware.profiler import ProfileGrid, Timing
from dspark_sim.profiles import HardwareProfile, load_hw_profile
from dspark_sim.profiles.machine import cached_path, machine_checked_profile, this_machine


def _truth(b, x, r):
    """A known step: 40 ms + 2 ms per token up to 16, 1 ms per token above, plus context and
    request terms."""
    table = 0.040 + 0.002 * np.minimum(b, 16) + 0.001 * np.maximum(b - 16, 0)
    return table + 5e-6 * x + 3e-3 * r


def _timings(noise: float, seed: int = 0) -> list[Timing]:
    rng = np.random.default_rng(seed)
    out = []
    for r in (1, 2, 4, 8, 16):
        for w in (1, 2, 3, 5):
            for c in (128, 512):
                mid = float(_truth(r * w, r * c, r))
                out.append(Timing("decode", r, w, c, list(mid * (1 + noise * rng.normal(size=5))),
                                  tokens=r * w))
    return out


def test_smooth_fit_recovers_a_known_curve_with_its_per_request_term():
    fit = fit_step_smooth(_timings(0.0))
    assert fit.per_request_s == pytest.approx(3e-3, rel=0.05)
    assert fit.per_context_token_s == pytest.approx(5e-6, rel=0.05)
    assert list(fit.batch_tokens) == [1, 2, 4, 8, 16, 32, 64, 80]
    np.testing.assert_allclose(fit.seconds, _truth(fit.batch_tokens, 0, 0), rtol=0.02)
    assert max(abs(p.rel_error) for p in fit.points) < 0.01


def test_smooth_fit_never_falls_between_neighbouring_sizes_where_knots_everywhere_do():
    noisy = _timings(0.15, seed=3)
    everywhere = fit_step_time(noisy)
    assert np.any(np.diff(everywhere.seconds) < 0)          # noise makes the knot table jagged
    smooth = fit_step_smooth(noisy)
    assert np.all(np.diff(smooth.seconds) >= 0)
    assert smooth.per_request_s == pytest.approx(3e-3, rel=0.35)


def test_vllm_profiles_use_the_smooth_family_and_record_the_machine():
    grid = ProfileGrid((1, 2, 4, 8, 16), (1, 2, 3, 5), (128, 512), (), 5, 0)
    prof, fit = measured_profile(_timings(0.0), grid, "cpu", "v", "m", runner="vllm")
    assert prof.per_request_s == pytest.approx(3e-3, rel=0.05) and "smooth" in fit.method
    assert prof.machine == this_machine("cpu")
    ours, _ = measured_profile(_timings(0.0), grid, "cpu", "e", "m", runner="engine")
    assert ours.per_request_s == 0.0 and len(ours.step_curve.x) > len(prof.step_curve.x)


def _measured(tmp_path, name, machine, step):
    doc = {"schema": "dspark-sim/hw/v1", "name": name, "source": "measured",
           "step_time": {"constant_s": step}, "machine": machine}
    path = tmp_path / f"{name}.yaml"
    HardwareProfile.from_dict(doc).save(path)
    return path


def _replay(tmp_path, hw, capsys):
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(f'{{"arrival_s": 0, "prompt_tokens": 8, "output_tokens": 32}}\n'
                             for i in range(4)))
    out = tmp_path / "run"
    assert main(["replay", str(trace), "--policy", "ar", "--hw", str(hw), "--out", str(out)]) == 0
    summary = json.loads((out / "summary.json").read_text())
    return capsys.readouterr().err, summary


def test_a_profile_measured_elsewhere_is_not_a_silent_default(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("DSPARK_SIM_PROFILE_CACHE", str(tmp_path / "cache"))
    elsewhere = {"cpu": "AMD EPYC 7B13", "isa": ["avx2"], "cores": 2}
    path = _measured(tmp_path, "cpu-prof", elsewhere, 0.05)
    err, foreign = _replay(tmp_path, path, capsys)
    assert "WARNING" in err and "'cpu-prof'" in err and "AMD EPYC 7B13" in err
    assert "dspark-sim profile" in err
    # measured here: no warning
    here = _measured(tmp_path, "cpu-here", this_machine("cpu"), 0.05)
    err, _ = _replay(tmp_path, here, capsys)
    assert err.strip() == ""
    # a profile of the same name measured on this machine in the cache replaces the foreign one
    cached = cached_path("cpu-prof")
    cached.parent.mkdir(parents=True)
    HardwareProfile.from_dict({"schema": "dspark-sim/hw/v1", "name": "cpu-prof", "source": "measured",
                               "step_time": {"constant_s": 0.01}, "machine": this_machine("cpu")}
                              ).save(cached)
    err, local = _replay(tmp_path, path, capsys)
    assert "using the one measured on this machine" in err and str(cached) in err
    assert local["throughput_tok_s"] > 2 * foreign["throughput_tok_s"]


def test_profiles_that_are_not_measured_pass_silently():
    prof = load_hw_profile("h200-qwen3-8b-roofline")
    assert machine_checked_profile("x.yaml", prof) == ("x.yaml", None)


def test_fit_families_carry_the_per_request_term_and_the_capture_limit():
    from dspark_sim.hardware.curve_family import family_from_dict, load_family, with_prior_freed

    fam = family_from_dict({"family": "linear", "cudagraph": {
        "max_capture_size": 64, "eager": {"floor_s": 0.05, "per_token_s": 0.0, "source": "given"}}})
    assert "per_request_s" in fam.params and "per_request_s" not in fam.free     # held by default
    p = {"floor_s": 0.01, "per_token_s": 1e-4, "per_context_token_s": 0.0}
    assert fam.step_time(p, 65) - fam.step_time(p, 64) == pytest.approx(0.05 + 1e-4)
    prof = fam.profile(p, "f")
    assert prof.cudagraph == fam.cudagraph and prof.per_request_s == 0.0
    assert prof.table_time(65) == pytest.approx(float(fam.step_time(p, 65)))
    # a roofline prior > 0 frees it (unless --fix holds it); no prior keeps it held
    assert "per_request_s" in with_prior_freed(fam, {"per_request_s": 2e-5}, {}).free
    assert "per_request_s" not in with_prior_freed(fam, {"per_request_s": 0.0}, {}).free
    held = load_family("linear", {"per_request_s": 1e-5})
    assert "per_request_s" not in with_prior_freed(held, {"per_request_s": 2e-5}, {"per_request_s": 1e-5}).free
    freed = with_prior_freed(fam, {"per_request_s": 2e-5}, {})
    assert freed.step_time({**p, "per_request_s": 1e-3}, 8, 0, 10) - fam.step_time(p, 8) == pytest.approx(1e-2)


def test_roofline_command_writes_the_capture_limit(tmp_path):
    out = tmp_path / "r.yaml"
    assert main(["roofline", "--model", "llama-3.1-8b", "--gpu", "H100", "--max-batch-requests", "64",
                 "--speculative-tokens", "3", "--drafters", "", "--out", str(out)]) == 0
    prof = HardwareProfile.load(out)
    # vLLM's default: min(64 x (1 + 3) x 2, 512) = 512; eager floor = 32 layers x 100 us
    assert prof.cudagraph.max_capture_size == 512
    assert prof.cudagraph.floor_s == pytest.approx(32 * 100e-6) and prof.cudagraph.source == "estimate"
    assert main(["roofline", "--model", "llama-3.1-8b", "--gpu", "H100", "--max-capture-size", "0",
                 "--drafters", "", "--out", str(out)]) == 0
    assert HardwareProfile.load(out).cudagraph is None


def test_a_roofline_per_request_cost_becomes_the_fits_prior(tmp_path):
    from dspark_sim.hardware.curve_family import family_values_of, load_family

    out = tmp_path / "r.yaml"
    assert main(["roofline", "--model", "llama-3.1-8b", "--gpu", "H100", "--request-overhead-us", "15",
                 "--drafters", "", "--out", str(out)]) == 0
    roof = HardwareProfile.load(out)
    assert roof.per_request_s == pytest.approx(15e-6)
    assert family_values_of(load_family("linear"), roof)["per_request_s"] == pytest.approx(15e-6)
