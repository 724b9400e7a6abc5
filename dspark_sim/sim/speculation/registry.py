"""Every speculation policy by name: what `--policy` accepts, its help, and a fresh instance.

The CLI's help and name checks read this table (`POLICY_NAMES`, `policy_list`, `POLICY_HELP`,
`check_policy_name`); `make_policy` builds one instance per replica (a policy may keep state).
The module stays light for the CLI's --help: the policy classes are imported when one is built.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from ...errors import InputError

if TYPE_CHECKING:
    from .base import Policy


@dataclass(frozen=True)
class PolicyEntry:
    """One policy (or family: `static-K`): its name, one line of help, and how to build it from
    the drafter depth gamma, the batch-size schedule (vllm-schedule) and the hardware profile."""

    name: str
    help: str
    build: Callable[[str, int, Any, Any], "Policy"]
    pattern: re.Pattern | None = None      # a family's names (static-K)


def _ours(cls_name: str) -> Callable[[str, int, Any, Any], "Policy"]:
    """Builder of one of policies.py's classes that takes only gamma."""
    def build(name: str, gamma: int, schedule, hw) -> "Policy":
        from . import policies
        return getattr(policies, cls_name)(gamma)
    return build


def _static(name: str, gamma: int, schedule, hw) -> "Policy":
    from .policies import NoSpeculation, StaticK
    if name == "ar":
        return NoSpeculation()
    if name == "mtp1":
        return StaticK(1, "mtp1")
    k = int(name.split("-")[1])
    if k > gamma:
        raise InputError(f"{name} verifies {k} drafts but the acceptance profile drafts "
                         f"only gamma = {gamma}", field="policy")
    return StaticK(k, name)


def _schedule(name: str, gamma: int, schedule, hw) -> "Policy":
    from .vllm_policies import BatchSizeSchedule
    if schedule is None:
        raise InputError("vllm-schedule needs a batch-size schedule (--bs-schedule)", field="bs-schedule")
    return BatchSizeSchedule(schedule)


def _adaptive(name: str, gamma: int, schedule, hw) -> "Policy":
    from .vllm_policies import AdaptiveVerification
    # the engine limits vLLM's cost tables cover (vLLM's defaults without a profile)
    return AdaptiveVerification(gamma, getattr(hw, "max_batch_requests", None) or 256,
                                getattr(hw, "max_batch_tokens", None) or 8192)


REGISTRY: tuple[PolicyEntry, ...] = (
    PolicyEntry("ar", "no speculation", _static),
    PolicyEntry("mtp1", "verify 1 draft", _static),
    PolicyEntry("static-K", "verify K drafts", _static, re.compile(r"^static-0*[1-9]\d*$")),
    PolicyEntry("dspark", "Algorithm 1 with early stop, every iteration", _ours("DSpark")),
    PolicyEntry("dspark-lagged", "budget from the confidences of two iterations earlier, top-K "
                "admission", _ours("DSparkLagged")),
    PolicyEntry("goodput", "one k per iteration maximising expected tokens/s, SmartSpec-style",
                _ours("Goodput")),
    PolicyEntry("oracle", "verify exactly the drafts that will be accepted; an upper bound",
                _ours("Oracle")),
    PolicyEntry("vllm-schedule", "vLLM's num_speculative_tokens_per_batch_size, given with "
                "--bs-schedule", _schedule),
    PolicyEntry("vllm-adaptive", "vLLM's DSpark adaptive verification: budget from the previous "
                "step's confidences, top-budget admission", _adaptive),
)
POLICY_NAMES = tuple(entry.name for entry in REGISTRY)
POLICY_HELP = ", ".join(f"{entry.name} ({entry.help})" for entry in REGISTRY)


def policy_list() -> str:
    """'ar, mtp1, static-K, ...': the names `--policy` accepts, for help texts."""
    return ", ".join(POLICY_NAMES)


def entry_of(name: str) -> PolicyEntry:
    """The registry entry of a policy name; InputError (field 'policy') when unknown."""
    for entry in REGISTRY:
        if (entry.pattern.match(name) if entry.pattern is not None else entry.name == name):
            return entry
    raise InputError(f"unknown policy {name!r}; choose from {policy_list()} (K >= 1)", field="policy")


def check_policy_name(name: str) -> str:
    """Validate a policy name; raises InputError (field 'policy') when unknown."""
    entry_of(name)
    return name


def make_policy(name: str, gamma: int, schedule=None, hw=None) -> "Policy":
    """A fresh policy instance (policies may keep per-replica state) for drafter depth `gamma`.
    `schedule` (a spec_config.BatchSchedule) is vllm-schedule's; `hw` gives vllm-adaptive the
    engine limits its cost tables cover."""
    return entry_of(name).build(name, gamma, schedule, hw)
