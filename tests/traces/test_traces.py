"""Trace importers, generator and stats: conversions, seeded statistics, FILE:LINE errors."""
import json
from pathlib import Path

import numpy as np
import pytest

from dspark_sim.cli import main
from dspark_sim.errors import InputError
from dspark_sim.traces import load_trace
from dspark_sim.traces.generate import (ArrivalModel, EmpiricalLengths, LognormalLengths,
                                        generate_trace, parse_task_mix)
from dspark_sim.traces.importers import detect_format, import_trace, read_any
from dspark_sim.traces.stats import trace_stats
from tests.shared_data import SHARED

AZURE = SHARED / "traces" / "azure-llm-2023"
REPO = Path(__file__).resolve().parents[2]


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_azure_import(tmp_path):
    p = write(tmp_path, "az.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                                  "2023-11-16 18:15:46.6805900,374,44\n"
                                  "2023-11-16 18:15:50.9951690,396,109\n")
    imp = import_trace("azure", p, task="chat")
    t = imp.trace
    assert t.arrival_s.tolist() == pytest.approx([0.0, 4.314579])
    assert t.prompt_tokens.tolist() == [374, 396] and t.output_tokens.tolist() == [44, 109]
    assert list(t.task) == ["chat", "chat"] and list(t.ids) == ["2", "3"]


@pytest.mark.skipif(not AZURE.exists(), reason="shared Azure samples not present")
def test_azure_conversation_hour_statistics():
    t = import_trace("azure", AZURE / "AzureLLMInferenceTrace_conv.csv").trace
    s = trace_stats(t)
    assert s["requests"] == 19366
    assert s["rate_per_s"] == pytest.approx(5.53, abs=0.01)
    assert s["cv_gaps"] == pytest.approx(1.09, abs=0.01)
    assert s["prompt_tokens"]["mean"] == pytest.approx(1155, abs=1)
    assert s["output_tokens"]["mean"] == pytest.approx(211, abs=1)


@pytest.mark.parametrize("text, line, field", [
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,374,44\nnot-a-time,3,4\n", 3, "TIMESTAMP"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,3.5,44\n", 2, "ContextTokens"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,3,-1\n", 2, "GeneratedTokens"),
    ("TIMESTAMP,ContextTokens\n2023-11-16 18:15:46,3\n", 1, "GeneratedTokens"),
    ("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,3\n", 2, "GeneratedTokens"),
])
def test_azure_bad_rows(tmp_path, text, line, field):
    p = write(tmp_path, "az.csv", text)
    with pytest.raises(InputError) as err:
        import_trace("azure", p)
    assert (err.value.line, err.value.field) == (line, field)
    assert str(err.value).startswith(f"{p}:{line}: field '{field}'")


BURST = ("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
         "5,ChatGPT,472,18,490,Conversation log\n"
         "45,ChatGPT,1087,0,1087,Conversation log\n"        # failed request: skipped
         "118,GPT-4,417,30,447,API log\n")


def test_burstgpt_import_skips_failed_requests(tmp_path):
    imp = import_trace("burstgpt", write(tmp_path, "b.csv", BURST))
    assert imp.skipped_zero == 1
    assert imp.trace.arrival_s.tolist() == [0.0, 113.0]
    assert imp.trace.prompt_tokens.tolist() == [472, 417]


def test_burstgpt_bad_row(tmp_path):
    p = write(tmp_path, "b.csv", BURST + "x,GPT-4,1,1,2,API log\n")
    with pytest.raises(InputError) as err:
        import_trace("burstgpt", p)
    assert (err.value.line, err.value.field) == (5, "Timestamp")


def test_mooncake_import_and_errors(tmp_path):
    good = ('{"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [1, 2]}\n'
            '{"timestamp": 30535, "input_length": 6472, "output_length": 26, "hash_ids": [3]}\n')
    t = import_trace("mooncake", write(tmp_path, "m.jsonl", good)).trace
    assert t.arrival_s.tolist() == pytest.approx([0.0, 3.053])
    assert detect_format(tmp_path / "m.jsonl") == "mooncake"
    bad = write(tmp_path, "bad.jsonl", good + '{"timestamp": 1, "input_length": "x", "output_length": 2}\n')
    with pytest.raises(InputError) as err:
        import_trace("mooncake", bad)
    assert (err.value.line, err.value.field) == (3, "input_length")


def test_generator_is_seeded_and_matches_its_parameters():
    model = ArrivalModel(rate=20.0, kind="gamma", cv=3.0)
    mix = parse_task_mix("chat=0.5,code=0.3,math=0.2")
    a = generate_trace(model, LognormalLengths(800, 1.2), LognormalLengths(100, 0.8), mix, seed=4,
                       duration_s=2000)
    b = generate_trace(model, LognormalLengths(800, 1.2), LognormalLengths(100, 0.8), mix, seed=4,
                       duration_s=2000)
    assert a.to_frame().equals(b.to_frame())
    s = trace_stats(a)
    assert s["rate_per_s"] == pytest.approx(20.0, rel=0.1)
    assert s["cv_gaps"] == pytest.approx(3.0, rel=0.15)
    assert s["prompt_tokens"]["mean"] == pytest.approx(800, rel=0.05)
    assert s["output_tokens"]["mean"] == pytest.approx(100, rel=0.05)
    assert s["tasks"]["chat"] / s["requests"] == pytest.approx(0.5, abs=0.02)
    assert a.arrival_s.max() < 2000


def test_poisson_count_and_diurnal_modulation():
    model = ArrivalModel(rate=10.0, diurnal_amplitude=0.5, diurnal_period_s=1000.0)
    t = generate_trace(model, LognormalLengths(100, 0.5), LognormalLengths(10, 0.5), {"chat": 1.0},
                       seed=1, count=20_000)
    assert len(t) == 20_000
    phase = (t.arrival_s % 1000.0) / 1000.0
    high = ((phase > 0.15) & (phase < 0.35)).sum()     # around the sine's peak (t = 250 s)
    low = ((phase > 0.65) & (phase < 0.85)).sum()      # around its trough (t = 750 s)
    assert high / low == pytest.approx(1.5 / 0.5, rel=0.2)


def test_empirical_lengths_follow_the_source():
    rng = np.random.default_rng(0)
    source = np.concatenate([rng.integers(10, 20, 5000), rng.integers(400, 500, 5000)])   # bimodal
    lengths = EmpiricalLengths.fit(source).sample(np.random.default_rng(1), 20_000)
    for q in (10, 25, 75, 90):
        assert np.percentile(lengths, q) == pytest.approx(np.percentile(source, q), rel=0.05, abs=1.5)
    assert ((lengths > 20) & (lengths < 400)).mean() < 0.02
    assert lengths.min() >= 10 and lengths.max() <= 500


def test_trace_cli_generate_import_stats(tmp_path, capsys):
    out = tmp_path / "g.jsonl"
    args = ["trace", "generate", "--out", str(out), "--count", "500", "--rate", "4",
            "--arrivals", "gamma", "--cv", "2", "--tasks", "code=3,chat=1", "--seed", "9"]
    assert main(args) == 0
    first = out.read_bytes()
    assert main(args) == 0 and out.read_bytes() == first            # same seed, same bytes
    assert len(load_trace(out)) == 500
    src = write(tmp_path, "b.csv", BURST)
    conv = tmp_path / "b.jsonl"
    assert main(["trace", "import", "burstgpt", str(src), "--out", str(conv), "--task", "chat"]) == 0
    assert "skipped 1" in capsys.readouterr().out
    assert main(["trace", "generate", "--out", str(tmp_path / "e.jsonl"), "--duration", "60",
                 "--lengths-from", str(conv)]) == 0
    assert set(load_trace(tmp_path / "e.jsonl").output_tokens) <= set(range(18, 31))
    capsys.readouterr()
    assert main(["trace", "stats", "--json", str(out)]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["requests"] == 500 and set(stats["tasks"]) == {"code", "chat"}
    assert main(["trace", "stats", str(out), str(conv)]) == 0
    assert "CV of gaps" in capsys.readouterr().out


@pytest.mark.parametrize("args, field", [
    (["--count", "5", "--duration", "5"], "duration"),
    (["--count", "5", "--rate", "0"], "rate"),
    (["--count", "5", "--tasks", "chat=-1"], "tasks"),
    (["--count", "5", "--arrivals", "weibull"], "arrivals"),
    (["--count", "5", "--diurnal-amplitude", "1.5"], "diurnal-amplitude"),
])
def test_generate_bad_options(tmp_path, capsys, args, field):
    out = tmp_path / "g.jsonl"
    assert main(["trace", "generate", "--out", str(out)] + args) == 2
    assert f"field '{field}'" in capsys.readouterr().err
    assert not out.exists()


def test_import_bad_row_exit_2_nothing_written(tmp_path, capsys):
    src = write(tmp_path, "az.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46,3,x\n")
    out = tmp_path / "o.jsonl"
    assert main(["trace", "import", "azure", str(src), "--out", str(out)]) == 2
    assert f"{src}:2: field 'GeneratedTokens'" in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize("name", sorted(p.name for p in (REPO / "traces").glob("*.jsonl")))
def test_shipped_traces_load(name):
    t = read_any(REPO / "traces" / name)
    # the hour-long traces carry production volume; the validation traces are sized for the
    # real engine on this CPU (docs/serving.md)
    assert len(t) > (10 if name.startswith("validate-") else 1000)


def test_slice_keeps_shared_content_unless_prompts_are_rescaled(tmp_path, capsys):
    src, kept, scaled = tmp_path / "mt.jsonl", tmp_path / "kept.jsonl", tmp_path / "scaled.jsonl"
    assert main(["trace", "generate", "--multi-turn", "chat", "--rate", "1", "--duration", "20",
                 "--out", str(src)]) == 0
    assert main(["trace", "slice", str(src), "--out", str(kept)]) == 0
    assert load_trace(kept).has_prefixes and "dropped" not in capsys.readouterr().err
    assert main(["trace", "slice", str(src), "--prompt-scale", "0.5", "--out", str(scaled)]) == 0
    assert not load_trace(scaled).has_prefixes
    assert "shared-content fields (conversation, hash_ids) were dropped" in capsys.readouterr().err
