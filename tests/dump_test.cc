// Goroutine dumps: DumpGoroutines and SIGQUIT.
//
// Each test fails if the dump misses a goroutine's id or what it waits for,
// lists goroutines that have finished, if SIGQUIT does not print the dump and
// exit with status 2, or if GORODEBUG=sigquitdump=0 does not leave SIGQUIT
// alone.
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>

#include <atomic>
#include <exception>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "goro/goro.h"
#include "gtest/gtest.h"
#include "test_util.h"

namespace {

// Parks in a channel receive; the work after it keeps the call from being a
// tail call, so this frame stays on the stack for the backtrace.
__attribute__((noinline)) int ParkedInDumpTest(goro::Chan<int> c) {
  std::optional<int> v = c.Recv();
  return v.value_or(0) + 1;
}

TEST(DumpTest, ParkedGoroutinesComeWithABacktrace) {
  std::string dump;
  goro_test::RunBounded([&] {
    goro::Chan<int> c;
    goro::WaitGroup done;
    done.Add(1);
    std::atomic<int> result{0};
    goro::Go([c, &done, &result] {
      result = ParkedInDumpTest(c);
      done.Done();
    });
    goro::SleepFor(absl::Milliseconds(50));
    std::ostringstream out;
    goro::DumpGoroutines(out);
    dump = out.str();
    c.Close();
    done.Wait();
    // libunwind is loaded now (for the backtrace); C++ exceptions must still
    // unwind through libgcc, across frames, as before.
    int caught = 0;
    for (int i = 0; i < 100; ++i) {
      try {
        [&] { [&] { throw std::runtime_error("after the dump"); }(); }();
      } catch (const std::runtime_error& e) {
        caught += std::string(e.what()) == "after the dump";
      }
    }
    EXPECT_EQ(caught, 100);
  });
  // The goroutine's own function, and the runtime frames it parked through.
  EXPECT_NE(dump.find("ParkedInDumpTest"), std::string::npos) << dump;
  EXPECT_NE(dump.find("ChanRecv"), std::string::npos) << dump;
}

__attribute__((noinline)) void ThrowFromDepth(int depth) {
  if (depth == 0) throw std::runtime_error("from deep down");
  ThrowFromDepth(depth - 1);
  asm volatile("");  // not a tail call
}

// libunwind is in the process (sysmon loads it; a dump uses it) but must not
// have taken unwinding from libgcc: an exception thrown through 40 frames of
// one goroutine and rethrown in another is caught, and pthread_exit's forced
// unwinding still runs destructors.
TEST(DumpTest, UnwindingStillBelongsToLibgcc) {
  int caught = 0;
  goro_test::RunBounded([&] {
    std::ostringstream out;
    goro::DumpGoroutines(out);
    goro::Chan<std::exception_ptr> handoff(1);
    goro::Go([handoff]() mutable {
      // Sent after the catch block: leaving it drops the thrower's hold on
      // the exception, and that must come before the send, or the thrower
      // may be the last holder and free it with no order TSan can see
      // against the other goroutine's read (libstdc++'s reference count is
      // not instrumented).
      std::exception_ptr e;
      try {
        ThrowFromDepth(40);
      } catch (...) {
        e = std::current_exception();
      }
      handoff.Send(std::move(e));
    });
    std::exception_ptr ep = handoff.Recv().value_or(nullptr);
    goro::WaitGroup wg;
    wg.Add(1);
    goro::Go([&] {
      try {
        std::rethrow_exception(ep);
      } catch (const std::runtime_error& e) {
        caught += std::string(e.what()) == "from deep down";
      }
      wg.Done();
    });
    wg.Wait();
  });
  EXPECT_EQ(caught, 1);

  static std::atomic<bool> destroyed{false};
  pthread_t t;
  ASSERT_EQ(pthread_create(
                &t, nullptr,
                [](void*) -> void* {
                  struct Guard {
                    ~Guard() { destroyed.store(true); }
                  } guard;
                  pthread_exit(nullptr);
                },
                nullptr),
            0);
  pthread_join(t, nullptr);
  EXPECT_TRUE(destroyed.load()) << "pthread_exit did not unwind the thread's frames";
}

TEST(DumpTest, ListsBlockedGoroutinesWithWhatTheyWaitFor) {
  std::string dump;
  std::atomic<int64_t> recv_id{0}, sleep_id{0}, done_id{0};
  goro_test::RunBounded([&] {
    goro::Chan<int> never;
    goro::WaitGroup parked, finished;
    parked.Add(2);
    finished.Add(1);
    goro::Go([never, &recv_id, &parked]() mutable {
      recv_id = goro::GoroutineId();
      parked.Done();
      never.Recv();
    });
    goro::Go([&sleep_id, &parked] {
      sleep_id = goro::GoroutineId();
      parked.Done();
      goro::SleepFor(absl::Seconds(30));
    });
    goro::Go([&done_id, &finished] {
      done_id = goro::GoroutineId();
      finished.Done();
    });
    parked.Wait();
    finished.Wait();
    goro::SleepFor(absl::Milliseconds(50));  // let both park and the third exit
    std::ostringstream out;
    goro::DumpGoroutines(out);
    dump = out.str();
    never.Close();  // releases the receiver
  });
  EXPECT_NE(dump.find(absl::StrCat("goroutine ", recv_id.load(), " [chan receive")), std::string::npos) << dump;
  EXPECT_NE(dump.find(absl::StrCat("goroutine ", sleep_id.load(), " [sleep")), std::string::npos) << dump;
  EXPECT_EQ(dump.find(absl::StrCat("goroutine ", done_id.load(), " [")), std::string::npos)
      << "a finished goroutine is listed:\n" << dump;
  EXPECT_NE(dump.find("[running]"), std::string::npos) << "the dumping goroutine is not listed:\n" << dump;
}

// A goroutine that calls goro::Run waits for Run's goroutine as "goro.Run",
// and a WaitGroup waiter as "sync.WaitGroup.Wait". Fails if Run waits on a
// WaitGroup inside (as it did: the dump said "[sync.WaitGroup.Wait]" for it).
TEST(DumpTest, NestedRunWaitsAsGoroRun) {
  std::string dump;
  std::atomic<int64_t> runner_id{0}, wg_id{0};
  goro_test::RunBounded([&] {
    goro::Chan<int> never;
    goro::WaitGroup parked, blocker, finished;
    parked.Add(2);
    blocker.Add(1);
    finished.Add(2);
    goro::Go([never, &runner_id, &parked, &finished]() mutable {
      runner_id = goro::GoroutineId();
      goro::Run([never, &parked]() mutable {
        parked.Done();
        never.Recv();
      });
      finished.Done();
    });
    goro::Go([&wg_id, &parked, &blocker, &finished] {
      wg_id = goro::GoroutineId();
      parked.Done();
      blocker.Wait();
      finished.Done();
    });
    parked.Wait();
    // Until both wait (a fixed sleep is not enough on a loaded machine).
    for (int i = 0; i < 10000; ++i) {
      std::ostringstream out;
      goro::DumpGoroutines(out);
      dump = out.str();
      if (dump.find(absl::StrCat("goroutine ", wg_id.load(), " [sync.WaitGroup.Wait")) != std::string::npos &&
          dump.find(absl::StrCat("goroutine ", runner_id.load(), " [running]")) == std::string::npos &&
          dump.find(absl::StrCat("goroutine ", runner_id.load(), " [runnable]")) == std::string::npos) {
        break;
      }
      goro::SleepFor(absl::Milliseconds(1));
    }
    never.Close();  // ends the nested Run
    blocker.Done();
    finished.Wait();  // both are out of their waits before the WaitGroups go
  });
  EXPECT_NE(dump.find(absl::StrCat("goroutine ", runner_id.load(), " [goro.Run")), std::string::npos) << dump;
  EXPECT_NE(dump.find(absl::StrCat("goroutine ", wg_id.load(), " [sync.WaitGroup.Wait")), std::string::npos)
      << dump;
}

[[noreturn]] void QuitWithBlockedGoroutine() {
  goro_test::StartRuntime();
  goro::Chan<int> never;
  goro::Go([never] { ParkedInDumpTest(never); });
  // Until it has parked (a fixed sleep is not enough on a loaded machine).
  for (int i = 0; i < 10000; ++i) {
    std::ostringstream out;
    goro::DumpGoroutines(out);
    if (out.str().find("[chan receive") != std::string::npos) break;
    goro::SleepFor(absl::Milliseconds(1));
  }
  raise(SIGQUIT);
  _exit(0);  // not reached if the dump runs
}

// How long a goroutine has waited is timed from a coarse clock that sysmon
// keeps; it stood still while every P was idle, so a goroutine that parked
// just after an idle spell was shown as waiting the whole spell ("[chan
// receive, 1 s]" after 20 ms). Fails if the clock is not brought up to date
// when the runtime wakes from idle. (Passes vacuously if something kept a
// P busy during the spell.)
TEST(DumpTest, WaitAfterAnIdleSpellIsTimedFromItsStart) {
  goro_test::RunBounded([] {});
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // every P idle, sysmon asleep
  std::string dump;
  int64_t id = -1;
  goro_test::RunBounded([&] {
    goro::Chan<int> c;
    goro::Chan<int64_t> ids(1);
    goro::WaitGroup done;
    done.Add(1);
    goro::Go([c, ids, &done]() mutable {
      ids.Send(goro::GoroutineId());
      c.Recv();
      done.Done();
    });
    id = ids.Recv().value_or(-1);
    goro::SleepFor(absl::Milliseconds(20));
    std::ostringstream out;
    goro::DumpGoroutines(out);
    dump = out.str();
    c.Close();
    done.Wait();
  });
  const std::string line = absl::StrCat("goroutine ", id, " [chan receive, ");
  size_t at = dump.find(line);
  ASSERT_NE(at, std::string::npos) << dump;
  std::string waited = dump.substr(at + line.size(), dump.find(']', at) - at - line.size());
  EXPECT_TRUE(absl::EndsWith(waited, " ms") && std::stoi(waited) < 1000)
      << "a goroutine parked 20 ms ago shown waiting " << waited << "\n" << dump;
}

TEST(DumpTest, SigquitPrintsTheDumpAndExitsWithStatus2) {
  EXPECT_EXIT(QuitWithBlockedGoroutine(), ::testing::ExitedWithCode(2),
              "SIGQUIT: quit(.|\n)*goroutine [0-9]+ \\[chan receive(.|\n)*ParkedInDumpTest");
}

std::atomic<bool> spinner_started{false};

// Runs on its own P and never reaches a safe point (no runtime call; the
// child turns async preemption off), so it is running when SIGQUIT comes.
__attribute__((noinline)) void SpinInDumpTest() {
  spinner_started.store(true);
  for (;;) asm volatile("pause");
}

__attribute__((noinline)) void RaiseQuitInDumpTest() {
  raise(SIGQUIT);  // on this thread: the spinner's thread is asked
  asm volatile("");  // not a tail call
}

[[noreturn]] void QuitWithRunningGoroutine() {
  goro::Options opts = goro_test::TestOptions();
  opts.max_procs = 2;
  opts.async_preemption = false;
  goro::Run(
      [] {
        goro::Go([] { SpinInDumpTest(); });
        while (!spinner_started.load()) goro::SleepFor(absl::Milliseconds(1));
        RaiseQuitInDumpTest();
      },
      opts);
  _exit(0);  // not reached if the dump runs
}

// A goroutine running on another thread is walked by that thread, from the
// context of a SIGQUIT sent to it; the one that took the signal is walked
// from its own signal context.
TEST(DumpTest, SigquitWalksRunningGoroutinesOnTheirThreads) {
  if (goro_test::kTsanBuild) {
    GTEST_SKIP() << "ThreadSanitizer build: TSan runs a signal handler at the thread's next interceptor call, "
                    "which a call-free spinner never makes (docs/sanitizers.md)";
  }
  EXPECT_EXIT(QuitWithRunningGoroutine(), ::testing::ExitedWithCode(2),
              "goroutine [0-9]+ \\[running\\]:\n\t[^\n]*SpinInDumpTest(.|\n)*"
              "goroutine 1 \\[running\\]:\n(\t[^\n]*\n)*\t[^\n]*RaiseQuitInDumpTest");
}

TEST(DumpTest, GorodebugSigquitdumpOffLeavesTheDefaultAction) {
  EXPECT_EXIT(
      {
        setenv("GORODEBUG", "sigquitdump=0", 1);
        QuitWithBlockedGoroutine();
      },
      ::testing::KilledBySignal(SIGQUIT), "");
}

}  // namespace
