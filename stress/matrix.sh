#!/usr/bin/env bash
# The fairness stress matrix: goro-fair over procs {1,2} x time slices
# {10ms, 1ms, 200us} x workloads {spin, asm, mixed, fib}, each checked against
# thresholds, plus the throughput cost of preemption (spinners with async
# preemption on versus off at the same slice).
#
#   bash stress/matrix.sh                 # the matrix, ~2 minutes
#   bash stress/matrix.sh --soak 30       # then random configurations for 30 minutes
#   GORO_FAIR=path/to/goro-fair bash stress/matrix.sh
#
# Thresholds are for a noisy 2-core machine: they catch a broken scheduler, not
# a slow neighbour. The figures themselves are printed for the record. Each
# run also fails if it ran with another time slice or async preemption
# setting than it asked for, or if spinners were preempted far less often
# than their slices end (CHECK_PY below says how).
#
# A run still going GORO_MATRIX_SLACK (default 30) seconds after its --seconds
# is hung (a lost wake-up, say): it gets SIGQUIT, on which goro prints every
# goroutine's stack and exits (SIGKILL 10 s later if it does not), and fails
# with its configuration named and that dump shown.
set -euo pipefail
cd "$(dirname "$0")/.."
SOAK_MINUTES=0
SECONDS_PER_RUN=${GORO_MATRIX_SECONDS:-2}
while (($#)); do
  case "$1" in
    --soak) SOAK_MINUTES=${2-}; shift $(($# > 1 ? 2 : 1)) ;;
    --seconds) SECONDS_PER_RUN=${2-}; shift $(($# > 1 ? 2 : 1)) ;;
    *) echo "matrix.sh: unknown argument '$1' (use --soak MINUTES, --seconds N)" >&2; exit 2 ;;
  esac
done
if ! [[ $SOAK_MINUTES =~ ^[0-9]+$ ]]; then
  echo "matrix.sh: --soak '$SOAK_MINUTES': want a whole number of minutes" >&2; exit 2
fi
if ! [[ $SECONDS_PER_RUN =~ ^[0-9]*\.?[0-9]+$ && $SECONDS_PER_RUN =~ [1-9] ]]; then
  echo "matrix.sh: --seconds '$SECONDS_PER_RUN': want a number of seconds above 0" >&2; exit 2
fi
SLACK=${GORO_MATRIX_SLACK:-30}
if ! [[ $SLACK =~ ^[0-9]+$ && $SLACK -gt 0 ]]; then
  echo "matrix.sh: GORO_MATRIX_SLACK='$SLACK': want a whole number of seconds above 0" >&2; exit 2
fi
RUN_LIMIT=$(python3 -c "print($SECONDS_PER_RUN + $SLACK)")
FAIR=${GORO_FAIR:-}
if [[ -z $FAIR ]]; then
  source scripts/deps.sh
  cmake -S . -B build -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
  cmake --build build -j"$(nproc)" --target goro-fair >/dev/null
  FAIR=build/stress/goro-fair
fi

failures=0
# python3 -c "$CHECK_PY" LABEL MIN_JAIN MAX_P99_MS JSON ARGS...: checks a run
# against what its goro-fair ARGS asked for, prints its row (and a line for
# each check it failed), then its iterations per CPU-second on a line of its
# own; exits 1 if the run failed a check, 2 if JSON is not goro-fair's line.
#  - Jain's index at least MIN_JAIN; the sleeper's p99 at most MAX_P99_MS (0:
#    no limit). No sleeper, or one that never woke, has no p99 (null): it
#    fails any limit.
#  - The time slice and async preemption in effect are the ones asked for
#    (GORODEBUG=timeslice overrides --time_slice: every row would measure its
#    slice, whatever its label says).
#  - spin and asm with more goroutines than Ps and async preemption on: each
#    slice ends in a preemption, so the window holds at least a quarter of
#    (CPU-seconds the process got in it / slice) of them, counting no more
#    CPU than the Ps could use (a sysmon that ignored 200 us slices for 10 ms
#    ones makes 2%; a correct one here 70-280%, since slices are timed on the
#    wall clock and a thread the OS deschedules still has its slice end). Not
#    mixed, whose sleepers, yielders and channels take a share of the Ps
#    that varies, nor fib, whose goroutines are too short-lived to be
#    preempted.
CHECK_PY='
import json, sys
label, min_jain, max_p99 = sys.argv[1], float(sys.argv[2]), float(sys.argv[3])
try:
    j = json.loads(sys.argv[4])
    p99 = j["p99_ms"]
    window_s, cpu_s = j["window_s"], j["window_cpu_s"]
    preemptions = j["window_async_preemptions"] + j["window_cooperative_preemptions"]
    j["jain"], j["wakeups"], j["throughput"], j["time_slice_us"], j["async"]
except (ValueError, KeyError, TypeError):
    sys.exit(2)
asked = {"time_slice": "10ms", "async_preemption": "true", "workload": "spin", "procs": "2", "goroutines": "16"}
for a in sys.argv[5:]:
    k, _, v = a[2:].partition("=")
    asked[k] = v
s = asked["time_slice"]
slice_us = float(s[:-2]) * 1000 if s.endswith("ms") else float(s[:-2])
want_async = asked["async_preemption"] == "true"
procs, n = int(asked["procs"]), int(asked["goroutines"])
problems = []
if j["jain"] < min_jain:
    problems.append("Jain %.5f below %s" % (j["jain"], sys.argv[2]))
if max_p99 > 0 and not (j["wakeups"] > 0 and p99 <= max_p99):
    problems.append("sleeper p99 above %s ms, or it never woke" % sys.argv[3])
if j["time_slice_us"] != slice_us or j["async"] != want_async:
    problems.append("ran with time_slice_us=%d async=%s, not the %s, async=%s asked for (GORODEBUG?)" % (
        j["time_slice_us"], str(j["async"]).lower(), s, str(want_async).lower()))
slices = " " * 24  # the column is blank where not checked
if asked["workload"] in ("spin", "asm") and want_async and n > procs:
    expected = min(cpu_s, window_s * procs) / (slice_us * 1e-6)
    slices = "preempted %4s of slices" % ("%.0f%%" % (100 * preemptions / expected) if expected > 0 else "-")
    if preemptions < 0.25 * expected:
        problems.append("%d preemptions in the window, under a quarter of the %.0f slices its %.2f CPU-seconds hold" % (
            preemptions, expected, cpu_s))
print("%-4s %-38s jain %.5f (>= %s)  p99 %8s ms (<= %s)  %s  %.4g it/s" % (
    "FAIL" if problems else "ok", label, j["jain"], sys.argv[2], "-" if p99 is None else "%.3f" % p99, sys.argv[3],
    slices, j["throughput"]))
for p in problems:
    print("       " + p)
print(j["throughput"] * window_s / cpu_s if cpu_s > 0 else 0)
sys.exit(1 if problems else 0)
'

# show_dump OUTPUT: a hung run's output, indented; a long one (a fib run has
# thousands of goroutines) is cut after 200 lines and kept whole in a file.
show_dump() {
  if [[ -z $1 ]]; then echo "    (none)"; return; fi
  local lines; lines=$(printf '%s\n' "$1" | wc -l)
  if ((lines <= 200)); then printf '%s\n' "$1" | sed 's/^/    /'; return; fi
  local file; file=$(mktemp "${TMPDIR:-/tmp}/goro-matrix-hung-XXXXXX.txt")
  printf '%s\n' "$1" >"$file"
  printf '%s\n' "$1" | head -n 200 | sed 's/^/    /'
  echo "    ... $((lines - 200)) more lines; all $lines are in $file"
}

run() {  # run LABEL MIN_JAIN MAX_P99_MS ARGS...
  local label=$1 min_jain=$2 max_p99=$3; shift 3
  LAST_PER_CPU=  # iterations per CPU-second; set only once the JSON line was read
  local out status=0
  out=$(timeout -s QUIT -k 10 "$RUN_LIMIT" "$FAIR" --seconds="$SECONDS_PER_RUN" --json "$@" 2>&1) || status=$?
  if ((status == 124)); then  # timeout's status once it has sent SIGQUIT
    echo "FAIL $label: hung: still running ${RUN_LIMIT}s after it started (--seconds=$SECONDS_PER_RUN), so it was sent SIGQUIT; its output and goroutine dump:"
    show_dump "$out"; failures=$((failures + 1)); return
  fi
  if ((status == 137)); then  # SIGKILL: timeout's 10 s after SIGQUIT, or the OOM killer
    echo "FAIL $label: killed by SIGKILL (hung and still running 10 s after SIGQUIT, or out of memory); its output:"
    show_dump "$out"; failures=$((failures + 1)); return
  fi
  if ((status != 0)); then
    echo "FAIL $label: goro-fair exited with status $status"; echo "$out" | tail -5; failures=$((failures + 1)); return
  fi
  local j result verdict=0
  j=$(printf '%s\n' "$out" | sed -n 's/^\({.*}\)$/\1/p')
  result=$(python3 -c "$CHECK_PY" "$label" "$min_jain" "$max_p99" "$j" "$@") || verdict=$?
  if ((verdict > 1)); then
    echo "FAIL $label: no JSON line it could read in its output:"; echo "$out" | tail -5; failures=$((failures + 1)); return
  fi
  echo "${result%$'\n'*}"
  ((verdict == 0)) || failures=$((failures + 1))
  LAST_PER_CPU=${result##*$'\n'}
}

echo "goro stress matrix: $(nproc) cores, ${SECONDS_PER_RUN}s per run (hung after ${RUN_LIMIT}s), $FAIR"
for procs in 1 2; do
  for slice in 10ms 1ms 200us; do
    slice_ms=$(python3 -c "s='$slice'; print(float(s[:-2]) if s.endswith('ms') else float(s[:-2])/1000)")
    # A sleeper sharing a P with hogs waits at most about one slice (plus
    # noise); with procs=2 there are 8 hogs per P.
    p99=$(python3 -c "print(round(2*$slice_ms + 15, 1))")
    run "spin  procs=$procs slice=$slice" 0.98 "$p99" --procs=$procs --time_slice=$slice --workload=spin --goroutines=$((8 * procs))
    run "asm   procs=$procs slice=$slice" 0.98 "$p99" --procs=$procs --time_slice=$slice --workload=asm --goroutines=$((8 * procs))
    run "mixed procs=$procs slice=$slice" 0.95 0 --procs=$procs --time_slice=$slice --workload=mixed --goroutines=12
    run "fib   procs=$procs slice=$slice" 0.90 0 --procs=$procs --time_slice=$slice --workload=fib --goroutines=$((4 * procs))
  done
done

# Per CPU-second of the whole process (goro-fair's window_cpu_s), as
# bench/fair_compare.sh does per CPU-second of the goroutines' threads: on
# this shared machine the wall-clock rate mostly measures how much CPU other
# work left the run. The process's CPU includes sysmon's, so the cost of
# sending the signals counts as well as that of taking them.
echo "Throughput cost of preemption (spinners, 1 P, async on vs off at the same slice, iterations per CPU-second):"
for slice in 10ms 1ms 200us; do
  run "spin on  slice=$slice" 0 0 --procs=1 --time_slice=$slice --workload=spin --goroutines=4 --sleeper=false
  on=$LAST_PER_CPU
  run "spin off slice=$slice" 0 0 --procs=1 --time_slice=$slice --workload=spin --goroutines=4 --sleeper=false --async_preemption=false
  off=$LAST_PER_CPU
  if [[ -n $on && -n $off ]]; then
    python3 -c "print('     slice=$slice: iterations per CPU-second with preemption / without = %.4f (%.4g / %.4g)' % ($on / $off, $on, $off))"
  else
    echo "     slice=$slice: no ratio (a run failed)"
  fi
done

if ((SOAK_MINUTES > 0)); then
  echo "Soak: random configurations for $SOAK_MINUTES minutes"
  end=$((SECONDS + SOAK_MINUTES * 60))
  workloads=(spin asm mixed fib); slices=(10ms 2ms 1ms 500us 200us)
  while ((SECONDS < end)); do
    w=${workloads[RANDOM % 4]}; s=${slices[RANDOM % 5]}; p=$((RANDOM % 2 + 1)); g=$((RANDOM % 40 + 2))
    min=0.90; [[ $w == mixed || $w == fib ]] && min=0.80
    run "soak $w procs=$p slice=$s n=$g" $min 0 --procs=$p --time_slice=$s --workload=$w --goroutines=$g
  done
fi

if ((failures)); then echo "$failures run(s) failed"; exit 1; fi
echo "all runs passed"
