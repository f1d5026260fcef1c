// The scheduler's lock (RuntimeMutex, core/lock.h) on plain threads: it
// excludes, and a thread that went to sleep on it is woken, however many
// sleep behind one another.
#include "core/lock.h"

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace goro::internal {
namespace {

// More threads than CPUs, so holders are descheduled with the lock held and
// the others go past their spinning to sleep on the word. A lock that let
// two in at once loses increments of the plain counter.
TEST(RuntimeMutexTest, ExcludesUnderContention) {
  RuntimeMutex mu;
  int64_t counter = 0;  // guarded by mu
  constexpr int kThreads = 8;
  constexpr int kRounds = 200000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kRounds; ++i) {
        RuntimeMutexLock lock(&mu);
        // A read, a pause and a write: two holders at once would lose one.
        int64_t v = counter;
        if (i % 64 == 0) std::this_thread::yield();
        counter = v + 1;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(counter, int64_t{kThreads} * kRounds);
}

// Waiters held off for 100 ms are asleep on the futex by then, not spinning.
// Each must be woken in turn: the unlock wakes one, and that one, taking the
// lock, must mark it as having sleepers, or its own unlock wakes nobody and
// the rest sleep for ever. The wait is bounded; a waiter left asleep is
// detached (the lock is static, so it never touches freed memory).
TEST(RuntimeMutexTest, EverySleepingWaiterIsWokenInTurn) {
  static RuntimeMutex mu;
  constexpr int kWaiters = 4;
  std::atomic<int> done{0};
  absl::Notification all_done;
  mu.Lock();
  std::vector<std::thread> threads;
  for (int t = 0; t < kWaiters; ++t) {
    threads.emplace_back([&] {
      mu.Lock();
      absl::SleepFor(absl::Milliseconds(5));  // the others stay asleep behind it
      mu.Unlock();
      if (done.fetch_add(1) + 1 == kWaiters) all_done.Notify();
    });
  }
  absl::SleepFor(absl::Milliseconds(100));
  mu.Unlock();
  const bool finished = all_done.WaitForNotificationWithTimeout(absl::Seconds(20));
  EXPECT_TRUE(finished) << done.load() << " of " << kWaiters
                        << " waiters got the lock; the others were never woken";
  for (auto& t : threads) {
    if (finished) {
      t.join();
    } else {
      t.detach();
    }
  }
}

}  // namespace
}  // namespace goro::internal
