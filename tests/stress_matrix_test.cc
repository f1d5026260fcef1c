// stress/matrix.sh, the fairness stress matrix, run against a stand-in
// goro-fair (GORO_FAIR): a shell script that reports, as goro-fair's --json
// line, what a scheduler doing what it was asked would, unless the test tells
// it to misbehave in one configuration.
#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "test_util.h"

namespace {

// The stand-in goro-fair. It reads the flags the matrix passes and prints a
// fair run's --json line: Jain 0.999, a whole CPU for each P that has a
// goroutine, 1e9 iterations per CPU-second, one preemption per slice on each
// of those Ps when there are more goroutines than Ps. The environment makes
// it misbehave:
//   STANDIN_HANG="WORKLOAD procs=P slice=S": that run never ends, and on
//     SIGQUIT prints a goroutine dump as goro does and exits 2;
//   STANDIN_SLICE_US=N: runs with N us slices whatever it is asked (as
//     GORODEBUG=timeslice makes goro-fair do), and says so;
//   STANDIN_PREEMPT_EVERY_US=N: reports the slice asked for, but preempts
//     only every max(slice, N) us (a sysmon that ignores short slices);
//   STANDIN_OFF_CPU=F: a run without async preemption gets only F of a CPU
//     (other work on the machine took the rest).
constexpr char kStandIn[] = R"sh(#!/usr/bin/env bash
procs=2 n=16 slice=10ms workload=spin async=true seconds=3
for a in "$@"; do
  case $a in
    --procs=*) procs=${a#*=} ;;
    --goroutines=*) n=${a#*=} ;;
    --time_slice=*) slice=${a#*=} ;;
    --workload=*) workload=${a#*=} ;;
    --async_preemption=*) async=${a#*=} ;;
    --seconds=*) seconds=${a#*=} ;;
  esac
done
if [[ "$workload procs=$procs slice=$slice" == "${STANDIN_HANG-}" ]]; then
  sleep 1000 &
  trap 'kill $! 2>/dev/null; printf "SIGQUIT: quit\n\ngoroutine 7 [chan receive]:\n\tstand_in_wait\n" >&2; exit 2' QUIT
  wait
  exit 3
fi
case $slice in *ms) us=$((${slice%ms} * 1000)) ;; *us) us=${slice%us} ;; esac
us=${STANDIN_SLICE_US:-$us}
every=$((us > ${STANDIN_PREEMPT_EVERY_US:-0} ? us : STANDIN_PREEMPT_EVERY_US))
busy=$((procs < n ? procs : n))
cpu_share=1
[[ $async == true ]] || cpu_share=${STANDIN_OFF_CPU:-1}
awk -v s="$seconds" -v us="$us" -v every="$every" -v busy="$busy" -v async="$async" -v w="$workload" \
    -v p="$procs" -v n="$n" -v share="$cpu_share" 'BEGIN {
  cpu = s * busy * share
  pre = (async == "true" && n > p) ? int(s * 1e6 / every * busy) : 0
  printf "{\"workload\":\"%s\",\"procs\":%d,\"goroutines\":%d,\"time_slice_us\":%d,\"async\":%s,", w, p, n, us, async
  printf "\"jain\":0.999,\"min_max\":0.95,\"throughput\":%g,\"p50_ms\":0.5,\"p99_ms\":1.0,\"max_ms\":2.0,", 1e9 * cpu / s
  printf "\"wakeups\":100,\"async_preemptions\":%d,\"cooperative_preemptions\":0,\"signals\":%d,", pre + 5, pre + 5
  printf "\"window_async_preemptions\":%d,\"window_cooperative_preemptions\":0,\"window_signals\":%d,", pre, pre
  printf "\"window_s\":%g,\"window_cpu_s\":%g}\n", s, cpu
}'
)sh";

using Output = goro_test::ShellRun;  // stdout and stderr

// A temporary directory holding the stand-in, removed when the test ends.
struct StandIn {
  std::string dir, path;
  StandIn() {
    char d[] = "/tmp/stress-matrix-test-XXXXXX";
    if (mkdtemp(d) == nullptr) return;
    dir = d;
    path = dir + "/goro-fair";
    std::ofstream(path) << kStandIn;
    std::filesystem::permissions(path, std::filesystem::perms::owner_all);
  }
  ~StandIn() {
    if (!dir.empty()) std::filesystem::remove_all(dir);
  }
};

// Runs the matrix (no soak) with 0.1 s runs on the stand-in, `env` (NAME=value
// words) before it, killed after 240 s.
Output RunMatrix(const StandIn& s, const std::string& env) {
  return goro_test::RunShell(
      absl::StrFormat("GORO_FAIR='%s' TMPDIR='%s' %s timeout 240 bash '%s/stress/matrix.sh' --seconds 0.1 2>&1", s.path,
                      s.dir, env, GORO_SOURCE_DIR));
}

// The lines of `text` that begin with `prefix`.
std::vector<std::string> LinesStartingWith(const std::string& text, const std::string& prefix) {
  std::vector<std::string> lines;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (absl::StartsWith(line, prefix)) lines.emplace_back(line);
  }
  return lines;
}

TEST(StressMatrixTest, AFairSchedulerPassesEveryRow) {
  StandIn s;
  ASSERT_FALSE(s.dir.empty());
  Output o = RunMatrix(s, "");
  EXPECT_EQ(o.exit_code, 0) << o.text;
  EXPECT_EQ(LinesStartingWith(o.text, "ok ").size(), 30u) << o.text;  // 24 rows, 6 throughput runs
  EXPECT_TRUE(LinesStartingWith(o.text, "FAIL").empty()) << o.text;
  EXPECT_TRUE(absl::StrContains(o.text, "\nall runs passed\n")) << o.text;
  EXPECT_TRUE(absl::StrContains(o.text, "\nok   spin  procs=2 slice=200us ")) << o.text;
  EXPECT_TRUE(absl::StrContains(o.text, " preempted 100% of slices ")) << o.text;
}

// GORODEBUG=timeslice=10ms overrides --time_slice, and every row labelled
// 1ms or 200us measured 10 ms slices and passed. A run whose time slice (or
// async preemption) in effect is not the one asked for now fails.
TEST(StressMatrixTest, ARunWithAnotherSliceThanAskedFails) {
  StandIn s;
  ASSERT_FALSE(s.dir.empty());
  Output o = RunMatrix(s, "STANDIN_SLICE_US=10000");
  EXPECT_EQ(o.exit_code, 1) << o.text;
  // 16 rows at 1ms and 200us, and the 4 throughput runs there.
  EXPECT_EQ(LinesStartingWith(o.text, "FAIL").size(), 20u) << o.text;
  EXPECT_EQ(LinesStartingWith(o.text, "ok ").size(), 10u) << o.text;
  EXPECT_TRUE(absl::StrContains(o.text, "\nFAIL fib   procs=1 slice=200us ")) << o.text;
  EXPECT_TRUE(absl::StrContains(
      o.text, "\n       ran with time_slice_us=10000 async=true, not the 200us, async=true asked for (GORODEBUG?)\n"))
      << o.text;
  EXPECT_TRUE(absl::StrContains(o.text, "\n20 run(s) failed\n")) << o.text;
}

// A sysmon that preempted every 10 ms whatever the slice passed every row:
// the shares stay even with longer turns. The spin and asm rows now count the
// window's preemptions against the slices its CPU time holds.
TEST(StressMatrixTest, SpinnersPreemptedFarLessOftenThanTheirSlicesEndFail) {
  StandIn s;
  ASSERT_FALSE(s.dir.empty());
  Output o = RunMatrix(s, "STANDIN_PREEMPT_EVERY_US=10000");
  EXPECT_EQ(o.exit_code, 1) << o.text;
  // spin and asm at 1ms and 200us on 1 and 2 Ps, and the two throughput
  // runs with preemption there; mixed and fib are not checked.
  std::vector<std::string> fails = LinesStartingWith(o.text, "FAIL");
  EXPECT_EQ(fails.size(), 10u) << o.text;
  for (const std::string& f : fails) {
    EXPECT_TRUE(absl::StartsWith(f, "FAIL spin ") || absl::StartsWith(f, "FAIL asm ")) << o.text;
    EXPECT_FALSE(absl::StrContains(f, "slice=10ms")) << o.text;
  }
  // 2 Ps for 0.1 s at 200 us: 1000 slices, 20 preemptions.
  EXPECT_TRUE(absl::StrContains(o.text, "\nFAIL spin  procs=2 slice=200us ")) << o.text;
  EXPECT_TRUE(absl::StrContains(o.text, " preempted   2% of slices ")) << o.text;
  EXPECT_TRUE(absl::StrContains(
      o.text, "\n       20 preemptions in the window, under a quarter of the 1000 slices its 0.20 CPU-seconds hold\n"))
      << o.text;
}

// The cost of preemption was the ratio of wall-clock throughputs, which on a
// shared machine mostly compares how much CPU other work left each run. It
// is now per CPU-second: runs without preemption that got half a CPU do as
// much per CPU-second as those with it.
TEST(StressMatrixTest, TheCostOfPreemptionIsPerCpuSecond) {
  StandIn s;
  ASSERT_FALSE(s.dir.empty());
  Output o = RunMatrix(s, "STANDIN_OFF_CPU=0.5");
  EXPECT_EQ(o.exit_code, 0) << o.text;
  for (const char* slice : {"10ms", "1ms", "200us"}) {
    EXPECT_TRUE(absl::StrContains(o.text, absl::StrFormat("\n     slice=%s: iterations per CPU-second with "
                                                          "preemption / without = 1.0000 (1e+09 / 1e+09)\n",
                                                          slice)))
        << o.text;
  }
}

// A run that never ended (a lost wake-up) hung the matrix, and a soak, for
// ever, with no line naming it. Each run now has a limit, its --seconds plus
// GORO_MATRIX_SLACK; past it the run gets SIGQUIT, whose goroutine dump is
// shown under a FAIL line naming the configuration, and the matrix goes on.
TEST(StressMatrixTest, AHungRunFailsWithItsConfigurationAndDump) {
  StandIn s;
  ASSERT_FALSE(s.dir.empty());
  const absl::Time start = absl::Now();
  Output o = RunMatrix(s, "STANDIN_HANG='fib procs=2 slice=1ms' GORO_MATRIX_SLACK=2");
  EXPECT_LT(absl::Now() - start, absl::Seconds(100)) << o.text;
  EXPECT_EQ(o.exit_code, 1) << o.text;
  std::vector<std::string> fails = LinesStartingWith(o.text, "FAIL");
  ASSERT_EQ(fails.size(), 1u) << o.text;
  EXPECT_TRUE(absl::StartsWith(fails[0], "FAIL fib   procs=2 slice=1ms: hung: still running 2.1s after it started "
                                         "(--seconds=0.1), so it was sent SIGQUIT"))
      << o.text;
  EXPECT_TRUE(absl::StrContains(o.text, "\n    goroutine 7 [chan receive]:\n")) << o.text;
  EXPECT_EQ(LinesStartingWith(o.text, "ok ").size(), 29u) << o.text;  // the rest still ran
  EXPECT_TRUE(absl::StrContains(o.text, "\n1 run(s) failed\n")) << o.text;
}

}  // namespace
