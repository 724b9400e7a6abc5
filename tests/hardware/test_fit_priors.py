"""`profile fit` on what GPUs do: the roofline-shaped family, roofline priors with a stated spread,
draft costs that are never silently free, and impossible observations refused (issue 41)."""
import numpy as np
import pytest
import yaml

from dspark_sim.cli import main
from dspark_sim.errors import InputError
from dspark_sim.hardware.curve_family import CurveFamily, family_from_dict, family_values_of, load_family
from dspark_sim.hardware.draft_cost import DraftCosts, LayerShare, choose_draft_costs
from dspark_sim.hardware.observations import LoadPoint
from dspark_sim.profiles.registry import load_hw_profile
from dspark_sim.sweep.calibrate import Calibration
from dspark_sim.sweep.load_replay import FitConfig, simulate_load

KNOWN = {"floor_s": 0.004, "weight_s": 0.006, "per_token_s": 4.0e-5, "per_context_token_s": 0.0}


def simulated(fam, params, loads, seed=1):
    """Decode-only load points as the simulator gives them under `params` (another seed)."""
    cfg = FitConfig(fam, requests_per_user=3, seed=seed)
    grid = [LoadPoint("ar", 1.0, 1.0, concurrency=c, prompt_tokens=500, output_tokens=200) for c in loads]
    prof = fam.profile(params, "known")
    out = []
    for p in grid:
        s = simulate_load(prof, p, p.concurrency, cfg)
        out.append(LoadPoint("ar", s.throughput_tok_s_per_gpu, s.tps_user, concurrency=p.concurrency,
                             prompt_tokens=500, output_tokens=200, label=str(p.concurrency)))
    return out


def test_roofline_family_recovers_a_known_bent_curve():
    # knee at 150 batch tokens: flat (memory-bound) below, compute-bound above
    fam = CurveFamily("roofline", fixed={"per_context_token_s": 0.0}, max_batch_tokens=2048)
    obs = simulated(fam, KNOWN, (2, 16, 64, 256, 512, 1024))
    result = Calibration(obs, FitConfig(fam, requests_per_user=3, bootstrap=0)).fit()
    for name in ("floor_s", "weight_s", "per_token_s"):
        assert result.params[name] == pytest.approx(KNOWN[name], rel=0.05), name
    # floor + linear cannot follow the bend: its residuals are far larger on the same points
    lin = Calibration(obs, FitConfig(CurveFamily("linear", fixed={"per_context_token_s": 0.0}),
                                     requests_per_user=3, bootstrap=0)).fit()
    worst = lambda r: max(abs(x["throughput_rel_error"]) for x in r.residuals())  # noqa: E731
    assert worst(result) < 0.02 < worst(lin)


def test_family_values_of_the_dense_roofline_reproduce_it():
    prof = load_hw_profile("h200-qwen3-8b-roofline")
    fam = load_family("roofline", max_batch_tokens=4096)
    vals = family_values_of(fam, prof)
    B = np.array([1, 16, 128, 512, 2048, 4096])
    assert np.allclose(fam.step_time(vals, B), prof.step_time(B), rtol=0.01)


def test_prior_identifies_what_two_points_cannot_and_the_spread_covers_it():
    fam = CurveFamily("roofline", fixed={"per_context_token_s": 0.0}, max_batch_tokens=2048)
    obs = simulated(fam, KNOWN, (8, 512))                   # 2 loads, 3 free parameters
    with pytest.raises(InputError):
        Calibration(obs, FitConfig(fam, requests_per_user=3, bootstrap=0)).fit()
    prior = {"floor_s": 0.003, "weight_s": 0.007, "per_token_s": 4.0e-5}   # a roofline that is off
    res = Calibration(obs, FitConfig(fam, requests_per_user=3, bootstrap=60, priors=prior,
                                     prior_spread=0.5)).fit()
    for name, centre in prior.items():
        u = res.uncertainty[name]
        assert u["p05"] <= centre <= u["p95"], name          # the reported spread covers the prior
        assert u["std"] > 0, name                            # ... and is not 0
    assert len(res.draws) == 50 and set(res.draws[0]) == set(fam.params)
    # floor and weight trade off below the knee: the prior, not the data, sets them
    assert res.prior_share["floor_s"] > 0.5


def test_a_prior_on_one_parameter_counts_towards_what_the_loads_must_identify():
    fam = CurveFamily("linear", fixed={"per_context_token_s": 0.0}, freed=("per_request_s",))
    known = {"floor_s": 0.004, "per_token_s": 3.0e-5, "per_request_s": 2.0e-5, "per_context_token_s": 0.0}
    obs = simulated(fam, known, (8, 128))                   # 2 loads, 3 free parameters
    with pytest.raises(InputError) as err:                  # no prior: refused for want of loads
        Calibration(obs, FitConfig(fam, requests_per_user=3, bootstrap=0))
    assert "cannot identify" in err.value.message
    prior = {"per_request_s": 2.0e-5}                       # one prior: two loads suffice
    res = Calibration(obs, FitConfig(fam, requests_per_user=3, bootstrap=0, priors=prior)).fit()
    per_user = res.params["per_token_s"] * (1 + 500 / 200) + res.params["per_request_s"]
    assert per_user == pytest.approx(3.0e-5 * (1 + 500 / 200) + 2.0e-5, rel=0.05)


def test_drafting_is_never_silently_free():
    assert "NONE given" in DraftCosts().describe()
    roof = load_hw_profile("h200-qwen3-8b-roofline")
    costs = choose_draft_costs(None, roof, None)
    assert costs.source == "roofline" and "h200-qwen3-8b-roofline" in costs.describe()
    share = choose_draft_costs(None, None, {"dspark": LayerShare("dspark", 3, 36, 7)})
    step = lambda b: 0.01 + 1e-5 * np.asarray(b)  # noqa: E731
    assert share.seconds("dspark", step, 8) == pytest.approx(3 / 36 * (0.01 + 1e-5 * 56))
    assert share.seconds("ar", step, 8) == 0.0


def test_a_sequential_drafter_given_a_width_is_a_tree_priced_once_per_iteration():
    from dspark_sim.hardware.draft_cost import parse_layer_shares
    from dspark_sim.profiles.curve import Curve
    from dspark_sim.profiles.hardware import HardwareProfile

    shares = parse_layer_shares("eagle3=4/48:4,mtp1=1/48", overhead=1.0)      # the bare layers
    step = lambda b: 0.01 + 1e-5 * np.asarray(b)  # noqa: E731
    tree, chain = shares["eagle3"], shares["mtp1"]
    assert tree.per_iteration and not chain.per_iteration
    # 4 layer passes over R x 4 branch tokens, however many tree tokens are verified
    assert tree.seconds(step, 8, drafts=15) == pytest.approx(4 / 48 * (0.01 + 1e-5 * 32))
    assert chain.seconds(step, 8, drafts=3) == pytest.approx(3 / 48 * (0.01 + 1e-5 * 8))
    prof = HardwareProfile("p", "fitted", step_curve=Curve.of([1, 4096], [0.01, 0.01 + 1e-5 * 4095]))
    costs = DraftCosts("layer_share", "", shares=shares)
    costs.apply(prof)
    assert prof.per_draft_kinds == frozenset({"mtp1"})
    assert prof.draft_time("eagle3", 8, 15) == pytest.approx(4 / 48 * float(prof.step_time(32)), rel=1e-6)
    assert "once per iteration" in costs.describe()
    assert costs.as_dict()["layer_share"]["eagle3"]["per_iteration"] is True


def test_a_layer_share_pass_costs_the_measured_overhead_times_its_layers_by_default(tmp_path):
    from dspark_sim.hardware.draft_cost import LAYER_SHARE_OVERHEAD, parse_layer_shares
    from dspark_sim.sweep.intervals import draw_profile, fit_spread

    step = lambda b: 0.01 + 1e-5 * np.asarray(b)  # noqa: E731
    bare = parse_layer_shares("dspark=3/43:5,mtp1=1/43", overhead=1.0)
    priced = parse_layer_shares("dspark=3/43:5,mtp1=1/43")
    assert LAYER_SHARE_OVERHEAD == pytest.approx(np.sqrt(2.35 * 2.93), abs=0.01)   # the two measurements
    for kind in ("dspark", "mtp1"):
        assert priced[kind].seconds(step, 16, 2) == pytest.approx(LAYER_SHARE_OVERHEAD * bare[kind].seconds(step, 16, 2))
    assert parse_layer_shares("mtp1=1/43", overhead=1.5)["mtp1"].share == pytest.approx(1.5 / 43)
    with pytest.raises(InputError, match="layer-share-overhead|>= 1"):
        parse_layer_shares("mtp1=1/43", overhead=0.5)
    obs = tmp_path / "obs.yaml"
    _write_obs(obs, [{"policy": "ar", "concurrency": 4, "tps_user": 50, "throughput_tok_s_per_gpu": 200},
                     {"policy": "ar", "concurrency": 16, "tps_user": 40, "throughput_tok_s_per_gpu": 640}])
    out = tmp_path / "fit.yaml"
    assert main(["profile", "fit", str(obs), "--fix", "per_context_token_s=0", "--draft-layer-share",
                 "mtp1=1/43", "--layer-share-overhead", "0.5", "--out", str(out)]) == 2
    assert not out.exists()
    costs = DraftCosts("layer_share", "", shares=priced)
    assert "x 2.62" in costs.describe() and "LAYER_SHARE_OVERHEAD" in costs.describe()
    assert costs.as_dict()["layer_share"]["dspark"]["overhead"] == LAYER_SHARE_OVERHEAD
    # a draw re-tabulates drafting with the recorded overhead; a fit block without one (fitted
    # before the overhead existed) is re-tabulated bare, as it was fitted
    fam = CurveFamily("linear", fixed={"per_context_token_s": 0.0}, max_batch_tokens=1024)
    centre = {"floor_s": 0.01, "per_token_s": 2e-5, "per_context_token_s": 0.0}
    for shares, factor in ((priced, LAYER_SHARE_OVERHEAD), (bare, 1.0)):
        prof = fam.profile(centre, "lin", max_batch_requests=64)
        block = DraftCosts("layer_share", "", shares=shares)
        block.apply(prof)
        prof.extra = {"fit": {"family": fam.as_dict(), "draws": [centre], "draft_costs": block.as_dict()}}
        drawn = draw_profile(fit_spread(prof), centre, "lin-draw0")
        R = np.array([1, 8, 32])
        assert np.allclose(drawn.draft_time("dspark", R), prof.draft_time("dspark", R))
        assert np.allclose(drawn.draft_time("dspark", R), factor * 3 / 43 * prof.step_time(5 * R))


def _write_obs(path, points):
    path.write_text(yaml.safe_dump({"schema": "dspark-sim/observations/v1", "points": points}))


def test_impossible_observation_exits_2_naming_the_point_nothing_written(tmp_path, capsys):
    obs = tmp_path / "obs.yaml"
    _write_obs(obs, [{"policy": "ar", "concurrency": 4, "tps_user": 95, "throughput_tok_s_per_gpu": 350,
                      "label": "four"},
                     {"policy": "ar", "concurrency": 8, "tps_user": 95, "throughput_tok_s_per_gpu": 7000,
                      "label": "eight users"}])
    out = tmp_path / "fit.yaml"
    assert main(["profile", "fit", str(obs), "--out", str(out), "--bootstrap", "0"]) == 2
    err = capsys.readouterr().err
    assert "eight users" in err and "760" in err and "obs.yaml" in err
    assert not list(tmp_path.glob("fit*"))


@pytest.mark.parametrize("option, value", [("--gpus", "0"), ("--requests-per-user", "2"),
                                           ("--max-requests-per-user", "2"), ("--rounds", "-1"),
                                           ("--bootstrap", "-1"), ("--frontier-points", "1")])
def test_an_option_below_its_floor_exits_2_naming_that_option(tmp_path, capsys, option, value):
    obs = tmp_path / "obs.yaml"
    _write_obs(obs, [{"policy": "ar", "concurrency": 4, "tps_user": 95, "throughput_tok_s_per_gpu": 350}])
    out = tmp_path / "fit.yaml"
    assert main(["profile", "fit", str(obs), "--out", str(out), option, value]) == 2
    assert f"field '{option[2:]}'" in capsys.readouterr().err and not out.exists()


def obs_file(tmp_path, fam, params, loads):
    """An observations file of no-speculation load points the simulator gives under `params`."""
    obs = tmp_path / "obs.yaml"
    _write_obs(obs, [{"policy": "ar", "concurrency": p.concurrency, "tps_user": p.tps_user,
                      "throughput_tok_s_per_gpu": p.throughput_tok_s_per_gpu, "prompt_tokens": 500,
                      "output_tokens": 200} for p in simulated(fam, params, loads)])
    return obs


def _two_point_obs(tmp_path):
    """Two no-speculation observations (8 and 512 users) of the known roofline curve."""
    fam = CurveFamily("roofline", fixed={"per_context_token_s": 0.0}, max_batch_tokens=2048)
    return obs_file(tmp_path, fam, KNOWN, (8, 512))


def test_fit_cli_prints_draft_source_and_records_priors(tmp_path, capsys):
    obs = _two_point_obs(tmp_path)
    out = tmp_path / "fit.yaml"
    rc = main(["profile", "fit", str(obs), "--out", str(out), "--family", "roofline", "--fix",
               "per_context_token_s=0", "--roofline", "h200-qwen3-8b-roofline", "--bootstrap", "10",
               "--rounds", "1", "--requests-per-user", "3", "--frontier-points", "2",
               "--max-batch-tokens", "2048"])
    assert rc == 0
    cap = capsys.readouterr()
    err = cap.err
    assert "draft costs: roofline tables of h200-qwen3-8b-roofline" in err and "priors from" in err
    # the roofline has no per-request cost, so per_request_s stays at 0, and the report says so
    assert "per_request_s is 0, not fitted" in cap.out + cap.err
    assert "per_request_s is 0, not fitted" in (tmp_path / "fit.fit.md").read_text()
    fit = yaml.safe_load(out.read_text())["fit"]
    assert fit["draft_costs"]["source"] == "roofline" and set(fit["priors"]["centres"]) == \
        {"floor_s", "weight_s", "per_token_s"}
    assert fit["draws"] and fit["observed_range"]["users"] == [8.0, 512.0]


def test_fit_frees_per_request_s_with_a_roofline_prior(tmp_path, capsys):
    """Issue 41: a roofline with a per-request cost makes per_request_s a fitted parameter with
    that prior (two no-speculation points cannot identify it; the prior does)."""
    obs = _two_point_obs(tmp_path)
    roof = load_hw_profile("h200-qwen3-8b-roofline")
    roof.per_request_s = 2e-5
    roof.save(tmp_path / "roof.yaml")
    out = tmp_path / "fit.yaml"
    assert main(["profile", "fit", str(obs), "--out", str(out), "--family", "roofline", "--fix",
                 "per_context_token_s=0", "--roofline", str(tmp_path / "roof.yaml"), "--bootstrap", "10",
                 "--rounds", "1", "--requests-per-user", "3", "--frontier-points", "2",
                 "--max-batch-tokens", "2048"]) == 0
    doc = yaml.safe_load(out.read_text())
    assert doc["fit"]["priors"]["centres"]["per_request_s"] == pytest.approx(2e-5)
    assert doc["step_time"]["per_request_s"] > 0
    assert "per_request_s is 0, not fitted" not in (tmp_path / "fit.fit.md").read_text()


MOE = {"floor_s": 0.004, "expert_s": 0.015, "per_token_s": 2.0e-5, "per_context_token_s": 0.0}


def test_moe_family_recovers_a_known_expert_coverage_curve():
    """gpt-oss-like routing (128 experts, 4 per token): the step grows fast while tokens still
    bring new experts, then by per_token_s only; the moe family recovers it from no-speculation
    loads, and its written table follows the curve between knots."""
    fam = family_from_dict({"family": "moe", "experts": 128, "top_k": 4, "fixed": {"per_context_token_s": 0.0},
                            "max_batch_tokens": 2048})
    assert fam.cover(1) == pytest.approx(4 / 128) and fam.cover(2048) == pytest.approx(1.0)
    prof = fam.profile(MOE, "known")
    B = np.arange(1, 2049)
    assert np.allclose(prof.step_time(B), fam.table_time(MOE, B), rtol=2e-3)
    obs = simulated(fam, MOE, (1, 4, 16, 64, 256, 1024))
    result = Calibration(obs, FitConfig(fam, requests_per_user=3, bootstrap=0)).fit()
    for name in ("floor_s", "expert_s", "per_token_s"):
        assert result.params[name] == pytest.approx(MOE[name], rel=0.08), name
    # floor + linear cannot follow the bend as closely
    lin = Calibration(obs, FitConfig(CurveFamily("linear", fixed={"per_context_token_s": 0.0},
                                                 max_batch_tokens=2048), requests_per_user=3, bootstrap=0)).fit()
    worst = lambda r: max(abs(x["throughput_rel_error"]) for x in r.residuals())  # noqa: E731
    assert worst(result) < 0.02 < worst(lin)


@pytest.mark.parametrize("data, field", [
    ({"family": "moe", "top_k": 4}, "experts"),
    ({"family": "moe", "experts": 8, "top_k": 8}, "top_k"),
    ({"family": "moe", "experts": 8, "top_k": 2, "fixed": {"weight_s": 0.0}}, "fixed.weight_s"),
])
def test_moe_family_needs_its_routing(data, field):
    with pytest.raises(InputError) as err:
        family_from_dict(data)
    assert field in str(err.value)


def test_fit_cli_takes_the_moe_routing_as_options(tmp_path, capsys):
    fam = family_from_dict({"family": "moe", "experts": 128, "top_k": 4, "fixed": {"per_context_token_s": 0.0},
                            "max_batch_tokens": 2048})
    obs = obs_file(tmp_path, fam, MOE, (1, 8, 64, 512))
    out = tmp_path / "fit.yaml"
    common = ["--fix", "per_context_token_s=0", "--bootstrap", "4", "--rounds", "1", "--requests-per-user", "3",
              "--frontier-points", "2", "--max-batch-tokens", "2048"]
    assert main(["profile", "fit", str(obs), "--out", str(out), "--family", "moe", "--experts", "128",
                 "--top-k", "4", *common]) == 0
    family = yaml.safe_load(out.read_text())["fit"]["family"]
    assert family["family"] == "moe" and (family["experts"], family["top_k"]) == (128, 4)
    capsys.readouterr()
    for args, field in ((["--family", "moe"], "experts"), (["--family", "linear", "--top-k", "4"], "experts"),
                        (["--family", "moe", "--experts", "4", "--top-k", "4"], "top_k")):
        bad = tmp_path / "bad.yaml"
        assert main(["profile", "fit", str(obs), "--out", str(bad), *args, *common]) == 2
        assert f"'{field}'" in capsys.readouterr().err and not bad.exists()


def test_an_moe_fit_carries_its_per_token_reading_into_the_interval(tmp_path, capsys):
    """Three no-speculation points of a known MoE curve fit as well by floor + per-token, which
    does not saturate: its draws join the fit's, the interval picks one, and that draw prices
    large verify batches dearer (relative to small ones) than the moe point estimate does."""
    from dspark_sim.sweep.intervals import fit_spread, pick_draws

    fam = family_from_dict({"family": "moe", "experts": 128, "top_k": 4, "fixed": {"per_context_token_s": 0.0},
                            "max_batch_tokens": 2048})
    obs = obs_file(tmp_path, fam, MOE, (32, 48, 64))
    out = tmp_path / "fit.yaml"
    args = ["profile", "fit", str(obs), "--out", str(out), "--family", "moe", "--experts", "128", "--top-k", "4",
            "--fix", "per_context_token_s=0", "--bootstrap", "6", "--rounds", "1", "--requests-per-user", "3",
            "--frontier-points", "2", "--max-batch-tokens", "2048"]
    assert main(args) == 0
    assert "per-token reading" in capsys.readouterr().err
    prof = load_hw_profile(str(out))
    block = prof.extra["fit"]["per_token_reading"]
    assert block["included"] and block["draws"] and all(d["expert_s"] == 0.0 for d in block["draws"])
    spread = fit_spread(prof, out)
    assert spread.reading_from == len(prof.extra["fit"]["draws"])
    picked = pick_draws(spread, 2, [])
    # two of the moe fit's own draws, then the reading's least favourable to speculation
    assert len(picked) == 3 and all(i < spread.reading_from for i in picked[:2]), picked
    reading = [i for i in picked if i >= spread.reading_from]
    assert len(reading) == 1
    from dspark_sim.sweep.intervals import draw_profile

    drawn = draw_profile(spread, spread.draws[reading[0]], "reading")
    ratio = lambda p: float(p.step_time(1024) / p.step_time(32))  # noqa: E731
    assert ratio(drawn) > 1.5 * ratio(prof)
    # --no-per-token-reading: the moe fit alone, nothing added
    assert main(args + ["--no-per-token-reading"]) == 0
    assert "per_token_reading" not in load_hw_profile(str(out)).extra["fit"]
    assert fit_spread(load_hw_profile(str(out)), out).reading_from is None


def test_observations_that_show_the_experts_saturating_rule_the_per_token_reading_out(tmp_path):
    fam = family_from_dict({"family": "moe", "experts": 128, "top_k": 4, "fixed": {"per_context_token_s": 0.0},
                            "max_batch_tokens": 2048})
    obs = obs_file(tmp_path, fam, MOE, (1, 8, 64, 512))
    out = tmp_path / "fit.yaml"
    assert main(["profile", "fit", str(obs), "--out", str(out), "--family", "moe", "--experts", "128",
                 "--top-k", "4", "--fix", "per_context_token_s=0", "--bootstrap", "4", "--rounds", "1",
                 "--requests-per-user", "3", "--frontier-points", "2", "--max-batch-tokens", "2048"]) == 0
    block = load_hw_profile(str(out)).extra["fit"]["per_token_reading"]
    assert not block["included"] and block["draws"] == [] and block["max_abs_rel_error"] > 0.1


def test_a_malformed_per_token_reading_is_named_by_its_field():
    from dspark_sim.sweep.intervals import fit_spread

    fam = family_from_dict({"family": "moe", "experts": 128, "top_k": 4, "fixed": {"per_context_token_s": 0.0},
                            "max_batch_tokens": 2048})
    prof = fam.profile(MOE, "known")
    good = {**MOE, "per_request_s": 0.0}
    prof.extra["fit"] = {"family": fam.as_dict(), "draws": [good],
                         "per_token_reading": {"draws": [{**good, "expert_s": 0.0}, {**good, "floor_s": "x"}]}}
    with pytest.raises(InputError) as err:
        fit_spread(prof, "p.yaml")
    assert "fit.per_token_reading.draws[1]" in str(err.value) and "p.yaml" in str(err.value)
    prof.extra["fit"]["per_token_reading"]["draws"] = [{**good, "expert_s": 0.0}]
    assert fit_spread(prof, "p.yaml").reading_from == 1
    lin = CurveFamily("linear", fixed={"per_context_token_s": 0.0}, max_batch_tokens=2048)
    prof.extra["fit"]["family"] = lin.as_dict()
    with pytest.raises(InputError, match="moe"):
        fit_spread(prof, "p.yaml")


def test_an_moe_fit_with_roofline_priors_gives_its_reading_the_rooflines_linear_values(tmp_path, capsys):
    """--roofline with --family moe: the per-token reading is fitted with the roofline's floor +
    per-token values as priors, and the fit writes its block (the path the moe cases, which take
    the split prior, do not run)."""
    roof = tmp_path / "roof.yaml"
    assert main(["roofline", "--model", "deepseek-v3", "--gpu", "H200", "--tp", "8", "--ep", "8",
                 "--dtype", "fp8", "--out", str(roof)]) == 0
    fam = family_from_dict({"family": "moe", "experts": 256, "top_k": 8, "fixed": {"per_context_token_s": 0.0},
                            "max_batch_tokens": 2048})
    obs = obs_file(tmp_path, fam, MOE, (32, 48, 64))
    out = tmp_path / "fit.yaml"
    assert main(["profile", "fit", str(obs), "--out", str(out), "--family", "moe", "--experts", "256",
                 "--top-k", "8", "--fix", "per_context_token_s=0", "--roofline", str(roof), "--bootstrap", "6",
                 "--rounds", "1", "--requests-per-user", "3", "--frontier-points", "2",
                 "--max-batch-tokens", "2048"]) == 0
    assert "per-token reading" in capsys.readouterr().err
    block = load_hw_profile(str(out)).extra["fit"]["per_token_reading"]
    assert set(block["parameters"]) >= {"floor_s", "per_token_s", "expert_s"} and block["parameters"]["expert_s"] == 0.0
    assert block["max_abs_rel_error"] >= 0 and isinstance(block["included"], bool)
