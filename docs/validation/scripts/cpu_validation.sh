#!/usr/bin/env bash
# The measured CPU profile of the embedded target and its drafters, then sim-to-real validation
# on the two validation traces. Timing is meaningless under contention: every step first waits
# (up to WAIT seconds) until the 1-minute load average is below MAXLOAD, and logs the load.
# Usage: docs/validation/scripts/cpu_validation.sh [profile] [validate]      (default: both)
# Settings: DRAFTER (dspark), POLICIES (ar,mtp1,static-3,dspark), REPEATS (3), TRACES (validate-burst
# validate-concurrent), MAXLOAD (1.2), WAIT (3600), OUT (runs/validate), CLI (.venv/bin/dspark-sim),
# HW_OUT (hw_profiles/cpu-2core-smollm2-135m.yaml: where profile writes, validate reads). The summaries
# (validation.md / .json, overlay.png) are copied to DOCS/<trace>-<drafter>/ (DOCS: docs/validation).
set -euo pipefail
cd "$(dirname "$0")/../../.."
export HF_HUB_OFFLINE=1 COLUMNS=${COLUMNS:-160}
CLI=${CLI:-.venv/bin/dspark-sim}
DRAFTER=${DRAFTER:-dspark}
POLICIES=${POLICIES:-ar,mtp1,static-3,dspark}
REPEATS=${REPEATS:-3}
MAXLOAD=${MAXLOAD:-1.2}
WAIT=${WAIT:-3600}
OUT=${OUT:-runs/validate}
HW_OUT=${HW_OUT:-hw_profiles/cpu-2core-smollm2-135m.yaml}
TRACES=${TRACES:-validate-burst validate-concurrent}
DOCS=${DOCS:-docs/validation}
PROMPTS=${PROMPTS:-math=../shared/prompts/gsm8k/test.jsonl,code=../shared/prompts/humaneval/HumanEval.jsonl,chat=../shared/prompts/mt_bench/question.jsonl}
mkdir -p logs "$OUT"

quiet() {   # wait for a quiet machine, then print the load and the busiest processes
  local waited=0
  while awk -v m="$MAXLOAD" '{exit !($1 >= m)}' /proc/loadavg && [ "$waited" -lt "$WAIT" ]; do
    sleep 20; waited=$((waited + 20))
  done
  echo "load: $(cat /proc/loadavg) (waited ${waited}s)"
  ps aux --sort=-%cpu | head -4 | cut -c1-160
}

for step in ${*:-profile validate}; do
case $step in
profile)
  quiet | tee logs/profile-cpu.log
  $CLI profile --target embedded --device cpu --threads 1 \
    --batches 1,2,4,8 --widths 1,2,4,8 --contexts 128,512,1024 --prefill-chunks 16,32,64,128,256 \
    --repeats 9 --warmup 2 --drafters ngram,mtp1,eagle3,dflash,dspark --draft-requests 1,2,4,8 \
    --draft-context 384 --name "$(basename "$HW_OUT" .yaml)" \
    --out "$HW_OUT" 2>&1 | tee -a logs/profile-cpu.log
  echo "load after: $(cat /proc/loadavg)" | tee -a logs/profile-cpu.log ;;
validate)
  for trace in $TRACES; do
    quiet | tee logs/validate-$trace-$DRAFTER.log
    $CLI validate traces/$trace.jsonl --policies "$POLICIES" --drafter "$DRAFTER" \
      --prompts "$PROMPTS" --repeats "$REPEATS" --threads 1 --device cpu --hw "$HW_OUT" \
      --out "$OUT/$trace-$DRAFTER" 2>&1 | tee -a logs/validate-$trace-$DRAFTER.log
    echo "load after: $(cat /proc/loadavg)" | tee -a logs/validate-$trace-$DRAFTER.log
    mkdir -p "$DOCS/$trace-$DRAFTER"
    cp "$OUT/$trace-$DRAFTER"/{validation.md,validation.json,overlay.png} "$DOCS/$trace-$DRAFTER/"
  done ;;
*) echo "unknown step $step" >&2; exit 2 ;;
esac
done
