#!/usr/bin/env bash
# Builds goro and runs the fairness runner, the project's main job:
#   bash scripts/fair.sh [goro-fair flags...]
# With no flags: 16 call-free spinners on 2 Ps for 3 s, beside a 1 ms sleeper.
# The runner starts in the caller's directory, so a relative --plot path is
# relative to it.
# Exit status is goro-fair's (1: below a --min_jain, --min_share_ratio or
# --max_p99_ms threshold); a missing package or a failed build is 2, like a
# run that measured nothing, never 1.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd) || exit 2
# deps.sh exits 1 when a package is missing; in a subshell that is ours to map.
(source "$ROOT/scripts/deps.sh") || exit 2
BUILD=${GORO_BUILD_DIR:-build}
[[ $BUILD == /* ]] || BUILD=$ROOT/$BUILD
if ! cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null; then
  echo "fair.sh: cmake could not configure the build in $BUILD" >&2
  exit 2
fi
if ! cmake --build "$BUILD" -j"$(nproc)" --target goro-fair >/dev/null; then
  echo "fair.sh: building goro-fair in $BUILD failed" >&2
  exit 2
fi
exec "$BUILD/stress/goro-fair" "$@"
