#!/bin/bash
# docs/trust.md: an MoE fit's two readings in `sweep`'s interval, on a published sweep. The AMD
# ROCm blog's MiniMax-M2.5 no-speculation arm (4 x MI355X, c = 4..64; the shipped case
# amd-blog-minimax-m25-mi355x-eagle3) fitted as a user would with `profile fit --family moe`,
# with and without its per-token reading; then `sweep` of no speculation against EAGLE-3 with 3
# drafts (the case's acceptance point) over the published concurrencies, gain interval per SLA,
# and `plan` of both at 20 requests a second and 60 tok/s/user.
# Needs nothing outside the package. Usage: scripts/trust_moe_reading.sh [OUT]
set -ex
D=${1:-runs/trust/moe-reading}
mkdir -p "$D"
PY=${PY:-.venv/bin/python}
DS=${DS:-.venv/bin/dspark-sim}
$PY - "$D" <<'PY'
import json, sys
import yaml
from dspark_sim.published.cases import resolve_cases
d = sys.argv[1]
case = resolve_cases(["amd-blog-minimax-m25-mi355x-eagle3"])[0]
base = case.arm(case.baseline)
pts = [{"policy": "ar", "concurrency": int(c), "tps_user": round(float(u), 3), "tps_stat": "mean",
        "throughput_tok_s_per_gpu": float(t), "prompt_tokens": 1024, "output_tokens": 1024,
        "prefill": "local", "requests": case.requests_at(j), "label": f"no speculation c={c}"}
       for j, (c, t, u) in enumerate(zip(case.loads, case.per_gpu(base), case.tps_user(base)))]
yaml.safe_dump({"schema": "dspark-sim/observations/v1", "points": pts}, open(f"{d}/obs.yaml", "w"))
with open(f"{d}/trace.jsonl", "w") as f:
    for i in range(640):
        f.write(json.dumps({"id": f"r{i}", "arrival_s": 0.0, "prompt_tokens": 1024,
                            "output_tokens": 1024, "task": "chat"}) + "\n")
with open(f"{d}/arrivals.jsonl", "w") as f:           # 20 requests a second, for `plan`
    for i in range(300):
        f.write(json.dumps({"id": f"a{i}", "arrival_s": i * 0.05, "prompt_tokens": 1024,
                            "output_tokens": 1024, "task": "chat"}) + "\n")
case.arm("eagle3").acceptance.save(f"{d}/eagle3.acceptance.json")
PY
FIT="--family moe --experts 256 --top-k 8 --fix per_context_token_s=0 --gpus 4 \
  --split-prior specdecode-bench-llama31-8b-h100 --draft-layer-share eagle3=4/62"
SW="--trace $D/trace.jsonl --policies ar,static-3 --acceptance $D/eagle3.acceptance.json \
  --load-range 4,64 --points 5 --requests-per-user 4 --sla 60,80,100,120 --workers 2"
for R in per-token-reading no-per-token-reading; do
  $DS profile fit $D/obs.yaml --out $D/$R/fit.yaml $FIT --$R
  $DS sweep $SW --hw $D/$R/fit.yaml --out $D/$R/sweep --cache $D/$R/cache
  $DS plan --trace $D/arrivals.jsonl --sla 60 --policies ar,static-3 --hw $D/$R/fit.yaml \
    --acceptance $D/eagle3.acceptance.json --out $D/$R/plan --cache $D/$R/pcache --workers 2
done
