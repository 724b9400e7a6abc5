"""A profile at another speed of the same machine (profiles/speed_scale.py), and the speed check
that measures that speed on a vLLM server (vllm/speed_check.py): factors recovered from timings
of a known slowdown, the file's round trip and its errors."""
import json

import numpy as np
import pytest

from dspark_sim.errors import InputError
from dspark_sim.hardware.profiler import Timing
from dspark_sim.profiles import HardwareProfile
from dspark_sim.profiles.cudagraph import CudaGraph
from dspark_sim.profiles.speed_scale import speed_scaled
from dspark_sim.vllm.speed_check import SpeedCheck
from dspark_sim.vllm.validate import speed_checks_of

HW = """\
schema: dspark-sim/hw/v1
name: t
source: measured
step_time:
  batch_tokens: [1, 8, 64, 512]
  seconds: [0.05, 0.07, 0.2, 0.9]
  per_context_token_s: 1.0e-5
  per_request_s: 2.0e-4
draft_time:
  ngram: {requests: [1, 8], seconds: [0.004, 0.007]}
  eagle3: {requests: [1, 8], seconds: [0.002, 0.004], per_draft: true}
"""
B = np.array([1, 4, 8, 300, 512, 700])
CTX = np.array([140, 560, 1100, 0, 2000, 4000])
P = np.array([0, 0, 0, 256, 500, 512])
R = np.array([1, 4, 8, 1, 3, 12])


@pytest.fixture
def hw(tmp_path):
    path = tmp_path / "hw.yaml"
    path.write_text(HW)
    return HardwareProfile.load(path)


def test_unit_factors_price_every_iteration_as_before(hw):
    same = speed_scaled(hw, 1.0, 1.0)
    np.testing.assert_array_equal(same.step_time(B, CTX, P, R), hw.step_time(B, CTX, P, R))
    np.testing.assert_array_equal(same.draft_time("eagle3", R, 3), hw.draft_time("eagle3", R, 3))
    assert same.prefill_curve is None and same.to_dict() == hw.to_dict()


def test_decode_and_prefill_scale_apart(hw):
    fast_prefill = speed_scaled(hw, 1.1, 0.9)
    decode = P == 0
    np.testing.assert_allclose(fast_prefill.step_time(B[decode], CTX[decode], 0, R[decode]),
                               1.1 * hw.step_time(B[decode], CTX[decode], 0, R[decode]))
    # a prefill-only iteration: the chunk at the prefill factor, its context and request terms
    # (priced as decode-side work) at the decode factor
    chunk = float(hw.table_time(256))
    assert fast_prefill.step_time(256, 0, 256, 1) == pytest.approx(0.9 * chunk + 1.1 * 2e-4)
    # decode tokens beside a chunk at the decode factor
    mixed = float(hw.table_time(300)) - chunk
    assert fast_prefill.step_time(300, 0, 256, 1) == pytest.approx(0.9 * chunk + 1.1 * (mixed + 2e-4))
    assert fast_prefill.draft_time("ngram", 8) == pytest.approx(1.1 * 0.007)
    assert fast_prefill.draft_time("eagle3", 1, 4) == pytest.approx(1.1 * 4 * 0.002)
    # one factor for both: every iteration's price times it
    np.testing.assert_allclose(speed_scaled(hw, 1.25).step_time(B, CTX, P, R),
                               1.25 * hw.step_time(B, CTX, P, R))


def test_a_given_prefill_curve_and_the_eager_term_are_scaled(hw):
    from dataclasses import replace

    from dspark_sim.profiles.curve import Curve

    with_terms = replace(hw, prefill_curve=Curve.of([16, 512], [0.06, 0.8]),
                         cudagraph=CudaGraph(64, floor_s=0.01, per_token_s=1e-5))
    s = speed_scaled(with_terms, 1.2, 0.8)
    assert s.prefill_curve(512) == pytest.approx(0.8 * 0.8)
    assert s.cudagraph.eager_seconds(100) == pytest.approx(1.2 * (0.01 + 1e-3))
    assert s.cudagraph.eager_seconds(64) == 0.0
    with pytest.raises(ValueError, match="> 0"):
        speed_scaled(hw, 0.0)


def _timings_at(hw, decode, prefill, drafter=None):
    """What a server `decode` / `prefill` times slower than the profile would time."""
    out = []
    for r, tokens in ((1, 1), (4, 4), (4, 9), (8, 8)):
        price = float(hw.step_time(tokens, r * 140, 0, r)) + (float(hw.draft_time(drafter, r, 1)) if drafter else 0.0)
        out.append(Timing("decode", r, 1, 140, [decode * price * j for j in (0.99, 1.0, 1.01)], tokens=tokens))
    for length in (256, 512):
        out.append(Timing("prefill", 1, length, 0, [prefill * float(hw.step_time(length, 0, length, 1))] * 2))
    return out


def test_the_speed_check_recovers_a_known_slowdown_and_scaling_by_it_prices_the_check_exactly(hw):
    check = SpeedCheck(_timings_at(hw, 1.07, 0.95, "ngram"), "ngram")
    decode, prefill = check.factors(hw)
    assert decode == pytest.approx(1.07) and prefill == pytest.approx(0.95)
    scaled = speed_scaled(hw, decode, prefill)
    ratios = check.ratios(scaled)
    assert np.median(ratios["decode"]) == pytest.approx(1.0)
    # a prefill iteration's request term is decode-side work, scaled by the decode factor
    assert np.median(ratios["prefill"]) == pytest.approx(1.0, rel=1e-3)
    # the proposer runs in every timed iteration: priced without it, the server looks slower
    assert SpeedCheck(check.timings, None).factors(hw)[0] > 1.07


def test_a_speed_check_file_round_trips_and_its_errors_name_the_field(hw, tmp_path):
    check = SpeedCheck(_timings_at(hw, 1.03, 1.1), None)
    path = tmp_path / "speed-check.json"
    check.save(path)
    again = SpeedCheck.load(path)
    assert again.factors(hw) == check.factors(hw) and again.drafter is None
    doc = json.loads(path.read_text())
    doc["points"][2]["samples_s"] = [0.1, -1]
    path.write_text(json.dumps(doc, indent=2))
    with pytest.raises(InputError) as err:
        SpeedCheck.load(path)
    assert "points[2].samples_s[1]" in str(err.value) and str(path) in str(err.value)


def test_runs_without_a_speed_check_say_how_to_simulate_them(tmp_path):
    (tmp_path / "engine" / "ar" / "run-0").mkdir(parents=True)
    with pytest.raises(InputError) as err:
        speed_checks_of(tmp_path, ["ar"], 2)
    assert "--no-speed-check" in str(err.value) and "run-0" in str(err.value)
