"""Drafter checkpoints: small fp16 safetensors without the target's frozen parts."""
from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file

from dspark_sim.decode.drafters.checkpoint import load_module, save_drafter
from dspark_sim.errors import InputError

from .conftest import KINDS, bound_module, tiny_config


@pytest.mark.parametrize("kind", KINDS)
def test_round_trip_keeps_weights_vocabulary_and_config(kind, target, vocab_ids, tmp_path):
    mod = bound_module(tiny_config(kind, target), target, vocab_ids)
    save_drafter(mod, tmp_path)
    stored = load_file(str(tmp_path / "model.safetensors"))
    assert all(v.dtype in (torch.float16, torch.int32) for v in stored.values())
    assert not any("embed" in k and v.shape[0] == target.config.vocab_size for k, v in stored.items())
    back = load_module(tmp_path)
    assert back.cfg == mod.cfg
    assert torch.equal(back.vocab.ids, mod.vocab.ids) and torch.equal(back.vocab.row, mod.vocab.row)
    for (k, a), b in zip(mod.state_dict().items(), back.state_dict().values()):
        assert torch.allclose(a.float(), b.float(), atol=1e-3, rtol=1e-3), k


def test_bad_checkpoints_are_input_errors(tmp_path):
    with pytest.raises(InputError, match="config.json"):
        load_module(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"kind": "dspark", "bogus": 1}))
    with pytest.raises(InputError, match="bad drafter config"):
        load_module(tmp_path)
