"""Shared by every test: measured profiles cached per machine (`profile` writes them to
~/.cache/dspark-sim/profiles) must not leak into tests, so the cache is an empty folder of the
session unless a test sets its own."""
import pytest


@pytest.fixture(autouse=True, scope="session")
def _empty_profile_cache(tmp_path_factory):
    mp = pytest.MonkeyPatch()
    mp.setenv("DSPARK_SIM_PROFILE_CACHE", str(tmp_path_factory.mktemp("profile-cache")))
    yield
    mp.undo()
