"""A published case made by the simulator from a known profile (tests' helper): PR #52362's case
cut to loads 4, 16, 64, every arm's throughput simulated under the moe family at a per-request /
per-token split at the split prior's centre, the speculative arms with every draft cost times
`draft_scale`."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import yaml

from dspark_sim.published.cases import Case, load_case, shipped_cases

EFFORT = {"requests_per_user": 3, "max_requests_per_user": 3, "rounds": 1, "bootstrap": 6, "seed": 0}


def known_case(tmp_path: Path, draft_scale: float = 1.0) -> tuple[Path, Case, dict[str, float]]:
    """(case file, case, the true moe parameters)."""
    from dspark_sim.hardware.curve_family import with_prior_freed
    from dspark_sim.published.predict import _points, case_split, fit_config
    from dspark_sim.sweep.load_replay import simulate_load
    from dspark_sim.sweep.split_prior import split_centres

    data = yaml.safe_load(shipped_cases()["vllm-pr52362-dsv4-flash-mi350x"].read_text())
    keep = [0, 2, 4]                                   # loads 4, 16, 64
    data["loads"] = [data["loads"][i] for i in keep]
    for spec in data["arms"]:                          # placeholders, replaced below
        spec["throughput"] = [spec["throughput"][i] for i in keep]
    path = tmp_path / "known.case.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    case = load_case(path)
    cfg = fit_config(case, EFFORT)
    tokens = 1 + 250 / 512                                # no speculation, local prefill
    centres, _ = split_centres(case_split(case), tokens, 250 + 512 / 2, {"per_token_s": 5e-5, "per_request_s": 0.0})
    truth = {"floor_s": 0.0107, "expert_s": 0.0025, "per_context_token_s": 0.0, **centres}   # moe family
    family = with_prior_freed(cfg.family, centres, {})          # per_request_s is not held at 0
    prof = family.profile(truth, "truth", gpus_per_replica=case.gpus)
    replace(cfg.draft_costs, scale=draft_scale).apply(prof)
    for spec in data["arms"]:
        arm = case.arm(spec["name"])
        thr = [simulate_load(prof, obs, users, cfg, acc=arm.acceptance).throughput_tok_s_per_gpu * case.gpus
               for obs, users in zip(_points(case, arm, None), case.loads)]
        spec["throughput"] = [round(t, 3) for t in thr]
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path, load_case(path), truth
