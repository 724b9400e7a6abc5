#!/bin/bash
# docs/trust.md section 1 (seventeenth stop): is the per-token / per-request split of a user's
# step cost a property of the model or of the engine? Every shipped DeepSeek-V4 case is rerun
# with its split prior replaced by the per-token reading (per_request_s fixed at 0, so the whole
# cost a user adds grows with the tokens it verifies) and the two tables are set side by side.
# The ATOM cases (MI355X) move towards their published gains, the vLLM ones (B300, MI350X) away.
# Needs nothing outside the package (about 1 min for the variant, 2.5 min for the shipped run
# unless OUT/shipped/table.json exists). Usage: scripts/trust_split_by_engine.sh [OUT]
set -ex
D=${1:-runs/trust/split-by-engine}
mkdir -p "$D/per-token"
PY=${PY:-.venv/bin/python}
DS=${DS:-.venv/bin/dspark-sim}
$PY - "$D" <<'PY'
import sys
import yaml
from dspark_sim.published.cases import shipped_cases
d = sys.argv[1]
for name, path in shipped_cases().items():
    if "v4" not in name:
        continue
    case = yaml.safe_load(path.read_text())
    case["fit"].pop("split_prior", None)
    case["fit"].setdefault("fix", {})["per_request_s"] = 0.0
    with open(f"{d}/per-token/{name}.case.yaml", "w") as fh:
        yaml.safe_dump(case, fh, sort_keys=False)
PY
[ -f "$D/shipped/table.json" ] || $DS validate-published --out "$D/shipped" --no-one-cell
$DS validate-published "$D"/per-token/*.case.yaml --out "$D/per-token/out" --no-one-cell
$PY - "$D" <<'PY'
import json, sys
d = sys.argv[1]
shipped = json.load(open(f"{d}/shipped/table.json"))["rows"]
variant = {(r["case"], r["arm"], r["load"]): r for r in json.load(open(f"{d}/per-token/out/table.json"))["rows"]}
print("| case | within 15%: split prior -> per-token reading | gain errors (split prior) | gain errors (per-token reading) |")
print("|---|---|---|---|")
for case in dict.fromkeys(r["case"] for r in shipped if (r["case"], r["arm"], r["load"]) in variant):
    rows = [r for r in shipped if r["case"] == case and not r["baseline"]]
    other = [variant[r["case"], r["arm"], r["load"]] for r in rows]
    within = lambda rs: sum(abs(r["gain_error"]) <= 0.15 for r in rs)
    errs = lambda rs: " ".join(f"{r['gain_error']:+.0%}" for r in rs)
    print(f"| {case} | {within(rows)} -> {within(other)} of {len(rows)} | {errs(rows)} | {errs(other)} |")
PY
