"""The empirical acceptance format's optional per-step `drafted` counts: round trip and checks."""
import numpy as np
import pytest

from dspark_sim.errors import InputError
from dspark_sim.profiles import AcceptanceProfile
from dspark_sim.profiles.acceptance import EmpiricalRequest, TaskAcceptance, dumps_profile


def _profile(requests):
    return AcceptanceProfile(name="d", gamma=3, default_task="chat",
                             tasks={"chat": TaskAcceptance("empirical", requests=requests)})


def test_drafted_round_trip(tmp_path):
    reqs = [EmpiricalRequest(np.array([0, 2, 0, 3]), None, np.array([0, 3, 0, 3])),
            EmpiricalRequest(np.array([1, 1]))]
    path = tmp_path / "d.acceptance.json"
    _profile(reqs).save(path)
    text = path.read_text()
    assert '{"accepted":[0,2,0,3],"drafted":[0,3,0,3]}' in text
    assert '{"accepted":[1,1]}' in text                 # absent = gamma every step
    again = AcceptanceProfile.load(path)
    got = again.tasks["chat"].requests
    assert got[0].drafted.tolist() == [0, 3, 0, 3] and got[1].drafted is None
    assert again.to_dict() == _profile(reqs).to_dict()


@pytest.mark.parametrize("drafted, field", [
    ([0, 1, 0], "tasks.chat.requests[1].drafted[1]"),    # accepted 2 > drafted 1
    ([0, 3, 4], "tasks.chat.requests[1].drafted[2]"),    # above gamma
    ([0, 3], "tasks.chat.requests[1].drafted"),          # wrong length
    ([0, 3, True], "tasks.chat.requests[1].drafted"),    # not an integer
    ("3,3,3", "tasks.chat.requests[1].drafted"),
])
def test_bad_drafted_names_line_and_field(tmp_path, drafted, field):
    doc = _profile([EmpiricalRequest(np.array([1])),
                    EmpiricalRequest(np.array([0, 2, 0]))]).to_dict()
    doc["tasks"]["chat"]["requests"][1]["drafted"] = drafted
    path = tmp_path / "bad.acceptance.json"
    path.write_text(dumps_profile(doc))
    with pytest.raises(InputError) as err:
        AcceptanceProfile.load(path)
    assert err.value.field == field
    line = next(i for i, t in enumerate(path.read_text().splitlines(), 1) if '"accepted":[0,2,0]' in t)
    assert err.value.line == line and str(path) in str(err.value)
