#!/usr/bin/env bash
# vLLM as the reference engine, on this machine: its measured step curve, the simulator against
# it on the validation traces and an Azure conversation slice, and its n-gram drafter's acceptance
# on GSM8K / HumanEval / MT-Bench beside the decode core's. Needs `make setup setup-vllm`.
# Usage: docs/vllm/scripts/vllm_validation.sh [profile] [validate] [schedule] [resimulate] [acceptance] [curves]
#        (default: profile validate schedule acceptance curves; schedule validates vLLM's
#        batch-size schedule SCHEDULE on the two validation traces; resimulate re-runs only the
#        simulator against the vLLM runs of an earlier validate, e.g. after re-profiling or with
#        KVSEM=blocks)
# Settings: POLICIES (ar,static-2,static-4), REPEATS (3), TRACES (validate-burst
# validate-concurrent azure-slice), N (20 prompts per task), OUT (runs/vllm), HW (a profile file:
# `profile` writes it there instead of over the shipped hw_profiles/cpu-2core-smollm2-135m-vllm.yaml
# and `validate` simulates on it), SERVERS (--fresh-servers, the default: a server per run; or
# --warm-servers), SPEED (--speed-check, the default: each run simulated at the speed its server
# showed just before its trace; or --no-speed-check). Summaries are copied to
# docs/validation/vllm-<trace>/ and docs/vllm/.
set -euo pipefail
cd "$(dirname "$0")/../../.."
export HF_HUB_OFFLINE=1 COLUMNS=${COLUMNS:-160}
CLI=".venv/bin/python -m dspark_sim"
POLICIES=${POLICIES:-ar,static-2,static-4}
REPEATS=${REPEATS:-3}
OUT=${OUT:-runs/vllm}
N=${N:-20}
TRACES=${TRACES:-validate-burst validate-concurrent azure-slice}
SCHEDULE=${SCHEDULE:-[[1, 3, 4], [4, 16, 2]]}   # K = 4 up to 3 requests, 2 above
DRAFTER="ngram:1-4"                      # the decode core's n-gram lengths (1..4, most recent match)
PROMPTS=math=../shared/prompts/gsm8k/test.jsonl,code=../shared/prompts/humaneval/HumanEval.jsonl,chat=../shared/prompts/mt_bench/question.jsonl
mkdir -p "$OUT" docs/vllm

for step in ${*:-profile validate schedule acceptance curves}; do
case $step in
profile)
  echo "load: $(cat /proc/loadavg)"
  $CLI profile --engine vllm --target embedded --speculative static-4 --vllm-drafter "$DRAFTER" \
    --name "$(basename "${HW:-cpu-2core-smollm2-135m-vllm}" .yaml)" \
    --out "${HW:-hw_profiles/cpu-2core-smollm2-135m-vllm.yaml}"
  ;;
validate)
  # a production-like slice: the first 20 s of the Azure 2023 conversation trace, prompts / 8,
  # outputs / 2 (<= 512 / 128 tokens), arrivals spread over 40 s
  $CLI trace slice ../shared/traces/azure-llm-2023/AzureLLMInferenceTrace_conv.csv --task chat \
    --window 0:20 --prompt-scale 0.125 --output-scale 0.5 --max-prompt-tokens 512 \
    --max-output-tokens 128 --stretch 2 --out "$OUT/azure-slice.jsonl"
  for t in $TRACES; do
    src=traces/$t.jsonl; [ -f "$src" ] || src=$OUT/$t.jsonl
    echo "load: $(cat /proc/loadavg)"
    $CLI validate "$src" --engine vllm --policies "$POLICIES" --vllm-drafter "$DRAFTER" \
      --repeats "$REPEATS" --prompts "$PROMPTS" ${HW:+--hw "$HW"} ${SERVERS:+"$SERVERS"} ${SPEED:+"$SPEED"} --out "$OUT/validate-$t"
    [ -z "${HW:-}" ] || continue          # a profile of this machine's own: no copy into docs/
    mkdir -p "docs/validation/vllm-$t"
    cp "$OUT/validate-$t"/validation.{md,json} "$OUT/validate-$t/overlay.png" "docs/validation/vllm-$t/"
  done
  ;;
schedule)
  for t in validate-burst validate-concurrent; do
    echo "load: $(cat /proc/loadavg)"
    $CLI validate "traces/$t.jsonl" --engine vllm --policies vllm-schedule --bs-schedule "$SCHEDULE" \
      --vllm-drafter "$DRAFTER" --repeats "$REPEATS" --prompts "$PROMPTS" --out "$OUT/validate-sched-$t"
    mkdir -p "docs/validation/vllm-sched-$t"
    cp "$OUT/validate-sched-$t"/validation.{md,json} "$OUT/validate-sched-$t/overlay.png" "docs/validation/vllm-sched-$t/"
  done
  ;;
resimulate)   # KVSEM=blocks: the simulator with vLLM's paged KV and preemption
  for t in $TRACES; do
    src=traces/$t.jsonl; [ -f "$src" ] || src=$OUT/$t.jsonl
    $CLI validate "$src" --engine vllm --policies "$POLICIES" --repeats "$REPEATS" \
      --engine-runs "$OUT/validate-$t" --kv-semantics "${KVSEM:-reserve}" \
      --out "$OUT/resim-${KVSEM:-reserve}-$t"
  done
  ;;
acceptance)
  $CLI measure --engine vllm --vllm-drafter "$DRAFTER" --gamma 4 --tasks "$PROMPTS" --n "$N" \
    --max-new-tokens 128 --out "$OUT/vllm-ngram-g4.acceptance.json" | tee "$OUT/vllm-ngram-g4.txt"
  $CLI measure --drafter ngram --gamma 4 --tasks "$PROMPTS" --n "$N" --max-new-tokens 128 \
    --no-plain --device cpu --threads 1 --out "$OUT/core-ngram-g4.acceptance.json" | tee "$OUT/core-ngram-g4.txt"
  .venv/bin/python docs/vllm/scripts/vllm_compare.py acceptance "$OUT/vllm-ngram-g4.acceptance.json" \
    "$OUT/core-ngram-g4.acceptance.json" | tee docs/vllm/acceptance.md
  ;;
curves)
  .venv/bin/python docs/vllm/scripts/vllm_compare.py curves hw_profiles/cpu-2core-smollm2-135m-vllm.yaml \
    hw_profiles/cpu-2core-smollm2-135m.yaml | tee docs/vllm/step-curves.md
  ;;
*) echo "unknown step $step" >&2; exit 2 ;;
esac
done
