"""The copy bias (decode/drafters/copybias.py): its index finds what a naive scan of the history
finds, and a drafter with the bias on stays lossless (greedy identity, chi-square at T > 0)
while its drafts do change."""
from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest
import torch

from dspark_sim.decode.drafters.config import DrafterConfig
from dspark_sim.decode.drafters.copybias import CopyIndex
from dspark_sim.decode.drafters.trained import TrainedDrafter
from dspark_sim.decode.sampling import Sampling
from dspark_sim.decode.speculate import speculative_generate
from dspark_sim.decode.target import HFTarget
from .conftest import KINDS
from .test_lossless import _random_drafter, chi_square_p, small_vocab_target  # noqa: F401 (fixture)

sys.path.insert(0, str(Path(__file__).parents[1] / "decode"))
from greedy_check import compare, reference  # noqa: E402


def _naive(hist: list[int], bigram: bool, unigram: bool):
    n = len(hist)
    if bigram and n >= 3:
        for i in range(n - 2, 0, -1):
            if hist[i] == hist[-1] and hist[i - 1] == hist[-2]:
                return hist[i + 1], 2
    if unigram and n >= 2:
        for i in range(n - 2, -1, -1):
            if hist[i] == hist[-1]:
                return hist[i + 1], 1
    return None


def test_index_matches_a_naive_scan():
    rng = random.Random(0)
    checked = {1: 0, 2: 0, None: 0}
    for trial in range(300):
        vocab = rng.choice([3, 5, 12])
        committed = [rng.randrange(vocab) for _ in range(rng.randrange(0, 30))]
        idx = CopyIndex()
        cut = rng.randrange(0, len(committed) + 1)          # committed in two pieces
        idx.extend(committed[:cut])
        idx.extend(committed[cut:])
        drafted = [rng.randrange(vocab) for _ in range(rng.randrange(0, 7))]
        for bigram, unigram in ((True, True), (True, False), (False, True)):
            want = _naive(committed + drafted, bigram, unigram)
            assert idx.candidate(drafted, bigram, unigram) == want, (committed, drafted)
            checked[want[1] if want else None] += 1
    assert min(checked.values()) > 50, checked            # every branch exercised


def test_config_rejects_a_bad_copy_bias():
    with pytest.raises(ValueError, match="copy_bias"):
        DrafterConfig(kind="dflash", hidden_size=8, num_heads=1, num_kv_heads=1, head_dim=8,
                      intermediate_size=8, vocab_size=10, num_target_layers=2, copy_bias=[-1.0])


def _repeating_prompts(count: int, vocab: int, seed: int = 9) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(count):
        p = torch.randint(3, vocab, (int(torch.randint(6, 20, (1,), generator=g)),), generator=g).tolist()
        out.append(p + p)                                  # the history repeats: copies exist
    return out


@pytest.mark.parametrize("kind", KINDS)
def test_greedy_identity_with_copy_bias(kind, target, trained):
    from .conftest import VOCAB
    hf = HFTarget(target)
    plain = TrainedDrafter(trained[kind][0], hf, kind)
    copying = TrainedDrafter(trained[kind][0], hf, kind)
    copying.copy_bias = (6.0, 2.0)
    changed = 0
    for i, p in enumerate(_repeating_prompts(6, VOCAB)):
        ref, logits = reference(target, p, 96)
        runs = {}
        for name, drafter in (("plain", plain), ("copy", copying)):
            gen = speculative_generate(hf, drafter, p, max_new_tokens=96, gamma=4)
            compare(ref, logits, gen.output_ids, f"{kind} {name} prompt {i}")
            runs[name] = gen.accepted
        changed += runs["plain"] != runs["copy"]
    assert changed >= 2, f"{kind}: the copy bias changed the drafts of only {changed} prompts"


@pytest.mark.parametrize("kind", ["dflash", "dspark", "eagle3"])
def test_sampling_with_copy_bias_is_distribution_exact(kind, small_vocab_target):
    model = small_vocab_target
    drafter = _random_drafter(kind, model)
    drafter.copy_bias = (3.0, 1.5)
    assert chi_square_p(model, drafter, Sampling(temperature=0.9, top_k=5), samples=2_000) > 1e-3


def test_set_writes_the_bias_into_a_copy_of_the_checkpoint(trained, tmp_path):
    from dspark_sim.train import copy_bias as cb
    from dspark_sim.decode.drafters.checkpoint import load_module, read_config, save_drafter

    src, dst = tmp_path / "src", tmp_path / "dst"
    save_drafter(trained["dspark"][0], src)
    cb.main(["set", str(src), str(dst), "--bigram", "24"])
    assert read_config(dst).copy_bias == [24.0, 0.0]
    assert read_config(src).copy_bias == []                     # the source is left alone
    assert load_module(dst).cfg.copy_bias == [24.0, 0.0]
    with pytest.raises(SystemExit):
        cb.main(["set", str(src), str(dst), "--bigram", "-1"])
    with pytest.raises(SystemExit):
        cb.parse_pairs("4:x")


@pytest.mark.parametrize("bad", [[-1.0], [1.0, 2.0, 3.0], "strong"])
def test_a_bad_copy_bias_in_config_json_names_the_field(trained, tmp_path, bad):
    import json

    from dspark_sim.decode.drafters.checkpoint import read_config, save_drafter
    from dspark_sim.errors import InputError

    save_drafter(trained["dflash"][0], tmp_path)
    cfg = json.loads((tmp_path / "config.json").read_text())
    cfg["copy_bias"] = bad
    (tmp_path / "config.json").write_text(json.dumps(cfg, indent=2))
    with pytest.raises(InputError, match="copy_bias"):
        read_config(tmp_path)


def test_set_on_a_bad_checkpoint_exits_2_and_writes_nothing(tmp_path, capsys):
    from dspark_sim.train import copy_bias as cb

    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    (src / "config.json").write_text('{"kind": "dflash"}')
    with pytest.raises(SystemExit) as exc:
        cb.main(["set", str(src), str(dst), "--bigram", "24"])
    assert exc.value.code == 2 and "config.json" in capsys.readouterr().err
    assert not dst.exists() and not (tmp_path / "dst.tmp").exists()
