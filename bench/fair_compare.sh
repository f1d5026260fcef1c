#!/usr/bin/env bash
# bench/fair_compare.sh: goro's preemption and fairness beside Go's, in the
# same run on this machine. Writes the tables to $BUILD/fair_results.md (and
# prints them); bench/FAIRNESS.md holds a commented copy of one run.
#
#   bash bench/fair_compare.sh
#
# Needs: cmake, a C++20 compiler, Abseil (libabsl-dev), Go >= 1.19 (standard
# library only; nothing is downloaded), python3. perf (linux-perf) is used for
# scenario d when it can count the signal:signal_deliver tracepoint; without it
# scenario d reports goro's own counters only. About 4 minutes on an idle 2-core
# machine (5 if goro-fair must be rebuilt), plus up to WAIT_BUDGET s waiting
# for other work to go away.
#
# Scenarios (the project's targets in brackets); goro = stress/goro-fair,
# Go = bench/go/fair, the same call-free spin loop and 1 ms sleeper:
#   a. 16 spinners on 2 Ps, 3 s, beside the sleeper: Jain's index and the
#      min/max share [goro: Jain >= 0.999, min/max >= 0.95]
#   b. 1 spinner + the 1 ms sleeper on 1 P, 5 s, 10 ms slice: the sleeper's
#      lateness [goro: p99 <= 10.5 ms]
#   c. 4 spinners on 1 P, no sleeper: throughput with async preemption on
#      vs off, goro at 10ms, 1ms and 200us slices, Go at its fixed 10 ms
#      (GODEBUG=asyncpreemptoff=1 for off) [goro: <= 2% loss at 200us, within
#      noise at 10ms]
#   d. the CPU cost of one preemption, from c, and directly: 2 spinners on 1 P
#      (goro at 200us, Go at 10 ms) on vs off, with per-thread CPU accounting
#      and perf's signal counts [goro: <= 5 us]; and the floor under it, what
#      one bare signal costs a spinning thread here (Go's fair -signal_test)
# Every run is one process; goro and Go alternate (which goes first alternates
# between repetitions), and so do on and off. Throughput is also normalised by
# the CPU time the goroutine-running threads actually got (from
# /proc/PID/task/*/schedstat over the measured window), because on this shared
# machine other work takes the CPU away from a spinner for whole seconds.
#
# Settings (environment):
#   REPS=3          repetitions of a and b (medians are reported)
#   CD_REPS=5       on/off pairs per variant in c and d ...
#   CD_SECONDS=1.5  ... of this many seconds each (short runs, so that a pair
#                   sees the same neighbours)
#   SRC=head        measure the committed HEAD (a clean `git archive` copy);
#                   SRC=tree measures the working tree as it is
#   BUILD_DIR=/tmp/goro-fair-compare   builds, raw results (raw.jsonl), the log
#   NO_BUILD=1      reuse the programs already in BUILD_DIR
#   BUSY_MAX=25     wait while other work keeps more than this % of the CPUs
#                   busy (samples of /proc/stat, taken between runs): ...
#   WAIT_MAX=30     ... up to this many seconds before each scenario,
#   PAIR_WAIT=4     ... up to this many before each pair of runs,
#   WAIT_BUDGET=60  ... and this many in all (raise it on a machine whose
#                   neighbours come and go; on this one they stayed)
#   QUIET=0.25      a run is "quiet" when other work used at most this many CPUs
#                   during its window; c and d report quiet pairs apart
#   RUN_TIMEOUT=60  seconds of slack before a run is killed as hung (SIGQUIT
#                   first, so Go and goro print their goroutines)
set -euo pipefail

command_line="bash bench/fair_compare.sh"
for v in NO_BUILD BUILD_DIR SRC RUN_TIMEOUT QUIET WAIT_BUDGET PAIR_WAIT WAIT_MAX BUSY_MAX CD_SECONDS CD_REPS REPS; do
  if [[ -n "${!v+x}" ]]; then command_line="$v=${!v} $command_line"; fi
done

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${BUILD_DIR:-/tmp/goro-fair-compare}"
REPS="${REPS:-3}"
SRC="${SRC:-head}"
CD_REPS="${CD_REPS:-5}"
CD_SECONDS="${CD_SECONDS:-1.5}"
BUSY_MAX="${BUSY_MAX:-25}"
WAIT_MAX="${WAIT_MAX:-30}"
PAIR_WAIT="${PAIR_WAIT:-4}"
WAIT_BUDGET="${WAIT_BUDGET:-60}"
QUIET="${QUIET:-0.25}"
RUN_TIMEOUT="${RUN_TIMEOUT:-60}"

for tool in cmake go python3 git; do
  command -v "$tool" >/dev/null || { echo "fair_compare.sh: '$tool' not found in PATH" >&2; exit 1; }
done

mkdir -p "$BUILD"
LOG="$BUILD/fair_compare.log"
RAW="$BUILD/raw.jsonl"
RESULTS="$BUILD/fair_results.md"
: >"$LOG"
: >"$RAW"
start_s=$SECONDS

# ---------------------------------------------------------------- building --
GORO_FAIR="$BUILD/cmake/stress/goro-fair"
GO_FAIR="$BUILD/gofair"
if [[ "$SRC" == head ]]; then
  commit_desc="$(git -C "$ROOT" rev-parse --short HEAD) (committed HEAD; a clean copy was built)"
else
  commit_desc="$(git -C "$ROOT" rev-parse --short HEAD)"
  if [[ -n "$(git -C "$ROOT" status --porcelain --untracked-files=no 2>/dev/null)" ]]; then
    commit_desc="$commit_desc plus the working tree's uncommitted changes (SRC=tree)"
  fi
fi
if [[ "${NO_BUILD:-0}" == 1 ]]; then
  echo "== NO_BUILD=1: using the programs already in $BUILD"
  commit_desc="$(cat "$BUILD/commit.txt" 2>/dev/null || echo unknown) (NO_BUILD=1: built earlier)"
else
  src="$ROOT"
  if [[ "$SRC" == head ]]; then
    src="$BUILD/src"
    head_sha=$(git -C "$ROOT" rev-parse HEAD)
    # Extract again only when HEAD moved, so that an unchanged tree builds
    # incrementally.
    if [[ "$(cat "$src/.fair_compare_commit" 2>/dev/null)" != "$head_sha" ]]; then
      rm -rf "$src"
      mkdir -p "$src"
      git -C "$ROOT" archive HEAD | tar -x -C "$src"
      echo "$head_sha" >"$src/.fair_compare_commit"
    fi
  fi
  echo "== building goro-fair (RelWithDebInfo) from $src"
  if ! cmake -S "$src" -B "$BUILD/cmake" -DCMAKE_BUILD_TYPE=RelWithDebInfo >>"$LOG" 2>&1 ||
     ! cmake --build "$BUILD/cmake" -j"$(nproc)" --target goro-fair >>"$LOG" 2>&1; then
    echo "fair_compare.sh: building goro-fair failed; the last lines of $LOG:" >&2
    tail -n 30 "$LOG" >&2
    exit 1
  fi
  echo "== building bench/go/fair"
  if ! (cd "$src/bench/go" && GOFLAGS='' GOPROXY=off go build -o "$GO_FAIR" ./fair) >>"$LOG" 2>&1; then
    echo "fair_compare.sh: building bench/go/fair failed; the last lines of $LOG:" >&2
    tail -n 30 "$LOG" >&2
    exit 1
  fi
  # Both spin loops must be free of calls, or they would reach safe points and
  # the scenarios would not test asynchronous preemption at all.
  loop_go=$(cd "$src/bench/go" && GOFLAGS='' GOPROXY=off go build -o /dev/null -gcflags=-S ./fair 2>&1 |
            awk '/^main\.spinLoop STEXT/ { on = 1; next } on && /STEXT/ { on = 0 } on')
  loop_goro=$(objdump -d --no-show-raw-insn "$GORO_FAIR" 2>/dev/null |
              awk '/<_ZN12_GLOBAL__N_18SpinLoop.*>:$/ { on = 1; next } on && /^$/ { on = 0 } on')
  if [[ -z "$loop_go" || -z "$loop_goro" ]]; then
    echo "fair_compare.sh: could not find the spin loops' code (objdump and go build -gcflags=-S)" >&2
    exit 1
  fi
  calls_go=$(grep -c 'CALL' <<<"$loop_go" || true)
  calls_goro=$(grep -c 'call' <<<"$loop_goro" || true)
  echo "calls in the spin loops: goro SpinLoop $calls_goro, Go spinLoop $calls_go" | tee -a "$LOG"
  if [[ "$calls_go" != 0 || "$calls_goro" != 0 ]]; then
    echo "fair_compare.sh: a spin loop contains a call; see the disassembly" >&2
    exit 1
  fi
  echo "$commit_desc" >"$BUILD/commit.txt"
fi

USE_PERF=0
if command -v perf >/dev/null && perf stat -x, -e signal:signal_deliver true >/dev/null 2>&1; then
  USE_PERF=1
fi

# ------------------------------------------------------ the per-run helper --
# fair_run.py runs one program, samples the per-thread CPU time of its threads
# (/proc/PID/task/TID/schedstat and stat) just inside the measured window, and
# appends one JSON line to raw.jsonl: the program's own JSON plus those samples
# (and perf's counts when asked).
cat >"$BUILD/fair_run.py" <<'PY'
import argparse, json, os, signal, subprocess, sys, tempfile, time

ap = argparse.ArgumentParser()
for k in ("impl", "scenario", "variant", "raw"):
    ap.add_argument("--" + k, required=True)
ap.add_argument("--rep", type=int, required=True)
ap.add_argument("--warmup", type=float, required=True)
ap.add_argument("--seconds", type=float, required=True)
ap.add_argument("--timeout", type=float, default=60)
ap.add_argument("--perf", action="store_true")
ap.add_argument("--env", action="append", default=[])
ap.add_argument("cmd", nargs=argparse.REMAINDER)
a = ap.parse_args()
cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd
env = dict(os.environ)
for kv in a.env:
    k, v = kv.split("=", 1)
    env[k] = v
tck = os.sysconf("SC_CLK_TCK")
tmp = tempfile.mkdtemp(prefix="fair-run-")
pidfile, perfout = os.path.join(tmp, "pid"), os.path.join(tmp, "perf")
wrapped = ["sh", "-c", 'echo $$ > "$0"; exec "$@"', pidfile] + cmd
if a.perf:
    wrapped = ["perf", "stat", "-x,", "-o", perfout, "-e",
               "task-clock,signal:signal_generate,signal:signal_deliver", "--"] + wrapped
out_f, err_f = open(os.path.join(tmp, "out"), "w+"), open(os.path.join(tmp, "err"), "w+")
t_launch = time.monotonic()
p = subprocess.Popen(wrapped, stdout=out_f, stderr=err_f, env=env)
pid = None
while pid is None and p.poll() is None and time.monotonic() - t_launch < 10:
    try:
        pid = int(open(pidfile).read().strip())
    except (OSError, ValueError):
        time.sleep(0.0005)
t0 = time.monotonic()

def sample():
    res = {}
    try:
        tids = os.listdir("/proc/%d/task" % pid)
        f = list(map(int, open("/proc/stat").readline().split()[1:]))
        res["cpus"] = (sum(f), f[3] + f[4])  # all jiffies, idle + iowait jiffies
    except OSError:
        return None
    for tid in tids:
        d = "/proc/%d/task/%s/" % (pid, tid)
        try:
            comm = open(d + "comm").read().strip()
            run_ns, wait_ns, _ = map(int, open(d + "schedstat").read().split())
            st = open(d + "stat").read()
            f = st[st.rindex(")") + 2:].split()
            res[int(tid)] = dict(comm=comm, run=run_ns / 1e9, wait=wait_ns / 1e9,
                                 utime=int(f[11]) / tck, stime=int(f[12]) / tck)
        except (OSError, ValueError):
            pass
    return time.monotonic(), res

samples = []
margin = 0.03
for when in (a.warmup + margin, a.warmup + a.seconds - margin):
    while p.poll() is None and time.monotonic() - t0 < when:
        time.sleep(min(0.01, max(0.0, when - (time.monotonic() - t0))))
    if p.poll() is None and pid is not None:
        s = sample()
        if s:
            samples.append(s)
error = None
try:
    p.wait(timeout=max(1.0, a.warmup + a.seconds + a.timeout - (time.monotonic() - t0)))
except subprocess.TimeoutExpired:
    if pid:
        try:
            os.kill(pid, signal.SIGQUIT)
        except OSError:
            pass
    try:
        p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        p.kill()
        if pid:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        p.wait()
    error = "killed: no exit %.0f s after the run should have ended (hung)" % a.timeout
wall = time.monotonic() - t0
out_f.seek(0)
err_f.seek(0)
stdout, stderr = out_f.read(), err_f.read()
result = None
for line in stdout.splitlines():
    if line.startswith("{"):
        try:
            result = json.loads(line)
        except ValueError:
            pass
if error is None and p.returncode != 0:
    error = "exit status %d" % p.returncode
if error is None and result is None:
    error = "no JSON line on stdout"

rec = dict(kind="run", impl=a.impl, scenario=a.scenario, variant=a.variant, rep=a.rep,
           cmd=" ".join(["%s" % e for e in a.env] + cmd), warmup=a.warmup, seconds=a.seconds,
           wall_s=round(wall, 3), result=result, error=error)
if error:
    rec["stderr_tail"] = stderr.strip().splitlines()[-40:]
    rec["stdout_tail"] = stdout.strip().splitlines()[-10:]
if len(samples) == 2:
    (ta, sa), (tb, sb) = samples
    (ja, ia), (jb, ib) = sa.pop("cpus"), sb.pop("cpus")
    ncpu = os.cpu_count() or 1
    busy = (1 - (ib - ia) / max(1, jb - ja)) * ncpu  # CPUs busy, all processes
    ours = sum(sb[t]["run"] - sa.get(t, {"run": 0})["run"] for t in sb) / (tb - ta)
    tids = sorted(sb)
    # The runtime's monitor thread is not a goroutine-running thread: goro
    # names it goro-sysmon; Go's is the first thread the runtime creates.
    if a.impl == "goro":
        mon = {t for t in tids if sb[t]["comm"] == "goro-sysmon"}
    else:
        mon = {t for t in sorted(set(sa) | set(sb)) if t != pid}
        mon = {min(mon)} if mon else set()
    z = dict(run=0, wait=0, utime=0, stime=0)
    def delta(which):
        tot = dict(z)
        for t in tids:
            if (t in mon) != which:
                continue
            for k in z:
                tot[k] += sb[t][k] - sa.get(t, z)[k]
        return {k: round(v, 6) for k, v in tot.items()}
    rec["sample"] = dict(dt=round(tb - ta, 6), threads=len(tids), workers=delta(False), monitor=delta(True),
                         others_cpus=round(max(0.0, busy - ours), 3))
if a.perf:
    perf = {}
    try:
        for line in open(perfout):
            f = line.strip().split(",")
            if len(f) >= 3 and not line.startswith("#"):
                try:
                    perf[f[2]] = float(f[0])
                except ValueError:
                    perf[f[2]] = None
    except OSError:
        pass
    rec["perf"] = perf
with open(a.raw, "a") as fh:
    fh.write(json.dumps(rec) + "\n")

r = result or {}
# goro-fair's lateness is null when its sleeper never woke (or there is none).
ms = lambda k: "–" if r.get(k) is None else "%.2f" % r[k]
w = rec.get("sample", {}).get("workers", {})
dt = rec.get("sample", {}).get("dt") or 0
cpu = "cpu %.2f, others %.2f" % (w["run"] / dt, rec["sample"]["others_cpus"]) if dt else "cpu ?"
if error:
    print("   %-4s %s %-22s rep %d FAILED: %s" % (a.impl, a.scenario, a.variant, a.rep, error))
    for l in rec["stderr_tail"][-5:]:
        print("        " + l)
else:
    print("   %-4s %s %-22s rep %d: jain %.4f min/max %.3f thr %.3g/s (%s) p50 %s p99 %s ms%s" % (
        a.impl, a.scenario, a.variant, a.rep, r.get("jain", 0), r.get("min_max", 0), r.get("throughput", 0), cpu,
        ms("p50_ms"), ms("p99_ms"),
        "" if "async_preemptions" not in r else "  preemptions %d" % r["async_preemptions"]))
sys.stdout.flush()
PY

# ------------------------------------------------------------- other load --
# ------------------------------------------------------------- other load --
# busy_pct SECONDS: % of all CPUs busy over that long, whoever uses them (this
# kernel's /proc/stat counts every container on the machine). Called only while
# none of this script's programs runs, so all of it is other work.
busy_pct() {
  python3 - "$1" <<'PY'
import sys, time
def read():
    f = list(map(int, open("/proc/stat").readline().split()[1:]))
    return sum(f), f[3] + f[4]
t1, i1 = read(); time.sleep(float(sys.argv[1])); t2, i2 = read()
print(round(100 * (1 - (i2 - i1) / max(1, t2 - t1))))
PY
}

waited_total=0
# quiet_gate SECONDS_PER_SAMPLE MAX_WAIT: wait while other work keeps more than
# BUSY_MAX% of the CPUs busy, at most MAX_WAIT s (and WAIT_BUDGET s in all).
# Sets gate_busy and gate_waited.
quiet_gate() {
  local sample=$1 max=$2
  gate_waited=0
  gate_busy=$(busy_pct "$sample")
  while ((gate_busy > BUSY_MAX && gate_waited < max && waited_total < WAIT_BUDGET)); do
    sleep 2
    gate_waited=$((gate_waited + 2))
    waited_total=$((waited_total + 2))
    gate_busy=$(busy_pct "$sample")
  done
}

# load_gate SCENARIO: before a scenario, record the load average and the other
# work on the CPUs (1 s sample), waiting up to WAIT_MAX s for it to fall.
load_gate() {
  local scen=$1 la
  la=$(cut -d' ' -f1-4 /proc/loadavg)
  quiet_gate 1 "$WAIT_MAX"
  echo "== scenario $scen: load average $la; other work keeps ${gate_busy}% of the CPUs busy (waited ${gate_waited} s)"
  printf '{"kind":"load","scenario":"%s","loadavg":"%s","busy_pct":%d,"waited_s":%d}\n' \
    "$scen" "$la" "$gate_busy" "$gate_waited" >>"$RAW"
}

run() {  # run IMPL SCENARIO VARIANT REP WARMUP SECONDS [--perf] [--env K=V] -- CMD...
  local impl=$1 scen=$2 variant=$3 rep=$4 warm=$5 secs=$6
  shift 6
  python3 "$BUILD/fair_run.py" --impl "$impl" --scenario "$scen" --variant "$variant" --rep "$rep" \
    --warmup "$warm" --seconds "$secs" --timeout "$RUN_TIMEOUT" --raw "$RAW" "$@" | tee -a "$LOG"
}

# pair REP "run args A" "run args B": A first on odd repetitions, B first on
# even ones; before the pair, a short wait (PAIR_WAIT s at most) for quiet.
pair() {
  local rep=$1
  quiet_gate 0.3 "$PAIR_WAIT"
  if ((gate_waited > 0)); then echo "   (waited ${gate_waited} s for other work to fall to ${gate_busy}%)"; fi
  if ((rep % 2 == 1)); then eval "run $2"; eval "run $3"; else eval "run $3"; eval "run $2"; fi
}

echo "== $(nproc) CPUs; load average $(cut -d' ' -f1-3 /proc/loadavg); perf for scenario d: $([[ $USE_PERF == 1 ]] && echo yes || echo no)"

# a. 16 spinners on 2 Ps beside the sleeper.
load_gate a
for ((rep = 1; rep <= REPS; rep++)); do
  pair "$rep" \
    "goro a 16spin-2P $rep 0.2 3 -- '$GORO_FAIR' --procs=2 --goroutines=16 --seconds=3 --json" \
    "go a 16spin-2P $rep 0.2 3 -- '$GO_FAIR' -procs=2 -goroutines=16 -seconds=3"
done

# b. 1 spinner beside the 1 ms sleeper on 1 P, 10 ms slice.
load_gate b
for ((rep = 1; rep <= REPS; rep++)); do
  pair "$rep" \
    "goro b 1spin+sleeper-1P $rep 0.2 5 -- '$GORO_FAIR' --procs=1 --goroutines=1 --seconds=5 --time_slice=10ms --json" \
    "go b 1spin+sleeper-1P $rep 0.2 5 -- '$GO_FAIR' -procs=1 -goroutines=1 -seconds=5"
done

# c. 4 spinners on 1 P, async preemption on vs off: short runs, many pairs.
# goro-fair and fair warm up for min(200 ms, seconds/10), counted from when
# every goroutine has started (with async preemption off, from when none has
# for 100 ms): the window opens that much later than launch + warm-up, which
# fair_run.py's samples, taken in the steady state on either side, allow for.
warm_cd=$(python3 -c "print(min(0.2, $CD_SECONDS / 10))")
load_gate c
for ((rep = 1; rep <= CD_REPS; rep++)); do
  for slice in 10ms 1ms 200us; do
    common="--procs=1 --goroutines=4 --sleeper=false --seconds=$CD_SECONDS --time_slice=$slice --json"
    pair "$rep" \
      "goro c 4spin-1P-$slice-on $rep $warm_cd $CD_SECONDS -- '$GORO_FAIR' $common" \
      "goro c 4spin-1P-$slice-off $rep $warm_cd $CD_SECONDS -- '$GORO_FAIR' $common --async_preemption=false"
  done
  common="-procs=1 -goroutines=4 -sleeper=false -seconds=$CD_SECONDS"
  pair "$rep" \
    "go c 4spin-1P-10ms-on $rep $warm_cd $CD_SECONDS -- '$GO_FAIR' $common" \
    "go c 4spin-1P-10ms-off $rep $warm_cd $CD_SECONDS --env GODEBUG=asyncpreemptoff=1 -- '$GO_FAIR' $common"
done

# d. 2 spinners on 1 P, on vs off, with perf counting the signals delivered.
load_gate d
perf_flag=""
if [[ $USE_PERF == 1 ]]; then perf_flag="--perf"; fi
for ((rep = 1; rep <= CD_REPS; rep++)); do
  common="--procs=1 --goroutines=2 --sleeper=false --seconds=$CD_SECONDS --time_slice=200us --json"
  pair "$rep" \
    "goro d 2spin-1P-200us-on $rep $warm_cd $CD_SECONDS $perf_flag -- '$GORO_FAIR' $common" \
    "goro d 2spin-1P-200us-off $rep $warm_cd $CD_SECONDS $perf_flag -- '$GORO_FAIR' $common --async_preemption=false"
  common="-procs=1 -goroutines=2 -sleeper=false -seconds=$CD_SECONDS"
  pair "$rep" \
    "go d 2spin-1P-10ms-on $rep $warm_cd $CD_SECONDS $perf_flag -- '$GO_FAIR' $common" \
    "go d 2spin-1P-10ms-off $rep $warm_cd $CD_SECONDS $perf_flag --env GODEBUG=asyncpreemptoff=1 -- '$GO_FAIR' $common"
done
# d, floor: what one bare signal costs the thread it interrupts on this
# machine, without any preemption (Go's -signal_test; see bench/go/fair).
load_gate d-floor
for ((rep = 1; rep <= CD_REPS; rep++)); do
  common="-procs=2 -goroutines=1 -sleeper=false -seconds=$CD_SECONDS -signal_test"
  pair "$rep" \
    "go d0 signal-20us $rep $warm_cd $CD_SECONDS --env GODEBUG=asyncpreemptoff=1 -- '$GO_FAIR' $common -signal_interval=20us" \
    "go d0 no-signal $rep $warm_cd $CD_SECONDS --env GODEBUG=asyncpreemptoff=1 -- '$GO_FAIR' $common -signal_interval=0"
done
printf '{"kind":"load","scenario":"end","loadavg":"%s","busy_pct":%d,"waited_s":0}\n' \
  "$(cut -d' ' -f1-4 /proc/loadavg)" "$(busy_pct 1)" >>"$RAW"

# ------------------------------------------------------------------ report --
cxx=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$BUILD/cmake/CMakeCache.txt" 2>/dev/null || true)
cxx_flags=$(sed -n 's/^CMAKE_CXX_FLAGS_RELWITHDEBINFO:[A-Z]*=//p' "$BUILD/cmake/CMakeCache.txt" 2>/dev/null || true)
cxx_desc="unknown"
if [[ -n "$cxx" ]]; then cxx_desc="$("$cxx" --version | head -n1) ($cxx_flags, CMake RelWithDebInfo)"; fi
perf_desc="not used"
if [[ $USE_PERF == 1 ]]; then perf_desc="$(perf version)"; fi
python3 - "$BUILD/machine.json" <<PY
import json, sys
json.dump({"date": "$(date -u '+%Y-%m-%d %H:%M UTC')", "goro": """$commit_desc""", "nproc": "$(nproc)",
           "cpu": """$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1)""",
           "kernel": "$(uname -srm)", "go": "$(go version)", "cxx": """$cxx_desc""", "perf": """$perf_desc""",
           "reps": "$REPS for a and b; $CD_REPS pairs of ${CD_SECONDS} s runs for c and d",
           "waited": $waited_total, "wall_s": $((SECONDS - start_s)), "command": """$command_line"""},
          open(sys.argv[1], "w"))
PY

python3 - "$RAW" "$BUILD/machine.json" "$RESULTS" "$QUIET" <<'PY'
import json, statistics, sys
raw, machine, out, quiet_max = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
m = json.load(open(machine))
recs = [json.loads(l) for l in open(raw) if l.strip()]
runs = [r for r in recs if r["kind"] == "run"]
loads = [r for r in recs if r["kind"] == "load"]
L = []
P = L.append

def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None

def get(impl, scen, variant):
    return sorted((r for r in runs if r["impl"] == impl and r["scenario"] == scen and r["variant"] == variant),
                  key=lambda r: r["rep"])

def ok(rs):
    return [r for r in rs if not r["error"]]

def fmt(x, d=3):
    if x is None:
        return "–"
    if abs(x) >= 1e6:
        return "%.3g" % x
    return ("%%.%df" % d) % x

def pct(x, d=1):
    return "–" if x is None else ("%%.%df%%%%" % d) % (100 * x)

def samples(rs, f, d=3):
    return ", ".join(fmt(f(r), d) if not r["error"] else "FAILED" for r in rs)

def cpu_frac(r):  # CPUs the goroutine-running threads got over the window (1.0 = one whole CPU)
    s = r.get("sample")
    return s["workers"]["run"] / s["dt"] if s and s["dt"] > 0 else None

def mon_frac(r):
    s = r.get("sample")
    return s["monitor"]["run"] / s["dt"] if s and s["dt"] > 0 else None

def others(r):
    s = r.get("sample")
    return s["others_cpus"] if s else None

def thr_cpu(r):  # iterations per CPU-second of the goroutine-running threads
    f = cpu_frac(r)
    return r["result"]["throughput"] / f if f else None

def verdict(x, cond):
    return "no data" if x is None else ("met" if cond(x) else "**missed**")

def ratio(a, b):
    return a / b if a is not None and b else None

def pairs_of(on, off):
    return [(a, b) for a in on for b in off if a["rep"] == b["rep"] and not a["error"] and not b["error"]
            and a.get("sample") and b.get("sample")]

def quiet(p):
    return all((others(r) or 0) <= quiet_max for r in p)

def median_ci(xs):
    """A distribution-free interval for the median: order statistics x(k)..x(n-k+1)
    with the largest k whose coverage is at least 90%, else the whole range.
    Returns (low, high, coverage)."""
    xs = sorted(x for x in xs if x is not None)
    n = len(xs)
    if n == 0:
        return None, None, None
    from math import comb
    def coverage(k):
        return 1 - 2 * sum(comb(n, i) for i in range(k)) / 2 ** n
    k = 1
    while k + 1 <= (n + 1) // 2 and coverage(k + 1) >= 0.90:
        k += 1
    return xs[k - 1], xs[n - k], coverage(k)

def ci_verdict(lo, hi, limit):
    """met when the whole interval is within the limit, missed when all of it is beyond."""
    if lo is None:
        return "no data"
    if hi <= limit:
        return "met"
    if lo > limit:
        return "**missed**"
    return "not resolved"

def k_window(a):
    """goro's async preemptions in the measured window: counted there by goro-fair
    (window_async_preemptions), or, from an older goro-fair, the whole run's scaled to the window."""
    r = a["result"]
    if r.get("window_async_preemptions") is not None:
        return r["window_async_preemptions"]
    k = r.get("async_preemptions")
    return None if k is None else k * a["seconds"] / (a["warmup"] + a["seconds"])


def fmt_ci(lo, hi, cov, scale=1, d=2, unit=""):
    if lo is None:
        return "–"
    return ("%%.%df … %%.%df%%s (%%.0f%%%%)" % (d, d)) % (lo * scale, hi * scale, unit, 100 * cov)

P("## Machine and run\n")
for k, label in [("date", "date"), ("goro", "goro"), ("nproc", "CPUs (nproc)"), ("cpu", "CPU"),
                 ("kernel", "kernel"), ("go", "Go"), ("cxx", "C++ compiler"), ("perf", "perf"),
                 ("reps", "repetitions"), ("wall_s", "wall time of the script (s)"),
                 ("waited", "of which waiting for other work to fall (s)"), ("command", "command")]:
    v = m[k]
    P("- **%s**: %s" % (label, "`%s`" % v if k == "command" else v))
P("- **other load before each scenario**: the load average (1, 5, 15 min; runnable/total tasks), which "
  "also counts this script's own spinners from the scenario before, and the % of the CPUs that other "
  "work kept busy in a 1 s sample taken while none of this script's programs ran:")
for l in loads:
    P("  - %s: load average %s; other work %d%% of the CPUs%s" % (
        "after the last run" if l["scenario"] == "end" else "scenario " + l["scenario"], l["loadavg"],
        l["busy_pct"], ", after waiting %d s for it to fall" % l["waited_s"] if l["waited_s"] else ""))
n_q = sum(1 for r in runs if others(r) is not None and others(r) <= quiet_max)
P("- **other load during the runs**: each run also measured how many CPUs other processes used during "
  "its window (/proc/stat minus its own threads); %d of %d runs had at most %.2f CPUs of other work "
  "(*quiet*)." % (n_q, len(runs), quiet_max))
P("")

# a
P("## a. 16 call-free spinners on 2 Ps, 3 s, beside the 1 ms sleeper\n")
ga, oa = get("goro", "a", "16spin-2P"), get("go", "a", "16spin-2P")
P("*quiet* columns: the median over the runs during which other work used at most %.2f CPUs. The "
  "verdict uses the median over all runs.\n" % quiet_max)
P("| figure | goro | Go | goro/Go | goro, quiet runs | Go, quiet runs | goro target | met? | goro samples | Go samples |")
P("| --- | ---: | ---: | ---: | ---: | ---: | --- | --- | --- | --- |")
for key, label, tgt, cond, d in [
        ("jain", "Jain's index", "≥ 0.999", lambda x: x >= 0.999, 5),
        ("min_max", "min/max share", "≥ 0.95", lambda x: x >= 0.95, 3),
        ("throughput", "throughput (iterations/s, wall clock)", "", None, 0),
        ("p50_ms", "sleeper lateness p50 (ms)", "", None, 2),
        ("p99_ms", "sleeper lateness p99 (ms)", "", None, 2)]:
    g = med(r["result"][key] for r in ok(ga))
    o = med(r["result"][key] for r in ok(oa))
    gq = med(r["result"][key] for r in ok(ga) if quiet([r]))
    oq = med(r["result"][key] for r in ok(oa) if quiet([r]))
    P("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
        label, fmt(g, d), fmt(o, d), fmt(ratio(g, o), 3), fmt(gq, d), fmt(oq, d), tgt, verdict(g, cond) if cond else "",
        samples(ga, lambda r: r["result"][key], d), samples(oa, lambda r: r["result"][key], d)))
for f, label in ((cpu_frac, "CPUs the goroutine threads got (of 2)"), (mon_frac, "CPU of the monitor thread (sysmon)"),
                 (others, "CPUs used by other work meanwhile")):
    P("| %s | %s | %s | | | | | | %s | %s |" % (label, fmt(med(f(r) for r in ok(ga)), 2), fmt(med(f(r) for r in ok(oa)), 2),
                                               samples(ga, f, 2), samples(oa, f, 2)))
P("")

# b
P("## b. 1 spinner + the 1 ms sleeper on 1 P, 5 s, 10 ms slice\n")
gb, ob = get("goro", "b", "1spin+sleeper-1P"), get("go", "b", "1spin+sleeper-1P")
P("| sleeper lateness | goro | Go | goro/Go | goro, quiet runs | Go, quiet runs | goro target | met? | goro samples | Go samples |")
P("| --- | ---: | ---: | ---: | ---: | ---: | --- | --- | --- | --- |")
for key, label, tgt, cond in [("p50_ms", "p50 (ms)", "", None), ("p99_ms", "p99 (ms)", "≤ 10.5 ms", lambda x: x <= 10.5),
                              ("max_ms", "max (ms)", "", None)]:
    g = med(r["result"][key] for r in ok(gb))
    o = med(r["result"][key] for r in ok(ob))
    gq = med(r["result"][key] for r in ok(gb) if quiet([r]))
    oq = med(r["result"][key] for r in ok(ob) if quiet([r]))
    P("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
        label, fmt(g, 2), fmt(o, 2), fmt(ratio(g, o), 2), fmt(gq, 2), fmt(oq, 2), tgt, verdict(g, cond) if cond else "",
        samples(gb, lambda r: r["result"][key], 2), samples(ob, lambda r: r["result"][key], 2)))
P("| CPUs used by other work meanwhile | %s | %s | | | | | | %s | %s |" % (
    fmt(med(others(r) for r in ok(gb)), 2), fmt(med(others(r) for r in ok(ob)), 2), samples(gb, others, 2), samples(ob, others, 2)))
P("")

# c
P("## c. Throughput cost of async preemption: 4 spinners on 1 P, no sleeper\n")
P("Each repetition ran the on and the off run back to back; *on/off* is the median of these paired ratios. "
  "Throughput is per CPU-second: each run's iterations divided by the CPU time its goroutine-running "
  "threads actually got in the window (schedstat), which takes out the time other work took the CPU away. "
  "*all* uses every pair, *quiet* only the pairs where other work used at most %.2f CPUs during both runs. "
  "*noise* is the spread (max − min) / median of the off runs' per-CPU throughput. The loss is 1 − on/off "
  "(quiet pairs when there are at least 2 of them, else all).\n" % quiet_max)
P("*loss interval* is a distribution-free interval for the median loss (order statistics of the paired "
  "losses; its coverage in brackets). A target counts as met only when the whole interval meets it, and "
  "missed only when none of it does; otherwise the run could not tell (*not resolved*).\n")
P("| impl | slice | preemptions/s | iter/CPU-s off | on/off, all | on/off, quiet (pairs) | on/off wall clock | loss | loss interval | noise | sysmon CPU on / off | target | met? | paired per-CPU ratios (q = quiet) |")
P("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | ---: | --- | --- | --- | --- |")
cost_rows = []
for impl, slices in (("goro", ["10ms", "1ms", "200us"]), ("go", ["10ms"])):
    for sl in slices:
        on, off = get(impl, "c", "4spin-1P-%s-on" % sl), get(impl, "c", "4spin-1P-%s-off" % sl)
        ps = pairs_of(on, off)
        qs = [p for p in ps if quiet(p)]
        rc = lambda pp: [thr_cpu(a) / thr_cpu(b) for a, b in pp if thr_cpu(a) and thr_cpu(b)]
        r_all, r_q = med(rc(ps)), med(rc(qs))
        r_use = r_q if len(qs) >= 2 else r_all
        r_wall = med(a["result"]["throughput"] / b["result"]["throughput"] for a, b in ps)
        offs = [thr_cpu(b) for b in ok(off) if thr_cpu(b)]
        noise = (max(offs) - min(offs)) / statistics.median(offs) if len(offs) > 1 else None
        rate = med(k_window(a) / a["seconds"] for a in ok(on) if k_window(a) is not None and a["seconds"])
        loss = 1 - r_use if r_use is not None else None
        lo, hi, cov = median_ci([1 - x for x in rc(qs if len(qs) >= 2 else ps)])
        tgt, v = "", ""
        if impl == "goro" and sl == "200us":
            tgt, v = "loss ≤ 2%", ci_verdict(lo, hi, 0.02)
        if impl == "goro" and sl == "10ms":
            # "within noise": the interval holds zero, i.e. no loss can be told from none.
            tgt = "loss within noise"
            v = "no data" if lo is None else ("met" if lo <= 0 <= hi else ("**missed**" if lo > 0 else "met (gain)"))
        P("| %s | %s | %s | %s | %s | %s (%d) | %s | %s | %s | %s | %s / %s | %s | %s | %s |" % (
            impl, sl + (" (fixed)" if impl == "go" else ""), fmt(rate, 0) if rate else "not counted",
            fmt(med(offs)), fmt(r_all, 4), fmt(r_q, 4), len(qs), fmt(r_wall, 3), pct(loss, 2),
            fmt_ci(lo, hi, cov, 100, 1, "%"), pct(noise),
            fmt(med(mon_frac(a) for a, b in ps), 3), fmt(med(mon_frac(b) for a, b in ps), 3), tgt, v,
            ", ".join("%.3f%s" % (thr_cpu(a) / thr_cpu(b), "q" if quiet((a, b)) else "") for a, b in ps)))
        costs = []
        for a, b in (qs if len(qs) >= 2 else ps):
            ta, tb = thr_cpu(a), thr_cpu(b)
            k_win = k_window(a)
            if not (ta and tb and k_win):
                continue
            cpu_s = cpu_frac(a) * a["seconds"]
            costs.append((1 - ta / tb) * cpu_s / k_win * 1e6)
        res = None
        if noise is not None and rate:
            res = noise * med(cpu_frac(a) for a, b in ps) / rate * 1e6
        cost_rows.append((impl, sl, med(costs), costs, res, len(qs) >= 2))
P("")

P("## d. CPU cost of one preemption (signal to resume)\n")
P("### From c: (1 − on/off) × CPU-seconds in the window ÷ preemptions in the window\n")
P("Preemptions in the window = goro-fair's `window_async_preemptions`. *resolution* = noise × CPU-seconds ÷ preemptions: a cost smaller than that cannot be "
  "told from zero with these runs.\n")
P("| impl | slice | cost per preemption (µs) | interval (µs) | pairs used | resolution (µs) | target | met? | per pair (µs) |")
P("| --- | --- | ---: | --- | --- | ---: | --- | --- | --- |")
for impl, sl, c, costs, res, used_quiet in cost_rows:
    if impl == "go":
        P("| go | 10ms (fixed) | not here: Go counts no preemptions (see the direct measurement) | | | | | | |")
        continue
    lo, hi, cov = median_ci(costs)
    tgt, v = ("≤ 5 µs", ci_verdict(lo, hi, 5)) if sl == "200us" else ("", "")
    P("| %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (impl, sl, fmt(c, 2), fmt_ci(lo, hi, cov), "quiet" if used_quiet else "all",
                                                          fmt(res, 2), tgt, v, ", ".join("%.2f" % x for x in costs)))
P("")

P("### Direct: 2 spinners on 1 P, on vs off, per-thread CPU accounting and perf\n")
P("Per on/off pair: in the window the goroutine-running thread got *C* CPU-seconds (schedstat) and did *I* "
  "iterations; the paired off run gives *R*, iterations per CPU-second with no preemption. Cost on the "
  "preempted thread = (C − I/R) ÷ preemptions in the window: all the time that thread spent not "
  "iterating — the kernel's signal delivery and sigreturn, the handler, the trampoline's register save and "
  "restore, the scheduler, the cache refill after the switch. sysmon's part is apart, since it runs on the "
  "other CPU: its extra CPU time with preemption on (on − off) ÷ preemptions. perf counts the SIGURGs "
  "delivered (signal:signal_deliver, whole run); for Go, which keeps no count, they are the preemptions. "
  "Medians over quiet pairs when there are at least 2, else all.\n")
P("| impl | slice | preemptions in window | SIGURG delivered (perf) | goro's count (whole run) | cost on the preempted thread (µs) | interval (µs) | sysmon's extra CPU per preemption (µs) | sysmon CPU on / off | target | met? | per pair (µs) |")
P("| --- | --- | ---: | ---: | ---: | ---: | --- | ---: | --- | --- | --- | --- |")
for impl, sl in (("goro", "200us"), ("go", "10ms")):
    on, off = get(impl, "d", "2spin-1P-%s-on" % sl), get(impl, "d", "2spin-1P-%s-off" % sl)
    ps = pairs_of(on, off)
    qs = [p for p in ps if quiet(p)]
    use = qs if len(qs) >= 2 else ps
    costs, mon, kwins, sigs, own = [], [], [], [], []
    for a, b in use:
        C = cpu_frac(a) * a["seconds"]
        I = a["result"]["throughput"] * a["seconds"]
        R = thr_cpu(b)
        perf_sig = (a.get("perf") or {}).get("signal:signal_deliver")
        if perf_sig is not None:
            sigs.append(perf_sig)
        k_win = k_window(a)
        if k_win is not None:
            own.append(a["result"].get("async_preemptions"))
        elif perf_sig is not None:
            k_win = perf_sig * a["seconds"] / (a["warmup"] + a["seconds"])
        if not k_win or not R:
            continue
        kwins.append(k_win)
        costs.append((C - I / R) / k_win * 1e6)
        mon.append((mon_frac(a) - mon_frac(b)) * a["seconds"] / k_win * 1e6)
    c = med(costs)
    lo, hi, cov = median_ci(costs)
    tgt, v = ("≤ 5 µs", ci_verdict(lo, hi, 5)) if impl == "goro" else ("", "")
    P("| %s | %s%s | %s | %s | %s | %s | %s | %s | %s / %s | %s | %s | %s |" % (
        impl, sl, " (fixed)" if impl == "go" else "", fmt(med(kwins), 0), fmt(med(sigs), 0) if sigs else "–",
        fmt(med(own), 0) if own else "–", fmt(c, 2), fmt_ci(lo, hi, cov), fmt(med(mon), 2),
        fmt(med(mon_frac(a) for a, b in use), 3), fmt(med(mon_frac(b) for a, b in use), 3), tgt, v,
        ", ".join("%.2f" % x for x in costs)))
P("")

P("### Floor: one bare signal, no preemption\n")
P("The same machine's cost of just delivering a signal to a spinning thread and returning from it: Go's "
  "`fair -signal_test` (GODEBUG=asyncpreemptoff=1, so its SIGURG handler returns at once) runs one spinner "
  "pinned to CPU 1 while a thread pinned to CPU 0 sends it a SIGURG every 20 µs (or only sleeps, for the "
  "paired baseline). Cost per signal = (1 − iterations per CPU-second with signals ÷ without) × the spinner "
  "thread's CPU-seconds ÷ signals in the window, all read by the program itself. Any signal-driven "
  "preemption pays at least this; goro's and Go's preemptions add the register save and restore and the "
  "switch to another goroutine.\n")
on, off = get("go", "d0", "signal-20us"), get("go", "d0", "no-signal")
ps = [(a, b) for a in on for b in off if a["rep"] == b["rep"] and not a["error"] and not b["error"]
      and a["result"].get("iter_per_cpu_s") and b["result"].get("iter_per_cpu_s")]
costs = [(1 - a["result"]["iter_per_cpu_s"] / b["result"]["iter_per_cpu_s"]) * a["result"]["spin_cpu_s"]
         / a["result"]["signals"] * 1e6 for a, b in ps if a["result"].get("signals")]
P("| signals/s | iter/CPU-s with signals | without | cost per signal (µs) | interval (µs) | per pair (µs) |")
P("| ---: | ---: | ---: | ---: | --- | --- |")
lo, hi, cov = median_ci(costs)
P("| %s | %s | %s | %s | %s | %s |" % (
    fmt(med(a["result"]["signals"] / a["result"]["window_s"] for a, b in ps), 0),
    fmt(med(a["result"]["iter_per_cpu_s"] for a, b in ps)), fmt(med(b["result"]["iter_per_cpu_s"] for a, b in ps)),
    fmt(med(costs), 2), fmt_ci(lo, hi, cov), ", ".join("%.2f" % x for x in costs)))
P("")

bad = [r for r in runs if r["error"]]
if bad:
    P("## Failed runs\n")
    for r in bad:
        P("- %s %s %s rep %d: `%s`: %s" % (r["impl"], r["scenario"], r["variant"], r["rep"], r["cmd"], r["error"]))
        for l in r.get("stderr_tail", [])[-8:]:
            P("    %s" % l)
    P("")
open(out, "w").write("\n".join(L) + "\n")
print("\n".join(L))
PY
echo "== done in $((SECONDS - start_s)) s: $RESULTS (raw: $RAW, log: $LOG)"
