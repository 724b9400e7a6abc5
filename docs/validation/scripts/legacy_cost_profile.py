"""The profile `dspark-sim profile` wrote before the prefill curve and the block drafters'
per-draft term, rebuilt from a new profile's own measurements, so that the two can be compared
on the same engine runs (`dspark-sim validate --engine-runs DIR --hw OLD.yaml`).

    python docs/validation/scripts/legacy_cost_profile.py NEW.yaml OLD.yaml [--prefill-chunks 128,256]

The old profiler fitted one step curve through the decode points and the prefill chunks (the
shipped grid timed chunks of 128 and 256 tokens only, above the largest decode batch) and kept
block drafters' cost at gamma drafts whatever the drafts made: that is what this writes.
"""
from __future__ import annotations

import argparse
import sys


from dspark_sim.errors import InputError
from dspark_sim.hardware.analytic_profile import significant
from dspark_sim.hardware.fit import fit_step_time
from dspark_sim.hardware.profiler import Timing
from dspark_sim.profiles import Curve, HardwareProfile


def legacy(new: HardwareProfile, chunks: set[int]) -> HardwareProfile:
    """`new` without prefill_time and per_draft_seconds, its step curve refitted through the
    decode points and the prefill chunks of `chunks` tokens."""
    points = new.extra.get("measurements")
    if not points:
        raise InputError("the profile has no `measurements` to refit", field="measurements")
    timings = [Timing(p["op"], p["requests"], p["width"], p["context"], [p["median_s"]])
               for p in points if p["op"] == "decode" or (p["op"] == "prefill" and p["width"] in chunks)]
    fit = fit_step_time(timings)
    extra = {k: v for k, v in new.extra.items() if k not in ("fit", "measurements")}
    extra["fit"] = fit.summary()
    extra["measurements"] = [p.as_dict() for p in fit.points]
    extra["notes"] = ("Legacy form of a measured profile (docs/validation/scripts/legacy_cost_profile.py): one "
                      "step curve through the decode points and the prefill chunks of "
                      f"{sorted(chunks)} tokens, block drafters at gamma drafts. "
                      + str(new.extra.get("notes", "")))
    return HardwareProfile(
        name=new.name + "-legacy", source=new.source,
        step_curve=Curve.of(fit.batch_tokens, significant(fit.seconds)),
        per_context_token_s=float(significant(fit.per_context_token_s)), draft_curves=dict(new.draft_curves),
        per_draft_kinds=new.per_draft_kinds, device=new.device, model=new.model,
        gpus_per_replica=new.gpus_per_replica, kv_capacity_tokens=new.kv_capacity_tokens,
        max_batch_tokens=new.max_batch_tokens, max_batch_requests=new.max_batch_requests,
        capture_sizes=new.capture_sizes, kv_block_size=new.kv_block_size, extra=extra)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("new", help="a profile written by dspark-sim profile (with measurements)")
    parser.add_argument("out", help="where to write the legacy profile (YAML, atomically)")
    parser.add_argument("--prefill-chunks", default="128,256",
                        help="prefill chunk lengths the old grid timed [128,256]")
    args = parser.parse_args(argv)
    try:
        chunks = {int(c) for c in args.prefill_chunks.split(",") if c.strip()}
        legacy(HardwareProfile.load(args.new), chunks).save(args.out)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"error: --prefill-chunks: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
