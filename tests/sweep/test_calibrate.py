"""`profile fit`: parameters recovered from simulated observations, refusals, bad files, the CLI."""
import json

import numpy as np
import pytest

from dspark_sim.cli import main
from dspark_sim.errors import InputError
from dspark_sim.hardware.curve_family import CurveFamily, load_family
from dspark_sim.hardware.observations import LoadPoint, StepPoint, read_observations
from dspark_sim.profiles import HardwareProfile
from dspark_sim.sweep.calibrate import Calibration
from dspark_sim.sweep.load_replay import FitConfig, simulate_load

TRUE = {"floor_s": 0.012, "per_token_s": 2.0e-5, "per_context_token_s": 3.0e-9}


def observed(points, family, params, seed=1, rpu=8, **cfg):
    """Load points as the simulator gives them under `params` (another seed than the fit's;
    `cfg`: more FitConfig fields, e.g. the draft costs)."""
    cfg = FitConfig(family, requests_per_user=rpu, seed=seed, **cfg)
    prof = Calibration(points, cfg).profile(params)
    out = []
    for p in points:
        s = simulate_load(prof, p, p.concurrency, cfg)
        out.append(LoadPoint(p.policy, s.throughput_tok_s_per_gpu, s.tps_user, acceptance=p.acceptance,
                             concurrency=p.concurrency, prompt_tokens=p.prompt_tokens,
                             output_tokens=p.output_tokens, label=f"{p.concurrency}x{p.prompt_tokens:g}"))
    return out


def test_known_curve_recovered_within_2_percent_per_parameter():
    fam = CurveFamily("linear")
    grid = [LoadPoint("mtp1", 1.0, 1.0, acceptance="paper-mtp1", concurrency=c, prompt_tokens=L,
                      output_tokens=200) for c in (4, 16, 64, 256) for L in (300.0, 6000.0)]
    obs = observed(grid, fam, TRUE)
    result = Calibration(obs, FitConfig(fam, bootstrap=40)).fit()
    for name, value in TRUE.items():
        assert result.params[name] == pytest.approx(value, rel=0.02), name
    assert result.bootstrap_method == "bootstrap over observations" and result.bootstrap_kept > 20
    for row in result.residuals():
        assert abs(row["throughput_rel_error"]) < 0.02 and abs(row["tps_rel_error"]) < 0.02
    # the spread is real: a fit to other observations differs, and the bootstrap sees it
    assert 0 < result.uncertainty["floor_s"]["std"] < 0.1 * TRUE["floor_s"]


def test_bucket_family_recovered_from_step_points():
    fam = load_family("buckets", {"per_context_token_s": 0.0}, 1024)
    params = {"floor_s": 0.004, "per_token_s": 1.5e-5}
    steps = [StepPoint(b, 0.0, float(fam.step_time(params, b))) for b in (1, 3, 9, 30, 100, 300, 700)]
    result = Calibration(steps, FitConfig(fam, bootstrap=0)).fit()
    for name, value in params.items():
        assert result.params[name] == pytest.approx(value, rel=1e-6)
    prof = result.profile
    # padding: 9 batch tokens run as the 16-token CUDA graph; beyond 512 eagerly
    assert prof.step_time(9) == pytest.approx(0.004 + 1.5e-5 * 16)
    assert prof.step_time(700) == pytest.approx(0.004 + 1.5e-5 * 700)
    HardwareProfile.from_dict(prof.to_dict())


@pytest.mark.parametrize("points, needle", [
    ([LoadPoint("mtp1", 5000.0, 80.0, acceptance="paper-mtp1")], "one observation"),
    ([LoadPoint("mtp1", 5000.0, 80.0, acceptance="paper-mtp1", concurrency=64),
      LoadPoint("mtp1", 5100.0, 81.0, acceptance="paper-mtp1", concurrency=64)], "same load"),
    ([LoadPoint("mtp1", 1000.0, 120.0, acceptance="paper-mtp1"),
      LoadPoint("mtp1", 9000.0, 90.0, acceptance="paper-mtp1")], "distinct loads"),
])
def test_refuses_what_the_data_cannot_identify(points, needle):
    with pytest.raises(InputError) as err:
        Calibration(points, FitConfig(CurveFamily("linear"))).fit()
    assert needle in err.value.message


def test_refuses_trading_parameters_and_names_them():
    # one context length: per-token and per-context-token terms move together at every point
    fam = CurveFamily("linear", fixed={"floor_s": 0.01})
    grid = [LoadPoint("mtp1", 1.0, 1.0, acceptance="paper-mtp1", concurrency=c, prompt_tokens=1000,
                      output_tokens=200) for c in (8, 64, 256)]
    obs = observed(grid, fam, TRUE)
    with pytest.raises(InputError) as err:
        Calibration(obs, FitConfig(fam, bootstrap=0)).fit()
    assert "per_token_s" in err.value.message and "per_context_token_s" in err.value.message
    assert "--fix" in err.value.message


def _vllm_json(path, concurrency, sim, prompt, output, completed=40):
    doc = {"backend": "vllm", "model_id": "m", "num_prompts": completed, "request_rate": "inf",
           "max_concurrency": concurrency, "duration": 10.0, "completed": completed,
           "total_input_tokens": prompt * completed, "total_output_tokens": output * completed,
           "output_throughput": sim.throughput_tok_s_per_gpu, "median_tpot_ms": 1000.0 / sim.tps_user,
           "mean_tpot_ms": 1000.0 / sim.tps_user, "median_ttft_ms": 50.0, "mean_ttft_ms": 55.0,
           "p99_ttft_ms": 90.0}
    path.write_text(json.dumps(doc, indent=1))
    return path


def test_cli_fits_vllm_result_files_and_writes_a_loadable_profile(tmp_path, capsys):
    fam = CurveFamily("linear", fixed={"per_context_token_s": 0.0})
    params = {"floor_s": 0.008, "per_token_s": 4.0e-5}
    cfg = FitConfig(fam, requests_per_user=8, seed=3)
    prof = fam.profile(params, "true")
    files = []
    for c in (2, 8, 32):
        p = LoadPoint("ar", 1.0, 1.0, concurrency=c, prompt_tokens=500, output_tokens=120,
                      tps_stat="p50", prefill="local", requests=40,     # replayed as long as the run
                      window="whole-run")            # output_throughput: total output / duration
        files.append(str(_vllm_json(tmp_path / f"c{c}.json", c, simulate_load(prof, p, c, cfg), 500, 120)))
    out = tmp_path / "fit.yaml"
    rc = main(["profile", "fit", *files, "--out", str(out), "--fix", "per_context_token_s=0",
               "--bootstrap", "20", "--frontier-points", "3"])
    assert rc == 0
    fitted = HardwareProfile.load(out)
    assert fitted.source == "fitted"
    fit = fitted.extra["fit"]
    assert [p.requests for p in read_observations(files)] == [40, 40, 40]   # `completed`
    assert {p.window for p in read_observations(files)} == {"whole-run"}
    for name, value in params.items():
        assert fit["parameters"][name] == pytest.approx(value, rel=0.05), name
    assert fit["max_abs_rel_error"] < 0.03
    assert (tmp_path / "fit.png").exists() and (tmp_path / "fit.fit.md").exists()
    assert "| 8 (whole run of 40 requests) |" in (tmp_path / "fit.fit.md").read_text()
    assert {r["window"] for r in fit["residuals"] if r["kind"] == "load"} == {"whole-run"}
    assert main(["profiles", "check", str(out)]) == 0
    assert "profile fit report" in capsys.readouterr().out
    # the result files' first tokens (50 ms) beside the replay's: reported, and called out only
    # where they differ by more than x/÷ 2 (ttft_check.TTFT_FACTOR)
    report = (tmp_path / "fit.fit.md").read_text()
    assert "TTFT (not fitted)" in report and "50 ms observed" in report
    sims = [r["simulated_ttft_s"] for r in fit["residuals"] if r["kind"] == "load"]
    assert ("loads beyond x/÷ 2" in report) == any(not 0.025 <= s <= 0.1 for s in sims)


@pytest.mark.parametrize("name, text, where, field", [
    ("bad.csv", "policy,acceptance,throughput_tok_s_per_gpu,tps_user,concurrency\n"
                "mtp1,paper-mtp1,5000,80,64\nmtp1,paper-mtp1,lots,90,32\n", ":3", "throughput_tok_s_per_gpu"),
    ("bad.csv", "policy,throughput_tok_s_per_gpu,tps_user\nmedusa,5000,80\n", ":2", "policy"),
    ("bad.yaml", "schema: dspark-sim/observations/v1\npoints:\n  - {policy: mtp1, acceptance: paper-mtp1,"
                 " tps_user: 80, throughput_tok_s_per_gpu: 10000}\n  - {policy: mtp1, tps_user: 90,"
                 " throughput_tok_s_per_gpu: 900}\n", ":4", "points[1].acceptance"),
    ("bad.csv", "policy,throughput_tok_s_per_gpu,tps_user,concurrency,requests\nar,5000,80,8,12.5\n", ":2",
     "requests"),
    ("bad.csv", "policy,throughput_tok_s_per_gpu,tps_user,concurrency,requests,window\nar,5000,80,8,12,all\n",
     ":2", "window"),
    ("bad.csv", "policy,throughput_tok_s_per_gpu,tps_user,concurrency,window\nar,5000,80,8,whole-run\n",
     ":2", "window"),
    ("bad.json", json.dumps({"completed": 10, "output_throughput": 100.0, "total_input_tokens": 10,
                             "total_output_tokens": 100, "max_concurrency": 4}), "", "median_tpot_ms"),
])
def test_bad_observation_files_exit_2_naming_file_line_field_and_write_nothing(
        tmp_path, capsys, name, text, where, field):
    path = tmp_path / name
    path.write_text(text)
    out = tmp_path / "out.yaml"
    rc = main(["profile", "fit", str(path), "--out", str(out)])
    err = capsys.readouterr().err
    assert rc == 2
    assert f"{path}{where}" in err and f"field '{field}'" in err
    assert "Traceback" not in err
    assert list(tmp_path.iterdir()) == [path]


def test_observation_readers_agree():
    pts = read_observations(["hw_profiles/observations/v4-flash-mtp1.yaml"])
    assert [p.tps_user for p in pts] == [80.0, 120.0]
    assert pts[0].users(8) == 1070 and pts[1].users(8) == 100
    assert pts[0].where.endswith("v4-flash-mtp1.yaml:16")
    assert np.isclose(pts[0].throughput_tok_s_per_gpu, 10700.0)


def test_shipped_paper_fit_reproduces_the_paper_mtp1_points():
    from dspark_sim.profiles import load_hw_profile

    prof = load_hw_profile("v4-flash-like-mtp1-fit")
    assert prof.source == "fitted" and prof.gpus_per_replica == 8
    cfg = FitConfig(CurveFamily("linear"), requests_per_user=prof.extra["fit"]["simulation"]["requests_per_user"])
    for obs in read_observations(["hw_profiles/observations/v4-flash-mtp1.yaml"]):
        sim = simulate_load(prof, obs, obs.users(8), cfg)
        assert sim.throughput_tok_s_per_gpu == pytest.approx(obs.throughput_tok_s_per_gpu, rel=0.02)
        assert sim.tps_user == pytest.approx(obs.tps_user, rel=0.02)


def test_a_whole_run_point_replays_its_run_and_measures_it_whole():
    """`window: whole-run` (a benchmark client's figure): the loop sends exactly `requests`
    requests (the first requests mod users users one more) and the throughput is every output
    token over first send to last finish, so the part-filled last wave lowers it; a steady
    point of the same run is measured over its steady window (warm-up and drain left out)."""
    from dspark_sim.sweep.load_replay import replay_length

    fam = CurveFamily("linear", fixed={"per_context_token_s": 0.0})
    prof = fam.profile({"floor_s": 0.01, "per_token_s": 1e-3}, "true")
    cfg = FitConfig(fam, requests_per_user=3, max_requests_per_user=64, seed=0)
    whole = LoadPoint("ar", 1.0, 1.0, concurrency=8, prompt_tokens=20, output_tokens=50,
                      prefill="local", requests=20, window="whole-run")
    steady = LoadPoint("ar", 1.0, 1.0, concurrency=8, prompt_tokens=20, output_tokens=50,
                       prefill="local", requests=20)
    assert replay_length(whole, 8, cfg) == (3, 20)
    assert replay_length(steady, 8, cfg) == (3, None)          # round(20 / 8), floor 3
    assert replay_length(whole, 8, FitConfig(fam, max_requests_per_user=2)) == (2, 16)
    w, s = simulate_load(prof, whole, 8, cfg), simulate_load(prof, steady, 8, cfg)
    # 20 requests at 8 users: waves of 8, 8 and 4 identical requests in lock step; a wave of n
    # takes one prefill iteration (n x 20 tokens) and 49 decode iterations (n tokens)
    wave = lambda n: 0.01 + 1e-3 * n * 20 + 49 * (0.01 + 1e-3 * n)  # noqa: E731
    assert w.throughput_tok_s_per_gpu == pytest.approx(20 * 50 / (2 * wave(8) + wave(4)), rel=1e-6)
    assert s.throughput_tok_s_per_gpu == pytest.approx(8 * 50 / wave(8), rel=1e-6)


def test_ttft_check_calls_out_first_tokens_beyond_the_factor():
    from dspark_sim.sweep.ttft_check import TTFT_FACTOR, beyond, warning

    assert not beyond(1.0, TTFT_FACTOR) and not beyond(1.0, 1 / TTFT_FACTOR)
    assert beyond(1.0, TTFT_FACTOR * 1.01) and beyond(1.0, 0.49)
    assert warning([(0.2, 0.3), (0.2, 0.15)]) == ""
    text = warning([(0.2, 0.3), (4.0, 0.1), (0.0, 0.1)], "published")   # a zero is not a measurement
    assert "x0.025..x1.5 of the published (1 of 2 loads beyond" in text
