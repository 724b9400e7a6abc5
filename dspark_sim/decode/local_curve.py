"""This machine's decode-loop step curve, for the one-request scheduler (`--verify scheduled`).

A step curve measured on one CPU misprices another: the shipped single-thread curve, read on
a CPU it was not measured on, made scheduled DSpark 0.81-0.93x of plain decoding where the
curve timed on that CPU gave 0.97-1.03x (docs/drafters.md). `measure_local_curve` times the
loop's own verify step at widths 1..gamma+1 (at 128- and 512-token contexts, so the fit can
tell the step from the attention over the context) and the drafter's draft step;
`cached_local_curve` does that once per machine and keeps the profile in the user's cache,
keyed by what changes the timings: the CPU (model name and vector ISA), torch's thread count
and version, the target, the drafter (and a trained drafter's architecture) and gamma.
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from ..errors import InputError
from ..fileio import json_text
from ..hardware.measure import cpu_identity
from ..hardware.profiler import ProfileGrid, Timing
from .drafters.base import Drafter
from .loading import cache_root
from .target import Target


def machine_key(target: Target, drafter: Drafter, gamma: int) -> dict:
    """Everything the cached curve depends on."""
    device = target.device.type
    if device == "cuda":
        hardware = {"gpu": torch.cuda.get_device_name(target.device)}
    else:
        hardware = {**cpu_identity(), "threads": torch.get_num_threads()}
    key = {"device": device, **hardware, "torch": str(torch.__version__), "target": str(target.name),
           "layers": target.num_layers, "drafter": drafter.name, "kind": drafter.kind,
           "gamma": gamma}
    cfg = getattr(drafter, "cfg", None)
    if cfg is not None:                # a checkpoint retrained in place may change its shape;
        key["architecture"] = {k: v for k, v in cfg.to_dict().items()    # not the calibration
                               if k not in ("sts", "sts_copy")}
    return key


def curve_cache_path(key: dict) -> Path:
    digest = hashlib.sha256(json_text(key, sort_keys=True).encode()).hexdigest()[:16]
    return cache_root() / "curves" / f"decode-loop-{key['kind']}-g{key['gamma']}-{digest}.yaml"


def measure_local_curve(target: Target, drafter: Drafter, gamma: int, *, repeats: int = 5,
                        progress: Callable[[Timing], None] | None = None):
    """Time this decode loop's step curve and `drafter`'s draft step now (a `source: measured`
    hardware profile of one request)."""
    from .loop_profile import measure_decode_loop_profile

    key = machine_key(target, drafter, gamma)
    grid = ProfileGrid((1,), tuple(range(1, gamma + 2)), (128, 512), (), repeats=repeats, warmup=1)
    prof, _ = measure_decode_loop_profile(target, [drafter], grid, gamma, target.device.type,
                                          "decode-loop-this-machine", target.name,
                                          progress=progress)
    prof.extra["machine_key"] = key
    return prof


def cached_local_curve(target: Target, drafter: Drafter, gamma: int, *, refresh: bool = False,
                       on_measure: Callable[[Path], None] | None = None,
                       progress: Callable[[Timing], None] | None = None):
    """This machine's curve from the cache, measured (and cached) when it is missing or
    `refresh`; `on_measure(path)` is told before a measurement starts."""
    from ..profiles.hardware import HardwareProfile

    key = machine_key(target, drafter, gamma)
    path = curve_cache_path(key)
    if path.is_file() and not refresh:
        try:
            prof = HardwareProfile.load(path)
            if prof.extra.get("machine_key") == key:
                return prof
        except (OSError, ValueError, InputError):
            pass                                   # a damaged cache entry is measured again
    if on_measure is not None:
        on_measure(path)
    prof = measure_local_curve(target, drafter, gamma, progress=progress)
    path.parent.mkdir(parents=True, exist_ok=True)
    prof.save(path)
    return prof


def nondecreasing(y: np.ndarray) -> np.ndarray:
    """The non-decreasing least-squares fit of y (pool adjacent violators, equal weights)."""
    blocks: list[list[float]] = []            # [mean, count]
    for v in np.asarray(y, dtype=float):
        blocks.append([v, 1.0])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            m2, c2 = blocks.pop()
            m1, c1 = blocks.pop()
            blocks.append([(m1 * c1 + m2 * c2) / (c1 + c2), c1 + c2])
    return np.concatenate([np.full(int(c), m) for m, c in blocks])


def verify_cost_curve(prof, source: str, repair: bool) -> tuple[object, list[str]]:
    """The step curve the one-request scheduler reads, and what to tell the user: where it came
    from and, when its step time falls as the verified tokens grow (a timing artefact of a
    noisy machine, or a kernel that is faster at some widths), that it was replaced by its
    non-decreasing least-squares fit (`repair`) or is read as measured."""
    import dataclasses

    from ..profiles.curve import Curve

    lines = [f"verify-cost curve: {source}"]
    curve = prof.step_curve
    if curve is None:
        return prof, lines
    x, y = np.asarray(curve.x, dtype=float), np.asarray(curve.y, dtype=float)
    drops = [(x[i], y[i], x[i + 1], y[i + 1]) for i in range(len(x) - 1) if y[i + 1] < y[i]]
    if not drops:
        return prof, lines
    where = "; ".join(f"{a:g} tokens {1e3 * ya:.1f} ms > {b:g} tokens {1e3 * yb:.1f} ms"
                      for a, ya, b, yb in drops)
    if not repair:
        lines.append(f"warning: the curve is not monotone in the verified tokens ({where}); read as "
                     f"measured (--verify lagged is meant for such jagged curves)")
        return prof, lines
    fit = nondecreasing(y)
    changed = ", ".join(f"{a:g}: {1e3 * b:.1f} -> {1e3 * c:.1f} ms" for a, b, c in zip(x, y, fit) if b != c)
    lines.append(f"warning: the curve is not monotone in the verified tokens ({where}); the "
                 f"scheduler reads its non-decreasing least-squares fit instead ({changed})")
    return dataclasses.replace(prof, step_curve=Curve.of(x, fit)), lines
