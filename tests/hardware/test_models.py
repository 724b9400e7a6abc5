"""Model shapes from Hugging Face config.json files: dense, MoE, MLA, and clear errors."""
import json

import pytest

from dspark_sim.errors import InputError
from dspark_sim.hardware.models import load_model_shape, preset_names

QWEN_MOE = {  # Qwen3-30B-A3B-style MoE config (no shared expert, no dense layers)
    "model_type": "qwen3_moe", "hidden_size": 2048, "num_hidden_layers": 48, "vocab_size": 151936,
    "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128, "intermediate_size": 6144,
    "moe_intermediate_size": 768, "num_experts": 128, "num_experts_per_tok": 8,
    "tie_word_embeddings": False,
}


def write(tmp_path, data, name="config.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data, indent=2))
    return path


def test_presets_are_listed_and_load():
    assert {"deepseek-v3", "llama-3.1-8b", "qwen3-8b"} <= set(preset_names())
    qwen = load_model_shape("qwen3-8b")
    assert qwen.total_params / 1e9 == pytest.approx(8.19, abs=0.01)
    assert not qwen.is_moe and not qwen.is_mla


def test_moe_config_without_shared_experts(tmp_path):
    m = load_model_shape(write(tmp_path, QWEN_MOE))
    assert m.is_moe and m.routed_experts == 128 and m.shared_intermediate == 0 and m.dense_layers == 0
    assert m.total_params / 1e9 == pytest.approx(30.5, abs=0.3)
    # the model card's "3.3B activated" counts the input embedding too
    assert (m.active_params + m.embedding_params) / 1e9 == pytest.approx(3.3, abs=0.1)


def test_model_folder_and_text_config(tmp_path):
    write(tmp_path, {"model_type": "wrapper", "text_config": QWEN_MOE})
    assert load_model_shape(tmp_path).routed_experts == 128


@pytest.mark.parametrize("mutate, field", [
    (lambda d: d.pop("hidden_size"), "hidden_size"),
    (lambda d: d.update(num_hidden_layers="48"), "num_hidden_layers"),
    (lambda d: d.update(num_experts_per_tok=200), "num_experts_per_tok"),
    (lambda d: d.update(tie_word_embeddings="no"), "tie_word_embeddings"),
])
def test_config_errors_name_the_field(tmp_path, mutate, field):
    data = dict(QWEN_MOE)
    mutate(data)
    path = write(tmp_path, data)
    with pytest.raises(InputError) as err:
        load_model_shape(path)
    assert err.value.field == field
    assert str(path) in str(err.value)
    if field != "hidden_size":      # a missing key has no line of its own
        assert err.value.line is not None


def test_unknown_model_is_input_error():
    with pytest.raises(InputError, match="presets"):
        load_model_shape("no-such-model")
