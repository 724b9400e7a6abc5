"""Everything a real-engine run needs, loaded and validated before any model is touched."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..decode.drafters.base import Drafter
from ..decode.target import HFTarget
from ..errors import InputError
from ..profiles.acceptance import AcceptanceProfile
from ..profiles.hardware import HardwareProfile
from ..profiles.registry import (acceptance_profile_path, hw_profile_path, load_acceptance_profile,
                                 load_hw_profile, shipped_acceptance_names)
from ..sim.speculation.registry import make_policy
from ..traces.schema import Trace, load_trace
from .engine import check_engine_policy, scale_trace

DEFAULT_ENGINE_HW = "cpu-2core-smollm2-135m"
EMBEDDED_PREFIX = "smollm2-135m"


def default_engine_acceptance(drafter: str, temperature: float) -> str | None:
    """The shipped acceptance profile measured with `drafter` on the embedded target at this
    temperature (`smollm2-135m-<drafter>-g<G>-t<T>`), when exactly one exists."""
    if not float(temperature).is_integer():
        return None
    tail = f"-t{int(temperature)}"
    found = [n for n in shipped_acceptance_names()
             if n.startswith(f"{EMBEDDED_PREFIX}-{drafter}-g") and n.endswith(tail)]
    return found[0] if len(found) == 1 else None


@dataclass
class EngineInputs:
    """A validated trace, policies, hardware and acceptance profiles; the model comes later."""

    trace: Trace
    trace_name: str
    policies: list[str]
    hw: HardwareProfile
    hw_name: str
    acceptance: dict[str, tuple[AcceptanceProfile | None, str | None]]    # by policy
    gamma: int | None                     # from the acceptance profiles (None: no speculation)


def load_engine_inputs(trace_path: str | Path, policies: list[str], hw: str, drafter: str,
                       acceptance: str | None, temperature: float = 0.0,
                       time_scale: float = 1.0) -> EngineInputs:
    """Load the trace (arrivals divided by `time_scale`), check the policies, load the hardware
    profile and each speculative policy's acceptance profile (`acceptance`: one for all, or
    POLICY=ACC,...; default: the shipped profile of `drafter` at `temperature`)."""
    from ..sim.replay import parse_acceptance_option

    for p in policies:
        check_engine_policy(p)
    trace = scale_trace(load_trace(trace_path), time_scale)
    hw_prof = load_hw_profile(hw_profile_path(hw))
    default = default_engine_acceptance(drafter, temperature)
    chosen = parse_acceptance_option(acceptance, policies)
    named = set(policies) if acceptance and "=" not in acceptance else \
        {part.partition("=")[0].strip() for part in (acceptance or "").split(",")}
    loaded: dict[str, tuple[AcceptanceProfile | None, str | None]] = {}
    gammas = set()
    for pol in policies:
        if not make_policy(pol, 1 << 10).speculative:
            loaded[pol] = (None, None)
            continue
        spec = chosen[pol] if pol in named else default
        if spec is None:
            raise InputError(f"policy {pol} needs the acceptance profile measured with drafter "
                             f"{drafter!r} and none is shipped for it; pass --acceptance",
                             field="acceptance")
        prof = load_acceptance_profile(acceptance_profile_path(spec))
        make_policy(pol, prof.gamma)                       # static-K needs K <= gamma
        loaded[pol] = (prof, str(spec))
        gammas.add(prof.gamma)
    if len(gammas) > 1:
        raise InputError(f"the acceptance profiles draft different gammas {sorted(gammas)}; the "
                         "engine drafts one", field="acceptance")
    return EngineInputs(trace, str(trace_path), policies, hw_prof, str(hw), loaded,
                        gammas.pop() if gammas else None)


def engine_gamma(inputs: EngineInputs, drafter: Drafter) -> int:
    """Drafts per step: the acceptance profiles' gamma (which a trained drafter must reach)."""
    depth = getattr(getattr(drafter, "cfg", None), "gamma", None)
    gamma = inputs.gamma or depth or 7
    if depth is not None and gamma > depth:
        raise InputError(f"the acceptance profile drafts gamma = {gamma} but drafter "
                         f"{drafter.name} drafts at most {depth}", field="acceptance")
    return gamma


def load_model(target_spec: str, drafter_spec: str, device: str, threads: int) -> tuple[HFTarget, Drafter]:
    """The target and the drafter, with torch's CPU threads set first."""
    import torch

    from ..decode.drafters import check_drafter, make_drafter
    from ..decode.loading import load_target

    check_drafter(drafter_spec)         # a bad checkpoint fails before the target loads
    if threads > 0:
        torch.set_num_threads(threads)
    target = load_target(target_spec, device, quiet=True)
    return target, make_drafter(drafter_spec, target)
