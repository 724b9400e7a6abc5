"""The simulator's readings of vLLM against vLLM's own code, where vLLM is importable.

Run against vLLM itself with the vLLM venv (it needs only numpy and pytest):

    PYTHONPATH=. /path/to/vllm-venv/bin/python -m pytest tests/sim/test_vllm_reference.py

Without vLLM the comparisons with vLLM are skipped; the brute-force restatements still run.
"""
import json
import typing

import numpy as np
import pytest

from dspark_sim.sim.cost.vllm_tables import build_cost_tables, build_table, profile_sizes
from dspark_sim.sim.speculation.spec_config import BatchSchedule, parse_schedule, speculative_config


def _random_curve(rng, limit):
    xs = np.unique(rng.integers(1, 3 * limit + 2, rng.integers(1, 12)))
    ys = rng.uniform(0.1, 5.0, len(xs))
    if rng.random() < 0.7:
        ys = np.sort(ys)
    return [(int(x), float(y)) for x, y in zip(xs, ys)]


def _brute_table(limit, curve, cudagraph_limit):
    """vLLM's construction restated per size: running-max costs; above the capture limit
    linear between the samples above it; past the last sample the last two's line; else the
    first sample at or above the size (the last one if none)."""
    xs = [x for x, _ in curve]
    ys = list(np.maximum.accumulate([y for _, y in curve]))
    above = [(x, y) for x, y in zip(xs, ys) if x > cudagraph_limit]
    out = []
    for v in range(limit + 1):
        if len(xs) > 1 and v > xs[-1]:
            out.append(ys[-1] + (ys[-1] - ys[-2]) / (xs[-1] - xs[-2]) * (v - xs[-1]))
        elif cudagraph_limit and v > cudagraph_limit and above:
            out.append(float(np.interp(v, [x for x, _ in above], [y for _, y in above])))
        else:
            out.append(next((y for x, y in zip(xs, ys) if x >= v), ys[-1]))
    return np.array(out)


@pytest.mark.parametrize("seed", range(40))
def test_cost_tables_equal_the_per_size_definition(seed):
    rng = np.random.default_rng(seed)
    limit = int(rng.integers(1, 80))
    curve = _random_curve(rng, limit)
    cg = int(rng.choice([0, rng.integers(1, limit + 1)]))
    np.testing.assert_allclose(build_table(limit, curve, cg), _brute_table(limit, curve, cg), rtol=1e-12)


@pytest.mark.parametrize("seed", range(40))
def test_cost_tables_equal_vllms_construction(seed):
    av = pytest.importorskip("vllm.v1.worker.gpu.spec_decode.adaptive_verification")
    rng = np.random.default_rng(seed)
    reqs, tokens = int(rng.integers(1, 64)), int(rng.integers(1, 300))
    draft, verify = _random_curve(rng, reqs), _random_curve(rng, tokens)
    cg = int(rng.choice([0, rng.integers(1, tokens + 1)]))
    ours = build_cost_tables(draft, verify, reqs, tokens, cg)
    theirs = av.build_cost_tables_from_curves(draft, verify, reqs, tokens, cg)
    for a, b in zip(ours, theirs):
        np.testing.assert_array_equal(a, b)


def test_profile_sizes():
    assert profile_sizes([1, 2, 4, 8], 64) == [1, 2, 4, 8, 12, 16, 32, 64]
    assert profile_sizes([1, 2, 512], 8192) == [1, 2, 512, 768, 1024, 2048, 4096, 8192]
    assert profile_sizes([1, 16], 16) == [1, 16]
    assert profile_sizes([], 100) == []


def _brute_dense(ranges, max_bs, num_spec):
    """vLLM's documented rule: inside a range its K; in a gap the K of the range before; past
    the last range the last K; every K capped at num_speculative_tokens."""
    out = [0]
    for b in range(1, max_bs + 1):
        k = None
        for start, end, value in sorted(ranges):
            if start <= b:
                k = value
        out.append(min(k, num_spec))
    return out


def _random_schedule(rng):
    n = int(rng.integers(1, 6))
    starts = np.sort(rng.choice(np.arange(2, 60), n - 1, replace=False)).tolist()
    ranges = []
    for s in [1] + starts:
        ranges.append([s, None, int(rng.integers(0, 8))])
    for i, r in enumerate(ranges):
        nxt = ranges[i + 1][0] if i + 1 < len(ranges) else 80
        r[1] = int(rng.integers(r[0], nxt))       # may leave a gap before the next range
    return ranges


@pytest.mark.parametrize("seed", range(30))
def test_batch_schedule_lookup(seed):
    rng = np.random.default_rng(seed)
    ranges = _random_schedule(rng)
    gamma = int(rng.integers(1, 8))
    sched = parse_schedule(json.dumps(ranges), gamma)
    assert [0] + [sched.k_at(b) for b in range(1, 101)] == _brute_dense(ranges, 100, gamma)


@pytest.mark.parametrize("seed", range(30))
def test_batch_schedule_lookup_equals_vllms(seed):
    dyn = pytest.importorskip("vllm.v1.spec_decode.dynamic.utils")
    rng = np.random.default_rng(seed)
    ranges = _random_schedule(rng)
    gamma = int(rng.integers(1, 8))
    sched = parse_schedule(json.dumps(ranges), gamma)
    dense = dyn.build_dynamic_sd_schedule_lookup(ranges, 100, gamma)
    assert [0] + [sched.k_at(b) for b in range(1, 101)] == dense


def _vllm_parse(spec: dict):
    """Parse with vLLM's SpeculativeConfig. Model-backed methods (dspark, mtp, eagle3, ...)
    need a target model config to resolve their weights, so the method is checked against
    vLLM's list of methods and the rest of the object is parsed with method 'ngram'."""
    speculative = pytest.importorskip("vllm.config.speculative")

    def flatten(t):
        args = typing.get_args(t)
        return {t} if not args else set().union(*(flatten(a) for a in args))
    assert spec["method"] in flatten(speculative.SpeculativeMethod)
    cfg = speculative.SpeculativeConfig(**{**spec, "method": "ngram"})
    assert cfg.num_speculative_tokens == spec["num_speculative_tokens"]
    if "num_speculative_tokens_per_batch_size" in spec:
        assert [list(e) for e in cfg.num_speculative_tokens_per_batch_size] == \
            spec["num_speculative_tokens_per_batch_size"]
    assert cfg.enable_adaptive_verification == spec.get("enable_adaptive_verification", False)
    return cfg


@pytest.mark.parametrize("seed", range(10))
def test_speculative_config_json_parses_with_vllm(seed):
    rng = np.random.default_rng(seed)
    gamma = int(rng.integers(1, 8))
    schedule = parse_schedule(json.dumps(_random_schedule(rng)), gamma)
    for spec in (speculative_config("dspark", gamma),
                 speculative_config("mtp", 1),
                 speculative_config("dspark", gamma, adaptive=True),
                 speculative_config("eagle3", gamma, schedule=schedule)):
        _vllm_parse(json.loads(json.dumps(spec)))


def test_schedule_in_a_speculative_config_object():
    text = '{"method": "dspark", "num_speculative_tokens": 3,\n "num_speculative_tokens_per_batch_size": [[1, 4, 5], [5, 9, 1]]}'
    sched = parse_schedule(text, 5)
    assert sched == BatchSchedule(((1, 4, 5), (5, 9, 1)), 3)
    assert sched.k_at(2) == 3 and sched.k_at(100) == 1
