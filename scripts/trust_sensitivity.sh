#!/bin/bash
# docs/trust.md section 2: one input changed at a time on the shipped H200 Qwen3-8B roofline
# (acceptance x0.9/x1.1, draft tables x0.5/x2, per_context_token_s 0, vLLM's CUDA-graph capture
# sizes, those plus the capture limit 512 with an eager floor of 36 layers x 100 us, per_request_s
# 50 us), DSpark vs no speculation at 50 and 100 tok/s/user. Usage: scripts/trust_sensitivity.sh [OUT]
set -ex
D=${1:-runs/trust/sensitivity}
mkdir -p "$D"
PY=${PY:-.venv/bin/python}
DS=${DS:-.venv/bin/dspark-sim}
COMMON="--trace chat-heavy-10min --policies dspark --sla 50,100 --points 12 --load-range 4,256 --requests-per-user 8 --workers 1 --cache $D/cache"
$PY - "$D" <<'PY'
import copy, sys
import numpy as np
from dspark_sim.hardware.curve_family import VLLM_CAPTURE_SIZES
from dspark_sim.profiles.curve import Curve
from dspark_sim.profiles.cudagraph import CudaGraph
from dspark_sim.profiles.registry import load_hw_profile
out = sys.argv[1]
base = load_hw_profile("h200-qwen3-8b-roofline")
def save(p, name):
    p.name = name
    p.save(f"{out}/{name}.yaml")
for f in (0.5, 2.0):
    p = copy.deepcopy(base)
    p.draft_curves = {k: Curve.of(c.x, np.asarray(c.y) * f) for k, c in base.draft_curves.items()}
    save(p, f"roof-draft-x{f:g}")
p = copy.deepcopy(base); p.per_context_token_s = 0.0; save(p, "roof-ctx0")
p = copy.deepcopy(base); p.capture_sizes = tuple(VLLM_CAPTURE_SIZES); save(p, "roof-capture512")
# the capture limit (vLLM's default for 256 requests: 512 tokens) and `roofline`'s default eager
# estimate above it (36 layers x 100 us); and a per-request term of 50 us (sampling, per-sequence
# kernels): both stated assumptions, not measurements
p = copy.deepcopy(base); p.capture_sizes = tuple(VLLM_CAPTURE_SIZES)
p.cudagraph = CudaGraph(512, floor_s=36 * 100e-6, source="estimate"); save(p, "roof-eager512")
p = copy.deepcopy(base); p.per_request_s = 50e-6; save(p, "roof-req50us")
PY
[ -n "$VARIANTS" ] || $DS sweep $COMMON --hw h200-qwen3-8b-roofline --acceptance-scale 0.9,1,1.1 --out $D/acc
for V in ${VARIANTS:-draft-x0.5 draft-x2 ctx0 capture512 eager512 req50us}; do
  $DS sweep $COMMON --hw $D/roof-$V.yaml --out $D/$V
done
