"""Suite-wide checks and settings (every test directory's own conftest.py adds its fixtures).

Strict JSON: every JSON / JSON Lines file the product writes while the suite runs must parse
with a strict parser (tests/strict_json.py). Each test's own `tmp_path` is checked when the test
ends (the failure names the test that wrote the file); at the end of the session everything
under pytest's base temporary directory is checked once more, which covers files written into
directories of module- and session-scoped fixtures.

Profile cache: measured profiles cached per machine (`profile` writes them to
~/.cache/dspark-sim/profiles) must not leak into tests, so the cache is an empty folder of the
session unless a test sets its own.
"""
from __future__ import annotations

import pytest

from tests.strict_json import violations

_CHECKED: dict[str, tuple[int, int]] = {}


@pytest.fixture(autouse=True, scope="session")
def _empty_profile_cache(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("DSPARK_SIM_PROFILE_CACHE", str(tmp_path_factory.mktemp("profile-cache")))
    yield
    mp.undo()


@pytest.fixture(autouse=True)
def _strict_json_of_this_test(request):
    yield
    tmp = request.node.funcargs.get("tmp_path")
    if tmp is not None and tmp.exists():
        bad = violations(tmp, _CHECKED)
        if bad:
            pytest.fail("the product wrote JSON that a strict parser refuses:\n" + "\n".join(bad),
                        pytrace=False)


@pytest.fixture(scope="session", autouse=True)
def _strict_json_of_the_session(tmp_path_factory):
    yield
    bad = violations(tmp_path_factory.getbasetemp(), _CHECKED)
    if bad:
        pytest.fail("the product wrote JSON that a strict parser refuses:\n" + "\n".join(bad),
                    pytrace=False)
