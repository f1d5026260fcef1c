// goro::Options out of range: a value that cannot work is a fatal error at
// start-up naming the option and the value; max_procs above the limit that
// GOROMAXPROCS has is capped with one warning line. Options are read once per
// process, so each case starts the runtime in a child.
#include <signal.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

#include "goro/goro.h"
#include "gtest/gtest.h"
#include "test_util.h"

namespace {

// Starts the runtime with `opts` in the death-test child and runs one empty
// goroutine; exits 0 if that returns (and no CHILD_CHECK failed).
void StartWith(const goro::Options& opts) {
  goro_test::Watchdog dog(absl::Seconds(30), "expected the runtime to start or refuse");
  goro::Run([] {}, opts);
}

goro::Options WithStackSize(size_t size) {
  goro::Options o = goro_test::TestOptions();
  o.stack_size = size;
  return o;
}

goro::Options WithTimeSlice(absl::Duration slice) {
  goro::Options o = goro_test::TestOptions();
  o.time_slice = slice;
  return o;
}

goro::Options WithPreemptSignal(int sig) {
  goro::Options o = goro_test::TestOptions();
  o.preempt_signal = sig;
  return o;
}

// A preemption signal that cannot be caught, that is not a signal, that glibc
// keeps for itself or that goro needs for something else was either "cannot
// install the preemption signal handler" (naming neither option nor value)
// or, for SIGSEGV and SIGQUIT, accepted: the handler replaced goro's crash
// report and goroutine dump.
TEST(OptionsTest, UnusablePreemptSignalIsAFatalErrorNamingIt) {
  EXPECT_DEATH(StartWith(WithPreemptSignal(0)),
               "fatal error: Options::preempt_signal=0: not a signal number \\(1 to 64\\); want a signal nothing "
               "else in the process uses, such as SIGURG \\(23, the default\\), SIGUSR1, SIGUSR2 or a real-time "
               "signal");
  EXPECT_DEATH(StartWith(WithPreemptSignal(100)), "fatal error: Options::preempt_signal=100: not a signal number");
  EXPECT_DEATH(StartWith(WithPreemptSignal(SIGKILL)),
               "fatal error: Options::preempt_signal=9 \\(SIGKILL\\): it cannot be caught");
  EXPECT_DEATH(StartWith(WithPreemptSignal(SIGSEGV)),
               "fatal error: Options::preempt_signal=11 \\(SIGSEGV\\): goro reports crashes with it");
  EXPECT_DEATH(StartWith(WithPreemptSignal(SIGQUIT)),
               "fatal error: Options::preempt_signal=3 \\(SIGQUIT\\): goro's goroutine dump uses it");
  EXPECT_DEATH(StartWith(WithPreemptSignal(32)), "fatal error: Options::preempt_signal=32: glibc uses it");
}

// A signal the system, the terminal or other programs send for a purpose
// was accepted: with SIGINT or SIGTERM, Ctrl-C and kill then did nothing (a
// foreign one found SIG_DFL before goro's handler and was dropped), and a
// handler the program installed for it would have replaced goro's. Each must
// be refused in one line naming the signal and why.
TEST(OptionsTest, PreemptSignalWithAPurposeIsAFatalErrorNamingIt) {
  EXPECT_DEATH(StartWith(WithPreemptSignal(SIGINT)),
               "fatal error: Options::preempt_signal=2 \\(SIGINT\\): it asks the process to end \\(the terminal, "
               "the shell and kill send it\\); want a signal nothing else in the process uses");
  EXPECT_DEATH(StartWith(WithPreemptSignal(SIGTERM)),
               "fatal error: Options::preempt_signal=15 \\(SIGTERM\\): it asks the process to end");
  EXPECT_DEATH(StartWith(WithPreemptSignal(SIGHUP)),
               "fatal error: Options::preempt_signal=1 \\(SIGHUP\\): it asks the process to end");
  EXPECT_DEATH(StartWith(WithPreemptSignal(SIGCHLD)),
               "fatal error: Options::preempt_signal=17 \\(SIGCHLD\\): the kernel reports child processes with it");
  EXPECT_DEATH(StartWith(WithPreemptSignal(SIGTSTP)),
               "fatal error: Options::preempt_signal=20 \\(SIGTSTP\\): job control uses it");
  EXPECT_DEATH(StartWith(WithPreemptSignal(SIGPIPE)),
               "fatal error: Options::preempt_signal=13 \\(SIGPIPE\\): a write to a closed pipe or socket raises it");
  EXPECT_DEATH(StartWith(WithPreemptSignal(SIGALRM)),
               "fatal error: Options::preempt_signal=14 \\(SIGALRM\\): timers send it");
  EXPECT_DEATH(StartWith(WithPreemptSignal(SIGXCPU)),
               "fatal error: Options::preempt_signal=24 \\(SIGXCPU\\): the kernel sends it for its own purpose");
}

// Another signal works (a program that has its own use for SIGURG).
TEST(OptionsTest, AnotherPreemptSignalWorks) {
  EXPECT_EXIT(
      {
        StartWith(WithPreemptSignal(SIGRTMIN + 1));
        _exit(0);
      },
      ::testing::ExitedWithCode(0), "");
  for (int sig : {SIGUSR1, SIGUSR2, SIGWINCH}) {
    EXPECT_EXIT(
        {
          StartWith(WithPreemptSignal(sig));
          _exit(0);
        },
        ::testing::ExitedWithCode(0), "")
        << "signal " << sig;
  }
}

// SIZE_MAX once wrapped to 0 in the page rounding: every stack was empty and
// the first goroutine's start killed the process with SIGSEGV and no message.
TEST(OptionsTest, HugeStackSizeIsAFatalErrorNamingIt) {
  EXPECT_DEATH(StartWith(WithStackSize(SIZE_MAX)),
               "fatal error: Options::stack_size=18446744073709551615: want at most 1073741824 \\(1 GiB\\)");
}

// Near 2^60 the size of a batch of stacks wrapped instead, and mmap's refusal
// was reported as a lack of address space.
TEST(OptionsTest, StackSizeNear2To60IsAFatalErrorNamingIt) {
  EXPECT_DEATH(StartWith(WithStackSize(size_t{1} << 60)),
               "fatal error: Options::stack_size=1152921504606846976: want at most 1073741824");
}

TEST(OptionsTest, StackSizeJustAboveTheLimitIsAFatalError) {
  EXPECT_DEATH(StartWith(WithStackSize((size_t{1} << 30) + 1)),
               "fatal error: Options::stack_size=1073741825: want at most 1073741824");
}

TEST(OptionsTest, LargestStackSizeWorks) {
  EXPECT_EXIT(
      {
        StartWith(WithStackSize(size_t{1} << 30));
        _exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

// A time slice of zero or less means nothing (not "never preempt", not
// "always"); one shorter than sysmon can time was silently made 50us.
TEST(OptionsTest, NonPositiveTimeSliceIsAFatalErrorNamingIt) {
  EXPECT_DEATH(StartWith(WithTimeSlice(absl::ZeroDuration())),
               "fatal error: Options::time_slice=0: want at least 50us");
  EXPECT_DEATH(StartWith(WithTimeSlice(absl::Milliseconds(-1))),
               "fatal error: Options::time_slice=-1ms: want at least 50us");
}

TEST(OptionsTest, TimeSliceBelow50usIsAFatalError) {
  EXPECT_DEATH(StartWith(WithTimeSlice(absl::Microseconds(49))),
               "fatal error: Options::time_slice=49us: want at least 50us");
}

TEST(OptionsTest, ShortestTimeSliceWorks) {
  EXPECT_EXIT(
      {
        StartWith(WithTimeSlice(absl::Microseconds(50)));
        _exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

// GOROMAXPROCS stops at 1024; Options::max_procs did not, and 100000 Ps were
// made without a word (every idle M scans them all).
TEST(OptionsTest, MaxProcsAboveTheLimitIsCappedWithAWarning) {
  EXPECT_EXIT(
      {
        goro::Options o = goro_test::TestOptions();
        o.max_procs = 100000;
        StartWith(o);
        CHILD_CHECK(goro::GetStats().procs == 1024, "procs=%d", goro::GetStats().procs);
        _exit(goro_test::child_failures.load() == 0 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "goro: Options::max_procs=100000: want at most 1024; using 1024\n");
}

// Negative is not the documented 0 ("the default"): said so, then the default.
TEST(OptionsTest, NegativeMaxProcsWarnsAndUsesTheDefault) {
  EXPECT_EXIT(
      {
        goro::Options o = goro_test::TestOptions();
        o.max_procs = -4;
        StartWith(o);
        CHILD_CHECK(goro::GetStats().procs >= 1, "procs=%d", goro::GetStats().procs);
        _exit(goro_test::child_failures.load() == 0 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0),
      "goro: ignoring Options::max_procs=-4: want 0 \\(the default\\) or 1 to 1024; using the default\n");
}

// GetOptions gives what the runtime runs with, after the environment and the
// checks above: the Ps resolved, GORODEBUG's slice and async preemption,
// the stack size raised to its minimum (and, in the second child, rounded up
// to whole pages, the size the stacks and the overflow message have).
TEST(OptionsTest, GetOptionsGivesTheSettingsInUse) {
  EXPECT_EXIT(
      {
        CHILD_CHECK(goro::GetOptions().max_procs == 0, "before start: max_procs=%d", goro::GetOptions().max_procs);
        setenv("GORODEBUG", "timeslice=1ms,asyncpreemptoff=1", 1);
        goro::Options o = goro_test::TestOptions();
        o.stack_size = 4096;
        StartWith(o);
        goro::Options used = goro::GetOptions();
        CHILD_CHECK(used.max_procs == o.max_procs, "max_procs=%d", used.max_procs);
        CHILD_CHECK(used.time_slice == absl::Milliseconds(1), "time_slice=%s",
                    absl::FormatDuration(used.time_slice).c_str());
        CHILD_CHECK(!used.async_preemption, "async_preemption on");
        CHILD_CHECK(used.stack_size == 64 * 1024, "stack_size=%zu", used.stack_size);
        _exit(goro_test::child_failures.load() == 0 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(
      {
        goro::Options o = goro_test::TestOptions();
        o.stack_size = 64 * 1024 + 1;
        StartWith(o);
        const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
        const size_t used = goro::GetOptions().stack_size;
        CHILD_CHECK(used == 64 * 1024 + page, "stack_size=%zu, want %zu", used, 64 * 1024 + page);
        _exit(goro_test::child_failures.load() == 0 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}


// Options are read once, by the call that starts the runtime. SleepFor on a
// plain thread does not need the runtime and does not start it; before, it
// started it with the defaults, and the Run that came next lost its Options
// without a word (here the process ran with the hardware's Ps, not 7).
TEST(OptionsTest, SleepForOnAPlainThreadLeavesTheOptionsToRun) {
  EXPECT_EXIT(
      {
        goro::SleepFor(absl::Milliseconds(1));
        goro::SleepUntil(absl::Now() + absl::Milliseconds(1));
        CHILD_CHECK(goro::GetOptions().max_procs == 0, "SleepFor started the runtime: max_procs=%d",
                    goro::GetOptions().max_procs);
        goro::Options o = goro_test::TestOptions();
        o.max_procs = 7;
        o.time_slice = absl::Milliseconds(3);
        StartWith(o);
        goro::Options used = goro::GetOptions();
        CHILD_CHECK(used.max_procs == 7, "max_procs=%d", used.max_procs);
        CHILD_CHECK(used.time_slice == absl::Milliseconds(3), "time_slice=%s",
                    absl::FormatDuration(used.time_slice).c_str());
        _exit(goro_test::child_failures.load() == 0 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

// After, a CondVar wait and io calls do need the runtime, and start it with
// the defaults. A Run after that names the Options it cannot apply, in one
// line, once: not again for the same Options, and not for a Run that sets
// none. Before, nothing was said (the anchored pattern wants exactly that
// line on stderr).
TEST(OptionsTest, RunAfterAnImplicitStartNamesTheOptionsItIgnores) {
  EXPECT_EXIT(
      {
        setenv("GOROMAXPROCS", "1", 1);
        unsetenv("GORODEBUG");
        goro::After(absl::Milliseconds(1));  // starts the runtime with the defaults
        goro::Options o = goro_test::TestOptions();
        o.max_procs = 7;
        o.time_slice = absl::Milliseconds(3);
        StartWith(o);
        StartWith(o);
        StartWith(goro::Options{});
        CHILD_CHECK(goro::GetOptions().max_procs == 1, "max_procs=%d", goro::GetOptions().max_procs);
        _exit(goro_test::child_failures.load() == 0 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0),
      "^goro: ignoring Options::max_procs=7, Options::time_slice=3ms passed to Run: the runtime has already "
      "started; using max_procs=1, time_slice=10ms\n$");
}

}  // namespace
