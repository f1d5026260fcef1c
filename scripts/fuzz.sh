#!/usr/bin/env bash
# Builds the libFuzzer target fuzz/goro_fuzz with clang and runs it:
#   bash scripts/fuzz.sh [--seconds=N] [extra libFuzzer flags...]
# Default: 600 s. Exits non-zero on a finding and prints the crash input's
# path; reproduce with: build-fuzz/fuzz/goro_fuzz <that file>
# See docs/fuzzing.md.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=600
extra=()
for a in "$@"; do
  case "$a" in
    --seconds=*)
      seconds=${a#--seconds=}
      if ! [[ $seconds =~ ^[1-9][0-9]*$ ]]; then
        echo "fuzz.sh: --seconds wants a positive whole number, got '$seconds'" >&2
        exit 2
      fi
      ;;
    -h|--help) sed -n '2,6p' "$0"; exit 0 ;;
    *) extra+=("$a") ;;
  esac
done

# clang, plus compiler-rt (libclang_rt.fuzzer*.a and the sanitizer runtimes),
# which Debian ships in libclang-rt-dev (-> libclang-rt-14-dev on bookworm).
GORO_EXTRA_PACKAGES=(clang libclang-rt-dev)
source scripts/deps.sh

BUILD=${GORO_FUZZ_BUILD_DIR:-build-fuzz}
CC=clang CXX=clang++ cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DGORO_FUZZ=ON -DGORO_BUILD_TESTS=OFF -DGORO_BUILD_TOOLS=OFF >/dev/null
cmake --build "$BUILD" -j"$(nproc)" --target goro_fuzz >/dev/null

# The checked-in seeds stay read-only; the fuzzer grows a corpus in the build dir.
corpus="$BUILD/fuzz/corpus"
artifacts="$BUILD/fuzz/artifacts"
mkdir -p "$corpus" "$artifacts"
log="$BUILD/fuzz/fuzz.log"
echo "goro: fuzzing for ${seconds}s (log: $log)" >&2
status=0
# The outer timeout is for a process that hangs while reporting a crash (seen
# once when a goroutine crashed on one thread while others kept running).
timeout -k 10 $((seconds + 120)) "$BUILD/fuzz/goro_fuzz" -max_total_time="$seconds" \
  -timeout=30 -max_len=512 -print_final_stats=1 -artifact_prefix="$artifacts/" \
  ${extra[@]+"${extra[@]}"} "$corpus" fuzz/corpus >"$log" 2>&1 || status=$?
grep -E '^(#[0-9]+[[:space:]]+DONE|stat::)' "$log" >&2 || true
if ((status != 0)); then
  grep -E 'MISMATCH|fatal error|ERROR:|SUMMARY' "$log" | head -5 >&2 || true
  crash=$(grep -oE "Test unit written to [^ ]+" "$log" | tail -1 | sed 's/Test unit written to //' || true)
  if [[ -z $crash ]]; then  # killed by the outer timeout: the input is not saved
    crash=$(ls -t "$artifacts"/* 2>/dev/null | head -1 || true)
  fi
  echo "goro: fuzzer found a failure (exit $status); input: ${crash:-see $log}" >&2
  echo "goro: reproduce with: $BUILD/fuzz/goro_fuzz ${crash:-<input>}" >&2
  exit 1
fi
echo "goro: no failure in ${seconds}s" >&2
