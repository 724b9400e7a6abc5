"""The hardware-profile extensions validation asked for: a block drafter's draft time by the
drafts made (`drafts` + `per_draft_seconds`) and a prefill curve separate from decode
(`prefill_time`): values, round trip, and errors naming file, line and field."""
import numpy as np
import pytest

from dspark_sim.errors import InputError
from dspark_sim.profiles import HardwareProfile

HW = """\
schema: dspark-sim/hw/v1
name: t
source: measured
step_time:
  batch_tokens: [1, 2, 4, 8, 64]
  seconds: [0.05, 0.06, 0.08, 0.1, 0.4]
prefill_time:
  prefill_tokens: [16, 128]
  seconds: [0.05, 0.37]
draft_time:
  dspark:
    requests: [1, 8]
    seconds: [0.012, 0.09]
    drafts: 7
    per_draft_seconds: [0.001, 0.005]
  eagle3: {requests: [1, 8], seconds: [0.002, 0.004], per_draft: true}
"""


def load(tmp_path, text):
    path = tmp_path / "hw.yaml"
    path.write_text(text)
    return HardwareProfile.load(path)


def test_block_drafter_cost_follows_the_drafts_made(tmp_path):
    prof = load(tmp_path, HW)
    assert prof.draft_time("dspark", 1, 7) == pytest.approx(0.012)          # as measured
    assert prof.draft_time("dspark", 1, 3) == pytest.approx(0.012 - 4 * 0.001)
    assert prof.draft_time("dspark", 8, 1) == pytest.approx(0.09 - 6 * 0.005)
    np.testing.assert_allclose(prof.draft_time("dspark", np.array([1, 8]), np.array([2, 7])),
                               [0.012 - 5 * 0.001, 0.09])
    assert prof.draft_time("dspark", 0, 3) == 0.0
    assert prof.draft_time("eagle3", 8, 5) == pytest.approx(0.02)           # unchanged


def test_prefill_tokens_priced_on_the_prefill_curve(tmp_path):
    prof = load(tmp_path, HW)
    assert prof.step_time(128, prefill_tokens=128) == pytest.approx(0.37)    # a pure prefill
    assert prof.step_time(8) == pytest.approx(0.1)                           # pure decode
    # 8 decode tokens on top of a 120-token chunk: decode curve's increment + the chunk's cost
    t = prof.step_time(128, prefill_tokens=120)
    chunk = 0.05 + (0.37 - 0.05) * (120 - 16) / 112
    assert t == pytest.approx(prof.step_time(128) - prof.step_time(120) + chunk)
    np.testing.assert_allclose(prof.step_time(np.array([8, 128]), 0.0, np.array([0, 128])), [0.1, 0.37])
    assert prof.prefill_adjustment(0) == 0.0


def test_round_trip_and_old_profiles_unchanged(tmp_path):
    prof = load(tmp_path, HW)
    prof.save(tmp_path / "again.yaml")
    again = HardwareProfile.load(tmp_path / "again.yaml")
    assert again.to_dict() == prof.to_dict()
    assert again.draft_slopes["dspark"].drafts == 7 and again.prefill_curve is not None
    old = load(tmp_path, HW.split("prefill_time:")[0] + "draft_time:" + HW.split("draft_time:")[1]
               .replace("    drafts: 7\n    per_draft_seconds: [0.001, 0.005]\n", ""))
    assert old.prefill_curve is None and old.draft_slopes == {}
    assert "prefill_time" not in old.to_dict() and "per_draft_seconds" not in str(old.to_dict())
    assert old.draft_time("dspark", 1, 3) == old.draft_time("dspark", 1, 7) == pytest.approx(0.012)
    assert old.step_time(128, prefill_tokens=120) == old.step_time(128)


@pytest.mark.parametrize("old, new, field, line", [
    ("per_draft_seconds: [0.001, 0.005]", "per_draft_seconds: [0.001]", "draft_time.dspark.per_draft_seconds", 15),
    ("per_draft_seconds: [0.001, 0.005]", "per_draft_seconds: [0.001, 0.02]",
     "draft_time.dspark.per_draft_seconds[1]", 15),
    ("per_draft_seconds: [0.001, 0.005]", "per_draft_seconds: [-0.001, 0.005]",
     "draft_time.dspark.per_draft_seconds[0]", 15),
    ("    drafts: 7\n", "", "draft_time.dspark", 11),
    ("    drafts: 7\n", "    drafts: 0\n", "draft_time.dspark.drafts", 14),
    ("seconds: [0.002, 0.004], per_draft: true}", "seconds: [0.002, 0.004], per_draft: true, drafts: 2, "
     "per_draft_seconds: [0.0, 0.0]}", "draft_time.eagle3.per_draft_seconds", 16),
    ("  seconds: [0.05, 0.37]", "  seconds: [0.05, 0.0]", "prefill_time.seconds[1]", 9),
    ("  prefill_tokens: [16, 128]", "  prefill_tokens: [128, 16]", "prefill_time.prefill_tokens[1]", 8),
    ("prefill_time:\n  prefill_tokens: [16, 128]\n  seconds: [0.05, 0.37]", "prefill_time: 3",
     "prefill_time", 7),
])
def test_bad_extensions_name_file_line_field(tmp_path, old, new, field, line):
    assert old in HW
    path = tmp_path / "bad.yaml"
    path.write_text(HW.replace(old, new))
    with pytest.raises(InputError) as err:
        HardwareProfile.load(path)
    assert (err.value.field, err.value.line) == (field, line)
    assert str(path) in str(err.value)
