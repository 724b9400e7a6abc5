"""`profile fit --split-prior`: observations at one verify width cannot split the cost a user adds
into per-token and per-request parts; a published GPU step model's split centres priors on both,
so the fit's draws carry that split instead of holding the per-request part at 0 (issue 41)."""
import yaml

from dspark_sim.cli import main
from dspark_sim.hardware.curve_family import CurveFamily
from test_fit_priors import obs_file

KNOWN = {"floor_s": 0.004, "per_token_s": 3.0e-5, "per_request_s": 0.0, "per_context_token_s": 0.0}
COMMON = ["--family", "linear", "--bootstrap", "12", "--rounds", "1", "--requests-per-user", "3",
          "--frontier-points", "2", "--max-batch-tokens", "2048", "--draft-layer-share", "eagle3=1/32"]


def _obs(tmp_path):
    fam = CurveFamily("linear", fixed={"per_context_token_s": 0.0}, max_batch_tokens=2048)
    return obs_file(tmp_path, fam, KNOWN, (4, 32, 128))


def test_split_prior_fits_both_parts_keeps_the_cost_per_user_and_reports_it(tmp_path, capsys):
    obs, out = _obs(tmp_path), tmp_path / "fit.yaml"
    assert main(["profile", "fit", str(obs), "--out", str(out), "--fix", "per_context_token_s=0",
                 "--split-prior", "specdecode-bench-llama31-8b-h100", *COMMON]) == 0
    err = capsys.readouterr().err
    assert "Split prior (specdecode-bench-llama31-8b-h100" in err
    doc = yaml.safe_load(out.read_text())
    fit, step = doc["fit"], doc["step_time"]
    assert set(fit["priors"]["centres"]) == {"per_token_s", "per_request_s"} and fit["priors"]["spread_log"] == 1.0
    assert step["per_request_s"] > 0
    # the cost a user adds stays what the observations say (decode-only points: one token a user)
    tokens = 1.0
    per_user = tokens * fit["parameters"]["per_token_s"] + fit["parameters"]["per_request_s"]
    assert abs(per_user / (tokens * KNOWN["per_token_s"]) - 1) < 0.1
    shares = [d["per_request_s"] / (tokens * d["per_token_s"] + d["per_request_s"]) for d in fit["draws"]]
    assert max(shares) - min(shares) > 0.2                 # the draws carry the split's uncertainty
    assert "per_request_s is 0, not fitted" not in (tmp_path / "fit.fit.md").read_text()


def test_split_prior_refuses_what_it_cannot_price(tmp_path, capsys):
    obs = _obs(tmp_path)
    cases = [
        (["--roofline", "h200-qwen3-8b-roofline", "--fix", "per_context_token_s=0"], "split-prior"),
        ([], "split-prior"),                                  # the context term left free
        (["--fix", "per_context_token_s=0,per_request_s=1e-5"], "split-prior"),
        (["--fix", "per_context_token_s=0", "--split-spread", "0"], "split-spread"),
    ]
    for extra, field in cases:
        out = tmp_path / "bad.yaml"
        assert main(["profile", "fit", str(obs), "--out", str(out), "--split-prior",
                     "specdecode-bench-llama31-8b-h100", *COMMON, *extra]) == 2, extra
        assert f"'{field}'" in capsys.readouterr().err and not out.exists()
    assert main(["profile", "fit", str(obs), "--out", str(tmp_path / "x.yaml"), "--split-prior", "nope",
                 "--fix", "per_context_token_s=0", *COMMON]) == 2
    assert "shipped: specdecode-bench-llama31-8b-h100" in capsys.readouterr().err


def test_the_draws_keep_their_per_request_cost_in_the_sweep_intervals(tmp_path):
    """A freed held parameter travels with the family into the fit block, so the profiles the
    intervals simulate carry each draw's per_request_s (it was dropped to 0 before)."""
    import copy

    from dspark_sim.profiles.registry import load_hw_profile
    from dspark_sim.sweep.intervals import draw_profile, fit_spread

    obs, out = _obs(tmp_path), tmp_path / "fit.yaml"
    assert main(["profile", "fit", str(obs), "--out", str(out), "--fix", "per_context_token_s=0",
                 "--split-prior", "specdecode-bench-llama31-8b-h100", *COMMON]) == 0
    doc = yaml.safe_load(out.read_text())
    assert doc["fit"]["family"]["freed"] == ["per_request_s"]
    hw = load_hw_profile(str(out))
    spread = fit_spread(hw, out)
    for draw in spread.draws[:3]:
        assert draw_profile(spread, draw, "d").per_request_s == draw["per_request_s"] > 0
    # a fit block written before `freed` was recorded: the draws say it
    old = copy.deepcopy(hw)
    del old.extra["fit"]["family"]["freed"]
    again = fit_spread(old, out)
    assert "per_request_s" in again.family.free
    assert draw_profile(again, again.draws[0], "d").per_request_s == again.draws[0]["per_request_s"]
