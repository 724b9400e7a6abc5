#!/usr/bin/env bash
# Reproduce the shipped drafters for the embedded target, one heavy job at a time:
# self-distillation data -> target features -> MTP-1, Eagle3, DFlash, DSpark (same data, same
# time budget each) -> STS calibration of DSpark at T=0 and T=1 -> acceptance profiles at
# T=0 and T=1 on GSM8K test / HumanEval / MT-Bench -> results table and plots.
# Usage: scripts/ship_drafters.sh [STAGE...]   (stages: distill train calibrate measure speed table)
# STEPS=N trains every drafter for N optimizer steps instead of BUDGET minutes (a fair budget
# when jobs share the cores; the shipped checkpoints were trained with BUDGET=25).
# Every stage resumes where it stopped. Logs go to logs/, work files to runs/train/.
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1
CLI=.venv/bin/dspark-sim
RUN=runs/train
BUDGET=${BUDGET:-25}           # minutes of training per drafter
STEPS=${STEPS:-}               # optimizer steps per drafter (overrides BUDGET when set)
N0=${N0:-30}                   # evaluation prompts per task at T = 0
N1=${N1:-15}                   # ... at T = 1 (fewer: CPU time)
THREADS=${THREADS:-1}
SHIP=dspark_sim/data/drafters
ACC=dspark_sim/data/acceptance
TASKS="math=../shared/prompts/gsm8k/test.jsonl,code=../shared/prompts/humaneval/HumanEval.jsonl,chat=../shared/prompts/mt_bench/question.jsonl"
stages=${*:-distill train calibrate measure speed table}
mkdir -p logs "$RUN" "$SHIP" "$ACC"

for stage in $stages; do
case $stage in
distill)
  $CLI distill --out $RUN/distill --n-math 1200 --n-chat 500 --temperatures 0,1 \
    --batch-size 32 --max-new-tokens 160 --seed 0 --threads $THREADS ;;
train)
  for kind in mtp1 eagle3 dflash dspark; do
    rowlen=1024; [ $kind = eagle3 ] && rowlen=512     # 7 unrolled passes per row: shorter rows
    length="--budget-minutes $BUDGET"; [ -n "$STEPS" ] && length="--steps $STEPS"
    $CLI train --drafter $kind --data $RUN/distill --out $RUN/$kind $length \
      --gamma 7 --draft-vocab 8192 --seq-rank 64 --row-len $rowlen --anchors 256 --seed 0 \
      --threads $THREADS --export $SHIP/$kind > logs/train-$kind.log 2>&1
  done ;;
calibrate)
  # Rollouts are saved as $RUN/calibration-tT/rollouts.npz: refit without decoding with
  # `dspark-sim calibrate --rollouts $RUN/calibration-tT/rollouts.npz --report DIR`.
  for t in 0 1; do
    $CLI calibrate --drafter dspark --temperature $t --n 40 --gamma 7 --max-new-tokens 128 \
      --report $RUN/calibration-t$t --threads $THREADS > logs/calibrate-t$t.log 2>&1
  done ;;
measure)
  for t in 0 1; do
    for kind in dspark dflash eagle3 mtp1; do
      g=7; [ $kind = mtp1 ] && g=1
      plain=--no-plain; [ $kind = dspark ] && [ $t = 0 ] && plain=--plain
      n=$N0; [ $t = 1 ] && n=$N1
      name=smollm2-135m-$kind-g$g-t$t
      $CLI measure --drafter $kind --tasks "$TASKS" --n $n --max-new-tokens 128 --gamma $g \
        --temperature $t --seed 0 $plain --threads $THREADS \
        --out $RUN/measure/$name.acceptance.json > logs/measure-$kind-t$t.log 2>&1
      for ext in acceptance.json report.json report.md; do cp $RUN/measure/$name.$ext $ACC/; done
    done
  done ;;
speed)
  # plain vs DSpark verifying all 7 drafts vs DSpark with the one-request scheduler, per prompt
  .venv/bin/python benchmarks/bench_decode.py --drafter dspark --scheduled --tasks "$TASKS" \
    --prompts ${NS:-10} --tokens 128 --gamma 7 --threads $THREADS --json $RUN/speed.json \
    > logs/speed.log 2>&1 ;;
table)
  .venv/bin/python benchmarks/drafters_table.py --measure $RUN/measure --runs $RUN --out docs/drafters \
    --speed $RUN/speed.json
  for t in 0 1; do cp $RUN/calibration-t$t/reliability.png docs/drafters/reliability-t$t.png; done ;;
*) echo "unknown stage $stage" >&2; exit 2 ;;
esac
done
