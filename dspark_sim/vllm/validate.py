"""`dspark-sim validate --engine vllm`: the simulator against vLLM serving the same trace.

Each policy is served `repeats` times, each run on a freshly started server with the policies
interleaved (or, `fresh_servers=False`, all of a policy's runs on one warm server), or the runs
of an earlier validate are read back; the simulator replays the trace with the vLLM profile and each
policy's acceptance (given, or imported from its first vLLM run's per-request metrics), and
the error table, spread and overlays are written as serve/validate.py writes them.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from ..errors import InputError

VLLM_DEFAULT_HW = "cpu-2core-smollm2-135m-vllm"


def validate_on_vllm(trace_path: Path, policies: list[str], hw: str | None, acceptance: str | None,
                     repeats: int, out: Path, seed: int, engine_runs: Path | None = None,
                     kv_semantics: str = "reserve", command: str = "",
                     status: Callable[[str], None] | None = None, fresh_servers: bool | None = None,
                     speed_check: bool | None = None, **inputs):
    """Serve (or read back from `engine_runs`), simulate, compare and write into `out`; the
    Validation, the files written and the speed-check factors per policy and run (None without
    the check). `inputs`: the keyword arguments of
    replay.replay_inputs after `seed` (bs_schedule among them). `fresh_servers`: a server per
    run; by default yes unless attached to a running server (`url`). `speed_check`: each run
    simulated on the profile scaled to its server's speed check (speed_check.py); by default
    yes unless attached by `url`, and for `engine_runs` when they hold one."""
    from ..profiles.registry import (acceptance_profile_path, hw_profile_path, load_acceptance_profile,
                                     load_hw_profile)
    from ..serve.validate import compare_with_sim, write_validation
    from ..sim.replay import parse_acceptance_option
    from .replay import (imported_acceptance, load_engine_runs, read_schedule, replay_inputs,
                         serve_trace_vllm)
    from .runtime import policy_spec_tokens

    if repeats < 1:
        raise InputError(f"must be >= 1, got {repeats}", field="--repeats")
    if fresh_servers is None:
        fresh_servers = not inputs.get("url")
    if speed_check is None:
        speed_check = has_speed_check(engine_runs, policies, repeats) if engine_runs is not None \
            else not inputs.get("url")
    hw_name = hw or VLLM_DEFAULT_HW
    hw_prof = load_hw_profile(hw_profile_path(hw_name))
    given = parse_acceptance_option(acceptance, policies) if acceptance else {}
    loaded = {p: (load_acceptance_profile(acceptance_profile_path(given[p])), str(given[p]))
              for p in policies if given.get(p) and policy_spec_tokens(p) != 0}
    load_before = os.getloadavg()
    if engine_runs is not None:
        from ..traces.schema import load_trace

        trace, setup = load_trace(trace_path), None
        engine = load_engine_runs(engine_runs, policies, repeats)
        runs_dir = engine_runs
    else:
        trace, ids, setup = replay_inputs(trace_path, policies, seed=seed, **inputs)
        engine = serve_trace_vllm(trace, str(trace_path), policies, ids, setup,
                                  lambda p: out / "engine" / p, repeats, seed, status=status,
                                  fresh_servers=fresh_servers, speed_check=speed_check)
        runs_dir = out
    accept = {}
    for pol in policies:
        if policy_spec_tokens(pol) == 0:
            accept[pol] = (None, None)
        elif pol in loaded:
            accept[pol] = loaded[pol]
        else:
            accept[pol] = imported_acceptance(trace, runs_dir / "engine" / pol, repeats, pol)
    schedule = read_schedule(inputs.get("bs_schedule"), policies) if engine_runs is not None else \
        (setup.schedule if setup else None)
    run_hw, speeds = None, None
    if speed_check:
        run_hw, speeds = speed_scaled_runs(hw_prof, speed_checks_of(runs_dir, policies, repeats))
    v = compare_with_sim(trace, engine, hw_prof, accept, seed, str(trace_path), hw_name, kv_semantics,
                         schedule, run_hw)
    first = engine[policies[0]][0].summary
    meta = {"engine": "vllm", "trace": str(trace_path), "policies": policies,
            "engine_runs": str(runs_dir), "hw": hw_name, "kv_semantics": kv_semantics, "repeats": repeats, "seed": seed,
            "fresh_servers": None if engine_runs is not None else fresh_servers,
            "speed_check": speeds,
            "server_args": first.get("server_args"),
            "speculative_configs": {p: r[0].summary.get("speculative_config") for p, r in engine.items()},
            "acceptance": {p: a for p, (_, a) in accept.items()},
            "load_average_engine": {p: [r.summary.get("load_average_before") for r in rs]
                                    for p, rs in engine.items()},
            "load_average": [round(x, 2) for x in load_before],
            "load_average_after": [round(x, 2) for x in os.getloadavg()],
            "command": command}
    written = write_validation(v, out, meta, trace.ids, engine_written=engine_runs is None)
    return v, written, speeds


def _check_path(runs_dir: Path, policy: str, k: int, repeats: int) -> Path:
    from .replay import run_dir
    from .speed_check import SPEED_CHECK_FILE

    return run_dir(runs_dir / "engine" / policy, k, repeats) / SPEED_CHECK_FILE


def has_speed_check(runs_dir: Path, policies: list[str], repeats: int) -> bool:
    """Whether the first run of the first policy under DIR was served with a speed check."""
    return _check_path(runs_dir, policies[0], 0, repeats).is_file()


def speed_checks_of(runs_dir: Path, policies: list[str], repeats: int) -> dict:
    """Every run's speed-check.json under DIR/engine/<policy>[/run-<k>] (InputError naming the
    missing file: runs served without the check are simulated with --no-speed-check)."""
    from .speed_check import SpeedCheck

    out = {}
    for pol in policies:
        out[pol] = []
        for k in range(repeats):
            path = _check_path(runs_dir, pol, k, repeats)
            if not path.is_file():
                raise InputError("this run has no speed check (served without one, or attached by "
                                 "--url); simulate it with --no-speed-check", file=path,
                                 field="--speed-check")
            out[pol].append(SpeedCheck.load(path))
    return out


def speed_scaled_runs(hw, checks: dict) -> tuple[dict, dict]:
    """Per policy and run, `hw` scaled by that run's speed-check factors, and the factors
    (decode, prefill) as written into validation.json."""
    from ..profiles.speed_scale import speed_scaled

    run_hw, speeds = {}, {}
    for pol, runs in checks.items():
        factors = [c.factors(hw) for c in runs]
        run_hw[pol] = [speed_scaled(hw, d, p) for d, p in factors]
        speeds[pol] = [{"decode": round(d, 4), "prefill": round(p, 4)} for d, p in factors]
    return run_hw, speeds
