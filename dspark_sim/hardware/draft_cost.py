"""Where a fitted profile's drafting cost comes from, so that drafting is never silently free.

A profile fitted to observations of one policy knows the target step; the drafters it will price
later were often never observed. Three sources, in the order `profile fit` prefers them:

- `tables`: draft_time tables copied from another profile (`--draft-time-from`), typically a
  measured one;
- `roofline`: the draft tables of the analytic profile of the same GPU and model (`--roofline`;
  each drafter kind's cost from its shape, hardware/analytic_profile.py);
- `layer_share`: with no roofline (an unpublished model shape, a GPU not in the table), each
  drafter pass costs its share of the fitted target step: a drafter of `draft_layers` layers
  against a target of `target_layers` runs `share = draft_layers / target_layers` of a target
  forward over the tokens it drafts (`share x step(tokens)`). Block drafters (dflash, dspark)
  make one pass over R x gamma tokens; autoregressive ones (mtp1, eagle3) one pass over R tokens
  per sequential draft, unless given a width (`eagle3=4/48:4`): then one pass per iteration over
  R x width tokens whatever the drafts verified, as a tree drafter's (SGLang's EAGLE-3 with
  top-k > 1: `steps` layer passes over R x top-k branch tokens, however many tree tokens are
  verified). A drafter pass is more than its layers: its LM head, sampling and launches. The
  two published GPU measurements that time a drafter beside its own target's step put it at
  2.03-2.60 times its bare layer share (median 2.35; DSpark on DeepSeek-V4-Flash, vLLM, 4 x B300,
  `benchmarks/digitise_vllm_blog_costcurve.py --draft-share 3/43:7`) and 2.38-3.19 times (median
  2.93; SpecDecode-Bench's EAGLE draft of Llama-3.1-8B, vLLM, one H100, its 1/32 share:
  `dspark-sim validate-published`'s cost-model table), so the share is multiplied by their
  geometric mean, `LAYER_SHARE_OVERHEAD` = 2.62 (`--layer-share-overhead`, 1 = the bare
  layers). Profiles fitted before it record no overhead and are re-tabulated bare.

`none` (drafting free) is the fallback only when nothing is given, and `describe()` says so
loudly; the fit records the source in its report. Whatever the source, `scale` multiplies every
draft cost: `profile fit` fits it (`draft_scale`, a log-normal prior centred at 1) when it is
given speculative observations, so that what a speculative iteration costs beyond its target
forward (drafting as priced, and whatever else the engine's speculative path adds) is read off
the user's own measurement instead of the source alone.

When the observations cannot see it (one policy, or no drafter priced among them), a cost priced
from a shape (`roofline`, `layer_share`, or a roofline profile's tables copied with
`--draft-time-from`) is still an estimate: `profile fit` then draws
`draft_scale` in its bootstrap from a log-normal band whose 10th and 90th percentiles are
1 / SHAPE_PRICING_BAND and SHAPE_PRICING_BAND (the point estimate keeps 1), so that `sweep`,
`plan` and `recommend` intervals span what the pricing does not know. The band's width was
measured first as a bare layer share's error: the one published GPU start-up profile that times
a drafter beside its target's verify step on the same engine and GPU (vLLM's "Adaptive
Verification in vLLM" post, Fig. 2: DeepSeek-V4-Flash-0731 DSpark on 4 x B300, "draft cost vs
requests" beside "verify cost vs batch tokens") has the drafter at 2.03-2.60 times (median 2.35)
its bare layer share (3/43 of the verify cost at R x 7 tokens, R = 1..144, inside the captured
region; `python benchmarks/digitise_vllm_blog_costcurve.py fig2.svg --draft-share 3/43:7`).
SpecDecode-Bench's EAGLE draft on one H100 then showed the same direction (2.38-3.19 times its
bare share), so the share's centre moved to their geometric mean (LAYER_SHARE_OVERHEAD above)
and the band kept its width around it: its 10th percentile, 1.11 times the bare layers, is
about the layers alone; its 90th, 6.2 times, a drafter whose passes cost far more than either
measured one. The same EAGLE draft lies within x1.00-1.15 of the roofline's shape price (which
counts the LM head; docs/trust.md), inside the band around 1.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from ..errors import InputError
from ..profiles.curve import Curve
from ..profiles.hardware import DraftSlope, HardwareProfile

BLOCK_KINDS = ("dflash", "dspark")           # one pass over R x gamma tokens
SEQUENTIAL_KINDS = ("mtp1", "eagle3")        # one pass over R tokens per draft
REQUEST_GRID = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
SHAPE_PRICED = ("roofline", "layer_share")   # sources whose cost is priced from a shape
SHAPE_PRICING_BAND = 2.35                    # p90 / centre of draft_scale when unobserved (docstring)
LAYER_SHARE_OVERHEAD = 2.62                  # a drafter pass / its bare layer share, measured (docstring)
_Z90 = 1.2815515655446004                    # standard normal 90th percentile


def band_spread(factor: float) -> float:
    """Log-normal spread whose 10th..90th percentiles are 1 / factor .. factor (0 for factor <= 1)."""
    return float(np.log(factor) / _Z90) if factor > 1.0 else 0.0


@dataclass(frozen=True)
class LayerShare:
    """One drafter kind priced as a share of the target step."""

    kind: str
    draft_layers: float
    target_layers: float
    gamma: int = 1                                   # tokens per request in one pass
    width_given: bool = False                        # a sequential kind given a width: one pass
                                                     # per iteration (a tree drafter)
    overhead: float = 1.0                            # x the bare share (LAYER_SHARE_OVERHEAD when
                                                     # parsed from an option or a case)

    @property
    def share(self) -> float:
        """Fraction of a target step one pass costs: the layers' share times the pass overhead."""
        return self.draft_layers / self.target_layers * self.overhead

    def as_dict(self) -> dict:
        """The fit block's record of this share (`from_dict` reads it back)."""
        return {"draft_layers": self.draft_layers, "target_layers": self.target_layers, "gamma": self.gamma,
                **({"per_iteration": True} if self.width_given else {}),
                **({"overhead": self.overhead} if self.overhead != 1.0 else {})}

    @classmethod
    def from_dict(cls, kind: str, d: dict) -> "LayerShare":
        """A share as `as_dict` recorded it; a record without `overhead` (fitted before it
        existed) is the bare share it was tabulated with."""
        return cls(kind, float(d["draft_layers"]), float(d["target_layers"]), int(d.get("gamma", 1)),
                   width_given=bool(d.get("per_iteration")), overhead=float(d.get("overhead", 1.0)))

    @property
    def per_iteration(self) -> bool:
        """One pass per iteration over R x gamma tokens (block drafters, tree drafters); else one
        pass over R tokens per sequential draft."""
        return self.kind in BLOCK_KINDS or self.width_given

    def seconds(self, step: Callable[[np.ndarray], np.ndarray], requests, drafts=1):
        """Draft seconds for `requests` decoding requests making `drafts` drafts each."""
        R = np.asarray(requests, dtype=float)
        if self.per_iteration:
            return self.share * np.asarray(step(R * self.gamma)) * (R > 0)
        return self.share * np.asarray(step(np.maximum(R, 1.0))) * np.asarray(drafts) * (R > 0)


@dataclass
class DraftCosts:
    """The draft-cost source of a fit: copied tables, or layer shares of the fitted step."""

    source: str = "none"                                  # none | tables | roofline | layer_share
    origin: str = ""                                      # profile name / what the shares are
    tables: HardwareProfile | None = None
    shares: dict[str, LayerShare] = field(default_factory=dict)
    scale: float = 1.0                                    # x every draft cost (fitted: `draft_scale`)

    @property
    def shape_priced(self) -> bool:
        """Whether the costs are priced from a shape, not measured: a roofline's tables or layer
        shares, also a roofline profile's tables given as `--draft-time-from`."""
        return self.source in SHAPE_PRICED or (
            self.source == "tables" and self.tables is not None and self.tables.source == "roofline")

    def seconds(self, kind: str | None, step: Callable[[np.ndarray], np.ndarray], requests, drafts=1) -> float:
        """Draft seconds of one iteration (0 without a source for `kind`)."""
        if not kind:
            return 0.0
        if self.tables is not None:
            return self.scale * float(self.tables.draft_time(kind, requests, drafts))
        share = self.shares.get(kind)
        return self.scale * float(share.seconds(step, requests, drafts)) if share else 0.0

    def apply(self, prof: HardwareProfile) -> None:
        """Write the draft tables into a fitted profile (layer shares tabulated on its own step),
        every cost times `scale`."""
        if self.tables is not None:
            prof.draft_curves = {k: Curve.of(c.x, c.y * self.scale) for k, c in self.tables.draft_curves.items()}
            prof.per_draft_kinds = self.tables.per_draft_kinds
            prof.draft_slopes = {k: DraftSlope(d.drafts, Curve.of(d.per_draft.x, d.per_draft.y * self.scale))
                                 for k, d in self.tables.draft_slopes.items()}
            return
        per_draft = set(prof.per_draft_kinds)
        for kind, share in self.shares.items():
            grid = np.array([r for r in REQUEST_GRID if r <= (prof.max_batch_tokens or 4096)], dtype=float)
            secs = self.scale * share.seconds(lambda b: prof.step_time(b), grid)
            prof.draft_curves[kind] = Curve.of(grid, np.maximum(secs, 1e-12))
            if kind in SEQUENTIAL_KINDS and not share.per_iteration:
                per_draft.add(kind)
        prof.per_draft_kinds = frozenset(per_draft)

    def describe(self) -> str:
        """One line for the console and the report: where the draft costs came from."""
        text = self._source_text()
        if self.scale != 1.0:
            text += (f"; x{self.scale:.3g}, the draft_scale fitted to the speculative observations "
                     "(every extra cost of a speculative iteration the source leaves out)")
        return text

    def _source_text(self) -> str:
        if self.source == "none":
            return ("draft costs: NONE given -- drafting is free in this profile (optimistic for every "
                    "speculative policy); give --roofline, --draft-time-from or --draft-layer-share")
        if self.source == "layer_share":
            parts = ", ".join(f"{k} = {s.draft_layers:g}/{s.target_layers:g}"
                              + (f" x {s.overhead:g}" if s.overhead != 1.0 else "") + " of a target step"
                              + (f" over R x {s.gamma} tokens" + ("" if k in BLOCK_KINDS else
                                                                   " once per iteration")
                                 if s.per_iteration else " per draft")
                              for k, s in self.shares.items())
            over = {s.overhead for s in self.shares.values()} - {1.0}
            why = (f"; x {', '.join(f'{o:g}' for o in sorted(over))}: a drafter pass's LM head, sampling and "
                   "launches beyond its layers, measured on two published GPU drafters "
                   "(hardware/draft_cost.py LAYER_SHARE_OVERHEAD)" if over else "")
            return (f"draft costs: layer share of the fitted step ({parts}){why}"
                    f"{' -- ' + self.origin if self.origin else ''}")
        kinds = ", ".join(sorted(self.tables.draft_curves)) if self.tables else ""
        return f"draft costs: {self.source} tables of {self.origin} ({kinds or 'no drafter kinds'})"

    def as_dict(self) -> dict:
        out: dict = {"source": self.source, "origin": self.origin, "summary": self.describe()}
        if self.scale != 1.0:
            out["scale"] = self.scale
        if self.shares:
            out["layer_share"] = {k: s.as_dict() for k, s in self.shares.items()}
        return out


def parse_layer_shares(text: str, overhead: float = LAYER_SHARE_OVERHEAD) -> dict[str, LayerShare]:
    """'dspark=3/43:7,eagle3=1/36' -> LayerShare per kind (':G' = tokens per request in one
    pass; on a sequential kind it makes the drafter a tree drafter priced once per iteration),
    each pass `overhead` times its layers' share (the measured default; 1 = bare layers)."""
    if not np.isfinite(overhead) or overhead < 1:
        raise InputError(f"must be >= 1 (1: the bare layers), got {overhead}", field="layer-share-overhead")
    out = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        kind, sep, rest = part.partition("=")
        ratio, _, gamma = rest.partition(":")
        num, slash, den = ratio.partition("/")
        try:
            share = LayerShare(kind.strip(), float(num), float(den), int(gamma) if gamma else 1,
                               width_given=bool(gamma) and kind.strip() not in BLOCK_KINDS, overhead=overhead)
        except ValueError:
            raise InputError(f"expected KIND=DRAFT_LAYERS/TARGET_LAYERS[:GAMMA], got {part!r}",
                             field="draft-layer-share") from None
        if not sep or not slash or share.draft_layers <= 0 or share.target_layers <= 0 or share.gamma < 1:
            raise InputError(f"expected KIND=DRAFT_LAYERS/TARGET_LAYERS[:GAMMA] with positive numbers, "
                             f"got {part!r}", field="draft-layer-share")
        out[share.kind] = share
    return out


def choose_draft_costs(tables: HardwareProfile | None, roofline: HardwareProfile | None,
                       shares: dict[str, LayerShare] | None) -> DraftCosts:
    """The draft-cost source `profile fit` uses: given tables, else the roofline's (same GPU and
    model), else layer shares, else none (free, said loudly by `describe()`)."""
    if tables is not None:
        return DraftCosts("tables", tables.name, tables=tables)
    if roofline is not None and roofline.draft_curves:
        return DraftCosts("roofline", roofline.name, tables=roofline)
    if shares:
        return DraftCosts("layer_share", "", shares=dict(shares))
    return DraftCosts()
