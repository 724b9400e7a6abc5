"""Trace JSONL loading: valid files load, every violation names FILE:LINE and the field."""
import pytest
from tests.strict_json import register_input

from dspark_sim.errors import InputError
from dspark_sim.traces import load_trace, write_trace

GOOD = """{"id": "a", "arrival_s": 0.0, "prompt_tokens": 10, "output_tokens": 5, "task": "math"}

{"arrival_s": 0.5, "prompt_tokens": 3, "output_tokens": 1, "extra": "kept"}
"""


def test_load_and_write_round_trip(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text(GOOD)
    trace = load_trace(path)
    assert list(trace.ids) == ["a", "3"]          # default id = line number
    assert list(trace.task) == ["math", "default"]
    write_trace(tmp_path / "u.jsonl", trace)
    again = load_trace(tmp_path / "u.jsonl")
    assert again.to_frame().equals(trace.to_frame())


@pytest.mark.parametrize("line2, field", [
    ('{"arrival_s": -1, "prompt_tokens": 3, "output_tokens": 1}', "arrival_s"),
    ('{"arrival_s": "x", "prompt_tokens": 3, "output_tokens": 1}', "arrival_s"),
    ('{"prompt_tokens": 3, "output_tokens": 1}', "arrival_s"),
    ('{"arrival_s": 1, "prompt_tokens": 0, "output_tokens": 1}', "prompt_tokens"),
    ('{"arrival_s": 1, "prompt_tokens": 2.5, "output_tokens": 1}', "prompt_tokens"),
    ('{"arrival_s": 1, "prompt_tokens": 2}', "output_tokens"),
    ('{"id": "a", "arrival_s": 1, "prompt_tokens": 2, "output_tokens": 1}', "id"),
    ('{"arrival_s": 1, "prompt_tokens": 2, "output_tokens": 1, "task": 7}', "task"),
    ('{"arrival_s": 1, "prompt_tokens": 2,', None),
])
def test_bad_lines(tmp_path, line2, field):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"id": "a", "arrival_s": 0.5, "prompt_tokens": 10, "output_tokens": 5}\n' + line2 + "\n")
    register_input(path)
    with pytest.raises(InputError) as err:
        load_trace(path)
    assert err.value.line == 2 and err.value.field == field
    assert str(err.value).startswith(f"{path}:2: ")


def test_non_decreasing_arrivals(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"arrival_s": 2, "prompt_tokens": 1, "output_tokens": 1}\n'
                    '{"arrival_s": 1, "prompt_tokens": 1, "output_tokens": 1}\n')
    with pytest.raises(InputError, match="non-decreasing"):
        load_trace(path)
