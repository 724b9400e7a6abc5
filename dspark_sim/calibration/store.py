"""Where a drafter's confidence calibration lives, so that nothing erases it silently.

The fitted STS temperatures (and the copied slots' calibration) of a checkpoint directory are kept
in a file beside its weights, `calibration.sts.json`, keyed by the SHA-256 of the weight files they
were fitted on. The checkpoint's own `config.json` is never edited, so re-exporting a drafter
(`train` with the same --out, resumed or not) cannot drop them:

- if the weights are unchanged, the calibration still matches them and is used;
- if they changed, it no longer matches: the loader ignores it and says so (StaleCalibration),
  naming the command that refits it, and `train` marks it stale when it exports new weights.

Checkpoints inside the installed package (the shipped drafters) are never written to: calibrating
one writes a calibrated copy (config, weights and this file) into a directory of the user's.
Older checkpoints carry their temperatures in config.json (`sts`, `sts_copy`); those are still
read, and a calibration file beside the weights takes precedence for the temperatures it holds.
"""
from __future__ import annotations

import datetime
import hashlib
import importlib.resources
import os
import shutil
import warnings
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..fileio import read_json, write_json_atomic

CALIBRATION_FILE = "calibration.sts.json"
SCHEMA = "dspark-sim/drafter-calibration/v1"


class StaleCalibration(UserWarning):
    """A calibration file that was fitted on other weights than the checkpoint's: not applied."""


def weight_files(checkpoint: str | Path) -> list[Path]:
    """The checkpoint's weight files (*.safetensors, or PyTorch *.bin), sorted by name."""
    path = Path(checkpoint)
    return sorted(path.glob("*.safetensors")) or sorted(path.glob("*.bin"))


def weights_digest(checkpoint: str | Path) -> str:
    """SHA-256 over the names and bytes of the checkpoint's weight files."""
    h = hashlib.sha256()
    files = weight_files(checkpoint)
    if not files:
        raise InputError("no weight file (*.safetensors, *.bin) in the checkpoint", file=checkpoint)
    for f in files:
        h.update(f.name.encode() + b"\0")
        with open(f, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                h.update(block)
    return h.hexdigest()


def package_root() -> Path:
    return Path(str(importlib.resources.files("dspark_sim"))).resolve()


def is_installed_package_path(path: str | Path) -> bool:
    """Whether `path` lies inside the installed dspark_sim package (never written to)."""
    try:
        Path(path).resolve().relative_to(package_root())
        return True
    except ValueError:
        return False


def read_calibration(checkpoint: str | Path) -> dict[str, Any] | None:
    """The calibration file beside the checkpoint's weights, or None."""
    path = Path(checkpoint) / CALIBRATION_FILE
    if not path.is_file():
        return None
    from ..profiles.validate import FieldChecker

    doc, lines = read_json(path)
    check = FieldChecker(path, lines)
    doc = check.mapping(doc, "(document)")
    if doc.get("schema") != SCHEMA:
        raise check.fail("schema", f"not a drafter calibration file (schema {SCHEMA})")
    for key, temps in check.mapping(doc.get("sts", {}), "sts").items():
        check.number_list(temps, f"sts.{key}", 0.0, exclusive=True)
    for key, pairs in check.mapping(doc.get("sts_copy", {}), "sts_copy").items():
        if not isinstance(pairs, list) or any(not isinstance(p, list) or len(p) != 2 for p in pairs):
            raise check.fail(f"sts_copy.{key}", "expected a list of [temperature, offset] pairs")
        for i, (t, d) in enumerate(pairs):
            check.number(t, f"sts_copy.{key}[{i}][0]", 0.0, exclusive=True)
            check.number(d, f"sts_copy.{key}[{i}][1]")
    return doc


def refit_command(checkpoint: str | Path, temperatures: list[str] | None = None) -> str:
    temps = temperatures or ["0.0"]
    return "; ".join(f"dspark-sim calibrate --drafter {checkpoint} --temperature {t} --report DIR"
                     for t in temps)


def usable_calibration(checkpoint: str | Path) -> dict[str, Any] | None:
    """The checkpoint's calibration file when it matches the weights now there; None when there
    is none. A stale one (marked by `train`, or fitted on other weights) is not applied: a
    StaleCalibration warning names it and the command that refits it."""
    doc = read_calibration(checkpoint)
    if doc is None:
        return None
    digest = weights_digest(checkpoint)
    stale = doc.get("stale") or (None if doc.get("weights_sha256") == digest else
                                 "the weights changed since it was fitted")
    if stale:
        warnings.warn(StaleCalibration(
            f"{Path(checkpoint) / CALIBRATION_FILE}: stale ({stale}); the drafter's confidences are "
            f"not calibrated; refit with: {refit_command(checkpoint, sorted(doc.get('sts', {})))}"),
            stacklevel=2)
        return None
    return doc


def write_calibration(checkpoint: str | Path, temperature: float, temps: list[float],
                      copy_cal: list[list[float]] | None, fitted: dict[str, Any]) -> tuple[Path, str | None]:
    """Record the temperatures fitted at sampling `temperature` beside the checkpoint's weights
    (other temperatures' entries are kept); returns the file and a note when an earlier entry
    for this temperature was replaced or a stale file started over."""
    checkpoint = Path(checkpoint)
    if is_installed_package_path(checkpoint):
        raise InputError("is inside the installed dspark_sim package, which is never written to; "
                         "calibrate a copy (calibrated_copy)", file=checkpoint)
    digest = weights_digest(checkpoint)
    path = checkpoint / CALIBRATION_FILE
    old = read_calibration(checkpoint)
    note = None
    if old is not None and (old.get("stale") or old.get("weights_sha256") != digest):
        note = f"{path}: its stale calibration (other weights) was replaced"
        old = None
    doc = old or {"schema": SCHEMA, "weights_sha256": digest, "sts": {}, "sts_copy": {}, "fitted": {}}
    key = str(float(temperature))
    if key in doc["sts"] and note is None:
        when = doc.get("fitted", {}).get(key, {}).get("at", "an earlier run")
        note = f"{path}: replaced the calibration for temperature {key} fitted at {when}"
    doc["sts"][key] = [round(float(t), 5) for t in temps]
    if copy_cal is not None:
        doc["sts_copy"][key] = [[round(float(t), 5), round(float(d), 5)] for t, d in copy_cal]
    else:
        doc["sts_copy"].pop(key, None)      # a refit without copies leaves no stale copy calibration
    doc.setdefault("fitted", {})[key] = {"at": _now(), **fitted}
    write_json_atomic(path, doc)
    return path, note


def calibrated_copy(checkpoint: str | Path, dest: str | Path) -> Path:
    """Copy a checkpoint (config.json, weight files, its calibration file) into `dest`, a
    directory of the user's, to calibrate it there; an existing copy of the same weights is
    reused, a directory holding anything else is refused."""
    checkpoint, dest = Path(checkpoint), Path(dest)
    if dest.exists() and any(dest.iterdir()):
        same = (dest / "config.json").is_file() and weight_files(dest) \
            and weights_digest(dest) == weights_digest(checkpoint)
        if not same:
            raise InputError("exists and is not a copy of this checkpoint; choose another "
                             "--save-to or remove it", file=dest, field="--save-to")
        return dest
    stage = dest.with_name(f".{dest.name}.tmp")
    shutil.rmtree(stage, ignore_errors=True)
    stage.mkdir(parents=True)
    try:
        for f in [checkpoint / "config.json", *weight_files(checkpoint),
                  checkpoint / CALIBRATION_FILE]:
            if f.is_file():
                shutil.copyfile(f, stage / f.name)
        if dest.exists():
            dest.rmdir()
        os.replace(stage, dest)
    finally:
        shutil.rmtree(stage, ignore_errors=True)
    return dest


def mark_stale_after_export(checkpoint: str | Path, previous_digest: str | None,
                            legacy: dict[str, Any] | None) -> str | None:
    """After new weights were written into `checkpoint` (by `train`): keep its calibration when
    the weights are the ones it was fitted on, otherwise mark it stale. `previous_digest` is the
    digest of the weights that were there before; `legacy` the `sts` / `sts_copy` of the config
    that was there (older checkpoints kept them in config.json, which the export rewrites).
    Returns what happened, for the command to print, or None when there was no calibration."""
    checkpoint = Path(checkpoint)
    digest = weights_digest(checkpoint)
    doc = read_calibration(checkpoint)
    legacy = {k: v for k, v in (legacy or {}).items() if v}
    if doc is None and not legacy:
        return None
    if doc is None:                       # move config.json's temperatures beside the weights
        doc = {"schema": SCHEMA, "weights_sha256": previous_digest or "", "sts": legacy.get("sts", {}),
               "sts_copy": legacy.get("sts_copy", {}), "fitted": {},
               "note": "moved from config.json, which `train` rewrites"}
    temps = sorted(doc.get("sts", {}))
    if doc.get("weights_sha256") == digest and not doc.get("stale"):
        write_json_atomic(checkpoint / CALIBRATION_FILE, doc)
        return (f"kept the confidence calibration in {checkpoint / CALIBRATION_FILE} (the weights "
                f"are the ones it was fitted on)")
    if not doc.get("stale"):
        doc["stale"] = f"the weights were retrained at {_now()}"
        write_json_atomic(checkpoint / CALIBRATION_FILE, doc)
    return (f"the confidence calibration in {checkpoint / CALIBRATION_FILE} (temperatures "
            f"{', '.join(temps) or 'none'}) was fitted on the previous weights and is now stale; "
            f"refit it with: {refit_command(checkpoint, temps)}")


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0).isoformat()
