"""Roofline model: hand calculations, MoE expert counting, parallel layouts and their errors."""
import numpy as np
import pytest

from dspark_sim.errors import InputError
from dspark_sim.hardware.gpus import get_gpu, gpu_from_device_name
from dspark_sim.hardware.models import load_model_shape
from dspark_sim.hardware.roofline import Roofline, RooflineSettings

# Llama-3.1-8B, written out: 32 layers x (attention q,o 4096x4096 each + k,v 4096x1024 each
# + SwiGLU 3 x 4096 x 14336) + LM head 128256 x 4096.
LLAMA_MATMUL_PARAMS = 32 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336) + 128256 * 4096
H200_BYTES_S = 4.8e12          # datasheet HBM bandwidth
H200_BF16_FLOPS = 989.5e12     # datasheet dense BF16
FLOOR = 1e-3 + 32 * 20e-6      # fixed step overhead + 32 layers x 20 us launch/sync


def llama_h200(**kw):
    return Roofline(load_model_shape("llama-3.1-8b"), get_gpu("H200"), RooflineSettings(**kw))


def test_hand_calculation_dense_8b_decode_b1_is_memory_bound():
    assert LLAMA_MATMUL_PARAMS == 7_504_658_432
    roof = llama_h200()
    assert roof.model.active_params == LLAMA_MATMUL_PARAMS
    # B = 1: every weight is read once, bf16 = 2 bytes each, at 80% of 4.8 TB/s, plus 1 ms and
    # 32 layers x 20 us of launches.
    hand = LLAMA_MATMUL_PARAMS * 2 / (H200_BYTES_S * 0.8) + 1e-3 + 32 * 20e-6
    assert hand == pytest.approx(5.5487e-3, rel=1e-4)
    assert roof.step_time(1) == pytest.approx(hand, rel=1e-9)
    # and it stays memory-bound, flat, up to well past a hundred tokens
    assert roof.step_time(64) == pytest.approx(hand, rel=1e-9)


def test_hand_calculation_dense_8b_large_batch_is_compute_bound():
    roof = llama_h200()
    B = 4096
    hand = 2 * LLAMA_MATMUL_PARAMS * B / (H200_BF16_FLOPS * 0.6) + FLOOR
    assert hand == pytest.approx(105.19e-3, rel=1e-3)
    assert roof.step_time(B) == pytest.approx(hand, rel=1e-9)
    # the turn from memory- to compute-bound: B* = bytes/FLOP balance = 2*P*... solved by hand
    balance = (H200_BF16_FLOPS * 0.6) / (H200_BYTES_S * 0.8)   # FLOPs per byte at the ridge
    assert roof.crossover_batch_tokens() == pytest.approx(balance, rel=0.02)   # 2 FLOPs / 2 bytes


def test_fp8_halves_bytes_and_doubles_peak():
    bf16, fp8 = llama_h200(), llama_h200(dtype="fp8")
    assert fp8.step_time(1) - FLOOR == pytest.approx((bf16.step_time(1) - FLOOR) / 2)
    assert fp8.step_time(8192) - FLOOR == pytest.approx((bf16.step_time(8192) - FLOOR) / 2)


def test_context_term_gqa_is_kv_read():
    roof = llama_h200()
    kv = 32 * 2 * 8 * 128 * 2          # layers x (K, V) x KV heads x head dim x bf16
    assert roof.model.kv_bytes_per_token(2) == kv == 131072
    # decode attention streams the KV at its own efficiency (60% of 4.8 TB/s), not the GEMMs' 80%
    assert roof.per_context_token_s == pytest.approx(kv / (H200_BYTES_S * 0.6))
    assert roof.decode_time(8, 2, 1000) == pytest.approx(roof.step_time(16) + 8000 * kv / 2.88e12)
    legacy = llama_h200(attention_efficiency=None)          # None: the GEMMs' efficiency
    assert legacy.per_context_token_s == pytest.approx(kv / (H200_BYTES_S * 0.8))


def test_kv_capacity_from_memory_left_after_weights():
    roof = llama_h200()
    weights = (LLAMA_MATMUL_PARAMS + 128256 * 4096) * 2       # + untied input embedding
    assert roof.weight_bytes_per_gpu == weights
    assert roof.kv_capacity_tokens == int((141e9 * 0.9 - weights) / 131072)


def test_deepseek_v3_shape():
    m = load_model_shape("deepseek-v3")
    assert m.is_moe and m.is_mla and m.moe_layers == 58 and m.dense_layers == 3
    assert m.total_params / 1e9 == pytest.approx(671, abs=1)
    assert m.active_params / 1e9 == pytest.approx(37, abs=0.5)
    assert m.kv_bytes_per_token(2) == 61 * (512 + 64) * 2


def test_distinct_experts_matches_simulated_routing():
    roof = Roofline(load_model_shape("deepseek-v3"), get_gpu("H200"),
                    RooflineSettings(dtype="fp8", ep=8))
    rng = np.random.default_rng(0)
    E, k = 256, 8
    for B in (1, 4, 32, 128):
        touched = [len(np.unique(np.concatenate([rng.choice(E, k, replace=False) for _ in range(B)])))
                   for _ in range(200)]
        assert roof.distinct_experts(B) == pytest.approx(np.mean(touched), rel=0.02)
    assert roof.distinct_experts(1) == pytest.approx(k)
    assert roof.distinct_experts(10_000) == pytest.approx(E)


def test_moe_step_grows_as_experts_are_touched_then_with_compute():
    roof = Roofline(load_model_shape("deepseek-v3"), get_gpu("H200"),
                    RooflineSettings(dtype="fp8", ep=8))
    t = roof.step_time(np.array([1, 8, 64, 512, 32768]))
    assert np.all(np.diff(t) > 0)
    routed = roof.step_breakdown([1, 512])["routed_experts"]
    assert routed[1] / routed[0] == pytest.approx(roof.distinct_experts(512) / 8, rel=1e-6)
    assert roof.gpus == 8 and roof.dp == 8


def test_tensor_parallel_splits_weights_and_adds_all_reduce():
    one, two = llama_h200(), llama_h200(tp=2)
    parts1, parts2 = one.step_breakdown(1), two.step_breakdown(1)
    assert parts2["dense_ffn"] == pytest.approx(parts1["dense_ffn"] / 2)
    # 2 all-reduces per layer: ring traffic 2 (tp-1)/tp x (4096 x 2 bytes) at 70% of 450 GB/s + 10 us
    per_call = 2 * 0.5 * 4096 * 2 / (450e9 * 0.7) + 10e-6
    assert parts2["communication"] == pytest.approx(2 * 32 * per_call)


@pytest.mark.parametrize("model, gpu, kw, field", [
    ("llama-3.1-8b", "H200", {"ep": 2}, "ep"),                  # dense model has no experts
    ("llama-3.1-8b", "A100", {"dtype": "fp8"}, "dtype"),        # A100: no FP8 tensor cores
    ("deepseek-v3", "H200", {"dtype": "bf16", "ep": 8}, "model"),  # 1.3 TB of bf16 does not fit 8 GPUs
    ("llama-3.1-8b", "H200", {"tp": 16}, "tp"),                 # TP beyond one NVLink node
    ("deepseek-v3", "H200", {"tp": 4, "ep": 6, "dtype": "fp8"}, "tp"),
    ("llama-3.1-8b", "H200", {"compute_efficiency": 1.5}, "compute_efficiency"),
])
def test_bad_layouts_are_input_errors(model, gpu, kw, field):
    with pytest.raises(InputError) as err:
        roof = Roofline(load_model_shape(model), get_gpu(gpu), RooflineSettings(**kw))
        roof.kv_capacity_tokens
    assert err.value.field == field


def test_gpu_table_lookup():
    assert get_gpu("h200").hbm_gb_s == 4800
    assert get_gpu("H100-SXM").name == "H100"
    assert gpu_from_device_name("NVIDIA H200").name == "H200"
    assert gpu_from_device_name("NVIDIA GeForce RTX 4090") is None
    with pytest.raises(InputError):
        get_gpu("TPUv5")


def test_draft_costs():
    roof = llama_h200(gamma=7)
    R = np.array([1, 64, 256])
    dspark, eagle = roof.draft_time("dspark", R), roof.draft_time("eagle3", R)
    assert np.all(np.diff(dspark) >= 0)
    # one layer + LM head of the target, memory-bound at R = 1: a small fraction of a step
    assert 0.05 < (eagle[0] - 1e-4 - 20e-6) / (roof.step_time(1) - FLOOR) < 0.2
    with pytest.raises(InputError):
        roof.draft_time("medusa", 1)


def test_latency_floors_by_hand():
    """Per-layer launch cost, all-to-all latency and the legacy settings, written out."""
    from dspark_sim.hardware.roofline_settings import LEGACY, RooflineSettings as S, settings_sources

    one = llama_h200()
    parts = one.step_breakdown(1)
    assert parts["layer_launch"] == pytest.approx(32 * 20e-6)
    assert parts["overhead"] == pytest.approx(1e-3)
    legacy = llama_h200(**LEGACY)
    assert one.step_time(1) - legacy.step_time(1) == pytest.approx(32 * 20e-6)
    # EP all-to-all: per MoE layer, dispatch + combine each pay a2a_latency_s on top of bandwidth
    v3 = load_model_shape("deepseek-v3")
    a = Roofline(v3, get_gpu("H200"), RooflineSettings(dtype="fp8", ep=8, a2a_latency_s=0.0))
    b = Roofline(v3, get_gpu("H200"), RooflineSettings(dtype="fp8", ep=8, a2a_latency_s=60e-6))
    diff = b.comm_time(128.0, 3, 58) - a.comm_time(128.0, 3, 58)
    assert diff == pytest.approx(58 * 2 * 60e-6)
    # a bandwidth term that grows with the tokens remains under the floor
    assert b.comm_time(4096.0, 3, 58) - b.comm_time(128.0, 3, 58) > 0
    # every setting carries its source into the profile's assumptions
    assert set(settings_sources()) >= set(S.__dataclass_fields__)
    assert one.assumptions()["sources"]["layer_overhead_s"].startswith("choice")
    with pytest.raises(InputError):
        llama_h200(layer_overhead_s=-1.0)


def test_a_drafter_below_the_targets_tensor_parallelism_is_priced_whole_on_fewer_gpus():
    """vLLM's draft_tensor_parallel_size 1 beside a TP4 target: the drafter's layer and LM head
    stream all their weights on one GPU, so its pass costs what it costs on one GPU (dearer than
    the TP4 share); at the target's own tp nothing changes; the step itself is untouched."""
    m, g = load_model_shape("llama-3.1-8b"), get_gpu("H100")
    tp4 = Roofline(m, g, RooflineSettings(tp=4))
    d1 = Roofline(m, g, RooflineSettings(tp=4, draft_tp=1))
    one = Roofline(m, g, RooflineSettings(tp=1))
    for kind in ("eagle3", "dflash", "mtp1"):
        for R in (1, 64):
            assert d1.draft_time(kind, R) == pytest.approx(one.draft_time(kind, R))
            assert d1.draft_time(kind, R) > 2 * tp4.draft_time(kind, R)
    same = Roofline(m, g, RooflineSettings(tp=4, draft_tp=4))
    assert same.draft_time("eagle3", 8) == tp4.draft_time("eagle3", 8)
    assert float(d1.step_time(64)) == float(tp4.step_time(64))
    with pytest.raises(InputError, match="divide"):
        Roofline(m, g, RooflineSettings(tp=4, draft_tp=3))
    moe = Roofline(load_model_shape("deepseek-v3"), g, RooflineSettings(tp=8, draft_tp=1))
    with pytest.raises(InputError, match="MTP"):
        moe.draft_time("mtp1", 4)
    assert moe.draft_time("eagle3", 4) > Roofline(load_model_shape("deepseek-v3"), g,
                                                  RooflineSettings(tp=8)).draft_time("eagle3", 4)


def test_roofline_cli_names_a_bad_draft_tp(tmp_path, capsys):
    from dspark_sim.cli import main

    out = tmp_path / "r.yaml"
    assert main(["roofline", "--model", "llama-3.1-8b", "--gpu", "H100", "--tp", "4", "--draft-tp", "3",
                 "--out", str(out)]) == 2
    assert "draft_tp" in capsys.readouterr().err and not out.exists()
    assert main(["roofline", "--model", "llama-3.1-8b", "--gpu", "H100", "--tp", "4", "--draft-tp", "1",
                 "--out", str(out)]) == 0
    assert "drafttp1" in out.read_text()
