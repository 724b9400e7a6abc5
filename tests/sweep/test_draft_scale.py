"""`profile fit`'s draft_scale: the speculative path's own cost, read off a speculative
observation beside plain ones (sweep/calibrate.py), carried into the profile, its report and
its draws."""
import copy
from pathlib import Path

import numpy as np
import pytest
from test_calibrate import _vllm_json, observed

from dspark_sim.cli import main
from dspark_sim.hardware.curve_family import CurveFamily
from dspark_sim.hardware.draft_cost import DraftCosts, LayerShare
from dspark_sim.hardware.observations import LoadPoint, split_run_spec
from dspark_sim.sweep.calibrate import Calibration
from dspark_sim.sweep.calibrate_report import fit_block
from dspark_sim.sweep.intervals import FitSpread, draw_profile
from dspark_sim.errors import InputError
from dspark_sim.profiles import HardwareProfile
from dspark_sim.sweep.load_replay import FitConfig, simulate_load

FAM = CurveFamily("linear", fixed={"per_context_token_s": 0.0})
TRUE = {"floor_s": 0.010, "per_token_s": 4.0e-5}
SHARES = {"eagle3": LayerShare("eagle3", 1, 32)}


def _cfg(**kw) -> FitConfig:
    return FitConfig(FAM, draft_costs=DraftCosts("layer_share", "test", shares=dict(SHARES)),
                     **{"bootstrap": 20, **kw})


def _grid(spec_users=(16,)) -> list[LoadPoint]:
    plain = [LoadPoint("ar", 1.0, 1.0, concurrency=c, prompt_tokens=200, output_tokens=120) for c in (4, 16, 64)]
    spec = [LoadPoint("static-3", 1.0, 1.0, acceptance="paper-eagle3-g7", concurrency=c, prompt_tokens=200,
                      output_tokens=120) for c in spec_users]
    return plain + spec


def _observed(points: list[LoadPoint], params: dict[str, float]) -> list[LoadPoint]:
    """The points as the simulator gives them under `params` (draft_scale included), another seed."""
    return observed(points, FAM, params, draft_costs=_cfg().draft_costs)


def test_one_speculative_point_recovers_a_known_draft_scale():
    obs = _observed(_grid(), {**TRUE, "draft_scale": 4.0})
    result = Calibration(obs, _cfg()).fit()
    assert result.params["draft_scale"] == pytest.approx(4.0, rel=0.05)
    for name, value in TRUE.items():
        assert result.params[name] == pytest.approx(value, rel=0.03), name
    # the speculative point is reproduced, and so is another load it never saw
    for row in result.residuals():
        assert abs(row["throughput_rel_error"]) < 0.02
    other = _observed(_grid(spec_users=(64,)), {**TRUE, "draft_scale": 4.0})[-1]
    sim = simulate_load(result.profile, other, 64, _cfg())
    assert sim.throughput_tok_s_per_gpu == pytest.approx(other.throughput_tok_s_per_gpu, rel=0.03)
    # the draws carry it, and the profile's draft table is the share times the fitted scale
    assert all("draft_scale" in d for d in result.draws)
    step16 = result.profile.step_time(16)
    assert result.profile.draft_time("eagle3", 16, 1) == pytest.approx(result.params["draft_scale"] * step16 / 32,
                                                                       rel=1e-3)


def test_without_a_policy_contrast_or_with_spread_0_the_draft_costs_stay_as_given():
    plain = _observed(_grid(spec_users=())[:3], TRUE)
    result = Calibration(plain, _cfg()).fit()
    assert "draft_scale" not in result.params            # one policy: nothing separates drafting
    only_spec = _observed([p for p in _grid(spec_users=(4, 16, 64)) if p.policy != "ar"], TRUE)
    assert not Calibration(only_spec, _cfg()).fits_draft_scale
    off = Calibration(_observed(_grid(), TRUE), _cfg(draft_scale_spread=0.0))
    assert "draft_scale" not in off.free
    free = Calibration(_observed(_grid(), TRUE), FitConfig(FAM, bootstrap=0))   # drafting free: no cost to scale
    assert "draft_scale" not in free.free


def test_the_report_and_a_draw_carry_the_fitted_scale():
    obs = _observed(_grid(), {**TRUE, "draft_scale": 3.0})
    cal = Calibration(obs, _cfg())
    result = cal.fit()
    block = fit_block(result, cal, ["test"])
    assert block["draft_costs"]["scale"] == pytest.approx(result.params["draft_scale"])
    assert "draft_scale" in block["draft_costs"]["summary"]
    assert block["priors"]["centres"]["draft_scale"] == 1.0
    prof = copy.deepcopy(result.profile)
    prof.extra = {"fit": block}
    draw = {**result.params, "draft_scale": 2 * result.params["draft_scale"]}
    drawn = draw_profile(FitSpread(prof, FAM, [draw], result.observed_range), draw, "d0")
    assert drawn.draft_time("eagle3", 16, 1) == pytest.approx(2 * prof.draft_time("eagle3", 16, 1), rel=1e-3)
    assert np.isclose(drawn.step_time(16), prof.step_time(16))


def test_a_draw_rescales_copied_draft_tables_by_its_ratio_to_the_point():
    obs = _observed(_grid(), {**TRUE, "draft_scale": 2.0})
    result = Calibration(obs, _cfg()).fit()
    prof = copy.deepcopy(result.profile)              # its tables: the point's scale already in them
    prof.extra = {"fit": {"draft_costs": {"source": "roofline", "origin": "r", "scale": 2.0}}}
    draw = {**result.params, "draft_scale": 4.0}
    drawn = draw_profile(FitSpread(prof, FAM, [draw], result.observed_range), draw, "d0")
    assert drawn.draft_time("eagle3", 16, 2) == pytest.approx(2 * prof.draft_time("eagle3", 16, 2), rel=1e-9)


def test_vllm_result_files_name_their_own_policy_and_the_cli_fits_draft_scale(tmp_path):
    """`vllm bench serve` runs with and without speculation in one `profile fit`: the speculative
    run given as RUN.json@POLICY@ACCEPTANCE."""
    cfg = _cfg(seed=3)
    runs = [LoadPoint(policy, 1.0, 1.0, acceptance="paper-eagle3-g7" if policy != "ar" else None,
                      concurrency=c, prompt_tokens=200, output_tokens=120, tps_stat="p50", prefill="local",
                      requests=40, window="whole-run")
            for policy, c in (("ar", 4), ("ar", 16), ("ar", 64), ("static-3", 16))]
    prof = Calibration(runs, cfg).profile({**TRUE, "draft_scale": 3.0})
    files = []
    for p in runs:
        c = p.concurrency
        path = _vllm_json(tmp_path / f"{p.policy}-c{c}.json", c, simulate_load(prof, p, c, cfg), 200, 120)
        files.append(f"{path}@{p.policy}@{p.acceptance}" if p.acceptance else str(path))
    out = tmp_path / "fit.yaml"
    assert main(["profile", "fit", *files, "--out", str(out), "--fix", "per_context_token_s=0",
                 "--draft-layer-share", "eagle3=1/32", "--layer-share-overhead", "1",   # the bare share
                 "--bootstrap", "10", "--frontier-points", "2"]) == 0
    fit = HardwareProfile.load(out).extra["fit"]
    assert fit["parameters"]["draft_scale"] == pytest.approx(3.0, rel=0.15)
    assert fit["draft_costs"]["scale"] == pytest.approx(fit["parameters"]["draft_scale"], rel=1e-4)
    assert split_run_spec("run.json", "ar", None) == (Path("run.json"), "ar", None)
    assert split_run_spec("run.json@static-3", "ar", "a") == (Path("run.json"), "static-3", "a")
    with pytest.raises(InputError, match="RUN.json@POLICY"):
        split_run_spec("run.json@", "ar", None)


def test_representative_draws_span_a_fitted_draft_scale():
    """Draws alike but for draft_scale: with drafting in the proxies the picked draws take its
    low and high ends (the step curve alone would see them all as one)."""
    from dspark_sim.sweep.intervals import Operating, _proxies, pick_draws

    obs = _observed(_grid(), {**TRUE, "draft_scale": 3.0})
    cal = Calibration(obs, _cfg())
    result = cal.fit()
    prof = copy.deepcopy(result.profile)
    prof.extra = {"fit": fit_block(result, cal, ["test"])}
    draws = [{**result.params, "draft_scale": float(s)} for s in range(1, 11)]
    spread = FitSpread(prof, FAM, draws, result.observed_range)
    where = [Operating(64.0, 0.0, False, 64.0), Operating(64.0 * 4, 0.0, True, 64.0)]
    profs = [draw_profile(spread, d, f"d{i}") for i, d in enumerate(draws)]
    _, blind = _proxies(profs, prof, where)
    assert np.ptp(blind) == pytest.approx(0.0, abs=1e-12)           # the step curves are the same
    _, gain = _proxies(profs, prof, where, drafting=True)
    assert np.all(np.diff(gain) > 0)                                 # dearer drafting, less favourable
    scales = sorted(draws[i]["draft_scale"] for i in pick_draws(spread, 4, where))
    assert scales[0] <= 2.0 and scales[-1] >= 9.0


def test_speculative_points_far_from_the_speculative_observation_are_flagged():
    from dspark_sim.sweep.intervals import outside_observed

    result = Calibration(_observed(_grid(), {**TRUE, "draft_scale": 2.0}), _cfg()).fit()
    rng = result.observed_range
    assert rng["batch_tokens"] == [4.0, 64.0] and rng["speculative_batch_tokens"] == [64.0, 64.0]
    assert outside_observed(rng, 32.0) == ""                          # a plain point: inside
    flag = outside_observed(rng, 32.0, speculative=True)
    assert "speculative observations" in flag and "32" in flag
    assert outside_observed(rng, 64.0, speculative=True) == ""
    plain = Calibration(_observed(_grid(spec_users=()), TRUE), _cfg()).fit()
    assert "speculative_batch_tokens" not in plain.observed_range
