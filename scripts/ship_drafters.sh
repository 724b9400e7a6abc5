#!/usr/bin/env bash
# Reproduce the shipped drafters for the embedded target with a fair comparison:
# self-distillation data (packed into dspark_sim/data/distill/, so retraining never re-runs the
# target) -> target features -> every drafter trained for the same number of optimizer steps on
# the same data, several seeds each -> DSpark's head zeroed (its own contribution) -> acceptance at
# T = 0 and T = 1 on GSM8K test / HumanEval / MT-Bench -> STS calibration of the shipped DSpark ->
# tables with seed spread.
# Usage: scripts/ship_drafters.sh [STAGE...]  (stages: distill distill-full train ablate measure calibrate ship profiles speed table)
# Settings: STEPS (160 optimizer steps per run), SEEDS ("0 1 2"), KINDS ("dspark dflash eagle3 mtp1"),
# SEEDS_EXTRA_KINDS (kinds trained on every seed; others on the first seed only: "dspark dflash"),
# JOBS (2 parallel runs), N (prompts per task, 6), TOKENS (64), THREADS (1), NCAL (held-out prompts
# per task STS is fitted on, 48), NBENCH (benchmark prompts per task it is scored on, 32), NP / TP (prompts per task / tokens of the shipped profiles, 10 / 96),
# TRAIN_DATA / FEATURES (the pack `train` reads and its target-feature cache: the 576-answer pack
# and runs/train/features by default; the full mix is ...-selfdistill-full.npz with its own cache),
# NS (prompts per task of the speed stage, 6), HW (its step curve, measure), RNN (1: also DSpark
# with the RNN head, first seed, measured with and without its head), TAG (suffix of the run names,
# "" by default), FROM (tag of finished runs to warm-start every run from with `train --init-from`:
# their weights and optimizer moments, a new STEPS-step schedule, the data order continuing; unset =
# from scratch), FROM_SHIPPED (the optimizer steps of the shipped drafters: warm-start the first
# seed's runs from dspark_sim/data/drafters/KIND with `train --init-from KIND --prior-steps N`,
# their fp16 weights with fresh optimizer moments, the data order continuing after N steps; needs
# RNN=0 and one seed), FROM_EXPORTED (tag of finished runs whose exported drafters warm-start
# every run the same way, fp16 weights and fresh optimizer moments, with PRIOR_STEPS steps of data
# order skipped: FROM_SHIPPED for any seed), BACKBONE_FROM (tag of finished DFlash runs of the same
# seed whose exported drafters start the DSpark runs' backbones (Markov and RNN heads), `train --backbone-from`, with
# PRIOR_STEPS steps of data order skipped; the heads keep their bigram start). The shipped drafters: FROM="" TAG=-400 STEPS=240,
# i.e. 160 + 240 = 400 steps each; the 800-step check: SEEDS=0 RNN=0 FROM_SHIPPED=400 TAG=-800 STEPS=400, and for seeds 1-2 of
# DSpark and DFlash the same chain from scratch (export SEEDS="1 2" KINDS="dspark dflash" RNN=0):
# STEPS=160 train; FROM= TAG=-400 STEPS=240 train;
# FROM_EXPORTED=-400 PRIOR_STEPS=400 TAG=-800 STEPS=400 train ablate measure.
# The 1200-step chains (seeds side by side, one pipeline each): docs/drafters.md, "1200 steps, 3 seeds";
# the shipped configuration (full mix for the last 400 steps): "The shipped configuration, 3 seeds".
# Every stage resumes where it stopped (training from its checkpoints, measuring from its record
# files). Logs go to logs/, work files to runs/train/.
set -euo pipefail
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1
CLI=.venv/bin/dspark-sim
RUN=runs/train
DATA=dspark_sim/data/distill/smollm2-135m-selfdistill.npz
TRAIN_DATA=${TRAIN_DATA:-$DATA}          # the pack `train` reads (the full mix: ...-selfdistill-full.npz)
FEATURES=${FEATURES:-$RUN/features}      # its target-feature cache (one directory per pack)
STEPS=${STEPS:-160}
SEEDS=${SEEDS:-0 1 2}
KINDS=${KINDS:-dspark dflash eagle3 mtp1}
SEEDS_EXTRA_KINDS=${SEEDS_EXTRA_KINDS:-dspark dflash}
JOBS=${JOBS:-2}
N=${N:-6}
TOKENS=${TOKENS:-64}
RNN=${RNN:-1}
TAG=${TAG:-}
THREADS=${THREADS:-1}
SHIP=dspark_sim/data/drafters
ACC=dspark_sim/data/acceptance
TASKS="math=../shared/prompts/gsm8k/test.jsonl,code=../shared/prompts/humaneval/HumanEval.jsonl,chat=../shared/prompts/mt_bench/question.jsonl"
stages=${*:-train ablate measure calibrate ship profiles speed table}
n_starts=0
for v in FROM FROM_EXPORTED BACKBONE_FROM; do [ -n "${!v+set}" ] && n_starts=$((n_starts + 1)); done   # set, even empty
[ -n "${FROM_SHIPPED:-}" ] && n_starts=$((n_starts + 1))
if [ $n_starts -gt 1 ]; then echo "give at most one of FROM, FROM_EXPORTED, BACKBONE_FROM, FROM_SHIPPED" >&2; exit 2; fi
mkdir -p logs "$RUN/measure"

runs() {   # "KIND SEED" for every run: all seeds for SEEDS_EXTRA_KINDS, the first seed otherwise;
           # dspark_rnn = DSpark with --seq-head rnn
  local first=${SEEDS%% *}
  for seed in $SEEDS; do
    for kind in $KINDS; do
      if [ "$seed" = "$first" ] || [[ " $SEEDS_EXTRA_KINDS " == *" $kind "* ]]; then echo "$kind $seed"; fi
    done
  done
  if [ "$RNN" = 1 ]; then echo "dspark_rnn $first"; fi
}
heads() {  # runs whose head-zeroed twins are measured
  for seed in $SEEDS; do echo "dspark-s$seed$TAG"; done
  if [ "$RNN" = 1 ]; then echo "dspark_rnn-s${SEEDS%% *}$TAG"; fi
}

for stage in $stages; do
case $stage in
distill)   # 576 answers of the default mix were kept (the run was stopped there: CPU time)
  $CLI distill --out $RUN/distill --n-math 1200 --n-chat 500 --temperatures 0,1 \
    --batch-size 32 --max-new-tokens 160 --seed 0 --threads $THREADS --pack $DATA ;;
distill-full)   # the rest of the default mix (1,342 more answers; 18 min on two idle Xeon cores),
                # started from the 576 of $DATA: dspark_sim/data/distill/smollm2-135m-selfdistill-full.npz
  $CLI distill --out $RUN/distill-full --n-math 1200 --n-chat 500 --temperatures 0,1 \
    --batch-size 32 --max-new-tokens 160 --seed 0 --threads 2 --resume-from $DATA \
    --pack dspark_sim/data/distill/smollm2-135m-selfdistill-full.npz ;;
train)
  # the feature cache first (one process), then the runs JOBS at a time
  # (a probe directory of its own, so two pipelines of this script can train side by side)
  $CLI train --drafter dflash --data $TRAIN_DATA --features $FEATURES --out $RUN/.cache-probe-$$ \
    --steps 1 --threads $THREADS --fresh > logs/train-features-$$.log 2>&1
  rm -rf $RUN/.cache-probe-$$ && mv logs/train-features-$$.log logs/train-features.log
  runs | xargs -P "$JOBS" -L 1 bash -c '
    kind=$0; seed=$1; rowlen=1024; [ $kind = eagle3 ] && rowlen=512   # 7 unrolled passes per row
    head=markov; drafter=$kind; [ $kind = dspark_rnn ] && head=rnn && drafter=dspark
    init=; [ "'"${FROM+set}"'" = set ] && init="--init-from '"$RUN"'/$kind-s$seed'"${FROM:-}"'"
    if [ -n "'"${FROM_EXPORTED+set}"'" ]; then
      init="--init-from '"$RUN"'/$kind-s$seed'"${FROM_EXPORTED:-}"'/drafter --prior-steps '"${PRIOR_STEPS:-0}"'"
    fi
    if [ -n "'"${BACKBONE_FROM+set}"'" ] && [ $drafter = dspark ]; then
      init="--backbone-from '"$RUN"'/dflash-s$seed'"${BACKBONE_FROM:-}"'/drafter --prior-steps '"${PRIOR_STEPS:-0}"'"
    fi
    if [ -n "'"${FROM_SHIPPED:-}"'" ]; then
      [ -d '"$SHIP"'/$kind ] && [ $seed = '"${SEEDS%% *}"' ] || { echo "FROM_SHIPPED: no shipped $kind for seed $seed" >&2; exit 255; }
      init="--init-from '"$SHIP"'/$kind --prior-steps '"${FROM_SHIPPED:-}"'"
    fi
    '"$CLI"' train --drafter $drafter --seq-head $head --data '"$TRAIN_DATA"' --features '"$FEATURES"' \
      --out '"$RUN"'/$kind-s$seed'"$TAG"' $init --steps '"$STEPS"' --gamma 7 --draft-vocab 8192 \
      --seq-rank 64 --row-len $rowlen --anchors 256 --seed $seed --threads '"$THREADS"' \
      > logs/train-$kind-s$seed'"$TAG"'.log 2>&1' ;;
ablate)   # the same DSpark checkpoints with the sequential head's bias zeroed
  for run in $(heads); do
    .venv/bin/python -m dspark_sim.train.reports.drafter_seeds zero-head $RUN/$run/drafter $RUN/$run-nohead
  done ;;
measure)
  items=$(runs | while read -r kind seed; do for t in 0 1; do echo "$kind-s$seed$TAG $kind $t"; done; done
          for run in $(heads); do echo "$run-nohead dspark 0"; done)
  echo "$items" | xargs -P "$JOBS" -L 1 bash -c '
    run=$0; kind=$1; t=$2; g=7; [ $kind = mtp1 ] && g=1
    dir='"$RUN"'/$run/drafter; [ -d $dir ] || dir='"$RUN"'/$run
    '"$CLI"' measure --drafter $dir --tasks "'"$TASKS"'" --n '"$N"' --max-new-tokens '"$TOKENS"' \
      --gamma $g --temperature $t --seed 0 --no-plain --threads '"$THREADS"' --name $run-t$t \
      --out '"$RUN"'/measure/$run-t$t.acceptance.json > logs/measure-$run-t$t.log 2>&1' ;;
ship)   # the first seed of every kind is what ships (chosen before measuring, not the best seed);
        # run after `calibrate`, so the shipped DSpark carries its STS temperatures
  first=${SEEDS%% *}
  for kind in $KINDS; do
    rm -rf $SHIP/$kind && cp -r $RUN/$kind-s$first$TAG/drafter $SHIP/$kind
  done ;;
profiles)   # the shipped acceptance profiles: the shipped drafters on NP prompts per task, TP tokens
  for kind in $KINDS; do for t in 0 1; do echo "$kind $t"; done; done | xargs -P "$JOBS" -L 1 bash -c '
    kind=$0; t=$1; g=7; [ $kind = mtp1 ] && g=1; name=smollm2-135m-$kind-g$g-t$t
    '"$CLI"' measure --drafter $kind --tasks "'"$TASKS"'" --n '"${NP:-10}"' --max-new-tokens '"${TP:-96}"' \
      --gamma $g --temperature $t --seed 0 --no-plain --threads '"$THREADS"' --name $name \
      --out '"$ACC"'/$name.acceptance.json > logs/profile-$name.log 2>&1' ;;
calibrate)
  # Both temperatures decode JOBS at a time (--dry-run: nothing written into the checkpoint yet):
  # the calibration rollouts (NCAL held-out template prompts per task) into
  # $RUN/calibration-tT/rollouts.npz, then the evaluation rollouts on other prompts (NBENCH per
  # task of the benchmark sets, after the first 10 the acceptance profiles measure) into
  # $RUN/calibration-bench-tT/rollouts.npz. STS is then fitted on all of the first and scored on
  # the second, and stored beside the checkpoint's weights (calibration.sts.json), one
  # temperature after the other (no decoding); `ship` copies that file with the checkpoint.
  ckpt=$RUN/dspark-s${SEEDS%% *}$TAG/drafter
  printf "0\n1\n" | xargs -P "$JOBS" -I{} bash -c "$CLI calibrate --drafter $ckpt --temperature {} \
    --n ${NCAL:-48} --gamma 7 --max-new-tokens $TOKENS --report $RUN/calibration-t{} --threads $THREADS \
    --dry-run > logs/calibrate-t{}.log 2>&1 && $CLI calibrate --drafter $ckpt --temperature {} \
    --tasks '$TASKS' --skip 10 --n ${NBENCH:-32} --gamma 7 --max-new-tokens $TOKENS \
    --report $RUN/calibration-bench-t{} --threads $THREADS --dry-run > logs/calibrate-bench-t{}.log 2>&1"
  for t in 0 1; do
    $CLI calibrate --drafter $ckpt --rollouts $RUN/calibration-t$t/rollouts.npz \
      --heldout-rollouts $RUN/calibration-bench-t$t/rollouts.npz \
      --report $RUN/calibration-t$t >> logs/calibrate-t$t.log 2>&1
  done ;;
speed)
  # plain vs DSpark verifying all 7 drafts vs DSpark scheduled (skipping draft steps), per
  # prompt, 3 interleaved runs of each, on this decode loop's own step curve
  .venv/bin/python benchmarks/bench_decode.py --drafter dspark --scheduled --skip-drafting on \
    --hw ${HW:-measure} --tasks "$TASKS" --prompts ${NS:-6} --tokens 128 --repeats 3 \
    --gamma 7 --threads $THREADS --json $RUN/speed.json > logs/speed.log 2>&1
  cp $RUN/speed.json docs/drafters/speed.json ;;   # the measurement ships with the table
table)   # the seed table only where every seed of this TAG was measured here (a re-ship of one
         # drafter on a fresh checkout keeps the committed one)
  if .venv/bin/python -m dspark_sim.train.reports.drafter_seeds table --measure $RUN/measure --runs $RUN \
      --seeds "$SEEDS" --tag="$TAG" --out docs/drafters/seeds${TAG}.md > logs/table-seeds.log 2>&1; then
    cat logs/table-seeds.log
  else
    echo "note: docs/drafters/seeds${TAG}.md kept: $(tail -n 1 logs/table-seeds.log)" >&2
  fi
  .venv/bin/python -m dspark_sim.train.reports.drafters_table --measure $ACC --runs $RUN --run-suffix="-s${SEEDS%% *}$TAG" \
    --out docs/drafters --speed docs/drafters/speed.json
  for t in 0 1; do cp $RUN/calibration-t$t/reliability.png docs/drafters/reliability-t$t.png; done ;;
*) echo "unknown stage $stage" >&2; exit 2 ;;
esac
done
