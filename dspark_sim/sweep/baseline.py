"""Which policy the gains are stated against (docs/sweeps.md, "The baseline").

No speculation (`ar`) is always a candidate and the default baseline. MTP-1 is the baseline only
when asked (`--baseline mtp1`) or when the hardware profile's model has an MTP head of its own
(DeepSeek-V3/R1/V4 ship one next-token-prediction layer: a deployment of them would run MTP-1
anyway, so that is what a new drafter has to beat); a model without one (Llama-3.1, Qwen3) would
have to train an MTP head first, so there MTP-1 is a what-if, not the status quo.
"""
from __future__ import annotations

import json
import re

from ..errors import InputError
from ..hardware.models import PRESET_DIR

AUTO = "auto"
NONE = "none"
# model families that ship an MTP (next-n prediction) layer in their checkpoints
_MTP_FAMILIES = re.compile(r"deepseek[-_ .]?(v3|r1|v4)", re.IGNORECASE)


def has_mtp_head(model: str | None) -> bool:
    """True when `model` (a hardware profile's `model` field) has an MTP head: a shipped model
    config (data/model_configs/) with num_nextn_predict_layers > 0, or a DeepSeek-V3/R1/V4 name."""
    if not model:
        return False
    preset = PRESET_DIR / f"{model.strip().lower()}.json"
    if preset.is_file():
        return int(json.loads(preset.read_text()).get("num_nextn_predict_layers", 0) or 0) > 0
    return bool(_MTP_FAMILIES.search(model))


def resolve_baseline(requested: str | None, policies: list[str], model: str | None) -> tuple[str | None, str]:
    """(baseline policy or None, why). `auto`: mtp1 when the model has an MTP head and mtp1 is
    swept, else ar. A named baseline must be one of the policies; `none` (or None): no gains."""
    if requested is None or requested == NONE:
        return None, "no baseline asked for"
    if requested == AUTO:
        if "mtp1" in policies and has_mtp_head(model):
            return "mtp1", f"{model} has an MTP head, so MTP-1 is what it would be served with"
        return "ar", "no speculation" + (f" ({model} has no MTP head)" if model else "")
    if requested not in policies:
        raise InputError(f"baseline {requested!r} is not among the policies ({', '.join(policies)})",
                         field="baseline")
    return requested, "asked for"


def with_ar(policies: list[str]) -> list[str]:
    """The policies with no speculation (`ar`) first: it is always a candidate."""
    return ["ar"] + [p for p in policies if p != "ar"]
