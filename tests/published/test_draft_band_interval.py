"""validate-published's gain interval spans the draft pricing band (hardware/draft_cost.py
SHAPE_PRICING_BAND) where the baseline arm cannot see the drafter's cost."""
from known_case import EFFORT, known_case


def test_the_interval_spans_the_draft_pricing_band_and_the_point_stays(tmp_path):
    """Drafting priced by layer share, never seen by the baseline arm: the interval's least
    favourable end takes the band's dearer drafting, its most favourable end the cheaper, and the
    point prediction is the one without the band."""
    from dspark_sim.published.predict import run_case

    _, case, _ = known_case(tmp_path)
    with_band = run_case(case, EFFORT, with_one_cell=False).rows
    without = run_case(case, {**EFFORT, "draft_band": 1.0}, with_one_cell=False).rows
    wider = 0
    for a, b in zip(with_band, without):
        assert (a["arm"], a["load"]) == (b["arm"], b["load"])
        assert a["predicted_tok_s_per_gpu"] == b["predicted_tok_s_per_gpu"]
        if a["baseline"]:
            continue
        assert a["predicted_gain_low"] <= b["predicted_gain_low"] + 1e-9
        assert a["predicted_gain_high"] >= b["predicted_gain_high"] - 1e-9
        wider += a["predicted_gain_low"] < b["predicted_gain_low"] - 1e-3
    assert wider == sum(not r["baseline"] for r in with_band)
