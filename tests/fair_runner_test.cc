// goro-fair, the fairness runner, as a user runs it: its --turn_stats report
// is consistent with what the scheduler can hand out, its report names the
// settings the runtime ran with, and bad flags get one line naming them.
#include <stdlib.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "test_util.h"

namespace {

using Output = goro_test::ShellRun;  // stdout and stderr

// Runs goro-fair with `args` and, before the command, `env` (NAME=value
// words), killed after 60 s (coreutils' timeout).
Output RunFair(const std::string& args, const std::string& env = "") {
  return goro_test::RunShell(absl::StrFormat("%s timeout 60 '%s' %s 2>&1", env, GORO_FAIR_PATH, args));
}

// The number after `key` in `text` (a JSON field), or -1.
long long JsonInt(const std::string& text, const std::string& key) {
  size_t at = text.find("\"" + key + "\":");
  long long v = -1;
  if (at == std::string::npos || sscanf(text.c_str() + at + key.size() + 3, "%lld", &v) != 1) return -1;
  return v;
}

// The number after `key` in `text` (a JSON field), or -1.
double JsonDouble(const std::string& text, const std::string& key) {
  size_t at = text.find("\"" + key + "\":");
  double v = -1;
  if (at == std::string::npos || sscanf(text.c_str() + at + key.size() + 3, "%lf", &v) != 1) return -1;
  return v;
}

// Four spinners on 2 Ps for a second, 10 ms slices: each gets its turns (about
// 50) and a fair share of the Ps' time, and the turns account for nearly all of
// that time but never more (at most one goroutine holds a P at a time; a turn
// that took in other goroutines' turns, or a goroutine running without a P,
// would push it past 100%). The lower bounds leave room for a loaded machine:
// beside a full ctest -j2 the turns accounted for 73-79% (a thread the OS
// deschedules between turns holds its P with no goroutine running), Jain
// stayed above 0.997; one goroutine left out would give Jain 0.75.
TEST(FairRunnerTest, TurnStatsAccountForThePsTime) {
  SKIP_WITHOUT_ASYNC_PREEMPTION();  // the spinners make no call: only the signal moves them
  Output o = RunFair("--turn_stats --sleeper=false --seconds=1 --goroutines=4 --procs=2 --time_slice=10ms");
  ASSERT_EQ(o.exit_code, 0) << o.text;
  int fewest = -1, most = -1;  // turns per goroutine
  double accounted = -1, jain = -1, ratio = -1;
  size_t at = o.text.find("turns per goroutine");
  ASSERT_NE(at, std::string::npos) << o.text;
  ASSERT_EQ(sscanf(o.text.c_str() + at, "turns per goroutine %d to %d, accounting for %lf%%", &fewest, &most,
                   &accounted),
            3)
      << o.text;
  at = o.text.find("time holding a P");
  ASSERT_NE(at, std::string::npos) << o.text;
  ASSERT_EQ(sscanf(o.text.c_str() + at, "time holding a P Jain %lf, min/max %lf", &jain, &ratio), 2) << o.text;
  EXPECT_GE(fewest, 10) << o.text;
  EXPECT_GE(accounted, 40.0) << o.text;
  EXPECT_LE(accounted, 100.5) << o.text;
  EXPECT_GE(jain, 0.95) << o.text;
}

// One spinner on four Ps holds at most one P at a time: its turns were put
// against all four Ps' time, which capped the figure at 25% and read as
// three quarters of the time lost to switches. Against one P's time they
// account for nearly all of it (94-99.5% here; the bound leaves room for a
// loaded machine, where a preempted spinner waits for a thread to run it).
TEST(FairRunnerTest, TurnStatsAccountForTheTimeOfThePsTheSpinnersCanHold) {
  Output o = RunFair("--turn_stats --sleeper=false --seconds=0.5 --goroutines=1 --procs=4");
  ASSERT_EQ(o.exit_code, 0) << o.text;
  double accounted = -1;
  size_t at = o.text.find("turns per goroutine");
  ASSERT_NE(at, std::string::npos) << o.text;
  ASSERT_EQ(sscanf(o.text.c_str() + at, "turns per goroutine %*d to %*d, accounting for %lf%%", &accounted), 1)
      << o.text;
  EXPECT_GE(accounted, 50.0) << o.text;
  EXPECT_LE(accounted, 100.5) << o.text;
  EXPECT_TRUE(absl::StrContains(o.text, "% of 1 P's time (1 spinner, 4 Ps)\n")) << o.text;
}

TEST(FairRunnerTest, TurnStatsNeedTheSpinWorkload) {
  Output o = RunFair("--turn_stats --workload=asm --seconds=0.1");
  EXPECT_EQ(o.exit_code, 2) << o.text;
  EXPECT_EQ(o.text, "goro-fair: --turn_stats: only the spin workload times its turns, not --workload=asm\n");
}

// The report names the settings the runtime ran with, not the flags: the
// environment overrides the time slice and async preemption (and a TSan
// build or a CPU without XSAVE turns async preemption off).
TEST(FairRunnerTest, ReportsAsyncPreemptionOffWhenTheEnvironmentTurnsItOff) {
  Output o = RunFair("--json --sleeper=false --seconds=0.2 --goroutines=2 --procs=1",
                     "GORODEBUG=asyncpreemptoff=1");
  ASSERT_EQ(o.exit_code, 0) << o.text;
  EXPECT_TRUE(absl::StrContains(o.text, " async_preemption=off\n")) << o.text;
  EXPECT_TRUE(absl::StrContains(o.text, "\"async\":false,")) << o.text;
}

TEST(FairRunnerTest, ReportsTheTimeSliceTheRuntimeUsed) {
  Output o = RunFair("--json --sleeper=false --seconds=0.2 --goroutines=2 --procs=1 --time_slice=10ms",
                     "GORODEBUG=timeslice=1ms");
  ASSERT_EQ(o.exit_code, 0) << o.text;
  EXPECT_TRUE(absl::StrContains(o.text, " time_slice=1ms ")) << o.text;
  EXPECT_TRUE(absl::StrContains(o.text, "\"time_slice_us\":1000,")) << o.text;
  EXPECT_TRUE(absl::StrContains(o.text, "(the flags asked for time_slice=10ms ")) << o.text;
}

// A threshold that can never be checked (negative, NaN, or a Jain index or
// share ratio above 1) is a bad flag, not "no check"; so is a count of fib
// goroutines whose trees would not fit in memory.
TEST(FairRunnerTest, BadThresholdsAreRejected) {
  const struct {
    const char* flag;
    const char* line;
  } cases[] = {
      {"--min_jain=-0.5", "goro-fair: --min_jain=-0.5: want 0 (no check) to 1\n"},
      {"--min_jain=nan", "goro-fair: --min_jain=nan: want 0 (no check) to 1\n"},
      {"--min_jain=1.5", "goro-fair: --min_jain=1.5: want 0 (no check) to 1\n"},
      {"--min_share_ratio=-1", "goro-fair: --min_share_ratio=-1: want 0 (no check) to 1\n"},
      {"--min_share_ratio=nan", "goro-fair: --min_share_ratio=nan: want 0 (no check) to 1\n"},
      {"--max_p99_ms=-3", "goro-fair: --max_p99_ms=-3: want 0 (no limit) or more\n"},
      {"--max_p99_ms=nan", "goro-fair: --max_p99_ms=nan: want 0 (no limit) or more\n"},
      {"--table_rows=-1", "goro-fair: --table_rows=-1: want 0 or more\n"},
  };
  for (const auto& c : cases) {
    Output o = RunFair(absl::StrFormat("%s --seconds=0.1 --goroutines=2", c.flag));
    EXPECT_EQ(o.exit_code, 2) << c.flag << "\n" << o.text;
    EXPECT_EQ(o.text, c.line) << c.flag;
  }
  // 0.8 MB a fib goroutine: 100000 of them ran out of memory.
  Output o = RunFair("--workload=fib --goroutines=1001 --seconds=0.1");
  EXPECT_EQ(o.exit_code, 2) << o.text;
  EXPECT_EQ(o.text,
            "goro-fair: --goroutines=1001: want 1 to 1000 with --workload=fib (each keeps a tree of goroutines, about "
            "0.8 MB of stacks)\n");
}

// --help lists goro-fair's flags and exits 0 (Abseil lists only the flags
// of files named like the program, and exits 1). A flag Abseil cannot parse
// exits 2 like every other usage error; 1 means "below a threshold".
TEST(FairRunnerTest, HelpListsTheFlagsAndBadFlagSyntaxIsAUsageError) {
  Output o = RunFair("--help");
  EXPECT_EQ(o.exit_code, 0) << o.text;
  EXPECT_TRUE(absl::StrContains(o.text, "--min_jain (")) << o.text;
  for (const char* flag : {"--seconds=abc", "--time_slice=10", "--nosuchflag", "--helpx"}) {
    o = RunFair(flag);
    EXPECT_EQ(o.exit_code, 2) << flag << "\n" << o.text;
    EXPECT_TRUE(absl::StartsWith(o.text, "ERROR: ")) << flag << "\n" << o.text;
  }
}

// A sleeper that never woke has no lateness to compare: --max_p99_ms fails
// (it passed on a p99 of "0.000 ms"). One P without async preemption: the
// call-free spinner keeps it until the run ends.
TEST(FairRunnerTest, ASleeperThatNeverWokeFailsTheLatencyCheck) {
  Output o = RunFair("--async_preemption=false --procs=1 --goroutines=1 --seconds=0.3 --max_p99_ms=5 --json");
  EXPECT_EQ(o.exit_code, 1) << o.text;
  EXPECT_TRUE(absl::StrContains(o.text, "Sleeper (sleeps 1ms): never woke in the measured window")) << o.text;
  EXPECT_TRUE(absl::StrContains(o.text, "FAIL: the sleeper never woke")) << o.text;
  EXPECT_TRUE(absl::StrContains(o.text, "\"wakeups\":0,")) << o.text;
}

// With no wake-up there is no lateness: --json gave p50_ms, p99_ms and
// max_ms 0 (a perfect sleeper) for a starved sleeper and for none at all.
TEST(FairRunnerTest, JsonLatenessIsNullWithoutWakeUps) {
  for (const char* args : {"--async_preemption=false --procs=1 --goroutines=1 --seconds=0.3 --json",
                           "--sleeper=false --procs=1 --goroutines=2 --seconds=0.2 --json"}) {
    Output o = RunFair(args);
    ASSERT_EQ(o.exit_code, 0) << args << "\n" << o.text;
    EXPECT_TRUE(absl::StrContains(o.text, "\"p50_ms\":null,\"p99_ms\":null,\"max_ms\":null,\"wakeups\":0,"))
        << args << "\n" << o.text;
  }
  // A sleeper that woke has figures (a P of its own: it wakes even
  // without async preemption).
  Output o = RunFair("--procs=2 --goroutines=1 --seconds=0.3 --json");
  ASSERT_EQ(o.exit_code, 0) << o.text;
  EXPECT_FALSE(absl::StrContains(o.text, "null")) << o.text;
  EXPECT_GE(JsonInt(o.text, "wakeups"), 1) << o.text;
}

// Flags that cannot work together, or a chart that cannot be written, are
// one line and status 2 before the run, not a failure after it.
TEST(FairRunnerTest, ImpossibleRequestsAreRejectedBeforeTheRun) {
  Output o = RunFair("--sleeper=false --max_p99_ms=5 --seconds=0.1");
  EXPECT_EQ(o.exit_code, 2) << o.text;
  EXPECT_EQ(o.text, "goro-fair: --max_p99_ms: there is no sleeper to check (--sleeper=false)\n");
  o = RunFair("--plot=/nonexistent-goro-dir/x.png --seconds=0.1");
  EXPECT_EQ(o.exit_code, 2) << o.text;
  EXPECT_EQ(o.text,
            "goro-fair: --plot=/nonexistent-goro-dir/x.png: cannot write in /nonexistent-goro-dir: No such file or "
            "directory\n");
  // A directory passed the check above and failed in gnuplot after the run.
  o = RunFair("--plot=/tmp --seconds=0.1");
  EXPECT_EQ(o.exit_code, 2) << o.text;
  EXPECT_EQ(o.text, "goro-fair: --plot=/tmp: is a directory; give a file name such as /tmp/fair.png\n");
}

// A window of a fraction of a round of turns gave Jain 0.25-0.6 and FAIL
// with nothing to say why; a sleep longer than the window was "starved".
// Now each gets a line saying what is wrong with the run.
TEST(FairRunnerTest, AWindowTooShortForTheTurnsOrTheSleepSaysSo) {
  Output o = RunFair("--procs=1 --goroutines=4 --time_slice=50ms --seconds=0.1 --sleep_interval=1s");
  ASSERT_EQ(o.exit_code, 0) << o.text;
  // Rounds of turns exist only where the signal ends them (not in a TSan
  // build, where async preemption is off: the sleeper's half still holds).
  if (absl::StrContains(o.text, "time_slice=50ms async_preemption=on\n")) {  // the header line
    EXPECT_TRUE(absl::StrContains(o.text, " turns on a P per CPU-bound goroutine, ")) << o.text;
    EXPECT_TRUE(absl::StrContains(o.text, " for 4 goroutines: too few for Jain's index and the shares to mean "
                                          "anything; use "))
        << o.text;
  } else {
    EXPECT_FALSE(absl::StrContains(o.text, "turns on a P")) << o.text;
  }
  EXPECT_TRUE(absl::StrContains(
      o.text, "Sleeper (sleeps 1s): never woke in the measured window (the window is no longer than one sleep)"))
      << o.text;
}

// The warning counted rounds from the nominal slice: four spinners on one P
// at 10 ms for 0.2 s made 5 rounds, enough, though each goroutine had only
// 5 turns (fewer on a busy machine) and one turn more or less is 20% of a
// share. It now counts the turns the window held, from its preemptions, and
// speaks below ten.
TEST(FairRunnerTest, TooFewTurnsInTheWindowAreCountedFromItsPreemptions) {
  SKIP_WITHOUT_ASYNC_PREEMPTION();  // only the signal ends a spinner's turn
  Output o = RunFair("--json --procs=1 --goroutines=4 --time_slice=10ms --seconds=0.2 --sleeper=false");
  ASSERT_EQ(o.exit_code, 0) << o.text;
  const long long preemptions =
      JsonInt(o.text, "window_async_preemptions") + JsonInt(o.text, "window_cooperative_preemptions");
  ASSERT_LT(preemptions, 40) << o.text;  // at most 21 turns of 10 ms in 0.2 s
  EXPECT_TRUE(absl::StrContains(
      o.text, absl::StrFormat("  (the window holds %.1f turns on a P per CPU-bound goroutine, %d preemptions for 4 "
                              "goroutines: too few for Jain's index and the shares to mean anything; use ",
                              static_cast<double>(preemptions) / 4, preemptions)))
      << o.text;
  // 1 ms slices: about 250 turns each, over 75 on a busy machine.
  o = RunFair("--procs=1 --goroutines=2 --time_slice=1ms --seconds=0.5 --sleeper=false");
  ASSERT_EQ(o.exit_code, 0) << o.text;
  EXPECT_FALSE(absl::StrContains(o.text, "too few")) << o.text;
}

// The number in the fib table's iterations column for each row.
std::vector<unsigned long long> FibCompletions(const std::string& text) {
  std::vector<unsigned long long> done;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    long long id = 0;
    unsigned long long n = 0;
    if (sscanf(std::string(line).c_str(), " %lld fib %llu", &id, &n) == 2) done.push_back(n);
  }
  return done;
}

// fib's shares are counted in whole fib(16) trees, and the warning about too
// few turns never spoke for it: 128 goroutines that finished 0-2 trees each
// in the window gave a Jain index with no word that it meant nothing. It now
// speaks when the goroutine that finished fewest finished fewer than ten.
// Thirty-two trees on one P for 0.3 s finish about 7 each here (the fewest
// 5); a faster machine may finish ten, and then there must be no warning.
TEST(FairRunnerTest, FibSaysWhenItsGoroutinesFinishedTooFewTrees) {
  if (goro_test::kTsanBuild) {
    GTEST_SKIP() << "ThreadSanitizer build: thirty-two fib(16) trees keep more goroutines alive than TSan's 8128 "
                    "fibers";
  }
  Output o = RunFair("--workload=fib --procs=1 --goroutines=32 --seconds=0.3 --sleeper=false");
  ASSERT_EQ(o.exit_code, 0) << o.text;
  std::vector<unsigned long long> done = FibCompletions(o.text);
  ASSERT_EQ(done.size(), 32u) << o.text;
  const unsigned long long fewest = *std::min_element(done.begin(), done.end());
  const std::string warning =
      absl::StrFormat("  (the goroutine that finished fewest fib(16) trees in the window finished %d: too few for "
                      "Jain's index and the shares to mean anything; use ",
                      fewest);
  EXPECT_EQ(absl::StrContains(o.text, warning), fewest < 10) << o.text;
}

// One row of the per-goroutine table.
struct Row {
  long long id = 0;
  unsigned long long iterations = 0, preemptions = 0;
};

// The table's rows for the spin workload, in order.
std::vector<Row> SpinRows(const std::string& text) {
  std::vector<Row> rows;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    Row r;
    double share = 0;
    if (sscanf(std::string(line).c_str(), " %lld spin %llu %lf%% %llu", &r.id, &r.iterations, &share,
               &r.preemptions) == 4) {
      rows.push_back(r);
    }
  }
  return rows;
}

// The window opens only once every goroutine has run. The timer thread
// began its warm-up, min(200 ms, seconds/10), when the process started,
// before the runtime did (11-16 ms here) and before goroutines queued behind
// others had run: with --seconds=0.01 on one P every goroutine showed 0
// iterations and Jain's index 0.00000, and the first one to run got an
// outsized share of short windows. Here one P has 1 s slices, so the second
// spinner first runs a second after the first. The window (10 ms of warm-up,
// then 100 ms) now falls in the second spinner's first turn: it does all
// the window's iterations and is never preempted (it stops during that
// turn), while the first, preempted once when its turn ended, does none.
// Before, the window fell in the first spinner's turn, and neither was ever
// preempted.
TEST(FairRunnerTest, TheWindowOpensOnceEveryGoroutineHasRun) {
  SKIP_WITHOUT_ASYNC_PREEMPTION();  // only the signal ends the first spinner's turn
  Output o = RunFair("--procs=1 --goroutines=2 --time_slice=1s --seconds=0.1 --sleeper=false");
  ASSERT_EQ(o.exit_code, 0) << o.text;
  std::vector<Row> rows = SpinRows(o.text);
  ASSERT_EQ(rows.size(), 2u) << o.text;
  const Row& first = rows[0].preemptions > 0 ? rows[0] : rows[1];  // the one that ran first
  const Row& second = rows[0].preemptions > 0 ? rows[1] : rows[0];
  EXPECT_EQ(first.preemptions, 1u) << o.text;
  EXPECT_EQ(first.iterations, 0u) << o.text;
  EXPECT_EQ(second.preemptions, 0u) << o.text;
  EXPECT_GT(second.iterations, 0u) << o.text;
}

// A window in which the CPU-bound goroutines finished nothing has no shares
// to compare: one line and status 2, not Jain's index 0.00000 and status 0.
// Twenty fib goroutines on one P with 50 us slices take turns on their
// fib(16) trees; the first tree is done after about 100 ms here, ten times
// the window.
TEST(FairRunnerTest, AWindowWithNoWorkIsAnErrorNotJainZero) {
  if (goro_test::kTsanBuild) {
    GTEST_SKIP() << "ThreadSanitizer build: twenty fib(16) trees keep more goroutines alive than TSan's 8128 fibers";
  }
  Output o = RunFair("--workload=fib --procs=1 --goroutines=20 --time_slice=50us --seconds=0.01 --sleeper=false");
  EXPECT_EQ(o.exit_code, 2) << o.text;
  EXPECT_TRUE(absl::StartsWith(o.text, "goro-fair: no work was measured in the window: the 20 CPU-bound goroutines "
                                       "finished no iteration in "))
      << o.text;
  EXPECT_FALSE(absl::StrContains(o.text, "Jain")) << o.text;
}

// Goroutines that never start do not hold the window up: with async
// preemption off, the first call-free spinner keeps the only P and the other
// two wait until the run ends. The timer thread then stops waiting once none
// has started for 100 ms, and the report says how many had not. (With it on,
// it waits for all of them: the next test.)
TEST(FairRunnerTest, StarvedGoroutinesDoNotHoldUpTheWindow) {
  Output o = RunFair("--async_preemption=false --procs=1 --goroutines=3 --sleeper=false --seconds=0.2");
  ASSERT_EQ(o.exit_code, 0) << o.text;
  EXPECT_TRUE(absl::StrContains(o.text, "  (2 of 3 goroutines had not started when the warm-up began")) << o.text;
}

// Goroutines still starting after 10 s are an error (status 2), not a window
// that measures their start-up. 5 s slices on one P: the second spinner
// starts after 5 s, the third after 10 s, the fourth after 15 s.
TEST(FairRunnerTest, GoroutinesStillStartingAfterTenSecondsAreAnError) {
  SKIP_WITHOUT_ASYNC_PREEMPTION();  // only the signal moves a spinner off the P
  Output o = RunFair("--procs=1 --goroutines=4 --time_slice=5s --seconds=0.1 --sleeper=false");
  EXPECT_EQ(o.exit_code, 2) << o.text;
  EXPECT_TRUE(absl::StartsWith(o.text, "goro-fair: after 10s only ")) << o.text;
  EXPECT_TRUE(absl::StrContains(o.text, " of 4 goroutines had started, and more were still starting")) << o.text;
}

// Preemptions are counted over the window apart from the whole run. The
// "Preemptions:" line, the sleeper's count and the table's column all
// counted the whole run, start-up and warm-up included, beside iterations
// and shares that count the window. The totals are now read at both ends of
// the window as well; the per-goroutine counts, which only the goroutine
// itself can read, are labelled as the whole run's. On one P the first
// spinner is preempted before the second can start, and the window opens
// only after that, so the whole run has at least one more than the window.
TEST(FairRunnerTest, PreemptionsInTheWindowAreCountedApartFromTheWholeRun) {
  SKIP_WITHOUT_ASYNC_PREEMPTION();  // only the signal preempts a spinner
  Output o = RunFair("--json --procs=1 --goroutines=2 --seconds=0.5 --sleeper=false");
  ASSERT_EQ(o.exit_code, 0) << o.text;
  const long long window = JsonInt(o.text, "window_async_preemptions");
  const long long whole = JsonInt(o.text, "async_preemptions");
  EXPECT_GE(window, 1) << o.text;  // 50 turns of 10 ms
  EXPECT_GT(whole, window) << o.text;
  EXPECT_TRUE(absl::StrContains(o.text, absl::StrFormat("\nPreemptions in the window: %d async (signal), ", window)))
      << o.text;
  EXPECT_TRUE(absl::StrContains(o.text, absl::StrFormat("\n  in the whole run: %d async (signal), ", whole))) << o.text;
  EXPECT_TRUE(absl::StrContains(o.text, "  share  preemptions (whole run)\n")) << o.text;
}

// --json gives the window's length and the CPU time the process used in it,
// so that a script can put throughput and preemptions per CPU-second (the
// stress matrix does): on a shared machine the wall clock mostly measures
// what other work left the run. One spinner on one P uses at most about one
// CPU, plus sysmon's and the timer thread's little.
TEST(FairRunnerTest, JsonGivesTheWindowAndTheCpuTimeUsedInIt) {
  Output o = RunFair("--json --procs=1 --goroutines=1 --seconds=0.3 --sleeper=false");
  ASSERT_EQ(o.exit_code, 0) << o.text;
  const double window = JsonDouble(o.text, "window_s"), cpu = JsonDouble(o.text, "window_cpu_s");
  EXPECT_GE(window, 0.3) << o.text;
  EXPECT_LT(window, 1.0) << o.text;
  EXPECT_GT(cpu, 0) << o.text;
  EXPECT_LT(cpu, 1.5 * window) << o.text;
}

// A fib goroutine only waits for its fib(16) trees, so its own preemption
// count was a column of zeros; the table leaves the column out for fib.
TEST(FairRunnerTest, TheFibTableHasNoPreemptionColumn) {
  if (goro_test::kTsanBuild) {
    GTEST_SKIP() << "ThreadSanitizer build: a fib(16) tree takes more than the window there";
  }
  // A second: a fib(16) tree takes about 100 ms here, and a window with none
  // finished is an error.
  Output o = RunFair("--workload=fib --procs=1 --goroutines=2 --seconds=1 --sleeper=false");
  ASSERT_EQ(o.exit_code, 0) << o.text;
  EXPECT_TRUE(absl::StrContains(o.text, "\n  goroutine  role        iterations    share\n")) << o.text;
}

// The contents of `path`, or "" if it cannot be read.
std::string ReadFile(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// The --plot chart shows shares of the iterations, not of the CPU, and only
// for the CPU-bound goroutines: it was titled "CPU share per goroutine" and
// gave the mixed workload's sleep, yield and chan goroutines bars of 0%.
// A stand-in gnuplot earlier in PATH keeps the script and data it is given.
TEST(FairRunnerTest, TheChartShowsSharesOfIterationsForCpuBoundGoroutinesOnly) {
  char dir[] = "/tmp/fair-runner-test-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string d = dir;
  {
    std::ofstream f(d + "/gnuplot");
    // It writes the 8 bytes of a PNG's signature where goro-fair asks.
    f << "#!/bin/sh\ncp \"$1\" \"$(dirname \"$1\")\"/shares.dat '" << d << "/'\n"
      << "printf '\\211PNG\\r\\n\\032\\n' >\"$(sed -n \"s/^set output '\\(.*\\)'$/\\1/p\" \"$1\")\"\n";
  }
  std::filesystem::permissions(d + "/gnuplot", std::filesystem::perms::owner_all);
  // mixed: spin, sleep, spin, yield, spin, chan.
  Output o = RunFair(absl::StrFormat("--workload=mixed --goroutines=6 --procs=1 --seconds=0.2 --plot=%s/chart.png", d),
                     absl::StrFormat("PATH='%s':\"$PATH\"", d));
  const std::string script = ReadFile(d + "/plot.gp");
  const std::string bars = ReadFile(d + "/shares.dat");
  std::filesystem::remove_all(d);
  ASSERT_EQ(o.exit_code, 0) << o.text;
  EXPECT_TRUE(absl::StrContains(script, "set title 'Share of the iterations, per CPU-bound goroutine'")) << script;
  EXPECT_FALSE(absl::StrContains(script, "CPU share")) << script;
  std::vector<std::string> lines = absl::StrSplit(bars, '\n', absl::SkipEmpty());
  EXPECT_EQ(lines.size(), 3u) << bars;  // the three spin goroutines
}

// A temporary directory, removed with everything in it when the test ends.
struct TempDir {
  std::string path;
  TempDir() {
    char dir[] = "/tmp/fair-runner-test-XXXXXX";
    if (mkdtemp(dir) != nullptr) path = dir;
  }
  ~TempDir() {
    if (!path.empty()) std::filesystem::remove_all(path);
  }
};

// The names in directory `dir`, sorted.
std::vector<std::string> FilesIn(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& e : std::filesystem::directory_iterator(dir)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

// --plot wrote wherever it was told: as root, --plot=/etc/passwd replaced
// the system's passwd with a PNG. A file already there that is not a PNG is
// now refused before the run, and left as it was.
TEST(FairRunnerTest, PlotRefusesToReplaceAFileThatIsNotAPng) {
  TempDir d;
  ASSERT_FALSE(d.path.empty());
  const std::string source = d.path + "/precious.cc";
  std::ofstream(source) << "int main() {}\n";
  Output o = RunFair(absl::StrFormat("--seconds=0.1 --plot=%s", source));
  EXPECT_EQ(o.exit_code, 2) << o.text;
  EXPECT_EQ(o.text, absl::StrFormat("goro-fair: --plot=%s: the file is there and is not a PNG; give a new name "
                                    "(--plot replaces only an earlier chart)\n",
                                    source));
  EXPECT_TRUE(ReadFile(source) == "int main() {}\n") << source << " was overwritten";
  // Nor anything that is not a regular file (a FIFO, /dev/null).
  const std::string fifo = d.path + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0) << std::strerror(errno);
  o = RunFair(absl::StrFormat("--seconds=0.1 --plot=%s", fifo));
  EXPECT_EQ(o.exit_code, 2) << o.text;
  EXPECT_EQ(o.text, absl::StrFormat("goro-fair: --plot=%s: the file is there and is not a regular file; give a new "
                                    "name (--plot replaces only an earlier chart)\n",
                                    fifo));
  EXPECT_TRUE(std::filesystem::is_fifo(fifo));
}

// An earlier chart is replaced, but only by a whole one: gnuplot writes a
// temporary file beside it, renamed over it once gnuplot has succeeded. A
// gnuplot that fails half-way leaves the old chart and no other file. The
// stand-in gnuplots (earlier in PATH) write where the script says.
TEST(FairRunnerTest, PlotReplacesAnEarlierChartOnlyWithAWholeOne) {
  TempDir d;
  ASSERT_FALSE(d.path.empty());
  const std::string bin = d.path + "/bin", out = d.path + "/out", chart = out + "/fair.png";
  ASSERT_TRUE(std::filesystem::create_directory(bin));
  ASSERT_TRUE(std::filesystem::create_directory(out));
  const std::string png = "\x89PNG\r\n\x1a\n";
  std::ofstream(chart, std::ios::binary) << png << "old";
  auto stand_in = [&](const std::string& body, int status) {
    std::ofstream f(bin + "/gnuplot");
    f << "#!/bin/sh\nprintf '\\211PNG\\r\\n\\032\\n" << body
      << "' >\"$(sed -n \"s/^set output '\\(.*\\)'$/\\1/p\" \"$1\")\"\nexit " << status << "\n";
    f.close();
    std::filesystem::permissions(bin + "/gnuplot", std::filesystem::perms::owner_all);
  };
  const std::string env = absl::StrFormat("PATH='%s':\"$PATH\"", bin);
  const std::string args = absl::StrFormat("--seconds=0.1 --goroutines=2 --sleeper=false --plot=%s", chart);

  stand_in("half", 1);
  Output o = RunFair(args, env);
  EXPECT_EQ(o.exit_code, 2) << o.text;
  EXPECT_TRUE(absl::StrContains(
      o.text, absl::StrFormat("goro-fair: could not write --plot=%s: gnuplot failed (its message is above)\n", chart)))
      << o.text;
  EXPECT_EQ(ReadFile(chart), png + "old");
  EXPECT_EQ(FilesIn(out), std::vector<std::string>{"fair.png"});

  stand_in("new", 0);
  o = RunFair(args, env);
  EXPECT_EQ(o.exit_code, 0) << o.text;
  EXPECT_TRUE(absl::StrContains(o.text, absl::StrFormat("Chart written to %s\n", chart))) << o.text;
  EXPECT_EQ(ReadFile(chart), png + "new");
  EXPECT_EQ(FilesIn(out), std::vector<std::string>{"fair.png"});
}

// A chart that could not be written after a threshold FAIL left status 2,
// "bad usage or nothing measured", where a script looks for 1, "unfair".
// The FAIL's 1 now stays; the chart's failure is still said on stderr. A
// share ratio of 1 needs every goroutine to do exactly as many iterations.
TEST(FairRunnerTest, AChartThatFailsKeepsAThresholdFailsStatus) {
  TempDir d;
  ASSERT_FALSE(d.path.empty());
  {
    std::ofstream f(d.path + "/gnuplot");
    f << "#!/bin/sh\necho 'gnuplot: stand-in failure' >&2\nexit 1\n";
  }
  std::filesystem::permissions(d.path + "/gnuplot", std::filesystem::perms::owner_all);
  const std::string chart = d.path + "/fair.png";
  Output o =
      RunFair(absl::StrFormat("--seconds=0.2 --goroutines=2 --sleeper=false --min_share_ratio=1 --plot=%s", chart),
              absl::StrFormat("PATH='%s':\"$PATH\"", d.path));
  EXPECT_EQ(o.exit_code, 1) << o.text;
  EXPECT_TRUE(absl::StrContains(o.text, "\nFAIL: min/max share ")) << o.text;
  EXPECT_TRUE(absl::StrContains(
      o.text, absl::StrFormat("goro-fair: could not write --plot=%s: gnuplot failed (its message is above)\n", chart)))
      << o.text;
}

// Without a sleeper, or with one that never woke, the lateness panel had no
// points: gnuplot said "empty x range" and drew an empty frame. There is now
// no panel without a sleeper, and one that says the sleeper never woke. A
// stand-in gnuplot keeps the script; the real one, if installed, must draw
// the chart without a warning.
TEST(FairRunnerTest, TheChartHasNoEmptyLatenessPanel) {
  TempDir d;
  ASSERT_FALSE(d.path.empty());
  const std::string bin = d.path + "/bin";
  ASSERT_TRUE(std::filesystem::create_directory(bin));
  {
    std::ofstream f(bin + "/gnuplot");
    f << "#!/bin/sh\ncp \"$1\" '" << d.path << "/plot.gp'\n"
      << "printf '\\211PNG\\r\\n\\032\\n' >\"$(sed -n \"s/^set output '\\(.*\\)'$/\\1/p\" \"$1\")\"\n";
  }
  std::filesystem::permissions(bin + "/gnuplot", std::filesystem::perms::owner_all);
  const std::string stand_in = absl::StrFormat("PATH='%s':\"$PATH\"", bin);
  const struct {
    const char* args;
    bool panel;
  } cases[] = {
      {"--sleeper=false --procs=1 --goroutines=2", false},
      // The spinner keeps the only P: the sleeper never runs.
      {"--async_preemption=false --procs=1 --goroutines=1", true},
  };
  for (const auto& c : cases) {
    const std::string args = absl::StrFormat("%s --seconds=0.2 --plot=%s/fair.png", c.args, d.path);
    Output o = RunFair(args, stand_in);
    const std::string script = ReadFile(d.path + "/plot.gp");
    ASSERT_EQ(o.exit_code, 0) << c.args << "\n" << o.text;
    EXPECT_FALSE(absl::StrContains(script, "lateness.dat")) << c.args << "\n" << script;
    EXPECT_EQ(absl::StrContains(script, "set multiplot layout 1,2 "), c.panel) << c.args << "\n" << script;
    EXPECT_EQ(absl::StrContains(script, "'the sleeper never woke in the window'"), c.panel) << c.args << "\n" << script;
    if (system("command -v gnuplot >/dev/null") == 0) {
      o = RunFair(args);
      EXPECT_EQ(o.exit_code, 0) << c.args << "\n" << o.text;
      EXPECT_FALSE(absl::StrContains(o.text, "warning")) << c.args << "\n" << o.text;
      EXPECT_TRUE(absl::StrContains(o.text, "Chart written to ")) << c.args << "\n" << o.text;
    }
  }
}

// The mixed workload compared the iterations of the C++ spin loop with the
// asm loop's, which ran 1.9 times as fast in one build (the C++ loop
// straddled a 64-byte boundary): Jain 0.76-0.94 with equal turns, and the
// stress matrix's mixed rows failed 6 of 6. Its CPU-bound goroutines now all
// run the same loop.
TEST(FairRunnerTest, MixedComparesOneLoopOnly) {
  Output o = RunFair("--workload=mixed --goroutines=12 --procs=2 --seconds=0.3 --sleeper=false");
  ASSERT_EQ(o.exit_code, 0) << o.text;
  EXPECT_TRUE(absl::StrContains(o.text, " spin ")) << o.text;
  EXPECT_FALSE(absl::StrContains(o.text, " asm ")) << o.text;
}

}  // namespace
