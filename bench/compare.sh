#!/usr/bin/env bash
# bench/compare.sh: goro against Go on the same workloads, side by side, on
# this machine; writes bench/RESULTS.md.
#
#   bash bench/compare.sh
#
# Needs: cmake, a C++20 compiler, Google Benchmark and Abseil (Debian:
# libbenchmark-dev libabsl-dev), Go (any version >= 1.19; standard library
# only, nothing is downloaded) and python3. Takes about 3 minutes on an idle
# 2-core machine.
#
# Steps: builds goro_bench and goro_rss in Release (cmake -S bench, which pulls
# in the goro library alone), builds bench/go, then for each repetition, procs
# count and workload runs goro and then Go (the order alternates between
# repetitions), each in its own process under a timeout. Finally measures RSS
# per parked goroutine for both, and turns all the JSON lines into RESULTS.md
# (medians) with bench/report.py.
#
# Settings (environment):
#   REPS=5          repetitions of every micro-benchmark (the median is reported)
#   MIN_TIME=0.3    minimum seconds per benchmark run, both sides
#   RSS_N=1000000   goroutines to park for the RSS measurement
#   RSS_REPS=1      repetitions of the RSS measurement
#   RUN_TIMEOUT=120 seconds before one benchmark process is killed as hung
#   BUILD_DIR=<repo>/build-bench   where to build; raw results and logs stay there
#   NO_BUILD=1      reuse the programs already built in BUILD_DIR
#   OUT=<repo>/bench/RESULTS.md    the report
set -euo pipefail

command_line="bash bench/compare.sh"
for v in NO_BUILD OUT BUILD_DIR RUN_TIMEOUT RSS_REPS RSS_N MIN_TIME REPS; do
  if [[ -n "${!v+x}" ]]; then command_line="$v=${!v} $command_line"; fi
done

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${BUILD_DIR:-$ROOT/build-bench}"
REPS="${REPS:-5}"
MIN_TIME="${MIN_TIME:-0.3}"
RSS_N="${RSS_N:-1000000}"
RSS_REPS="${RSS_REPS:-1}"
RSS_PROCS=2
RUN_TIMEOUT="${RUN_TIMEOUT:-120}"
# goro's own watchdog (one goro::Run that does not return) fires first, with
# the runtime's counters in its message.
WATCHDOG=$((RUN_TIMEOUT * 3 / 4 > 0 ? RUN_TIMEOUT * 3 / 4 : 1))
OUT="${OUT:-$ROOT/bench/RESULTS.md}"
PROCS_LIST=(1 2)

for tool in cmake go python3 timeout; do
  command -v "$tool" >/dev/null || { echo "compare.sh: '$tool' not found in PATH" >&2; exit 1; }
done

mkdir -p "$BUILD"
LOG="$BUILD/compare.log"
RAW="$BUILD/results.jsonl"
MACHINE="$BUILD/machine.txt"
: >"$LOG"
: >"$RAW"
start_s=$SECONDS

# What else is using the CPUs (over one second): the machine is shared, and a
# busy neighbour moves every figure, so the report says so.
machine_busy() {
  if ! command -v top >/dev/null; then
    echo "unknown (no top)"
    return
  fi
  top -b -n 2 -d 1 -w 200 2>/dev/null | awk '/^top -/ { frame++ } frame == 2' | awk '
    # "0.0 ni,100.0 id,": at 100% idle there is no space before the figure.
    /^%Cpu/ { if (match($0, /[0-9.]+ *id/)) { idle = substr($0, RSTART, RLENGTH); sub(/ *id/, "", idle) } }
    /^ *PID/ { table = 1; next }
    table && $9 + 0 >= 5 { others = others sprintf("%s%s %s%%", sep, $12, $9); sep = ", " }
    END { printf "%.0f%% busy", 100 - idle; if (others != "") printf " (%s)", others; print "" }'
}
busy_start=$(machine_busy)
echo "== CPUs before starting: $busy_start"
if [[ ${busy_start%%%*} =~ ^[0-9]+$ ]] && ((${busy_start%%%*} > 25)); then
  echo "compare.sh: warning: the machine is already busy; expect noisy figures" >&2
fi

if [[ "${NO_BUILD:-0}" == 1 ]]; then
  echo "== NO_BUILD=1: using the programs already in $BUILD"
else
  echo "== building goro_bench and goro_rss (Release) in $BUILD"
if ! cmake -S "$ROOT/bench" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release >>"$LOG" 2>&1 ||
   ! cmake --build "$BUILD" -j"$(nproc)" --target goro_bench goro_rss >>"$LOG" 2>&1; then
  echo "compare.sh: building goro failed; the last lines of $LOG:" >&2
  tail -n 30 "$LOG" >&2
  exit 1
fi

echo "== building bench/go"
if ! (cd "$ROOT/bench/go" && GOFLAGS= GOPROXY=off go build -o "$BUILD/gobench" .) >>"$LOG" 2>&1; then
  echo "compare.sh: building bench/go failed; the last lines of $LOG:" >&2
  tail -n 30 "$LOG" >&2
  exit 1
fi
fi

# run IMPL NAME PROCS CMD...: runs one benchmark process under the timeout,
# appends its JSON lines to $RAW, and a JSON error line when it failed.
run() {
  local impl=$1 name=$2 procs=$3
  shift 3
  local errf="$BUILD/last.stderr" out rc=0
  echo "== $impl $name procs=$procs: $*" >>"$LOG"
  # SIGQUIT first: Go, and goro's SIGQUIT dump, print every goroutine's stack
  # into the log before the process ends.
  out=$(timeout -s QUIT -k 10 "$RUN_TIMEOUT" "$@" 2>"$errf") || rc=$?
  cat "$errf" >>"$LOG"
  local lines
  lines=$(printf '%s\n' "$out" | grep '^{' || true)
  if [[ -n "$lines" ]]; then printf '%s\n' "$lines" >>"$RAW"; fi
  if [[ $rc -ne 0 ]] && ! grep -q '"error"' <<<"$lines"; then
    local why="exit status $rc"
    if [[ $rc -eq 124 || $rc -eq 137 ]]; then
      why="killed after ${RUN_TIMEOUT}s (timeout)"
    elif [[ $rc -gt 128 ]]; then
      why="killed by signal $((rc - 128))"
    fi
    local tail_msg
    tail_msg=$(grep -v '^\s*$' "$errf" | grep -v 'Library was built as DEBUG' | tail -n 2 | tr '\n' ' ' | tr -d '"\\' | tr -d '[:cntrl:]' | cut -c1-300)
    printf '{"impl":"%s","name":"%s","procs":%d,"error":"%s: %s"}\n' \
      "$impl" "$name" "$procs" "$why" "$tail_msg" >>"$RAW"
    echo "   $impl $name procs=$procs FAILED: $why: $tail_msg"
  elif [[ -n "$lines" ]]; then
    python3 -c "import json, sys
for l in sys.stdin:
    r = json.loads(l)
    v = 'FAILED: ' + r['error'] if r.get('error') else '%.4g %s' % (r['value'], r['unit'])
    print('   %-4s %s procs=%d: %s' % (r['impl'], r['name'], r['procs'], v))" <<<"$lines"
  fi
}

# The workloads meant for each procs count, as goro_bench registers them.
workloads_for() {
  "$BUILD/goro_bench" --procs="$1" --benchmark_list_tests=true | sed -n 's|^\([a-z0-9_]*\)/procs:.*|\1|p'
}

for ((rep = 1; rep <= REPS; rep++)); do
  for procs in "${PROCS_LIST[@]}"; do
    mapfile -t names < <(workloads_for "$procs")
    if [[ ${#names[@]} -eq 0 ]]; then
      echo "compare.sh: goro_bench --procs=$procs lists no benchmarks" >&2
      exit 1
    fi
    echo "== repetition $rep/$REPS, procs=$procs"
    for name in "${names[@]}"; do
      goro_cmd=("$BUILD/goro_bench" --procs="$procs" --jsonl --benchmark_min_time="$MIN_TIME"
                --benchmark_filter="^$name/" --watchdog="$WATCHDOG")
      go_cmd=("$BUILD/gobench" -procs="$procs" -benchtime="${MIN_TIME}s" -filter="^$name\$")
      if ((rep % 2 == 1)); then
        run goro "$name" "$procs" "${goro_cmd[@]}"
        run go "$name" "$procs" "${go_cmd[@]}"
      else
        run go "$name" "$procs" "${go_cmd[@]}"
        run goro "$name" "$procs" "${goro_cmd[@]}"
      fi
    done
  done
done

echo "== RSS per parked goroutine, $RSS_N goroutines, procs=$RSS_PROCS"
for ((rep = 1; rep <= RSS_REPS; rep++)); do
  run goro rss_per_parked_goroutine "$RSS_PROCS" \
    "$BUILD/goro_rss" --procs="$RSS_PROCS" --n="$RSS_N" --watchdog="$WATCHDOG"
  run go rss_per_parked_goroutine "$RSS_PROCS" \
    "$BUILD/gobench" -procs="$RSS_PROCS" -rss -n="$RSS_N"
done

busy_end=$(machine_busy)
cxx=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$BUILD/CMakeCache.txt" 2>/dev/null || true)
cxx_flags=$(sed -n 's/^CMAKE_CXX_FLAGS_RELEASE:[A-Z]*=//p' "$BUILD/CMakeCache.txt" 2>/dev/null || true)
if [[ -n "$cxx" ]]; then
  cxx_desc="$("$cxx" --version | head -n1) ($cxx_flags, CMake Release)"
else
  cxx_desc="unknown (no CMakeCache.txt in $BUILD)"
fi
commit=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
if [[ -n "$(git -C "$ROOT" status --porcelain -- . ':!bench/RESULTS.md' 2>/dev/null)" ]]; then
  commit="$commit (the working tree had uncommitted changes; those were measured)"
fi
{
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "goro: commit $commit"
  echo "cpus (nproc): $(nproc)"
  echo "CPU: $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1)"
  echo "kernel: $(uname -srm)"
  echo "Go: $(go version)"
  echo "C++ compiler: $cxx_desc"
  echo "other load on the CPUs (1 s sample by top): before the runs $busy_start; after them $busy_end"
  echo "settings: REPS=$REPS MIN_TIME=${MIN_TIME}s RSS_N=$RSS_N RSS_REPS=$RSS_REPS RSS procs=$RSS_PROCS"
  echo "wall time of compare.sh: $((SECONDS - start_s)) s"
} >"$MACHINE"

python3 "$ROOT/bench/report.py" --raw "$RAW" --out "$OUT" --machine "$MACHINE" \
  --command "$command_line" --log "$LOG"
echo "== done in $((SECONDS - start_s)) s: $OUT (raw: $RAW, log: $LOG)"
