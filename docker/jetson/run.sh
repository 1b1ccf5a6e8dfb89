#!/usr/bin/env bash
# Run the Jetson image with the NVIDIA runtime (GPU, and TensorRT from JetPack) and ./results at /results.
#   docker/jetson/run.sh                       the default command: trtkit bench
#   docker/jetson/run.sh trtkit build --precision fp16 --out /results/build
# Environment: TRTKIT_IMAGE (default trtkit:jetson-<release of this board>), RESULTS_DIR (default ./results).
set -euo pipefail
if [ -z "${TRTKIT_IMAGE:-}" ]; then
    RELEASE="$(sed -n 's/^# R\([0-9]*\) (release), REVISION: \([0-9.]*\).*/r\1.\2/p' /etc/nv_tegra_release 2>/dev/null || true)"
    TRTKIT_IMAGE="trtkit:jetson-${RELEASE:-r32.7.1}"
fi
RESULTS="${RESULTS_DIR:-$PWD/results}"
mkdir -p "$RESULTS"
TTY=()
if [ -t 0 ] && [ -t 1 ]; then TTY=(-it); fi
exec docker run --rm ${TTY[@]+"${TTY[@]}"} --runtime nvidia --ipc=host -v "$RESULTS:/results" "$TRTKIT_IMAGE" "$@"
