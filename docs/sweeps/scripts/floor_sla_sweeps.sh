#!/usr/bin/env bash
# The SLA tables of docs/sweeps.md ("On the rooflines with latency floors"): the shipped GPU-scale
# rooflines (regenerated with the latency floors of issue 14), MTP-1 / static-3 / DSpark, closed-loop
# concurrency sweeps, decode-only (prefill disaggregated), mean tok/s/user, once with the offline
# paper-derived DSpark acceptance (paper-dspark-g5) and once with the production-like assumption
# (production-dspark-g5). Writes runs/floors/<hw>-<acc>/ (one shared cache per profile).
#   bash docs/sweeps/scripts/floor_sla_sweeps.sh        # ~6 min on 2 shared cores
set -euo pipefail
cd "$(dirname "$0")/../../.."
CLI=${CLI:-.venv/bin/dspark-sim}
for spec in h200-qwen3-8b-roofline:256 h200x32-deepseek-v3-ep32-roofline:2048 h200x8-deepseek-v3-ep8-roofline:2048; do
  hw=${spec%%:*}; top=${spec##*:}
  for acc in paper-dspark-g5 production-dspark-g5; do
    start=$(date +%s.%N)
    $CLI sweep --trace traces/chat-heavy-hour.jsonl --policies mtp1,static-3,dspark --hw "$hw" \
      --acceptance mtp1=paper-mtp1,static-3=$acc,dspark=$acc --load concurrency --points 10 \
      --load-range 1,"$top" --seeds 1 --sla 80,120 --sla-percentile mean --prefill disaggregated \
      --workers 2 --cache "runs/floors/$hw/cache" --out "runs/floors/$hw-$acc"
    echo "wall $hw $acc: $(echo "$(date +%s.%N) - $start" | bc) s"
  done
done
