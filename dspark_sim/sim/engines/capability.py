"""Which engine runs a replay: one table of what each engine can model, in one place.

`--engine fast` (the default) takes the first engine of `FAST_ORDER` that can run the replay;
naming an engine that cannot is bad input, with the first reason it cannot. The loop engine is
its compiled build when that is in use (native.py), with the same results.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...errors import InputError
from . import loop
from .block import BlockReplica
from .native import compiled
from .reference import ReferenceReplica

# the per-iteration python loop engine: its compiled build when that is in use, same results
LoopReplica = (compiled("_loop_native") or loop).LoopReplica

ENGINES = ("fast", "block", "loop", "reference")
FAST_ORDER = ("loop", "block", "reference")


@dataclass(frozen=True)
class Needs:
    """What a replay asks of an engine."""

    policy: str
    kv_semantics: str = "reserve"
    stateful: bool = False           # the policy keeps state across iterations (vLLM's policies)
    capped_drafts: bool = False      # the acceptance profile caps some steps' drafts (`drafted`)
    planned: bool = True             # verify lengths decided per batch composition (Policy.plans_apply)
    needs_accepted: bool = False     # verifies the accepted runs themselves (oracle)
    disaggregated: bool = False      # prompts prefilled elsewhere


@dataclass(frozen=True)
class Capability:
    """What an engine models: KV semantics, stateful policies (one iteration at a time), capped
    drafts, and whether verify lengths must come from per-composition plans (or accepted runs)."""

    kv_semantics: tuple[str, ...]
    stateful: bool
    capped_drafts: bool
    needs_plans: bool
    paged_disaggregated: bool = False


CAPABILITIES = {
    "reference": Capability(("reserve", "blocks", "blocks+prefix"), stateful=True, capped_drafts=True, needs_plans=False),
    "loop": Capability(("reserve", "blocks", "blocks+prefix"), stateful=False, capped_drafts=False, needs_plans=True),
    "block": Capability(("reserve",), stateful=False, capped_drafts=False, needs_plans=False),
}


def why_not(engine: str, needs: Needs) -> InputError | None:
    """The first reason `engine` cannot run a replay with these needs (None: it can)."""
    cap = CAPABILITIES[engine]
    if cap.needs_plans and not (needs.planned or needs.needs_accepted) and not needs.stateful:
        return InputError(f"engine '{engine}' needs a policy decided per batch composition; "
                          f"{needs.policy} with this profile is not", field="engine")
    if needs.capped_drafts and not cap.capped_drafts:
        # steps that drafted fewer than gamma (formats.md `drafted`) need a per-iteration engine
        return InputError(f"the acceptance profile caps some steps' drafts (`drafted`); engine "
                          f"{engine!r} does not model that, use 'reference' or 'fast'", field="engine")
    if needs.kv_semantics not in cap.kv_semantics or (needs.stateful and not cap.stateful):
        why = f"--kv-semantics {needs.kv_semantics}".replace("+prefix", " --prefix-caching") \
            if needs.kv_semantics not in cap.kv_semantics else f"policy {needs.policy}"
        able = [e for e, c in CAPABILITIES.items() if needs.kv_semantics in c.kv_semantics
                and (c.stateful or not needs.stateful)]
        return InputError(f"{why} runs on the {' or '.join(able)} engine only, not {engine!r}; use "
                          f"--sim-engine fast (it picks one) or {' or '.join(able)}", field="engine")
    if needs.kv_semantics != "reserve" and needs.disaggregated and not cap.paged_disaggregated:
        return InputError("--kv-semantics blocks does not model disaggregated prefill", field="prefill")
    return None


def engine_class(engine: str, needs: Needs):
    """The replica class that runs the replay (InputError when the named engine cannot)."""
    classes = {"reference": ReferenceReplica, "loop": LoopReplica, "block": BlockReplica}
    if engine != "fast":
        refusal = why_not(engine, needs)
        if refusal is not None:
            raise refusal
        return classes[engine]
    for name in FAST_ORDER:
        if why_not(name, needs) is None:
            return classes[name]
    raise why_not(FAST_ORDER[-1], needs)
