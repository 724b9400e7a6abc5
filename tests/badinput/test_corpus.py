"""Every case of the bad-input corpus exits 2 with FILE:LINE and the field, no traceback, and
writes nothing (docs/formats.md, "Bad input")."""
from __future__ import annotations

import pytest

from .cases_misc import misc_cases
from .cases_profiles import profile_cases
from .cases_traces import import_cases, trace_cases
from .kit import problems, run_case

CASES = trace_cases() + import_cases() + profile_cases() + misc_cases()


def test_case_ids_unique():
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input(case, tmp_path, capsys):
    outcome = run_case(case, tmp_path, capsys)
    found = problems(case, outcome, tmp_path)
    assert not found, "\n".join(found)
