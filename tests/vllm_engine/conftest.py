"""Fixtures of the tests that need a real vLLM (marker `vllm`): its interpreter and AIPerf.

Without `make setup-vllm` those tests are skipped, except under DSPARK_SIM_REQUIRE_VLLM=1 (CI),
where a missing engine fails them."""
import os

import pytest

from dspark_sim.errors import InputError
from dspark_sim.vllm.runtime import aiperf_command, vllm_python


def _found(find):
    try:
        return find()
    except InputError as exc:
        if os.environ.get("DSPARK_SIM_REQUIRE_VLLM") == "1":
            pytest.fail(f"vLLM is required here (DSPARK_SIM_REQUIRE_VLLM=1): {exc}")
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def vllm_interpreter():
    """The interpreter that imports vllm."""
    return _found(vllm_python)


@pytest.fixture(scope="module")
def aiperf_executable():
    """The aiperf load generator."""
    return _found(aiperf_command)
