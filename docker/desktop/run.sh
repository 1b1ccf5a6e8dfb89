#!/usr/bin/env bash
# Run the desktop image on every GPU with ./results mounted at /results.
#   docker/desktop/run.sh                      the default command: trtkit bench
#   docker/desktop/run.sh trtkit build --out /results/build
# Environment: TRTKIT_IMAGE (default trtkit:desktop), RESULTS_DIR (default ./results).
set -euo pipefail
IMAGE="${TRTKIT_IMAGE:-trtkit:desktop}"
RESULTS="${RESULTS_DIR:-$PWD/results}"
mkdir -p "$RESULTS"
TTY=()
if [ -t 0 ] && [ -t 1 ]; then TTY=(-it); fi
exec docker run --rm ${TTY[@]+"${TTY[@]}"} --gpus all --ipc=host -v "$RESULTS:/results" "$IMAGE" "$@"
