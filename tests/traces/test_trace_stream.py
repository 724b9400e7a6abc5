"""Traces read lazily in chunks: the same trace as one read, errors still naming FILE:LINE and
field across chunk boundaries, and chunked writing with the bytes of `dumps_trace`."""
import json

import numpy as np
import pytest

from dspark_sim.errors import InputError
from dspark_sim.traces.schema import (Trace, concat_traces, dumps_trace, iter_trace_chunks,
                                      load_trace, write_trace)


def _trace(n):
    return Trace(ids=np.array([f"q{i}" for i in range(n)], dtype=object),
                 arrival_s=np.round(np.cumsum(np.full(n, 0.25)), 6),
                 prompt_tokens=np.arange(1, n + 1, dtype=np.int64),
                 output_tokens=np.arange(n, 0, -1, dtype=np.int64),
                 task=np.array(["chat", "code"] * (n // 2) + ["chat"] * (n % 2), dtype=object))


@pytest.mark.parametrize("chunk", [1, 3, 10, 1000])
def test_chunks_make_the_same_trace(tmp_path, chunk):
    path = tmp_path / "t.jsonl"
    write_trace(path, _trace(10), chunk=3)
    assert path.read_text() == dumps_trace(_trace(10))
    parts = list(iter_trace_chunks(path, chunk=chunk))
    assert [len(p) for p in parts] == [min(chunk, 10 - i) for i in range(0, 10, chunk)]
    whole, joined = load_trace(path), concat_traces(parts)
    for a, b in ((whole, _trace(10)), (joined, whole)):
        for name in ("ids", "arrival_s", "prompt_tokens", "output_tokens", "task"):
            np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert whole.arrival_s.flags.writeable and whole.name == "t"
    assert len({id(t) for t in whole.task}) == 2          # task names are shared objects


@pytest.mark.parametrize("bad,line,field", [
    ({"id": "q1", "arrival_s": 9.0, "prompt_tokens": 1, "output_tokens": 1}, 5, "id"),
    ({"id": "z", "arrival_s": 0.1, "prompt_tokens": 1, "output_tokens": 1}, 5, "arrival_s"),
    ({"id": "z", "arrival_s": 9.0, "prompt_tokens": 2 ** 70, "output_tokens": 1}, 5,
     "prompt_tokens"),
])
def test_errors_across_chunks_name_line_and_field(tmp_path, bad, line, field):
    path = tmp_path / "t.jsonl"
    lines = dumps_trace(_trace(4)).splitlines() + [json.dumps(bad)]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(InputError) as err:
        for _ in iter_trace_chunks(path, chunk=2):
            pass
    assert err.value.line == line and err.value.field == field and err.value.file == str(path)


def test_empty_trace_is_an_error(tmp_path):
    path = tmp_path / "e.jsonl"
    path.write_text("\n\n")
    with pytest.raises(InputError, match="no requests"):
        load_trace(path)
