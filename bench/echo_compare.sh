#!/usr/bin/env bash
# bench/echo_compare.sh: goro's echo server against the same server in Go,
# driven by the same load generator, side by side in one run; writes
# bench/ECHO.md.
#
#   bash bench/echo_compare.sh
#
# Needs: cmake, a C++20 compiler, Abseil (Debian: libabsl-dev), Go (>= 1.19,
# standard library only, nothing is downloaded), python3, timeout and, for the
# pinned layout, taskset (util-linux). About 3 minutes on a 2-core machine.
#
# What it runs: examples/echo_server (goro), bench/go/echo (Go) and
# bench/echo_floor (the floor: one thread, epoll, no runtime; FLOOR=0 leaves
# it out), each started fresh for every measurement on an ephemeral port of
# 127.0.0.1, and
# examples/echo_load --client=epoll against it (one message of SIZE bytes in
# flight per connection, every echoed byte checked). For each layout, each
# repetition and each connection count it measures goro then Go, or Go then
# goro (the order alternates between repetitions); the report gives medians.
#
# Layouts (the client uses CPU too, and there are only 2 CPUs):
#   pinned  server on CPU 0 with 1 processor (GOROMAXPROCS=1 / GOMAXPROCS=1),
#           client on CPU 1: neither steals the other's CPU.
#   shared  no pinning, server with 2 processors: the client competes with
#           the server for both CPUs, as on a real 2-core box running both.
#
# Settings (environment):
#   REPS=3              repetitions (the median is reported)
#   RUN_SECONDS=3       measured seconds per run (after WARMUP)
#   WARMUP=0.5          unmeasured seconds per run, after connecting
#   CONNS="100 10000"   connection counts
#   SIZE=64             bytes per message
#   LAYOUTS="pinned shared"
#   CLIENT=epoll        echo_load's client: epoll (plain threads) or goro
#   CLIENT_THREADS=1    threads of the epoll client
#   FLOOR=1             also measure bench/echo_floor (0: goro and Go only)
#   BUILD_DIR=<repo>/build-echo   where to build; raw results and logs stay there
#   NO_BUILD=1          reuse the programs already in BUILD_DIR
#   REPORT_ONLY=1       measure nothing: rewrite OUT from the raw results of the
#                       last run in BUILD_DIR
#   OUT=<repo>/bench/ECHO.md      the report
set -euo pipefail

command_line="bash bench/echo_compare.sh"
for v in NO_BUILD OUT BUILD_DIR FLOOR CLIENT_THREADS CLIENT LAYOUTS SIZE CONNS WARMUP RUN_SECONDS REPS; do
  if [[ -n "${!v+x}" ]]; then command_line="$v=\"${!v}\" $command_line"; fi
done

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${BUILD_DIR:-$ROOT/build-echo}"
REPS="${REPS:-3}"
RUN_SECONDS="${RUN_SECONDS:-3}"
WARMUP="${WARMUP:-0.5}"
CONNS="${CONNS:-100 10000}"
SIZE="${SIZE:-64}"
LAYOUTS="${LAYOUTS:-pinned shared}"
CLIENT="${CLIENT:-epoll}"
CLIENT_THREADS="${CLIENT_THREADS:-1}"
FLOOR="${FLOOR:-1}"
OUT="${OUT:-$ROOT/bench/ECHO.md}"

tools=(cmake go python3 timeout)
[[ " $LAYOUTS " == *" pinned "* ]] && tools+=(taskset)
for tool in "${tools[@]}"; do
  command -v "$tool" >/dev/null || { echo "echo_compare.sh: '$tool' not found in PATH" >&2; exit 1; }
done
if [[ " $LAYOUTS " == *" pinned "* ]] && (($(nproc) < 2)); then
  echo "echo_compare.sh: the pinned layout needs 2 CPUs; use LAYOUTS=shared" >&2
  exit 1
fi

LOG="$BUILD/echo_compare.log"
RAW="$BUILD/echo_results.tsv"
MACHINE="$BUILD/echo_machine.txt"
if [[ "${REPORT_ONLY:-0}" == 1 ]]; then
  [[ -s "$RAW" && -s "$MACHINE" ]] || { echo "echo_compare.sh: no results in $BUILD to report" >&2; exit 1; }
else
# ---- building and measuring (skipped with REPORT_ONLY=1) ----
mkdir -p "$BUILD"
: >"$LOG"
: >"$RAW"
rm -rf "$BUILD/runs"
start_s=$SECONDS

# The three busiest processes and the load average: the machine is shared.
busy() {
  local top3
  top3=$(ps -eo pcpu=,comm= --sort=-pcpu 2>/dev/null | head -3 | awk '{ printf "%s%s %s%%", s, $2, $1; s = ", " }')
  echo "load average $(cut -d' ' -f1-3 /proc/loadavg); busiest: ${top3:-unknown}"
}
busy_start=$(busy)
echo "== before starting: $busy_start"

if [[ "${NO_BUILD:-0}" != 1 ]]; then
  echo "== building echo_server and echo_load (Release) in $BUILD"
  cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DGORO_BUILD_TESTS=OFF >>"$LOG" 2>&1 ||
    { echo "echo_compare.sh: cmake configure failed; see $LOG" >&2; exit 1; }
  cmake --build "$BUILD" -j"$(nproc)" --target echo_server echo_load echo_floor >>"$LOG" 2>&1 ||
    { echo "echo_compare.sh: build failed; see $LOG" >&2; exit 1; }
  echo "== building bench/go/echo"
  (cd "$ROOT/bench/go" && GOPROXY=off go build -o "$BUILD/go_echo" ./echo) >>"$LOG" 2>&1 ||
    { echo "echo_compare.sh: go build failed; see $LOG" >&2; exit 1; }
fi
GORO_SERVER="$BUILD/examples/echo_server"
GO_SERVER="$BUILD/go_echo"
FLOOR_SERVER="$BUILD/bench/echo_floor"
LOAD="$BUILD/examples/echo_load"
servers=("$GORO_SERVER" "$GO_SERVER")
[[ $FLOOR == 1 ]] && servers+=("$FLOOR_SERVER")
for p in "${servers[@]}" "$LOAD"; do
  [[ -x "$p" ]] || { echo "echo_compare.sh: $p is missing (build it, or drop NO_BUILD=1)" >&2; exit 1; }
done

CLK_TCK=$(getconf CLK_TCK)
# The server lives at most this long, whatever happens to this script.
SERVER_SECONDS=$(python3 -c "print(int($WARMUP + $RUN_SECONDS + 60))")
CLIENT_TIMEOUT=$((SERVER_SECONDS - 10))
server_pid=""
cleanup() { [[ -n "$server_pid" ]] && kill "$server_pid" 2>/dev/null; true; }
trap cleanup EXIT

# cpu_ticks PID: user + system clock ticks used so far.
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat" 2>/dev/null || echo -1; }

# measure LAYOUT IMPL CONNS REP: one server process, one client run, one line in $RAW.
measure() {
  local layout=$1 impl=$2 conns=$3 rep=$4
  local server_cmd=() client_pin=() procs_env=()
  local procs=2
  [[ $layout == pinned ]] && procs=1
  if [[ $impl == goro ]]; then
    procs_env=(env "GOROMAXPROCS=$procs")
    server_cmd=("$GORO_SERVER" --port=0 --seconds="$SERVER_SECONDS")
  elif [[ $impl == floor ]]; then
    procs_env=(env)  # one thread whatever the layout
    server_cmd=("$FLOOR_SERVER" --port=0 --seconds="$SERVER_SECONDS")
  else
    procs_env=(env "GOMAXPROCS=$procs")
    server_cmd=("$GO_SERVER" -port=0 -seconds="$SERVER_SECONDS")
  fi
  if [[ $layout == pinned ]]; then
    server_cmd=(taskset -c 0 "${server_cmd[@]}")
    client_pin=(taskset -c 1)
  fi
  # Fresh files per run, created here: a file the child truncates itself may
  # still hold the previous server's port when it is first read.
  local run="$BUILD/runs/$layout-$impl-$conns-$rep"
  local sout="$run.server.out" serr="$run.server.err" cout="$run.client.out"
  mkdir -p "$BUILD/runs"
  : >"$sout"
  : >"$serr"
  "${procs_env[@]}" "${server_cmd[@]}" >"$sout" 2>"$serr" &
  server_pid=$!
  local port="" i
  for ((i = 0; i < 100; i++)); do
    port=$(sed -n 's/^listening on 127\.0\.0\.1:\([0-9]*\)$/\1/p' "$sout")
    [[ -n $port ]] && break
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.05
  done
  if [[ -z $port ]]; then
    echo "   $impl server did not start: $(head -c 300 "$serr")" | tee -a "$LOG"
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" 2>/dev/null || true
    server_pid=""
    printf '%s\t%s\t%s\t%s\tFAIL\t-\t-\t%s\n' "$layout" "$impl" "$conns" "$rep" \
      "server did not start" >>"$RAW"
    return
  fi
  local rc=0
  "${client_pin[@]}" timeout -k 5 "$CLIENT_TIMEOUT" "$LOAD" --server="$port" --client="$CLIENT" \
    --threads="$CLIENT_THREADS" --conns="$conns" --size="$SIZE" --seconds="$RUN_SECONDS" \
    --warmup="$WARMUP" --label="$impl" --server_pid="$server_pid" --json >"$cout" 2>&1 || rc=$?
  local ticks alive=1
  ticks=$(cpu_ticks "$server_pid")
  kill -0 "$server_pid" 2>/dev/null || alive=0
  kill "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  server_pid=""
  { echo "--- $layout $impl conns=$conns rep=$rep (port $port, client rc=$rc)"; cat "$cout";
    echo "server stdout/stderr:"; cat "$sout" "$serr"; } >>"$LOG"
  local json
  json=$(grep '^{' "$cout" | tail -1 || true)
  if ((rc != 0)) || [[ -z $json ]] || ((alive == 0)); then
    local why
    why=$(grep -m1 'FAIL' "$cout" || true)
    ((rc == 124)) && why="client timed out after ${CLIENT_TIMEOUT}s"
    ((alive == 0)) && why="server died: $(tail -c 300 "$serr" | tr '\n' ' ') ${why}"
    why=${why:-"client exit status $rc"}
    echo "   $layout $impl conns=$conns rep=$rep: FAILED: $why" | tee -a "$LOG"
    printf '%s\t%s\t%s\t%s\tFAIL\t-\t-\t%s\n' "$layout" "$impl" "$conns" "$rep" "$why" >>"$RAW"
    return
  fi
  printf '%s\t%s\t%s\t%s\tok\t%s\t%s\t%s\n' "$layout" "$impl" "$conns" "$rep" "$ticks" "$CLK_TCK" \
    "$json" >>"$RAW"
  python3 - "$json" "$impl" "$layout" "$conns" "$rep" <<'EOF'
import json, sys
j = json.loads(sys.argv[1])
print(f"   {sys.argv[3]:6} {sys.argv[2]:4} conns={sys.argv[4]:>5} rep={sys.argv[5]}: "
      f"{j['rps']:9.0f} req/s  p50 {j['p50_us']:9.1f} us  p99 {j['p99_us']:9.1f} us  "
      f"CPU: server {100 * j['server_cpu']:3.0f}% client {100 * j['client_cpu']:3.0f}%")
EOF
}

echo "== measuring: layouts [$LAYOUTS], connections [$CONNS], $REPS repetitions, ${RUN_SECONDS}s each"
for ((rep = 1; rep <= REPS; rep++)); do
  for layout in $LAYOUTS; do
    for conns in $CONNS; do
      if ((rep % 2 == 1)); then order=(goro go); else order=(go goro); fi
      if [[ $FLOOR == 1 ]]; then order+=(floor); fi
      for impl in "${order[@]}"; do measure "$layout" "$impl" "$conns" "$rep"; done
    done
  done
done
busy_end=$(busy)
elapsed=$((SECONDS - start_s))
echo "== after: $busy_end ($elapsed s in all)"

{
  echo "cpu=$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1), $(nproc) CPUs"
  echo "kernel=$(uname -sr)"
  echo "compiler=$(c++ --version 2>/dev/null | head -1)"
  echo "go=$(go version)"
  echo "date=$(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "commit=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)$(git -C "$ROOT" diff --quiet HEAD 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "limits=ulimit -Hn $(ulimit -Hn), somaxconn $(cat /proc/sys/net/core/somaxconn), tcp_tw_reuse $(cat /proc/sys/net/ipv4/tcp_tw_reuse)"
  echo "busy_start=$busy_start"
  echo "busy_end=$busy_end"
  echo "elapsed=$elapsed"
  echo "command=$command_line"
  echo "settings=client $CLIENT ($CLIENT_THREADS thread(s) for epoll), $SIZE-byte messages, ${WARMUP}s warm-up + ${RUN_SECONDS}s measured per run, median of $REPS"
} >"$MACHINE"
# ---- end of building and measuring ----
fi

python3 - "$RAW" "$MACHINE" "$OUT" <<'EOF'
import json, statistics, sys
raw, machine_path, out = sys.argv[1:4]
m = dict(line.rstrip("\n").split("=", 1) for line in open(machine_path) if "=" in line)
runs, fails = {}, []
for line in open(raw):
    layout, impl, conns, rep, status, ticks, tck, rest = line.rstrip("\n").split("\t", 7)
    key = (layout, int(conns), impl)
    if status != "ok":
        fails.append(f"{layout}, {conns} connections, {impl}, repetition {rep}: {rest}")
        continue
    j = json.loads(rest)
    j["rep"] = int(rep)
    runs.setdefault(key, []).append(j)

def med(key, field):
    v = [r[field] for r in runs.get(key, []) if r.get(field, -1) >= 0]
    return statistics.median(v) if v else None

def f0(x): return "–" if x is None else f"{x:,.0f}"
def us(x): return "–" if x is None else (f"{x/1000:.1f} ms" if x >= 10000 else f"{x:.0f} µs")
def pct(x): return "–" if x is None else f"{100*x:.0f}%"
def cpu_us(x): return "–" if x is None else f"{x:.2f} µs"

layouts = list(dict.fromkeys(k[0] for k in runs)) or ["pinned", "shared"]
layout_text = {
    "pinned": "server pinned to CPU 0 with 1 processor (GOROMAXPROCS=1 / GOMAXPROCS=1), client pinned to CPU 1",
    "shared": "nothing pinned; server with 2 processors; the client competes with it for both CPUs",
}
L, verdicts, spreads = [], [], []
sections = []
for layout in layouts:
    S = [f"## {layout}: {layout_text.get(layout, layout)}\n"]
    S.append("| connections | goro req/s | Go req/s | floor req/s | goro/Go (median) | goro/Go per repetition | floor/Go | goro p50 / p99 | Go p50 / p99 | server CPU goro / Go | server CPU per request goro / Go / floor | client CPU goro / Go / floor | target ≥ 1.2× |")
    S.append("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    for conns in sorted({k[1] for k in runs if k[0] == layout}):
        g, o, fl = (layout, conns, "goro"), (layout, conns, "go"), (layout, conns, "floor")
        gr, orr, fr = med(g, "rps"), med(o, "rps"), med(fl, "rps")
        ratio = gr / orr if gr and orr else None
        floor_ratio = fr / orr if fr and orr else None
        verdict = "–" if ratio is None else ("**met**" if ratio >= 1.2 else "**missed**")
        gc, oc = med(g, "server_us_per_req"), med(o, "server_us_per_req")
        verdicts.append((layout, conns, ratio, oc / gc if gc and oc else None, floor_ratio))
        by_rep = {impl: {r["rep"]: r["rps"] for r in runs.get((layout, conns, impl), [])} for impl in ("goro", "go", "floor")}
        paired = [by_rep["goro"][k] / by_rep["go"][k] for k in sorted(by_rep["goro"]) if k in by_rep["go"]]
        for impl in ("goro", "go"):
            v = list(by_rep[impl].values())
            if len(v) > 1: spreads.append(max(v) / min(v) - 1)
        S.append(f"| {conns:,} | {f0(gr)} | {f0(orr)} | {f0(fr)} | {'–' if ratio is None else f'{ratio:.3f}×'} | "
                 f"{', '.join(f'{x:.2f}' for x in paired) or '–'} | "
                 f"{'–' if floor_ratio is None else f'{floor_ratio:.3f}×'} | "
                 f"{us(med(g, 'p50_us'))} / {us(med(g, 'p99_us'))} | {us(med(o, 'p50_us'))} / {us(med(o, 'p99_us'))} | "
                 f"{pct(med(g, 'server_cpu'))} / {pct(med(o, 'server_cpu'))} | "
                 f"{cpu_us(med(g, 'server_us_per_req'))} / {cpu_us(med(o, 'server_us_per_req'))} / {cpu_us(med(fl, 'server_us_per_req'))} | "
                 f"{pct(med(g, 'client_cpu'))} / {pct(med(o, 'client_cpu'))} / {pct(med(fl, 'client_cpu'))} | {verdict} |")
    S.append("")
    S.append("Requests/s of every repetition (repetition 1, 2, ...; goro ran first in odd repetitions):\n")
    for conns in sorted({k[1] for k in runs if k[0] == layout}):
        for impl in ("goro", "go", "floor"):
            rs = sorted(runs.get((layout, conns, impl), []), key=lambda r: r["rep"])
            S.append(f"- {conns:,} connections, {impl}: " + ", ".join(f"{r['rps']:,.0f}" for r in rs))
    S.append("")
    sections.append(S)

L.append("# Echo server: goro vs Go\n")
L.append("Generated by `bench/echo_compare.sh`; do not edit by hand, run it again.\n")
L.append(f"- machine: {m['cpu']}; {m['kernel']}; {m['compiler']}; {m['go']}")
L.append(f"- date: {m['date']}, goro commit {m['commit']}")
L.append(f"- command: `{m['command']}` ({m['elapsed']} s)")
L.append(f"- settings: {m['settings']}; {m['limits']}")
L.append(f"- other load on the machine: before: {m['busy_start']}; after: {m['busy_end']}")
L.append("- servers: `examples/echo_server` (goro: a goroutine per connection in "
         "`goro::io::Read`/`Write`) and `bench/go/echo` (Go `net`: a goroutine per connection, "
         "same 4 KiB read/write loop, TCP_NODELAY on both), each started fresh on an ephemeral "
         "port of 127.0.0.1 for every run; the order alternates between repetitions; the floor "
         "server, when measured, runs after both")
L.append("- client: `examples/echo_load` (the same binary and flags for both servers), one message "
         "in flight per connection, every echoed byte checked; `--client=epoll` is plain threads "
         "with epoll, the cheapest client per message, so that the server is what is measured\n")
L.append("**Target (issue 4): goro ≥ 1.2× Go's requests/s at 100 and at 10,000 connections.** "
         "Median of each side's repetitions:\n")
for layout, conns, ratio, eff, floor_ratio in verdicts:
    L.append(f"- {layout}, {conns:,} connections: goro/Go requests/s = " +
             ("no figure" if ratio is None else f"{ratio:.3f}× — **{'met' if ratio >= 1.2 else 'missed'}**") +
             ("" if eff is None else f" (server CPU per request, Go/goro: {eff:.2f}×)") +
             ("" if floor_ratio is None else f"; the floor server: {floor_ratio:.3f}× Go's"))
L.append("")
if any(v[4] is not None for v in verdicts):
    L.append("The floor (`bench/echo_floor`) is one thread with one epoll instance and one shared "
             "buffer: no runtime, no per-connection stack or object. It makes the same system calls "
             "per round trip as goro's server, so what it spends is the kernel's work. In the pinned "
             "layout, where each server has one CPU to itself, no server with a goroutine, thread or "
             "object per connection can go faster on this machine (unless the client, at close to 100% "
             "of its CPU, is what limits it); where the floor itself is near or below 1.2× Go's, the "
             "target asks for more than the kernel leaves. In the shared layout it is no such bound: "
             "it runs one thread where goro and Go run two Ps, which leaves the client more CPU.\n")
L.append("The figure in brackets is not the target: it compares how much CPU each server spent per "
         "round trip, which a busy neighbour moves much less than requests/s; it is roughly the ratio "
         "requests/s would approach if each server had its CPUs to itself and were the bottleneck.\n")
for S in sections: L.extend(S)
if fails:
    L.append("## Failed runs\n")
    L.extend(f"- {f}" for f in fails)
    L.append("")
L.append("## Reading the figures\n")
L.append("- requests/s counts round trips completed in the measured window; p50/p99 are round-trip "
         "latencies (write of the message to the last echoed byte) of those round trips. With one "
         "message in flight per connection, requests/s ≈ connections / mean latency, so at 10,000 "
         "connections the latency is mostly queueing.")
L.append("- server CPU: the server process's user+system CPU time in the measured window "
         "(read from /proc by the client), as a share of one CPU; per request: that time divided "
         "by the round trips of the window. Lower per request is better, and it does not depend "
         "on how fast the client is. Resolution: one clock tick (10 ms) in the window. "
         "Loopback TCP work done in softirq context may be charged to either process.")
L.append("- client CPU: the load generator's CPU time in the measured window, as a share of one CPU. "
         "In the pinned layout the client shares CPU 1 with nothing of this benchmark, so well "
         "below 100% it is not the bottleneck; in the shared layout every cycle it uses is taken "
         "from the server. Both servers get the same client, so its cost is the same handicap "
         "for both.")
L.append("- the machine is shared and noisy (see 'other load' above): the fastest and slowest "
         f"repetition of the same server differ by up to {100*max(spreads or [0]):.0f}% in this report. "
         "The per-repetition ratios pair runs made back to back, so they are the least affected by "
         "a neighbour's load; compare the two servers within one report, not across reports.")
L.append("")
open(out, "w").write("\n".join(L))
print("\n".join(f"{l:6} {c:>5} connections: goro/Go = " + ("–" if r is None else f"{r:.3f}x ({'met' if r >= 1.2 else 'missed'})") + ("" if e is None else f"; CPU per request Go/goro = {e:.2f}x") + ("" if f is None else f"; floor/Go = {f:.3f}x") for l, c, r, e, f in verdicts))
print(f"wrote {out}")
EOF
