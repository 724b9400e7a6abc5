"""Bad files of the real-model and engine commands: drafter checkpoint configs, self-distillation
shards, prompt files, calibration rollouts, vLLM records / scrapes / task maps, AIPerf exports,
observation files of `profile fit`, model configs of `roofline`."""
from __future__ import annotations

import io
import json

import numpy as np

from .cases_traces import GOOD_TRACE
from .kit import Case, changed, lines

CONFIG = {"kind": "dspark", "hidden_size": 576, "num_heads": 9, "num_kv_heads": 3, "head_dim": 64,
          "intermediate_size": 1536, "vocab_size": 49152, "num_target_layers": 30,
          "rms_norm_eps": 1e-05, "rope_theta": 100000.0, "num_layers": 2, "taps": [1, 8, 14, 20, 27],
          "gamma": 7, "draft_vocab": 8192, "seq_head": "markov", "seq_rank": 64, "confidence": True,
          "target": "SmolLM2-135M-Instruct", "target_fingerprint": "cb8e331441b10cf4",
          "sts": {"0.0": [1.0] * 7}}


def _config(**changes) -> tuple[str, int]:
    """config.json text (one key per line) with changes, and the line of the first changed key."""
    text = _dump_config(changed(CONFIG, **changes))
    key = next(iter(changes))
    return text, _key_line(text, key)


def _dump_config(doc: dict) -> str:
    """JSON with one key per line (values on their key's line)."""
    return "{\n" + ",\n".join(f" {json.dumps(k)}: {json.dumps(v)}" for k, v in doc.items()) + "\n}\n"


def _key_line(text: str, key: str) -> int:
    hit = [i for i, ln in enumerate(text.splitlines(), 1) if ln.strip().startswith(f'"{key}"')]
    return hit[0] if hit else 1


CONFIG_DEFECTS = [(name, *_config(**ch), field) for name, ch, field in [
    ("kind-unknown", {"kind": "medusa"}, "kind"),
    ("kind-number", {"kind": 3}, "kind"),
    ("hidden-size-string", {"hidden_size": "576"}, "hidden_size"),
    ("hidden-size-zero", {"hidden_size": 0}, "hidden_size"),
    ("num-layers-float", {"num_layers": 2.5}, "num_layers"),
    ("gamma-zero", {"gamma": 0}, "gamma"),
    ("unknown-field", {"dropout": 0.1}, "dropout"),
    ("missing-field", {"vocab_size": None}, "vocab_size"),
    ("taps-strings", {"taps": ["a", "b"]}, "taps[0]"),
    ("seq-head-unknown", {"seq_head": "lstm"}, "seq_head"),
    ("confidence-string", {"confidence": "yes"}, "confidence"),
    ("eps-negative", {"rms_norm_eps": -1.0}, "rms_norm_eps"),
    ("sts-not-lists", {"sts": {"0.0": "cold"}}, "sts.0.0"),
]] + [("invalid-json", _dump_config(CONFIG).replace('"gamma": 7,', '"gamma": 7'),
       _key_line(_dump_config(CONFIG), "gamma") + 1, None),
      ("top-level-list", "[1, 2]\n", 1, "(document)")]


def _npz(**arrays) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


_META = {"drafter": "dspark", "target": "embedded", "temperature": 0.0, "gamma": 3, "seed": 0}
_Z = np.zeros((4, 3), dtype=np.float32)
_ACC = np.array([3, 1, 0, 2], dtype=np.int16)
ROLLOUT_DEFECTS = [
    ("garbage", b"this is not an npz file\n", "--rollouts"),
    ("missing-z", _npz(accepted=_ACC, steps_per_request=np.array([4]), meta=np.array(json.dumps(_META))),
     "z"),
    ("count-mismatch", _npz(z=_Z, accepted=_ACC, steps_per_request=np.array([5]),
                            meta=np.array(json.dumps(_META))), "steps_per_request"),
    ("meta-not-json", _npz(z=_Z, accepted=_ACC, steps_per_request=np.array([4]), meta=np.array("{oops")),
     "meta"),
    ("meta-missing-gamma", _npz(z=_Z, accepted=_ACC, steps_per_request=np.array([4]),
                                meta=np.array(json.dumps({k: v for k, v in _META.items() if k != "gamma"}))),
     "meta.gamma"),
    ("meta-list", _npz(z=_Z, accepted=_ACC, steps_per_request=np.array([4]), meta=np.array("[1]")),
     "meta"),
    ("z-one-dimensional", _npz(z=np.zeros(4), accepted=_ACC, steps_per_request=np.array([4]),
                               meta=np.array(json.dumps(_META))), "z"),
    ("z-wrong-width", _npz(z=np.zeros((4, 5)), accepted=_ACC, steps_per_request=np.array([4]),
                           meta=np.array(json.dumps(_META))), "z"),
]

SHARD = [{"id": "p-1", "task": "chat", "temperature": 0.0, "prompt_ids": [1, 2, 3], "response_ids": [4, 5]},
         {"id": "p-2", "task": "math", "temperature": 1.0, "prompt_ids": [6, 7], "response_ids": [8]}]


def _shard2(**changes) -> str:
    return lines(SHARD[0], changed(SHARD[1], **changes))


SHARD_DEFECTS = [
    ("not-json", lines(SHARD[0], '{"id": "p-2", '), 2, None),
    ("row-list", lines(SHARD[0], "[1, 2]"), 2, None),
    ("prompt-ids-missing", _shard2(prompt_ids=None), 2, "prompt_ids"),
    ("prompt-ids-strings", _shard2(prompt_ids=["a", "b"]), 2, "prompt_ids"),
    ("response-ids-negative", _shard2(response_ids=[-4]), 2, "response_ids"),
    ("prompt-ids-empty", _shard2(prompt_ids=[]), 2, "prompt_ids"),
    ("temperature-text", _shard2(temperature="hot"), 2, "temperature"),
    ("id-missing", _shard2(id=None), 2, "id"),
]

PROMPT_DEFECTS = [
    ("no-prompt", lines({"prompt": "hi"}, {"answer": "x"}), 2, "prompt"),
    ("prompt-empty", lines({"prompt": "  "}), 1, "prompt"),
    ("task-number", lines({"prompt": "hi", "task": 3}), 1, "task"),
    ("not-json", lines({"prompt": "hi"}, "{prompt"), 2, None),
    ("not-utf8", b'{"prompt": "hi"}\n{"prompt": "\xff"}\n', 2, None),
]

AIPERF_META = {"conversation_id": "a", "credit_issued_ns": 1000, "request_start_ns": 1000}
AIPERF_METRICS = {"usage_prompt_tokens": {"value": 12}, "usage_completion_tokens": {"value": 6},
                  "time_to_first_token": {"value": 5.0}, "request_latency": {"value": 50.0}}
AIPERF_DEFECTS = [
    ("credit-missing", lines({"metadata": {"conversation_id": "a"}, "metrics": AIPERF_METRICS}), 1,
     "metadata.credit_issued_ns", False),
    ("metadata-list", lines({"metadata": [1], "metrics": AIPERF_METRICS}), 1,
     "metadata.credit_issued_ns", False),
    ("usage-zero", lines({"metadata": AIPERF_META, "metrics": {**AIPERF_METRICS,
                                                               "usage_completion_tokens": {"value": 0}}}),
     1, "metrics.usage_completion_tokens", False),
    ("metric-text", lines({"metadata": AIPERF_META, "metrics": {**AIPERF_METRICS,
                                                                "request_latency": {"value": "slow"}}}),
     1, "metrics.request_latency.value", True),
    ("start-text", lines({"metadata": {**AIPERF_META, "request_start_ns": "x"}, "metrics": AIPERF_METRICS}),
     1, "metadata.request_start_ns", True),
    ("metrics-list", lines({"metadata": AIPERF_META, "metrics": [1, 2]}), 1, "metrics", True),
    ("unknown-request", lines({"metadata": {**AIPERF_META, "conversation_id": "zz"},
                               "metrics": AIPERF_METRICS}), 1, "metadata.conversation_id", True),
    ("not-json", "{\n", 1, None, False),
]

OBS_CSV_HEAD = "batch_tokens,context_tokens,seconds\n"
MODEL_CONFIG = {"hidden_size": 1024, "num_hidden_layers": 4, "num_attention_heads": 8,
                "num_key_value_heads": 8, "intermediate_size": 2048, "vocab_size": 1000}


def misc_cases() -> list[Case]:
    tr = {"trace.jsonl": GOOD_TRACE}
    acc = ("--acceptance", "smollm2-135m-dspark-g7-t0")
    out = []
    for name, text, line, field in CONFIG_DEFECTS:
        files = {"ckpt/config.json": text, "ckpt/model.safetensors": b"\0"}
        out.append(Case(f"ckpt-generate-{name}", files,
                        ("generate", "--drafter", "{d}/ckpt", "--prompt", "hi"),
                        "ckpt/config.json", line, field))
    for name in ("hidden-size-string", "unknown-field", "invalid-json"):
        _, text, line, field = next(d for d in CONFIG_DEFECTS if d[0] == name)
        files = {**tr, "ckpt/config.json": text, "ckpt/model.safetensors": b"\0"}
        out.append(Case(f"ckpt-serve-{name}", files,
                        ("serve-replay", "{d}/trace.jsonl", "--drafter", "{d}/ckpt", *acc, "--out", "out"),
                        "ckpt/config.json", line, field))
        out.append(Case(f"ckpt-calibrate-{name}", files,
                        ("calibrate", "--drafter", "{d}/ckpt", "--report", "out", "--dry-run"),
                        "ckpt/config.json", line, field))
    out.append(Case("ckpt-no-config", {"ckpt/model.safetensors": b"\0"},
                    ("generate", "--drafter", "{d}/ckpt", "--prompt", "hi"), "ckpt", None, "--drafter"))
    for name, data, field in ROLLOUT_DEFECTS:
        out.append(Case(f"rollouts-{name}", {"rollouts.npz": data},
                        ("calibrate", "--rollouts", "{d}/rollouts.npz", "--report", "out", "--dry-run"),
                        "rollouts.npz", None, field))
    for name, text, line, field in SHARD_DEFECTS:
        out.append(Case(f"shard-{name}", {"data/shard-00000.jsonl": text},
                        ("train", "--drafter", "dspark", "--data", "{d}/data", "--out", "out", "--steps", "1"),
                        "data/shard-00000.jsonl", line, field))
    out.append(Case("shard-none", {}, ("train", "--drafter", "dspark", "--data", "{d}/data", "--out",
                                       "out", "--steps", "1"), "data", None, None, dirs=("data",)))
    for name, text, line, field in PROMPT_DEFECTS:
        out.append(Case(f"prompts-distill-{name}", {"p.jsonl": text},
                        ("distill", "--no-builtin", "--prompts", "{d}/p.jsonl", "--out", "out"),
                        "p.jsonl", line, field))
    for name in ("no-prompt", "not-utf8"):
        _, text, line, field = next(d for d in PROMPT_DEFECTS if d[0] == name)
        out.append(Case(f"prompts-measure-{name}", {"p.jsonl": text},
                        ("measure", "--tasks", "chat={d}/p.jsonl", "--out", "out.acceptance.json"),
                        "p.jsonl", line, field))
        out.append(Case(f"prompts-serve-{name}", {**tr, "p.jsonl": text},
                        ("serve-replay", "{d}/trace.jsonl", "--prompts", "chat={d}/p.jsonl", "--out", "out"),
                        "p.jsonl", line, field))
    rec_ok = lines({"metadata": {"conversation_id": "a"}, "metrics": {}})
    imp = ("acceptance", "import", "vllm")
    out += [
        Case("taskmap-list", {"rec.jsonl": rec_ok, "map.json": "[1, 2]\n"},
             (*imp, "{d}/rec.jsonl", "--task-map", "{d}/map.json", "--out", "out.json"), "map.json", 1, None),
        Case("taskmap-value-number", {"rec.jsonl": rec_ok, "map.json": '{\n "a": "chat",\n "b": 4\n}\n'},
             (*imp, "{d}/rec.jsonl", "--task-map", "{d}/map.json", "--out", "out.json"), "map.json", 3, "b"),
        Case("taskmap-invalid-json", {"rec.jsonl": rec_ok, "map.json": '{\n "a": chat\n}\n'},
             (*imp, "{d}/rec.jsonl", "--task-map", "{d}/map.json", "--out", "out.json"), "map.json", 2, None),
        Case("records-neither", {"rec.jsonl": lines({"id": 1}, {"foo": 2})},
             (*imp, "{d}/rec.jsonl", "--out", "out.json"), "rec.jsonl", 1, None),
        Case("records-usage-missing", {"rec.jsonl": lines({"choices": [], "usage": {}})},
             (*imp, "{d}/rec.jsonl", "--out", "out.json"), "rec.jsonl", 1, "usage.completion_tokens"),
        Case("records-not-json", {"rec.jsonl": "{\"choices\": [}\n"},
             (*imp, "{d}/rec.jsonl", "--out", "out.json"), "rec.jsonl", 1, None),
        Case("scrape-bad-line", {"m.prom": "# TYPE x counter\nvllm:spec_decode_num_drafts_total{a=\"b\" 3\n"},
             (*imp, "{d}/m.prom", "--out", "out.json"), "m.prom", 2, None),
        Case("scrape-truncated", {"m.prom": "vllm:spec_decode_num_drafts_total 3"},
             (*imp, "{d}/m.prom", "--out", "out.json"), "m.prom", 1, None),
        Case("scrape-not-utf8", {"m.prom": b"# HELP x \xff\n"},
             (*imp, "{d}/m.prom", "--out", "out.json"), "m.prom", 1, None),
    ]
    for name, text, line, field, with_trace in AIPERF_DEFECTS:
        files = {"export.jsonl": text, **(tr if with_trace else {})}
        argv = ("import-aiperf", "{d}/export.jsonl", "--out", "out") + \
            (("--trace", "{d}/trace.jsonl") if with_trace else ())
        out.append(Case(f"aiperf-{name}", files, argv, "export.jsonl", line, field))
    fit = ("profile", "fit")
    out += [
        Case("obs-csv-cells", {"obs.csv": OBS_CSV_HEAD + "1,0,0.01\n8,0\n"},
             (*fit, "{d}/obs.csv", "--out", "out.yaml"), "obs.csv", 3, None),
        Case("obs-csv-seconds-text", {"obs.csv": OBS_CSV_HEAD + "1,0,0.01\n8,0,slow\n"},
             (*fit, "{d}/obs.csv", "--out", "out.yaml"), "obs.csv", 3, "seconds"),
        Case("obs-csv-unknown-field", {"obs.csv": "batch_tokens,seconds,color\n1,0.01,red\n"},
             (*fit, "{d}/obs.csv", "--out", "out.yaml"), "obs.csv", 2, "color"),
        Case("obs-yaml-schema", {"obs.yaml": "schema: nope\nstep_points: []\n"},
             (*fit, "{d}/obs.yaml", "--out", "out.yaml"), "obs.yaml", 1, "schema"),
        Case("obs-yaml-not-utf8", {"obs.yaml": b"schema: \xff\n"},
             (*fit, "{d}/obs.yaml", "--out", "out.yaml"), "obs.yaml", 1, None),
    ]
    for name, change, field in (("hidden-missing", {"hidden_size": None}, "hidden_size"),
                                ("layers-string", {"num_hidden_layers": "4"}, "num_hidden_layers"),
                                ("heads-zero", {"num_attention_heads": 0}, "num_attention_heads")):
        doc = {k: v for k, v in {**MODEL_CONFIG, **change}.items() if v is not None}
        text = json.dumps(doc, indent=1) + "\n"
        hit = [i for i, ln in enumerate(text.splitlines(), 1) if f'"{field}"' in ln]
        out.append(Case(f"model-config-{name}", {"config.json": text},
                        ("roofline", "--model", "{d}/config.json", "--gpu", "h200", "--out", "out.yaml"),
                        "config.json", hit[0] if hit else 1, field))
    out.append(Case("model-config-invalid-json", {"config.json": '{\n "hidden_size": 10,\n}\n'},
                    ("roofline", "--model", "{d}/config.json", "--gpu", "h200", "--out", "out.yaml"),
                    "config.json", 3, None))
    return out
