#!/bin/bash
# docs/trust.md section 3: issue 41's newcomer case reconstructed (Llama-3.1-8B on one H100, an
# Azure conversation slice, 50 tok/s/user, `profile fit` on two no-speculation points derived
# from the H100 roofline). Needs ../shared/traces/azure-llm-2023 (not shipped).
# Usage: scripts/trust_newcomer.sh [OUT]
set -ex
D=${1:-runs/trust/newcomer}
AZURE=${AZURE:-../shared/traces/azure-llm-2023/AzureLLMInferenceTrace_conv.csv}
[ -f "$AZURE" ] || { echo "needs $AZURE (the Azure 2023 conversation trace)"; exit 1; }
mkdir -p "$D"
PY=${PY:-.venv/bin/python}
DS=${DS:-.venv/bin/dspark-sim}
ROOF=$D/h100-llama31-8b-roofline.yaml
TR=$D/azure-conv-slice.jsonl
$DS roofline --model llama-3.1-8b --gpu H100 --out $ROOF
$DS trace import azure "$AZURE" --out $D/azure-conv.jsonl --task chat
head -n 3000 $D/azure-conv.jsonl > $TR
# the baseline arm: no speculation on the roofline at 16 and 128 users, as load points
$DS sweep --trace $TR --hw $ROOF --policies ar --load-range 16,128 --points 2 --requests-per-user 8 \
   --sla 50 --out $D/baseline-arm --workers 2 --spread-draws 0
$PY - "$D" <<'PY'
import sys
import pandas as pd, yaml
d = sys.argv[1]
r = pd.read_csv(f"{d}/baseline-arm/results.csv")
pts = [{"policy": "ar", "concurrency": int(x.load), "tps_user": round(float(x.tps_user_p50), 3),
        "tps_stat": "p50", "throughput_tok_s_per_gpu": round(float(x.throughput_tok_s_per_gpu), 1),
        "prefill": "local", "trace": "azure-conv-slice.jsonl", "label": f"ar c={int(x.load)}"}
       for x in r.itertuples()]
yaml.safe_dump({"schema": "dspark-sim/observations/v1", "points": pts}, open(f"{d}/newcomer-obs.yaml", "w"))
PY
CTX=$($PY -c "import yaml;print(yaml.safe_load(open('$ROOF'))['step_time'].get('per_context_token_s',0))")
# the earlier answers (one parameter fixed) with the roofline's draft tables, and with drafting free
$DS profile fit $D/newcomer-obs.yaml --out $D/fit-ctx0.yaml --fix per_context_token_s=0 --draft-time-from $ROOF
$DS profile fit $D/newcomer-obs.yaml --out $D/fit-ctxroof.yaml --fix per_context_token_s=$CTX --draft-time-from $ROOF
$DS profile fit $D/newcomer-obs.yaml --out $D/fitfree-ctx0.yaml --fix per_context_token_s=0
$DS profile fit $D/newcomer-obs.yaml --out $D/fitfree-ctxroof.yaml --fix per_context_token_s=$CTX
# the product's answer: roofline priors, draws, intervals
$DS profile fit $D/newcomer-obs.yaml --out $D/fit-prior.yaml --roofline $ROOF
# without a roofline of the model: the split prior of a published GPU step model
$DS profile fit $D/newcomer-obs.yaml --out $D/fit-split.yaml --fix per_context_token_s=0 \
   --split-prior specdecode-bench-llama31-8b-h100 --draft-time-from $ROOF
SW="--trace $TR --policies dspark --sla 50 --points 8 --load-range 8,256 --requests-per-user 8 --cache $D/cache --workers 2"
for F in fit-ctx0 fit-ctxroof fit-prior fit-split; do $DS sweep $SW --hw $D/$F.yaml --out $D/sweep-$F; done
for F in fitfree-ctx0 fitfree-ctxroof; do $DS sweep $SW --hw $D/$F.yaml --out $D/sweep-$F --spread-draws 0; done
$DS plan --trace $TR --hw $D/fit-prior.yaml --policies dspark --sla 50 --requests 1000 --rate-scale 40 \
   --out $D/plan-prior-x40 --cache $D/pcache --workers 2
$DS recommend --trace $TR --hw $D/fit-prior.yaml --sla 50 --points 6 --load-range 8,256 \
   --requests-per-user 6 --out $D/recommend-prior --cache $D/rcache --workers 2
