"""Published cost models (a paper's fitted step and draft cost), compared with the roofline of
the same GPU and model: the analytic model `profile fit --roofline` takes priors and draft tables
from (schema `dspark-sim/published-cost-model/v1`, shipped as *.cost.yaml beside the cases)."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import InputError
from ..fileio import read_yaml
from ..profiles.validate import FieldChecker

COST_SCHEMA = "dspark-sim/published-cost-model/v1"
PUBLISHED_DIR = Path(__file__).resolve().parent.parent / "data" / "published_cases"
_TARGET = ("c_kv", "c_compute", "c_fixed", "overhead_per_step")
_DRAFT = ("c_kv", "c_spec_token", "c_fixed")


@dataclass
class CostModel:
    name: str
    title: str
    source: dict
    roofline: dict
    target: dict
    draft: dict
    batch_sizes: list[int]
    context: int
    drafts: int
    path: str


def load_cost_model(path: str | Path) -> CostModel:
    """Read and check one published cost model; errors name FILE:LINE and the field."""
    data, lines = read_yaml(path)
    check = FieldChecker(path, lines)
    data = check.mapping(data, "(document)")
    check.schema(data, COST_SCHEMA)
    source = check.mapping(check.require(data, "source"), "source")
    for key in ("url", "where"):
        check.string(check.require(source, key, "source"), f"source.{key}")
    for key in ("basis", "how"):
        check.string(check.require(data, key), key)
    setup = check.mapping(check.require(data, "setup"), "setup")
    roof = check.mapping(check.require(setup, "roofline", "setup"), "setup.roofline")
    target = check.mapping(check.require(data, "target"), "target")
    draft = check.mapping(check.require(data, "eagle_draft"), "eagle_draft")
    tgt = {k: check.number(check.require(target, k, "target"), f"target.{k}", 0.0) for k in _TARGET}
    drf = {k: check.number(check.require(draft, k, "eagle_draft"), f"eagle_draft.{k}", 0.0) for k in _DRAFT}
    cmp_ = check.mapping(check.require(data, "compare"), "compare")
    for key in ("basis", "how"):
        check.string(check.require(cmp_, key, "compare"), f"compare.{key}")
    sizes = [check.integer(v, f"compare.batch_sizes[{i}]", 1)
             for i, v in enumerate(check.require(cmp_, "batch_sizes", "compare"))]
    return CostModel(check.string(check.require(data, "name"), "name"),
                     check.string(check.require(data, "title"), "title"), dict(source), dict(roof),
                     tgt, drf, sizes,
                     check.integer(check.require(cmp_, "context_tokens_per_request", "compare"),
                                   "compare.context_tokens_per_request", 0),
                     check.integer(check.require(cmp_, "drafts", "compare"), "compare.drafts", 1), str(path))


def shipped_cost_model_paths() -> dict[str, Path]:
    """Name (file stem) -> path of every shipped published cost model (*.cost.yaml, beside the
    published cases)."""
    return {p.name[:-len(".cost.yaml")]: p for p in sorted(PUBLISHED_DIR.glob("*.cost.yaml"))}


def shipped_cost_models() -> list[Path]:
    return list(shipped_cost_model_paths().values())


def find_cost_model(name: str, relative_to: Path | None = None) -> Path | None:
    """Where a cost model named in an option or a case lives: a shipped model by name (file stem
    without .cost.yaml), else a cost-model file (relative to `relative_to` when given); None when
    there is neither."""
    shipped = shipped_cost_model_paths().get(name)
    if shipped is not None:
        return shipped
    path = Path(relative_to) / name if relative_to is not None else Path(name)
    return path if path.is_file() else None


def unknown_cost_model(name: str, relative_to: Path | None = None) -> str:
    """The message for a cost model `find_cost_model` did not find."""
    where = f" (relative to {str(relative_to)!r})" if relative_to is not None else ""
    return (f"no shipped cost model {name!r} (shipped: {', '.join(shipped_cost_model_paths())}) and "
            f"no cost-model file {name!r}{where}")


def resolve_cost_model(name: str, field: str = "cost-model") -> CostModel:
    """A shipped cost model by name (file stem without .cost.yaml) or a cost-model file."""
    path = find_cost_model(name)
    if path is None:
        raise InputError(unknown_cost_model(name), field=field)
    return load_cost_model(path)


def compare(cm: CostModel) -> list[dict]:
    """Per batch size: the published step and EAGLE draft seconds against the roofline's."""
    from ..hardware.analytic_profile import analytic_profile
    from ..hardware.draft_cost import LayerShare
    from ..hardware.gpus import get_gpu
    from ..hardware.models import load_model_shape
    from ..hardware.roofline import Roofline

    shape = load_model_shape(cm.roofline["model"])
    roof = Roofline(shape, get_gpu(cm.roofline["gpu"]))
    prof = analytic_profile(roof, cm.name, max_batch_tokens=max(cm.batch_sizes) * (cm.drafts + 1),
                            drafters=("eagle3",))
    t, d, rows = cm.target, cm.draft, []
    eagle = LayerShare("eagle3", 1, shape.layers)      # EAGLE's one decoder layer, bare (overhead 1)
    for bs in cm.batch_sizes:
        kv = bs * cm.context
        step = t["c_kv"] * kv + t["c_compute"] * bs + t["c_fixed"] + t["overhead_per_step"]
        draft = d["c_kv"] * kv + d["c_spec_token"] * bs * cm.drafts + d["c_fixed"]
        ours_step, ours_draft = float(prof.step_time(bs, kv)), float(prof.draft_time("eagle3", bs, cm.drafts))
        bare = float(eagle.seconds(lambda b: step, bs, cm.drafts))
        rows.append({"batch": bs, "published_step_s": step, "roofline_step_s": ours_step,
                     "step_error": ours_step / step - 1, "published_draft_s": draft,
                     "roofline_draft_s": ours_draft, "draft_error": ours_draft / draft - 1,
                     "target_layers": shape.layers, "bare_layer_share_draft_s": bare,
                     "draft_over_layer_share": draft / bare})
    return rows


def markdown(cm: CostModel, rows: list[dict]) -> str:
    lines = [f"## {cm.name}: {cm.title}", "", f"Source: {cm.source['url']} ({cm.source['where']}). "
             f"Compared with `dspark-sim roofline --model {cm.roofline['model']} --gpu {cm.roofline['gpu']}` "
             f"(defaults) at {cm.context} KV tokens per request, {cm.drafts} EAGLE drafts. Bare layer "
             f"share: {cm.drafts} drafts x 1/{rows[0]['target_layers'] if rows else '?'} of the published "
             "step (EAGLE's one decoder layer; LAYER_SHARE_OVERHEAD in hardware/draft_cost.py is measured "
             "from the last column and vLLM's DSpark start-up profile).", "",
             "| batch | published step ms | roofline | error | published EAGLE draft ms | roofline eagle3 | error "
             "| bare layer share ms | draft / bare share |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['batch']} | {r['published_step_s'] * 1e3:.2f} | {r['roofline_step_s'] * 1e3:.2f} | "
                     f"{r['step_error']:+.1%} | {r['published_draft_s'] * 1e3:.2f} | "
                     f"{r['roofline_draft_s'] * 1e3:.2f} | {r['draft_error']:+.1%} | "
                     f"{r['bare_layer_share_draft_s'] * 1e3:.3f} | x{r['draft_over_layer_share']:.2f} |")
    return "\n".join(lines) + "\n"
