"""vLLM's speculation policies: adaptive verification against a brute-force statement of vLLM's
rule, the batch-size schedule's lengths in a simulation, and the padded step costs."""
import json

import numpy as np
import pytest
from tests.strict_json import register_input
from simkit import make_trace, parametric, table_hw

from dspark_sim.errors import InputError
from dspark_sim.sim.cluster.run import simulate
from dspark_sim.sim.cost.vllm_tables import build_cost_tables, profile_sizes
from dspark_sim.sim.cost.iteration import IterationCost
from dspark_sim.sim.speculation.base import PolicyInputs
from dspark_sim.sim.speculation.registry import make_policy
from dspark_sim.sim.speculation.spec_config import parse_schedule


def _hw(rng, capture):
    sizes = sorted(set(rng.integers(1, 200, rng.integers(1, 8)).tolist()))
    return table_hw([1, 8, 32, 128, 512, 2048], np.sort(rng.uniform(0.004, 0.08, 6)).tolist(),
                    draft={"dspark": {"requests": [1, 16, 64], "seconds": sorted(rng.uniform(0, 0.004, 3))}},
                    max_batch_tokens=int(rng.integers(64, 1024)), max_batch_requests=int(rng.integers(4, 64)),
                    capture_sizes=sizes if capture else None)


def _vllm_rule(stale, current, cap, base, others, others_sampling, draft_ms, verify_ms):
    """vLLM's get_num_tokens + reallocate_drafts in plain loops: sort the stale survival of
    every slot, pick the first budget n maximising (sampling + best n scores) /
    (draft_ms[requests] + verify_ms[non-draft tokens + n]), admit the n best current slots."""
    r, g = current.shape
    scores = sorted((float(np.prod(stale[i][:j + 1])) for i in range(r) for j in range(g)), reverse=True)
    top = min(r * g, max(cap, 0))
    sampling, requests, non_draft = r + others_sampling, r + others, r + base
    best, budget, expected = None, 0, float(sampling)
    for n in range(top + 1):
        if n:
            expected += scores[n - 1]
        value = expected / (draft_ms[requests] + verify_ms[non_draft + n])
        if best is None or value > best:
            best, budget = value, n
    slots = sorted(((current[i, j], i, j) for i in range(r) for j in range(g)), key=lambda s: -s[0])
    lengths = [0] * r
    for _, i, _ in slots[:budget]:
        lengths[i] += 1
    return lengths


@pytest.mark.parametrize("seed", range(60))
def test_adaptive_verification_equals_vllms_rule(seed):
    rng = np.random.default_rng(seed)
    hw = _hw(rng, capture=bool(seed % 2))
    gamma = int(rng.integers(1, 7))
    cost = IterationCost(hw, "dspark", scheduler_drafts=gamma)
    policy = make_policy("vllm-adaptive", gamma, hw=hw)
    rows = rng.choice(1000, int(rng.integers(1, hw.max_batch_requests)), replace=False)
    r = len(rows)
    # the previous iteration: some of these rows decoded (their survivals are now stale)
    prev = rng.uniform(0.05, 1.0, (r, gamma)).cumprod(axis=1)
    seen = rng.random(r) < 0.7
    policy.observe(rows[seen], prev[seen], int(seen.sum()))
    current = rng.uniform(0.05, 1.0, (r, gamma)).cumprod(axis=1)
    cap = int(rng.integers(0, hw.max_batch_tokens - r + 1))
    base = int(rng.integers(0, hw.max_batch_tokens - r - min(cap, r * gamma) + 1))
    others = int(rng.integers(0, 4))
    sampling = int(rng.integers(0, others + 1))
    cols = PolicyInputs(surv=current[None], active=np.ones((1, r), dtype=bool), base=np.array([base]),
                   cap=np.array([cap]), mean_surv=current, rows=rows, others=np.array([others]),
                   others_sampling=np.array([sampling]))
    got = policy.verify(cols, cost)[0].tolist()
    stale = np.where(seen[:, None], np.concatenate([prev[:, :1], prev[:, 1:] / prev[:, :-1]], axis=1), 1.0)
    draft_ms, verify_ms = cost.vllm_tables(max(hw.max_batch_requests, r + others),
                                           max(hw.max_batch_tokens, r + base + min(cap, r * gamma)))
    assert got == _vllm_rule(stale, current, cap, base, others, sampling, draft_ms, verify_ms)


def test_adaptive_cost_tables_are_vllms_on_the_profiles_samples():
    rng = np.random.default_rng(3)
    hw = _hw(rng, capture=True)
    cost = IterationCost(hw, "dspark", scheduler_drafts=4)
    reqs, tokens = hw.max_batch_requests, hw.max_batch_tokens
    sizes = profile_sizes(hw.capture_sizes, tokens)
    verify = [(b, 1e3 * float(hw.step_time(b))) for b in sizes]
    draft = [(q, 1e3 * float(hw.draft_time("dspark", q))) for q in sorted({min(s, reqs) for s in hw.capture_sizes})]
    expect = build_cost_tables(draft, verify, reqs, tokens, hw.capture_sizes[-1])
    for a, b in zip(cost.vllm_tables(reqs, tokens), expect):
        np.testing.assert_allclose(a, b, rtol=1e-12)


def test_padded_step_time():
    hw = table_hw([1, 8, 64, 512], [0.01, 0.012, 0.02, 0.06], capture_sizes=[1, 2, 4, 8, 16, 32])
    smooth = table_hw([1, 8, 64, 512], [0.01, 0.012, 0.02, 0.06])
    for b in range(1, 33):                     # padded up to the next capture size
        pad = next(s for s in hw.capture_sizes if s >= b)
        assert hw.step_time(b) == pytest.approx(float(smooth.step_time(pad)))
    for b in (33, 50, 400, 900):               # above the largest capture size: smooth
        assert hw.step_time(b) == pytest.approx(float(smooth.step_time(b)))
    cost = IterationCost(hw, None)
    assert cost.step_seconds(np.array([3, 5, 40])).tolist() == pytest.approx(
        [float(smooth.step_time(4)), float(smooth.step_time(8)), float(smooth.step_time(40))])


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8, 12])
def test_batch_schedule_verifies_the_configured_length(n):
    """n requests decode in lock step (every draft rejected, one token per step): each step
    verifies exactly K(n) drafts, K(n) from the schedule, capped at the drafter's depth."""
    schedule = parse_schedule("[[1, 1, 5], [2, 3, 3], [5, 8, 1], [10, 10, 0]]", 4)
    trace = make_trace(np.zeros(n), [4] * n, [9] * n)
    hw = table_hw([1, 64], [0.01, 0.02], max_batch_tokens=4096)
    out = simulate(trace, "vllm-schedule", hw, parametric({"chat": [0.0] * 4}), schedule=schedule)
    k = {1: 4, 2: 3, 3: 3, 5: 1, 8: 1, 12: 0}[n]
    assert (out.table.steps == 8).all()
    assert (out.table.verified == 8 * k).all() and (out.table.drafted == 8 * k).all()


def test_batch_schedule_follows_the_previous_steps_batch():
    """Requests arrive one by one: a step verifies K of the batch the previous step scheduled."""
    schedule = parse_schedule("[[1, 1, 3], [2, 64, 1]]", 3)
    trace = make_trace([0.0, 0.0305], [4, 4], [40, 6])
    hw = table_hw([1, 64], [0.01, 0.01], max_batch_tokens=4096)
    out = simulate(trace, "vllm-schedule", hw, parametric({"chat": [0.0] * 3}), schedule=schedule,
                   engine="reference")
    # r0 decodes alone for 4 steps (K = 3; r1 is admitted at the 4th step's start, so that step
    # still follows a batch of 1); r1's prefill makes the batch 2, so the next 5 steps (r1's
    # decode) verify K = 1, and so does the step after r1 leaves; then K = 3 again
    assert out.table.verified[1] == 5 * 1
    assert out.table.verified[0] == 4 * 3 + 6 * 1 + (39 - 10) * 3


def test_malformed_schedules_name_the_line_and_field(tmp_path):
    path = tmp_path / "s.json"
    register_input(path)                       # bad input on purpose (tests/strict_json.py)
    path.write_text('[\n  [1, 4, 3],\n  [3, 9, 1]\n]\n')
    with pytest.raises(InputError) as err:
        parse_schedule(str(path), 4)
    assert err.value.line == 3 and err.value.field == "bs-schedule[1]" and "overlap" in str(err.value)
    path.write_text('[\n  [1, 4, 3],\n  [5, 9 1]\n]\n')
    with pytest.raises(InputError) as err:
        parse_schedule(str(path), 4)
    assert err.value.line == 3 and "JSON" in str(err.value)
    for bad, field in (('[[2, 4, 3]]', "bs-schedule[0]"), ('[[1, 4, -1]]', "bs-schedule[0]"),
                       ('[[1, 4]]', "bs-schedule[0]"), ('[]', "bs-schedule"),
                       ('{"num_speculative_tokens": 9, "num_speculative_tokens_per_batch_size": [[1, 2, 3]]}',
                        "num_speculative_tokens")):
        with pytest.raises(InputError) as err:
            parse_schedule(bad, 4)
        assert err.value.field == field, bad
    with pytest.raises(InputError, match="needs a batch-size schedule"):
        make_policy("vllm-schedule", 4)
    assert json.loads(json.dumps(parse_schedule('[[1, 4, 3]]', 4).to_json())) == [[1, 4, 3]]


def test_replay_cli_with_vllm_semantics(tmp_path, capsys):
    from dspark_sim.cli import main

    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(f'{{"arrival_s": {0.01 * i:.2f}, "prompt_tokens": 300, "output_tokens": 80}}\n'
                             for i in range(40)))
    hw = tmp_path / "hw.yaml"
    hw.write_text("schema: dspark-sim/hw/v1\nname: tight\nsource: constant\nstep_time: {constant_s: 0.01}\n"
                  "kv_capacity_tokens: 3000\nkv_block_size: 16\ncapture_sizes: [1, 2, 4, 8]\n")
    sched = tmp_path / "s.json"
    sched.write_text('{"num_speculative_tokens_per_batch_size": [[1, 4, 3],\n  [5, 64, 1]]}')
    out = tmp_path / "out"
    assert main(["replay", str(trace), "--policy", "static-3,vllm-schedule,vllm-adaptive", "--hw", str(hw),
                 "--kv-semantics", "blocks", "--bs-schedule", str(sched), "--out", str(out)]) == 0
    for policy in ("static-3", "vllm-schedule", "vllm-adaptive"):
        summary = json.loads((out / policy / "summary.json").read_text())
        assert summary["kv_semantics"] == "blocks" and summary["preemptions"] > 0
        assert summary["completed"] == 40
    assert "preemptions" in capsys.readouterr().out
    sched.write_text('{"num_speculative_tokens_per_batch_size": [[1, 4, 3],\n  [4, 64, 1]]}')
    assert main(["replay", str(trace), "--policy", "vllm-schedule", "--hw", str(hw),
                 "--bs-schedule", str(sched), "--out", str(tmp_path / "o2")]) == 2
    err = capsys.readouterr().err
    assert f"{sched}:2" in err and "num_speculative_tokens_per_batch_size[1]" in err
    assert not (tmp_path / "o2").exists()
    assert main(["replay", str(trace), "--policy", "vllm-schedule", "--hw", str(hw),
                 "--out", str(tmp_path / "o3")]) == 2
    assert main(["replay", str(trace), "--policy", "mtp1", "--sim-engine", "block", "--kv-semantics",
                 "blocks", "--hw", str(hw), "--out", str(tmp_path / "o4")]) == 2
    assert "not 'block'" in capsys.readouterr().err


def test_sweep_cli_runs_the_vllm_policies(tmp_path):
    from dspark_sim.cli import main

    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(f'{{"arrival_s": 0, "prompt_tokens": {30 + i}, "output_tokens": {10 + i}}}\n'
                             for i in range(40)))
    sched = tmp_path / "s.json"
    sched.write_text('[[1, 3, 4], [4, 64, 2]]')
    out = tmp_path / "sweep"
    assert main(["sweep", "--trace", str(trace), "--policies", "static-2,vllm-schedule,vllm-adaptive",
                 "--bs-schedule", str(sched), "--kv-semantics", "blocks", "--points", "2",
                 "--load-range", "2,6", "--requests-per-user", "3", "--workers", "1",
                 "--out", str(out)]) == 0
    import pandas as pd
    results = pd.read_csv(out / "results.csv")
    assert set(results["policy"]) == {"ar", "static-2", "vllm-schedule", "vllm-adaptive"}   # ar always swept
    assert (results["kv_semantics"] == "blocks").all()
    sched.write_text('[[1, 3, 4],\n [2, 64, 2]]')
    assert main(["sweep", "--trace", str(trace), "--policies", "vllm-schedule", "--bs-schedule",
                 str(sched), "--out", str(tmp_path / "bad")]) == 2


def test_vllm_policies_budget_every_scheduled_draft_before_prefill():
    """Adaptive verification with drafts that never survive verifies none after the first step,
    but, as in vLLM, the prefill chunk is still cut after 1 + gamma tokens per decoding request:
    a 465-token prompt takes ceil(465 / (64 - 6)) = 9 iterations, not ceil(465 / 63) = 8."""
    trace = make_trace([0.0, 0.05], [4, 465], [200, 1])
    hw = table_hw([1, 64], [0.01, 0.01], max_batch_tokens=64)
    acc = parametric({"chat": [0.0] * 5})
    out = simulate(trace, "vllm-adaptive", hw, acc)
    assert out.table.first_token_ns[1] - out.table.arrival_ns[1] == 9 * 10_000_000
    assert out.table.verified[0] == 5         # only the first decode step (stale confidences 1.0)
