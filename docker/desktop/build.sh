#!/usr/bin/env bash
# Build the desktop GPU image from the repository root: docker/desktop/build.sh [TAG] [docker build options...]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
TAG="${1:-trtkit:desktop}"
shift || true
exec docker build -f "$ROOT/docker/desktop/Dockerfile" -t "$TAG" "$@" "$ROOT"
