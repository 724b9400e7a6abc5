"""The distill -> train -> generate -> calibrate path through the CLI on a tiny target
directory (model + tokenizer saved locally), and its input errors."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from dspark_sim.cli import main
from tests.strict_json import register_input


def _prompt_file(path, n, seed):
    rng = np.random.default_rng(seed)
    with path.open("w") as fh:
        for i in range(n):
            words = " ".join(f"w{int(x)}" for x in rng.integers(0, 80, int(rng.integers(3, 9))))
            fh.write(json.dumps({"id": f"p{seed}-{i}", "task": "chat", "prompt": words}) + "\n")
    return path


def test_distill_train_generate_calibrate(tiny_model_dir, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("DSPARK_SIM_CACHE", str(tmp_path / "cache"))
    tgt = ["--target", str(tiny_model_dir), "--device", "cpu", "--threads", "1"]
    prompts = _prompt_file(tmp_path / "train.jsonl", 24, 0)
    assert main(["distill", "--out", str(tmp_path / "data"), "--prompts", str(prompts), "--no-builtin",
                 "--batch-size", "8", "--max-new-tokens", "40", *tgt]) == 0
    shards = sorted((tmp_path / "data").glob("shard-*.jsonl"))   # 12 greedy + 12 sampled, batches of 8
    assert len(shards) == 4 and sum(len(s.read_text().splitlines()) for s in shards) == 24
    # resuming finds nothing left to do
    assert main(["distill", "--out", str(tmp_path / "data"), "--prompts", str(prompts), "--no-builtin",
                 *tgt]) == 0
    assert "wrote 0 new answers" in capsys.readouterr().out
    # a pack of 16 of them starts a new directory (only the other 8 are answered); --minutes
    # bounds the run (a zero-length budget starts no batch), and --pack packs what is there
    from dspark_sim.train.selfdistill import read_records, write_records_npz
    first16 = sorted(read_records(tmp_path / "data"), key=lambda r: r.id)[:16]
    write_records_npz(first16, tmp_path / "part.npz")
    more = ["distill", "--out", str(tmp_path / "more"), "--prompts", str(prompts), "--no-builtin",
            "--batch-size", "8", "--max-new-tokens", "40", *tgt]
    assert main([*more, "--resume-from", str(tmp_path / "part.npz"), "--minutes", "1e-9",
                 "--pack", str(tmp_path / "more.npz")]) == 0
    assert "wrote 0 new answers" in capsys.readouterr().out
    assert len(read_records(tmp_path / "more.npz")) == 16
    assert main(more) == 0
    assert "wrote 8 new answers" in capsys.readouterr().out
    assert {r.id for r in read_records(tmp_path / "more")} == {r.id for r in read_records(tmp_path / "data")}
    assert main([*more, "--resume-from", str(tmp_path / "part.npz")]) == 2   # not an empty --out
    assert "--resume-from" in capsys.readouterr().err

    run = tmp_path / "run"
    assert main(["train", "--drafter", "dspark", "--data", str(tmp_path / "data"), "--out", str(run),
                 "--steps", "8", "--gamma", "4", "--draft-vocab", "64", "--seq-rank", "8",
                 "--row-len", "128", "--anchors", "16", "--lr", "3e-3", *tgt]) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 8 and summary["data"]["records"] == 24
    assert len((run / "metrics.jsonl").read_text().splitlines()) == 8
    assert (run / "drafter" / "model.safetensors").is_file()
    # a warm start goes on from the run's weights with a new schedule; another shape is refused
    more = ["train", "--drafter", "dspark", "--data", str(tmp_path / "data"), "--steps", "3",
            "--gamma", "4", "--draft-vocab", "64", "--row-len", "128", "--anchors", "16", *tgt]
    assert main([*more, "--seq-rank", "8", "--out", str(tmp_path / "run2"), "--init-from", str(run)]) == 0
    warm = json.loads((tmp_path / "run2" / "summary.json").read_text())
    assert (warm["steps"], warm["prior_steps"], warm["total_steps"]) == (3, 8, 11)
    assert main([*more, "--seq-rank", "4", "--out", str(tmp_path / "run3"), "--init-from", str(run)]) == 2
    assert "--init-from" in capsys.readouterr().err
    assert main([*more, "--seq-rank", "8", "--out", str(tmp_path / "run3"), "--init-from",
                 str(tmp_path / "nope")]) == 2
    # an exported drafter (fp16 weights, no moments) starts a run after --prior-steps steps
    assert main([*more, "--seq-rank", "8", "--out", str(tmp_path / "run4"), "--init-from",
                 str(run / "drafter"), "--prior-steps", "8"]) == 0
    warm = json.loads((tmp_path / "run4" / "summary.json").read_text())
    assert (warm["prior_steps"], warm["total_steps"]) == (8, 11)
    capsys.readouterr()
    assert main([*more, "--seq-rank", "8", "--out", str(tmp_path / "run5"), "--init-from", str(run),
                 "--prior-steps", "8"]) == 2          # a run directory records its own steps
    assert "--prior-steps" in capsys.readouterr().err
    # a DSpark drafter whose backbone starts from an exported DFlash one (the heads keep theirs)
    dflash = ["train", "--drafter", "dflash", *more[3:]]
    assert main([*dflash, "--seq-rank", "8", "--out", str(tmp_path / "df")]) == 0
    assert main([*more, "--seq-rank", "8", "--out", str(tmp_path / "bb"), "--backbone-from",
                 str(tmp_path / "df" / "drafter"), "--prior-steps", "3", "--backbone-loss", "0.5"]) == 0
    bb = json.loads((tmp_path / "bb" / "summary.json").read_text())
    assert bb["init_from"].startswith("backbone:") and bb["total_steps"] == 6
    # ... or from a DSpark drafter's backbone under another head (its heads are dropped)
    assert main([*more, "--seq-head", "rnn", "--seq-rank", "4", "--steps", "1", "--lr", "0", "--out",
                 str(tmp_path / "swap"), "--backbone-from", str(run / "drafter"), "--prior-steps", "8"]) == 0
    from safetensors.torch import load_file
    old_w, new_w = (load_file(str(d / "model.safetensors")) for d in (run / "drafter", tmp_path / "swap" / "drafter"))
    shared = [k for k in old_w if not k.startswith(("seq_head.", "conf_head."))]
    assert shared and all(torch.equal(old_w[k], new_w[k]) for k in shared)
    assert new_w["seq_head.w1.weight"].shape[1] == 4 and "seq_head.joint.weight" in new_w
    capsys.readouterr()
    for bad, field in (([*more, "--backbone-from", str(tmp_path / "df" / "drafter"), "--init-from", str(run)],
                        "--backbone-from"),
                       ([*dflash, "--backbone-from", str(tmp_path / "df" / "drafter")], "--backbone-from"),
                       ([*more, "--backbone-from", str(run)], "--backbone-from"),   # not exported
                       ([*dflash, "--backbone-loss", "1"], "--backbone-loss"),
                       ([*dflash, "--position-decay", "0"], "--position-decay")):
        assert main([*bad, "--seq-rank", "8", "--out", str(tmp_path / "bad")]) == 2
        assert field in capsys.readouterr().err

    capsys.readouterr()
    assert main(["generate", "--drafter", str(run / "drafter"), "--prompt", "w1 w2 w3", "--json",
                 "--gamma", "4", "--max-new-tokens", "24", "--compare-ar", *tgt]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["identical"] and len(out["output_ids"]) >= 1
    # the one-request scheduler on a shipped CPU curve verifies fewer drafts, losslessly, and
    # says which curve it read
    assert main(["generate", "--drafter", str(run / "drafter"), "--prompt", "w1 w2 w3", "--json",
                 "--gamma", "4", "--max-new-tokens", "24", "--compare-ar", "--verify", "scheduled",
                 "--hw", "cpu-1thread-smollm2-135m-decode-loop", *tgt]) == 0
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert out["identical"] and out["verify"] == "scheduled" and 0 <= out["mean_verified"] < 4
    assert "verify-cost curve: hardware profile cpu-1thread-smollm2-135m-decode-loop (" in captured.err
    assert "not monotone" not in captured.err
    # a curve whose step time falls with more verified tokens (2 tokens 88.5 ms, 4 tokens 82.0
    # ms) is replaced by its non-decreasing fit, and the command says so
    assert main(["generate", "--drafter", str(run / "drafter"), "--prompt", "w1 w2 w3", "--json",
                 "--gamma", "4", "--max-new-tokens", "24", "--compare-ar", "--verify", "scheduled",
                 "--hw", "cpu-2core-smollm2-135m", *tgt]) == 0
    captured = capsys.readouterr()
    assert json.loads(captured.out)["identical"]
    assert "warning: the curve is not monotone in the verified tokens (2 tokens 88.5 ms > 4 tokens " \
           "82.0 ms)" in captured.err and "2: 88.5 -> 85.3 ms, 4: 82.0 -> 85.3 ms" in captured.err
    # by default the scheduler reads this machine's curve: timed once, then from the cache
    scheduled = ["generate", "--drafter", str(run / "drafter"), "--prompt", "w1 w2 w3", "--json",
                 "--gamma", "4", "--max-new-tokens", "16", "--verify", "scheduled", *tgt]
    assert main(scheduled) == 0
    err = capsys.readouterr().err
    assert "timing this machine's decode-loop step curve" in err
    assert "verify-cost curve: this machine's decode loop, measured now (cached in " in err
    assert len(list((tmp_path / "cache" / "curves").glob("decode-loop-dspark-g4-*.yaml"))) == 1
    assert main(scheduled) == 0
    err = capsys.readouterr().err
    assert "timing" not in err and "verify-cost curve: this machine's decode loop, cached in " in err
    assert main(["generate", "--drafter", str(run / "drafter"), "--prompt", "w1", "--verify", "some",
                 *tgt]) == 2

    held = _prompt_file(tmp_path / "held.jsonl", 24, 1)
    assert main(["calibrate", "--drafter", str(run / "drafter"), "--prompts", str(held), "--gamma", "4",
                 "--max-new-tokens", "64", "--report", str(tmp_path / "cal"), *tgt]) == 0
    cal = json.loads((tmp_path / "cal" / "calibration.json").read_text())
    assert len(cal["temperatures"]) == 4 and (tmp_path / "cal" / "reliability.png").is_file()
    stored = json.loads((run / "drafter" / "calibration.sts.json").read_text())
    assert stored["sts"]["0.0"] == [round(t, 5) for t in cal["temperatures"]]
    assert json.loads((run / "drafter" / "config.json").read_text())["sts"] == {}   # never edited
    assert [f["position"] for f in cal["fit"]] == [1, 2, 3, 4]
    # train again into the same --out: a resumed finished run exports the same weights and keeps
    # the calibration; a fresh run with other weights marks it stale and says what to run
    capsys.readouterr()
    again = ["train", "--drafter", "dspark", "--data", str(tmp_path / "data"), "--out", str(run),
             "--steps", "8", "--gamma", "4", "--draft-vocab", "64", "--seq-rank", "8",
             "--row-len", "128", "--anchors", "16", "--lr", "3e-3", *tgt]
    assert main(again) == 0
    err = capsys.readouterr().err
    assert "kept the confidence calibration" in err and "holds an exported drafter; this run replaces it" in err
    from dspark_sim.decode.drafters import make_drafter
    from dspark_sim.decode.loading import load_target
    tiny = load_target(str(tiny_model_dir), "cpu")
    assert make_drafter(str(run / "drafter"), tiny).cfg.sts["0.0"] == stored["sts"]["0.0"]
    assert main([*again, "--fresh", "--seed", "1"]) == 0
    err = capsys.readouterr().err
    assert "is now stale" in err and f"dspark-sim calibrate --drafter {run / 'drafter'} --temperature 0.0" in err
    from dspark_sim.calibration.store import StaleCalibration
    with pytest.warns(StaleCalibration, match="stale"):
        assert make_drafter(str(run / "drafter"), tiny).cfg.sts == {}
    assert main(["calibrate", "--drafter", str(run / "drafter"), "--prompts", str(held), "--gamma", "4",
                 "--max-new-tokens", "64", "--report", str(tmp_path / "cal"), *tgt]) == 0
    assert "note: replacing" in capsys.readouterr().err          # the report of the earlier run
    assert "stale" not in json.loads((run / "drafter" / "calibration.sts.json").read_text())
    cal = json.loads((tmp_path / "cal" / "calibration.json").read_text())
    # the saved rollouts refit to the same temperatures without decoding
    assert main(["calibrate", "--drafter", str(run / "drafter"), "--rollouts",
                 str(tmp_path / "cal" / "rollouts.npz"), "--report", str(tmp_path / "refit"),
                 "--dry-run"]) == 0
    refit = json.loads((tmp_path / "refit" / "calibration.json").read_text())
    assert refit["temperatures"] == cal["temperatures"] and refit["heldout_steps"] == cal["heldout_steps"]
    # rollouts of one drafter are never written into another checkpoint
    assert main(["calibrate", "--drafter", "dspark", "--rollouts", str(tmp_path / "cal" / "rollouts.npz"),
                 "--report", str(tmp_path / "refit")]) == 2
    assert "holds rollouts of drafter" in capsys.readouterr().err
    # fitted on every request of one run, scored on another run's rollouts (other prompts)
    assert main(["calibrate", "--drafter", str(run / "drafter"), "--rollouts",
                 str(tmp_path / "cal" / "rollouts.npz"), "--heldout-rollouts",
                 str(tmp_path / "cal" / "rollouts.npz"), "--report", str(tmp_path / "cross"),
                 "--dry-run"]) == 0
    cross = json.loads((tmp_path / "cross" / "calibration.json").read_text())
    assert cross["fit_steps"] == cross["heldout_steps"] == refit["fit_steps"] + refit["heldout_steps"]
    assert cross["heldout_rollouts"].endswith("rollouts.npz")
    other_t = tmp_path / "t1.npz"
    from dspark_sim.calibration.rollouts import load_rollouts, save_rollouts
    parts, meta = load_rollouts(tmp_path / "cal" / "rollouts.npz")
    save_rollouts(other_t, parts, {**meta, "temperature": 1.0})
    assert main(["calibrate", "--drafter", str(run / "drafter"), "--rollouts",
                 str(tmp_path / "cal" / "rollouts.npz"), "--heldout-rollouts", str(other_t),
                 "--report", str(tmp_path / "cross"), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "t1.npz" in err and "temperature" in err and "--heldout-rollouts" in err
    (tmp_path / "junk.npz").write_text("not an npz")
    assert main(["calibrate", "--drafter", str(run / "drafter"), "--rollouts",
                 str(tmp_path / "cal" / "rollouts.npz"), "--heldout-rollouts", str(tmp_path / "junk.npz"),
                 "--report", str(tmp_path / "cross"), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "junk.npz" in err and "'--heldout-rollouts'" in err and "'--rollouts'" not in err
    # --tasks: prompt sets by name, too few after --skip is refused before any decoding
    assert main(["calibrate", "--drafter", str(run / "drafter"), "--tasks", f"toy={held}", "--skip", "20",
                 "--n", "8", "--report", str(tmp_path / "cal2"), "--dry-run", *tgt]) == 2
    err = capsys.readouterr().err
    assert "fewer than 8 prompts after skipping 20" in err and "toy (4)" in err
    assert not (tmp_path / "cal2").exists()


def test_bad_inputs_exit_2(tiny_model_dir, tmp_path, capsys):
    tgt = ["--target", str(tiny_model_dir), "--device", "cpu"]
    assert main(["train", "--drafter", "medusa", "--data", str(tmp_path), "--out", str(tmp_path / "r"),
                 "--steps", "1", *tgt]) == 2
    assert main(["train", "--drafter", "dspark", "--data", str(tmp_path), "--out", str(tmp_path / "r"),
                 *tgt]) == 2
    assert main(["train", "--drafter", "dspark", "--data", str(tmp_path / "nope"), "--out",
                 str(tmp_path / "r"), "--steps", "1", *tgt]) == 2
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"prompt": "w1"}\n{not json\n')
    register_input(bad)
    assert main(["distill", "--out", str(tmp_path / "d"), "--prompts", str(bad), "--no-builtin", *tgt]) == 2
    err = capsys.readouterr().err
    assert "bad.jsonl:2" in err and "Traceback" not in err
    junk = tmp_path / "junk.npz"
    junk.write_bytes(b"not an npz")
    assert main(["calibrate", "--rollouts", str(junk), "--report", str(tmp_path / "c"), "--dry-run"]) == 2
    err = capsys.readouterr().err
    assert "junk.npz" in err and "--rollouts" in err and "Traceback" not in err
