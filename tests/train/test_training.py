"""The trainer on a tiny random target: the loss goes down, resume is exact, budgets work."""
from __future__ import annotations

import pytest
import torch

from dspark_sim.train.batches import make_batch
from dspark_sim.train.objectives import LossWeights, compute_loss
from dspark_sim.train.targethead import TargetHead
from dspark_sim.train.trainer import Trainer, TrainConfig, lr_at

from .conftest import KINDS, bound_module, tiny_config


def _trainer(kind, target, cache, vocab_ids, out, steps=30, **kw):
    mod = bound_module(tiny_config(kind, target), target, vocab_ids)
    cfg = TrainConfig(steps=steps, row_len=128, rows_per_batch=2, lr=3e-3, val_fraction=0.15,
                      loss=LossWeights(anchors_per_row=24, chunk=128), **kw)
    return Trainer(mod, cache, TargetHead.from_model(target), cfg, out)


@pytest.mark.parametrize("kind", KINDS)
def test_training_lowers_the_held_out_loss(kind, trained):
    _, before, after, run_dir = trained[kind]
    assert after < 0.85 * before, (kind, before, after)
    assert len((run_dir / "metrics.jsonl").read_text().splitlines()) == 30


def test_resume_continues_exactly(target, cache, vocab_ids, tmp_path):
    straight = _trainer("dspark", target, cache, vocab_ids, tmp_path / "a", steps=6)
    straight.run()
    first = _trainer("dspark", target, cache, vocab_ids, tmp_path / "b", steps=6)
    first.total = 6
    for _ in range(3):
        first._one_step()
        first.step += 1
    first.save()
    resumed = _trainer("dspark", target, cache, vocab_ids, tmp_path / "b", steps=6)
    assert resumed.try_resume() and resumed.step == 3
    resumed.run()
    for (k, a), b in zip(straight.module.state_dict().items(), resumed.module.state_dict().values()):
        assert torch.equal(a, b), k


def test_budget_fixes_the_step_count_after_timing(target, cache, vocab_ids, tmp_path):
    tr = _trainer("mtp1", target, cache, vocab_ids, tmp_path, steps=0, budget_minutes=0.02,
                  timing_steps=2)
    tr.run()
    assert tr.step == tr.total >= 3
    state = torch.load(tmp_path / "trainer_state.pt", weights_only=False)
    assert state["total"] == tr.total


def test_schedule_warms_up_then_decays_to_zero():
    cfg = TrainConfig(lr=1e-3, warmup=0.1)
    lrs = [lr_at(s, 100, cfg) for s in range(100)]
    assert lrs[0] < lrs[9] == pytest.approx(1e-3)
    assert all(a >= b for a, b in zip(lrs[10:], lrs[11:])) and lrs[-1] < 1e-5


def test_warm_start_continues_weights_and_data_with_a_new_schedule(target, cache, vocab_ids, tmp_path):
    first = _trainer("dspark", target, cache, vocab_ids, tmp_path / "a", steps=3)
    first.run()
    second = _trainer("dspark", target, cache, vocab_ids, tmp_path / "b", steps=4)
    assert second.warm_start(tmp_path / "a") == 3
    for (k, a), b in zip(first.module.state_dict().items(), second.module.state_dict().values()):
        assert torch.equal(a, b), k
    assert second._rows_for(0) == first._rows_for(3)          # the data stream goes on
    assert second.step == 0 and second.total == 4              # the schedule starts again
    second.run()
    again = _trainer("dspark", target, cache, vocab_ids, tmp_path / "b", steps=4)
    assert again.try_resume() and again.data_offset == 3 and again.init_from == str(tmp_path / "a")
    third = _trainer("dspark", target, cache, vocab_ids, tmp_path / "c", steps=2)
    assert third.warm_start(tmp_path / "b") == 7               # warm starts add up
    with pytest.raises(FileNotFoundError):
        _trainer("dspark", target, cache, vocab_ids, tmp_path / "d").warm_start(tmp_path / "none")
    with pytest.raises(ValueError, match="different drafter configuration.*kind"):
        _trainer("dflash", target, cache, vocab_ids, tmp_path / "e").warm_start(tmp_path / "a")


def test_warm_start_from_an_exported_drafter_keeps_its_weights_and_skips_its_steps(
        target, cache, vocab_ids, tmp_path):
    from dspark_sim.decode.drafters.checkpoint import save_drafter

    first = _trainer("dspark", target, cache, vocab_ids, tmp_path / "a", steps=3)
    first.run()
    save_drafter(first.module, tmp_path / "export")             # fp16, no optimizer moments
    second = _trainer("dspark", target, cache, vocab_ids, tmp_path / "b", steps=2)
    assert second.warm_start_weights(tmp_path / "export", prior_steps=3) == 3
    for (k, a), b in zip(first.module.state_dict().items(), second.module.state_dict().values()):
        want = a.half().float() if a.is_floating_point() else a
        assert torch.equal(want, b), k
    assert second._rows_for(0) == first._rows_for(3)
    assert not second.opt.state                                  # moments start fresh
    before = [p.detach().clone() for p in second.params]
    second.run()
    assert any(not torch.equal(p, q) for p, q in zip(before, second.params))
    with pytest.raises(ValueError, match="different drafter configuration.*kind"):
        _trainer("dflash", target, cache, vocab_ids, tmp_path / "c").warm_start_weights(
            tmp_path / "export", prior_steps=3)


@pytest.mark.parametrize("kind", KINDS)
def test_a_warm_start_on_data_with_another_draft_vocabulary_scores_the_loaded_tokens(
        kind, target, cache, vocab_ids, tmp_path):
    """The new run's vocabulary comes from its own data; the loaded drafter's ids replace it,
    and the LM-head rows must follow them (they did not: logits row j scored the new data's
    j-th token while labels were indexed by the loaded ids)."""
    from dspark_sim.decode.drafters.checkpoint import save_drafter

    source = _trainer(kind, target, cache, vocab_ids, tmp_path / "a", steps=2)
    source.run()
    save_drafter(source.module, tmp_path / "export")
    other_ids = vocab_ids.flip(0).clone()                       # same tokens, other order
    fresh = _trainer(kind, target, cache, other_ids, tmp_path / "b", steps=1)
    fresh.warm_start_weights(tmp_path / "export", prior_steps=2)
    assert torch.equal(fresh.module.vocab.ids, vocab_ids.to(torch.int32))
    assert torch.equal(fresh.module.frozen.head_rows, target.lm_head.weight.detach()[vocab_ids.long()])
    batch = make_batch(cache, source._rows_for(0), 128)
    with torch.no_grad():
        source.module.half().float()                            # the exported precision
        want = compute_loss(source.module, batch, source.head, source.cfg.loss, torch.Generator().manual_seed(0))[1]
        got = compute_loss(fresh.module, batch, fresh.head, fresh.cfg.loss, torch.Generator().manual_seed(0))[1]
    assert got.keys() == want.keys()
    for k, v in want.items():
        assert got[k] == pytest.approx(v, rel=1e-5), k


def test_init_source_tells_a_run_from_an_exported_drafter(tmp_path):
    from dspark_sim.decode.drafters.checkpoint import WEIGHTS
    from dspark_sim.train.trainer import STATE, init_source

    (tmp_path / "run").mkdir(), (tmp_path / "drafter").mkdir(), (tmp_path / "empty").mkdir()
    (tmp_path / "run" / STATE).write_bytes(b"")
    (tmp_path / "drafter" / WEIGHTS).write_bytes(b"")
    assert init_source(tmp_path / "run") == "run"
    assert init_source(tmp_path / "drafter") == "drafter"
    assert init_source(tmp_path / "empty") is None


def test_config_check_names_every_differing_field_and_honours_ignore():
    from dspark_sim.train.trainer import ConfigMismatch, check_same_drafter

    check_same_drafter({"a": 1, "sts": [1]}, {"a": 1, "sts": [2]}, "x", ignore=("sts",))
    with pytest.raises(ConfigMismatch, match=r"x belongs .*differs in a, extra"):
        check_same_drafter({"a": 1}, {"a": 2, "extra": 0}, "x")


def test_backbone_start_copies_a_dflash_or_dspark_backbone_and_keeps_the_heads(
        target, cache, vocab_ids, tmp_path):
    from dspark_sim.decode.drafters.checkpoint import save_drafter
    from dspark_sim.train.trainer import ConfigMismatch

    dflash = _trainer("dflash", target, cache, vocab_ids, tmp_path / "a", steps=3)
    dflash.run()
    save_drafter(dflash.module, tmp_path / "dflash")
    dspark = _trainer("dspark", target, cache, vocab_ids, tmp_path / "b", steps=2)
    heads = {k: v.clone() for k, v in dspark.module.state_dict().items()
             if k.startswith(("seq_head.", "conf_head."))}
    assert heads and dspark.warm_start_backbone(tmp_path / "dflash", prior_steps=3) == 3
    mine = dspark.module.state_dict()
    for k, a in dflash.module.state_dict().items():
        want = a.half().float() if a.is_floating_point() else a
        assert torch.equal(want, mine[k]), k
    for k, v in heads.items():
        assert torch.equal(v, mine[k]), k                       # the heads keep their own start
    assert dspark._rows_for(0) == dflash._rows_for(3)
    assert dspark.init_from == f"backbone:{tmp_path / 'dflash'}"
    save_drafter(dspark.module, tmp_path / "dspark")
    # a DSpark drafter gives its backbone too; its heads are dropped, the new run keeps its own
    other = _trainer("dspark", target, cache, vocab_ids, tmp_path / "c")
    other_heads = {k: v.clone() for k, v in other.module.state_dict().items()
                   if k.startswith(("seq_head.", "conf_head."))}
    other.warm_start_backbone(tmp_path / "dspark", prior_steps=0)
    theirs = other.module.state_dict()
    for k, a in mine.items():
        if k.startswith(("seq_head.", "conf_head.")):
            assert torch.equal(other_heads[k], theirs[k]), k
        else:
            assert torch.equal(a.half().float() if a.is_floating_point() else a, theirs[k]), k
    save_drafter(_trainer("mtp1", target, cache, vocab_ids, tmp_path / "m").module, tmp_path / "mtp1")
    with pytest.raises(ConfigMismatch, match="mtp1 drafter; the backbone comes from a dflash or dspark"):
        _trainer("dspark", target, cache, vocab_ids, tmp_path / "e").warm_start_backbone(
            tmp_path / "mtp1", prior_steps=0)
    with pytest.raises(ConfigMismatch, match="for a dspark drafter, not dflash"):
        _trainer("dflash", target, cache, vocab_ids, tmp_path / "d").warm_start_backbone(
            tmp_path / "dflash", prior_steps=0)


def test_backbone_loss_adds_the_bias_free_backbone_terms(
        target, cache, vocab_ids):
    from dspark_sim.train.batches import make_batch
    from dspark_sim.train.objectives import compute_loss

    mod = bound_module(tiny_config("dspark", target), target, vocab_ids)
    batch = make_batch(cache, [[0, 1], [2, 3]], 128)
    head = TargetHead.from_model(target)
    losses = {}
    for wb in (0.0, 0.5):
        gen = torch.Generator().manual_seed(0)
        w = LossWeights(anchors_per_row=24, chunk=128, backbone=wb)
        losses[wb], metrics = compute_loss(mod, batch, head, w, gen)
    assert "tv_backbone" in metrics and 0 < metrics["tv_backbone"] <= 1
    extra = (losses[0.5] - losses[0.0]).item()
    assert extra > 0.5 * 0.9 * metrics["tv_backbone"] * 0.99     # at least the TV part of the term
