"""The simulator's golden results (sim_golden.py, golden/sim_results.json): every engine that runs
a case gives the frozen hashes of every per-request result array, the iteration count and the
preemption count, with the compiled builds and in pure Python; engines that refused a case
still refuse it."""
import os
import subprocess
import sys
from pathlib import Path

import pytest
import sim_golden

from dspark_sim.sim.engines import native

REQUIRED = os.environ.get("DSPARK_SIM_REQUIRE_NATIVE", "") not in ("", "0")


def test_golden_results_every_engine_as_installed():
    """Every engine in this process: with the compiled builds where they are in use (required
    where DSPARK_SIM_REQUIRE_NATIVE=1), else the Python code."""
    if REQUIRED:
        assert all(native.status().values()), native.status()
    problems = sim_golden.check()
    assert not problems, "\n".join(problems)


def test_golden_results_pure_python():
    """The engines that use the compiled builds (loop, and fast where it picks loop), with the
    builds switched off (DSPARK_SIM_PURE_PYTHON=1) in a fresh process."""
    env = dict(os.environ, DSPARK_SIM_PURE_PYTHON="1")
    out = subprocess.run([sys.executable, str(Path(sim_golden.__file__)), "--check",
                          "--engines", "fast,loop"], env=env, capture_output=True, text=True,
                         timeout=600)
    assert "'_loop_native': False" in out.stderr and "'_stretch_kernel_native': False" in out.stderr, \
        out.stderr
    assert out.returncode == 0, out.stdout + out.stderr


@pytest.mark.slow
def test_golden_results_including_slow_engines():
    """Also the engines marked slow for a case (the reference engine on the 10-minute chat trace)."""
    problems = sim_golden.check(include_slow=True)
    assert not problems, "\n".join(problems)


def test_golden_file_covers_every_axis():
    """The matrix keeps every policy, both KV semantics (with preemptions), every load shape,
    1 and 3 replicas, both routers and every engine (and engines that refuse)."""
    golden = sim_golden.load_golden()
    built = {case.name: case.build() for case in sim_golden.cases()}
    assert set(built) == set(golden)
    assert {a["policy"] for a in built.values()} >= set(sim_golden.POLICIES)
    for kv in ("reserve", "blocks"):
        assert any(a["kv_semantics"] == kv for a in built.values())
    assert any(golden[n]["preemptions"] > 0 for n in golden)
    assert any(a["closed_loop"] is not None for a in built.values())
    assert any(a["prefill"] == "disaggregated" and a["closed_loop"] is None for a in built.values())
    assert any(a["prefill"] == "disaggregated" and a["closed_loop"] is not None for a in built.values())
    assert {a["replicas"] for a in built.values()} >= {1, 3}
    assert {a["router"] for a in built.values() if a["replicas"] > 1} == {"rr", "lo"}
    for engine in sim_golden.ENGINES:
        assert any(engine in g["engines"] for g in golden.values())
    assert any(set(g["engines"]) != set(sim_golden.ENGINES) for g in golden.values())
