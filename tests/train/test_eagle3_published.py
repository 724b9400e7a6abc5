"""Published EAGLE-3 drafters (the Hugging Face layout vLLM and SGLang load) through
`--drafter PATH`.

The tests write checkpoints in that exact layout for tiny Llama targets (config.json naming
LlamaForCausalLMEagle3, `midlayer.*`, `fc`, `norm`, `lm_head` over a reduced draft vocabulary,
`d2t` / `t2d`), once briefly trained with the product's EAGLE-3 objective, and check: the loaded
drafter computes what an independent forward written from vLLM's llama_eagle3.py and its
proposer computes from the file's raw tensors; greedy decoding is token-identical to
`generate`; sampled decoding is distribution-exact (chi-square); `measure` gives acceptance
and confidence calibration per task; `calibrate` fits the draft-probability confidences and
stores them beside the checkpoint; foreign and misshapen checkpoints are refused with exit 2.
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb

from dspark_sim.cli import main
from dspark_sim.decode.drafters import make_drafter
from dspark_sim.decode.drafters.eagle3_published import (PublishedEagle3Module, published_config,
                                                         read_published_config)
from dspark_sim.decode.sampling import Sampling
from dspark_sim.decode.speculate import speculative_generate
from dspark_sim.decode.target import HFTarget
from .conftest import tiny_target
from .test_lossless import _prompts, chi_square_p, small_vocab_target  # noqa: F401 (fixture)

sys.path.insert(0, str(Path(__file__).parents[1] / "decode"))
from greedy_check import compare, reference  # noqa: E402

# The published layout's weight names (vLLM's llama_eagle3.py loads `midlayer.*` as layers.0)
# -> the names of the product's module the tests train.
LAYOUT = {
    "fc.weight": "proj.fc.weight",
    "midlayer.input_layernorm.weight": "layer.embed_norm.weight",
    "midlayer.hidden_norm.weight": "layer.hidden_norm.weight",
    "midlayer.self_attn.q_proj.weight": "layer.attn.q_proj.weight",
    "midlayer.self_attn.k_proj.weight": "layer.attn.k_proj.weight",
    "midlayer.self_attn.v_proj.weight": "layer.attn.v_proj.weight",
    "midlayer.self_attn.o_proj.weight": "layer.attn.o_proj.weight",
    "midlayer.post_attention_layernorm.weight": "layer.mlp_norm.weight",
    "midlayer.mlp.gate_proj.weight": "layer.mlp.gate.weight",
    "midlayer.mlp.up_proj.weight": "layer.mlp.up.weight",
    "midlayer.mlp.down_proj.weight": "layer.mlp.down.weight",
    "norm.weight": "norm.weight",
    "lm_head.weight": "lm_head.weight",
}


def eagle3_config(model, draft_vocab: int, aux: list[int]) -> dict:
    """config.json of a one-layer EAGLE-3 drafter for `model`, as published ones read."""
    c = model.config
    return {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama",
            "hidden_size": c.hidden_size, "intermediate_size": c.intermediate_size,
            "num_attention_heads": c.num_attention_heads,
            "num_key_value_heads": c.num_key_value_heads, "num_hidden_layers": 1,
            "hidden_act": "silu", "rms_norm_eps": c.rms_norm_eps,
            "rope_theta": float(c.rope_parameters["rope_theta"]),
            "max_position_embeddings": c.max_position_embeddings, "vocab_size": c.vocab_size,
            "draft_vocab_size": draft_vocab, "tie_word_embeddings": False,
            "eagle_aux_hidden_state_layer_ids": aux, "torch_dtype": "float32"}


def new_module(model, folder: Path, config: dict, vocab_ids: torch.Tensor, seed: int = 0):
    """A fresh module of the published layout for `model` (config written to `folder`), its LM
    head starting from the target's rows of the draft vocabulary."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    data, check = read_published_config(folder)
    torch.manual_seed(seed)
    mod = PublishedEagle3Module(published_config(data, check, HFTarget(model)), data)
    mod.vocab.set_ids(vocab_ids)
    with torch.no_grad():
        mod.lm_head.weight.copy_(model.lm_head.weight[vocab_ids.long()])
    mod.bind_target(model.model.embed_tokens.weight, model.lm_head.weight)
    return mod


def write_weights(mod, folder: Path) -> Path:
    """model.safetensors in the published layout: the LAYOUT names, d2t and t2d."""
    state = mod.state_dict()
    ids = mod.vocab.ids.long()
    tensors = {pub: state[mine].detach().clone().contiguous() for pub, mine in LAYOUT.items()}
    tensors["d2t"] = ids - torch.arange(ids.numel())
    t2d = torch.zeros(mod.cfg.vocab_size, dtype=torch.bool)
    t2d[ids] = True
    tensors["t2d"] = t2d
    save_file(tensors, str(folder / "model.safetensors"))
    return folder


@pytest.fixture(scope="module")
def published(target, cache, vocab_ids, tmp_path_factory):
    """A published-layout EAGLE-3 drafter for the tiny target (aux layers 1, 2, 3: the cache's
    taps 0, 1, 2), trained for 30 steps with the product's EAGLE-3 objective, unrolled 4 steps
    deep (the loaded config's draft cap of 64 would unroll 64: 96 of the fixture's 100 s)."""
    from dataclasses import replace

    from dspark_sim.train.objectives import LossWeights
    from dspark_sim.train.targethead import TargetHead
    from dspark_sim.train.trainer import Trainer, TrainConfig

    folder = tmp_path_factory.mktemp("eagle3-published")
    mod = new_module(target, folder, eagle3_config(target, 64, [1, 2, 3]), vocab_ids)
    cfg = TrainConfig(steps=30, row_len=128, rows_per_batch=2, lr=3e-3, val_fraction=0.15,
                      loss=LossWeights(anchors_per_row=24, chunk=128))
    loaded = mod.cfg
    mod.cfg = replace(loaded, gamma=4)
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    Trainer(mod, cache, TargetHead.from_model(target), cfg, tmp_path_factory.mktemp("run")).run()
    torch.set_num_threads(old)
    mod.cfg = loaded
    return write_weights(mod.eval(), folder)


def _rms(x, w, eps):
    return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))


def vllm_style_logits(folder: Path, model, tokens: list[int], drafts: list[int]) -> list[torch.Tensor]:
    """Full-vocabulary draft logits (-inf outside the draft vocabulary) of draft steps
    0..len(drafts), written from vLLM's llama_eagle3.py and its proposer on the file's raw
    tensors: entry i reads embed(token i+1) and fc(concat of the target's hidden states entering
    the aux layers at i); a draft step reads the previous draft and the layer's pre-norm output,
    one position on, attending to every earlier entry."""
    w = load_file(str(folder / "model.safetensors"))
    data = json.loads((folder / "config.json").read_text())
    eps, heads, kv = data["rms_norm_eps"], data["num_attention_heads"], data["num_key_value_heads"]
    hd = data["hidden_size"] // heads
    rope = LlamaRotaryEmbedding(LlamaConfig(hidden_size=data["hidden_size"], num_attention_heads=heads,
                                            rope_theta=data["rope_theta"]))
    with torch.no_grad():
        hs = model(torch.tensor([tokens]), output_hidden_states=True).hidden_states
        n = len(tokens) - 1
        fused = torch.cat([hs[a][0, :n] for a in data["eagle_aux_hidden_state_layer_ids"]], -1)
        hidden = fused @ w["fc.weight"].T
        emb = model.model.embed_tokens.weight[torch.tensor(tokens[1:])]
        pos = torch.arange(n)
        keys, values, out_logits = [], [], []
        for step in range(len(drafts) + 1):
            x = torch.cat([_rms(emb, w["midlayer.input_layernorm.weight"], eps),
                           _rms(hidden, w["midlayer.hidden_norm.weight"], eps)], -1)
            m = x.shape[0]
            q = (x @ w["midlayer.self_attn.q_proj.weight"].T).view(m, heads, hd).transpose(0, 1)
            k = (x @ w["midlayer.self_attn.k_proj.weight"].T).view(m, kv, hd).transpose(0, 1)
            v = (x @ w["midlayer.self_attn.v_proj.weight"].T).view(m, kv, hd).transpose(0, 1)
            cos, sin = rope(x[None], pos[None])
            q, k = apply_rotary_pos_emb(q[None], k[None], cos, sin)
            keys.append(k[0])
            values.append(v)
            kk = torch.cat(keys, 1).repeat_interleave(heads // kv, 0)
            vv = torch.cat(values, 1).repeat_interleave(heads // kv, 0)
            mask = torch.ones(m, kk.shape[1], dtype=torch.bool)
            if step == 0:
                mask = torch.ones(m, m, dtype=torch.bool).tril()
            a = F.scaled_dot_product_attention(q[0], kk, vv, attn_mask=mask)
            a = a.transpose(0, 1).reshape(m, -1) @ w["midlayer.self_attn.o_proj.weight"].T
            h1 = hidden + a
            g = _rms(h1, w["midlayer.post_attention_layernorm.weight"], eps)
            out = h1 + (F.silu(g @ w["midlayer.mlp.gate_proj.weight"].T)
                        * (g @ w["midlayer.mlp.up_proj.weight"].T)) @ w["midlayer.mlp.down_proj.weight"].T
            draft_logits = _rms(out[-1], w["norm.weight"], eps) @ w["lm_head.weight"].T
            full = torch.full((data["vocab_size"],), float("-inf"))
            full[torch.arange(draft_logits.numel()) + w["d2t"]] = draft_logits
            out_logits.append(full)
            if step < len(drafts):                       # the next draft step's input
                emb = model.model.embed_tokens.weight[drafts[step]][None]
                hidden = out[-1:]
                pos = torch.tensor([n - 1 + step + 1])
    return out_logits


def test_the_loaded_drafter_computes_what_vllms_layout_means(published, target):
    """q of the first three sampled drafts equals the softmax of the independent forward's
    logits (teacher-forced on the same drafts): names, d2t direction, norms, rope, residual."""
    hf = HFTarget(target)
    drafter = make_drafter(str(published), hf)
    drafts = []
    propose = drafter.propose
    drafter.propose = lambda *a, **k: drafts.append(propose(*a, **k)) or drafts[-1]
    prompt = _prompts(1, seed=9)[0]
    gen = speculative_generate(hf, drafter, prompt, max_new_tokens=4, gamma=3,
                               sampling=Sampling(1.0), generator=torch.Generator().manual_seed(0))
    first = drafts[0]
    tokens = prompt + [gen.output_ids[0]]
    ref = vllm_style_logits(published, target, tokens, first.tokens.tolist()[:-1])
    for j in range(len(first)):
        assert torch.allclose(first.q[j], torch.softmax(ref[j], -1), atol=1e-5), j
    assert drafter.kind == "eagle3" and drafter.taps == (0, 1, 2) and drafter.has_confidence


def test_greedy_decoding_is_token_identical_and_drafts_land(published, target):
    hf = HFTarget(target)
    drafter = make_drafter(str(published), hf)
    accepted = rejected = 0
    for i, p in enumerate(_prompts(6)):
        ref, logits = reference(target, p, 64)
        gen = speculative_generate(hf, drafter, p, max_new_tokens=64, gamma=4)
        compare(ref, logits, gen.output_ids, f"published EAGLE-3 prompt {i}")
        accepted += sum(gen.accepted)
        rejected += sum(a < v for a, v in zip(gen.accepted, gen.verified))
        assert all(len(c) == v for c, v in zip(gen.confidence, gen.verified))
    assert accepted > 30 and rejected > 6, (accepted, rejected)


def test_sampled_decoding_is_distribution_exact(small_vocab_target, tmp_path):  # noqa: F811
    """A random published-layout drafter whose draft vocabulary omits token 4 (d2t skips it),
    top-k / top-p warping: the first three tokens follow the target's exact joint."""
    model = small_vocab_target
    mod = new_module(model, tmp_path, eagle3_config(model, 5, [1, 2, 3]),
                     torch.tensor([0, 1, 2, 3, 5]), seed=11)
    drafter = make_drafter(str(write_weights(mod, tmp_path)), HFTarget(model))
    warp = Sampling(temperature=0.9, top_k=5, top_p=0.95)
    assert chi_square_p(model, drafter, warp, samples=2_000) > 1e-3


def _task_file(path: Path, n: int, seed: int) -> Path:
    rng = np.random.default_rng(seed)
    path.write_text("".join(json.dumps({"prompt": " ".join(f"w{int(x)}" for x in rng.integers(0, 60, 6))})
                            + "\n" for _ in range(n)))
    return path


def test_measure_and_calibrate_a_published_drafter_per_task(published, tiny_model_dir, tmp_path, capsys):
    tgt = ["--target", str(tiny_model_dir), "--device", "cpu", "--threads", "1"]
    tasks = f"alpha={_task_file(tmp_path / 'a.jsonl', 6, 1)},beta={_task_file(tmp_path / 'b.jsonl', 6, 2)}"
    out = tmp_path / "eagle3.acceptance.json"
    # raw prompts (no chat template: the drafter was trained on template-free text), long enough
    # for the tiny target's repetitions, where the drafts land
    assert main(["measure", "--drafter", str(published), "--tasks", tasks, "--n", "3", "--gamma", "4",
                 "--max-new-tokens", "96", "--no-chat", "--out", str(out), *tgt]) == 0
    profile = json.loads(out.read_text())
    assert profile["drafter_kind"] == "eagle3" and set(profile["tasks"]) == {"alpha", "beta"}
    report = json.loads(out.with_name("eagle3.report.json").read_text())
    for name in ("alpha", "beta"):
        t = report["tasks"][name]
        assert t["identical_to_plain"] == "3/3" and t["requests"] == 3 and t["mean_tau"] > 1.0
        head = t["calibration"]["headline"]
        assert head["n"] == sum(r["n"] for r in t["calibration"]["positions"]) > 0
        assert profile["calibration"]["tasks"][name]["headline"] == head
    capsys.readouterr()
    # calibrate loads the published layout and stores the fit beside its weights
    report_dir = tmp_path / "cal"
    assert main(["calibrate", "--drafter", str(published), "--tasks", tasks, "--n", "6", "--gamma", "4",
                 "--max-new-tokens", "48", "--min-positives", "5", "--report", str(report_dir), *tgt]) == 0
    stored = json.loads((published / "calibration.sts.json").read_text())
    cal = json.loads((report_dir / "calibration.json").read_text())
    assert stored["sts"]["0.0"] == [round(t, 5) for t in cal["temperatures"]]
    assert make_drafter(str(published), HFTarget(tiny_target())).cfg.sts["0.0"] == stored["sts"]["0.0"]


def test_a_foreign_format_is_refused_naming_the_known_ones(tmp_path, tiny_model_dir, capsys):
    (tmp_path / "medusa").mkdir()
    (tmp_path / "medusa" / "config.json").write_text(json.dumps({"architectures": ["MedusaModel"]}))
    assert main(["generate", "--drafter", str(tmp_path / "medusa"), "--prompt", "w1",
                 "--target", str(tiny_model_dir)]) == 2
    err = capsys.readouterr().err
    assert "not a checkpoint format this product knows" in err and "MedusaModel" in err
    assert "published EAGLE-3" in err and "dspark-sim drafters" in err and "Traceback" not in err


def test_a_published_drafter_of_another_width_is_refused_before_decoding(target, tmp_path,
                                                                         tiny_model_dir, capsys):
    config = eagle3_config(target, 64, [1, 2, 3])
    wide = {**config, "hidden_size": 48, "intermediate_size": 96}     # another model's width
    (tmp_path / "config.json").write_text(json.dumps(wide))
    save_file({"d2t": torch.zeros(64, dtype=torch.long)}, str(tmp_path / "model.safetensors"))
    assert main(["measure", "--drafter", str(tmp_path), "--tasks", "math", "--n", "1",
                 "--out", str(tmp_path / "m.acceptance.json"), "--target", str(tiny_model_dir)]) == 2
    err = capsys.readouterr().err
    assert "config.json" in err and "'hidden_size'" in err and "expected 32" in err and "found 48" in err
    assert "Traceback" not in err and not (tmp_path / "m.records.jsonl").exists()

