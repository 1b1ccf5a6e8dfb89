#!/bin/sh
# One prepared GPU session: the training-speed benchmark, then scripts/gpu_check.py, results under OUT.
#   sh benchmarks/gpu_run.sh OUT [GPU_CHECK_BUDGET_SECONDS]
# (TRAIN_SECONDS, TRAIN_ARGS and CHECK_ARGS in the environment narrow a second, shorter session)
# Each part has its own time limit, so a slow first part cannot take the second's time; what a part
# wrote stays when it is stopped. Copy OUT's files into benchmarks/results/<gpu>/ and commit them.
OUT=${1:?usage: sh benchmarks/gpu_run.sh OUT [BUDGET]}
BUDGET=${2:-320}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$(pwd)${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
timeout ${TRAIN_SECONDS:-240} python3 benchmarks/train_speed.py --results "$OUT/results" $TRAIN_ARGS > "$OUT/train_speed.log" 2>&1
echo "train_speed exit $?"
grep -v "^epoch" "$OUT/train_speed.log" | tail -32
timeout $((BUDGET + 30)) python3 scripts/gpu_check.py --out "$OUT/gpu_check" --budget-seconds "$BUDGET" \
    $CHECK_ARGS > "$OUT/gpu_check.out" 2>&1
echo "gpu_check exit $?"
tail -20 "$OUT/gpu_check.out"
