"""Which machine a measured profile describes, and a per-machine cache of measured profiles.

A profile measured on one machine (a CPU build of vLLM on a 2-core VM, say) is no silent
default for another: `machine_checked_profile` compares the profile's recorded `machine`
(formats.md) with this one and either finds a profile of the same name measured here (in the
cache `profile` commands write to) or returns a warning naming the profile, its machine and
the command that profiles this machine.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
from pathlib import Path

_ISA_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile", "asimd", "sve")
MEASURED_SOURCES = ("measured",)
CACHE_ENV = "DSPARK_SIM_PROFILE_CACHE"


def cpu_identity() -> dict:
    """The CPU's model name and the vector-ISA flags that decide its kernels (a VM's model name
    alone, "Intel(R) Xeon(R) Processor", does not tell an AVX2 machine from an AVX-512 one)."""
    model, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            text = f.read()
    except OSError:
        text = ""
    for line in text.splitlines():
        key, _, value = line.partition(":")
        key = key.strip()
        if key == "model name" and value.strip():
            model = value.strip()
        elif key in ("flags", "Features") and not flags:
            flags = set(value.split())
    return {"cpu": model, "isa": sorted(f for f in _ISA_FLAGS if f in flags)}


def this_machine(device: str = "cpu") -> dict:
    """This machine as a profile records it: CPU model, ISA flags, cores, and the GPU on CUDA."""
    out = {**cpu_identity(), "cores": os.cpu_count() or 0}
    if device == "cuda":
        import torch

        out["gpu"] = torch.cuda.get_device_name(0)
    return out


def same_machine(recorded: dict, here: dict) -> bool:
    """Whether a recorded machine is this one (CPU model, ISA, cores and GPU all equal)."""
    keys = ("cpu", "isa", "cores", "gpu")
    return all(recorded.get(k) == here.get(k) for k in keys if k in recorded or k in here)


def machine_key(machine: dict) -> str:
    """A short stable name for a machine (the cache's folder)."""
    text = json.dumps({k: machine.get(k) for k in ("cpu", "isa", "cores", "gpu")}, sort_keys=True)
    return hashlib.sha1(text.encode()).hexdigest()[:12]


def cache_root() -> Path:
    """Where measured profiles are cached per machine ($DSPARK_SIM_PROFILE_CACHE, else
    $XDG_CACHE_HOME/dspark-sim/profiles, else ~/.cache/dspark-sim/profiles)."""
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "dspark-sim" / "profiles"


def cached_path(name: str, machine: dict | None = None) -> Path:
    """The cache file of profile `name` measured on `machine` (default: this one)."""
    machine = machine if machine is not None else this_machine(_device_of(None))
    return cache_root() / machine_key(machine) / f"{name}.yaml"


def _device_of(recorded: dict | None) -> str:
    return "cuda" if recorded and recorded.get("gpu") else "cpu"


def describe(machine: dict) -> str:
    if not machine:
        return "an unrecorded machine"
    parts = [str(machine.get("gpu") or machine.get("cpu", "?"))]
    if machine.get("cores"):
        parts.append(f"{machine['cores']} cores")
    if machine.get("isa"):
        parts.append("/".join(machine["isa"]))
    return ", ".join(parts)


def machine_checked_profile(path: Path, profile) -> tuple[Path, str | None]:
    """(the profile file to use, a note for stderr or None). A profile that is not measured
    (roofline, fitted, constant) is used as given. A measured profile recorded on this machine
    is used as given; one from another (or an unrecorded) machine is replaced by the cached
    profile of the same name measured here when there is one (the note says which), else used
    with a loud warning naming it, its machine and the command to profile this machine."""
    if profile.source not in MEASURED_SOURCES:
        return path, None
    recorded = profile.machine
    here = this_machine(_device_of(recorded))
    if recorded and same_machine(recorded, here):
        return path, None
    cached = cached_path(profile.name, here)
    if cached.is_file():
        return cached, (f"note: hardware profile {profile.name!r} ({path}) was measured on "
                        f"{describe(recorded)}; using the one measured on this machine "
                        f"({describe(here)}): {cached}")
    runner = profile.extra.get("runner")
    how = ("dspark-sim profile --engine vllm --target embedded --speculative static-4 "
           f"--vllm-drafter ngram:1-4 --name {profile.name} --out {profile.name}.yaml"
           if runner == "vllm" else
           f"dspark-sim profile --target embedded --name {profile.name} --out {profile.name}.yaml")
    return path, (f"WARNING: hardware profile {profile.name!r} ({path}) was measured on "
                  f"{describe(recorded)}, not on this machine ({describe(here)}): its step "
                  f"times are another machine's. Profile this machine first: {how} "
                  f"(it is cached in {cached.parent} and used from then on)")


def cache_measured(profile) -> Path | None:
    """Copy a measured profile into this machine's cache (None for other sources)."""
    if profile.source not in MEASURED_SOURCES or not profile.machine:
        return None
    path = cached_path(profile.name, profile.machine)
    path.parent.mkdir(parents=True, exist_ok=True)
    profile.save(path)
    return path
