"""Per-request spec-decode records (AIPerf, vLLM responses) -> request steps; no-draft steps."""
import json
from pathlib import Path

import numpy as np
import pytest

from dspark_sim.errors import InputError
from dspark_sim.vllm.acceptance_import import import_vllm
from dspark_sim.vllm.records import TaskRule, interleave, load_task_map, read_records

DATA = Path(__file__).parent / "data"
AIPERF = DATA / "aiperf_profile_export.jsonl"
RESPONSES = DATA / "vllm_responses.jsonl"


def test_interleave_tokens_add_up_and_order_is_kept():
    rng = np.random.default_rng(0)
    for _ in range(300):
        gamma = int(rng.integers(1, 8))
        s = int(rng.integers(0, 12))
        drafted = rng.integers(0, gamma + 1, s)
        accepted = np.array([rng.integers(0, d + 1) for d in drafted], dtype=int)
        n0 = int(rng.integers(0, 30))
        tokens = 1 + int((accepted + 1).sum()) + n0
        acc, dr = interleave(list(accepted), list(drafted), tokens)
        assert len(acc) == s + n0 == tokens - 1 - int(accepted.sum())
        assert 1 + int((acc + 1).sum()) == tokens          # every token accounted for
        spec = np.flatnonzero(np.isin(np.arange(len(acc)), _spec_positions(len(acc), n0)))
        assert list(acc[spec]) == list(accepted) and list(dr[spec]) == list(drafted)
        assert (acc[~np.isin(np.arange(len(acc)), spec)] == 0).all()


def _spec_positions(n: int, n0: int) -> list[int]:
    no_draft = {int((i + 0.5) * n / n0) for i in range(n0)} if n0 else set()
    assert len(no_draft) == n0
    return [t for t in range(n) if t not in no_draft]


def test_interleave_spreads_no_draft_steps_evenly():
    acc, dr = interleave([2, 1], [3, 3], 1 + 5 + 4)           # S=2, N0=4, n=6
    assert dr.tolist() == [0, 3, 0, 0, 3, 0] and acc.tolist() == [0, 2, 0, 0, 1, 0]
    acc, dr = interleave([], [], 4)
    assert acc.tolist() == [0, 0, 0] and dr.tolist() == [0, 0, 0]


def test_interleave_last_step_cut_by_the_stop():
    acc, dr = interleave([1, 3], [3, 3], 1 + 2 + 2)            # last step emitted 2 of its 4
    assert acc.tolist() == [1, 3] and dr.tolist() == [3, 3]
    with pytest.raises(ValueError, match="cannot hold"):
        interleave([3, 1], [3, 3], 1 + 4 + 0)                  # last step emitted nothing
    with pytest.raises(ValueError, match="cannot hold"):
        interleave([0], [3], 1)


def test_aiperf_export():
    read = read_records(AIPERF, TaskRule())
    assert len(read.requests) == 6 and read.failed == 0
    lines = AIPERF.read_text().splitlines()
    for req, text in zip(read.requests, lines):
        rec = json.loads(text)
        acc, dr = req.steps()
        assert req.gamma == 3 and req.task == "default"
        assert 1 + int((acc + 1).sum()) == rec["metrics"]["usage_completion_tokens"]["value"]
        assert int((dr > 0).sum()) == rec["metrics"]["spec_decode_steps"]["value"]
        assert int(dr.sum()) == rec["metrics"]["spec_decode_draft_tokens"]["value"]
    assert [r.spec_accepted for r in read.requests][-1] == [0, 0, 0, 1, 0, 0]


def test_vllm_responses_tasks_and_truncated_last_step():
    read = read_records(RESPONSES, TaskRule())
    assert [r.task for r in read.requests] == ["math", "code", "math", "code"]
    assert read.models == {"smol"}
    steps = [r.steps() for r in read.requests]
    assert steps[0][0].tolist() == [2, 0, 0, 3, 1] and steps[0][1].tolist() == [3, 3, 0, 3, 3]
    assert steps[1][1].tolist() == [2, 0, 3, 0] and steps[1][0].tolist() == [1, 0, 3, 0]
    assert steps[2][0].tolist() == [3, 3]                      # 8 tokens: stopped inside step 2
    assert steps[3][1].tolist() == [0, 0, 0, 0]                # no drafts at all


def test_task_from_field_or_map(tmp_path):
    rule = TaskRule(path="metadata.conversation_id")
    read = read_records(AIPERF, rule)
    assert read.requests[0].task == "80b596a6-8b29-4d4d-af92-25b209439e79"
    ids = [json.loads(t)["metadata"]["conversation_id"] for t in AIPERF.read_text().splitlines()]
    mapping = tmp_path / "map.json"
    mapping.write_text(json.dumps({cid: ("code" if i % 2 else "chat") for i, cid in enumerate(ids)}))
    read = read_records(AIPERF, TaskRule(mapping=load_task_map(mapping), map_file=str(mapping)))
    assert [r.task for r in read.requests] == ["chat", "code"] * 3
    partial = tmp_path / "partial.json"
    partial.write_text(json.dumps({ids[0]: "chat"}))
    with pytest.raises(InputError) as err:
        read_records(AIPERF, TaskRule(mapping=load_task_map(partial), map_file=str(partial)))
    assert err.value.line == 2 and err.value.field == "metadata.conversation_id"
    assert read_records(AIPERF, TaskRule(name="gsm8k")).requests[5].task == "gsm8k"
    # a trace replay's records keep their keys as request ids (validate --engine vllm), else not
    kept = import_vllm([AIPERF], "x", kind="empirical", rule=TaskRule(mapping=load_task_map(mapping),
                       map_file=str(mapping)), keep_ids=True).profile
    assert sorted(r.request_id for t in kept.tasks.values() for r in t.requests) == sorted(ids)
    plain = import_vllm([AIPERF], "x", kind="empirical").profile
    assert all(r.request_id is None for t in plain.tasks.values() for r in t.requests)


def test_aiperf_record_without_spec_block_and_failed_records(tmp_path):
    recs = [json.loads(t) for t in AIPERF.read_text().splitlines()[:2]]
    plain = dict(recs[0])
    del plain["spec_decode_acceptance"]                        # AIPerf omits it with no verify steps
    failed = dict(recs[1], error={"code": 500, "type": "ServerError", "message": "boom"})
    cancelled = dict(recs[1], metadata=dict(recs[1]["metadata"], was_cancelled=True))
    path = tmp_path / "p.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in (plain, failed, cancelled, recs[1])) + "\n")
    read = read_records(path, TaskRule())
    assert read.failed == 2 and len(read.requests) == 2
    acc, dr = read.requests[0].steps()
    assert read.requests[0].gamma is None and len(acc) == 15 and not dr.any()


def test_records_tally_as_the_servers_counters():
    # AIPerf's server_metrics_export.json of the same run (one engine): drafts 13, draft tokens
    # 39, accepted 1, accepted per position [1, 0, 0]
    report = import_vllm([AIPERF], "x", kind="parametric").reports[0]
    c = report.counts
    assert (c.num_drafts, c.num_draft_tokens, c.num_accepted_tokens) == (13, 39, 1)
    assert c.accepted_per_pos == [1, 0, 0] and report.requests == 6
