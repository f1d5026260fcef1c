// goro from a static constructor of the program, before main()
// (docs/robustness.md). The runtime's globals are built by initialisers of
// priority 101, so goro calls work from any initialiser of default priority,
// whatever the link order. This file is linked before libgoro.a, so its
// initialisers run before the library's default-priority ones: a runtime
// global left to one of those would still be unbuilt (or be rebuilt, losing
// what the call did) when the constructor below calls goro.
//
// Each case is a death test: gtest re-executes this binary ("threadsafe"
// style) with the parent's environment, so setting GORO_STATIC_INIT_CASE
// before EXPECT_EXIT makes the child's static constructor do that case's goro
// calls; the child's test body then checks what they recorded.
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <string>

#include "goro/goro.h"
#include "gtest/gtest.h"
#include "test_util.h"

namespace {

// What the static constructor saw. Constant-initialised (constinit): a
// dynamically initialised object here could be initialised after the
// constructor below wrote it.
struct Record {
  bool ran = false;          // the case's calls all returned
  int procs_before = -1;     // GetStats().procs before any call that starts the runtime
  int procs_after = -1;      // and after them
  int64_t id_in_run = 0;     // GoroutineId() inside Run
  int64_t id_outside = -1;   // GoroutineId() on the constructor's thread
  int chan_value = 0;        // received from a buffered channel
  int goroutines_ran = 0;    // goroutines started with Go that ran
  bool after_fired = false;  // After's channel delivered
  bool trace_ok = false;     // trace::Start (and Stop) returned OK
  bool trace_refused = false;  // trace::Start said FailedPrecondition
  bool mutex_trylock = false;  // TryLock on an unlocked Mutex
};
constinit Record record;

constexpr char kCaseVar[] = "GORO_STATIC_INIT_CASE";

// Calls that do not start the runtime: on a plain thread before any
// goroutine exists.
void PlainCalls() {
  record.procs_before = goro::GetStats().procs;
  (void)goro::GetOptions();
  record.id_outside = goro::GoroutineId();
  goro::Yield();
  goro::Checkpoint();
  goro::SleepFor(absl::Milliseconds(1));
  goro::LockOSThread();
  goro::UnlockOSThread();
  { goro::NoPreemptScope no_preempt; }
  goro::Syscall([] { return 0; });
  absl::Status s = goro::trace::Start("/dev/null");
  record.trace_refused = absl::IsFailedPrecondition(s);
  goro::Chan<int> c(1);
  c.Send(7);
  record.chan_value = c.Recv().value_or(0);
  static goro::Mutex mu;
  mu.Lock();
  mu.Unlock();
  record.mutex_trylock = mu.TryLock();
  if (record.mutex_trylock) mu.Unlock();
  goro::WaitGroup wg;
  wg.Add(1);
  wg.Done();
  wg.Wait();
  record.procs_after = goro::GetStats().procs;
}

// Calls that start the runtime (Run first, so that its Options are used),
// then goroutines started from the constructor's thread.
void StartingCalls() {
  record.procs_before = goro::GetStats().procs;
  goro::Options opts;
  opts.max_procs = 1;  // the test body's tight loop needs the signal to give the P back
  goro::Run(
      [] {
        record.id_in_run = goro::GoroutineId();
        goro::SleepFor(absl::Milliseconds(1));
        goro::Chan<int> c;
        goro::Go([c]() mutable { c.Send(7); });
        record.chan_value = c.Recv().value_or(0);
      },
      opts);
  std::atomic<int> ran{0};
  goro::WaitGroup wg;
  for (int i = 0; i < 4; ++i) {
    wg.Add(1);
    goro::Go([&] {
      goro::Yield();
      ran.fetch_add(1);
      wg.Done();
    });
  }
  wg.Wait();
  record.goroutines_ran = ran.load();
  record.after_fired = goro::After(absl::Milliseconds(1)).Recv().has_value();
  record.trace_ok = goro::trace::Start("/dev/null").ok() && goro::trace::Stop().ok();
  record.procs_after = goro::GetStats().procs;
}

struct CallGoroBeforeMain {
  CallGoroBeforeMain() {
    const char* which = getenv(kCaseVar);
    if (which == nullptr) return;
    // A child that hangs here must still end (gtest's child has no watchdog yet).
    alarm(60);
    if (strcmp(which, "plain") == 0) PlainCalls();
    if (strcmp(which, "start") == 0) StartingCalls();
    alarm(0);
    record.ran = true;
  }
} call_goro_before_main;

// A loop with no calls and no safe points (as in preempt_test.cc).
__attribute__((noinline)) void HogUntil(const std::atomic<bool>* stop) {
  while (!stop->load(std::memory_order_relaxed)) {
  }
}

// Runs `checks` in a child whose static constructor did `case_name`'s calls.
void ExpectCaseInChild(const char* case_name, void (*checks)()) {
  setenv(kCaseVar, case_name, 1);
  EXPECT_EXIT(
      {
        checks();
        _exit(goro_test::child_failures.load() == 0 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
  unsetenv(kCaseVar);
}

void CheckPlainCalls() {
  CHILD_CHECK(record.ran, "the static constructor's goro calls did not all return");
  CHILD_CHECK(record.procs_before == 0, "procs %d before start", record.procs_before);
  CHILD_CHECK(record.procs_after == 0, "procs %d: a plain call started the runtime", record.procs_after);
  CHILD_CHECK(record.id_outside == 0, "GoroutineId() %lld off a goroutine", (long long)record.id_outside);
  CHILD_CHECK(record.trace_refused, "trace::Start before start was not FailedPrecondition");
  CHILD_CHECK(record.chan_value == 7, "received %d", record.chan_value);
  CHILD_CHECK(record.mutex_trylock, "TryLock of an unlocked Mutex failed");
  // The runtime still starts and works normally in main.
  goro_test::Watchdog dog(absl::Seconds(30), "Run in main after goro calls before main");
  int64_t id = 0;
  goro::Run([&] { id = goro::GoroutineId(); });
  CHILD_CHECK(id > 0, "id %lld in Run", (long long)id);
}

void CheckRuntimeStartedBeforeMain() {
  CHILD_CHECK(record.ran, "the static constructor's goro calls did not all return");
  CHILD_CHECK(record.procs_before == 0, "procs %d before start", record.procs_before);
  CHILD_CHECK(record.procs_after == 1, "procs %d, want the 1 Run asked for", record.procs_after);
  CHILD_CHECK(record.id_in_run > 0, "id %lld in Run", (long long)record.id_in_run);
  CHILD_CHECK(record.chan_value == 7, "received %d", record.chan_value);
  CHILD_CHECK(record.goroutines_ran == 4, "%d of 4 goroutines ran", record.goroutines_ran);
  CHILD_CHECK(record.after_fired, "After's channel delivered nothing");
  CHILD_CHECK(record.trace_ok, "trace::Start/Stop failed after the runtime started");
  if (goro_test::kTsanBuild) return;  // no async preemption to check (docs/sanitizers.md)
  // Async preemption still works: the preemptible code ranges registered at
  // start-up were not reset by a later initialiser. On the one P, only the
  // signal can take it back from the hog for the main goroutine.
  goro_test::Watchdog dog(absl::Seconds(30), "the hog was never preempted");
  static std::atomic<bool> stop{false};
  goro::Run([] {
    goro::WaitGroup wg;
    wg.Add(1);
    goro::Go([&] {
      HogUntil(&stop);
      wg.Done();
    });
    goro::SleepFor(absl::Milliseconds(20));  // the hog has the P
    stop = true;
    wg.Wait();
  });
  CHILD_CHECK(goro::GetStats().async_preemptions > 0, "no async preemption counted");
}

TEST(StaticInitTest, PlainThreadCallsWorkBeforeMain) { ExpectCaseInChild("plain", CheckPlainCalls); }

TEST(StaticInitTest, RuntimeStartedBeforeMainWorksInMain) {
  ExpectCaseInChild("start", CheckRuntimeStartedBeforeMain);
}

}  // namespace
