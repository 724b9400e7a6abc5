"""The compiled builds (sim/engines/native.py) give the Python code's results bit for bit, are used only
when built from the current source, and are built where CI runs (DSPARK_SIM_REQUIRE_NATIVE=1)."""
import os
import warnings

import numpy as np
import pytest
from simkit import assert_same_outcome

from dspark_sim.profiles.registry import load_acceptance_profile, load_hw_profile
from dspark_sim.sim.engines import capability, loop, native, stretch
from dspark_sim.sim.cluster.run import simulate
from dspark_sim.sim.replay import default_acceptance
from dspark_sim.traces import load_trace

REQUIRED = os.environ.get("DSPARK_SIM_REQUIRE_NATIVE", "") not in ("", "0")


def kernel():
    module = native.compiled("_stretch_kernel_native")
    if module is None:
        if REQUIRED:
            pytest.fail(f"the compiled builds are required here but not in use: {native.status()}")
        pytest.skip("compiled builds not in use (no C compiler at install, or DSPARK_SIM_PURE_PYTHON)")
    return module.steady_stretch


def test_builds_in_use_where_required():
    if not REQUIRED:
        pytest.skip("DSPARK_SIM_REQUIRE_NATIVE is not set")
    assert native.status() == {"_loop_native": True, "_stretch_kernel_native": True}
    assert capability.LoopReplica is not loop.LoopReplica


def random_stretch(rng):
    r = int(rng.integers(0, 7))
    it = int(rng.integers(0, 50))
    tok, first, owed = [], [], []
    for _ in range(r):
        start = int(rng.integers(0, it + 1))
        steps = int(rng.integers(it - start + 1, it - start + 80))
        tok.append(bytes(rng.integers(1, 9, steps).tolist()))
        first.append(start)
        left = sum(tok[-1][it - start:])
        owed.append(int(rng.integers(1, left + 1)))
    # halves exercise rounding half to even; huge t_arr runs until a row finishes
    base = float(rng.choice([0.5, 2.5, 1e6 + 0.5, rng.uniform(1e5, 1e8)]))
    context = float(rng.choice([0.0, 0.5, 0.25, rng.uniform(0, 50)]))
    now = int(rng.integers(0, 1 << 40))
    t_arr = now + int(rng.choice([1, int(rng.integers(1, 1 << 32)), 1 << 61]))
    return tok, first, owed, r, it, now, t_arr, base, context, int(rng.integers(0, 1 << 20))


def test_stretch_kernel_equals_python():
    compiled = kernel()
    rng = np.random.default_rng(7)
    for case in range(3000):
        args = random_stretch(rng)
        if not args[3]:
            continue                      # no rows: the engine never calls it so
        owed_py, owed_c = list(args[2]), list(args[2])
        want = stretch.steady_stretch_py(args[0], args[1], owed_py, *args[3:])
        got = compiled(args[0], args[1], owed_c, *args[3:])
        assert got == want, case
        assert owed_c == owed_py, case


def test_stretch_kernel_refuses_steps_past_the_row():
    compiled = kernel()
    with pytest.raises(IndexError):
        compiled([b"\x01"], [0], [5], 1, 0, 0, 1 << 62, 1.0, 0.0, 0)


@pytest.mark.parametrize("policy", ["ar", "mtp1", "static-3", "dspark", "dspark-lagged", "goodput"])
def test_native_engine_equals_python_on_a_shipped_trace(policy, monkeypatch):
    kernel()
    trace = load_trace("traces/chat-heavy-hour.jsonl")
    hw = load_hw_profile("h200-qwen3-8b-roofline")
    name = default_acceptance(policy)
    acc = load_acceptance_profile(name) if name else None
    fast = simulate(trace, policy, hw, acc, replicas=2)
    monkeypatch.setattr(capability, "LoopReplica", loop.LoopReplica)
    monkeypatch.setattr(loop, "steady_stretch", stretch.steady_stretch_py)
    slow = simulate(trace, policy, hw, acc, replicas=2)
    assert_same_outcome(fast, slow, policy, fields=("replica", "first_token_ns", "finish_ns",
                                                    "steps", "drafted", "verified", "accepted"))


def test_stale_build_is_not_used(tmp_path, monkeypatch):
    kernel()
    (tmp_path / "loop.py").write_text("# another version of loop.py\n")
    monkeypatch.setattr(native, "HERE", tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert native._load("_loop_native") is None
    assert any("another version of loop.py" in str(w.message) for w in caught)
    monkeypatch.setattr(native, "HERE", native.Path(native.__file__).resolve().parent)
    assert native._load("_loop_native") is not None
    # a build that does not say which source it was made from is not trusted either
    monkeypatch.delattr(native.compiled("_loop_native"), "NATIVE_SOURCE")
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        assert native._load("_loop_native") is None


def test_pure_python_switch(monkeypatch):
    monkeypatch.setenv("DSPARK_SIM_PURE_PYTHON", "1")
    assert native.compiled("_loop_native") is None
