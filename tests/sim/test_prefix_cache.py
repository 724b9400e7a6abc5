"""Prefix caching (`--kv-semantics blocks --prefix-caching`, sim/kv/prefix.py): token and request
conservation with shared content (every policy, tight pools with preemption), byte-identical
results when nothing is shared, a hand-computed cache hit, the LRU eviction order, the trace
fields' bad-input errors, the multi-turn generator and the vLLM replay's shared prompt ids."""
import hashlib
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from simkit import make_trace, table_hw
from test_conservation import check_conservation, traces
from test_paged_kv import SCHEDULE
from test_paged_kv import scenarios as paged_scenarios

from dspark_sim.errors import InputError
from dspark_sim.serve.prompts import share_content
from dspark_sim.sim.cluster.run import Cluster, SimOutcome, simulate
from dspark_sim.sim.core.requests import DONE, RequestTable
from dspark_sim.sim.kv.prefix import PrefixPool
from dspark_sim.sim.kv.semantics import with_prefix_caching
from dspark_sim.traces.conversations import MultiTurn, generate_conversations
from dspark_sim.traces.importers import import_mooncake
from dspark_sim.traces.schema import Trace, load_trace, write_trace

RESULTS = ("replica", "first_token_ns", "finish_ns", "steps", "drafted", "verified", "accepted",
           "preemptions", "generated", "prefilled")


def _with_content(trace: Trace, conv, hashes, block) -> Trace:
    n = len(trace)
    c = np.empty(n, dtype=object)
    c[:] = conv
    h = np.empty(n, dtype=object)
    h[:] = hashes
    return Trace(trace.ids, trace.arrival_s, trace.prompt_tokens, trace.output_tokens, trace.task,
                 conversation=c, hash_ids=h, hash_block_tokens=np.asarray(block, dtype=np.int64))


@st.composite
def shared_traces(draw):
    """Random traces whose requests share system prompts (hash ids) and conversations."""
    trace = draw(traces())
    conv, hashes, block = [], [], []
    for p in trace.prompt_tokens.tolist():
        conv.append(draw(st.sampled_from([None, "a", "b"])))
        size = draw(st.sampled_from([0, 4, 16, 40]))
        real = size or 512
        most = -(-p // real)
        k = draw(st.integers(0, min(most, 3)))
        hashes.append(tuple(draw(st.lists(st.integers(0, 2), min_size=k, max_size=k))) if k else None)
        block.append(size if k else 0)
    return _with_content(trace, conv, hashes, block)


def scenarios(tight=False, shared=True):
    """test_paged_kv's scenarios, on traces with shared content (or, `shared=False`, without)."""
    return paged_scenarios(tight=tight, trace_strategy=shared_traces() if shared else traces())


def _run(sc, kv):
    return simulate(sc["trace"], sc["policy"], sc["hw"], sc["acc"], replicas=sc["replicas"],
                    router=sc["router"], seed=sc["seed"], kv_semantics=kv, schedule=SCHEDULE)


def _digests(out) -> dict:
    t = out.table
    d = {name: hashlib.sha256(np.ascontiguousarray(getattr(t, name), dtype="<i8").tobytes()).hexdigest()
         for name in RESULTS}
    d["iterations"], d["preemptions"] = out.iterations, out.preemptions
    return d


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(tight=True), st.booleans())
def test_prefix_caching_conserves_requests_and_tokens(sc, tight):
    if not tight:
        sc["hw"].kv_capacity_tokens = None
    table = RequestTable(sc["trace"])
    cluster = Cluster(table, sc["replicas"], "round-robin", sc["hw"], sc["policy"], sc["acc"],
                      sc["seed"], kv_semantics="blocks+prefix", schedule=SCHEDULE)
    cluster.run()
    check_conservation(sc, SimOutcome(table, 0, 0.0))
    assert (table.phase == DONE).all()
    for rep in cluster.replicas:          # every block back in the pool, none still referenced
        pool = rep.sched.pool
        assert pool.free_blocks == pool.num_blocks and not pool.held and not pool._ref
        assert len(pool._lru) + pool._fresh == pool.num_blocks
        assert all(pool._chain_of[blk] == cid for cid, blk in pool._cached.items())
        assert not rep.sched.waiting and not rep.sched.prefilling and not rep.decoders


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(shared=False))
def test_nothing_shared_is_byte_identical_to_caching_off(sc):
    sc["hw"].kv_capacity_tokens = None    # no preemption: a recompute would hit its own blocks
    off = _run(sc, "blocks")
    on = _run(sc, "blocks+prefix")
    assert _digests(on) == _digests(off)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(tight=True, shared=False))
def test_nothing_shared_and_no_preemption_is_identical_on_tight_pools(sc):
    off = _run(sc, "blocks")
    if off.preemptions == 0:   # else a recomputed request reuses its own cached blocks, as in vLLM
        assert _digests(_run(sc, "blocks+prefix")) == _digests(off)


def _linear_hw(**limits):
    # 10 ms + 1 ms per token of the step
    return table_hw([1, 1001], [0.010, 1.010], max_batch_tokens=2000, kv_block_size=16, **limits)


@pytest.mark.parametrize("second_prompt, shared", [(80, 64), (64, 48)])
def test_a_shared_prefix_shortens_the_second_prefill_by_its_full_blocks(second_prompt, shared):
    """A (100-token prompt) and B share a 64-token system prompt (4 blocks of 16); B arrives after
    A finished. B prefills `second_prompt - shared` tokens instead of all (when its whole prompt
    is cached, one block is computed again: at least one token is computed)."""
    base = make_trace([0.0, 1.0], [100, second_prompt], [2, 2])
    trace = _with_content(base, [None, None], [(7, 1), (7,)], [64, 64])
    hw = _linear_hw()
    off = simulate(trace, "ar", hw, None, kv_semantics="blocks")
    on = simulate(trace, "ar", hw, None, kv_semantics="blocks+prefix")
    step_ns = lambda tokens: round((0.010 + (tokens - 1) * 0.001) * 1e9)   # noqa: E731
    ttft = lambda out: int(out.table.first_token_ns[1] - out.table.arrival_ns[1])  # noqa: E731
    assert ttft(off) == step_ns(second_prompt)
    assert ttft(on) == step_ns(second_prompt - shared)
    assert on.prefix_cached_tokens == shared
    assert on.table.first_token_ns[0] == off.table.first_token_ns[0]   # A found nothing cached


def test_a_conversation_turn_hits_its_predecessors_prompt():
    base = make_trace([0.0, 5.0], [40, 90], [10, 5])
    trace = _with_content(base, ["c", "c"], [None, None], [0, 0])
    on = simulate(trace, "ar", _linear_hw(), None, kv_semantics="blocks+prefix")
    assert on.prefix_cached_tokens == 32      # turn 1's prompt: two full blocks (its answer is its own)


def _pool(blocks, prompts, block_size=4):
    trace = make_trace([0.0] * len(prompts), prompts, [1] * len(prompts))
    table = RequestTable(trace)
    return PrefixPool(table, blocks * block_size, block_size), table


def test_lru_eviction_takes_fresh_blocks_first_then_the_least_recently_freed():
    pool, _ = _pool(6, [9, 9, 12])
    for rid in (0, 1):
        assert pool.admit(rid, 9) == 0
        pool.grow(rid, 8)                        # 2 full blocks each, cached
    assert pool.cached_blocks() == 4
    pool.free([0])                               # A's blocks: tail A1, A0 (reverse order)
    pool.free([1])                               # then B1, B0
    assert list(pool._lru) == [1, 0, 3, 2]
    assert pool.admit(2, 12) == 0
    pool.grow(2, 12)                             # 3 blocks: the 2 never used, then A's last block
    assert pool._blocks[2] == [4, 5, 1]
    assert pool.hits(0, 9) == [0]                # A's first block is still cached, its second not
    assert pool.hits(1, 9) == [2, 3]             # B untouched
    assert pool.admit(1, 9) == 8 and pool.free_blocks == 1   # B's free blocks leave the queue


def test_a_hit_needs_room_for_the_rest_of_the_input():
    pool, _ = _pool(4, [9, 8])
    pool.admit(0, 9)
    pool.grow(0, 9)                              # blocks 0, 1, 2; the 2 full ones cached
    pool.free([0])                               # free queue: 2, 1, 0; one block never used
    assert pool.admit(1, 8) == 0
    pool.grow(1, 8)                              # the never-used block 3, then block 2 (uncached)
    assert pool.hits(0, 9) == [0, 1] and pool.free_blocks == 2
    assert pool.admit(0, 9) is None              # 2 free hits + 1 new block > 2 free blocks
    pool.free([1])
    assert pool.admit(0, 9) == 8                 # now they fit


@pytest.mark.parametrize("line, field", [
    ({"conversation": ""}, "conversation"),
    ({"hash_ids": [1, True]}, "hash_ids"),
    ({"hash_ids": [1, 2, 3]}, "hash_ids"),                   # 3 blocks of 512 > 100 tokens
    ({"hash_ids": [1], "hash_block_tokens": 0}, "hash_block_tokens"),
    ({"hash_block_tokens": 16}, "hash_block_tokens"),
])
def test_a_bad_content_field_names_file_line_and_field(tmp_path, line, field):
    path = tmp_path / "t.jsonl"
    rec = {"arrival_s": 0.0, "prompt_tokens": 100, "output_tokens": 5}
    path.write_text(json.dumps(rec) + "\n" + json.dumps({**rec, **line}) + "\n")
    with pytest.raises(InputError) as err:
        load_trace(path)
    assert f"{path}:2" in str(err.value) and field in str(err.value)


def test_mooncake_hash_ids_import_and_round_trip(tmp_path):
    src = tmp_path / "m.jsonl"
    src.write_text('{"timestamp": 0, "input_length": 1100, "output_length": 3, "hash_ids": [0, 1, 2]}\n'
                   '{"timestamp": 10, "input_length": 600, "output_length": 3, "hash_ids": [0, 4]}\n'
                   '{"timestamp": 20, "input_length": 60, "output_length": 3}\n')
    trace = import_mooncake(src).trace
    assert list(trace.hash_ids) == [(0, 1, 2), (0, 4), None]
    write_trace(tmp_path / "t.jsonl", trace)
    back = load_trace(tmp_path / "t.jsonl")
    assert list(back.hash_ids) == [(0, 1, 2), (0, 4), None]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"timestamp": 0, "input_length": 100, "output_length": 3, "hash_ids": [0, 1]}\n')
    with pytest.raises(InputError, match="hash_ids"):
        import_mooncake(bad)


def test_multi_turn_turns_extend_one_another_and_caching_shortens_ttft(tmp_path):
    shape = MultiTurn(turns=4, think_s=5.0, system_tokens=64, message_mean=40, output_mean=20)
    trace = generate_conversations(np.arange(6) * 2.0, shape, "chat", seed=1)
    write_trace(tmp_path / "mt.jsonl", trace)
    back = load_trace(tmp_path / "mt.jsonl")
    last = {}
    for i in range(len(back)):
        c, p = back.conversation[i], int(back.prompt_tokens[i])
        assert back.hash_ids[i] == (0,) and back.hash_block_tokens[i] == 64
        if c in last:
            assert p > last[c]                   # the last prompt + answer + a new message
        last[c] = p + int(back.output_tokens[i])
    hw = _linear_hw()
    off = simulate(back, "ar", hw, None, kv_semantics="blocks")
    on = simulate(back, "ar", hw, None, kv_semantics="blocks+prefix")
    ttft = lambda o: (o.table.first_token_ns - o.table.arrival_ns).mean()   # noqa: E731
    assert on.prefix_cached_tokens > 64 * (len(back) - 1) and ttft(on) < ttft(off)


def test_prefix_caching_needs_paged_kv():
    assert with_prefix_caching("blocks", True) == "blocks+prefix"
    assert with_prefix_caching("reserve", False) == "reserve"
    with pytest.raises(InputError, match="--kv-semantics blocks"):
        with_prefix_caching("reserve", True)


def test_vllm_prompts_share_what_the_trace_says():
    base = make_trace([0, 1, 2, 3], [10, 14, 12, 6], [1, 1, 1, 1])
    trace = _with_content(base, ["c", "c", None, "d"], [(5,), (5,), (5,), None], [4, 4, 4, 0])
    prompts = [[100 * i + k for k in range(n)] for i, n in enumerate([10, 14, 12, 6])]
    out = share_content(prompts, trace)
    assert all(p[:4] == out[0][:4] for p in out[:3])          # the hash block
    assert out[1][:10] == out[0] and out[1][10:] == prompts[1][10:]   # the conversation's stream
    assert out[2][4:] == prompts[2][4:] and out[3] == prompts[3]
    assert share_content(prompts, base) is prompts


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(tight=True), st.booleans(), st.sampled_from(["blocks", "blocks+prefix"]))
def test_the_loop_engine_equals_the_reference_on_paged_kv(sc, tight, kv):
    """Paged KV on the fast loop engine, with preemption, with and without prefix caching: every
    per-request result, the iteration and the preemption counts equal the reference engine's."""
    if not tight:
        sc["hw"].kv_capacity_tokens = None
    args = dict(replicas=sc["replicas"], router=sc["router"], seed=sc["seed"], kv_semantics=kv,
                schedule=SCHEDULE)
    try:
        loop = simulate(sc["trace"], sc["policy"], sc["hw"], sc["acc"], engine="loop", **args)
    except InputError:            # a policy the loop engine does not run (decided per iteration)
        return
    ref = simulate(sc["trace"], sc["policy"], sc["hw"], sc["acc"], engine="reference", **args)
    assert _digests(loop) == _digests(ref)


def test_prefix_caching_runs_on_the_loop_and_reference_engines():
    trace = make_trace([0.0], [10], [2])
    with pytest.raises(InputError, match="prefix-caching"):
        simulate(trace, "ar", _linear_hw(), None, engine="block", kv_semantics="blocks+prefix")
    for engine in ("fast", "loop", "reference"):
        assert simulate(trace, "ar", _linear_hw(), None, engine=engine,
                        kv_semantics="blocks+prefix").iterations == 2


def test_a_partitioned_replay_counts_the_cached_tokens_of_every_replica():
    from dspark_sim.sim.cluster.partition import simulate_partitioned
    shape = MultiTurn(turns=4, think_s=5.0, system_tokens=64, message_mean=40, output_mean=20)
    trace = generate_conversations(np.arange(8) * 2.0, shape, "chat", seed=2)
    hw = _linear_hw()
    whole = simulate(trace, "ar", hw, None, replicas=2, router="rr", kv_semantics="blocks+prefix")
    parts = simulate_partitioned(trace, "ar", hw, None, replicas=2, router="rr",
                                 kv_semantics="blocks+prefix", executor="inline")
    assert whole.prefix_cached_tokens > 0
    assert parts.prefix_cached_tokens == whole.prefix_cached_tokens
    assert (parts.table.first_token_ns == whole.table.first_token_ns).all()
