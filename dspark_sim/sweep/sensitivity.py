"""Sensitivity of the SLA table to acceptance (`dspark-sim sweep --acceptance-scale 0.8,0.9,1,1.1`).

The acceptance a planner assumes is often the weakest input (the production drafter is rarely
measured on the production traffic). This runs the same sweep once per factor f with every
position's conditional acceptance x f (capped at 1; `whatif.scaled_acceptance`) for the chosen
policies, and tabulates each policy's throughput per GPU at each SLA against f. The scaled
profiles are written beside the results (they are the inputs of the cached points).
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from ..errors import InputError
from ..fileio import write_text_atomic
from ..profiles.registry import ACCEPTANCE_SUFFIX, acceptance_profile_path, load_acceptance_profile
from ..sim.replay import default_acceptance
from .frontier import format_gain, stat_label
from .run import SweepConfig, SweepResult, run_sweep, write_sweep, write_table
from .whatif import scaled_acceptance


def scaled_config(cfg: SweepConfig, factor: float, policies: list[str], folder: Path) -> SweepConfig:
    """`cfg` with the acceptance of `policies` scaled by `factor` (profiles written to `folder`)."""
    acc = dict(cfg.acceptance)
    for policy in cfg.policies:
        spec = acc.get(policy, default_acceptance(policy))
        if spec is None or policy not in policies or factor == 1.0:
            continue
        prof = scaled_acceptance(load_acceptance_profile(acceptance_profile_path(spec)), factor)
        path = folder / f"{prof.name}{ACCEPTANCE_SUFFIX}"
        prof.save(path)
        acc[policy] = str(path)
    return replace(cfg, acceptance=acc)


def run_sensitivity(cfg: SweepConfig, factors: list[float], out_dir: str | Path,
                    policies: list[str] | None = None, **run_kw) -> tuple[pd.DataFrame, list[SweepResult]]:
    """One sweep per factor (shared cache); the SLA rows of all of them with the factor."""
    if not factors or min(factors) <= 0:
        raise InputError("expected positive factors, e.g. 0.8,0.9,1,1.1", field="acceptance-scale")
    out = Path(out_dir)
    chosen = policies or [p for p in cfg.policies if p != "ar"]
    unknown = set(chosen) - set(cfg.policies)
    if unknown:
        raise InputError(f"{', '.join(sorted(unknown))} not among the swept policies",
                         field="scale-policies")
    rows, results = [], []
    for f in factors:
        res = run_sweep(scaled_config(cfg, f, chosen, out / "acceptance"), **run_kw)
        write_sweep(res, out / f"scale-x{f:g}")
        results.append(res)
        rows.append(res.sla.assign(acceptance_scale=f))
    table = pd.concat(rows, ignore_index=True)
    base = table[table["acceptance_scale"] == 1.0].set_index(["policy", "sla_tps_user"])
    if len(base):
        ref = [base["throughput_tok_s_per_gpu"].get((p, s), np.nan)
               for p, s in zip(table["policy"], table["sla_tps_user"])]
        table["change_vs_scale_1"] = table["throughput_tok_s_per_gpu"].to_numpy() / np.asarray(ref) - 1
    return table, results


def sensitivity_markdown(table: pd.DataFrame, scaled: list[str]) -> str:
    """Per SLA: a row per policy, a column per factor (throughput per GPU and gain vs baseline)."""
    p = stat_label(table["percentile"].iloc[0])
    base = table["baseline"].iloc[0]
    factors = sorted(table["acceptance_scale"].unique())
    lines = [f"Acceptance x factor for: {', '.join(scaled)} (each position, capped at 1).", ""]
    for sla in dict.fromkeys(table["sla_tps_user"]):
        lines += [f"**tok/s/GPU at {sla:g} tok/s/user ({p})" + (f", gain vs {base}" if base else "") + "**", "",
                  "| policy | " + " | ".join(f"x{f:g}" for f in factors) + " |",
                  "|---|" + "---|" * len(factors)]
        sub = table[table["sla_tps_user"] == sla]
        for policy in dict.fromkeys(sub["policy"]):
            cells = []
            for f in factors:
                r = sub[(sub["policy"] == policy) & (sub["acceptance_scale"] == f)].iloc[0]
                v = r["throughput_tok_s_per_gpu"]
                gain = "" if policy == base or not base else f" ({format_gain(r['gain_vs_baseline'])})"
                cells.append("unmet" if np.isnan(v) else f"{v:,.0f}{gain}")
            lines.append(f"| {policy} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def sensitivity_plot(table: pd.DataFrame, path: str | Path, title: str = "") -> Path:
    """Throughput per GPU at each SLA against the acceptance factor, one line per policy."""
    from ..plots import new_figure, save_figure

    slas = list(dict.fromkeys(table["sla_tps_user"]))
    fig, axes = new_figure(1, len(slas), size=(4.6 * len(slas), 4.0))
    axes = np.atleast_1d(axes)
    for ax, sla in zip(axes, slas):
        sub = table[table["sla_tps_user"] == sla]
        for policy in dict.fromkeys(sub["policy"]):
            g = sub[sub["policy"] == policy].sort_values("acceptance_scale")
            ax.plot(g["acceptance_scale"], np.nan_to_num(g["throughput_tok_s_per_gpu"]), "o-", label=policy)
        ax.set_xlabel("acceptance x factor")
        ax.set_ylabel("tok/s/GPU")
        ax.set_title(f"at {sla:g} tok/s/user ({stat_label(table['percentile'].iloc[0])})")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    if title:
        fig.suptitle(title, fontsize=9)
    return save_figure(fig, path)


def write_sensitivity(table: pd.DataFrame, scaled: list[str], out_dir: str | Path, title: str = "") -> list[Path]:
    """sensitivity.csv (+ .parquet), sensitivity.md, sensitivity.png."""
    out = Path(out_dir)
    written = write_table(table, out / "sensitivity.csv")
    write_text_atomic(out / "sensitivity.md", sensitivity_markdown(table, scaled))
    return written + [out / "sensitivity.md", sensitivity_plot(table, out / "sensitivity.png", title)]
