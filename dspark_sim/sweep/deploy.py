"""What to deploy for a recommended policy: vLLM's `--speculative-config` (with the draft model)
and the equivalent SGLang server flags.

vLLM (0.32, `vllm/config/speculative.py`): `method` from the drafter kind; `model` names the draft
checkpoint (`--draft-model`, else the acceptance profile's `drafter_checkpoint`); methods whose
drafter lives in the target need none (`mtp`; `dspark` when the target checkpoint bundles the
head, as DeepSeek-V4 does; `ngram` drafts from the prompt, with the profile's lookup lengths).

SGLang (0.5.23): the flags come from its documented server arguments,
`python/sglang/srt/arg_groups/fields/spec.py` (the `--speculative-*` options),
`srt/speculative/spec_info.py` (the algorithms) and `srt/arg_groups/speculative_hook.py` (DSpark's
verify window is gamma + 1; every speculative algorithm caps running requests at 48 unless
`--max-running-requests` is given). A chain of K drafts is `--speculative-num-steps K
--speculative-eagle-topk 1 --speculative-num-draft-tokens K+1`. SGLang has no per-batch-size K and
no adaptive verification of vLLM's kind (its DSpark verifies by confidence only with an SPS table
profiled offline), so for those choices it gets the best fixed K, said in a note.
`check_sglang_flags` validates flags against that documented set; tests also parse them with
SGLang's own argument parser where SGLang is importable.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..profiles.acceptance import AcceptanceProfile
from ..sim.spec_config import BatchSchedule, speculative_config

# SGLang 0.5.23's documented flags used here and the values they take
SGLANG_INT_FLAGS = ("--speculative-num-steps", "--speculative-eagle-topk", "--speculative-num-draft-tokens",
                    "--speculative-dspark-block-size", "--speculative-dflash-block-size",
                    "--speculative-ngram-max-bfs-breadth", "--max-running-requests")
SGLANG_STR_FLAGS = ("--speculative-algorithm", "--speculative-draft-model-path")
SGLANG_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK", "UNO")
_SGLANG_ALGORITHM = {"eagle3": "EAGLE3", "eagle": "EAGLE", "mtp": "EAGLE", "dspark": "DSPARK",
                     "dflash": "DFLASH", "ngram": "NGRAM", "draft_model": "STANDALONE"}
# vLLM methods that need a draft checkpoint named in the config
_NEEDS_MODEL = ("eagle", "eagle3", "dflash", "draft_model")


@dataclass
class Deployment:
    """One recommendation as server settings; `vllm` None = serve without speculation."""

    vllm: dict[str, Any] | None
    sglang: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def draft_checkpoint(profile: AcceptanceProfile | None, override: str | None) -> str | None:
    """The draft model to name: --draft-model, else the profile's `drafter_checkpoint`."""
    if override:
        return override
    return (profile.extra.get("drafter_checkpoint") if profile is not None else None) or None


def _vllm_options(method: str, profile: AcceptanceProfile | None) -> dict[str, Any]:
    lookup = profile.extra.get("ngram_lookup") if profile is not None else None
    if method == "ngram" and lookup:
        return {"prompt_lookup_min": int(lookup[0]), "prompt_lookup_max": int(lookup[1])}
    return {}


def sglang_flags(method: str, k: int, checkpoint: str | None, max_running: int | None) -> list[str]:
    """SGLang server flags for a chain of k drafts with `method`'s drafter."""
    algorithm = _SGLANG_ALGORITHM.get(method)
    if algorithm is None or k < 1:
        return []
    flags = ["--speculative-algorithm", algorithm]
    if checkpoint and method not in ("mtp", "ngram"):
        flags += ["--speculative-draft-model-path", checkpoint]
    if method == "dspark":
        flags += ["--speculative-dspark-block-size", str(k)]
    elif method == "dflash":
        flags += ["--speculative-dflash-block-size", str(k + 1)]
    elif method == "ngram":
        flags += ["--speculative-num-draft-tokens", str(k + 1), "--speculative-ngram-max-bfs-breadth", "1"]
    else:
        flags += ["--speculative-num-steps", str(k), "--speculative-eagle-topk", "1",
                  "--speculative-num-draft-tokens", str(k + 1)]
    if max_running:
        flags += ["--max-running-requests", str(max_running)]
    return flags


def deployment(policy: str, method: str, gamma: int, schedule: BatchSchedule | None,
               profile: AcceptanceProfile | None, *, draft_model: str | None = None,
               fixed_k: int | None = None, max_running: int | None = None) -> Deployment:
    """vLLM config and SGLang flags for a recommended policy (`ar`, `mtp1`, `static-K`,
    `vllm-schedule`, `vllm-adaptive`); `fixed_k`: the best fixed K, SGLang's setting when vLLM's
    choice is a schedule or adaptive verification."""
    if policy == "ar":
        return Deployment(None, [], ["no speculation: serve without --speculative-config "
                                     "(SGLang: without --speculative-algorithm)"])
    if policy == "mtp1":
        return Deployment(speculative_config("mtp", 1), sglang_flags("mtp", 1, None, max_running),
                          ["MTP-1 uses the MTP layer inside the target checkpoint (no draft model)"])
    checkpoint = draft_checkpoint(profile, draft_model)
    notes: list[str] = []
    if method in _NEEDS_MODEL and not checkpoint:
        notes.append(f"vLLM's method {method!r} needs the draft checkpoint: pass --draft-model "
                     "HF_ID_OR_PATH (the acceptance profile names none)")
    if method == "dspark" and not checkpoint:
        notes.append("no draft model named: vLLM and SGLang then load the DSpark head from the "
                     "target checkpoint (as DeepSeek-V4 ships it); name one with --draft-model otherwise")
    model = checkpoint if method != "ngram" else None
    options = _vllm_options(method, profile)
    if policy == "vllm-adaptive":
        vllm = speculative_config(method, gamma, adaptive=True, model=model, **options)
    elif policy == "vllm-schedule":
        assert schedule is not None
        top = max(k for _, _, k in schedule.ranges)
        vllm = speculative_config(method, max(top, 1), schedule=schedule, model=model, **options)
    else:
        vllm = speculative_config(method, int(policy.split("-")[1]), model=model, **options)
    k = int(policy.split("-")[1]) if policy.startswith("static-") else (fixed_k or vllm["num_speculative_tokens"])
    if policy in ("vllm-schedule", "vllm-adaptive"):
        what = "a per-batch-size K" if policy == "vllm-schedule" else "vLLM's adaptive verification"
        notes.append(f"SGLang has no equivalent of {what}; its flags are the best fixed K ({k})")
    if method == "ngram":
        notes.append("SGLang's NGRAM drafts from a trie of the prompt and past outputs, not vLLM's "
                     "prompt lookup: the acceptance measured with vLLM carries over only roughly")
    if max_running:
        notes.append(f"SGLang caps running requests at 48 under speculation unless told: "
                     f"--max-running-requests {max_running} is the batch limit simulated")
    return Deployment(vllm, sglang_flags(method, k, checkpoint, max_running), notes)


def check_sglang_flags(flags: list[str]) -> list[str]:
    """Problems with SGLang server flags against SGLang 0.5.23's documented set ([] = none):
    unknown flags, non-integer values, unknown algorithms, a chain whose draft tokens are not
    steps + 1 (top-k 1), a DSpark window that is not block size + 1."""
    problems, values = [], {}
    if len(flags) % 2:
        return [f"flags must come in FLAG VALUE pairs: {flags}"]
    for name, value in zip(flags[::2], flags[1::2]):
        if name not in SGLANG_INT_FLAGS + SGLANG_STR_FLAGS:
            problems.append(f"{name} is not a documented SGLang flag")
        elif name in SGLANG_INT_FLAGS and not (value.isdigit() and int(value) >= 1):
            problems.append(f"{name} needs a positive integer, got {value!r}")
        values[name] = value
    algorithm = values.get("--speculative-algorithm")
    if algorithm is not None and algorithm.upper() not in SGLANG_ALGORITHMS:
        problems.append(f"unknown speculative algorithm {algorithm!r}")
    steps, topk = values.get("--speculative-num-steps"), values.get("--speculative-eagle-topk")
    tokens = values.get("--speculative-num-draft-tokens")
    if steps and topk == "1" and tokens and int(tokens) != int(steps) + 1:
        problems.append(f"a chain (top-k 1) of {steps} steps verifies {int(steps) + 1} tokens, not {tokens}")
    block = values.get("--speculative-dspark-block-size")
    if block and tokens and int(tokens) != int(block) + 1:
        problems.append(f"DSpark's verify window is block size + 1 = {int(block) + 1}, not {tokens}")
    return problems
