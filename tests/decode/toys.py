"""Test-only targets and drafters: a tiny random Llama, a table-driven toy target with an
exactly computable distribution, a drafter that replays known tokens, deliberately wrong
drafters. None of these is offered as a product component."""
from __future__ import annotations

import itertools

import torch

from dspark_sim.decode.context import Context
from dspark_sim.decode.drafters.base import Draft, Drafter
from dspark_sim.decode.sampling import Sampling, sample_from
from dspark_sim.decode.target import Target, TargetOutput


def tiny_llama(seed: int = 0, vocab: int = 260, eos: int | None = None, layers: int = 2,
               init: float = 0.1):
    """A small randomly initialised LlamaForCausalLM (no download), deterministic in `seed`."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(seed)
    config = LlamaConfig(vocab_size=vocab, hidden_size=64, intermediate_size=128,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=1024, initializer_range=init,
                         tie_word_embeddings=True, bos_token_id=None, pad_token_id=None,
                         eos_token_id=eos)
    model = LlamaForCausalLM(config).eval()
    model.generation_config.eos_token_id = eos
    model.generation_config.pad_token_id = eos if eos is not None else 0
    return model


class TableTarget(Target):
    """A toy target: logits at a position = A[token] + B[previous token]. Its exact
    next-token distribution is `logits_for(context)`, so joint distributions can be summed."""

    def __init__(self, vocab: int = 5, seed: int = 0, scale: float = 1.5, eos: int | None = None):
        g = torch.Generator().manual_seed(seed)
        self.A = torch.randn(vocab, vocab, generator=g) * scale
        self.B = torch.randn(vocab, vocab, generator=g) * scale
        self.name, self.device, self.dtype = "table", torch.device("cpu"), torch.float32
        self.vocab_size, self.num_layers, self.hidden_size = vocab, 2, vocab
        self.eos_token_ids = frozenset() if eos is None else frozenset([eos])

    def logits_for(self, context: list[int]) -> torch.Tensor:
        prev = context[-2] if len(context) > 1 else 0
        return self.A[context[-1]] + self.B[prev]

    def new_cache(self) -> list[int]:
        return []

    def cache_len(self, cache: list[int]) -> int:
        return len(cache)

    def crop(self, cache: list[int], length: int) -> None:
        del cache[length:]

    def forward(self, ids, cache, taps=(), last_only=False) -> TargetOutput:
        rows = []
        for t in ids.tolist():
            cache.append(t)
            rows.append(self.logits_for(cache))
        logits = torch.stack(rows)
        if last_only:
            logits = logits[-1:]
        feats = None
        if taps:   # fake features: one-hot of the token, one copy per tap
            onehot = torch.nn.functional.one_hot(ids, self.vocab_size).float()
            feats = onehot[:, None, :].expand(-1, len(taps), -1)
        return TargetOutput(logits, feats)

    def joint(self, prompt: list[int], n: int, sampling: Sampling) -> dict[tuple[int, ...], float]:
        """Exact probability of every sequence of the first `n` generated tokens."""
        out = {}
        for seq in itertools.product(range(self.vocab_size), repeat=n):
            prob, ctx = 1.0, list(prompt)
            for t in seq:
                prob *= float(sampling.probs(self.logits_for(ctx))[t])
                ctx.append(t)
            out[seq] = prob
        return out


class WrongSampledDrafter(Drafter):
    """Samples drafts from its own (wrong) table distribution q and reports q."""

    name = kind = "wrong-sampled"

    def __init__(self, vocab: int, seed: int = 1, scale: float = 1.5):
        g = torch.Generator().manual_seed(seed)
        self.C = torch.randn(vocab, vocab, generator=g) * scale

    def propose(self, ctx: Context, gamma, sampling, generator=None) -> Draft:
        last, tokens, qs = ctx.anchor, [], []
        for _ in range(gamma):
            q = sampling.probs(self.C[last])
            last = int(sample_from(q, generator))
            tokens.append(last)
            qs.append(q)
        return Draft(torch.tensor(tokens), torch.stack(qs))


class WrongFixedDrafter(Drafter):
    """Deterministic drafts from a fixed (wrong) rule: next = (anchor * 3 + 1) mod V."""

    name = kind = "wrong-fixed"

    def __init__(self, vocab: int):
        self.vocab = vocab

    def propose(self, ctx: Context, gamma, sampling, generator=None) -> Draft:
        last, tokens = ctx.anchor, []
        for _ in range(gamma):
            last = (last * 3 + 1) % self.vocab
            tokens.append(last)
        return Draft(torch.tensor(tokens))


class ReplayDrafter(Drafter):
    """Replays a known continuation, corrupting one draft in every `every` steps, so that
    both long acceptances and rejections occur."""

    name = kind = "replay"

    def __init__(self, sequence: list[int], vocab: int, every: int = 3, seed: int = 0):
        self.sequence, self.vocab, self.every = list(sequence), vocab, every
        self.g = torch.Generator().manual_seed(seed)
        self.calls = 0

    def propose(self, ctx: Context, gamma, sampling, generator=None) -> Draft:
        t = len(ctx.tokens)
        assert ctx.tokens == self.sequence[:t], "context diverged from the replayed sequence"
        tokens = list(self.sequence[t: t + gamma])
        self.calls += 1
        if tokens and self.calls % self.every == 0:
            k = int(torch.randint(len(tokens), (1,), generator=self.g))
            tokens[k] = (tokens[k] + 1) % self.vocab
        return Draft(torch.tensor(tokens, dtype=torch.long))


def byte_tokenizer(chat_template: bool = True):
    """A byte-level BPE tokenizer without merges (256 byte tokens + <eos>), built offline."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {ch: i for i, ch in enumerate(sorted(alphabet))}
    vocab["<eos>"] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>")
    if chat_template:
        fast.chat_template = ("{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}"
                              "{% if add_generation_prompt %}<assistant>{% endif %}")
    return fast


def save_tiny_model(path, seed: int = 0, eos: int | None = 256):
    """Save a tiny random Llama with the byte tokenizer as a local model directory."""
    model = tiny_llama(seed=seed, vocab=260, eos=eos)
    model.save_pretrained(path)
    byte_tokenizer().save_pretrained(path)
    return path
