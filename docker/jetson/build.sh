#!/usr/bin/env bash
# Build the Jetson image on the board, for its own L4T release:
#   docker/jetson/build.sh                 reads /etc/nv_tegra_release (e.g. R32.7.1 -> r32.7.1)
#   L4T_RELEASE=r35.2.1 L4T_PYTORCH=pth2.0-py3 docker/jetson/build.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
if [ -z "${L4T_RELEASE:-}" ]; then
    if [ ! -f /etc/nv_tegra_release ]; then
        echo "error: not a Jetson (no /etc/nv_tegra_release); set L4T_RELEASE, e.g. L4T_RELEASE=r32.7.1" >&2
        exit 2
    fi
    # "# R32 (release), REVISION: 7.1, ..." -> r32.7.1
    L4T_RELEASE="$(sed -n 's/^# R\([0-9]*\) (release), REVISION: \([0-9.]*\).*/r\1.\2/p' /etc/nv_tegra_release)"
fi
if [ -z "${L4T_PYTORCH:-}" ]; then
    case "$L4T_RELEASE" in
        r32.7.1) L4T_PYTORCH=pth1.10-py3 ;;
        r35.1.0) L4T_PYTORCH=pth1.13-py3 ;;
        r35.2.1) L4T_PYTORCH=pth2.0-py3 ;;
        *) echo "error: no known l4t-pytorch tag for $L4T_RELEASE; set L4T_PYTORCH (see docs/deploy.md)" >&2; exit 2 ;;
    esac
fi
TAG="${TAG:-trtkit:jetson-$L4T_RELEASE}"
exec docker build -f "$ROOT/docker/jetson/Dockerfile" \
    --build-arg "L4T_RELEASE=$L4T_RELEASE" --build-arg "L4T_PYTORCH=$L4T_PYTORCH" \
    --build-arg "TRTKIT_EXTRAS=${TRTKIT_EXTRAS:-}" -t "$TAG" "$@" "$ROOT"
