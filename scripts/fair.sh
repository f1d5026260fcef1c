#!/usr/bin/env bash
# Builds goro and runs the fairness runner, the project's main job:
#   bash scripts/fair.sh [goro-fair flags...]
# With no flags: 16 call-free spinners on 2 Ps for 3 s, beside a 1 ms sleeper.
# The runner starts in the caller's directory, so a relative --plot path is
# relative to it.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
source "$ROOT/scripts/deps.sh"
BUILD=${GORO_BUILD_DIR:-build}
[[ $BUILD == /* ]] || BUILD=$ROOT/$BUILD
cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$BUILD" -j"$(nproc)" --target goro-fair >/dev/null
exec "$BUILD/stress/goro-fair" "$@"
