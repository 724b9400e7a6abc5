"""The copy bias's side of calibration: drafters report which slots the bias applied to, a
DFlash copying on its first slot alone stays one parallel pick, STS fits an offset for copied
slots that recovers a known shift, and rollouts keep the flags."""
from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch

from dspark_sim.calibration.rollouts import collect, load_rollouts, save_rollouts
from dspark_sim.calibration.sts import RolloutSteps, calibrated_logits, fit_sts_detail, position_report
from dspark_sim.decode.drafters.trained import TrainedDrafter
from dspark_sim.decode.sampling import Sampling
from dspark_sim.decode.speculate import speculative_generate
from dspark_sim.decode.target import HFTarget
from .conftest import VOCAB
from .test_calibration import accepted_runs
from .test_copy_bias import _repeating_prompts, compare, reference
from .test_lossless import small_vocab_target  # noqa: F401 (fixture)


def _drafter(module, hf, kind, bias=(24.0, 0.0), slots=0) -> TrainedDrafter:
    d = TrainedDrafter(copy.deepcopy(module), hf, kind)
    d.copy_bias, d.copy_slots = bias, slots
    return d


def test_dflash_copying_on_the_first_slot_only_stays_parallel(target, trained):
    """Slots 2.. of a DFlash with `copy_slots: 1` are the plain DFlash's drafts (the block is one
    pick); a flagged slot 1 drafts the copy candidate; the output is the target's greedy one."""
    hf = HFTarget(target)
    plain = _drafter(trained["dflash"][0], hf, "dflash", bias=(0.0, 0.0))
    seen = {"steps": 0, "flagged": 0, "first_changed": 0}

    class Twin(TrainedDrafter):
        def propose(self, ctx, gamma, sampling, generator=None):
            d = super().propose(ctx, gamma, sampling, generator)
            p = plain.propose(ctx, gamma, sampling, generator)
            assert torch.equal(d.tokens[1:], p.tokens[1:])
            assert not d.copied[1:].any()
            seen["steps"] += 1
            seen["first_changed"] += int(d.tokens[0] != p.tokens[0])
            if d.copied[0]:
                seen["flagged"] += 1
                assert int(d.tokens[0]) == self._copy.candidate([], unigram=False)[0]
            else:
                assert d.tokens[0] == p.tokens[0]
            return d

    twin = Twin(copy.deepcopy(trained["dflash"][0]), hf, "dflash")
    twin.copy_bias, twin.copy_slots = (24.0, 0.0), 1
    for i, p in enumerate(_repeating_prompts(4, VOCAB)):
        plain._state = None                                   # a new request for the twin too
        ref, logits = reference(target, p, 64)
        gen = speculative_generate(hf, twin, p, max_new_tokens=64, gamma=4)
        compare(ref, logits, gen.output_ids, f"dflash copy_slots 1, prompt {i}")
    assert seen["flagged"] >= 10 and seen["first_changed"] >= 1, seen


def test_copy_flags_and_offsets_reach_the_confidences(target, trained):
    """Every step reports its copied slots; with `sts_copy` a copied slot's confidence logit is
    z / Tc_k + d_k, the others' z / T_k as before."""
    hf = HFTarget(target)
    base = _drafter(trained["dspark"][0], hf, "dspark")
    shifted = _drafter(trained["dspark"][0], hf, "dspark")
    temps = [1.5, 2.0, 0.8, 1.0]
    copy_cal = [[4.0, 0.7], [1.0, 1.3], [0.5, -0.4], [2.0, 2.0]]
    for d in (base, shifted):
        d.cfg.sts = {"0.0": temps}
    shifted.cfg.sts_copy = {"0.0": copy_cal}
    flagged = 0
    for p in _repeating_prompts(4, VOCAB):
        a = speculative_generate(hf, base, p, max_new_tokens=48, gamma=4)
        b = speculative_generate(hf, shifted, p, max_new_tokens=48, gamma=4)
        assert a.output_ids == b.output_ids and len(a.copied) == len(a.confidence) > 0
        for ca, cb, flags in zip(a.confidence, b.confidence, b.copied):
            la, lb = (np.log(np.array(c)) - np.log1p(-np.array(c)) for c in (ca, cb))
            z = la * np.array(temps[:len(flags)])                   # the raw logits
            want = calibrated_logits(z[None], np.array(temps[:len(flags)]),
                                     np.array(copy_cal[:len(flags)]), np.array(flags)[None])[0]
            np.testing.assert_allclose(lb, want, atol=5e-4)
            np.testing.assert_allclose(lb[~np.array(flags)], la[~np.array(flags)], atol=1e-5)
            flagged += sum(flags)
    assert flagged >= 5


def test_rollouts_carry_the_copied_slots(target, trained, tmp_path):
    hf = HFTarget(target)
    drafter = _drafter(trained["dspark"][0], hf, "dspark")
    drafter.cfg.sts_copy = {"0.0": [[1.0, 5.0]] * 4}
    parts = collect(hf, drafter, _repeating_prompts(3, VOCAB), gamma=4, sampling=Sampling(0.0),
                    max_new_tokens=40, seed=0)
    assert drafter.cfg.sts_copy == {"0.0": [[1.0, 5.0]] * 4}   # restored after raw collection
    both = np.concatenate([p.copied for p in parts])
    assert both.any() and not both.all()
    path = save_rollouts(tmp_path / "r.npz", parts, {"gamma": 4, "temperature": 0.0, "seed": 0})
    back, _ = load_rollouts(path)
    for a, b in zip(parts, back):
        assert np.array_equal(a.copied, b.copied)


def test_rollouts_without_copy_flags_load_as_never_copied(tmp_path):
    z = np.zeros((3, 2), dtype=np.float32)
    meta = np.array(json.dumps({"gamma": 2, "temperature": 0.0, "seed": 0}))
    np.savez(tmp_path / "old.npz", z=z, accepted=np.array([0, 1, 2], dtype=np.int16),
             steps_per_request=np.array([3]), meta=meta)
    back, _ = load_rollouts(tmp_path / "old.npz")
    assert back[0].copied.shape == (3, 2) and not back[0].copied.any()
    np.savez(tmp_path / "bad.npz", z=z, accepted=np.array([0, 1, 2], dtype=np.int16),
             steps_per_request=np.array([3]), meta=meta, copied=np.ones((3, 3), dtype=np.uint8))
    from dspark_sim.errors import InputError
    with pytest.raises(InputError, match="copied"):
        load_rollouts(tmp_path / "bad.npz")


def _shifted_rollouts(n: int, seed: int, shift: float, gamma: int = 4, scale: float = 1.0
                      ) -> RolloutSteps:
    """Steps whose true conditional survival is sigmoid(s) on ordinary slots and
    sigmoid(s / scale + shift) on copied ones, with raw logits s: copied slots are accepted more
    often than their logits say (and, for scale > 1, their logits say less)."""
    rng = np.random.default_rng(seed)
    s = rng.normal(0.0, 1.5, (n, gamma))
    copied = rng.random((n, gamma)) < 0.4
    accepted = accepted_runs(1 / (1 + np.exp(-np.where(copied, s / scale + shift, s))), rng)
    return RolloutSteps(z=s, accepted=accepted, copied=copied)


@pytest.mark.parametrize("scale", [1.0, 4.0])
def test_sts_fits_the_calibration_of_copied_slots(scale):
    fit, held = _shifted_rollouts(4000, 0, 2.0, scale=scale), _shifted_rollouts(4000, 1, 2.0, scale=scale)
    temps, copy_cal, detail = fit_sts_detail(fit, groups=np.arange(4000) // 20)
    assert np.all(np.abs(copy_cal[:2, 1] - 2.0) < 0.6), copy_cal   # positions with enough prefixes
    assert np.all(np.abs(np.log(copy_cal[:2, 0] / scale)) < np.log(1.6)), copy_cal
    assert np.all((temps[:2] > 0.75) & (temps[:2] < 1.33)), temps  # the other slots were calibrated
    assert detail[0]["copied"]["rule"] == "fitted"
    only_t = np.mean([r["ece"] for r in position_report(held, temps)])
    both = np.mean([r["ece"] for r in position_report(held, temps, copy_cal=copy_cal)])
    assert both < 0.6 * only_t, (only_t, both)


@pytest.mark.parametrize("field,bad", [("copy_slots", -1), ("copy_slots", 1.5),
                                       ("sts_copy", {"0.0": ["high"]}), ("sts_copy", [1.0]),
                                       ("sts_copy", {"0.0": [[0.0, 1.0]]}),
                                       ("sts_copy", {"0.0": [[1.0, 2.0, 3.0]]})])
def test_a_bad_copy_setting_in_config_json_names_the_field(trained, tmp_path, field, bad):
    from dspark_sim.decode.drafters.checkpoint import read_config, save_drafter
    from dspark_sim.errors import InputError

    save_drafter(trained["dspark"][0], tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg[field] = bad
    (tmp_path / "config.json").write_text(json.dumps(cfg, indent=2))
    with pytest.raises(InputError, match=field):
        read_config(tmp_path)


def test_set_writes_the_slots(trained, tmp_path):
    from dspark_sim.train import copy_bias as cb
    from dspark_sim.decode.drafters.checkpoint import read_config, save_drafter

    save_drafter(trained["dflash"][0], tmp_path / "src")
    cb.main(["set", str(tmp_path / "src"), str(tmp_path / "dst"), "--bigram", "24", "--slots", "1"])
    assert read_config(tmp_path / "dst").copy_slots == 1
    with pytest.raises(SystemExit):
        cb.main(["set", str(tmp_path / "src"), str(tmp_path / "dst"), "--bigram", "24", "--slots", "-1"])


def test_calibrate_cli_stores_and_clears_the_copy_calibration(trained, tmp_path, capsys):
    from dspark_sim.cli import main
    from dspark_sim.decode.drafters.checkpoint import read_config, save_drafter
    from dspark_sim.decode.drafters.trained import apply_calibration_file

    def stored(path):
        """The config as the drafter is loaded: config.json and the calibration file beside it."""
        cfg = read_config(path)
        apply_calibration_file(cfg, path)
        return cfg

    ckpt = tmp_path / "ckpt"
    save_drafter(trained["dspark"][0], ckpt)
    parts = [_shifted_rollouts(200, 50 + i, 2.0, gamma=7) for i in range(20)]
    rollouts = save_rollouts(tmp_path / "r.npz", parts, {"drafter": str(ckpt), "gamma": 7,
                                                          "temperature": 0.0, "seed": 0})
    common = ["calibrate", "--drafter", str(ckpt), "--rollouts", str(rollouts)]
    assert main([*common, "--report", str(tmp_path / "with")]) == 0
    assert "copied slots (Tc, d)" in capsys.readouterr().out
    cal = json.loads((tmp_path / "with" / "calibration.json").read_text())
    cfg = stored(ckpt)
    assert json.loads((ckpt / "config.json").read_text())["sts"] == {}    # config.json untouched
    assert cfg.sts_copy["0.0"] == [[round(t, 5), round(d, 5)] for t, d in cal["copy_calibration"]]
    assert abs(cal["copy_calibration"][0][1] - 2.0) < 0.6 and cal["headline"]["sts"]["ece"] < cal["headline"]["raw"]["ece"]
    # temperatures alone: no copy calibration reported, and a stored refit leaves none behind
    assert main([*common, "--no-copy-calibration", "--report", str(tmp_path / "without")]) == 0
    assert "copied slots" not in capsys.readouterr().out
    without = json.loads((tmp_path / "without" / "calibration.json").read_text())
    assert [t for t, _ in without["copy_calibration"]] == without["temperatures"]
    assert not any(d for _, d in without["copy_calibration"])
    assert without["copied_share_fit"] == cal["copied_share_fit"] > 0.3
    assert without["headline"]["sts"]["ece"] > cal["headline"]["sts"]["ece"]
    assert "0.0" not in stored(ckpt).sts_copy


def test_scheduled_sampling_with_copy_calibration_is_distribution_exact(small_vocab_target):
    """DSpark's scheduler at T > 0 on confidences whose calibration depends on the copy flags
    (copied slot 1 made confident, copied slot 2 doubtful): the flags read only the tokens
    before their slot, like the confidence head, so the output stays exactly the target's."""
    from collections import Counter

    from dspark_sim.profiles.registry import load_hw_profile
    from dspark_sim.serve.single import ScheduledVerify
    from .test_lossless import _confidence_reading_drafter, chi_square_p

    model = small_vocab_target
    decisions = {}
    for name, copy_cal in (("calibrated", {"0.9": [[1.0, 4.0], [1.0, -4.0]]}), ("plain", {})):
        drafter = _confidence_reading_drafter(model)
        drafter.copy_bias = (3.0, 1.5)
        drafter.cfg.sts_copy = copy_cal
        hook = ScheduledVerify(load_hw_profile("cpu-2core-smollm2-135m"), "dspark", 2,
                               skip_drafting=True)
        p = chi_square_p(model, drafter, Sampling(temperature=0.9, top_k=5), samples=2_000,
                         verify_len=hook, draft_budget=hook.draft_budget)
        decisions[name] = Counter(hook.decisions)
        assert p > 1e-3, (name, p)
    cal, plain = decisions["calibrated"], decisions["plain"]
    assert cal[0] > 100 and cal[2] > 100, cal
    # the copy calibration moved the scheduler's decisions
    assert abs(cal[2] / sum(cal.values()) - plain[2] / sum(plain.values())) > 0.05, decisions


def test_copy_calibration_is_read_from_the_same_temperature_as_sts(trained):
    from dspark_sim.decode.drafters.trained import sts_copy_calibration, sts_temperatures

    cfg = copy.deepcopy(trained["dspark"][0].cfg)
    cfg.sts = {"0.0": [1.0] * 7, "1.0": [2.0] * 7}
    cfg.sts_copy = {"0.0": [[20.0, 1.0]] * 7}       # T = 1 calibrates copied slots like the rest
    assert sts_copy_calibration(cfg, 0.2)[0].tolist() == [20.0, 1.0]
    assert sts_copy_calibration(cfg, 0.9) is None and sts_temperatures(cfg, 0.9)[0] == 2.0
    cfg.sts = {}
    assert sts_copy_calibration(cfg, 0.9)[0].tolist() == [20.0, 1.0]
