// goro::LockOSThread / UnlockOSThread (Go's runtime.LockOSThread).
//
// A locked goroutine runs only on its thread, and that thread runs nothing
// else, across every kind of switch: Yield, SleepFor, blocking on a channel, a
// Mutex or a WaitGroup, and asynchronous preemption. Calls nest; an Unlock
// without a Lock does nothing; after the last Unlock the goroutine may move.
//
// The scenarios run in a child process (EXPECT_EXIT) with two Ps, 1 ms slices
// and call-free assembly hogs (spin_loop_x86_64_sysv_elf_gas.S) on the Ps, so
// that goroutines are preempted and moved between threads all the time. A
// child reports every failed check on stderr and exits non-zero; its watchdog
// turns a hang into a failure.
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "goro/goro.h"
#include "gtest/gtest.h"
#include "test_util.h"

// tests/spin_loop_x86_64_sysv_elf_gas.S
extern "C" uint64_t goro_test_spin_until(const volatile uint8_t* stop, uint64_t* counter);

namespace {

using goro_test::Now;
using goro_test::Since;
using goro_test::ThreadId;

struct Spin {
  std::atomic<uint8_t> stop{0};
  std::atomic<uint64_t> counter{0};

  uint64_t Run() {
    return goro_test_spin_until(reinterpret_cast<const volatile uint8_t*>(&stop),
                                reinterpret_cast<uint64_t*>(&counter));
  }
};

using goro_test::child_failures;
using goro_test::U;

[[noreturn]] void ExitChild() {
  goro::Stats s = goro::GetStats();
  fprintf(stderr, "at exit: async_preemptions=%llu cooperative_preemptions=%llu handoffs=%llu threads=%d\n",
          U(s.async_preemptions), U(s.cooperative_preemptions), U(s.handoffs), s.threads);
  _exit(child_failures.load() == 0 ? 0 : 1);
}

// What the goroutines around the locked one watch. `locked_tid` is published
// before `locked` is set and stays valid while it is.
struct LockWatch {
  std::atomic<int64_t> locked_tid{0};
  std::atomic<bool> locked{false};
  std::atomic<uint64_t> samples_while_locked{0};
  std::atomic<uint64_t> intrusions{0};
  std::atomic<bool> stop{false};
};

// An ordinary goroutine: runs in short bursts (some long enough to be
// preempted), sleeps and yields, and samples the thread it runs on. A sample
// counts only if the locked period covered it entirely (locked before and
// after reading the thread id), so a sample on the locked thread is a
// goroutine that ran there while it was wired to another.
void Recorder(LockWatch* w, int seed) {
  uint64_t n = static_cast<uint64_t>(seed);
  while (!w->stop.load()) {
    bool before = w->locked.load();
    int64_t tid = ThreadId();
    bool after = w->locked.load();
    if (before && after) {
      w->samples_while_locked.fetch_add(1);
      if (tid == w->locked_tid.load()) w->intrusions.fetch_add(1);
    }
    switch (n++ % 3) {
      case 0:
        goro::Yield();
        break;
      case 1:
        goro::SleepFor(absl::Microseconds(100));
        break;
      default:
        goro_test::Spin(absl::Microseconds(1500));  // past a slice: preempted
        break;
    }
  }
}

// Runs on the locked goroutine: switches away in every way goro has and
// checks the thread afterwards. Returns how often it found itself elsewhere;
// adds its preemptions inside call-free loops to *preempted.
uint64_t ExerciseLocked(int64_t tid, int rounds, uint64_t* preempted) {
  uint64_t moved = 0;
  auto check = [&](const char* after) {
    int64_t now = ThreadId();
    if (now != tid && moved++ == 0) {
      fprintf(stderr, "locked goroutine moved from thread %lld to %lld after %s\n", static_cast<long long>(tid),
              static_cast<long long>(now), after);
    }
  };
  for (int r = 0; r < rounds; ++r) {
    goro::WaitGroup helpers;
    goro::Yield();
    check("Yield");
    goro::SleepFor(absl::Microseconds(500));
    check("SleepFor");

    goro::Chan<int> ch;
    helpers.Add(1);
    goro::Go([ch, &helpers]() mutable {
      goro::SleepFor(absl::Milliseconds(1));
      ch.Send(1);
      helpers.Done();
    });
    ch.Recv();  // blocks until the helper sends
    check("Chan::Recv");

    goro::Mutex mu;
    goro::Chan<int> holding;
    helpers.Add(1);
    goro::Go([&mu, holding, &helpers]() mutable {
      mu.Lock();
      holding.Send(1);
      goro::SleepFor(absl::Milliseconds(1));
      mu.Unlock();
      helpers.Done();
    });
    holding.Recv();
    mu.Lock();  // blocks until the helper unlocks
    check("Mutex::Lock");
    mu.Unlock();

    Spin spin;
    helpers.Add(1);
    goro::Go([&spin, &helpers] {
      goro::SleepFor(absl::Milliseconds(4));
      spin.stop = 1;
      helpers.Done();
    });
    uint64_t p0 = goro::CurrentGoroutinePreemptions();
    spin.Run();  // a call-free loop for a few slices: preempted
    *preempted += goro::CurrentGoroutinePreemptions() - p0;
    check("preemption");

    helpers.Wait();  // blocks on a WaitGroup
    check("WaitGroup::Wait");
  }
  return moved;
}

enum class Plan {
  kSingle,       // Lock ... Unlock
  kNested,       // Lock Lock Unlock ... (still locked) ... Unlock
  kUnlockFirst,  // Unlock Unlock (no-ops) Lock ... Unlock
};

// Fails if the locked goroutine is ever found on another thread (the M is not
// kept for it across a block or a preemption), if another goroutine is seen
// on its thread while it is locked (the M runs other work while its goroutine
// is away), if nesting or an unmatched Unlock breaks the count (the goroutine
// is not locked where it should be: it moves), or if it never moves after the
// last Unlock (still wired). Checked by hand: with LockOSThread not wiring, or
// UnlockOSThread letting the count go below zero, the locked goroutine moves
// dozens of times and recorders run on its thread.
[[noreturn]] void LockChild(Plan plan) {
  goro_test::Watchdog dog(absl::Seconds(25), "LockOSThread scenario");
  constexpr int kHogs = 3;
  constexpr int kRecorders = 3;
  static LockWatch watch;
  static uint64_t moved_while_locked = 0, preempted_while_locked = 0;
  static bool moved_after_unlock = false;
  goro::Options opts;
  opts.max_procs = 2;
  opts.time_slice = absl::Milliseconds(1);
  goro::Run(
      [plan] {
        static Spin hogs[kHogs];
        goro::WaitGroup others;
        others.Add(kHogs + kRecorders);
        for (auto& h : hogs) {
          goro::Go([&h, &others] {
            h.Run();
            others.Done();
          });
        }
        for (int i = 0; i < kRecorders; ++i) {
          goro::Go([i, &others] {
            Recorder(&watch, i);
            others.Done();
          });
        }
        goro::WaitGroup locked_done;
        locked_done.Add(1);
        goro::Go([plan, &locked_done] {
          switch (plan) {
            case Plan::kSingle:
              goro::LockOSThread();
              break;
            case Plan::kNested:
              goro::LockOSThread();
              goro::LockOSThread();
              goro::UnlockOSThread();  // one of two: still locked
              break;
            case Plan::kUnlockFirst:
              goro::UnlockOSThread();  // not locked: no-ops, the count stays 0
              goro::UnlockOSThread();
              goro::LockOSThread();
              break;
          }
          const int64_t tid = ThreadId();
          watch.locked_tid = tid;
          watch.locked = true;
          moved_while_locked = ExerciseLocked(tid, 15, &preempted_while_locked);
          watch.locked = false;
          goro::UnlockOSThread();
          if (plan == Plan::kNested) goro::UnlockOSThread();  // harmless: back to 0
          // Unlocked: among hogs and recorders on two Ps, it soon runs
          // elsewhere.
          auto start = Now();
          while (!moved_after_unlock && Since(start) < absl::Seconds(10)) {
            goro::SleepFor(absl::Microseconds(200));
            goro_test::Spin(absl::Milliseconds(2));
            moved_after_unlock = ThreadId() != tid;
          }
          locked_done.Done();
        });
        locked_done.Wait();
        watch.stop = true;
        for (auto& h : hogs) h.stop = 1;
        others.Wait();
      },
      opts);
  fprintf(stderr, "while locked: %llu recorder samples, %llu preemptions of the locked goroutine\n",
          U(watch.samples_while_locked.load()), U(preempted_while_locked));
  CHILD_CHECK(moved_while_locked == 0, "the locked goroutine moved %llu times", U(moved_while_locked));
  CHILD_CHECK(watch.intrusions.load() == 0, "other goroutines ran on the locked thread %llu times",
              U(watch.intrusions.load()));
  CHILD_CHECK(watch.samples_while_locked.load() > 0, "no recorder ran while the goroutine was locked");
  CHILD_CHECK(preempted_while_locked > 0, "the locked goroutine was never preempted: the test proved little");
  CHILD_CHECK(moved_after_unlock, "after the last Unlock the goroutine never left its thread in 10 s");
  ExitChild();
}

TEST(LockOSThreadTest, LockedGoroutineKeepsItsThreadAndHasItAlone) {
  SKIP_WITHOUT_ASYNC_PREEMPTION();
  EXPECT_EXIT(LockChild(Plan::kSingle), ::testing::ExitedWithCode(0), "");
}

TEST(LockOSThreadTest, NestedLocksNeedAsManyUnlocks) {
  SKIP_WITHOUT_ASYNC_PREEMPTION();
  EXPECT_EXIT(LockChild(Plan::kNested), ::testing::ExitedWithCode(0), "");
}

TEST(LockOSThreadTest, UnlockWithoutLockIsANoOp) {
  SKIP_WITHOUT_ASYNC_PREEMPTION();
  EXPECT_EXIT(LockChild(Plan::kUnlockFirst), ::testing::ExitedWithCode(0), "");
}

// Off a goroutine both calls do nothing (a plain thread is its own thread).
TEST(LockOSThreadTest, PlainThreadCallsAreNoOps) {
  goro_test::StartRuntime();
  goro::LockOSThread();
  goro::UnlockOSThread();
  goro::UnlockOSThread();
  std::thread t([] {
    goro::LockOSThread();
    goro::UnlockOSThread();
  });
  t.join();
  goro_test::RunBounded([] {
    goro::WaitGroup wg;
    wg.Add(4);
    for (int i = 0; i < 4; ++i) {
      goro::Go([&wg] {
        goro::SleepFor(absl::Milliseconds(1));
        wg.Done();
      });
    }
    wg.Wait();
  });
}

// A goroutine that exits while locked ends its thread, as in Go, and the
// runtime carries on without it. Fails if such a thread stays wired to the
// dead goroutine (each exit then strands a thread, later goroutines need new
// ones and the runtime eventually cannot run what remains), or if the ended
// threads stay counted: either way the thread count grows with the exits.
TEST(LockOSThreadTest, GoroutineExitingLockedLeavesItsThreadUsable) {
  goro_test::RunBounded([] {
    constexpr int kExits = 20;
    const int threads_before = goro::GetStats().threads;
    for (int i = 0; i < kExits; ++i) {
      goro::WaitGroup wg;
      wg.Add(1);
      goro::Go([&wg] {
        goro::LockOSThread();
        wg.Done();
      });  // exits locked
      wg.Wait();
    }
    goro::WaitGroup wg;
    wg.Add(8);
    std::atomic<int> done{0};
    for (int i = 0; i < 8; ++i) {
      goro::Go([&] {
        for (int j = 0; j < 10; ++j) {
          goro::SleepFor(absl::Microseconds(200));
          goro_test::Spin(absl::Microseconds(200));
        }
        ++done;
        wg.Done();
      });
    }
    wg.Wait();
    EXPECT_EQ(done.load(), 8);
    const int threads_after = goro::GetStats().threads;
    EXPECT_LT(threads_after - threads_before, kExits / 2)
        << "threads before " << threads_before << ", after " << threads_after;
  });
}

// A wired goroutine may change its thread's kernel state - here its own
// filesystem context (unshare(CLONE_FS), then chdir, which per thread is
// harmless) - and start goroutines meanwhile. The threads the runtime starts
// for them must not be copies of the wired one, which would share its
// working directory and run every goroutine there for ever (the same holds
// for a network namespace, CPU affinity, a scheduling policy): they are made
// by the runtime's template thread. Fails if any of those goroutines, each
// wired to a thread started for it, runs in the wired goroutine's directory:
// before the template thread, all six did. One P, so that the wired thread
// is the only thread when it changes (with two, a spare thread may have been
// started before, and those it starts are rightly clean).
[[noreturn]] void WiredGoroutineStartsGoroutinesChild() {
  goro_test::Watchdog dog(absl::Seconds(30), "wired goroutine starting goroutines");
  const std::string dir = goro_test::OtherDirectory();
  goro::Options opts;
  opts.max_procs = 1;
  goro::Run(
      [&] {
        goro::LockOSThread();
        const std::string before = goro_test::WorkingDirectory();
        CHILD_CHECK(unshare(CLONE_FS) == 0, "unshare(CLONE_FS): %s", strerror(errno));
        CHILD_CHECK(chdir(dir.c_str()) == 0, "chdir %s: %s", dir.c_str(), strerror(errno));
        const int threads_before = goro::GetStats().threads;
        const int in_dir = goro_test::WiredGoroutinesWithCwd(dir, 6);
        CHILD_CHECK(in_dir == 0, "%d of 6 goroutines started from the wired goroutine ran in its directory %s",
                    in_dir, dir.c_str());
        CHILD_CHECK(goro::GetStats().threads >= threads_before + 5, "only %d threads started for 6 wired goroutines",
                    goro::GetStats().threads - threads_before);
        CHILD_CHECK(chdir(before.c_str()) == 0, "chdir back: %s", strerror(errno));
        goro::UnlockOSThread();
      },
      opts);
  ExitChild();
}

TEST(LockOSThreadTest, ThreadsStartedForAWiredGoroutineAreNotCopiesOfItsThread) {
  EXPECT_EXIT(WiredGoroutineStartsGoroutinesChild(), ::testing::ExitedWithCode(0), "");
}

// A goroutine wires itself, changes its thread's kernel state in a way it
// does not undo - its own filesystem context: unshare(CLONE_FS), then chdir -
// and exits still wired: Go's way to throw such a thread away. The thread
// must end, and no goroutine may run in that directory afterwards. Fails if
// the thread's kernel id is still in /proc/self/task 10 s later, or if any
// of the goroutines started afterwards (one at a time, then several wired,
// each on a thread of its own) runs in the directory. Before, goro unwired
// the thread and kept it: with one P it went on running every goroutine,
// all of them in the directory.
[[noreturn]] void GoroutineExitingWiredChild() {
  goro_test::Watchdog dog(absl::Seconds(40), "goroutine exiting wired");
  const std::string dir = goro_test::OtherDirectory();
  goro::Options opts;
  opts.max_procs = 1;
  goro::Run(
      [&] {
        goro::Chan<int64_t> tid;
        goro::Go([&dir, tid]() mutable {
          goro::LockOSThread();
          CHILD_CHECK(unshare(CLONE_FS) == 0, "unshare(CLONE_FS): %s", strerror(errno));
          CHILD_CHECK(chdir(dir.c_str()) == 0, "chdir %s: %s", dir.c_str(), strerror(errno));
          tid.Send(ThreadId());
        });  // exits wired
        const std::string task = "/proc/self/task/" + std::to_string(tid.Recv().value_or(0));
        bool ended = goro_test::Eventually([&] { return access(task.c_str(), F_OK) != 0; }, absl::Seconds(10));
        CHILD_CHECK(ended, "%s, the thread of a goroutine that exited wired, still exists", task.c_str());
        int in_dir = 0;
        for (int i = 0; i < 50; ++i) {
          goro::Chan<int> done;
          goro::Go([&, done]() mutable {
            if (goro_test::WorkingDirectory() == dir) ++in_dir;
            done.Send(1);
          });
          done.Recv();
        }
        if (goro_test::WorkingDirectory() == dir) ++in_dir;
        in_dir += goro_test::WiredGoroutinesWithCwd(dir, 4);
        CHILD_CHECK(in_dir == 0, "%d goroutines ran in the directory %s of a thread whose goroutine exited wired",
                    in_dir, dir.c_str());
      },
      opts);
  ExitChild();
}

TEST(LockOSThreadTest, GoroutineExitingWiredEndsItsThread) {
  EXPECT_EXIT(GoroutineExitingWiredChild(), ::testing::ExitedWithCode(0), "");
}

// A locked goroutine that blocks or yields while nothing else runs: its
// thread sleeps until the goroutine is handed back to it, and whichever thread
// picks the goroutine up gives it its P and goes idle. Nothing is deadlocked:
// a timer is pending or the goroutine is runnable. Fails if the deadlock check
// counts the wired thread as asleep while it is being handed its goroutine
// ("fatal error: all goroutines are asleep - deadlock!"), or if the hand-over
// loses the goroutine (the watchdog fires). Before 5f27dac it failed every
// run: StartLockedM went idle while the M it had just woken still counted as
// asleep.
TEST(LockOSThreadTest, LockedGoroutineBlockingAloneIsNotADeadlock) {
  goro_test::RunBounded(
      [] {
        for (int i = 0; i < 50; ++i) {
          goro::WaitGroup wg;
          wg.Add(1);
          goro::Go([&wg, i] {
            goro::LockOSThread();
            const int64_t tid = ThreadId();
            if (i % 2 == 0) {
              goro::SleepFor(absl::Microseconds(100));
            } else {
              goro::Yield();
            }
            EXPECT_EQ(ThreadId(), tid);
            goro::UnlockOSThread();
            wg.Done();
          });
          wg.Wait();
        }
      },
      absl::Seconds(20));
}

}  // namespace
