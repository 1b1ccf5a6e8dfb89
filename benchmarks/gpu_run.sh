#!/bin/sh
# One prepared GPU session: the GPU-only tests, the training-speed benchmark, then scripts/gpu_check.py,
# results under OUT.
#   sh benchmarks/gpu_run.sh OUT [GPU_CHECK_BUDGET_SECONDS]
# Environment: TESTS=0 leaves the tests out; TRAIN_SECONDS (0: no training benchmark) and TRAIN_ARGS,
# CHECK_ARGS narrow a session; a budget of 0 leaves gpu_check out. A sample checkpoint carried in
# $TRTKIT_CACHE/sample/ spares the GPU its training.
# Open on a GPU (2026-11-27): the host placement's two ways side by side,
#   TESTS=0 TRAIN_SECONDS=150 TRAIN_ARGS="--modes amp,half --host-rows amp,half --host-worker both --steps 12
#   --anchor-optimizer fused" sh benchmarks/gpu_run.sh OUT 0
# Each part has its own time limit, so a slow first part cannot take the second's time; what a part
# wrote stays when it is stopped. Copy OUT's files into benchmarks/results/<gpu>/ and commit them.
OUT=${1:?usage: sh benchmarks/gpu_run.sh OUT [BUDGET]}
BUDGET=${2:-320}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PYTHONPATH="$(pwd)${PYTHONPATH:+:$PYTHONPATH}"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv
if [ "${TESTS:-1}" != 0 ]; then
  # the tests that skip without CUDA (the host input path's threads and copies among them)
  if python3 -c "import pytest" 2>/dev/null; then
    timeout 120 python3 -m pytest -q -p no:cacheprovider -rs tests/test_training_inputs.py \
        tests/test_tensorrt_runner.py tests/test_tensorrt_calibrator.py > "$OUT/gpu_tests.log" 2>&1
    echo "gpu tests exit $?"; tail -5 "$OUT/gpu_tests.log"
  else
    echo "pytest is not installed here: the GPU-only tests did not run"
  fi
fi
if [ "${TRAIN_SECONDS:-240}" != 0 ]; then
  timeout ${TRAIN_SECONDS:-240} python3 benchmarks/train_speed.py --results "$OUT/results" $TRAIN_ARGS \
      > "$OUT/train_speed.log" 2>&1
  echo "train_speed exit $?"
  grep -v "^epoch" "$OUT/train_speed.log" | tail -32
fi
if [ "$BUDGET" != 0 ]; then
  timeout $((BUDGET + 30)) python3 scripts/gpu_check.py --out "$OUT/gpu_check" --budget-seconds "$BUDGET" \
      $CHECK_ARGS > "$OUT/gpu_check.out" 2>&1
  echo "gpu_check exit $?"
  tail -20 "$OUT/gpu_check.out"
fi
