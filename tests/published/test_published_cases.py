"""Published GPU cases: every shipped case loads with its provenance, runs in the default suite
with small settings, and its table regenerates identically; bad case files exit 2 (issue 41)."""
import json
from pathlib import Path

import pytest
import yaml

from dspark_sim.cli import main
from dspark_sim.errors import InputError
from dspark_sim.published.case_acceptance import flat_rate
from dspark_sim.published.cases import load_case, shipped_cases

from known_case import EFFORT, known_case

SMALL = ["--requests-per-user", "3", "--max-requests-per-user", "3", "--rounds", "1", "--bootstrap", "4"]


def test_every_shipped_case_loads_with_provenance():
    cases = shipped_cases()
    assert {"vllm-pr52362-dsv4-flash-mi350x", "dspark-paper-v4-flash-fig8", "dspark-paper-v4-pro-fig8",
            "sglang-gpt-oss-120b-h100-eagle3-dflash", "vllm-blog-dsv4-pro-b300",
            "amd-blog-minimax-m25-mi355x-eagle3",
            "angelslim-issue163-qwen3-30b-a3b-h100x4-eagle3-tree",
            "atom-recipe-dsv4-pro-mi355x-mtp3", "atom-nightly-dsv4-pro-mi355x-mtp3",
            "atom-nightly-dsv4-pro-mi355x-dpa-8k-dspark"} <= set(cases)
    for path in cases.values():
        case = load_case(path)
        assert case.source["url"].startswith("https://") and case.source["where"]
        assert any(a.name == case.baseline for a in case.arms)
        for arm in case.arms:
            assert arm.read and len(arm.throughput) == len(case.loads)
            if arm.policy != "ar":
                assert arm.acceptance_note["basis"] in ("published", "read", "derived", "assumed")


def test_issue_numbers_are_carried_as_published():
    case = load_case(shipped_cases()["vllm-pr52362-dsv4-flash-mi350x"])
    assert case.arm("none").throughput[-1] == 8878.57 and case.arm("fixed-k7").throughput[-1] == 7852.42
    assert case.per_gpu(case.arm("adaptive-k7"))[-1] == pytest.approx(13324.67 / 8)
    amd = load_case(shipped_cases()["amd-blog-minimax-m25-mi355x-eagle3"])   # stated per GPU
    assert list(amd.per_gpu(amd.arm("eagle3"))) == [161.7, 277.9, 436.9, 759.0, 1137.3] and amd.gpus == 4
    tree = load_case(shipped_cases()["angelslim-issue163-qwen3-30b-a3b-h100x4-eagle3-tree"])  # system tok/s
    assert tree.arm("eagle3-tree").throughput == (185.64, 476.37, 673.14, 927.11, 1307.95)
    assert tree.arm("none").throughput[0] == 218.89 and tree.gpus == 4
    atom = load_case(shipped_cases()["atom-recipe-dsv4-pro-mi355x-mtp3"])   # whole server, 8 GPUs
    assert atom.arm("none").throughput == (195.31, 367.43, 668.02, 1145.71, 1808.69, 2847.24, 4289.93)
    assert atom.arm("mtp3").throughput[-1] == 5701.20 and atom.gpus == 8
    assert atom.window == "whole-run" and atom.requests_at(6) == 2560
    nightly = load_case(shipped_cases()["atom-nightly-dsv4-pro-mi355x-dpa-8k-dspark"])   # run medians
    assert nightly.arm("dspark").throughput == (1989.24, 3031.91, 3808.14, 4364.09)
    assert nightly.window == "steady" and nightly.prompt_tokens.values[0] == 7373


def test_flat_rate_solves_the_accept_length():
    a = flat_rate(2.41, 3)
    assert 1 + a + a * a + a ** 3 == pytest.approx(2.41)


def _broken(tmp_path, edit):
    src = shipped_cases()["sglang-gpt-oss-120b-h100-eagle3-dflash"]
    data = yaml.safe_load(src.read_text())
    edit(data)
    path = tmp_path / "broken.case.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.mark.parametrize("edit, field", [
    (lambda d: d["source"].pop("where"), "source.where"),
    (lambda d: d["arms"][1].pop("read"), "arms[1].read"),
    (lambda d: d["arms"][2]["acceptance"].update(basis="guessed"), "eagle3.acceptance.basis"),
    (lambda d: d["output_tokens"].pop("how"), "output_tokens.how"),
    (lambda d: d["arms"][0].update(throughput=[1, 2]), "arms[0].throughput"),
    (lambda d: d["arms"][2]["accept_length"].update(loads=[1, 8, 32]), "arms[2].accept_length.loads"),
    (lambda d: d["arms"][2]["accept_length"].update(values=[2.41, 2.41]), "arms[2].accept_length.values"),
    (lambda d: d["arms"][1]["accept_length"].pop("how"), "arms[1].accept_length.how"),
    (lambda d: d["arms"][0].update(ttft_ms={"values": [100, 200], "basis": "published", "how": "x"}),
     "arms[0].ttft_ms.values"),
    (lambda d: d["arms"][0].update(ttft_ms={"values": [100, 200, 300], "basis": "published"}),
     "arms[0].ttft_ms.how"),
])
def test_missing_provenance_names_file_line_and_field(tmp_path, edit, field):
    path = _broken(tmp_path, edit)
    with pytest.raises(InputError) as err:
        load_case(path)
    assert field in str(err.value) and err.value.file == str(path) and err.value.line


def test_bad_case_exits_2_and_writes_nothing(tmp_path, capsys):
    path = _broken(tmp_path, lambda d: d["source"].pop("url"))
    out = tmp_path / "out"
    assert main(["validate-published", str(path), "--out", str(out), *SMALL]) == 2
    assert "source.url" in capsys.readouterr().err and not out.exists()


def test_every_case_runs_and_its_table_regenerates_identically(tmp_path, capsys):
    first, second = tmp_path / "a", tmp_path / "b"
    assert main(["validate-published", "--out", str(first), *SMALL]) == 0
    assert main(["validate-published", "--out", str(second), *SMALL]) == 0
    assert (first / "table.md").read_bytes() == (second / "table.md").read_bytes()
    table = json.loads((first / "table.json").read_text())
    cases = {r["case"] for r in table["rows"]}
    assert cases == set(shipped_cases())
    for name in cases:
        assert (first / f"{name}.png").stat().st_size > 0
    # every published speculative cell has a prediction and an error, the baseline arm its residual
    for r in table["rows"]:
        assert r["predicted_tok_s_per_gpu"] > 0
        if r["baseline"]:
            assert abs(r["throughput_error"]) < 0.25
    # the issue's cliff case: fixed K=7 below no speculation at 256 users is a published loss
    cliff = [r for r in table["rows"] if r["arm"] == "fixed-k7" and r["load"] == 256]
    assert cliff and cliff[0]["published_below_baseline"]
    # the SGLang card ran 80 prompts: only its batch-64 cells had fewer than 3 requests per user
    short = {(r["arm"], r["load"]) for r in table["rows"]
             if r["case"] == "sglang-gpt-oss-120b-h100-eagle3-dflash" and r.get("short_run")}
    assert short == {("none", 64), ("dflash", 64), ("eagle3", 64)}
    assert not any(r.get("short_run") for r in table["rows"] if r["case"] == "vllm-blog-dsv4-pro-b300")
    # the card's accepted lengths: a static policy verifies every draft, so the simulated length is
    # the acceptance input's (their mean) at every batch, 64 included, where a 2-request closed
    # loop's steady window held one request, the luckiest (2.62-2.66)
    checked = [r for r in table["rows"] if r["published_accept_length"] is not None]
    assert {(r["case"], r["arm"]) for r in checked} >= {("sglang-gpt-oss-120b-h100-eagle3-dflash", "eagle3"),
                                                         ("sglang-gpt-oss-120b-h100-eagle3-dflash", "dflash")}
    for r in checked:
        if r["case"].startswith("sglang"):
            assert abs(r["predicted_accept_length"] - r["published_accept_length"]) < 0.1, r
    assert "accepted length" in (first / "table.md").read_text()
    # published first-token times (the ATOM nightly cases) sit beside the simulated ones, counted
    ttft = [r for r in table["rows"] if r["published_ttft_ms"] is not None]
    assert {r["case"] for r in ttft} >= {"atom-nightly-dsv4-pro-mi355x-mtp3",
                                         "atom-nightly-dsv4-pro-mi355x-dpa-8k-dspark"}
    assert all(r["predicted_ttft_ms"] > 0 for r in ttft) and table["summary"]["ttft_cells"] == len(ttft)
    assert "time to first token" in (first / "table.md").read_text()
    _check_budget_rows(table, (first / "table.md").read_text())


def _check_budget_rows(table: dict, markdown: str) -> None:
    """The paper's verification budgets beside the simulated ones, and the budget-informed
    diagnostic on the DSpark arm only (MTP-1's budget is flat and it is the baseline)."""
    rows = [r for r in table["rows"] if r["case"] == "dspark-paper-v4-flash-fig8"]
    mtp = [r for r in rows if r["arm"] == "mtp1"]
    assert [r["published_verify_tokens"] for r in mtp] == [2.0] * 5
    assert all(r["predicted_verify_tokens"] == pytest.approx(2.0) for r in mtp)
    dspark = [r for r in rows if r["arm"] == "dspark"]
    assert all(1.0 < r["predicted_verify_tokens"] <= 6.0 for r in dspark)
    assert "verification budget" in markdown
    assert all("budget_informed_gain" in r for r in dspark)
    assert not any("budget_informed_gain" in r for r in mtp)
    [diag] = table["fits"]["dspark-paper-v4-flash-fig8"]["budget_informed"]
    assert diag["arm"] == "dspark" and len(diag["budgets"]) == 5
    assert "budget-informed diagnostic" in markdown


def test_published_cost_model_is_compared_with_the_roofline(tmp_path):
    from dspark_sim.published.cost_models import compare, load_cost_model, shipped_cost_models

    paths = shipped_cost_models()
    assert [p.name for p in paths] == ["specdecode-bench-llama31-8b-h100.cost.yaml"]
    cm = load_cost_model(paths[0])
    rows = compare(cm)
    first = rows[0]                   # batch 1 at 1,024 KV tokens, the published constants by hand
    assert first["published_step_s"] == pytest.approx(3.92645679e-08 * 1024 + 2.10103129e-05
                                                      + 5.88590713e-03 + 1.20683946e-03)
    assert first["published_draft_s"] == pytest.approx(2.37768493e-09 * 1024 + 8.41429603e-07 * 3
                                                       + 2.13526175e-03)
    assert [r["batch"] for r in rows] == [1, 8, 16, 32, 64] and all(r["roofline_step_s"] > 0 for r in rows)
    # the EAGLE draft against its bare layer share (3 drafts x 1/32 of the step): one of the two
    # measurements LAYER_SHARE_OVERHEAD is the geometric mean of (with vLLM's DSpark median 2.35)
    from statistics import median

    from dspark_sim.hardware.draft_cost import LAYER_SHARE_OVERHEAD
    assert first["draft_over_layer_share"] == pytest.approx(first["published_draft_s"]
                                                            / (3 * first["published_step_s"] / 32))
    ratios = [r["draft_over_layer_share"] for r in rows]
    assert 2.3 < min(ratios) and max(ratios) < 3.3
    assert LAYER_SHARE_OVERHEAD == pytest.approx((2.35 * median(ratios)) ** 0.5, abs=0.005)
    data = yaml.safe_load(paths[0].read_text())
    del data["target"]["c_kv"]
    bad = tmp_path / "bad.cost.yaml"
    bad.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(InputError) as err:
        load_cost_model(bad)
    assert "target.c_kv" in str(err.value) and err.value.line


@pytest.mark.parametrize("edit, field", [
    (lambda d: d["fit"]["split_prior"].update(cost_model="no-such-model"), "fit.split_prior.cost_model"),
    (lambda d: d["fit"]["split_prior"].pop("how"), "fit.split_prior.how"),
    (lambda d: d["fit"]["split_prior"].update(spread=0), "fit.split_prior.spread"),
])
def test_split_prior_is_checked_by_the_loader(tmp_path, edit, field):
    path = _broken(tmp_path, edit)
    with pytest.raises(InputError) as err:
        load_case(path)
    assert field in str(err.value) and err.value.line


def test_split_prior_takes_a_cost_model_file_beside_the_case(tmp_path):
    """A case written by a user names its own cost model by a path relative to the case file; the
    prior's ratio is that file's c_kv / c_compute, and a path that is not there names the field."""
    from dspark_sim.published.cost_models import shipped_cost_models
    from dspark_sim.published.predict import case_split

    cm = yaml.safe_load(shipped_cost_models()[0].read_text())
    cm["name"] = "mine"
    cm["target"]["c_kv"] = 1e-9
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "mine.cost.yaml").write_text(yaml.safe_dump(cm, sort_keys=False))
    path = _broken(tmp_path, lambda d: d["fit"]["split_prior"].update(cost_model="models/mine.cost.yaml"))
    split = case_split(load_case(path))
    assert split.ratio_per_context_token == pytest.approx(1e-9 / cm["target"]["c_compute"])
    assert "mine.cost.yaml" in split.source
    missing = _broken(tmp_path, lambda d: d["fit"]["split_prior"].update(cost_model="models/none.cost.yaml"))
    with pytest.raises(InputError) as err:
        load_case(missing)
    assert "fit.split_prior.cost_model" in str(err.value) and "none.cost.yaml" in str(err.value)
    del cm["target"]["c_compute"]                  # a malformed file is caught when the case loads
    (tmp_path / "models" / "bad.cost.yaml").write_text(yaml.safe_dump(cm, sort_keys=False))
    bad = _broken(tmp_path, lambda d: d["fit"]["split_prior"].update(cost_model="models/bad.cost.yaml"))
    with pytest.raises(InputError) as err:
        load_case(bad)
    assert "bad.cost.yaml" in str(err.value) and "target.c_compute" in str(err.value) and err.value.line


def test_split_centres_keep_the_cost_per_added_user_and_take_the_published_ratio():
    from dspark_sim.published.predict import case_split
    from dspark_sim.sweep.split_prior import request_share, split_centres

    case = load_case(shipped_cases()["dspark-paper-v4-flash-fig8"])     # MTP-1: 2 tokens per request
    split = case_split(case)
    assert split.ratio_per_context_token == pytest.approx(3.92645679e-08 / 2.10103129e-05)
    held = {"per_token_s": 3e-5, "per_request_s": 0.0}
    ctx = 1000 + 400 / 2
    centres, ratio = split_centres(split, 2.0, ctx, held)   # disaggregated prefill: 2 tokens a user
    assert ratio == pytest.approx(3.92645679e-08 * ctx / 2.10103129e-05)
    assert 2 * centres["per_token_s"] + centres["per_request_s"] == pytest.approx(2 * 3e-5)
    assert centres["per_request_s"] / centres["per_token_s"] == pytest.approx(ratio)
    assert request_share(centres, 2.0) == pytest.approx(ratio / (2 + ratio))


def test_arms_simulated_from_a_known_split_are_recovered(tmp_path):
    """Every arm of a case made by the simulator from a known profile (its per-request /
    per-token split at the prior's centre): the fit to the baseline arm alone predicts the
    speculative arms' gains closely and each lies inside its row's interval."""
    from dspark_sim.published.predict import run_case

    path, case, truth = known_case(tmp_path)
    res = run_case(case, EFFORT, interval_draws=2, with_one_cell=False)
    spec_rows = [r for r in res.rows if not r["baseline"]]
    assert len(spec_rows) == 6
    for r in spec_rows:
        assert abs(r["gain_error"]) < 0.08, r
        assert r["predicted_gain_low"] <= r["predicted_gain"] <= r["predicted_gain_high"]
        assert r["published_in_interval"], r
    assert "Split prior" in res.split_note


def test_a_case_with_roofline_priors_recovers_arms_simulated_on_that_roofline(tmp_path):
    """A user's own case file with `fit.roofline` (priors and draft costs from the roofline of
    the same model and GPU, as `profile fit --roofline`): arms simulated on that roofline itself
    are predicted from the baseline arm within a few percent."""
    from dspark_sim.published.predict import _points, case_roofline, fit_config, run_case
    from dspark_sim.sweep.load_replay import simulate_load

    data = yaml.safe_load(shipped_cases()["sglang-gpt-oss-120b-h100-eagle3-dflash"].read_text())
    data["name"] = "own-llama-h100"
    data["loads"] = [1, 8, 32, 64]
    data["arms"] = [a for a in data["arms"] if a["name"] in ("none", "eagle3")]
    for arm in data["arms"]:
        arm["throughput"] = [1.0, 2.0, 3.0, 4.0]                  # placeholders, replaced below
    data["fit"] = {"family": "roofline", "roofline": {
        "model": "llama-3.1-8b", "gpu": "H100", "spread": 0.5, "basis": "assumed",
        "how": "the same model and GPU as the measurements"}}
    path = tmp_path / "own.case.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    case = load_case(path)
    effort = {"requests_per_user": 3, "rounds": 1, "bootstrap": 4, "seed": 0}
    cfg = fit_config(case, effort)
    assert cfg.draft_costs.source == "roofline" and set(cfg.priors) >= {"floor_s", "per_token_s"}
    truth = case_roofline(case)
    for spec in data["arms"]:
        arm = case.arm(spec["name"])
        spec["throughput"] = [round(simulate_load(truth, obs, users, cfg, acc=arm.acceptance)
                                    .throughput_tok_s_per_gpu, 3)
                              for obs, users in zip(_points(case, arm, None), case.loads)]
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    res = run_case(load_case(path), effort)
    assert "Priors from the roofline of llama-3.1-8b on H100" in res.draft_summary
    for r in res.rows:
        assert abs(r["throughput_error"]) < 0.06, r
        if not r["baseline"]:
            assert abs(r["gain_error"]) < 0.06, r
    bad = dict(data, fit={"family": "roofline", "roofline": dict(data["fit"]["roofline"], gpu="H999")})
    path.write_text(yaml.safe_dump(bad, sort_keys=False))
    with pytest.raises(InputError) as err:
        load_case(path)
    assert "fit.roofline.gpu" in str(err.value)


def test_eager_range_must_hold_the_point_and_widens_the_interval(tmp_path):
    src = shipped_cases()["vllm-pr52362-dsv4-flash-mi350x"]
    case = load_case(src)
    assert case.eager_range == (0.0043, 0.0834)
    assert case.cudagraph.eager_seconds(1025) == pytest.approx(0.01894)
    data = yaml.safe_load(src.read_text())
    data["cudagraph"]["eager_range"] = {"low_s": 0.02, "high_s": 0.05}     # point 18.9 ms outside
    bad = tmp_path / "bad.case.yaml"
    bad.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(InputError) as err:
        load_case(bad)
    assert "cudagraph.eager" in str(err.value) and err.value.line


@pytest.mark.parametrize("option, value", [("--interval-draws", "-1"), ("--bootstrap", "-2"),
                                           ("--requests-per-user", "1"), ("--requests-per-user", "2")])
def test_bad_effort_option_exits_2_naming_it(tmp_path, capsys, option, value):
    out = tmp_path / "out"
    assert main(["validate-published", "--out", str(out), option, value]) == 2
    assert option.lstrip("-") in capsys.readouterr().err and not out.exists()


def test_a_case_replays_as_long_as_its_published_run(tmp_path):
    """`measured_requests` sets each cell's requests per user (requests / users, 2..cap), the
    loader checks it, and a case without it keeps --requests-per-user."""
    from dspark_sim.published.predict import _points, fit_config
    from dspark_sim.sweep.load_replay import replay_length, replay_requests_per_user

    case = load_case(shipped_cases()["vllm-blog-dsv4-pro-b300"])
    cfg = fit_config(case, {"requests_per_user": 4})
    points = _points(case, case.arm("none"), None)
    assert [p.requests for p in points] == [240, 880, 880, 880, 880, 880]
    assert [replay_requests_per_user(p, c, cfg) for p, c in zip(points, case.loads)] == [64, 55, 28, 14, 7, 3]
    # vllm bench serve's output_throughput covers the whole run: the replay sends the run's 880
    # requests (at most 64 per user) and is measured whole
    assert case.window == "whole-run" and {p.window for p in points} == {"whole-run"}
    assert [replay_length(p, c, cfg) for p, c in zip(points, case.loads)] == \
        [(64, 64), (55, 880), (28, 880), (14, 880), (7, 880), (4, 880)]
    paper = load_case(shipped_cases()["dspark-paper-v4-flash-fig8"])
    assert all(replay_requests_per_user(p, c, cfg) == 4
               for p, c in zip(_points(paper, paper.arm(paper.baseline), None), paper.loads))
    for edit, needle in ((lambda d: d.update(measured_requests={"values": [80, 80], "basis": "published", "how": "x"}),
                          "measured_requests.values"),
                         (lambda d: d.update(measured_requests={"value": 80.5, "basis": "published", "how": "x"}),
                          "measured_requests.values"),
                         (lambda d: d["measured_requests"].pop("basis"), "measured_requests.basis"),
                         (lambda d: d["measured_requests"].update(window="all"), "measured_requests.window")):
        with pytest.raises(InputError) as err:
            load_case(_broken(tmp_path, edit))
        assert needle in str(err.value) and err.value.line


def test_budget_informed_grid_recovers_a_known_split_and_confidence(tmp_path):
    """The paper's V4-Pro case rebuilt by the simulator from a known per-request share (20%) and
    confidence correlation (0.4): the grid finds a pair whose budgets match the published ones,
    the pair is the truth or a grid neighbour, and the gains under it are the published gains."""
    from dspark_sim.hardware.curve_family import with_prior_freed
    from dspark_sim.published.budget_fit import with_rho, with_share
    from dspark_sim.published.predict import _points, fit_config, run_case
    from dspark_sim.sweep.load_replay import simulate_load

    data = yaml.safe_load(shipped_cases()["dspark-paper-v4-pro-fig8"].read_text())
    keep = [0, 2, 3]                                   # loads 25, 100, 150
    data["loads"] = [data["loads"][i] for i in keep]
    for spec in data["arms"]:
        for key in ("throughput",):
            spec[key] = [spec[key][i] for i in keep]
        spec["budget"]["values"] = [spec["budget"]["values"][i] for i in keep]
        if "tps_user" in spec:
            spec["tps_user"]["values"] = [spec["tps_user"]["values"][i] for i in keep]
    path = tmp_path / "known.case.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    case = load_case(path)
    effort = {"requests_per_user": 3, "max_requests_per_user": 3, "rounds": 1, "bootstrap": 4, "seed": 0}
    cfg = fit_config(case, effort)
    fitted = {"floor_s": 0.0276, "weight_s": 0.0, "per_token_s": 4.95e-05, "per_context_token_s": 0.0,
              "per_request_s": 1.111e-4}
    truth = with_share(fitted, 2.0, 0.2)               # MTP-1: two tokens per user per iteration
    prof = with_prior_freed(cfg.family, truth, {}).profile(truth, "truth", gpus_per_replica=case.gpus)
    cfg.draft_costs.apply(prof)
    for spec in data["arms"]:
        arm = case.arm(spec["name"])
        acc = with_rho(arm.acceptance, 0.4 if arm.name == "dspark" else 0.0)
        sims = [simulate_load(prof, obs, users, cfg, acc=acc) for obs, users in
                zip(_points(case, arm, None), case.loads)]
        spec["throughput"] = [round(s.throughput_tok_s_per_gpu, 3) for s in sims]
        spec["budget"]["values"] = [round(s.verify_tokens, 4) for s in sims]
        spec.pop("tps_user", None)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    res = run_case(load_case(path), effort, interval_draws=0)
    [fit] = res.budget_fits
    assert fit.arm == "dspark" and fit.mismatch < 0.02
    assert abs(fit.share - 0.2) <= 0.1 + 1e-9 and abs(fit.rho - 0.4) <= 0.2 + 1e-9
    for r in res.rows:
        if not r["baseline"]:
            assert abs(r["budget_informed_gain_error"]) < 0.05, r
    assert not any("budget_informed_gain" in r for r in res.rows if r["baseline"])


def test_an_moe_interval_holds_the_per_token_reading(tmp_path):
    """An MoE baseline's growth with load is read by the `moe` family as experts touched, which
    saturates; the interval's least favourable end also takes the per-token reading (floor +
    per-token), so at the top load it reaches at least as low as the same case fitted that way."""
    from dspark_sim.published.predict import run_case

    effort = {"requests_per_user": 3, "max_requests_per_user": 3, "rounds": 1, "bootstrap": 4}
    src = shipped_cases()["amd-blog-minimax-m25-mi355x-eagle3"]
    data = yaml.safe_load(src.read_text())
    data["fit"]["family"] = "linear"
    data["fit"].pop("moe")
    linear = tmp_path / "linear.case.yaml"
    linear.write_text(yaml.safe_dump(data, sort_keys=False))
    moe_rows = [r for r in run_case(load_case(src), effort).rows if r["arm"] == "eagle3"]
    lin_rows = [r for r in run_case(load_case(linear), effort).rows if r["arm"] == "eagle3"]
    top_moe, top_lin = moe_rows[-1], lin_rows[-1]
    assert top_moe["load"] == 64
    assert top_moe["predicted_gain_low"] <= top_lin["predicted_gain_low"] + 1e-9
    assert top_moe["predicted_gain_low"] < top_moe["predicted_gain"]       # the moe point is above it


def test_ttft_warning_names_the_loads_beyond_the_factor():
    from types import SimpleNamespace

    from dspark_sim.published.predict import summary
    from dspark_sim.published.report import _ttft_warning
    from dspark_sim.sweep.ttft_check import TTFT_FACTOR

    arm = SimpleNamespace(name="none")
    rows = [{"arm": "none", "baseline": True, "published_ttft_ms": pub, "predicted_ttft_ms": sim}
            for pub, sim in [(100.0, 150.0), (100.0, 60.0)]]
    assert _ttft_warning(rows, arm).strip() == ""          # within x/÷ 2 at every load: silent
    rows.append({"arm": "none", "baseline": True, "published_ttft_ms": 4000.0, "predicted_ttft_ms": 100.0})
    text = _ttft_warning(rows, arm)
    assert "x0.025..x1.5 of the published" in text and f"1 of 3 loads beyond x/÷ {TTFT_FACTOR:g}" in text
    s = summary(rows)
    assert (s["ttft_cells"], s["ttft_beyond_factor"]) == (3, 1)
