"""Strict JSON: the product's one writer turns NaN and Infinity into null, and the suite's
walker (tests/conftest.py, tests/strict_json.py) would catch a file that still held them."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from dspark_sim.fileio import json_line, json_text, write_json_atomic
from tests.strict_json import register_input, strict_json_error, strict_loads, violations


def test_the_writer_writes_null_for_non_finite_numbers(tmp_path):
    doc = {"ece": float("nan"), "ci": (float("inf"), -math.inf), "n": np.int64(0),
           "rates": np.array([0.5, np.nan]), "ok": np.float32(0.25)}
    write_json_atomic(tmp_path / "a.json", doc)
    assert strict_loads((tmp_path / "a.json").read_text()) == {
        "ece": None, "ci": [None, None], "n": 0, "rates": [0.5, None], "ok": 0.25}
    assert strict_loads(json_line({"x": float("nan")})) == {"x": None}
    assert json_text([1.5, float("-inf")], separators=(",", ":")) == "[1.5,null]"


def test_the_walker_catches_what_pythons_json_writes_by_default(tmp_path):
    (tmp_path / "bad.json").write_text(json.dumps({"ece": float("nan")}))          # NaN
    (tmp_path / "bad.jsonl").write_text('{"a": 1}\n{"b": Infinity}\n')
    (tmp_path / "good.json").write_text(json_text({"ece": float("nan")}))
    assert "NaN" in strict_json_error(tmp_path / "bad.json")
    assert strict_json_error(tmp_path / "bad.jsonl").startswith("line 2")
    assert strict_json_error(tmp_path / "good.json") is None
    found = violations(tmp_path, {})
    assert len(found) == 2 and not any("good.json" in f for f in found)
    for name in ("bad.json", "bad.jsonl"):            # test inputs, not product output
        register_input(tmp_path / name)
    assert violations(tmp_path, {}) == []
    with pytest.raises(ValueError):
        strict_loads("[NaN]")
