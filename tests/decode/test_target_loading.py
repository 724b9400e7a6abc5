"""Target loading: devices, the conversion cache, local directories, the embedded model."""
import os
import time
from pathlib import Path

import pytest
import torch
from toys import save_tiny_model

from dspark_sim.decode import loading
from dspark_sim.decode.loading import cache_root, load_target, resolve_device
from dspark_sim.errors import InputError


def test_resolve_device():
    assert resolve_device("cpu") == (torch.device("cpu"), torch.float32)
    dev, dtype = resolve_device("auto")
    assert (dev.type, dtype) == (("cuda", torch.bfloat16) if torch.cuda.is_available()
                                 else ("cpu", torch.float32))
    if not torch.cuda.is_available():
        with pytest.raises(InputError, match="no GPU"):
            resolve_device("cuda")
    with pytest.raises(InputError):
        resolve_device("metal")


def test_cache_root_precedence(monkeypatch, tmp_path):
    monkeypatch.delenv("DSPARK_SIM_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert cache_root() == tmp_path / "xdg" / "dspark-sim"
    monkeypatch.setenv("DSPARK_SIM_CACHE", str(tmp_path / "own"))
    assert cache_root() == tmp_path / "own"
    monkeypatch.delenv("DSPARK_SIM_CACHE")
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert cache_root() == Path.home() / ".cache" / "dspark-sim"


def test_local_directory_and_not_a_model(tmp_path):
    target = load_target(str(save_tiny_model(tmp_path / "m")), "cpu")
    assert target.num_layers == 2 and target.vocab_size == 260 and target.eos_token_ids == {256}
    assert target.tokenizer is not None and target.final_norm is not None
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="no config.json"):
        load_target(str(tmp_path / "empty"), "cpu")


def test_missing_embedded_package_is_an_input_error(monkeypatch):
    monkeypatch.setattr(loading, "EMBEDDED_DIST", "no-such-dist-xyz")
    with pytest.raises(InputError, match="no-such-dist-xyz"):
        loading.embedded_gguf()


@pytest.mark.slow
def test_embedded_converts_once_atomically_then_loads_fast(monkeypatch, tmp_path):
    monkeypatch.setenv("DSPARK_SIM_CACHE", str(tmp_path))
    first = load_target("embedded", "cpu", quiet=True)
    models = list((tmp_path / "models").iterdir())
    assert len(models) == 1 and not models[0].name.startswith(".")   # no temp dir left behind
    assert (models[0] / "model.safetensors").is_file()
    start = time.perf_counter()
    second = load_target("embedded", "cpu", quiet=True)
    assert time.perf_counter() - start < 15
    assert first.name == "SmolLM2-135M-Instruct" and first.num_layers == 30
    assert first.hidden_size == 576 and first.vocab_size == 49152 and first.eos_token_ids == {2}
    assert second.tokenizer.chat_template
    for a, b in zip(first.model.state_dict().values(), second.model.state_dict().values()):
        assert torch.equal(a, b)
