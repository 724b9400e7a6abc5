"""The checkpoints shipped for the embedded target: small fp16 files without the target's
embedding / LM head, loadable, and (slow) drafting on the real SmolLM2-135M-Instruct."""
from __future__ import annotations

import pytest
import torch
from safetensors.torch import load_file

from dspark_sim.decode.drafters.checkpoint import load_module, read_config
from dspark_sim.decode.drafters.config import KINDS
from dspark_sim.decode.drafters.trained import shipped_dir
from dspark_sim.profiles.registry import load_acceptance_profile, shipped_acceptance_names
from tests.shared_data import SHARED, needs_shared


@pytest.mark.parametrize("kind", KINDS)
def test_shipped_checkpoint_is_small_and_complete(kind):
    path = shipped_dir(kind)
    weights = path / "model.safetensors"
    assert weights.stat().st_size < 20 * 2 ** 20, "over the ~20 MB cap"
    tensors = load_file(str(weights))
    assert all(v.dtype in (torch.float16, torch.int32) for v in tensors.values())
    assert max(v.numel() for v in tensors.values()) < 49152 * 576   # no embedding / LM head copy
    cfg = read_config(path)
    assert cfg.kind == kind and cfg.vocab_size == 49152 and cfg.hidden_size == 576
    assert cfg.target == "SmolLM2-135M-Instruct" and cfg.target_fingerprint
    module = load_module(path)
    ids = module.vocab.ids.long()
    assert ids.unique().numel() == ids.numel() and int(ids.max()) < cfg.vocab_size
    if kind == "dspark":
        assert set(cfg.sts) == {"0.0", "1.0"} and all(len(v) == cfg.gamma for v in cfg.sts.values())
        assert all(t > 0 for v in cfg.sts.values() for t in v)


@pytest.mark.parametrize("kind", KINDS)
def test_shipped_acceptance_profiles_exist_for_both_temperatures(kind):
    g = 1 if kind == "mtp1" else 7
    names = set(shipped_acceptance_names())
    for t in (0, 1):
        name = f"smollm2-135m-{kind}-g{g}-t{t}"
        assert name in names
        prof = load_acceptance_profile(name)
        assert prof.drafter_kind == kind and prof.gamma == g and set(prof.tasks) >= {"math", "code", "chat"}
        if kind == "dspark":
            req = prof.tasks["math"].requests[0]
            assert req.confidence is not None and len(req.confidence[0]) == g


@pytest.mark.slow
@needs_shared("prompts", "gsm8k", "train.jsonl")
@pytest.mark.parametrize("kind", KINDS)
def test_shipped_drafters_draft_on_the_embedded_target(kind):
    """Loaded by name for the real target, each drafter gets drafts accepted on held-out
    GSM8K *train* questions (greedy), with identical output to plain decoding."""
    from dspark_sim.decode.drafters import make_drafter
    from dspark_sim.decode.loading import load_target
    from dspark_sim.decode.prompts import encode_prompt
    from dspark_sim.decode.speculate import plain_generate, speculative_generate
    from dspark_sim.train.prompts import heldout_prompts

    target = load_target("embedded", "cpu")
    drafter = make_drafter(kind, target)
    prompts = [p for p in heldout_prompts(SHARED / "prompts" / "gsm8k" / "train.jsonl", 3, seed=0)]
    accepted = steps = 0
    for p in prompts:
        ids = encode_prompt(target.tokenizer, p.text)
        gen = speculative_generate(target, drafter, ids, max_new_tokens=64, gamma=7)
        assert gen.output_ids == plain_generate(target, ids, max_new_tokens=64).output_ids
        accepted += sum(gen.accepted)
        steps += gen.steps
    assert accepted / steps > 0.3, (kind, accepted / steps)
