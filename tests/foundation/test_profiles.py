"""Hardware and acceptance profiles: round trip, interpolation, and clear errors."""
import json

import numpy as np
import pytest

from dspark_sim.errors import InputError
from dspark_sim.profiles import AcceptanceProfile, HardwareProfile, load_hw_profile

HW_TABLE = """\
schema: dspark-sim/hw/v1
name: t
source: measured
step_time:
  batch_tokens: [1, 2, 4, 8]
  seconds: [0.1, 0.2, 0.3, 0.5]
  per_context_token_s: 1.0e-6
draft_time:
  dspark: {requests: [1, 8], seconds: [0.01, 0.03]}
  eagle3: {requests: [1, 8], seconds: [0.002, 0.004], per_draft: true}
max_batch_tokens: 64
notes: kept on save
"""


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_hw_interpolation_and_extrapolation(tmp_path):
    prof = HardwareProfile.load(write(tmp_path, "hw.yaml", HW_TABLE))
    assert prof.step_time(3) == pytest.approx(0.25 + 0)
    assert prof.step_time(16) == pytest.approx(0.5 + 0.05 * 8)  # last two points' slope
    assert prof.step_time(0.5) == pytest.approx(0.1)              # flat below the first point
    assert prof.step_time(2, context_tokens=1000) == pytest.approx(0.2 + 1e-3)
    assert prof.sps(4) == pytest.approx(1 / 0.3)
    np.testing.assert_allclose(prof.step_time(np.array([1, 2])), [0.1, 0.2])
    assert prof.draft_time("dspark", 0) == 0.0
    assert prof.draft_time("dspark", 8) == pytest.approx(0.03)
    assert prof.draft_time("dspark", 8, drafts=5) == pytest.approx(0.03)   # parallel drafter
    assert prof.draft_time("eagle3", 8, drafts=5) == pytest.approx(0.02)   # 5 sequential passes
    assert prof.draft_time("dflash", 8) == 0.0   # missing kind = free


def test_hw_round_trip(tmp_path):
    prof = HardwareProfile.load(write(tmp_path, "hw.yaml", HW_TABLE))
    prof.save(tmp_path / "again.yaml")
    again = HardwareProfile.load(tmp_path / "again.yaml")
    assert again.to_dict() == prof.to_dict()
    assert again.extra["notes"] == "kept on save"


def test_shipped_constant_profile():
    prof = load_hw_profile("constant-10ms")
    assert prof.step_time(1) == prof.step_time(4000) == pytest.approx(0.01)


@pytest.mark.parametrize("bad, field, line", [
    (HW_TABLE.replace("seconds: [0.1, 0.2, 0.3, 0.5]", "seconds: [0.1, 0.2, 0.3]"), "step_time.seconds", 6),
    (HW_TABLE.replace("[1, 2, 4, 8]", "[1, 4, 2, 8]"), "step_time.batch_tokens[2]", 5),
    (HW_TABLE.replace("source: measured", "source: guessed"), "source", 3),
    (HW_TABLE.replace("schema: dspark-sim/hw/v1", "schema: dspark-sim/hw/v0"), "schema", 1),
    (HW_TABLE.replace("max_batch_tokens: 64", "max_batch_tokens: -3"), "max_batch_tokens", 11),
    (HW_TABLE.replace("per_context_token_s: 1.0e-6", "per_context_token_s: -1.0"),
     "step_time.per_context_token_s", 7),
    (HW_TABLE.replace("seconds: [0.01, 0.03]", "seconds: [0.01]"), "draft_time.dspark.seconds", 9),
    (HW_TABLE.replace("per_draft: true", "per_draft: 3"), "draft_time.eagle3.per_draft", 10),
    (HW_TABLE.replace("gpus_per_replica", "x").replace("source: measured", "source: measured\ngpus_per_replica: 0"),
     "gpus_per_replica", 4),
])
def test_hw_errors_name_file_line_field(tmp_path, bad, field, line):
    path = write(tmp_path, "bad.yaml", bad)
    with pytest.raises(InputError) as err:
        HardwareProfile.load(path)
    assert err.value.field == field
    assert err.value.line == line
    assert str(path) in str(err.value)


ACC = {
    "schema": "dspark-sim/acceptance/v1", "name": "a", "drafter_kind": "dspark", "gamma": 3,
    "temperature": 0.0, "default_task": "chat",
    "tasks": {
        "math": {"kind": "parametric", "position_accept": [0.9, 0.8, 0.7]},
        "chat": {"kind": "empirical", "requests": [
            {"accepted": [3, 0, 1], "confidence": [[0.9, 0.8, 0.7], [0.2, 0.5, 0.5], [0.9, 0.1, 0.5]]},
            {"accepted": [2]},
        ]},
    },
}


def test_acceptance_round_trip_and_stats(tmp_path):
    path = tmp_path / "a.acceptance.json"
    path.write_text(json.dumps(ACC))
    prof = AcceptanceProfile.load(path)
    prof.save(tmp_path / "b.acceptance.json")
    again = AcceptanceProfile.load(tmp_path / "b.acceptance.json")
    assert again.to_dict() == prof.to_dict()
    assert prof.for_task("code") is prof.tasks["chat"]          # default task
    assert prof.tasks["math"].mean_tau(3) == pytest.approx(1 + 0.9 + 0.72 + 0.504)
    # runs 3,0,1,2: reach pos1: 4, pass 3; reach pos2: 3, pass 2; reach pos3: 2, pass 1
    np.testing.assert_allclose(prof.tasks["chat"].conditional_accept(3), [3 / 4, 2 / 3, 1 / 2])


@pytest.mark.parametrize("mutate, field", [
    (lambda d: d["tasks"]["math"].update(position_accept=[0.9, 0.8]), "tasks.math.position_accept"),
    (lambda d: d["tasks"]["chat"]["requests"][1].update(accepted=[4]), "tasks.chat.requests[1].accepted"),
    (lambda d: d["tasks"]["chat"]["requests"][0].update(confidence=[[0.5, 0.5]]),
     "tasks.chat.requests[0].confidence"),
    (lambda d: d.update(default_task="code"), "default_task"),
    (lambda d: d.update(gamma=0), "gamma"),
])
def test_acceptance_errors(tmp_path, mutate, field):
    doc = json.loads(json.dumps(ACC))
    mutate(doc)
    path = tmp_path / "bad.acceptance.json"
    path.write_text(json.dumps(doc, indent=2))
    with pytest.raises(InputError) as err:
        AcceptanceProfile.load(path)
    assert err.value.field == field
    assert err.value.line is not None
