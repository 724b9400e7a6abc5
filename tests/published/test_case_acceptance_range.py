"""A published case's acceptance bounds: sourced, checked by the loader, spanned by the gain
interval (published/case_acceptance.py; issue 41)."""
import pytest
import yaml

from dspark_sim.errors import InputError
from dspark_sim.published.case_acceptance import tokens_per_verify
from dspark_sim.published.cases import load_case, shipped_cases

EFFORT = {"requests_per_user": 3, "rounds": 1, "bootstrap": 6, "seed": 0}


def _v4_flash(tmp_path, edit=None, loads=None):
    data = yaml.safe_load(shipped_cases()["dspark-paper-v4-flash-fig8"].read_text())
    if loads is not None:                              # fewer loads: a faster case
        keep = [data["loads"].index(c) for c in loads]
        data["loads"] = loads
        for arm in data["arms"]:
            arm["throughput"] = [arm["throughput"][i] for i in keep]
            for key in ("tps_user", "budget"):
                if key in arm:
                    arm[key]["values"] = [arm[key]["values"][i] for i in keep]
    if edit:
        edit(data)
    path = tmp_path / "v4.case.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_shipped_v4_cases_carry_sourced_acceptance_bounds():
    for name in ("dspark-paper-v4-flash-fig8", "dspark-paper-v4-pro-fig8"):
        arm = load_case(shipped_cases()[name]).arm("dspark")
        rng = arm.acceptance_range
        assert tokens_per_verify(arm.acceptance) == pytest.approx(3.74, abs=1e-6)
        assert tokens_per_verify(rng.low) == pytest.approx(2.737, abs=1e-6)
        assert tokens_per_verify(rng.high) == pytest.approx(4.74, abs=1e-6)
        assert "InferenceX" in rng.bound_notes["high"]["source"] and rng.bound_notes["low"]["basis"] == "published"


@pytest.mark.parametrize("edit, field", [
    (lambda d: d["arms"][1]["acceptance"]["range"]["low"].update(accept_length=4.0), "dspark.acceptance.range.low"),
    (lambda d: d["arms"][1]["acceptance"]["range"]["high"].update(accept_length=3.0), "dspark.acceptance.range.high"),
    (lambda d: d["arms"][1]["acceptance"]["range"]["high"].pop("source"), "dspark.acceptance.range.high.source"),
    (lambda d: d["arms"][1]["acceptance"]["range"].pop("low"), "dspark.acceptance.range.low"),
    (lambda d: d["arms"][1]["acceptance"]["range"]["low"].update(position_accept=[0.5] * 5),
     "dspark.acceptance.range.low"),                                  # two forms at once
])
def test_a_bad_bound_names_file_line_and_field(tmp_path, edit, field):
    with pytest.raises(InputError) as err:
        load_case(_v4_flash(tmp_path, edit))
    named = err.value.field == field or f"'{field}'" in err.value.message     # missing: the parent
    assert named and err.value.line, (err.value.field, err.value.message)


def test_the_gain_interval_spans_the_acceptance_bounds(tmp_path):
    """The same case with and without its acceptance range: the point predictions agree, and the
    interval with the bounds holds the one without and is wider on both sides."""
    from dspark_sim.published.predict import run_case

    with_range = run_case(load_case(_v4_flash(tmp_path, loads=[25, 200])), EFFORT, interval_draws=2)
    no_range = run_case(load_case(_v4_flash(tmp_path, lambda d: d["arms"][1]["acceptance"].pop("range"),
                                            loads=[25, 200])), EFFORT, interval_draws=2)
    pairs = [(a, b) for a, b in zip(with_range.rows, no_range.rows) if not a["baseline"]]
    assert len(pairs) == 2
    for a, b in pairs:
        assert a["predicted_gain"] == pytest.approx(b["predicted_gain"])
        assert a["predicted_gain_low"] < b["predicted_gain_low"] - 0.05
        assert a["predicted_gain_high"] > b["predicted_gain_high"] + 0.05


def test_vllm_blog_case_carries_the_posts_own_numbers():
    """The figure-read throughputs reproduce what the post's text states."""
    case = load_case(shipped_cases()["vllm-blog-dsv4-pro-b300"])
    none, k5, k7, ada = (case.arm(n).throughput for n in ("none", "fixed-k5", "fixed-k7", "adaptive"))
    assert (ada[-1], none[-1], k7[0], ada[0]) == (8855, 6267, 264, 264)
    assert k5[-1] / none[-1] == pytest.approx(1 - 0.26, abs=0.005)        # "k=5 ... by 26%"
    assert k7[-1] / none[-1] == pytest.approx(1 - 0.53, abs=0.005)        # "k=7 by 53%"
    assert k7[-1] / max(k7) == pytest.approx(1 - 0.38, abs=0.005)         # "shedding 38% of its peak"
    assert case.cudagraph.max_capture_size == 1024 and case.gpus == 8


def test_an_arm_may_give_its_confidence_correlation(tmp_path):
    """`acceptance.confidence_correlation` reaches the point and both bounds' profiles, with
    its provenance in the note; a value outside [0, 1) names the field."""
    import yaml

    from dspark_sim.errors import InputError

    src = shipped_cases()["dspark-paper-v4-flash-fig8"]
    data = yaml.safe_load(src.read_text())
    arm = next(a for a in data["arms"] if a["policy"] == "dspark-lagged")
    arm["acceptance"]["confidence_correlation"] = {"value": 0.45, "basis": "assumed", "how": "a test"}
    path = tmp_path / "rho.case.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    case = load_case(path)
    got = case.arm(arm["name"])
    profiles = [got.acceptance] + [p for p in (got.acceptance_range.low, got.acceptance_range.high) if p]
    assert len(profiles) == 3
    assert all(p.tasks["default"].confidence_correlation == 0.45 for p in profiles)
    assert "confidence correlation 0.45 (assumed: a test)" in got.acceptance_note["confidence"]
    assert case.arm(case.baseline).acceptance is None or \
        case.arm(case.baseline).acceptance.tasks["default"].confidence_correlation == 0.0
    arm["acceptance"]["confidence_correlation"]["value"] = 1.0
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(InputError) as err:
        load_case(path)
    assert "confidence_correlation.value" in str(err.value) and err.value.line
