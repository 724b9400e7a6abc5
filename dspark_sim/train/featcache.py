"""Target-feature cache: token ids, the concatenated target taps and the pre-norm last
hidden state (fp16) of every self-distillation sequence, computed once and memory-mapped
by every drafter's training run.

Layout of a cache directory:
  meta.json    target name + fingerprint, taps, widths, record count, tokens, completion
  index.json   per record: id, task, temperature, offset, length, prompt_len
  tokens.npy   int32 [N]            feats.npy  float16 [N, n_taps * d]
  last.npy     float16 [N, d]       lse.npy    float32 [N]   top.npy  int32 [N]
(lse / top: log-sum-exp and argmax of the target's logits at every position, so training
can use exactly normalised target probabilities over a draft vocabulary.)
Building is resumable: records are written in order and `meta.json` keeps `done`.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from ..errors import InputError
from ..fileio import write_json_atomic
from .selfdistill import DistillRecord

# features_fn(token ids of one sequence) -> (taps [L, n_taps * d], pre-norm last hidden [L, d])
FeaturesFn = Callable[[list[int]], tuple["torch.Tensor", "torch.Tensor"]]  # noqa: F821


def target_features_fn(target, taps: list[int]) -> FeaturesFn:
    """Features of one sequence from a decode-core Target (one forward, fresh KV cache)."""
    import torch

    def fn(ids: list[int]):
        out = target.forward(torch.tensor(ids, dtype=torch.long), target.new_cache(),
                             tuple(taps) + (-1,), last_only=True)
        f = out.features                                  # [L, n_taps + 1, d]
        return f[:, :-1].reshape(f.shape[0], -1), f[:, -1]
    return fn


@dataclass(frozen=True)
class CacheEntry:
    """Where one sequence lies in the cache arrays."""

    id: str
    task: str
    temperature: float
    offset: int
    length: int
    prompt_len: int


class FeatureCache:
    """Read access to a built cache (arrays are memory-mapped)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        meta_path = self.path / "meta.json"
        if not meta_path.is_file():
            raise InputError("not a feature cache (meta.json missing)", file=self.path)
        self.meta = json.loads(meta_path.read_text())
        if self.meta.get("done", 0) < self.meta["n_records"]:
            raise InputError(f"feature cache is incomplete ({self.meta.get('done', 0)}/"
                             f"{self.meta['n_records']} records); rerun the build to resume",
                             file=self.path)
        self.entries = [CacheEntry(**e) for e in json.loads((self.path / "index.json").read_text())]
        self.tokens = np.load(self.path / "tokens.npy", mmap_mode="r")
        self.feats = np.load(self.path / "feats.npy", mmap_mode="r")
        self.last = np.load(self.path / "last.npy", mmap_mode="r")
        self.lse = np.load(self.path / "lse.npy", mmap_mode="r")
        self.top = np.load(self.path / "top.npy", mmap_mode="r")

    @property
    def taps(self) -> list[int]:
        return list(self.meta["taps"])

    def sequence(self, i: int) -> dict[str, np.ndarray]:
        """Arrays of entry i: tokens [L], taps [L, F], last [L, d], lse [L], top [L]."""
        e = self.entries[i]
        sl = slice(e.offset, e.offset + e.length)
        return {"tokens": self.tokens[sl], "taps": self.feats[sl], "last": self.last[sl],
                "lse": self.lse[sl], "top": self.top[sl]}

    def token_counts(self, responses_only: bool = True) -> np.ndarray:
        """How often every token id occurs (in responses only, by default)."""
        vocab = int(self.meta.get("vocab_size", int(self.tokens.max()) + 1))
        counts = np.zeros(vocab, dtype=np.int64)
        for e in self.entries:
            start = e.offset + (e.prompt_len if responses_only else 0)
            counts += np.bincount(self.tokens[start:e.offset + e.length], minlength=vocab)[:vocab]
        return counts


def build_feature_cache(records: list[DistillRecord], out_dir: str | Path, features_fn: FeaturesFn,
                        head, *, taps: list[int], hidden_size: int, vocab_size: int, target: str,
                        fingerprint: str,
                        max_len: int = 512, flush_every: int = 32,
                        on_progress: Callable[[int, int], None] | None = None) -> Path:
    """Run the target once over every record (truncated to `max_len`) and store the features."""
    import torch

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    seqs = sorted(((r, (r.prompt_ids + r.response_ids)[:max_len]) for r in records),
                  key=lambda rs: rs[0].id)
    lengths = [len(s) for _, s in seqs]
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    n_total, width = int(offsets[-1]), len(taps) * hidden_size
    meta_path = out_dir / "meta.json"
    meta = {"schema": "dspark-sim/feature-cache/v1", "target": target, "fingerprint": fingerprint,
            "taps": list(taps), "hidden_size": hidden_size, "vocab_size": vocab_size,
            "n_records": len(seqs),
            "n_tokens": n_total, "max_len": max_len, "done": 0}
    if meta_path.is_file():
        old = json.loads(meta_path.read_text())
        if {k: old.get(k) for k in meta if k != "done"} == {k: v for k, v in meta.items() if k != "done"}:
            meta["done"] = int(old.get("done", 0))
    mode = "r+" if meta["done"] > 0 else "w+"
    tokens = np.lib.format.open_memmap(out_dir / "tokens.npy", mode=mode, dtype=np.int32, shape=(n_total,))
    feats = np.lib.format.open_memmap(out_dir / "feats.npy", mode=mode, dtype=np.float16,
                                      shape=(n_total, width))
    last = np.lib.format.open_memmap(out_dir / "last.npy", mode=mode, dtype=np.float16,
                                     shape=(n_total, hidden_size))
    lse = np.lib.format.open_memmap(out_dir / "lse.npy", mode=mode, dtype=np.float32, shape=(n_total,))
    top = np.lib.format.open_memmap(out_dir / "top.npy", mode=mode, dtype=np.int32, shape=(n_total,))
    index = [dict(id=r.id, task=r.task, temperature=r.temperature, offset=int(offsets[i]),
                  length=lengths[i], prompt_len=min(len(r.prompt_ids), lengths[i]))
             for i, (r, _) in enumerate(seqs)]
    write_json_atomic(out_dir / "index.json", index, indent=None)
    write_json_atomic(meta_path, meta)
    for i in range(meta["done"], len(seqs)):
        ids = seqs[i][1]
        with torch.no_grad():
            t, h = features_fn(ids)
        sl = slice(int(offsets[i]), int(offsets[i + 1]))
        tokens[sl] = np.asarray(ids, dtype=np.int32)
        feats[sl] = t.to(torch.float16).cpu().numpy()
        h16 = h.to(torch.float16)
        last[sl] = h16.cpu().numpy()
        s_lse, s_top = head.lse_and_top(h16.float())   # from the stored fp16 state, as in training
        lse[sl] = s_lse.cpu().numpy()
        top[sl] = s_top.cpu().numpy().astype(np.int32)
        if (i + 1) % flush_every == 0 or i + 1 == len(seqs):
            for arr in (tokens, feats, last, lse, top):
                arr.flush()
            meta["done"] = i + 1
            write_json_atomic(meta_path, meta)
        if on_progress is not None:
            on_progress(i + 1, len(seqs))
    return out_dir
