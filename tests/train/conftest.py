"""Tiny random Llama targets, their self-distillation data and feature caches, for the
training tests (all on the CPU, seconds each)."""
from __future__ import annotations

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from dspark_sim.decode.drafters.checkpoint import build_module
from dspark_sim.decode.drafters.config import DrafterConfig
from dspark_sim.train.featcache import FeatureCache, build_feature_cache
from dspark_sim.train.selfdistill import DistillRecord
from dspark_sim.train.targethead import TargetHead

KINDS = ("mtp1", "eagle3", "dflash", "dspark")
VOCAB = 96


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny tensors run fastest single-threaded (and the CI machine is shared)."""
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(old)


def tiny_target(seed: int = 0, layers: int = 4, vocab: int = VOCAB, eos: int | None = 2,
                sharpen: float = 8.0) -> LlamaForCausalLM:
    """A small random Llama whose distributions are peaked enough to be learnable."""
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=layers,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                      tie_word_embeddings=True, bos_token_id=1, eos_token_id=eos, pad_token_id=0)
    model = LlamaForCausalLM(cfg).eval()
    model.generation_config.eos_token_id = eos
    with torch.no_grad():
        model.model.embed_tokens.weight.mul_(sharpen)
    return model


def hook_features(model: LlamaForCausalLM, taps: list[int]):
    """features_fn for the cache: outputs of decoder layers `taps` and of the last layer."""
    layers = model.model.layers

    def fn(ids: list[int]):
        caught = {}
        hooks = [layers[i].register_forward_hook(
            lambda m, a, o, i=i: caught.__setitem__(i, o[0] if isinstance(o, tuple) else o))
            for i in sorted(set(taps) | {len(layers) - 1})]
        try:
            with torch.no_grad():
                model(input_ids=torch.tensor([ids]))
        finally:
            for h in hooks:
                h.remove()
        return torch.cat([caught[i][0] for i in taps], -1), caught[len(layers) - 1][0]
    return fn


def distill_records(model: LlamaForCausalLM, n: int = 40, prompt_len: int = 8, new: int = 40,
                    seed: int = 1) -> list[DistillRecord]:
    """The tiny target's own greedy answers to random prompts."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        p = torch.randint(3, VOCAB, (1, prompt_len), generator=gen)
        ids = model.generate(p, attention_mask=torch.ones_like(p), max_new_tokens=new,
                             do_sample=False, pad_token_id=0)
        out.append(DistillRecord(id=f"r{i}", task="math", temperature=0.0,
                                 prompt_ids=p[0].tolist(), response_ids=ids[0, prompt_len:].tolist()))
    return out


def tiny_config(kind: str, model: LlamaForCausalLM, **kw) -> DrafterConfig:
    args = dict(gamma=4, draft_vocab=64, seq_rank=8, taps=[0, 1, 2])
    args.update(kw)
    return DrafterConfig.for_target(kind, model.config, **args)


def bound_module(cfg: DrafterConfig, model: LlamaForCausalLM, vocab_ids: torch.Tensor | None = None,
                 seed: int = 0):
    torch.manual_seed(seed)
    mod = build_module(cfg)
    if vocab_ids is not None:
        mod.vocab.set_ids(vocab_ids)
    mod.bind_target(model.model.embed_tokens.weight, model.lm_head.weight)
    return mod


@pytest.fixture(scope="session")
def target() -> LlamaForCausalLM:
    return tiny_target()


@pytest.fixture(scope="session")
def cache(target, tmp_path_factory) -> FeatureCache:
    taps = tiny_config("dspark", target).taps
    path = tmp_path_factory.mktemp("cache")
    old = torch.get_num_threads()
    torch.set_num_threads(1)
    build_feature_cache(distill_records(target), path, hook_features(target, taps),
                        TargetHead.from_model(target), taps=taps, hidden_size=32, vocab_size=VOCAB,
                        target="tiny", fingerprint="tiny")
    torch.set_num_threads(old)
    return FeatureCache(path)


@pytest.fixture(scope="session")
def vocab_ids(cache) -> torch.Tensor:
    counts = cache.token_counts(responses_only=False)
    return torch.tensor(counts.argsort(kind="stable")[::-1][:64].copy())


VAL_KEY = {"mtp1": "soft_ce", "eagle3": "soft_ce", "dflash": "ce", "dspark": "tv"}


@pytest.fixture(scope="session")
def trained(target, cache, vocab_ids, tmp_path_factory) -> dict:
    """Every kind trained for 30 steps on the tiny target: {kind: (module, val before, val after,
    run directory)}. Shared by the training and the losslessness tests."""
    from dspark_sim.train.objectives import LossWeights
    from dspark_sim.train.trainer import Trainer, TrainConfig

    old = torch.get_num_threads()
    torch.set_num_threads(1)
    out = {}
    for kind in KINDS:
        mod = bound_module(tiny_config(kind, target), target, vocab_ids)
        cfg = TrainConfig(steps=30, row_len=128, rows_per_batch=2, lr=3e-3, val_fraction=0.15,
                          loss=LossWeights(anchors_per_row=24, chunk=128))
        run_dir = tmp_path_factory.mktemp(f"run-{kind}")
        tr = Trainer(mod, cache, TargetHead.from_model(target), cfg, run_dir)
        before = tr.validate()[VAL_KEY[kind]]
        tr.run()
        out[kind] = (mod.eval(), before, tr.validate()[VAL_KEY[kind]], run_dir)
    torch.set_num_threads(old)
    return out


CHAT_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }} {{ m['content'] }}<|im_end|>"
                 "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant {% endif %}")


def tiny_tokenizer():
    """A word-level tokenizer over VOCAB ids (built in memory, no download)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = ["<pad>", "<s>", "<|im_end|>", "<|im_start|>", "<unk>"]
    words = [f"w{i}" for i in range(VOCAB - len(specials) - 3)] + ["user", "assistant", "system"]
    vocab = {t: i for i, t in enumerate(specials + words)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<s>",
                                   eos_token="<|im_end|>", unk_token="<unk>",
                                   additional_special_tokens=["<|im_start|>"])
    fast.chat_template = CHAT_TEMPLATE
    return fast


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A tiny target saved as a model directory with its tokenizer (`--target DIR`)."""
    path = tmp_path_factory.mktemp("tiny-target")
    model = tiny_target(seed=0, layers=4)
    model.save_pretrained(path)
    tiny_tokenizer().save_pretrained(path)
    return path
