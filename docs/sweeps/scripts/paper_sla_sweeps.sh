#!/usr/bin/env bash
# The SLA tables of docs/sweeps.md ("Paper comparison"): every shipped GPU-scale roofline with the
# paper-derived acceptance profiles, closed-loop concurrency sweeps, decode-only (prefill
# disaggregated, as DeepSeek serves) and co-located prefill. Writes runs/paper/<hw>-<prefill>/
# (median tok/s/user) and runs/paper/<hw>-<prefill>-mean/ (mean; read from the same cache).
#   bash docs/sweeps/scripts/paper_sla_sweeps.sh [disaggregated|local ...]   # ~25 min on 2 shared cores
set -euo pipefail
cd "$(dirname "$0")/../../.."
CLI=${CLI:-.venv/bin/dspark-sim}
POLICIES=mtp1,static-3,static-5,dspark,dspark-lagged
ACC=mtp1=paper-mtp1,static-3=paper-dspark-g5,static-5=paper-dspark-g5,dspark=paper-dspark-g5,dspark-lagged=paper-dspark-g5
MODES=("$@"); [ ${#MODES[@]} -eq 0 ] && MODES=(disaggregated local)
for prefill in "${MODES[@]}"; do
  for spec in h200-qwen3-8b-roofline:256 h200x32-deepseek-v3-ep32-roofline:2048 h200x8-deepseek-v3-ep8-roofline:2048; do
    hw=${spec%%:*}; top=${spec##*:}; out=runs/paper/$hw-$prefill
    for stat in 50 mean; do
      start=$(date +%s.%N)
      $CLI sweep --trace traces/chat-heavy-hour.jsonl --policies $POLICIES --hw "$hw" --acceptance $ACC \
        --load concurrency --points 12 --load-range 1,"$top" --seeds 3 --sla 80,120 --sla-percentile $stat \
        --prefill "$prefill" --workers 2 --cache "$out/cache" --out "$out$([ $stat = mean ] && echo -mean)"
      echo "wall $hw $prefill $stat: $(echo "$(date +%s.%N) - $start" | bc) s"
    done
  done
done
