// Deadlock detection: while a thread waits in Run and every goroutine is
// blocked with nothing that could wake one, the process ends with Go's
// "fatal error: all goroutines are asleep - deadlock!". A pending timer is
// something that could wake one; so is a plain thread inside a goro call; and
// with no Run waiting there is nobody to report to.
//
// Every case runs in a child process: a false report would otherwise end the
// whole test binary.
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <thread>

#include "goro/goro.h"
#include "goro/io.h"
#include "gtest/gtest.h"
#include "test_util.h"

namespace {

constexpr char kDeadlock[] = "fatal error: all goroutines are asleep - deadlock!";

// In the child: Run(fn) and expect the deadlock report. If it does not come,
// the watchdog ends the child with a message that does not match.
void RunExpectingDeadlock(absl::AnyInvocable<void() &&> fn) {
  goro_test::Watchdog dog(absl::Seconds(20), "expected a deadlock report");
  goro::Run(std::move(fn), goro_test::TestOptions());
  fprintf(stderr, "Run returned\n");
}

// In the child: Run(fn) and exit 0 when it returns normally.
[[noreturn]] void RunExpectingReturn(absl::AnyInvocable<void() &&> fn) {
  goro_test::Watchdog dog(absl::Seconds(30), "Run did not return");
  goro::Run(std::move(fn), goro_test::TestOptions());
  _exit(0);
}

TEST(DeadlockTest, RecvForeverOnAChannel) {
  EXPECT_DEATH(RunExpectingDeadlock([] {
                 goro::Chan<int> c;
                 c.Recv();
               }),
               kDeadlock);
}

// The last I/O wait ends (io::Close of the fd, or its deadline), then every
// goroutine blocks for good: a deadlock, as Go reports it. The waiter is
// wired (LockOSThread), so that it runs again a little after it is readied;
// an M that ran out of work in between used to become the polling timer
// sleeper (the waiter still counted as waiting on I/O) and sit in
// epoll_wait for good, counted as running: the program hung, 8/20 (Close)
// and 15/20 (deadline) runs of the reviewer's version. Five children per
// way of ending the wait; without the fix most hang until their watchdog.
TEST(DeadlockTest, ReportedAfterTheLastIoWaitEnds) {
  for (bool by_close : {true, false}) {
    for (int round = 0; round < 5; ++round) {
      EXPECT_DEATH(RunExpectingDeadlock([by_close] {
                     int p[2];
                     if (pipe(p) != 0) abort();
                     goro::WaitGroup wg;
                     wg.Add(1);
                     goro::Go([&] {
                       goro::LockOSThread();
                       char b;
                       absl::Time deadline =
                           by_close ? absl::InfiniteFuture() : absl::Now() + absl::Milliseconds(20);
                       (void)goro::io::Read(p[0], &b, 1, deadline);
                       wg.Done();
                     });
                     goro::SleepFor(absl::Milliseconds(10));
                     if (by_close) (void)goro::io::Close(p[0]);
                     wg.Wait();
                     goro::Chan<int> never;
                     never.Recv();
                   }),
                   kDeadlock)
          << (by_close ? "io::Close" : "deadline") << ", round " << round;
    }
  }
}

__attribute__((noinline)) void RecvForeverInDeadlockTest(goro::Chan<int> c) {
  std::optional<int> v = c.Recv();
  fprintf(stderr, "received %d\n", v.value_or(-1));  // not a tail call
}

// Like Go's, the report lists every goroutine with what it waits for and
// where: the culprits are found from the report alone.
TEST(DeadlockTest, ReportListsEveryGoroutineWithItsBacktrace) {
  EXPECT_DEATH(RunExpectingDeadlock([] {
                 goro::Chan<int> c;
                 goro::Go([c] { RecvForeverInDeadlockTest(c); });
                 goro::Chan<int> d;
                 d.Send(1);
               }),
               "deadlock!\n(.|\n)*goroutine [0-9]+ \\[chan receive[^\n]*\n(\t[^\n]*\n)*"
               "\t[^\n]*RecvForeverInDeadlockTest(.|\n)*goroutine 1 \\[chan send");
}

// With schedtrace on, sysmon sleeps until the next trace line while every P
// is idle; the deadlock report, which sysmon makes 100 ms after the check
// that asks for it, came only with that line (here in 100 s). Fails (the
// watchdog's message instead of the report) if the tracing sleep ignores a
// pending check.
TEST(DeadlockTest, ReportedOnTimeWhileSchedtraceSleepsLong) {
  EXPECT_DEATH(
      {
        setenv("GORODEBUG", "schedtrace=100000", 1);
        RunExpectingDeadlock([] {
          goro::Chan<int> c;
          c.Recv();
        });
      },
      kDeadlock);
}

TEST(DeadlockTest, SendForeverOnAChannel) {
  EXPECT_DEATH(RunExpectingDeadlock([] {
                 goro::Chan<int> c;
                 c.Send(1);
               }),
               kDeadlock);
}

TEST(DeadlockTest, EveryGoroutineBlocked) {
  EXPECT_DEATH(RunExpectingDeadlock([] {
                 goro::Chan<int> a, b;
                 for (int i = 0; i < 10; ++i) {
                   goro::Go([a]() mutable { a.Recv(); });
                 }
                 goro::Go([b]() mutable { b.Send(1); });
                 goro::SleepFor(absl::Milliseconds(20));  // a timer, then none
                 goro::WaitGroup wg;
                 wg.Add(1);
                 wg.Wait();
               }),
               kDeadlock);
}

TEST(DeadlockTest, MutexLockedTwice) {
  EXPECT_DEATH(RunExpectingDeadlock([] {
                 goro::Mutex mu;
                 mu.Lock();
                 mu.Lock();
               }),
               kDeadlock);
}

TEST(DeadlockTest, CondVarWaitWithNoSignaller) {
  EXPECT_DEATH(RunExpectingDeadlock([] {
                 goro::Mutex mu;
                 goro::CondVar cv;
                 mu.Lock();
                 cv.Wait(mu);
               }),
               kDeadlock);
}

TEST(DeadlockTest, EmptySelect) {
  EXPECT_DEATH(RunExpectingDeadlock([] { goro::Select(); }), kDeadlock);
}

TEST(DeadlockTest, NilChannelRecv) {
  EXPECT_DEATH(RunExpectingDeadlock([] { goro::Chan<int>(nullptr).Recv(); }), kDeadlock);
}

TEST(DeadlockTest, NestedRunAllBlocked) {
  EXPECT_DEATH(RunExpectingDeadlock([] {
                 goro::Run([] {
                   goro::Chan<int> c;
                   c.Recv();
                 });
               }),
               kDeadlock);
}

// ---------------------------------------------------------------------------
// Not deadlocks.

// A goroutine wired to its thread (LockOSThread) that blocks for good is as
// stuck as any other. Fails (the watchdog's message instead of the report)
// if the M that sleeps with its wired goroutine does not check for deadlock:
// the other Ms went idle while it still counted as running, and it is the
// last to stop.
TEST(DeadlockTest, WiredGoroutineRecvForever) {
  EXPECT_DEATH(RunExpectingDeadlock([] {
                 goro::LockOSThread();
                 goro::Chan<int> c;
                 c.Recv();
               }),
               kDeadlock);
}

TEST(DeadlockTest, WiredGoroutineIsTheLastToBlock) {
  EXPECT_DEATH(RunExpectingDeadlock([] {
                 goro::Chan<int> a, b;
                 goro::Go([a]() mutable {
                   goro::LockOSThread();
                   goro::SleepFor(absl::Milliseconds(20));  // a timer, then none
                   a.Recv();
                 });
                 b.Recv();
               }),
               kDeadlock);
}

TEST(DeadlockTest, SleepingGoroutineIsNotADeadlock) {
  EXPECT_EXIT(RunExpectingReturn([] {
                goro::Chan<int> c;
                goro::Go([c]() mutable {
                  goro::SleepFor(absl::Milliseconds(300));  // the only thing pending is a timer
                  c.Send(1);
                });
                c.Recv();
              }),
              ::testing::ExitedWithCode(0), "");
}

TEST(DeadlockTest, RunsOwnSleepIsNotADeadlock) {
  EXPECT_EXIT(RunExpectingReturn([] { goro::SleepFor(absl::Milliseconds(300)); }),
              ::testing::ExitedWithCode(0), "");
}

TEST(DeadlockTest, PendingAfterInSelectIsNotADeadlock) {
  EXPECT_EXIT(RunExpectingReturn([] {
                goro::Chan<int> never;
                auto timeout = goro::After(absl::Milliseconds(300));
                std::optional<int> r;
                std::optional<absl::Time> t;
                goro::Select(goro::OnRecv(never, &r), goro::OnRecv(timeout, &t));
              }),
              ::testing::ExitedWithCode(0), "");
}

// A stopped goro::Timer has left the timer heap: it no longer keeps the
// deadlock check quiet, as a pending one does. Fails (the watchdog's
// message) if Stop leaves the entry behind.
TEST(DeadlockTest, StoppedTimerDoesNotHideADeadlock) {
  EXPECT_DEATH(RunExpectingDeadlock([] {
                 goro::Timer t(absl::Hours(1));
                 t.Stop();
                 goro::Chan<int> c;
                 c.Recv();
               }),
               kDeadlock);
}

TEST(DeadlockTest, CondVarWaitForIsNotADeadlock) {
  EXPECT_EXIT(RunExpectingReturn([] {
                goro::Mutex mu;
                goro::CondVar cv;
                mu.Lock();
                cv.WaitFor(mu, absl::Milliseconds(300));
                mu.Unlock();
              }),
              ::testing::ExitedWithCode(0), "");
}

TEST(DeadlockTest, LeakedBlockedGoroutineDoesNotStopAWorkingRun) {
  EXPECT_EXIT(RunExpectingReturn([] {
                goro::Go([] { goro::Chan<int>(nullptr).Recv(); });  // blocked forever
                goro::Chan<int> c;
                goro::Go([c]() mutable {
                  for (int i = 0; i < 100; ++i) c.Send(i);
                  c.Close();
                });
                for ([[maybe_unused]] int& v : c) goro::SleepFor(absl::Milliseconds(1));
              }),
              ::testing::ExitedWithCode(0), "");
}

// With no Run waiting, a blocked goroutine is nobody's deadlock.
TEST(DeadlockTest, BlockedGoroutineWithoutAWaitingRunIsNotReported) {
  EXPECT_EXIT(
      {
        goro_test::Watchdog dog(absl::Seconds(30));
        goro::Go([] {
          goro::Chan<int> c;
          c.Recv();  // blocks forever
        });
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        _exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

// A plain thread the runtime has never seen cannot be known to exist, so each
// peer thread below makes a goro call first and only then lets Run start.
void WaitUntilSet(const std::atomic<bool>& flag) {
  while (!flag.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

// A goroutine waiting in Run for a plain thread that is inside a goro call (a
// goro::SleepFor, then a Send) is not deadlocked: that thread can wake it.
[[noreturn]] void WaitOnSleepingThreadChild() {
  goro_test::Watchdog dog(absl::Seconds(30));
  goro_test::StartRuntime();
  goro::Chan<int> c;
  std::atomic<bool> known{false};
  std::thread sender([c, &known]() mutable {
    goro::SleepFor(absl::Milliseconds(1));  // the runtime knows this thread from here on
    known = true;
    goro::SleepFor(absl::Milliseconds(300));
    c.Send(7);
  });
  WaitUntilSet(known);
  int got = 0;
  goro::Run([&] { got = c.Recv().value_or(-1); }, goro_test::TestOptions());
  sender.join();
  _exit(got == 7 ? 0 : 1);
}

TEST(DeadlockTest, RunWaitingOnAPlainThreadInAGoroCallIsNotADeadlock) {
  EXPECT_EXIT(WaitOnSleepingThreadChild(), ::testing::ExitedWithCode(0), "");
}

// ... nor one waiting for a plain thread blocked in a channel operation.
[[noreturn]] void WaitOnServerThreadChild() {
  goro_test::Watchdog dog(absl::Seconds(30));
  goro_test::StartRuntime();
  goro::Chan<int> request;
  goro::Chan<int> reply;
  std::atomic<bool> known{false};
  std::thread server([request, reply, &known]() mutable {
    goro::SleepFor(absl::Milliseconds(1));  // the runtime knows this thread from here on
    known = true;
    int v = request.Recv().value_or(0);  // usually blocked here when Run starts
    reply.Send(v * 2);
  });
  WaitUntilSet(known);
  int got = 0;
  goro::Run(
      [&] {
        request.Send(21);
        got = reply.Recv().value_or(-1);
      },
      goro_test::TestOptions());
  server.join();
  _exit(got == 42 ? 0 : 1);
}

TEST(DeadlockTest, RunWaitingOnAPlainThreadBlockedInRecvIsNotADeadlock) {
  EXPECT_EXIT(WaitOnServerThreadChild(), ::testing::ExitedWithCode(0), "");
}

// ... nor one waiting for a plain thread that makes its first goro call
// only after every goroutine has blocked, if it comes soon: a thread just
// started to feed a goroutine cannot have called goro yet. The report waits
// 100 ms for such a call. Fails (the report) if it is made at once.
[[noreturn]] void WaitOnAThreadNotYetSeenChild() {
  goro_test::Watchdog dog(absl::Seconds(30));
  goro_test::StartRuntime();
  goro::Chan<int> c;
  std::thread feeder([c]() mutable {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));  // no goro call yet
    c.Send(7);
  });
  int got = 0;
  goro::Run([&] { got = c.Recv().value_or(-1); }, goro_test::TestOptions());
  feeder.join();
  _exit(got == 7 ? 0 : 1);
}

TEST(DeadlockTest, RunWaitingOnAPlainThreadNotYetSeenIsNotADeadlockIfItComesSoon) {
  EXPECT_EXIT(WaitOnAThreadNotYetSeenChild(), ::testing::ExitedWithCode(0), "");
}

// ... nor one waiting for a plain thread whose only goro call so far did not
// block: a send with room in the buffer, or a Lock or TryLock of a free
// Mutex. Such a call is the thread's first, and counts it from then on.
// Fails (the deadlock report) if only a blocking call or Go counts a thread.
enum class FirstCall { kBufferedSend, kLock, kTryLock };

[[noreturn]] void WaitOnThreadAfterNonBlockingCallChild(FirstCall first) {
  goro_test::Watchdog dog(absl::Seconds(30));
  goro_test::StartRuntime();
  goro::Chan<int> c(1);
  goro::Mutex mu;
  std::atomic<bool> known{false};
  std::thread peer([&] {
    if (first == FirstCall::kBufferedSend) {
      c.Send(1);
    } else if (first == FirstCall::kLock) {
      mu.Lock();
    } else if (!mu.TryLock()) {
      fprintf(stderr, "TryLock of a free Mutex failed\n");
      _exit(3);
    }
    known = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // awake, not in goro
    if (first == FirstCall::kBufferedSend) {
      c.Send(2);
    } else {
      mu.Unlock();
    }
  });
  WaitUntilSet(known);
  int got = 0;
  goro::Run(
      [&] {
        if (first == FirstCall::kBufferedSend) {
          got = c.Recv().value_or(-1) + c.Recv().value_or(-1);  // the second waits for the thread
        } else {
          mu.Lock();  // held by the thread until it wakes
          mu.Unlock();
          got = 3;
        }
      },
      goro_test::TestOptions());
  peer.join();
  _exit(got == 3 ? 0 : 1);
}

TEST(DeadlockTest, RunWaitingOnAPlainThreadThatSentWithoutBlockingIsNotADeadlock) {
  EXPECT_EXIT(WaitOnThreadAfterNonBlockingCallChild(FirstCall::kBufferedSend), ::testing::ExitedWithCode(0), "");
}

TEST(DeadlockTest, RunWaitingOnAPlainThreadHoldingAMutexIsNotADeadlock) {
  EXPECT_EXIT(WaitOnThreadAfterNonBlockingCallChild(FirstCall::kLock), ::testing::ExitedWithCode(0), "");
}

TEST(DeadlockTest, RunWaitingOnAPlainThreadHoldingAMutexFromTryLockIsNotADeadlock) {
  EXPECT_EXIT(WaitOnThreadAfterNonBlockingCallChild(FirstCall::kTryLock), ::testing::ExitedWithCode(0), "");
}


// A plain thread that exits was the last sign of life: once it has gone,
// nothing can wake the goroutine that Run waits for. The thread is known
// (a goro call) and awake (in a plain sleep, not a goro call) while every M
// goes idle, so the last M's check finds it awake; then it exits. Fails
// (the watchdog's message instead of the report) if a thread's exit does
// not check for deadlock: nobody ever looks again.
TEST(DeadlockTest, ReportedWhenTheLastAwakePlainThreadExits) {
  EXPECT_DEATH(
      {
        goro_test::StartRuntime();
        std::atomic<bool> known{false};
        std::thread helper([&known] {
          goro::SleepFor(absl::Milliseconds(1));  // the runtime knows this thread from here on
          known = true;
          std::this_thread::sleep_for(std::chrono::milliseconds(300));  // awake, not in goro
        });
        helper.detach();
        WaitUntilSet(known);
        RunExpectingDeadlock([] {
          goro::Chan<int> c;
          c.Recv();
        });
      },
      kDeadlock);
}


// A goro call from a pthread key destructor that runs after goro's own
// (which frees the thread's stand-in G) gets a new stand-in G, which the C
// library may never free: it runs key destructors for a few rounds only
// (PTHREAD_DESTRUCTOR_ITERATIONS, 4 in glibc), and this key re-arms itself
// every round, so the G made in the last round is leaked. Such a G must not
// count as an awake thread, or no deadlock is ever reported again. Fails
// (the watchdog's message instead of the report) if it is counted.
pthread_key_t rearming_key;
std::atomic<int> rearming_rounds{0};

void SleepAndRearm(void*) {
  goro::SleepFor(absl::Microseconds(100));  // parks on a stand-in G
  rearming_rounds++;
  pthread_setspecific(rearming_key, &rearming_key);
}

TEST(DeadlockTest, GoroCallsFromTheLastPthreadKeyDestructorsDoNotHideADeadlock) {
  if (goro_test::kTsanBuild) {
    GTEST_SKIP() << "ThreadSanitizer build: TSan's own per-thread state is gone by the last rounds of key "
                    "destructors, and TSan crashes in its interceptors there (docs/sanitizers.md)";
  }
  EXPECT_DEATH(
      {
        goro_test::StartRuntime();  // goro's key first: the lower index, destroyed first in a round
        pthread_key_create(&rearming_key, SleepAndRearm);
        std::thread t([] {
          pthread_setspecific(rearming_key, &rearming_key);
          goro::SleepFor(absl::Milliseconds(1));  // the runtime knows this thread from here on
        });
        t.join();
        if (rearming_rounds.load() < 2) {
          fprintf(stderr, "the key destructor ran %d times\n", rearming_rounds.load());
          _exit(1);
        }
        RunExpectingDeadlock([] {
          goro::Chan<int> c;
          c.Recv();
        });
      },
      kDeadlock);
}

// ... nor during exit(), when a static destructor joins a thread that used
// goro (a global pool, say) while another thread waits in Run for a blocked
// goroutine: that thread's exit is part of the program's. Fails (exit status
// 2 and the report) if a plain thread's exit checks for deadlock at once.
struct JoinsAtExit {
  std::atomic<bool> stop{false};
  std::thread worker;
  ~JoinsAtExit() {
    stop = true;
    worker.join();  // its exit makes it the last awake thread
  }
};

TEST(DeadlockTest, ThreadJoinedByAStaticDestructorIsNotADeadlock) {
  EXPECT_EXIT(
      {
        goro_test::Watchdog dog(absl::Seconds(30));
        goro_test::StartRuntime();
        std::atomic<bool> waiting{false};
        std::thread runner([&waiting] {
          goro::Run([&waiting] {
            waiting = true;
            static auto* c = new goro::Chan<int>;  // reachable, never destroyed
            c->Recv();
          });
        });
        runner.detach();
        WaitUntilSet(waiting);
        static JoinsAtExit pool;  // constructed after the runtime started
        std::atomic<bool> known{false};
        pool.worker = std::thread([&known] {
          goro::SleepFor(absl::Milliseconds(1));  // the runtime knows this thread from here on
          known = true;
          while (!pool.stop.load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
        });
        WaitUntilSet(known);
        std::this_thread::sleep_for(std::chrono::milliseconds(100));  // every M idle
        exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

// ... but exit() from main while another thread waits in Run for a goroutine
// that can never run again ends the program as asked: main leaving is no
// deadlock. (Main, the last awake thread, stays counted awake through exit():
// its stand-in G is freed only when a thread ends, never by exit().) Fails
// (exit status 2 and the report) if main's exit is checked like the end of
// any other thread.
TEST(DeadlockTest, ExitFromMainWhileRunWaitsIsNotADeadlock) {
  EXPECT_EXIT(
      {
        goro_test::Watchdog dog(absl::Seconds(30));
        goro_test::StartRuntime();  // the runtime knows this thread from here on
        std::atomic<bool> waiting{false};
        std::thread runner([&waiting] {
          goro::Run([&waiting] {
            waiting = true;
            // Held by a static pointer: reachable at exit (LeakSanitizer does
            // not scan goroutine stacks) and never destroyed under its waiter.
            static auto* c = new goro::Chan<int>;
            c->Recv();
          });
        });
        runner.detach();
        WaitUntilSet(waiting);
        std::this_thread::sleep_for(std::chrono::milliseconds(100));  // every M idle
        exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

// A Run begun during exit(), here from an atexit handler, whose goroutine
// blocks forever is a deadlock like any other: exit() would hang for good.
// The handler is registered before the runtime starts, so it runs after the
// runtime's own, which records that exit() has begun. Fails (the watchdog's
// message instead of the report) if every deadlock check is skipped once
// exit() has begun, not only those for the Runs begun before.
TEST(DeadlockTest, RunFromAnAtexitHandlerIsReported) {
  EXPECT_DEATH(
      {
        if (goro::GetStats().procs != 0) {
          fprintf(stderr, "the runtime started before the test registered its atexit handler\n");
          _exit(1);
        }
        std::atexit([] {
          RunExpectingDeadlock([] {
            goro::Chan<int> c;
            c.Recv();
          });
        });
        goro_test::StartRuntime();
        exit(0);
      },
      kDeadlock);
}

// A goroutine that exists when exit() begins does not run while the freeze
// at exit lasts (core/proc.cc, FreezeAtExit), and a plain thread's wait in
// Run for Run's own goroutine does not end the freeze at once. A Run begun
// during exit whose goroutine waits for one of them is no deadlock, though:
// the thread running exit() waits there, and sysmon ends the freeze once it
// has waited for about 100 ms (WatchExitingThread in core/sysmon.cc); the
// frozen goroutine sends, and Run returns. Here the goroutine wakes every
// millisecond to look whether the Run waits, and would then send. Fails
// with the deadlock report (or the watchdog's message) if the freeze lasts
// while the exiting thread waits, and with "goroutines ran" if goroutines
// from before exit ran during it before Run began to wait (status 3).
goro::Chan<int>* exit_chan;  // reachable: never destroyed
std::atomic<bool> exit_run_waits{false};
std::atomic<bool> exit_goroutine_ran{false};
TEST(DeadlockTest, RunDuringExitWaitingForAFrozenGoroutineEndsTheFreeze) {
  EXPECT_EXIT(
      {
        if (goro::GetStats().procs != 0) {
          fprintf(stderr, "the runtime started before the test registered its atexit handler\n");
          _exit(1);
        }
        std::atexit([] {  // runs after the runtime's handler
          // Busy, not asleep: a waiting exiting thread would end the freeze.
          exit_goroutine_ran = false;
          for (auto start = goro_test::Now(); goro_test::Since(start) < absl::Milliseconds(20);) {
          }
          if (exit_goroutine_ran.load()) {
            fprintf(stderr, "goroutines ran\n");
            _exit(3);
          }
          RunExpectingDeadlock([] {  // prints "Run returned" when it does
            exit_run_waits = true;
            exit_chan->Recv();
          });
        });
        goro_test::StartRuntime();
        exit_chan = new goro::Chan<int>;
        goro::Go([] {
          for (;;) {
            goro::SleepFor(absl::Milliseconds(1));
            exit_goroutine_ran = true;
            if (exit_run_waits.load()) exit_chan->Send(1);
          }
        });
        goro_test::Eventually([] { return exit_goroutine_ran.load(); });
        exit(0);
      },
      ::testing::ExitedWithCode(0), "Run returned");
}

}  // namespace
