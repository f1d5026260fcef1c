#!/usr/bin/env bash
# Builds goro and runs the whole test suite:
#   bash scripts/test.sh                             # build/, the normal build
#   bash scripts/test.sh --sanitize=address,undefined  # build-address-undefined/
#   bash scripts/test.sh --sanitize=thread           # build-thread/
# --sanitize=LIST builds with GORO_SANITIZE=LIST (see docs/sanitizers.md) in
# build-<LIST with - for ,> and runs the same ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
sanitize=""
for arg in "$@"; do
  case "$arg" in
    --sanitize=*) sanitize=${arg#--sanitize=} ;;
    *) echo "scripts/test.sh: unknown argument '$arg' (usage: scripts/test.sh [--sanitize=address,undefined|thread])" >&2
       exit 2 ;;
  esac
done
source scripts/deps.sh
if [[ -n $sanitize ]]; then
  BUILD=${GORO_BUILD_DIR:-build-${sanitize//,/-}}
  # Stop at the first report, with a stack; LeakSanitizer stays on.
  export ASAN_OPTIONS=${ASAN_OPTIONS:-halt_on_error=1:detect_leaks=1}
  export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
  export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}
else
  BUILD=${GORO_BUILD_DIR:-build}
fi
cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DGORO_SANITIZE="$sanitize" >/dev/null
cmake --build "$BUILD" -j"$(nproc)"
rc=0
(cd "$BUILD" && ctest --output-on-failure -j"$(nproc)" --timeout 300) || rc=$?
# ctest lists skipped tests without GoogleTest's reason; say why each was.
log="$BUILD/Testing/Temporary/LastTest.log"
if [[ -f $log ]] && grep -q '^\[  SKIPPED \] [^ ]* (' "$log"; then
  echo "Why the skipped tests were skipped:"
  awk '/^\[  SKIPPED \] [^ ]* \(/ { print "  " $4 ": " prev } { prev = $0 }' "$log"
fi
exit "$rc"
