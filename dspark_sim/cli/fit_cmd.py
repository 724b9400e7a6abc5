"""`dspark-sim profile fit`: a hardware profile fitted to observed serving numbers, with the
simulator as the model (dspark_sim/sweep/calibrate.py, docs/hardware.md "Fitting a profile")."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from ..errors import InputError
from .options import check_at_least


def _fixed(text: str) -> dict[str, float]:
    """'per_context_token_s=0,floor_s=0.01' -> {name: value}."""
    out = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = part.partition("=")
        try:
            out[name.strip()] = float(value)
        except ValueError:
            raise InputError(f"expected NAME=VALUE, got {part!r}", field="fix") from None
        if not sep or out[name.strip()] < 0:
            raise InputError(f"expected NAME=VALUE with VALUE >= 0, got {part!r}", field="fix")
    return out


def register(profile_app: typer.Typer) -> None:
    @profile_app.command("refit")
    def refit(
        profile: Path = typer.Argument(..., help="A measured hardware profile (its `measurements`)."),
        out: Path = typer.Option(..., "--out", help="Write the refitted profile here (atomically)."),
    ) -> None:
        """Fit a measured profile's stored points again with today's fit (for a vLLM profile the
        smooth family with the per-request term), without timing anything."""
        from rich.console import Console

        from ..hardware.measure import refit_measured
        from ..profiles import HardwareProfile
        from .render import print_fit

        new, fit = refit_measured(HardwareProfile.load(profile))
        console = Console(stderr=True)
        print_fit(console, fit)
        new.save(out)
        console.print(f"wrote {out}")

    @profile_app.command("fit")
    def fit(
        observations: list[Path] = typer.Argument(..., help="Observation files: .csv or .yaml load "
                                                  "points / step points (docs/hardware.md), or "
                                                  "`vllm bench serve --save-result` .json files "
                                                  "(one per --max-concurrency; RUN.json@POLICY"
                                                  "[@ACCEPTANCE] names a run's own policy and "
                                                  "acceptance profile, e.g. a run with speculation "
                                                  "beside runs without, which lets the fit estimate "
                                                  "draft_scale)."),
        out: Path = typer.Option(..., "--out", help="Write the fitted profile YAML here (atomically); "
                                 "the report goes beside it (.fit.md, .fit.json, .png)."),
        family: str = typer.Option("linear", "--family", help="Step-time family: linear (floor + per "
                                   "token + per context token), buckets (the same, padded to "
                                   "CUDA-graph capture sizes), roofline (floor + max(weight_s, "
                                   "per_token_s x B): flat, then compute-bound), moe (floor + "
                                   "expert_s x the share of routed experts B tokens touch + "
                                   "per_token_s x B; needs --experts and --top-k), or a family YAML file."),
        experts: Optional[int] = typer.Option(None, "--experts", help="moe family: routed experts per "
                                              "MoE layer (the model config's num_local_experts / "
                                              "n_routed_experts)."),
        top_k: Optional[int] = typer.Option(None, "--top-k", help="moe family: experts each token is "
                                            "routed to (num_experts_per_tok)."),
        fix: str = typer.Option("", "--fix", help="Parameters held fixed, NAME=VALUE,... of floor_s, "
                                "per_token_s, per_context_token_s, per_request_s (held at 0 unless --roofline "
                                "gives it a prior) and weight_s for roofline, seconds."),
        capture_sizes: Optional[str] = typer.Option(None, "--capture-sizes", help="buckets family: "
                                                    "comma-separated capture sizes [vLLM's 1,2,4,8..512]."),
        max_batch_tokens: Optional[int] = typer.Option(None, "--max-batch-tokens", help="Top of the "
                                                       "written table and the profile's token budget [8192]."),
        gpus: int = typer.Option(1, "--gpus", help="GPUs per replica; observed throughput is per GPU."),
        policy: str = typer.Option("ar", "--policy", help="Policy of the vLLM result files (they do "
                                   "not record it): ar, mtp1, static-K, ...; a file given as "
                                   "RUN.json@POLICY overrides it."),
        acceptance: Optional[str] = typer.Option(None, "--acceptance", help="Acceptance profile of "
                                                 "the vLLM result files' policy (name or path)."),
        prefill: str = typer.Option("local", "--prefill", help="Prefill of the vLLM result files: "
                                    "local (the measured server prefilled) or disaggregated."),
        draft_time_from: Optional[str] = typer.Option(None, "--draft-time-from", help="Copy the "
                                                      "draft_time tables of this profile (name or "
                                                      "path), e.g. a measured one."),
        roofline: Optional[str] = typer.Option(None, "--roofline", help="Analytic profile of the same "
                                               "GPU and model (`dspark-sim roofline ... --out`, name "
                                               "or path): its draft tables price drafting unless "
                                               "--draft-time-from is given, and its values of the "
                                               "family's parameters are the fit's priors."),
        split_prior: Optional[str] = typer.Option(None, "--split-prior", help="A published GPU "
                                                  "step model (shipped: specdecode-bench-llama31-8b-h100, "
                                                  "or a .cost.yaml file) whose per-request / per-token "
                                                  "cost split at the observations' mean context centres "
                                                  "priors on per_request_s and per_token_s: the fit runs "
                                                  "once with per_request_s at 0, then again with the "
                                                  "priors, so its draws (and the intervals of sweep, "
                                                  "plan, recommend) carry the split that one verify "
                                                  "width cannot show. Needs --fix per_context_token_s; "
                                                  "not with --roofline."),
        split_spread: float = typer.Option(1.0, "--split-spread", help="Log-normal spread of the "
                                           "--split-prior priors (1.0: x/÷ 2.7)."),
        per_token_reading: bool = typer.Option(True, "--per-token-reading/--no-per-token-reading",
                                               help="moe family: fit floor + per-token too (growth "
                                               "with load that never saturates, which points at one "
                                               "verify width cannot tell from the experts filling) "
                                               "and, when it fits about as well, let its draws join "
                                               "the fit's so sweep, plan and recommend intervals span "
                                               "both readings (fit.per_token_reading)."),
        prior_spread: float = typer.Option(0.5, "--prior-spread", help="Log-normal spread of each "
                                           "--roofline prior (0.5: x/÷ 1.65); the reported spread "
                                           "covers it."),
        draft_scale_spread: float = typer.Option(2.0, "--draft-scale-spread", help="When the "
                                                 "observations run two policies or more, one of them "
                                                 "speculative, the fit also estimates draft_scale, a "
                                                 "factor on every draft cost (whatever prices it) "
                                                 "that carries what the engine's speculative "
                                                 "iterations cost beyond their target forward; this "
                                                 "is the log-normal spread of its prior, centred at "
                                                 "1 (2.0: x/÷ 7.4, wide: an engine's speculative path "
                                                 "can cost several times the priced drafting). 0: keep "
                                                 "the draft costs as given."),
        draft_cost_band: Optional[float] = typer.Option(None, "--draft-cost-band", help="When "
                                              "the observations cannot see the draft cost (one "
                                              "policy, or no priced drafter among them) and it is "
                                              "priced from a shape (--roofline, --draft-layer-share, "
                                              "or a roofline profile as --draft-time-from), the "
                                              "fit's draws take draft_scale "
                                              "from a log-normal band with 10th..90th percentiles "
                                              "1/FACTOR..FACTOR, so sweep, plan and recommend "
                                              "intervals span it; the point estimate keeps the "
                                              "priced cost. Default 2.35: a bare layer share's "
                                              "measured error on vLLM's DSpark start-up profile "
                                              "(hardware/draft_cost.py SHAPE_PRICING_BAND). 1: off."),
        draft_layer_share: str = typer.Option("", "--draft-layer-share", help="Without tables: price "
                                              "drafter KIND as a share of the fitted step, "
                                              "KIND=DRAFT_LAYERS/TARGET_LAYERS[:WIDTH],... (e.g. "
                                              "dspark=3/43:5: one pass over R x 5 tokens; eagle3=1/36: "
                                              "a pass over R tokens per draft; eagle3=4/48:4: a tree "
                                              "drafter, 4 layer passes over R x 4 tokens once per "
                                              "iteration). With none of the three, drafting is "
                                              "free and the command says so."),
        layer_share_overhead: Optional[float] = typer.Option(None, "--layer-share-overhead",
                                                             help="Each --draft-layer-share pass costs "
                                                             "this many times its layers' share (its LM "
                                                             "head, sampling, launches). Default 2.62: "
                                                             "the geometric mean of the two published GPU "
                                                             "drafters timed beside their targets "
                                                             "(hardware/draft_cost.py "
                                                             "LAYER_SHARE_OVERHEAD). 1: the bare layers."),
        kv_capacity: Optional[int] = typer.Option(None, "--kv-capacity-tokens", help="KV tokens one "
                                                  "replica holds [unlimited]."),
        max_batch_requests: Optional[int] = typer.Option(None, "--max-batch-requests",
                                                         help="Request cap per iteration [none]."),
        requests_per_user: int = typer.Option(8, "--requests-per-user", help="Closed-loop requests "
                                              "per simulated user, for points that do not say how "
                                              "many requests their run measured (`requests`, or a "
                                              "vllm bench JSON's `completed`: those replay as long "
                                              "as the run, requests / concurrency per user, from 3 "
                                              "to --max-requests-per-user; at least 3: the steady "
                                              "window of a 2-request loop holds one request)."),
        max_requests_per_user: int = typer.Option(64, "--max-requests-per-user", help="Cap on the "
                                                  "requests per user of a point replayed as long as "
                                                  "its run."),
        rounds: int = typer.Option(3, "--rounds", help="Simulator correction rounds."),
        bootstrap: int = typer.Option(200, "--bootstrap", help="Bootstrap samples for the "
                                      "parameters' spread (0: none)."),
        obs_error: float = typer.Option(0.05, "--obs-error", help="Relative error of each observed "
                                        "number, for the parametric bootstrap (few observations)."),
        frontier_points: int = typer.Option(8, "--frontier-points", help="Simulated loads per "
                                            "observed policy for the frontier plot."),
        seed: int = typer.Option(0, "--seed", help="Simulation and bootstrap seed."),
        name: Optional[str] = typer.Option(None, "--name", help="Profile name [from --out]."),
        device: str = typer.Option("", "--device", help="Free-text device description."),
        model: str = typer.Option("", "--model", help="Free-text model name."),
        note: str = typer.Option("", "--note", help="Text for the profile's notes."),
    ) -> None:
        """Fit a hardware profile to observed load points / step times; report residuals, spread, plot."""
        from rich.console import Console
        from rich.progress import Progress

        from ..fileio import write_json_atomic, write_text_atomic
        import numpy as np

        from ..hardware.curve_family import family_values_of, load_family, with_prior_freed
        from ..hardware.draft_cost import (LAYER_SHARE_OVERHEAD, SHAPE_PRICING_BAND, choose_draft_costs,
                                           parse_layer_shares)
        from ..hardware.observations import check_physical, read_observations
        from ..profiles.hardware import HardwareProfile
        from ..profiles.registry import load_hw_profile
        from ..sweep.calibrate import Calibration
        from ..sweep.load_replay import MIN_REQUESTS_PER_USER, FitConfig
        from ..sweep.calibrate_report import fit_block, fitted_frontiers, frontier_plot, report_markdown

        check_at_least(("gpus", gpus, 1), ("requests-per-user", requests_per_user, MIN_REQUESTS_PER_USER),
                       ("max-requests-per-user", max_requests_per_user, MIN_REQUESTS_PER_USER),
                       ("rounds", rounds, 0), ("bootstrap", bootstrap, 0),
                       ("frontier-points", frontier_points, 2))
        if not 0 < obs_error < 1:
            raise InputError(f"must be in (0, 1), got {obs_error}", field="obs-error")
        if (experts is not None or top_k is not None) and family != "moe":
            raise InputError("--experts and --top-k belong to --family moe", field="experts")
        routing = {k: v for k, v in (("experts", experts), ("top_k", top_k)) if v is not None}
        fam = load_family(family, _fixed(fix), max_batch_tokens, routing)
        if capture_sizes is not None:
            from ..hardware.curve_family import family_from_dict

            try:
                sizes = [int(v) for v in capture_sizes.split(",") if v.strip()]
            except ValueError:
                raise InputError(f"expected comma-separated integers, got {capture_sizes!r}",
                                 field="capture-sizes") from None
            fam = family_from_dict({"family": "buckets", "capture_sizes": sizes, "fixed": fam.fixed,
                                    "max_batch_tokens": fam.max_batch_tokens})
        points = read_observations(observations, policy=policy, acceptance=acceptance, gpus=gpus,
                                   prefill=prefill)
        check_physical(points, gpus)
        if prior_spread <= 0:
            raise InputError(f"must be > 0, got {prior_spread}", field="prior-spread")
        if draft_scale_spread < 0:
            raise InputError(f"must be >= 0, got {draft_scale_spread}", field="draft-scale-spread")
        draft_cost_band = SHAPE_PRICING_BAND if draft_cost_band is None else draft_cost_band
        if not np.isfinite(draft_cost_band) or draft_cost_band < 1:
            raise InputError(f"must be >= 1 (1: off), got {draft_cost_band}", field="draft-cost-band")
        split = None
        if split_prior:
            from ..published.cost_models import resolve_cost_model
            from ..sweep.split_prior import SplitPrior

            if roofline:
                raise InputError("give --roofline or --split-prior, not both (the roofline's priors "
                                 "already split the cost)", field="split-prior")
            if split_spread <= 0:
                raise InputError(f"must be > 0, got {split_spread}", field="split-spread")
            cm = resolve_cost_model(split_prior, field="split-prior")
            split = SplitPrior(cm.target["c_kv"] / cm.target["c_compute"], split_spread,
                               f"{cm.name}'s c_kv x context / c_compute, {cm.source['url']}")
        roof = load_hw_profile(roofline) if roofline else None
        values = family_values_of(fam, roof) if roof else {}
        fam = with_prior_freed(fam, values, _fixed(fix))
        if roof is not None and roof.cudagraph is not None and fam.cudagraph is None:
            from dataclasses import replace

            fam = replace(fam, cudagraph=roof.cudagraph)     # the capture limit of the same GPU
        priors = {k: v for k, v in values.items() if k in fam.free}
        drafts = choose_draft_costs(load_hw_profile(draft_time_from) if draft_time_from else None,
                                    roof, parse_layer_shares(draft_layer_share, LAYER_SHARE_OVERHEAD
                                                             if layer_share_overhead is None
                                                             else layer_share_overhead))
        cfg = FitConfig(fam, name=name or out.stem, gpus=gpus, draft_costs=drafts,
                        kv_capacity_tokens=kv_capacity, max_batch_requests=max_batch_requests,
                        requests_per_user=requests_per_user, max_requests_per_user=max_requests_per_user,
                        rounds=rounds, bootstrap=bootstrap, obs_error=obs_error, seed=seed, priors=priors,
                        prior_spread=prior_spread, draft_scale_spread=draft_scale_spread,
                        draft_band=draft_cost_band)
        cal = Calibration(points, cfg)
        if split is not None:
            from ..sweep.split_prior import check_split_family

            check_split_family(cal)
        console = Console(stderr=True)
        console.print(drafts.describe())
        if priors:
            console.print(f"priors from {roof.name}: " + ", ".join(f"{k} = {v:.4g}" for k, v in priors.items())
                          + f" (spread x/÷ {np.exp(prior_spread):.2f})")
        groups = len({(p.policy, p.acceptance) for p in cal.loads})
        reading = per_token_reading and fam.family == "moe" and bool(cal.loads)
        total = len(cal.loads) * (rounds + 1) * (2 if split else 1) * (2 if reading else 1) + \
            groups * frontier_points
        split_note = ""
        with Progress(console=console, transient=True) as bar:
            task = bar.add_task("simulating", total=total)
            advance = lambda label: bar.advance(task)  # noqa: E731
            result = cal.fit(advance)
            if split is not None:
                from ..sweep.split_prior import refit_with_split

                cal, result, split_note = refit_with_split(cal, result, split, advance)
            reading_block, reading_line = None, ""
            if reading:
                from ..sweep.per_token_reading import reading_for_fit

                reading_block, reading_line = reading_for_fit(points, cfg, split, roof, result, advance)
            curves = fitted_frontiers(cal, result, frontier_points, advance) if cal.loads else {}
        drafts = cal.draft_costs(result.params)          # with the fitted draft_scale, if any
        if "draft_scale" in result.params:
            console.print(drafts.describe())
        band = cal.draft_band()
        band_line = (f"draft costs not seen by these observations: the fit's draws take draft_scale "
                     f"from the shape pricing's measured band x/÷ {band['factor']:g} (10th..90th "
                     "percentiles; --draft-cost-band), the point estimate 1" if band else "")
        if band_line:
            console.print(band_line)
        if split_note:
            console.print(split_note)
        if reading_line:
            console.print(reading_line)
            reading_line = reading_line[0].upper() + reading_line[1:] + "."
        prof = result.profile
        prof.device, prof.model = device, model
        prof.extra = {"notes": (note + " " if note else "") +
                      "Fitted by `dspark-sim profile fit`: the step curve under which the simulator "
                      "reproduces the observations (fit.residuals). "
                      + drafts.describe() + "." + (" " + band_line[0].upper() + band_line[1:] + "."
                                                   if band_line else "")
                      + (" " + split_note if split_note else "")
                      + (" " + reading_line if reading_line else ""),
                      "fit": fit_block(result, cal, [str(p) for p in observations])}
        if reading_block is not None:
            prof.extra["fit"]["per_token_reading"] = reading_block
        HardwareProfile.from_dict(prof.to_dict(), file=out)   # what the loader would say, before writing
        report = report_markdown(result) + (f"\n{reading_line}\n" if reading_line else "")
        prof.save(out)
        write_text_atomic(out.with_suffix(".fit.md"), report)
        write_json_atomic(out.with_suffix(".fit.json"), prof.extra["fit"])
        written = [out, out.with_suffix(".fit.md"), out.with_suffix(".fit.json")]
        if curves:
            written.append(frontier_plot(cal, result, curves, out.with_suffix(".png")))
        typer.echo(report)
        typer.echo("wrote " + ", ".join(map(str, written)))
