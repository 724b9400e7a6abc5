"""The error table (Markdown, JSON) and the overlay plot of `dspark-sim validate-published`."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..fileio import write_json_atomic, write_text_atomic
from ..plots import new_figure, save_figure
from ..sweep.ttft_check import warning
from .budget_fit import describe as describe_budget_fit
from .one_cell import as_dicts as one_cell_dicts
from .one_cell import describe as describe_one_cell
from .one_cell import summary as one_cell_summary
from .predict import CaseResult, summary


def case_markdown(res: CaseResult) -> str:
    """One case: provenance, the fit of the baseline, the per-arm per-load table."""
    c, fit = res.case, res.fit
    lines = [f"## {c.name}: {c.title}", "",
             f"Source: {c.source['url']} ({c.source['where']}). Setup: {c.setup['model']} on "
             f"{c.setup['hardware']}, {c.setup['engine']}, {c.setup['dataset']}; {c.setup['load']}; "
             f"{c.gpus} GPU(s) per replica; mean lengths {c.prompt_tokens.values[0]:g} in "
             f"({c.prompt_tokens.basis}) / {c.output_tokens.values[0]:g} out ({c.output_tokens.basis}); "
             f"prefill {c.prefill}; throughput measured "
             + ("over each run's whole length, ramp-up and drain included, the run replayed request "
                "for request" if c.window == "whole-run" else "over a steady window") + ".", "",
             f"Baseline fit ({fit.profile.name}, family {c.fit.get('family', 'roofline')}): "
             + ", ".join(f"{k} = {v:.4g}" for k, v in fit.params.items())
             + f"; residuals on the baseline arm: "
             + ", ".join(f"{r['users']}: {r['throughput_rel_error']:+.1%}" for r in fit.residuals() if r["kind"] == "load")
             + f". {res.draft_summary}.", ""]
    for arm in c.arms:
        if arm.acceptance is not None:
            note = arm.acceptance_note
            tau = arm.acceptance.for_task("default").mean_tau(arm.acceptance.gamma)
            lines.append(f"- {arm.label} ({arm.policy}): acceptance {note['basis']} -- {note['how']} "
                         f"[{note['source']}]" + (f"; {note['derived']}" if "derived" in note else "")
                         + f"; tokens per verify at gamma = {arm.acceptance.gamma}: {tau:.2f}"
                         + _range_note(arm)
                         + (f"; {note['confidence']}" if "confidence" in note else "") + ".")
    if res.split_note:
        lines += ["", res.split_note]
    lines += ["", "| arm | load | published tok/s/GPU | predicted | throughput error | published gain | "
                  "predicted gain | gain interval | gain error | flags |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in res.rows:
        flags = []
        if r["extrapolated"]:
            flags.append("extrapolated")
        if r.get("short_run"):
            flags.append("short run")
        if r["published_below_baseline"]:
            flags.append("same side" if r["same_side"] else "WRONG SIDE")
        if "published_in_interval" in r and not r["published_in_interval"]:
            flags.append("outside interval")
        span = (f"x{r['predicted_gain_low']:.2f}-{r['predicted_gain_high']:.2f}"
                if "predicted_gain_low" in r else "-")
        gain = (f"x{r['published_gain']:.2f} | x{r['predicted_gain']:.2f} | {span} | {r['gain_error']:+.1%}"
                if not r["baseline"] else "(baseline) | | | ")
        lines.append(f"| {r['label']} | {r['load']} | {r['published_tok_s_per_gpu']:,.0f} | "
                     f"{r['predicted_tok_s_per_gpu']:,.0f} | {r['throughput_error']:+.1%} | "
                     + gain + f" | {', '.join(flags)} |")
    for arm in c.arms:
        if arm.budget is not None:
            lines += ["", _beside(res.rows, arm, "verify_tokens", "verification budget (tokens verified per "
                                  f"request per iteration, bonus included; {arm.budget.basis}: "
                                  f"{arm.budget.how})", "a check of the inputs")]
        if arm.accept_length is not None:
            lines += ["", _beside(res.rows, arm, "accept_length", "accepted length (tokens per verify step, "
                                  f"the bonus included; {arm.accept_length_note})",
                                  "a check of the inputs and of the policy's budget")]
        if arm.ttft_ms is not None:
            beside = _beside(res.rows, arm, "ttft_ms", "time to first token (ms; published "
                             f"{arm.ttft_ms.basis}: {arm.ttft_ms.how}; simulated: the median)",
                             "a check of the prefill and admission the replay assumes", fmt=",.0f")
            lines += ["", " ".join(filter(None, (beside, _ttft_warning(res.rows, arm))))]
    for fit in res.budget_fits:
        lines += ["", describe_budget_fit(fit, c, res.rows)]
    if res.one_cell:
        lines += ["", describe_one_cell(res.one_cell, c, res.rows)]
    s = summary(res.rows)
    lines += ["", f"Gain within 15% on {s['within_target']} of {s['speculative_cells']} speculative cells "
                  f"(worst {s['max_abs_gain_error']:.0%}); published losses predicted on the same side: "
                  f"{s['losses_same_side']} of {s['published_losses']}; extrapolated beyond the fitted "
                  f"batch sizes: {s['extrapolated_cells']}" + _interval_count(s) + ".", ""]
    return "\n".join(lines)


def _beside(rows: list[dict], arm, key: str, what: str, why: str, fmt: str = ".2f") -> str:
    """An arm's published `key` (published_KEY / predicted_KEY in the rows) beside the simulated."""
    mine = [r for r in rows if r["arm"] == arm.name and r[f"published_{key}"] is not None]
    return (f"{arm.label}: {what} published " + " / ".join(f"{r[f'published_{key}']:{fmt}}" for r in mine)
            + ", simulated " + " / ".join(f"{r[f'predicted_{key}']:{fmt}}" for r in mine)
            + f" at loads {' / '.join(str(r['load']) for r in mine)} ({why}, not used in the prediction).")


def _ttft_warning(rows: list[dict], arm) -> str:
    """ttft_check.warning over the arm's published / simulated first-token times."""
    return warning([(r["published_ttft_ms"], r["predicted_ttft_ms"]) for r in rows
                    if r["arm"] == arm.name and r["published_ttft_ms"]], "published")


def _range_note(arm) -> str:
    """The arm's sourced acceptance bounds, which the gain interval spans."""
    rng = arm.acceptance_range
    if rng is None:
        return ""
    parts = []
    for side in ("low", "high"):
        prof, note = getattr(rng, side), rng.bound_notes[side]
        tau = prof.for_task("default").mean_tau(prof.gamma)
        parts.append(f"{side} {tau:.2f} ({note['basis']}: {note['how']} [{note['source']}])")
        # the interval's least favourable draw takes the low bound, the most favourable the high
    return "; range spanned by the interval: " + ", ".join(parts)


def _interval_count(s: dict) -> str:
    if not s["cells_with_interval"]:
        return ""
    return (f"; published gain inside the predicted interval (what the baseline arm and the sourced "
            f"ranges leave open) on {s['published_in_interval']} of {s['cells_with_interval']}")


def _one_cell_count(one: dict) -> str:
    if not one["cells"]:
        return ""
    return (f" One-cell diagnostic (each speculative arm's middle cell fitted with the baseline arm, "
            f"draft_scale with it; reads one published speculative number per arm): gain within 15% on "
            f"{one['within']} of the {one['cells']} other cells (the baseline-only prediction: "
            f"{one['within_baseline_only']}).")


def _budget_count(s: dict) -> str:
    if not s["budget_informed_cells"]:
        return ""
    return (f" Budget-informed diagnostic (the split and confidence correlation nearest each published "
            f"verification budget; uses the speculative arm's budget, not the prediction): gain within "
            f"15% on {s['budget_informed_within_target']} of {s['budget_informed_cells']} cells.")


def write_report(results: list[CaseResult], out: Path, meta: dict,
                 cost_models: list[tuple[str, list[dict]]] = ()) -> list[Path]:
    """table.md, table.json and one overlay PNG per case, written atomically (`cost_models`:
    (markdown, rows) of the published cost models compared with the roofline)."""
    out.mkdir(parents=True, exist_ok=True)
    rows = [r for res in results for r in res.rows]
    total = summary(rows)
    one = one_cell_summary([(res.one_cell, res.rows) for res in results])
    if one["cells"]:
        total["one_cell"] = one
    head = ["# Published GPU cases: predicted vs published gains", "",
            f"Settings: {meta['settings']}. Gain = arm / baseline arm at the same load (published: "
            f"both published; predicted: both simulated under the profile fitted to the baseline arm).",
            "", f"All cases: gain within 15% on {total['within_target']} of {total['speculative_cells']} "
                f"speculative cells; losses on the same side {total['losses_same_side']} of "
                f"{total['published_losses']}" + _interval_count(total) + "."
                + _budget_count(total) + _one_cell_count(one), ""]
    written = [out / "table.md", out / "table.json"]
    write_text_atomic(written[0], "\n".join(head) + "\n" + "\n".join(case_markdown(r) for r in results)
                      + "\n" + "\n".join(md for md, _ in cost_models))
    write_json_atomic(written[1], {"meta": meta, "summary": total, "rows": rows,
                                   "cost_models": [r for _, r in cost_models],
                                   "fits": {r.case.name: {"parameters": r.fit.params,
                                                          "uncertainty": r.fit.uncertainty,
                                                          "observed_range": r.fit.observed_range,
                                                          "draft_costs": r.draft_summary,
                                                          "budget_informed": [
                                                              {"arm": f.arm, "share": f.share, "rho": f.rho,
                                                               "mismatch": f.mismatch, "budgets": f.budgets,
                                                               "fitted_share": f.fitted_share}
                                                              for f in r.budget_fits],
                                                          "one_cell": one_cell_dicts(r.one_cell)}
                                            for r in results}})
    for res in results:
        written.append(overlay(res, out / f"{res.case.name}.png"))
    return written


def overlay(res: CaseResult, path: Path) -> Path:
    """Published (markers) vs predicted (lines) tok/s/GPU per arm over the published loads."""
    import matplotlib

    fig, ax = new_figure(size=(7.0, 4.6))
    cmap = matplotlib.colormaps["tab10"]
    for i, arm in enumerate(res.case.arms):
        rows = [r for r in res.rows if r["arm"] == arm.name]
        x = np.array([r["load"] for r in rows])
        ax.plot(x, [r["published_tok_s_per_gpu"] for r in rows], "o", color=cmap(i), ms=6)
        ax.plot(x, [r["predicted_tok_s_per_gpu"] for r in rows], "-", color=cmap(i),
                label=f"{arm.label}" + (" (fitted)" if arm.name == res.case.baseline else " (predicted)"))
    ax.plot([], [], "ko", label="published")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("concurrency (users per replica)")
    ax.set_ylabel("output tok/s per GPU")
    ax.set_title(res.case.name, fontsize=9)
    ax.legend(fontsize=8)
    return save_figure(fig, path)
