"""The vLLM room without vLLM: policies -> speculative configs, server arguments, loopback
only, vLLM's iteration log, AIPerf's Mooncake input and per-request export."""
import json
from pathlib import Path

import numpy as np
import pytest
from tests.strict_json import register_input

from dspark_sim.errors import InputError
from dspark_sim.traces.schema import Trace
from dspark_sim.vllm.aiperf import mooncake_lines, read_export
from dspark_sim.vllm.client import check_loopback
from dspark_sim.vllm.iterations import kv_capacity_tokens, parse_iterations, vllm_version
from dspark_sim.vllm.runtime import (ServerSpec, neutral_model_path, parse_drafter,
                                     policy_spec_tokens, speculative_config)

DATA = Path(__file__).parent / "data"


def test_policies_map_to_num_speculative_tokens():
    assert [policy_spec_tokens(p) for p in ("ar", "mtp1", "static-3", "static-12")] == [0, 1, 3, 12]
    for bad in ("dspark", "static-0", "static-x", "goodput"):
        with pytest.raises(InputError):
            policy_spec_tokens(bad)
    ngram = parse_drafter("ngram")
    assert ngram == {"method": "ngram", "prompt_lookup_min": 1, "prompt_lookup_max": 4}
    assert speculative_config("ar", ngram) is None
    assert speculative_config("static-4", parse_drafter("ngram:2-3")) == {
        "method": "ngram", "prompt_lookup_min": 2, "prompt_lookup_max": 3, "num_speculative_tokens": 4}
    assert parse_drafter('{"method": "draft_model", "model": "/m", "num_speculative_tokens": 9}') == \
        {"method": "draft_model", "model": "/m"}
    for bad in ("ngram:3-2", "ngram:x", "medusa", "{not json", '{"model": "/m"}'):
        with pytest.raises(InputError):
            parse_drafter(bad)


def test_server_arguments_listen_on_loopback_with_metrics():
    spec = ServerSpec(model="/m", speculative={"method": "ngram", "num_speculative_tokens": 2},
                      max_num_seqs=8, max_num_batched_tokens=256)
    args = spec.args(8123)
    assert args[args.index("--host") + 1] == "127.0.0.1" and args[args.index("--port") + 1] == "8123"
    assert json.loads(args[args.index("--speculative-config") + 1])["num_speculative_tokens"] == 2
    assert args[args.index("--per-request-spec-decode-metrics") + 1] == "detailed"
    assert "--no-enable-prefix-caching" in args and "--enforce-eager" in args
    assert "--speculative-config" not in ServerSpec(model="/m").args(1)


def test_only_loopback_urls_are_served_to():
    assert check_loopback("http://127.0.0.1:8000") == ("127.0.0.1", 8000)
    assert check_loopback("http://localhost:9") == ("localhost", 9)
    for bad in ("http://10.0.0.2:8000", "http://192.168.1.5", "https://127.0.0.1:1", "http://example.com"):
        with pytest.raises(InputError):
            check_loopback(bad)


def test_a_draft_model_path_naming_dspark_gets_a_neutral_link(tmp_path):
    model = tmp_path / "dspark-sim" / "models" / "small"
    model.mkdir(parents=True)
    link = Path(neutral_model_path(str(model), tmp_path))
    assert "dspark" not in str(link).lower().replace(str(tmp_path).lower(), "")
    assert link.resolve() == model.resolve()
    assert neutral_model_path("/no/such/dspark/dir", tmp_path) == "/no/such/dspark/dir"


def test_iteration_log_lines_are_read():
    text = (DATA / "iteration-log.txt").read_text()
    it = parse_iterations(text)
    assert len(it) == 6 and list(it.columns[:6]) == ["iteration", "ctx_requests", "ctx_tokens",
                                                     "gen_requests", "gen_tokens", "elapsed_ms"]
    assert (it.batch_tokens == it.ctx_tokens + it.gen_tokens).all() and (it.elapsed_ms > 0).all()
    assert kv_capacity_tokens(text) == 46592 and vllm_version(text) == "0.32.0"
    assert parse_iterations("nothing here").empty


def _trace(ids, arrivals, outputs):
    n = len(ids)
    return Trace(ids=np.array(ids, dtype=object), arrival_s=np.array(arrivals, dtype=float),
                 prompt_tokens=np.full(n, 4, dtype=np.int64), output_tokens=np.array(outputs, dtype=np.int64),
                 task=np.array(["math"] * n, dtype=object))


def test_mooncake_input_sends_exact_token_prompts_on_the_schedule():
    tr = _trace(["a", "b"], [5.0, 5.25], [3, 7])
    lines = [json.loads(x) for x in mooncake_lines(tr, [[1, 2, 3, 4], [5, 6, 7, 8]], "m").splitlines()]
    assert [x["timestamp"] for x in lines] == [0.0, 250.0]
    assert [x["session_id"] for x in lines] == ["a", "b"]
    body = lines[1]["payload"]
    assert body["prompt"] == [5, 6, 7, 8] and body["max_tokens"] == body["min_tokens"] == 7
    assert body["ignore_eos"] and body["stream"] and body["temperature"] == 0.0


def test_aiperf_export_becomes_the_request_table():
    recs = [json.loads(x) for x in (DATA / "aiperf-export-3.jsonl").read_text().splitlines()]
    ids = [r["metadata"]["conversation_id"] for r in recs]
    outs = [int(r["metrics"]["usage_completion_tokens"]["value"]) for r in recs]
    tr = _trace(sorted(ids), [0.0, 0.05, 0.1], [outs[ids.index(i)] for i in sorted(ids)])
    frame, fidelity = read_export(DATA / "aiperf-export-3.jsonl", tr)
    assert list(frame["id"]) == sorted(ids) and fidelity["records"] == 3
    assert (frame["output_tokens"] == tr.output_tokens).all()
    spec = {r["metadata"]["conversation_id"]: r["spec_decode_acceptance"] for r in recs}
    for _, row in frame.iterrows():
        s = spec[row["id"]]
        assert row["accepted_tokens"] == s["num_accepted_draft_tokens"]
        assert row["drafted_tokens"] == s["num_draft_tokens"]
        assert row["steps"] == row["output_tokens"] - 1 - row["accepted_tokens"]
    assert (frame["finish_s"] > frame["first_token_s"]).all()
    assert (frame["first_token_s"] > frame["arrival_s"]).all()
    assert fidelity["send_error_s"]["median"] >= 0


def test_a_record_of_an_unknown_request_is_refused(tmp_path):
    bad = tmp_path / "export.jsonl"
    rec = json.loads((DATA / "aiperf-export-3.jsonl").read_text().splitlines()[0])
    rec["metadata"]["conversation_id"] = "zzz"
    bad.write_text(json.dumps(rec) + "\n{truncated")
    register_input(bad)
    with pytest.raises(InputError) as err:
        read_export(bad, _trace(["a"], [0.0], [3]))
    assert "export.jsonl:1" in str(err.value) and "conversation_id" in str(err.value)


def test_a_users_aiperf_export_is_imported_without_its_trace(tmp_path):
    from dspark_sim.cli import main

    out = tmp_path / "run"
    assert main(["import-aiperf", str(DATA / "aiperf-export-3.jsonl"), "--out", str(out)]) in (0, None)
    import pandas as pd
    frame = pd.read_csv(out / "requests.csv")
    summary = json.loads((out / "summary.json").read_text())
    assert len(frame) == 3 and summary["completed"] == 3 and frame["arrival_s"].min() == 0.0
    assert summary["replay_fidelity"]["output_tokens_differing"] == 0
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"metadata": {}}\n')
    assert main(["import-aiperf", str(bad), "--out", str(tmp_path / "x")]) == 2
    assert not (tmp_path / "x").exists()


def test_the_load_generator_keeps_off_the_workers_cores():
    import os

    from dspark_sim.vllm.runtime import spare_cpus

    assert spare_cpus(None) is None and spare_cpus(0) is None
    spare = spare_cpus(1)
    assert spare is None or (0 not in spare and spare <= os.sched_getaffinity(0))
    assert spare_cpus(10_000) is None


def test_a_batch_size_schedule_is_vllms_own_config():
    from dspark_sim.vllm.replay import read_schedule

    sched = read_schedule("[[1, 2, 4], [3, 16, 1]]", ["ar", "vllm-schedule"])
    cfg = speculative_config("vllm-schedule", parse_drafter("ngram"), sched)
    assert cfg["num_speculative_tokens"] == 4
    assert cfg["num_speculative_tokens_per_batch_size"] == [[1, 2, 4], [3, 16, 1]]
    assert policy_spec_tokens("vllm-schedule") == -1
    with pytest.raises(InputError):
        read_schedule(None, ["vllm-schedule"])
    with pytest.raises(InputError):
        read_schedule("[[1, 2, 4]]", ["static-2"])
    with pytest.raises(InputError):
        speculative_config("vllm-schedule", parse_drafter("ngram"), None)


def test_fresh_servers_interleave_the_policies_one_run_per_server():
    """With a server per run every policy's k-th run comes before any (k+1)-th, each policy
    leads once in turn; without, one server holds all of a policy's runs."""
    from dspark_sim.vllm.replay import run_order

    fresh = run_order(["ar", "static-2", "static-4"], 3, fresh_servers=True)
    assert all(len(g) == 1 for g in fresh)
    runs = [g[0] for g in fresh]
    assert runs == [("ar", 0), ("static-2", 0), ("static-4", 0), ("static-2", 1), ("static-4", 1),
                    ("ar", 1), ("static-4", 2), ("ar", 2), ("static-2", 2)]
    warm = run_order(["ar", "static-2"], 2, fresh_servers=False)
    assert warm == [[("ar", 0), ("ar", 1)], [("static-2", 0), ("static-2", 1)]]


def test_a_server_given_by_url_is_not_restarted_per_run(tmp_path):
    from dspark_sim.vllm.replay import VLLMSetup, serve_trace_vllm

    setup = VLLMSetup(python=Path("python"), aiperf=Path("aiperf"), base=ServerSpec(model="m"),
                      drafter={}, tokenizer="m", url="http://127.0.0.1:1")
    trace = Trace(ids=np.array(["a"], dtype=object), arrival_s=np.zeros(1), prompt_tokens=np.array([4]),
                  output_tokens=np.array([4]), task=np.array(["chat"], dtype=object))
    with pytest.raises(InputError, match="restarted"):
        serve_trace_vllm(trace, "t", ["ar"], [[1, 2, 3, 4]], setup, lambda p: tmp_path, 2,
                         fresh_servers=True)
