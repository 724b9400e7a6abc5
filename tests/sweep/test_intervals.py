"""Intervals from a fitted profile's spread (issue 41): sweep, plan and recommend rerun on a few
representative draws of the fit and report [low-high]; profiles without draws say so; operating
points beyond the fit's observed loads are flagged."""
import json

import numpy as np
import pytest

from dspark_sim.cli import main
from dspark_sim.hardware.curve_family import CurveFamily
from dspark_sim.profiles.registry import load_hw_profile
from dspark_sim.sweep.intervals import Operating, fit_spread, outside_observed, pick_draws
from dspark_sim.sweep.plan import PlanConfig, plan_capacity
from dspark_sim.sweep.run import SweepConfig, run_sweep, sweep_markdown

from sweepkit import write_identical_trace, write_linear_hw, write_parametric

CENTRE = {"floor_s": 0.004, "weight_s": 0.006, "per_token_s": 4.0e-5}
FAM = CurveFamily("roofline", fixed={"per_context_token_s": 0.0}, max_batch_tokens=2048)


def write_fitted(path, spread: float, n: int = 30, seed: int = 0):
    """A fitted roofline-family profile at CENTRE whose draws scale every parameter by one
    common factor exp(N(0, spread)): a known spread along which every answer is monotone."""
    rng = np.random.default_rng(seed)
    scales = np.exp(rng.normal(0.0, spread, n))
    draws = [FAM.full({k: v * s for k, v in CENTRE.items()}) for s in scales]
    prof = FAM.profile(CENTRE, path.stem)
    prof.extra = {"fit": {"family": FAM.as_dict(), "parameters": FAM.full(CENTRE), "draws": draws,
                          "observed_range": {"users": [2.0, 16.0], "batch_tokens": [2.0, 16.0]}}}
    prof.save(path)
    return path, scales


@pytest.fixture()
def inputs(tmp_path):
    trace = write_identical_trace(tmp_path / "t.jsonl", 120, 100, 30, gap_s=0.02)
    acc = write_parametric(tmp_path / "a.acceptance.json", [0.8, 0.7, 0.6])
    return tmp_path, trace, acc


def _sweep(tmp, trace, acc, hw, draws=2):
    cfg = SweepConfig(trace=str(trace), policies=["static-2"], hw=str(hw), acceptance={"static-2": str(acc)},
                      points=3, load_range=(1, 32), requests_per_user=3, slas=[60.0], spread_draws=draws)
    return run_sweep(cfg, cache_dir=tmp / "cache")


def test_picked_draws_lie_on_both_sides_of_the_point(tmp_path):
    path, scales = write_fitted(tmp_path / "fit.yaml", 0.3)
    spread = fit_spread(load_hw_profile(path))
    where = [Operating(4.0, 0.0, False), Operating(12.0, 0.0, True)]
    picked = pick_draws(spread, 2, where)
    # the 10th and 90th percentile of speed: one draw slower than the fit, one faster
    assert scales[picked[0]] < 1.0 < scales[picked[1]]
    assert scales[picked[0]] == pytest.approx(np.sort(scales)[round(0.1 * 29)])
    assert len(set(pick_draws(spread, 8, where))) == 8


def test_interval_contains_the_point_and_widens_with_the_spread(inputs):
    tmp, trace, acc = inputs
    widths = []
    for s in (0.05, 0.3):
        hw, _ = write_fitted(tmp / f"fit-{s}.yaml", s)
        res = _sweep(tmp, trace, acc, hw)
        row = res.sla[res.sla["policy"] == "static-2"].iloc[0]
        low, high = row["throughput_tok_s_per_gpu_low"], row["throughput_tok_s_per_gpu_high"]
        # strictly inside: the picked draws fall on both sides of the point estimate
        assert low < row["throughput_tok_s_per_gpu"] < high
        widths.append(high / low)
        assert "[" in sweep_markdown(res) and res.fit_spread["draws"]
    assert widths[1] > widths[0] * 1.5


def test_no_draws_no_interval_and_it_says_so(inputs, capsys):
    tmp, trace, acc = inputs
    hw = write_linear_hw(tmp / "lin.yaml", 0.01, 1e-4)
    res = _sweep(tmp, trace, acc, hw)
    assert not any(c.endswith("_low") for c in res.sla.columns)
    assert "no fit spread" in res.spread_note and "no fit spread" in sweep_markdown(res)
    rc = main(["sweep", "--trace", str(trace), "--hw", str(hw), "--policies", "static-2",
               "--acceptance", str(acc), "--points", "2", "--load-range", "1,8",
               "--requests-per-user", "3", "--sla", "60", "--out", str(tmp / "out")])
    assert rc == 0 and "no fit spread" in capsys.readouterr().out
    doc = json.loads((tmp / "out" / "sweep.json").read_text())
    assert doc["fit_spread"]["interval"] is None and "no fit spread" in doc["fit_spread"]["note"]


def test_outside_the_observed_loads_is_flagged(inputs):
    tmp, trace, acc = inputs
    assert outside_observed({"batch_tokens": [2.0, 16.0]}, 40.0).startswith("extrapolated: 40")
    assert outside_observed({"batch_tokens": [2.0, 16.0]}, 10.0) == ""
    assert outside_observed(None, 40.0) == ""
    hw, _ = write_fitted(tmp / "fit.yaml", 0.1)
    res = _sweep(tmp, trace, acc, hw, draws=0)          # flags need no draws
    flags = res.sla.set_index("policy")["outside_observed"]
    assert "> observed 16" in flags["static-2"]         # 32 users x 3 tokens verified
    assert "Outside the loads the profile was fitted on" in sweep_markdown(res)


def test_plan_and_recommend_carry_the_interval(inputs, capsys):
    tmp, trace, acc = inputs
    hw, _ = write_fitted(tmp / "fit.yaml", 0.3)
    plan = plan_capacity(PlanConfig(trace=str(trace), policies=["static-2"], sla=60.0, hw=str(hw),
                                    acceptance={"static-2": str(acc)}, spread_draws=2),
                         cache_dir=tmp / "pcache")
    for r in plan.table.itertuples():
        assert r.gpus_low <= r.gpus <= r.gpus_high
    rc = main(["recommend", "--trace", str(trace), "--hw", str(hw), "--acceptance", str(acc),
               "--sla", "60", "--points", "2", "--load-range", "2,16", "--requests-per-user", "3",
               "--spread-draws", "2", "--workers", "1", "--out", str(tmp / "rec")])
    out = capsys.readouterr().out
    assert rc == 0 and "fit interval:" in out
    choice = json.loads((tmp / "rec" / "recommend.json").read_text())["choices"][0]
    iv = choice["interval"]
    assert iv["throughput_low"] <= choice["throughput_tok_s_per_gpu"] <= iv["throughput_high"]
    assert len(iv["best_per_draw"]) == 2 and iv["same_choice"] == all(
        b == choice["policy"] for b in iv["best_per_draw"])
    assert ("under all 2 draws" in out) == iv["same_choice"]
    assert iv["loss_vs_draw_best_max"] >= 0.0 and (iv["loss_vs_draw_best_max"] == 0.0 or not iv["same_choice"])


@pytest.mark.parametrize("cmd", ["sweep", "plan", "recommend"])
def test_bad_spread_draws_exits_2_naming_the_field(inputs, cmd, capsys):
    tmp, trace, acc = inputs
    extra = {"sweep": [], "plan": ["--sla", "60"], "recommend": []}[cmd]
    rc = main([cmd, "--trace", str(trace), "--spread-draws", "1", "--out", str(tmp / "o"), *extra])
    err = capsys.readouterr().err
    assert rc == 2 and "spread-draws" in err and "Traceback" not in err
    assert not (tmp / "o").exists()


def test_a_malformed_draw_exits_2_naming_the_file_and_field(inputs, capsys):
    import yaml

    tmp, trace, acc = inputs
    hw, _ = write_fitted(tmp / "fit.yaml", 0.1)
    doc = yaml.safe_load(hw.read_text())
    del doc["fit"]["draws"][3]["per_token_s"]
    hw.write_text(yaml.safe_dump(doc))
    rc = main(["sweep", "--trace", str(trace), "--hw", str(hw), "--policies", "static-2",
               "--acceptance", str(acc), "--points", "2", "--load-range", "1,8",
               "--requests-per-user", "3", "--sla", "60", "--out", str(tmp / "o")])
    err = capsys.readouterr().err
    assert rc == 2 and "fit.yaml" in err and "fit.draws[3]" in err and "per_token_s" in err
    assert "Traceback" not in err
    assert not (tmp / "o").exists()                   # refused before any point ran


def test_a_draw_keeps_the_profile_and_reprices_layer_share_drafting(tmp_path):
    from dspark_sim.hardware.draft_cost import DraftCosts, LayerShare
    from dspark_sim.sweep.intervals import draw_profile

    fam = CurveFamily("linear", fixed={"per_context_token_s": 0.0}, max_batch_tokens=1024)
    centre = {"floor_s": 0.01, "per_token_s": 2e-5, "per_context_token_s": 0.0}
    costs = DraftCosts("layer_share", "", shares={"dspark": LayerShare("dspark", 3, 36, 5)})
    prof = fam.profile(centre, "lin", max_batch_requests=64)
    costs.apply(prof)
    twice = {k: 2 * v for k, v in centre.items()}
    prof.extra = {"fit": {"family": fam.as_dict(), "draws": [twice], "draft_costs": costs.as_dict()}}
    drawn = draw_profile(fit_spread(prof), twice, "lin-draw0")
    B = np.array([1.0, 64.0, 512.0])
    assert np.allclose(drawn.step_time(B), 2 * prof.step_time(B))
    # drafting priced as 3/36 of the draw's own step over R x 5 tokens: twice the fitted one
    assert np.allclose(drawn.draft_time("dspark", np.array([1, 8, 32])),
                       2 * prof.draft_time("dspark", np.array([1, 8, 32])))
    assert drawn.max_batch_requests == 64 and "fit" not in drawn.extra
