// The environment: GOROMAXPROCS and GORODEBUG are read once when the runtime
// starts; a bad value is reported on stderr in one line naming it, and the
// default is used. Options are per process, so each case launches
// goro_env_probe (env_probe.cc) with its own environment.
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "core/env.h"
#include "gtest/gtest.h"
#include "test_util.h"

namespace {

struct ProbeResult {
  int exit_code = -1;  // or 128 + signal
  std::string out, err;
  int procs = -1;
  int ran = 0;
  int async = -1;          // GetOptions().async_preemption
  std::string time_slice;  // GetOptions().time_slice
  std::vector<std::string> err_lines;  // non-empty lines of stderr
};

// Runs goro_env_probe with the current environment minus GOROMAXPROCS and
// GORODEBUG, plus `env`, and with the CPU affinity `affinity` if not null
// (as `taskset` would). Kills it after 30 s.
ProbeResult RunProbe(const std::map<std::string, std::string>& env,
                     const std::vector<std::string>& args = {}, const cpu_set_t* affinity = nullptr) {
  ProbeResult r;
  std::vector<std::string> env_strings = goro_test::EnvironmentWithout({"GOROMAXPROCS", "GORODEBUG"});
  for (const auto& [k, v] : env) env_strings.push_back(k + "=" + v);
  std::vector<std::string> argv = {GORO_ENV_PROBE_PATH};
  argv.insert(argv.end(), args.begin(), args.end());
  goro_test::CapturedRun run = goro_test::RunCapturing(argv, env_strings, affinity);
  r.exit_code = run.exit_code;
  r.out = std::move(run.out);
  r.err = std::move(run.err);
  char time_slice[64] = "";
  sscanf(r.out.c_str(), "procs=%d ran=%d async=%d timeslice=%63s", &r.procs, &r.ran, &r.async, time_slice);
  r.time_slice = time_slice;
  for (absl::string_view line : absl::StrSplit(r.err, '\n', absl::SkipWhitespace())) {
    r.err_lines.emplace_back(line);
  }
  return r;
}

std::string Describe(const ProbeResult& r) {
  return "exit " + std::to_string(r.exit_code) + "\nstdout:\n" + r.out + "stderr:\n" + r.err;
}

// The number of Ps the runtime picks when nothing in the environment says.
int DefaultProcs() {
  static int procs = [] {
    ProbeResult r = RunProbe({});
    EXPECT_EQ(r.exit_code, 0) << Describe(r);
    EXPECT_TRUE(r.err.empty()) << "the probe complains with a clean environment:\n" << Describe(r);
    EXPECT_GE(r.procs, 1) << Describe(r);
    return r.procs;
  }();
  return procs;
}

TEST(EnvTest, CleanEnvironmentIsQuiet) {
  ProbeResult r = RunProbe({});
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(r.ran, 1) << Describe(r);
  EXPECT_TRUE(r.err.empty()) << Describe(r);
  EXPECT_GE(r.procs, 1);
}

TEST(EnvTest, GoromaxprocsIsUsed) {
  ProbeResult r = RunProbe({{"GOROMAXPROCS", "3"}});
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(r.procs, 3) << Describe(r);
  EXPECT_TRUE(r.err.empty()) << Describe(r);
}

// As Go's default GOMAXPROCS does, the default number of Ps counts the CPUs
// the process may run on (its affinity mask), not every online CPU: under
// `taskset -c 0` it is 1. It once used the hardware concurrency (2 there).
TEST(EnvTest, DefaultProcsFollowTheCpuAffinity) {
  cpu_set_t mine;
  CPU_ZERO(&mine);
  if (sched_getaffinity(0, sizeof(mine), &mine) != 0) {
    GTEST_SKIP() << "sched_getaffinity: " << strerror(errno);
  }
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &mine)) cpus.push_back(c);
  }
  ASSERT_FALSE(cpus.empty());
  EXPECT_EQ(DefaultProcs(), std::min<int>(cpus.size(), 1024)) << "with this process's mask";
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(cpus[0], &one);
  bool can_set = false;
  std::thread([&] { can_set = sched_setaffinity(0, sizeof(one), &one) == 0; }).join();
  if (!can_set) GTEST_SKIP() << "cannot set a thread's CPU affinity here: " << strerror(errno);

  ProbeResult r = RunProbe({}, {}, &one);
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(r.procs, 1) << "on CPU " << cpus[0] << " alone\n" << Describe(r);
  EXPECT_TRUE(r.err.empty()) << Describe(r);
  // An explicit count still wins.
  r = RunProbe({{"GOROMAXPROCS", "3"}}, {}, &one);
  EXPECT_EQ(r.procs, 3) << Describe(r);
  r = RunProbe({}, {"--max_procs=2"}, &one);
  EXPECT_EQ(r.procs, 2) << Describe(r);
  if (cpus.size() >= 3) {
    cpu_set_t two;
    CPU_ZERO(&two);
    CPU_SET(cpus[0], &two);
    CPU_SET(cpus[2], &two);
    r = RunProbe({}, {}, &two);
    EXPECT_EQ(r.procs, 2) << "on CPUs " << cpus[0] << " and " << cpus[2] << "\n" << Describe(r);
  }
}

TEST(EnvTest, ExplicitMaxProcsBeatsGoromaxprocs) {
  ProbeResult r = RunProbe({{"GOROMAXPROCS", "3"}}, {"--max_procs=2"});
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(r.procs, 2) << Describe(r);
}

TEST(EnvTest, BadGoromaxprocsWarnsOnceAndUsesTheDefault) {
  int want = DefaultProcs();
  ProbeResult r = RunProbe({{"GOROMAXPROCS", "abc"}});
  EXPECT_EQ(r.exit_code, 0) << "a bad value must never crash\n" << Describe(r);
  EXPECT_EQ(r.ran, 1) << Describe(r);
  EXPECT_EQ(r.procs, want) << Describe(r);
  ASSERT_EQ(r.err_lines.size(), 1u) << "expected exactly one warning line\n" << Describe(r);
  EXPECT_TRUE(absl::StrContains(r.err_lines[0], "GOROMAXPROCS")) << Describe(r);
  EXPECT_TRUE(absl::StrContains(r.err_lines[0], "abc")) << "the line must name the bad value\n"
                                                        << Describe(r);
}

TEST(EnvTest, OtherBadGoromaxprocsValuesWarnAndUseTheDefault) {
  int want = DefaultProcs();
  for (const char* bad : {"-4", "2x", "99999999999999999999"}) {
    ProbeResult r = RunProbe({{"GOROMAXPROCS", bad}});
    EXPECT_EQ(r.exit_code, 0) << bad << "\n" << Describe(r);
    EXPECT_EQ(r.procs, want) << bad << "\n" << Describe(r);
    EXPECT_EQ(r.err_lines.size(), 1u) << bad << "\n" << Describe(r);
    EXPECT_TRUE(absl::StrContains(r.err, bad)) << bad << "\n" << Describe(r);
  }
}

TEST(EnvTest, BadTimesliceWarnsOnceAndUsesTheDefault) {
  int want = DefaultProcs();
  ProbeResult r = RunProbe({{"GORODEBUG", "timeslice=xyz"}});
  EXPECT_EQ(r.exit_code, 0) << "a bad value must never crash\n" << Describe(r);
  EXPECT_EQ(r.ran, 1) << Describe(r);
  EXPECT_EQ(r.procs, want) << Describe(r);
  ASSERT_EQ(r.err_lines.size(), 1u) << "expected exactly one warning line\n" << Describe(r);
  EXPECT_TRUE(absl::StrContains(r.err_lines[0], "timeslice")) << Describe(r);
  EXPECT_TRUE(absl::StrContains(r.err_lines[0], "xyz")) << "the line must name the bad value\n"
                                                        << Describe(r);
}

TEST(EnvTest, GoodGorodebugSettingsAreQuiet) {
  for (const char* good : {"timeslice=5ms", "asyncpreemptoff=1", "asyncpreemptoff=0",
                           "timeslice=2ms,asyncpreemptoff=1", "schedtrace=0",
                           "schedtrace=86400000"}) {
    ProbeResult r = RunProbe({{"GORODEBUG", good}});
    EXPECT_EQ(r.exit_code, 0) << good << "\n" << Describe(r);
    EXPECT_EQ(r.ran, 1) << good << "\n" << Describe(r);
    EXPECT_TRUE(r.err.empty()) << good << "\n" << Describe(r);
  }
}

// As in Go's GODEBUG, a key given twice takes the last value: the 0/1 keys
// once took only the value that changes the default, so
// asyncpreemptoff=1,asyncpreemptoff=0 left async preemption off.
TEST(EnvTest, RepeatedGorodebugKeyTakesTheLastValue) {
  struct Case {
    const char* gorodebug;
    int async;
    const char* time_slice;
  };
  for (const Case& c : {Case{"asyncpreemptoff=1,asyncpreemptoff=0", 1, "10ms"},
                        Case{"asyncpreemptoff=0,asyncpreemptoff=1", 0, "10ms"},
                        Case{"asyncpreemptoff=1,timeslice=2ms,asyncpreemptoff=0", 1, "2ms"},
                        Case{"timeslice=1ms,timeslice=3ms", 1, "3ms"}}) {
    ProbeResult r = RunProbe({{"GORODEBUG", c.gorodebug}});
    EXPECT_EQ(r.exit_code, 0) << c.gorodebug << "\n" << Describe(r);
    // Async preemption is always off under ThreadSanitizer (docs/sanitizers.md).
    EXPECT_EQ(r.async, goro_test::kTsanBuild ? 0 : c.async) << c.gorodebug << "\n" << Describe(r);
    EXPECT_EQ(r.time_slice, c.time_slice) << c.gorodebug << "\n" << Describe(r);
    EXPECT_TRUE(r.err.empty()) << c.gorodebug << "\n" << Describe(r);
  }
}

// A bad value's warning says what is used instead: the key's last good value
// wherever it appears, else the default. It once said "using the default"
// while an earlier good value stayed in force.
TEST(EnvTest, BadRepeatedValueNamesTheValueInForce) {
  struct Case {
    const char* gorodebug;
    const char* bad;
    const char* used;
    int async;
    const char* time_slice;
  };
  for (const Case& c : {Case{"timeslice=1ms,timeslice=bad", "bad", "using timeslice=1ms", 1, "1ms"},
                        Case{"timeslice=bad,timeslice=2ms", "bad", "using timeslice=2ms", 1, "2ms"},
                        Case{"asyncpreemptoff=1,asyncpreemptoff=2", "2", "using asyncpreemptoff=1", 0, "10ms"},
                        Case{"timeslice=3ms,timeslice=bad,timeslice=1ms", "bad", "using timeslice=1ms", 1, "1ms"},
                        Case{"timeslice=bad", "bad", "using the default", 1, "10ms"}}) {
    ProbeResult r = RunProbe({{"GORODEBUG", c.gorodebug}});
    EXPECT_EQ(r.exit_code, 0) << c.gorodebug << "\n" << Describe(r);
    EXPECT_EQ(r.async, goro_test::kTsanBuild ? 0 : c.async) << c.gorodebug << "\n" << Describe(r);
    EXPECT_EQ(r.time_slice, c.time_slice) << c.gorodebug << "\n" << Describe(r);
    ASSERT_EQ(r.err_lines.size(), 1u) << c.gorodebug << "\n" << Describe(r);
    EXPECT_TRUE(absl::StrContains(r.err_lines[0], absl::StrCat("=\"", c.bad, "\"")))
        << c.gorodebug << "\n" << Describe(r);
    EXPECT_TRUE(absl::EndsWith(r.err_lines[0], c.used)) << c.gorodebug << "\n" << Describe(r);
  }
}

// The same for every key, on the parser itself (scheddetail and sigquitdump
// show only in schedtrace's output and on SIGQUIT).
TEST(EnvTest, ParserTakesTheLastValueOfEachKey) {
  using goro::internal::EnvSettings;
  using goro::internal::ParseEnvironment;
  EXPECT_FALSE(ParseEnvironment(nullptr, "asyncpreemptoff=1,asyncpreemptoff=0").async_preempt_off);
  EXPECT_TRUE(ParseEnvironment(nullptr, "asyncpreemptoff=0,asyncpreemptoff=1").async_preempt_off);
  EXPECT_FALSE(ParseEnvironment(nullptr, "scheddetail=1,scheddetail=0").scheddetail);
  EXPECT_TRUE(ParseEnvironment(nullptr, "scheddetail=0,scheddetail=1").scheddetail);
  EXPECT_TRUE(ParseEnvironment(nullptr, "sigquitdump=0,sigquitdump=1").sigquit_dump);
  EXPECT_FALSE(ParseEnvironment(nullptr, "sigquitdump=1,sigquitdump=0").sigquit_dump);
  EXPECT_EQ(ParseEnvironment(nullptr, "schedtrace=10,schedtrace=0").schedtrace_ms, 0);
  EXPECT_EQ(ParseEnvironment(nullptr, "timeslice=1ms,timeslice=2ms").time_slice, absl::Milliseconds(2));
  EnvSettings defaults = ParseEnvironment(nullptr, "");
  EXPECT_FALSE(defaults.async_preempt_off);
  EXPECT_FALSE(defaults.scheddetail);
  EXPECT_TRUE(defaults.sigquit_dump);
}

// schedtrace=MS prints Go's line every MS ms, also while every P is idle
// (the probe sleeps): sysmon must not sleep deeply past a line.
TEST(EnvTest, SchedtracePrintsGoLinesPeriodically) {
  ProbeResult r = RunProbe({{"GORODEBUG", "schedtrace=20"}, {"GOROMAXPROCS", "2"}}, {"--hold_ms=300"});
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  int sched_lines = 0;
  for (const std::string& line : r.err_lines) {
    ASSERT_TRUE(absl::StartsWith(line, "SCHED ")) << "unexpected stderr line: " << line;
    EXPECT_TRUE(absl::StrContains(line, "ms: gomaxprocs=2 idleprocs=")) << line;
    for (const char* field : {" threads=", " spinningthreads=", " idlethreads=", " runqueue="}) {
      EXPECT_TRUE(absl::StrContains(line, field)) << field << " missing: " << line;
    }
    // One local queue length per P.
    size_t open = line.find('['), close = line.find(']');
    ASSERT_TRUE(open != std::string::npos && close != std::string::npos) << line;
    std::vector<std::string> lrq = absl::StrSplit(line.substr(open + 1, close - open - 1), ' ');
    EXPECT_EQ(lrq.size(), 2u) << line;
    ++sched_lines;
  }
  // 300 ms at one line per 20 ms: about 15; a loaded machine may lose some.
  EXPECT_GE(sched_lines, 5) << Describe(r);
}

// A period too long to mean anything (more than a day) is a bad value: it
// once overflowed the nanosecond period, giving a line every 0.45 ms for
// 18446744073710 and, for 10^13, no lines at all, without a word.
TEST(EnvTest, HugeSchedtraceWarnsOnceAndTracesNothing) {
  for (const char* bad : {"18446744073710", "10000000000000", "9223372036854775807", "86400001"}) {
    ProbeResult r = RunProbe({{"GORODEBUG", std::string("schedtrace=") + bad}},
                             {"--hold_ms=100"});
    EXPECT_EQ(r.exit_code, 0) << bad << "\n" << Describe(r);
    EXPECT_EQ(r.ran, 1) << bad << "\n" << Describe(r);
    ASSERT_EQ(r.err_lines.size(), 1u) << "expected exactly one warning line and no SCHED lines\n"
                                      << Describe(r);
    EXPECT_TRUE(absl::StrContains(r.err_lines[0], "schedtrace")) << Describe(r);
    EXPECT_TRUE(absl::StrContains(r.err_lines[0], bad)) << "the line must name the bad value\n"
                                                        << Describe(r);
  }
}

TEST(EnvTest, ScheddetailAddsPMAndGoroutineLines) {
  ProbeResult r = RunProbe({{"GORODEBUG", "schedtrace=50,scheddetail=1"}, {"GOROMAXPROCS", "2"}},
                           {"--hold_ms=300"});
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  bool p0 = false, p1 = false, m = false, blocked_g = false;
  for (const std::string& line : r.err_lines) {
    p0 |= absl::StartsWith(line, "  P0: status=") && absl::StrContains(line, " runqsize=");
    p1 |= absl::StartsWith(line, "  P1: status=");
    m |= absl::StartsWith(line, "  M") && absl::StrContains(line, ": p=") &&
         absl::StrContains(line, " curg=");
    // The probe's second goroutine waits in a channel receive throughout.
    blocked_g |= absl::StartsWith(line, "  G2: status=waiting(chan receive) m=-1");
  }
  EXPECT_TRUE(p0 && p1 && m && blocked_g) << "P0 " << p0 << " P1 " << p1 << " M " << m
                                          << " G2 " << blocked_g << "\n" << Describe(r);
}

TEST(EnvTest, BadValueAmongGoodOnesIsReportedAlone) {
  ProbeResult r = RunProbe({{"GORODEBUG", "asyncpreemptoff=1,timeslice=xyz"}, {"GOROMAXPROCS", "2"}});
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(r.procs, 2) << "a bad GORODEBUG entry must not disturb GOROMAXPROCS\n" << Describe(r);
  ASSERT_EQ(r.err_lines.size(), 1u) << Describe(r);
  EXPECT_TRUE(absl::StrContains(r.err_lines[0], "xyz")) << Describe(r);
}

TEST(EnvTest, BothBadGiveTwoLines) {
  int want = DefaultProcs();
  ProbeResult r = RunProbe({{"GORODEBUG", "timeslice=xyz"}, {"GOROMAXPROCS", "abc"}});
  EXPECT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_EQ(r.procs, want) << Describe(r);
  EXPECT_EQ(r.err_lines.size(), 2u) << Describe(r);
  EXPECT_TRUE(absl::StrContains(r.err, "xyz")) << Describe(r);
  EXPECT_TRUE(absl::StrContains(r.err, "abc")) << Describe(r);
}

}  // namespace
