#!/usr/bin/env bash
# The SLA tables of docs/sweeps.md ("Paper comparison"): every shipped GPU-scale roofline with the
# paper-derived acceptance profiles, closed-loop concurrency sweeps, decode-only (prefill
# disaggregated, as DeepSeek serves) and co-located prefill. Writes runs/paper/<hw>-<prefill>/.
#   bash benchmarks/paper_sla_sweeps.sh            # all; ~25 min on the 2-core machine
set -euo pipefail
cd "$(dirname "$0")/.."
CLI=${CLI:-.venv/bin/dspark-sim}
POLICIES=mtp1,static-3,static-5,dspark,dspark-lagged
ACC=mtp1=paper-mtp1,static-3=paper-dspark-g5,static-5=paper-dspark-g5,dspark=paper-dspark-g5,dspark-lagged=paper-dspark-g5
for prefill in disaggregated local; do
  for spec in h200-qwen3-8b-roofline:256 h200x32-deepseek-v3-ep32-roofline:2048 h200x8-deepseek-v3-ep8-roofline:2048; do
    hw=${spec%%:*}; top=${spec##*:}
    start=$(date +%s.%N)
    $CLI sweep --trace traces/chat-heavy-hour.jsonl --policies $POLICIES --hw "$hw" --acceptance $ACC \
      --load concurrency --points 12 --load-range 1,"$top" --seeds 3 --sla 80,120 --sla-percentile 50 \
      --prefill $prefill --workers 2 --out "runs/paper/$hw-$prefill"
    echo "wall $hw $prefill: $(echo "$(date +%s.%N) - $start" | bc) s"
  done
done
