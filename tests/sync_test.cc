// WaitGroup, Mutex, CondVar and Once.
#include <atomic>
#include <cstring>
#include <cstdint>
#include <memory>
#include <mutex>
#include <new>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/sema.h"
#include "goro/goro.h"
#include "gtest/gtest.h"
#include "test_util.h"

namespace {

using goro_test::Eventually;
using goro_test::Now;
using goro_test::RunBounded;
using goro_test::Since;
using goro_test::Watchdog;

constexpr absl::Duration kShortWait = absl::Milliseconds(50);

// ---------------------------------------------------------------------------
// WaitGroup

TEST(WaitGroupTest, WaitReturnsAfterEveryDone) {
  RunBounded([] {
    constexpr int kWorkers = 100;
    goro::WaitGroup wg;
    std::atomic<int> finished{0};
    wg.Add(kWorkers);
    for (int i = 0; i < kWorkers; ++i) {
      goro::Go([&, i] {
        goro::SleepFor(absl::Microseconds(100 * (i % 10)));
        ++finished;
        wg.Done();
      });
    }
    wg.Wait();
    EXPECT_EQ(finished.load(), kWorkers);
  });
}

TEST(WaitGroupTest, WaitBlocksWhileTheCounterIsPositive) {
  RunBounded([] {
    goro::WaitGroup wg, waiter_done;
    std::atomic<bool> returned{false};
    wg.Add(2);
    waiter_done.Add(1);
    goro::Go([&] {
      wg.Wait();
      returned = true;
      waiter_done.Done();
    });
    goro::SleepFor(kShortWait);
    EXPECT_FALSE(returned.load());
    wg.Done();
    goro::SleepFor(kShortWait);
    EXPECT_FALSE(returned.load()) << "Wait returned with the counter at 1";
    wg.Done();
    waiter_done.Wait();
    EXPECT_TRUE(returned.load());
  });
}

TEST(WaitGroupTest, WaitOnZeroReturnsAtOnce) {
  RunBounded([] {
    goro::WaitGroup wg;
    wg.Wait();
    wg.Add(3);
    wg.Add(-3);
    wg.Wait();
    SUCCEED();
  });
}

TEST(WaitGroupTest, AddWithLargeDeltaAndDoneEach) {
  RunBounded([] {
    goro::WaitGroup wg;
    std::atomic<int> done{0};
    wg.Add(50);
    for (int i = 0; i < 50; ++i) {
      goro::Go([&] {
        ++done;
        wg.Done();
      });
    }
    wg.Wait();
    EXPECT_EQ(done.load(), 50);
  });
}

TEST(WaitGroupTest, SeveralGoroutinesWaitAtOnce) {
  RunBounded([] {
    constexpr int kWaiters = 8;
    goro::WaitGroup gate, waiters;
    std::atomic<int> released{0};
    gate.Add(1);
    waiters.Add(kWaiters);
    for (int i = 0; i < kWaiters; ++i) {
      goro::Go([&] {
        gate.Wait();
        ++released;
        waiters.Done();
      });
    }
    goro::SleepFor(kShortWait);
    EXPECT_EQ(released.load(), 0);
    gate.Done();
    waiters.Wait();
    EXPECT_EQ(released.load(), kWaiters);
  });
}

TEST(WaitGroupTest, ReusableAfterWaitReturns) {
  RunBounded([] {
    goro::WaitGroup wg;
    for (int round = 0; round < 50; ++round) {
      std::atomic<int> n{0};
      wg.Add(4);
      for (int i = 0; i < 4; ++i) {
        goro::Go([&] {
          ++n;
          wg.Done();
        });
      }
      wg.Wait();
      ASSERT_EQ(n.load(), 4) << "round " << round;
    }
  });
}

// Once every Wait has returned, Done is finished with the WaitGroup, and the
// last waiter may destroy it at once (Run's own WaitGroup, with one waiter,
// lives on its caller's stack).
// The last waiter to return poisons the memory: a release that still read it
// would find a lock word that is never free and spin (the bounded run fails)
// or write into it (the poison check fails). The race it guards against is a
// few instructions wide, so this catches a regression only sometimes; under
// ASan (scripts/test.sh --sanitize=address,undefined) reliably more often.
TEST(WaitGroupTest, DestroyedByAWaiterAsSoonAsWaitReturns) {
  constexpr int kRounds = 3000;
  constexpr int kWaiters = 3;
  std::vector<std::unique_ptr<unsigned char[]>> graves;
  RunBounded([&] {
    goro::Chan<int> buried(1);
    for (int round = 0; round < kRounds; ++round) {
      graves.emplace_back(new unsigned char[sizeof(goro::WaitGroup)]);
      unsigned char* mem = graves.back().get();
      auto* wg = new (mem) goro::WaitGroup;
      wg->Add(1);
      auto left = std::make_shared<std::atomic<int>>(kWaiters);
      for (int i = 0; i < kWaiters; ++i) {
        goro::Go([wg, mem, left, buried]() mutable {
          wg->Wait();
          if (left->fetch_sub(1) == 1) {
            wg->~WaitGroup();
            memset(mem, 0xA5, sizeof(goro::WaitGroup));
            buried.Send(1);
          }
        });
      }
      if (round % 2 == 0) goro::Yield();  // sometimes the waiters queue first
      goro::Go([wg] { wg->Done(); });
      buried.Recv();
    }
  });
  for (auto& g : graves) {
    for (size_t i = 0; i < sizeof(goro::WaitGroup); ++i) {
      ASSERT_EQ(g[i], 0xA5) << "a destroyed WaitGroup was written to after Wait returned";
    }
  }
}

TEST(WaitGroupTest, PlainThreadWaitsForGoroutines) {
  goro_test::StartRuntime();
  Watchdog dog;
  goro::WaitGroup wg;
  std::atomic<int> finished{0};
  wg.Add(20);
  for (int i = 0; i < 20; ++i) {
    goro::Go([&] {
      goro::SleepFor(absl::Milliseconds(5));
      ++finished;
      wg.Done();
    });
  }
  wg.Wait();  // the test's own thread
  EXPECT_EQ(finished.load(), 20);
}

// The goroutine is started with Go (not Run): whether a Run blocked on plain
// threads may be reported as a deadlock is deadlock_test's business.
TEST(WaitGroupTest, GoroutineWaitsForPlainThreads) {
  goro_test::StartRuntime();
  goro::WaitGroup wg;
  std::atomic<int> finished{0};
  wg.Add(4);
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      ++finished;
      wg.Done();
    });
  }
  std::atomic<int> seen{-1};
  goro_test::GoAndWait([&] {
    wg.Wait();
    seen = finished.load();
  });
  EXPECT_EQ(seen.load(), 4);
  for (auto& t : threads) t.join();
}

// ---------------------------------------------------------------------------
// Mutex

TEST(MutexTest, MutualExclusionUnderContention) {
  RunBounded([] {
    constexpr int kWorkers = 8, kIters = 20000;
    goro::Mutex mu;
    int64_t counter = 0;  // guarded by mu; plain on purpose
    std::atomic<int> inside{0}, overlaps{0};
    goro::WaitGroup wg;
    wg.Add(kWorkers);
    for (int w = 0; w < kWorkers; ++w) {
      goro::Go([&, w] {
        for (int i = 0; i < kIters; ++i) {
          mu.Lock();
          if (inside.fetch_add(1) != 0) ++overlaps;
          counter = counter + 1;
          if (i % 64 == w) goro::Yield();  // sometimes hold the lock across a switch
          inside.fetch_sub(1);
          mu.Unlock();
        }
        wg.Done();
      });
    }
    wg.Wait();
    EXPECT_EQ(overlaps.load(), 0);
    EXPECT_EQ(counter, int64_t{kWorkers} * kIters);
  });
}

TEST(MutexTest, MutualExclusionBetweenThreadsAndGoroutines) {
  goro_test::StartRuntime();
  Watchdog dog;
  constexpr int kIters = 20000;
  goro::Mutex mu;
  int64_t counter = 0;  // guarded by mu
  auto work = [&] {
    for (int i = 0; i < kIters; ++i) {
      std::lock_guard<goro::Mutex> lock(mu);
      counter = counter + 1;
    }
  };
  absl::Notification goroutines_done[2];
  for (auto& done : goroutines_done) {
    goro::Go([&] {
      work();
      done.Notify();
    });
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) threads.emplace_back(work);
  for (auto& t : threads) t.join();
  for (auto& done : goroutines_done) done.WaitForNotification();
  std::lock_guard<goro::Mutex> lock(mu);
  EXPECT_EQ(counter, 4 * int64_t{kIters});
}

// No goroutine at all: the primitives block plain threads too.
TEST(MutexTest, PlainThreadsOnly) {
  Watchdog dog;
  constexpr int kThreads = 4, kIters = 20000;
  goro::Mutex mu;
  int64_t counter = 0;  // guarded by mu
  std::atomic<int> inside{0}, overlaps{0};
  goro::WaitGroup wg;
  wg.Add(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kIters; ++i) {
        std::lock_guard<goro::Mutex> lock(mu);
        if (inside.fetch_add(1) != 0) ++overlaps;
        counter = counter + 1;
        inside.fetch_sub(1);
      }
      wg.Done();
    });
  }
  wg.Wait();
  for (auto& t : threads) t.join();
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(counter, int64_t{kThreads} * kIters);
}

TEST(MutexTest, TryLock) {
  RunBounded([] {
    goro::Mutex mu;
    EXPECT_TRUE(mu.TryLock());
    EXPECT_FALSE(mu.TryLock()) << "TryLock succeeded on a held mutex (it is not recursive)";
    std::atomic<int> other{-1};
    goro::WaitGroup wg;
    wg.Add(1);
    goro::Go([&] {
      other = mu.TryLock() ? 1 : 0;
      wg.Done();
    });
    wg.Wait();
    EXPECT_EQ(other.load(), 0);
    mu.Unlock();
    EXPECT_TRUE(mu.try_lock());
    mu.unlock();
  });
}

TEST(MutexTest, StdLockGuardAndUniqueLockWork) {
  RunBounded([] {
    goro::Mutex mu;
    {
      std::lock_guard<goro::Mutex> lock(mu);
      EXPECT_FALSE(mu.TryLock());
    }
    EXPECT_TRUE(mu.TryLock());
    mu.Unlock();
    {
      std::unique_lock<goro::Mutex> lock(mu, std::try_to_lock);
      EXPECT_TRUE(lock.owns_lock());
      std::unique_lock<goro::Mutex> again(mu, std::try_to_lock);
      EXPECT_FALSE(again.owns_lock());
    }
    std::scoped_lock lock(mu);
    SUCCEED();
  });
}

TEST(MutexTest, LockBlocksUntilUnlock) {
  RunBounded([] {
    goro::Mutex mu;
    mu.Lock();
    std::atomic<bool> acquired{false};
    goro::WaitGroup wg;
    wg.Add(1);
    goro::Go([&] {
      mu.Lock();
      acquired = true;
      mu.Unlock();
      wg.Done();
    });
    goro::SleepFor(kShortWait);
    EXPECT_FALSE(acquired.load());
    mu.Unlock();
    wg.Wait();
    EXPECT_TRUE(acquired.load());
  });
}

TEST(MutexTest, HandedFromAPlainThreadToAGoroutine) {
  goro_test::StartRuntime();
  Watchdog dog;
  goro::Mutex mu;
  mu.Lock();  // held by the test's thread
  std::atomic<bool> acquired{false};
  absl::Notification done;
  goro::Go([&] {
    mu.Lock();
    acquired = true;
    mu.Unlock();
    done.Notify();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(acquired.load());
  mu.Unlock();
  done.WaitForNotification();
  EXPECT_TRUE(acquired.load());
}

// Starvation mode: a waiter blocked for more than 1 ms must get the lock even
// though another goroutine re-locks it immediately after every unlock.
TEST(MutexTest, StarvationModeLetsABlockedWaiterIn) {
  RunBounded([] {
    constexpr int kAcquisitions = 30;
    goro::Mutex mu;
    std::atomic<bool> stop{false};
    std::atomic<int64_t> hog_rounds{0};
    goro::WaitGroup wg;
    wg.Add(1);
    goro::Go([&] {
      while (!stop.load(std::memory_order_relaxed)) {
        mu.Lock();
        goro_test::Spin(absl::Microseconds(50));  // hold it for a while
        mu.Unlock();                            // and take it back at once
        ++hog_rounds;
      }
      wg.Done();
    });
    EXPECT_TRUE(Eventually([&] { return hog_rounds.load() > 10; }));
    auto start = Now();
    for (int i = 0; i < kAcquisitions; ++i) {
      mu.Lock();
      mu.Unlock();
      goro::SleepFor(absl::Milliseconds(2));  // let the hog run alone again
    }
    absl::Duration took = Since(start);
    stop = true;
    wg.Wait();
    // Bounded: each acquisition should take a few ms; allow a lot for the noise.
    EXPECT_LT(took, absl::Seconds(20)) << "the waiter starved";
  });
}

// A Mutex may be destroyed by whoever holds it last, as a std::mutex may (the
// usual pattern: an object with a reference count under its own lock, freed
// by the goroutine that drops the count to zero), even while another
// goroutine's Unlock has not returned yet. So no Lock may return while an
// Unlock still has the Mutex to touch. The seam stops the unlocker at its last
// touch (about to wake the waiter) for up to 200 ms, while a third goroutine
// locks and unlocks: that must not let the waiter in. Go's order (release,
// then choose a waiter to wake) lets it in: the third goroutine's Unlock
// wakes the waiter, which may then destroy the Mutex under the first Unlock.
namespace lastwake {
std::atomic<bool> hook_ran{false};
std::atomic<bool> go_barger{false};
std::atomic<bool> barger_done{false};
std::atomic<bool> waiter_in{false};
std::atomic<bool> waiter_in_during_hook{false};
std::atomic<bool> barger_done_during_hook{false};

// Runs inside the unlocker's Unlock; a plain spin (no runtime call) while the
// other P runs the barger and, if it is let in, the waiter.
void Hook() {
  if (hook_ran.exchange(true)) return;
  go_barger = true;
  using Clock = std::chrono::steady_clock;
  auto start = Clock::now();
  while (!barger_done.load() && !waiter_in.load() && Clock::now() - start < std::chrono::milliseconds(200)) {
  }
  auto done = Clock::now();  // give a waiter the barger woke time to get in
  while (!waiter_in.load() && Clock::now() - done < std::chrono::milliseconds(20)) {
  }
  waiter_in_during_hook = waiter_in.load();
  barger_done_during_hook = barger_done.load();
}
}  // namespace lastwake

TEST(MutexTest, NoLockReturnsBeforeTheUnlockThatWakesItIsDone) {
  using namespace lastwake;
  bool tried = false;
  RunBounded([&] {
    for (int attempt = 0; attempt < 10 && !hook_ran.load(); ++attempt) {
      auto mu = std::make_unique<goro::Mutex>();
      go_barger = barger_done = waiter_in = false;
      mu->Lock();
      goro::WaitGroup wg;
      wg.Add(2);
      goro::Go([&] {  // the waiter: parks in Lock
        mu->Lock();
        waiter_in = true;
        mu->Unlock();
        wg.Done();
      });
      goro::Go([&] {  // the barger: runs on the other P while the unlocker is held
        while (!go_barger.load()) goro::Yield();
        mu->Lock();
        mu->Unlock();
        barger_done = true;
        wg.Done();
      });
      goro::SleepFor(absl::Milliseconds(20));  // the waiter is parked by now (almost always)
      goro::internal::mutex_unlock_wake_hook.store(&Hook);
      mu->Unlock();
      goro::internal::mutex_unlock_wake_hook.store(nullptr);
      go_barger = true;  // the hook did not run: no waiter was parked yet
      wg.Wait();
      tried = true;
    }
  });
  ASSERT_TRUE(tried);
  ASSERT_TRUE(hook_ran.load()) << "the unlocker never found a parked waiter to wake";
  ASSERT_TRUE(barger_done_during_hook.load()) << "the barger did not lock and unlock while the unlocker was held";
  EXPECT_FALSE(waiter_in_during_hook.load())
      << "a waiter took the Mutex while the Unlock that freed it was still to wake it";
}

// ---------------------------------------------------------------------------
// Releases and preemption (1 P, in child processes)

[[noreturn]] void ExitChild() {
  fflush(stderr);
  _exit(goro_test::child_failures.load() == 0 ? 0 : 1);
}

goro::Options OneProc() {
  goro::Options opts = goro_test::TestOptions();
  opts.max_procs = 1;
  return opts;
}

// Asks the calling goroutine to yield at its next safe point, as sysmon
// does when its time slice is over.
void AskToYield() { goro::internal::CurrentGoroutine()->stackguard0.store(goro::internal::kStackPreempt); }

// An Unlock that must wake a waiter takes its slow path. A preemption
// request pending then is honoured after the release (Unlock's SafePoint),
// not on entering the slow path, where the goroutine would be set aside in
// the global queue still holding the lock, which nobody could take until it
// ran again. On 1 P: `contender` blocks in `lock`; the holder queues an
// observer, asks itself to yield and unlocks. The contender, woken into
// runnext, takes the lock and gives it back; then the observer, which runs
// before the holder comes back from the global queue, must find it free.
//
// Fails (the observer's try fails) if the slow path honours the request on
// entry.
[[noreturn]] void UnlockWithARequestPendingChild(bool rw) {
  Watchdog dog(absl::Seconds(20), "an Unlock with a preemption request pending");
  static bool observer_found_it_free = false, observer_ran = false;
  static uint64_t preempted = 0;
  goro::Run(
      [rw] {
        goro::Mutex mu;
        goro::RWMutex rwmu;
        auto lock = [&] { rw ? rwmu.Lock() : mu.Lock(); };
        auto unlock = [&] { rw ? rwmu.Unlock() : mu.Unlock(); };
        goro::WaitGroup wg;
        lock();
        std::atomic<bool> contending{false};
        wg.Add(2);
        goro::Go([&] {  // the contender
          contending = true;
          lock();
          unlock();
          wg.Done();
        });
        while (!contending.load()) goro::Yield();
        goro::Yield();  // it blocks in lock()
        goro::Go([&] {  // the observer
          observer_ran = true;
          observer_found_it_free = rw ? rwmu.TryRLock() : mu.TryLock();
          if (observer_found_it_free) rw ? rwmu.RUnlock() : mu.Unlock();
          wg.Done();
        });
        const uint64_t before = goro::CurrentGoroutinePreemptions();
        AskToYield();
        unlock();
        preempted = goro::CurrentGoroutinePreemptions() - before;
        wg.Wait();
      },
      OneProc());
  CHILD_CHECK(preempted == 1, "the holder yielded %llu times in Unlock, not once: the test proved nothing",
              static_cast<unsigned long long>(preempted));
  CHILD_CHECK(observer_ran, "the observer never ran");
  CHILD_CHECK(observer_found_it_free,
              "the %s was still held while its holder waited in the global queue: its Unlock yielded before "
              "releasing it",
              rw ? "RWMutex" : "Mutex");
  ExitChild();
}

TEST(MutexTest, UnlockWithAPreemptionRequestPendingReleasesFirst) {
  EXPECT_EXIT(UnlockWithARequestPendingChild(false), ::testing::ExitedWithCode(0), "");
}

// RWMutex::Unlock with another writer blocked unlocks its writers' Mutex
// first, while still write-held: no safe point may come there either.
TEST(RWMutexTest, UnlockWithAPreemptionRequestPendingReleasesFirst) {
  EXPECT_EXIT(UnlockWithARequestPendingChild(true), ::testing::ExitedWithCode(0), "");
}

// A Mutex in starvation mode is handed to its first waiter by Unlock, which
// then yields to it - but not inside a NoPreemptScope, where no other
// goroutine may run on the thread (it may hold a thread-owned lock, which
// the next goroutine on the thread would be let into). On 1 P: the waiter
// blocks, the holder keeps the Mutex over 1 ms and takes it back at once
// after an Unlock that woke the waiter, which then finds it held, switches
// it to starvation mode and waits again; the holder unlocks inside a
// NoPreemptScope. The waiter must run only after the scope ends.
//
// Fails if the hand-off yields inside the scope.
[[noreturn]] void StarvationHandOffInANoPreemptScopeChild() {
  Watchdog dog(absl::Seconds(20), "a starvation-mode hand-off inside a NoPreemptScope");
  static bool ran_inside = false, got_it = false;
  goro::Run(
      [] {
        goro::Mutex mu;
        std::atomic<bool> in_scope{false}, contending{false};
        goro::WaitGroup wg;
        wg.Add(1);
        mu.Lock();
        goro::Go([&] {
          contending = true;
          mu.Lock();
          ran_inside = in_scope.load();
          got_it = true;
          mu.Unlock();
          wg.Done();
        });
        while (!contending.load()) goro::Yield();
        goro::Yield();  // it blocks in Lock
        goro_test::Spin(absl::Milliseconds(3));
        mu.Unlock();  // wakes it
        mu.Lock();    // before it runs: it waits again, over 1 ms now
        goro::Yield();  // it finds mu held and switches it to starvation mode
        {
          goro::NoPreemptScope no_preempt;
          in_scope = true;
          mu.Unlock();  // hands mu over
          goro_test::Spin(absl::Milliseconds(1));
          in_scope = false;
        }
        wg.Wait();
      },
      OneProc());
  CHILD_CHECK(got_it, "the waiter never got the Mutex");
  CHILD_CHECK(!ran_inside, "the waiter ran inside the NoPreemptScope of the Unlock that handed it the Mutex");
  ExitChild();
}

TEST(MutexTest, StarvationHandOffInANoPreemptScopeRunsNoOtherGoroutine) {
  EXPECT_EXIT(StarvationHandOffInANoPreemptScopeChild(), ::testing::ExitedWithCode(0), "");
}

// ~CondVar detaches the waiters still queued with the CondVar's lock held,
// and must not be set aside there: a WaitFor's timer firing meanwhile would
// spin on the lock, on g0, and the goroutine holding it would never run
// again. The seam holds the lock through 30 ms of spinning in this file's
// code, at a 1 ms time slice with another goroutine runnable.
//
// Fails if the destructor may be preempted there (the spin is interrupted).
namespace detach {
std::atomic<uint64_t> preempted_in_hook{0};
void Hook() {
  const uint64_t before = goro::CurrentGoroutinePreemptions();
  goro_test::Spin(absl::Milliseconds(30));
  preempted_in_hook = goro::CurrentGoroutinePreemptions() - before;
}
}  // namespace detach

[[noreturn]] void NotPreemptedWhileDetachingChild() {
  Watchdog dog(absl::Seconds(20), "~CondVar with a waiter queued");
  static uint64_t preempted_elsewhere = 0;
  goro::Options opts = OneProc();
  opts.time_slice = absl::Milliseconds(1);
  goro::Run(
      [] {
        static goro::Mutex mu;
        auto* cv = new goro::CondVar;
        std::atomic<bool> queued{false}, stop{false};
        goro::Go([cv, &queued] {  // waits for good: nothing will signal it
          mu.Lock();
          queued = true;
          cv->Wait(mu);
        });
        while (!queued.load()) goro::Yield();
        {
          std::lock_guard<goro::Mutex> queued_now(mu);  // Wait released mu once queued
        }
        goro::WaitGroup wg;
        wg.Add(1);
        goro::Go([&] {  // keeps a goroutine runnable
          while (!stop.load(std::memory_order_relaxed)) goro::Checkpoint();
          wg.Done();
        });
        goro::internal::condvar_detach_hook.store(&detach::Hook);
        delete cv;
        goro::internal::condvar_detach_hook.store(nullptr);
        // The check that the spin alone is preempted at this slice: given up
        // to a second, as a busy machine may delay sysmon's signal.
        const uint64_t before = goro::CurrentGoroutinePreemptions();
        const auto give_up = Now() + std::chrono::seconds(1);
        while (goro::CurrentGoroutinePreemptions() == before && Now() < give_up) goro_test::Spin(absl::Milliseconds(1));
        preempted_elsewhere = goro::CurrentGoroutinePreemptions() - before;
        stop = true;
        wg.Wait();
      },
      opts);
  CHILD_CHECK(preempted_elsewhere > 0, "a second of spinning at a 1 ms slice was never preempted: the test proved nothing");
  CHILD_CHECK(detach::preempted_in_hook == 0,
              "~CondVar was preempted %llu times with the CondVar's lock held",
              static_cast<unsigned long long>(detach::preempted_in_hook.load()));
  ExitChild();
}

TEST(CondVarTest, NotPreemptedWhileDetachingWaiters) {
  if (goro_test::kTsanBuild) GTEST_SKIP() << "ThreadSanitizer build: no asynchronous preemption";
  EXPECT_EXIT(NotPreemptedWhileDetachingChild(), ::testing::ExitedWithCode(0), "");
}

// ---------------------------------------------------------------------------
// CondVar

// Likewise a CondVar may be destroyed by a waiter as soon as its Wait returns
// (POSIX's rule), even if the Signal that woke it, made without the mutex
// held, has not returned yet. The seam stops the signaller at its last touch
// for up to 200 ms: the waiter must not get out of Wait meanwhile. Making the
// waiter runnable before dropping the CondVar's own lock lets it out.
namespace lastsignal {
std::atomic<bool> hook_ran{false};
std::atomic<bool> waiter_out{false};
std::atomic<bool> waiter_out_during_hook{false};

void Hook() {
  if (hook_ran.exchange(true)) return;
  using Clock = std::chrono::steady_clock;
  auto start = Clock::now();
  while (!waiter_out.load() && Clock::now() - start < std::chrono::milliseconds(200)) {
  }
  waiter_out_during_hook = waiter_out.load();
}
}  // namespace lastsignal

void SignalWithoutTheMutexWhileStopped(bool all) {
  using namespace lastsignal;
  hook_ran = waiter_out_during_hook = false;
  RunBounded([&] {
    for (int attempt = 0; attempt < 10 && !hook_ran.load(); ++attempt) {
      goro::Mutex mu;
      auto cv = std::make_unique<goro::CondVar>();
      bool ready = false;
      std::atomic<bool> waiting{false};
      waiter_out = false;
      goro::WaitGroup wg;
      wg.Add(1);
      goro::Go([&] {
        mu.Lock();
        waiting = true;
        while (!ready) cv->Wait(mu);
        mu.Unlock();
        waiter_out = true;
        wg.Done();
      });
      while (!waiting.load()) goro::Yield();
      goro::SleepFor(absl::Milliseconds(20));  // parked in Wait by now (almost always)
      mu.Lock();
      ready = true;
      mu.Unlock();
      goro::internal::condvar_signal_hook.store(&Hook);
      if (all) {
        cv->SignalAll();  // without the mutex
      } else {
        cv->Signal();
      }
      goro::internal::condvar_signal_hook.store(nullptr);
      wg.Wait();
    }
  });
  ASSERT_TRUE(hook_ran.load()) << "the signaller never found a waiter";
  EXPECT_FALSE(waiter_out_during_hook.load())
      << "a waiter left Wait while the " << (all ? "SignalAll" : "Signal")
      << " that woke it still had the CondVar to touch";
}

TEST(CondVarTest, NoWaitReturnsBeforeTheSignalThatWakesItIsDone) { SignalWithoutTheMutexWhileStopped(false); }

TEST(CondVarTest, NoWaitReturnsBeforeTheSignalAllThatWakesItIsDone) { SignalWithoutTheMutexWhileStopped(true); }

// A waiter is queued before it releases the mutex and parks only after, so a
// SignalAll in between wakes it by marking it, not by making it runnable.
// Nobody is blocked on the CondVar then, and POSIX lets it be destroyed at
// once (pthread_cond_destroy's rationale): the waiter's park, still to come,
// must not touch it. The Mutex seam runs the SignalAll and the destruction
// right there, inside the Unlock in the waiter's own Wait, which has a parked
// locker to wake. The memory is poisoned: a park that locked the CondVar's
// lock word would spin for ever (the bounded run fails).
namespace signalbeforepark {
std::atomic<goro::CondVar*> target{nullptr};
std::atomic<int64_t> waiter_id{0};
std::atomic<bool> hook_ran{false};

void Hook() {
  if (goro::GoroutineId() != waiter_id.load()) return;
  goro::CondVar* cv = target.exchange(nullptr);
  if (cv == nullptr) return;
  cv->SignalAll();
  cv->~CondVar();
  memset(static_cast<void*>(cv), 0xFF, sizeof(goro::CondVar));
  hook_ran = true;
}
}  // namespace signalbeforepark

TEST(CondVarTest, DestroyedAfterSignalAllBeforeTheWokenWaiterParks) {
  using namespace signalbeforepark;
  std::vector<std::unique_ptr<unsigned char[]>> graves;  // poisoned, never reused
  RunBounded(
      [&] {
        goro::internal::mutex_unlock_wake_hook.store(&Hook);
        for (int attempt = 0; attempt < 10 && !hook_ran.load(); ++attempt) {
          graves.emplace_back(new unsigned char[sizeof(goro::CondVar)]);
          auto* cv = new (graves.back().get()) goro::CondVar;
          goro::Mutex mu;
          std::atomic<bool> locking{false}, armed{false};
          goro::WaitGroup wg;
          wg.Add(2);
          goro::Go([&] {  // the waiter
            waiter_id = goro::GoroutineId();
            mu.Lock();
            goro::Go([&] {  // the locker, for the Unlock in Wait to wake
              locking = true;
              mu.Lock();
              mu.Unlock();
              wg.Done();
            });
            while (!locking.load()) goro::Yield();
            goro::SleepFor(absl::Milliseconds(20));  // parked in Lock by now (almost always)
            target = cv;
            armed = true;
            cv->Wait(mu);
            mu.Unlock();
            wg.Done();
          });
          while (!armed.load()) goro::Yield();
          goro::SleepFor(absl::Milliseconds(20));
          // If the hook did not run (the locker was not parked), wake the
          // waiter here; the exchange decides which of the two does.
          mu.Lock();  // the waiter is queued once it has released mu
          if (target.exchange(nullptr) != nullptr) cv->SignalAll();
          mu.Unlock();
          wg.Wait();
          if (!hook_ran.load()) cv->~CondVar();
        }
        goro::internal::mutex_unlock_wake_hook.store(nullptr);
      },
      absl::Seconds(20));
  ASSERT_TRUE(hook_ran.load()) << "the waiter's Unlock never found the locker parked";
}

// The same for a WaitFor whose timeout fires as SignalAll wakes it: once a
// signaller has unlinked the waiter, the timer's callback must not touch the
// CondVar, which may be gone. Deadlines spread over 0-100 us meet a SignalAll
// made after 0-52 us, and the CondVar is destroyed and poisoned at once: a
// late touch spins for ever on the lock word (the bounded run fails) or
// writes into it (the poison check fails). It runs for a fixed time, not a
// fixed number of rounds, so that ASan and TSan builds stay short.
// Destroyed with goroutines still blocked on it (as a global CondVar is when
// the program returns from main): they are detached. The one in WaitFor
// still times out (false) without touching the destroyed CondVar, whose
// memory is poisoned; the one in Wait stays blocked. Fails if the timeout
// callback still takes the CondVar's lock (it spins on the poisoned word for
// ever, holding its P's timer lock: the watchdog), or writes to it.
TEST(CondVarTest, DestroyedWithWaitersStillQueuedDetachesThem) {
  alignas(goro::CondVar) static unsigned char storage[sizeof(goro::CondVar)];
  static goro::Mutex mu;
  static std::atomic<int> queued{0};
  static std::atomic<int> timed_out{0}, signalled{0}, plain_returned{0};
  RunBounded([] {
    auto* cv = new (storage) goro::CondVar;
    goro::Go([cv] {
      mu.Lock();
      queued.fetch_add(1);
      (cv->WaitFor(mu, absl::Milliseconds(30)) ? signalled : timed_out).fetch_add(1);
      mu.Unlock();
    });
    goro::Go([cv] {
      mu.Lock();
      queued.fetch_add(1);
      cv->Wait(mu);
      plain_returned.fetch_add(1);
      mu.Unlock();
    });
    for (;;) {
      {
        std::lock_guard<goro::Mutex> lock(mu);  // both queued: Wait released mu
        if (queued.load() == 2) break;
      }
      goro::Yield();
    }
    cv->~CondVar();
    memset(storage, 0xA5, sizeof storage);
    auto start = Now();
    while (timed_out.load() + signalled.load() == 0 && Since(start) < absl::Seconds(5)) {
      goro::SleepFor(absl::Milliseconds(5));
    }
    goro::SleepFor(absl::Milliseconds(50));
  });
  EXPECT_EQ(timed_out.load(), 1) << "the WaitFor did not time out after its CondVar was destroyed";
  EXPECT_EQ(signalled.load(), 0);
  EXPECT_EQ(plain_returned.load(), 0) << "a Wait returned with nobody to signal it";
  for (unsigned char b : storage) ASSERT_EQ(b, 0xA5) << "the destroyed CondVar was written to";
}

TEST(CondVarTest, DestroyedRightAfterSignalAllWhileTimeoutsFire) {
  constexpr int kWaiters = 2;
  constexpr absl::Duration kBudget = absl::Seconds(2);  // ASan/TSan: fewer rounds
  std::vector<std::unique_ptr<unsigned char[]>> graves;
  RunBounded(
      [&] {
        auto start = Now();
        for (int round = 0; Since(start) < kBudget; ++round) {
          graves.emplace_back(new unsigned char[sizeof(goro::CondVar)]);
          unsigned char* mem = graves.back().get();
          auto* cv = new (mem) goro::CondVar;
          goro::Mutex mu;
          int waiting = 0;  // guarded by mu
          goro::WaitGroup done;
          done.Add(kWaiters);
          absl::Duration d = absl::Microseconds(round % 101);
          for (int i = 0; i < kWaiters; ++i) {
            goro::Go([&, cv, d] {
              mu.Lock();
              ++waiting;  // queued on cv before WaitFor releases mu
              cv->WaitFor(mu, d);
              mu.Unlock();
              done.Done();
            });
          }
          for (;;) {
            mu.Lock();
            if (waiting == kWaiters) break;
            mu.Unlock();
            goro::Yield();
          }
          goro_test::Spin(absl::Microseconds(round % 53));
          cv->SignalAll();
          mu.Unlock();
          cv->~CondVar();  // nobody is blocked on it any more
          memset(mem, 0xFF, sizeof(goro::CondVar));
          done.Wait();
        }
      },
      absl::Seconds(20));
  for (auto& g : graves) {
    for (size_t i = 0; i < sizeof(goro::CondVar); ++i) {
      ASSERT_EQ(g[i], 0xFF) << "a destroyed CondVar was written to";
    }
  }
}

// A global that owns a CondVar and a worker goroutine waiting on it in
// WaitFor (a flusher that wakes every minute): its destructor tells the
// worker to stop, wakes it and returns without waiting for it, and the
// CondVar member is destroyed next. During exit() the worker is frozen
// (FreezeAtExit in core/proc.cc) and never runs again, so ~CondVar must not
// wait for it to cancel its timer: the waker does that.
struct ExitFlusher {
  bool armed = false;  // only in a child of the test below
  bool signal_all = false;
  goro::Mutex mu;
  goro::CondVar cv;
  bool stop = false;  // guarded by mu
  bool waiting = false;  // guarded by mu
  ~ExitFlusher() {
    if (!armed) return;
    mu.Lock();
    stop = true;
    if (signal_all) {
      cv.SignalAll();
    } else {
      cv.Signal();
    }
    mu.Unlock();
  }  // ~CondVar
} exit_flusher;

[[noreturn]] void ExitWithAFlusherWaitingForAMinuteChild(bool signal_all) {
  Watchdog dog(absl::Seconds(10), "exit() destroying a CondVar whose WaitFor waiter was woken");
  if (goro::GetStats().procs != 0) {
    fprintf(stderr, "the runtime started before main\n");
    _exit(1);
  }
  exit_flusher.armed = true;
  exit_flusher.signal_all = signal_all;
  goro_test::StartRuntime();
  goro::Go([] {
    exit_flusher.mu.Lock();
    exit_flusher.waiting = true;
    while (!exit_flusher.stop) exit_flusher.cv.WaitFor(exit_flusher.mu, absl::Minutes(1));
    exit_flusher.mu.Unlock();
  });
  CHILD_CHECK(Eventually([] {
                std::lock_guard<goro::Mutex> l(exit_flusher.mu);  // free: the worker waits in WaitFor
                return exit_flusher.waiting;
              }),
              "the worker did not start");
  if (goro_test::child_failures.load() != 0) _exit(1);
  exit(0);
}

// Fails without the fix (the watchdog ends the child after 10 s): ~CondVar
// yields until the woken waiter cancels its timer, which the frozen worker
// never does, so exit() spins for the minute of its WaitFor.
TEST(CondVarTest, DestroyedDuringExitWithoutWaitingForAFrozenWokenWaiter) {
  EXPECT_EXIT(ExitWithAFlusherWaitingForAMinuteChild(/*signal_all=*/false), ::testing::ExitedWithCode(0), "");
  EXPECT_EXIT(ExitWithAFlusherWaitingForAMinuteChild(/*signal_all=*/true), ::testing::ExitedWithCode(0), "");
}

// A WaitFor waiter can be signalled before it parks: its Unlock of a Mutex
// in starvation mode hands the Mutex to the starving waiter and yields to it,
// and that one signals the CondVar. On 1 P: W holds mu while S waits more
// than 1 ms for it (starvation), then W waits on the global CondVar; S gets
// mu, SignalAll()s W (queued, not parked, holding a timer's count) and keeps
// the P. exit() freezes W before it runs again, and ~CondVar runs. Fails
// (the watchdog, after 10 s) if only W itself can drop the count: ~CondVar
// yields for it for good. The reviewer's reproducer hung 10 of 10 runs.
struct StarvedSignaller {
  goro::Mutex mu;
  goro::CondVar cv;  // destroyed by exit(), after the freeze
  std::atomic<bool> signalled{false};
} starved_signaller;

[[noreturn]] void WaiterSignalledBeforeItParksChild() {
  Watchdog dog(absl::Seconds(10), "exit() destroying a CondVar whose waiter was signalled before it parked");
  goro::Options opts = goro_test::TestOptions();
  opts.max_procs = 1;
  goro::Run([] {}, opts);
  goro::Go([] {  // W
    StarvedSignaller& s = starved_signaller;
    goro::WaitGroup s_blocked;
    s_blocked.Add(1);
    s.mu.Lock();
    goro::Go([&s, &s_blocked] {  // S
      s_blocked.Done();
      s.mu.Lock();  // waits, and starves
      s.cv.SignalAll();
      s.mu.Unlock();
      s.signalled = true;
      for (;;) goro::Checkpoint();  // keeps the P until exit() sets it aside
    });
    s_blocked.Wait();
    goro::Yield();  // S blocks in Lock
    goro_test::Spin(absl::Milliseconds(3));
    s.mu.Unlock();
    s.mu.Lock();     // before the woken S runs: it waits again, now over 1 ms
    goro::Yield();   // S finds mu held and switches it to starvation mode
    s.cv.WaitFor(s.mu, absl::Seconds(30));
    s.mu.Unlock();
  });
  while (!starved_signaller.signalled.load()) goro_test::Pause(absl::Microseconds(100));
  exit(0);
}

TEST(CondVarTest, DestroyedDuringExitAfterSignallingAWaiterThatHadNotParked) {
  EXPECT_EXIT(WaiterSignalledBeforeItParksChild(), ::testing::ExitedWithCode(0), "");
}

TEST(CondVarTest, WaitAndSignalProducerConsumer) {
  RunBounded([] {
    goro::Mutex mu;
    goro::CondVar cv;
    std::vector<int> queue;  // guarded by mu
    bool closed = false;     // guarded by mu
    int64_t sum = 0;
    goro::WaitGroup wg;
    wg.Add(1);
    goro::Go([&] {
      {
        std::lock_guard<goro::Mutex> lock(mu);
        for (;;) {
          while (queue.empty() && !closed) cv.Wait(mu);
          if (queue.empty()) break;
          sum += queue.back();
          queue.pop_back();
        }
      }
      wg.Done();  // after the unlock: mu dies once Wait returns
    });
    for (int i = 1; i <= 1000; ++i) {
      {
        std::lock_guard<goro::Mutex> lock(mu);
        queue.push_back(i);
      }
      cv.Signal();
      if (i % 100 == 0) goro::Yield();
    }
    {
      std::lock_guard<goro::Mutex> lock(mu);
      closed = true;
    }
    cv.Signal();
    wg.Wait();
    EXPECT_EQ(sum, 1000 * 1001 / 2);
  });
}

// Starts `n` goroutines that each wait once on `cv` and then record their
// index in `woken`. Returns after all of them are queued on `cv`: a waiter
// counts itself in `queued` under `mu` right before Wait, and Wait releases `mu`
// only once the waiter is queued.
void StartWaiters(int n, goro::Mutex& mu, goro::CondVar& cv, int& queued, std::vector<int>& woken,
                  goro::WaitGroup& wg) {
  wg.Add(n);
  for (int i = 0; i < n; ++i) {
    goro::Go([&, i] {
      mu.Lock();
      ++queued;
      cv.Wait(mu);
      woken.push_back(i);
      mu.Unlock();
      wg.Done();
    });
    // Wait for waiter i to be queued before starting i+1, so the queue order is known.
    EXPECT_TRUE(Eventually([&] {
      std::lock_guard<goro::Mutex> lock(mu);
      return queued == i + 1;
    }));
  }
}

TEST(CondVarTest, SignalWakesExactlyOneWaiterTheLongestWaiting) {
  RunBounded([] {
    goro::Mutex mu;
    goro::CondVar cv;
    int queued = 0;
    std::vector<int> woken;
    goro::WaitGroup wg;
    StartWaiters(3, mu, cv, queued, woken, wg);
    for (int k = 1; k <= 3; ++k) {
      cv.Signal();
      EXPECT_TRUE(Eventually([&] {
        std::lock_guard<goro::Mutex> lock(mu);
        return static_cast<int>(woken.size()) >= k;
      }));
      goro::SleepFor(kShortWait);  // a second wake-up would show by now
      std::lock_guard<goro::Mutex> lock(mu);
      EXPECT_EQ(static_cast<int>(woken.size()), k) << "one Signal woke more than one waiter";
    }
    wg.Wait();
    EXPECT_EQ(woken, (std::vector<int>{0, 1, 2})) << "Signal must wake the longest waiter first";
  });
}

TEST(CondVarTest, SignalAllWakesEveryWaiter) {
  RunBounded([] {
    constexpr int kWaiters = 10;
    goro::Mutex mu;
    goro::CondVar cv;
    int queued = 0;
    std::vector<int> woken;
    goro::WaitGroup wg;
    StartWaiters(kWaiters, mu, cv, queued, woken, wg);
    goro::SleepFor(kShortWait);
    {
      std::lock_guard<goro::Mutex> lock(mu);
      EXPECT_TRUE(woken.empty()) << "a waiter woke without a signal";
    }
    cv.SignalAll();
    wg.Wait();
    EXPECT_EQ(static_cast<int>(woken.size()), kWaiters);
  });
}

TEST(CondVarTest, SignalWithNoWaitersIsNotRemembered) {
  RunBounded([] {
    goro::Mutex mu;
    goro::CondVar cv;
    cv.Signal();
    cv.SignalAll();
    std::lock_guard<goro::Mutex> lock(mu);
    EXPECT_FALSE(cv.WaitFor(mu, absl::Milliseconds(20)));
  });
}

TEST(CondVarTest, WaitForTimesOutReturnsFalseAndHoldsTheMutex) {
  RunBounded([] {
    goro::Mutex mu;
    goro::CondVar cv;
    mu.Lock();
    auto start = Now();
    bool signalled = cv.WaitFor(mu, absl::Milliseconds(30));
    absl::Duration waited = Since(start);
    EXPECT_FALSE(signalled);
    EXPECT_GE(waited, absl::Milliseconds(30));
    EXPECT_LT(waited, absl::Seconds(5));
    // The mutex is held again: another goroutine cannot take it.
    std::atomic<int> other{-1};
    goro::WaitGroup wg;
    wg.Add(1);
    goro::Go([&] {
      other = mu.TryLock() ? 1 : 0;
      if (other == 1) mu.Unlock();
      wg.Done();
    });
    wg.Wait();
    EXPECT_EQ(other.load(), 0) << "WaitFor returned without holding the mutex";
    mu.Unlock();
  });
}

TEST(CondVarTest, WaitForReleasesTheMutexWhileWaiting) {
  RunBounded([] {
    goro::Mutex mu;
    goro::CondVar cv;
    std::atomic<bool> waiting{false};
    std::atomic<int> result{-1};
    goro::WaitGroup wg;
    wg.Add(1);
    goro::Go([&] {
      {
        std::lock_guard<goro::Mutex> lock(mu);
        waiting = true;
        result = cv.WaitFor(mu, absl::Seconds(30)) ? 1 : 0;
      }
      wg.Done();
    });
    EXPECT_TRUE(Eventually([&] { return waiting.load(); }));
    // The waiter set `waiting` under mu and holds mu until WaitFor releases it,
    // so a successful TryLock means it is queued inside WaitFor.
    EXPECT_TRUE(Eventually([&] {
      if (!mu.TryLock()) return false;
      mu.Unlock();
      return true;
    })) << "the mutex stayed held while WaitFor waited";
    cv.Signal();
    wg.Wait();
    EXPECT_EQ(result.load(), 1);
  });
}

TEST(CondVarTest, WaitForSignalledReturnsTrue) {
  RunBounded([] {
    goro::Mutex mu;
    goro::CondVar cv;
    bool ready = false;  // guarded by mu
    std::atomic<int> result{-1};
    std::atomic<bool> waiting{false};
    goro::WaitGroup wg;
    wg.Add(1);
    auto start = Now();
    goro::Go([&] {
      {
        std::lock_guard<goro::Mutex> lock(mu);
        waiting = true;
        bool r = true;
        while (!ready && r) r = cv.WaitFor(mu, absl::Seconds(30));
        result = r ? 1 : 0;
      }
      wg.Done();
    });
    EXPECT_TRUE(Eventually([&] { return waiting.load(); }));
    goro::SleepFor(absl::Milliseconds(10));
    {
      std::lock_guard<goro::Mutex> lock(mu);
      ready = true;
    }
    cv.Signal();
    wg.Wait();
    EXPECT_EQ(result.load(), 1);
    EXPECT_LT(Since(start), absl::Seconds(20)) << "the signal did not cut the wait short";
  });
}

TEST(CondVarTest, PlainThreadWaitsGoroutineSignals) {
  goro_test::StartRuntime();
  Watchdog dog;
  // Shared with the goroutine, which may still be inside Unlock when the
  // test's thread wakes up and returns.
  struct State {
    goro::Mutex mu;
    goro::CondVar cv;
    bool ready = false;  // guarded by mu
  };
  auto state = std::make_shared<State>();
  goro::Go([state] {
    goro::SleepFor(absl::Milliseconds(10));
    std::lock_guard<goro::Mutex> lock(state->mu);
    state->ready = true;
    state->cv.SignalAll();
  });
  std::unique_lock<goro::Mutex> lock(state->mu);
  while (!state->ready) state->cv.Wait(state->mu);
  EXPECT_TRUE(state->ready);
}

TEST(CondVarTest, PlainThreadsOnly) {
  Watchdog dog;
  goro::Mutex mu;
  goro::CondVar cv;
  int turn = 0;  // guarded by mu: threads take turns 0, 1, 0, 1, ...
  constexpr int kRounds = 500;
  auto player = [&](int me) {
    for (int i = 0; i < kRounds; ++i) {
      std::unique_lock<goro::Mutex> lock(mu);
      while (turn != me) cv.Wait(mu);
      turn = 1 - me;
      cv.Signal();
    }
  };
  std::thread a(player, 0), b(player, 1);
  a.join();
  b.join();
  EXPECT_EQ(turn, 0);
}

// ---------------------------------------------------------------------------
// Once

// 100 goroutines on 2 Ps call Do at once. f runs once, and long enough (it
// sleeps) that most of them arrive while it runs; each must find all of f's
// work done when its Do returns.
TEST(OnceTest, FRunsOnceAndEveryDoReturnsAfterIt) {
  RunBounded([] {
    constexpr int kCallers = 100, kEntries = 1000;
    goro::Once once;
    std::atomic<int> calls{0}, incomplete{0};
    std::vector<int> table;  // written by f, read after Do; plain on purpose
    goro::WaitGroup wg;
    wg.Add(kCallers);
    for (int i = 0; i < kCallers; ++i) {
      goro::Go([&] {
        once.Do([&] {
          calls.fetch_add(1);
          goro::SleepFor(absl::Milliseconds(20));
          for (int k = 0; k < kEntries; ++k) table.push_back(k);
        });
        if (table.size() != kEntries || table.back() != kEntries - 1) ++incomplete;
        wg.Done();
      });
    }
    wg.Wait();
    EXPECT_EQ(calls.load(), 1);
    EXPECT_EQ(incomplete.load(), 0) << "a Do returned before f had";
    EXPECT_LT(goro::GetStats().threads, 20) << "callers waiting for f kept their threads";
  });
}

// As with std::call_once: an f that throws leaves the Once not done, the
// exception reaches its caller, and the next Do (one waiting already, here)
// runs its own f.
TEST(OnceTest, AThrowingFLeavesItNotDone) {
  RunBounded([] {
    goro::Once once;
    std::atomic<int> runs{0}, thrown{0}, seen_done{0};
    goro::WaitGroup wg;
    wg.Add(3);
    for (int i = 0; i < 3; ++i) {
      goro::Go([&, i] {
        if (i > 0) goro::SleepFor(absl::Milliseconds(5));  // arrive while the first f runs
        try {
          once.Do([&] {
            if (runs.fetch_add(1) == 0) {
              goro::SleepFor(absl::Milliseconds(30));
              throw std::runtime_error("f failed");
            }
          });
          seen_done.fetch_add(1);
        } catch (const std::runtime_error&) {
          thrown.fetch_add(1);
        }
        wg.Done();
      });
    }
    wg.Wait();
    EXPECT_EQ(thrown.load(), 1);
    EXPECT_EQ(runs.load(), 2) << "the Once took a throwing f for done (or ran f again after success)";
    EXPECT_EQ(seen_done.load(), 2);
    once.Do([&] { runs.fetch_add(1); });
    EXPECT_EQ(runs.load(), 2);
  });
}

// A plain thread runs f; goroutines that call Do meanwhile wait for it.
TEST(OnceTest, PlainThreadRunsFWhileGoroutinesWait) {
  goro_test::StartRuntime();
  Watchdog dog;
  goro::Once once;
  std::atomic<int> calls{0}, wrong{0};
  int value = 0;  // written by f; plain on purpose
  absl::Notification in_f;
  std::thread t([&] {
    once.Do([&] {
      calls.fetch_add(1);
      in_f.Notify();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      value = 42;
    });
    if (value != 42) ++wrong;
  });
  in_f.WaitForNotification();
  goro::WaitGroup wg;
  wg.Add(10);
  for (int i = 0; i < 10; ++i) {
    goro::Go([&] {
      once.Do([&] { calls.fetch_add(1); });
      if (value != 42) ++wrong;
      wg.Done();
    });
  }
  wg.Wait();
  t.join();
  once.Do([&, n = 0]() mutable { calls.fetch_add(++n); });  // from this plain thread, done already
  EXPECT_EQ(calls.load(), 1);
  EXPECT_EQ(wrong.load(), 0) << "a Do returned before the thread's f had";
  EXPECT_EQ(value, 42);
}

// ---------------------------------------------------------------------------
// Plain threads blocking in goro at their end, and during exit()
//
// A plain thread parks on its stand-in G (core/proc.cc, ExternalG), which
// must outlive every place the thread can still call goro from: its own
// thread_local destructors, and, for a thread that calls exit(), the static
// destructors and atexit handlers that run after those. Each case runs in a
// child process, which must exit cleanly. Each also checks that the thread
// still counts as awake (Sched::external_awake) while it calls goro there,
// and allocates a G-sized probe where malloc would hand back a freed stand-in
// G: a park on the freed G writes into the probe.

using goro::internal::sched;

// A G-sized block filled with a pattern: malloc hands a just-freed G's chunk
// back for it, so a park on that freed G writes into it.
struct Probe {
  static constexpr unsigned char kFill = 0xAB;
  unsigned char bytes[sizeof(goro::internal::G)];
  Probe() { memset(bytes, kFill, sizeof bytes); }
  bool Untouched() const {
    for (unsigned char b : bytes) {
      if (b != kFill) return false;
    }
    return true;
  }
};

// A worker pool whose destructor stops its goroutines and waits for them with
// a WaitGroup: a global's destructor, run by exit() after main's thread_local
// destructors.
struct PoolStoppedAtExit {
  static constexpr int kWorkers = 4;
  std::atomic<bool> stop{false};
  std::atomic<int> finished{0};
  goro::WaitGroup wg;
  void Start() {
    wg.Add(kWorkers);
    for (int i = 0; i < kWorkers; ++i) {
      goro::Go([this] {
        while (!stop.load()) goro::SleepFor(absl::Milliseconds(1));
        finished++;
        wg.Done();
      });
    }
  }
  ~PoolStoppedAtExit() {
    auto* probe = new Probe;
    const int awake = sched.external_awake.load();
    stop = true;
    wg.Wait();  // parks main: the workers sleep
    CHILD_CHECK(finished.load() == kWorkers, "%d of %d workers finished", finished.load(), kWorkers);
    CHILD_CHECK(probe->Untouched(), "WaitGroup::Wait wrote into a live allocation: it parked on a freed G");
    CHILD_CHECK(awake >= 1, "main, calling goro from a static destructor, is not counted awake (%d)", awake);
    delete probe;
    if (goro_test::child_failures.load() != 0) _exit(1);
  }
};

// Fails without the fix: main's stand-in G was a thread_local, deleted by
// exit() before static destructors run, and Wait parked on it (the probe is
// written; ASan reports a heap-use-after-free), with main no longer counted.
TEST(PlainThreadAtExitTest, WaitGroupWaitInAStaticDestructor) {
  EXPECT_EXIT(
      {
        Watchdog dog(absl::Seconds(30), "exit() with a pool waiting for its goroutines");
        goro_test::StartRuntime();  // main's stand-in G exists from here on
        static PoolStoppedAtExit pool;  // destroyed by exit(), after main's thread_locals
        pool.Start();
        goro::SleepFor(absl::Milliseconds(2));
        exit(0);
      },
      ::testing::ExitedWithCode(0), "");
}

// A thread_local whose destructor takes a goro Mutex that main holds. It is
// constructed before the thread's first goro call, so it is destroyed after
// anything goro could have registered at that call.
goro::Mutex* thread_end_mu;
std::atomic<int> awake_in_thread_end{-1};
std::atomic<bool> locked_in_thread_end{false};
struct LocksAtThreadEnd {
  bool armed = false;
  ~LocksAtThreadEnd() {
    if (!armed) return;
    auto* probe = new Probe;
    awake_in_thread_end = sched.external_awake.load();
    thread_end_mu->Lock();  // contended: parks until main unlocks
    locked_in_thread_end = true;
    thread_end_mu->Unlock();
    CHILD_CHECK(probe->Untouched(), "Mutex::Lock wrote into a live allocation: it parked on a freed G");
    delete probe;
  }
};
thread_local LocksAtThreadEnd locks_at_thread_end;

// Fails without the fix: the thread's stand-in G was a thread_local
// registered at its first goro call, deleted before this destructor, and
// Lock parked on it (the probe is written; ASan reports a
// heap-use-after-free), with the thread no longer counted awake.
TEST(PlainThreadAtExitTest, ContendedMutexLockInAThreadLocalDestructor) {
  EXPECT_EXIT(
      {
        Watchdog dog(absl::Seconds(30), "a thread ending with a contended Lock");
        goro_test::StartRuntime();  // main counts awake from here on
        thread_end_mu = new goro::Mutex;
        thread_end_mu->Lock();
        std::thread t([] {
          locks_at_thread_end.armed = true;
          CHILD_CHECK(!thread_end_mu->TryLock(), "TryLock took a locked Mutex");  // its first goro call
        });
        CHILD_CHECK(Eventually([] { return awake_in_thread_end.load() >= 0; }), "the destructor never ran");
        const int awake = awake_in_thread_end.load();
        CHILD_CHECK(awake == 2, "%d plain threads awake in the destructor, not 2 (main and the ending thread)",
                    awake);
        // The thread parks in Lock: it no longer counts as awake.
        CHILD_CHECK(Eventually([awake] { return sched.external_awake.load() < awake; }),
                    "the ending thread never parked in Lock");
        thread_end_mu->Unlock();
        t.join();
        CHILD_CHECK(locked_in_thread_end.load(), "Lock in the destructor did not return");
        CHILD_CHECK(sched.external_awake.load() == 1, "%d plain threads awake after the thread ended, not 1",
                    sched.external_awake.load());
        _exit(goro_test::child_failures.load() == 0 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

}  // namespace
