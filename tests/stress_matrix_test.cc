// stress/matrix.sh, the fairness stress matrix, run against a stand-in
// goro-fair (GORO_FAIR): a shell script that reports, as goro-fair's --json
// line, what a scheduler doing what it was asked would, unless the test tells
// it to misbehave in one configuration.
#include <stdlib.h>
#include <sys/wait.h>

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

namespace {

// The stand-in goro-fair. It reads the flags the matrix passes and prints a
// fair run's --json line: Jain 0.999, one preemption per slice on every P
// that has a goroutine, the CPU time of those Ps. In the configuration
// "WORKLOAD procs=P slice=S" named by $STANDIN_HANG it never ends, and on
// SIGQUIT prints a goroutine dump as goro does and exits 2.
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
busy=$((procs < n ? procs : n))
awk -v s="$seconds" -v us="$us" -v busy="$busy" -v async="$async" -v w="$workload" -v p="$procs" -v n="$n" 'BEGIN {
  pre = async == "true" ? int(s * 1e6 / us * busy) : 0
  printf "{\"workload\":\"%s\",\"procs\":%d,\"goroutines\":%d,\"time_slice_us\":%d,\"async\":%s,", w, p, n, us, async
  printf "\"jain\":0.999,\"min_max\":0.95,\"throughput\":1e9,\"p50_ms\":0.5,\"p99_ms\":1.0,\"max_ms\":2.0,\"wakeups\":100,"
  printf "\"async_preemptions\":%d,\"cooperative_preemptions\":0,\"signals\":%d,", pre + 5, pre + 5
  printf "\"window_async_preemptions\":%d,\"window_cooperative_preemptions\":0,\"window_signals\":%d}\n", pre, pre
}'
)sh";

struct Output {
  int exit_code = -1;
  std::string text;  // stdout and stderr
};

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
// words) before it, killed after 120 s.
Output RunMatrix(const StandIn& s, const std::string& env) {
  Output o;
  std::string cmd =
      absl::StrFormat("GORO_FAIR='%s' TMPDIR='%s' %s timeout 120 bash '%s/stress/matrix.sh' --seconds 0.1 2>&1", s.path,
                      s.dir, env, GORO_SOURCE_DIR);
  FILE* f = popen(cmd.c_str(), "r");
  if (f == nullptr) return o;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) o.text.append(buf, n);
  int status = pclose(f);
  o.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return o;
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
