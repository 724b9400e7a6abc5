"""Clear errors on input that does not fit: a drafter checkpoint of another target's shape is
refused before any prompt runs (exit 2, naming config.json, the field, expected and found);
a training set too small for a validation split says so, one too small to train on is refused;
`measure` records the confidence calibration per task beside acceptance and `profiles show`
prints it."""
from __future__ import annotations

import json

import pytest

from dspark_sim.cli import main
from .conftest import tiny_tokenizer


@pytest.fixture(scope="module")
def checkpoint(trained, tmp_path_factory):
    from dspark_sim.decode.drafters.checkpoint import save_drafter
    return save_drafter(trained["dspark"][0], tmp_path_factory.mktemp("dspark") / "drafter")


def _target_dir(path, **shape):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=96, hidden_size=32, intermediate_size=64, num_hidden_layers=4,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      bos_token_id=1, eos_token_id=2, pad_token_id=0)
    for key, value in shape.items():
        setattr(cfg, key, value)
    LlamaForCausalLM(cfg).save_pretrained(path)
    tiny_tokenizer().save_pretrained(path)
    return path


@pytest.mark.parametrize("shape, field, expected, found", [
    ({"hidden_size": 48, "intermediate_size": 96}, "hidden_size", "48", "32"),
    ({"vocab_size": 128}, "vocab_size", "128", "96"),
    ({"num_hidden_layers": 2}, "taps", "layer indices below 2", "[2]"),
    ({"num_hidden_layers": 6}, "num_target_layers", "6", "4"),
])
def test_a_checkpoint_that_does_not_fit_the_target_is_refused_before_decoding(
        checkpoint, tmp_path, capsys, shape, field, expected, found):
    target = _target_dir(tmp_path / "target", **shape)
    out = tmp_path / "m.acceptance.json"
    assert main(["measure", "--drafter", str(checkpoint), "--target", str(target), "--tasks", "math",
                 "--n", "1", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{checkpoint / 'config.json'}: field '{field}'" in err and "Traceback" not in err
    assert f"expected {expected} (the target's), found {found}" in err
    assert not out.exists() and not (tmp_path / "m.records.jsonl").exists()


def _shards(folder, ids):
    from dspark_sim.fileio import write_jsonl_atomic

    folder.mkdir()
    write_jsonl_atomic(folder / "shard-00000.jsonl",
                       [{"id": i, "task": "chat", "temperature": 0.0, "prompt_ids": [5, 6, 7, 8],
                         "response_ids": list(range(10, 40))} for i in ids])
    return folder


def _ids(in_validation: bool, count: int) -> list[str]:
    """Record ids that fall (or not) in the trainer's 3% validation split."""
    import hashlib

    from dspark_sim.train.trainer import TrainConfig

    out, i = [], 0
    while len(out) < count:
        h = int(hashlib.sha256(f"r{i}".encode()).hexdigest()[:8], 16) / 0xFFFFFFFF
        if (h < TrainConfig.val_fraction) == in_validation:
            out.append(f"r{i}")
        i += 1
    return out


def test_a_tiny_training_set_says_it_keeps_nothing_for_validation(tiny_model_dir, tmp_path, capsys):
    train = ["train", "--drafter", "eagle3", "--steps", "1", "--gamma", "2", "--draft-vocab", "32",
             "--row-len", "64", "--target", str(tiny_model_dir), "--device", "cpu", "--threads", "1"]
    data = _shards(tmp_path / "small", _ids(False, 4))
    assert main([*train, "--data", str(data), "--out", str(tmp_path / "run")]) == 0
    err = capsys.readouterr().err
    assert "none of the 4 training records falls in the 3% validation split" in err
    assert "0 are kept for validation" in err and "no early stop" in err
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["data"]["val_records"] == 0
    data = _shards(tmp_path / "all-val", _ids(True, 2))
    assert main([*train, "--data", str(data), "--out", str(tmp_path / "run2")]) == 2
    err = capsys.readouterr().err
    assert "all 2 records fall in the validation split" in err and "Traceback" not in err
    assert not (tmp_path / "run2" / "summary.json").exists()


def test_measure_records_calibration_per_task_and_profiles_show_prints_it(checkpoint, tiny_model_dir,
                                                                          tmp_path, capsys):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"task": t, "prompt": f"w{i} w{i + 3} w{i + 7} w{i + 1}"}) + "\n"
                             for t in ("one", "two") for i in range(3)))
    out = tmp_path / "d.acceptance.json"
    assert main(["measure", "--drafter", str(checkpoint), "--target", str(tiny_model_dir), "--tasks",
                 str(tasks), "--gamma", "4", "--max-new-tokens", "40", "--no-plain", "--out", str(out),
                 "--device", "cpu", "--threads", "1"]) == 0
    profile = json.loads(out.read_text())
    cal = profile["calibration"]["tasks"]
    assert set(cal) == {"one", "two"}
    for task in cal.values():
        assert task["headline"]["n"] == sum(r["n"] for r in task["positions"]) > 0
        assert task["positions"][0]["n"] > 0 and task["positions"][0]["ece_ci95"] is not None
    md = out.with_name("d.report.md").read_text()
    assert "## Confidence calibration by position" in md
    capsys.readouterr()
    assert main(["profiles", "show", str(out)]) == 0
    shown = capsys.readouterr().out
    assert "confidence calibration (as `measure` recorded it)" in shown
    first = cal["one"]["positions"][0]
    assert f"k=1: {100 * first['ece']:.1f}%" in shown and f"(n={first['n']})" in shown
    # measuring again with other settings says the records are replaced
    assert main(["measure", "--drafter", str(checkpoint), "--target", str(tiny_model_dir), "--tasks",
                 str(tasks), "--gamma", "3", "--max-new-tokens", "8", "--no-plain", "--out", str(out),
                 "--device", "cpu", "--threads", "1"]) == 0
    err = capsys.readouterr().err
    assert "measured with other settings" in err and f"replacing {out}" in err
