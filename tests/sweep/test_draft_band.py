"""A shape-priced draft cost the observations cannot see: `profile fit`'s draws take draft_scale
from the pricing's measured band (hardware/draft_cost.py SHAPE_PRICING_BAND), the point
estimate keeps 1, and the intervals made from the draws span it (sweep/calibrate.py)."""
import json

import numpy as np
import pytest
import yaml
from test_draft_scale import FAM, TRUE, _cfg, _grid, _observed

from dspark_sim.cli import main
from dspark_sim.hardware.draft_cost import SHAPE_PRICING_BAND, DraftCosts, band_spread
from dspark_sim.profiles.registry import load_hw_profile
from dspark_sim.sweep.calibrate import Calibration
from dspark_sim.sweep.calibrate_report import fit_block
from dspark_sim.sweep.load_replay import FitConfig


def _plain():
    return _observed(_grid(spec_users=())[:3], TRUE)


def test_band_spread_puts_the_factor_at_the_10th_and_90th_percentiles():
    s = band_spread(SHAPE_PRICING_BAND)
    z = np.random.default_rng(0).normal(0.0, s, 200_000)
    assert np.exp(np.percentile(z, 90)) == pytest.approx(SHAPE_PRICING_BAND, rel=0.01)
    assert np.exp(np.percentile(z, 10)) == pytest.approx(1 / SHAPE_PRICING_BAND, rel=0.01)
    assert band_spread(1.0) == 0.0


def test_plain_observations_draw_draft_scale_from_the_band_and_leave_the_rest_alone():
    cfg = _cfg(bootstrap=120)
    cal = Calibration(_plain(), cfg)
    assert cal.draws_draft_scale and not cal.fits_draft_scale
    result = cal.fit()
    assert "draft_scale" not in result.params                   # the point estimate keeps 1
    scales = np.array([d["draft_scale"] for d in result.draws])
    assert len(scales) == len(result.draws) == cfg.keep_draws
    # the draws' spread is the band's (50 draws: loose), centred at 1
    assert np.std(np.log(scales)) == pytest.approx(band_spread(cfg.draft_band), rel=0.3)
    assert abs(np.median(np.log(scales))) < 0.3
    # plain observations do not see drafting: the target's draws are those of a fit without the band
    off = Calibration(_plain(), _cfg(bootstrap=120, draft_band=1.0)).fit()
    assert not any("draft_scale" in d for d in off.draws)
    for with_band, without in zip(result.draws, off.draws):
        for name in TRUE:
            assert with_band[name] == pytest.approx(without[name], rel=1e-9)
    assert "band" in result.bootstrap_method


def test_observations_that_draft_solve_each_draw_with_its_own_scale():
    """Only one speculative policy observed (as an MTP-1 baseline): its drafting is inside the
    observations, so a draw with dearer drafting needs a cheaper target to reproduce them."""
    only_spec = _observed([p for p in _grid(spec_users=(4, 16, 64)) if p.policy != "ar"], TRUE)
    cal = Calibration(only_spec, _cfg(bootstrap=60))
    assert cal.draws_draft_scale
    result = cal.fit()
    scales = np.log([d["draft_scale"] for d in result.draws])
    step = np.log([d["floor_s"] + 16 * d["per_token_s"] for d in result.draws])
    assert np.corrcoef(scales, step)[0, 1] < -0.5


def test_a_draw_set_to_another_draft_price_is_re_solved_to_meet_the_observations_again():
    """validate-published's interval sides set a draw's draft_scale to the band's ends; where the
    observations draft (an MTP-1 baseline), `resolve_draw` re-solves the draw at that price: the
    surrogate with the fit's defect correction meets the observations as the draw did, with a
    cheaper target under dearer drafting, while plain observations do not draft at all."""
    only_spec = _observed([p for p in _grid(spec_users=(4, 16, 64)) if p.policy != "ar"], TRUE)
    cal = Calibration(only_spec, _cfg(bootstrap=8))
    assert cal.observations_draft and not Calibration(_plain(), _cfg()).observations_draft
    result = cal.fit()
    factors = [np.asarray(f) for f in result.defect_factors]
    assert len(factors) == len(only_spec)

    def misfit(draw):
        return max(float(np.max(np.abs(np.log(factors[i] * cal.surrogate(draw, i) / cal.observed(p)))))
                   for i, p in enumerate(only_spec))

    draw = {**result.params, "draft_scale": 1.0}
    dear = cal.resolve_draw(draw, result.defect_factors, SHAPE_PRICING_BAND)
    assert dear["draft_scale"] == SHAPE_PRICING_BAND
    assert misfit({**draw, "draft_scale": SHAPE_PRICING_BAND}) > 2 * misfit(draw) + 0.01   # not re-solved: off
    assert misfit(dear) < misfit(draw) + 0.01                                              # re-solved: met
    assert dear["floor_s"] + 16 * dear["per_token_s"] < draw["floor_s"] + 16 * draw["per_token_s"]


def test_the_band_is_off_where_the_cost_is_measured_fitted_free_or_turned_off():
    plain = _plain()
    assert not Calibration(plain, _cfg(draft_band=1.0)).draws_draft_scale
    tables = FitConfig(FAM, bootstrap=10, draft_costs=DraftCosts("tables", "measured", tables=None))
    assert not Calibration(plain, tables).draws_draft_scale            # measured tables
    roof = load_hw_profile("h200-qwen3-8b-roofline")                   # a roofline's tables: a shape
    copied = FitConfig(FAM, bootstrap=10, draft_costs=DraftCosts("tables", roof.name, tables=roof))
    assert Calibration(plain, copied).draws_draft_scale
    assert not Calibration(plain, FitConfig(FAM, bootstrap=10)).draws_draft_scale   # drafting free
    contrast = Calibration(_observed(_grid(), TRUE), _cfg())
    assert contrast.fits_draft_scale and not contrast.draws_draft_scale   # fitted instead


def test_the_fit_block_records_the_band():
    cal = Calibration(_plain(), _cfg(bootstrap=8))
    result = cal.fit()
    block = fit_block(result, cal, ["test"])
    band = block["draft_costs"]["band"]
    assert band["factor"] == SHAPE_PRICING_BAND
    assert band["spread_log"] == pytest.approx(band_spread(SHAPE_PRICING_BAND), abs=1e-4)
    assert all("draft_scale" in d for d in block["draws"])
    assert "scale" not in block["draft_costs"]


def _obs_file(tmp_path):
    pts = [{"policy": "ar", "concurrency": p.concurrency, "tps_user": round(p.tps_user, 4),
            "throughput_tok_s_per_gpu": round(p.throughput_tok_s_per_gpu, 3), "prompt_tokens": 200,
            "output_tokens": 120, "label": f"ar c={p.concurrency}"} for p in _plain()]
    path = tmp_path / "obs.yaml"
    path.write_text(yaml.safe_dump({"schema": "dspark-sim/observations/v1", "points": pts}))
    return path


def test_profile_fit_says_so_and_the_option_is_checked(tmp_path, capsys):
    obs = _obs_file(tmp_path)
    base = ["profile", "fit", str(obs), "--family", "linear", "--fix", "per_context_token_s=0",
            "--draft-layer-share", "eagle3=1/32", "--bootstrap", "8", "--rounds", "1",
            "--requests-per-user", "3", "--frontier-points", "2"]
    out = tmp_path / "fit.yaml"
    assert main([*base, "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "draft costs not seen by these observations" in " ".join(err.split())
    fit = json.loads(out.with_suffix(".fit.json").read_text())
    assert fit["draft_costs"]["band"]["factor"] == SHAPE_PRICING_BAND
    off = tmp_path / "off.yaml"
    assert main([*base, "--out", str(off), "--draft-cost-band", "1"]) == 0
    assert "band" not in json.loads(off.with_suffix(".fit.json").read_text())["draft_costs"]
    bad = tmp_path / "bad.yaml"
    assert main([*base, "--out", str(bad), "--draft-cost-band", "0.5"]) == 2
    assert "draft-cost-band" in capsys.readouterr().err and not bad.exists()
