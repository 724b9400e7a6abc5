#!/usr/bin/env bash
# Measured profile of a dense 8B-class model (Qwen3-8B shape, random bf16 weights built on the
# meta device and materialised on the GPU) on one GPU, with the roofline's error at every point.
#
# Prepared for one H200 run of about 5 minutes (model build ~30 s, cache fills ~20 s, 35 timed
# points x 7 runs). Run from the repository root; on the device machine:
#     OUT=$OUT bash benchmarks/gpu_profile.sh
# Every setting can be overridden through the environment, e.g. the CPU smoke run of the tests:
#     CONFIG=tiny.json DEVICE=cpu DTYPE=bf16 GPU=H200 BATCHES=1,2 CONTEXTS=16 CHUNKS=16 bash benchmarks/gpu_profile.sh
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-runs/gpu_profile}
CONFIG=${CONFIG:-qwen3-8b}
DEVICE=${DEVICE:-cuda}
DTYPE=${DTYPE:-bf16}
GPU=${GPU:-H200}
BATCHES=${BATCHES:-1,4,16,64}
WIDTHS=${WIDTHS:-1,2,4,8}
CONTEXTS=${CONTEXTS:-512,4096}
CHUNKS=${CHUNKS:-512,2048,8192}
REPEATS=${REPEATS:-5}
NAME=${NAME:-$(echo "$GPU" | tr 'A-Z' 'a-z')-$(basename "$CONFIG" .json)-measured-hf}
PY=${PYTHON:-$( [ -x .venv/bin/python ] && echo .venv/bin/python || echo python3 )}
mkdir -p "$OUT"
export COLUMNS=${COLUMNS:-200} PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 PYTHONPATH=${PYTHONPATH:+$PYTHONPATH:}.
"$PY" -c "import torch; print('torch', torch.__version__, 'cuda', torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else '')"
"$PY" -m dspark_sim profile --random-config "$CONFIG" --device "$DEVICE" --dtype "$DTYPE" --gpu "$GPU" \
    --batches "$BATCHES" --widths "$WIDTHS" --contexts "$CONTEXTS" --prefill-chunks "$CHUNKS" \
    --repeats "$REPEATS" --warmup 2 --threads "${THREADS:-2}" --name "$NAME" \
    --out "$OUT/$NAME.yaml" 2>&1 | tee "$OUT/$NAME.log"
