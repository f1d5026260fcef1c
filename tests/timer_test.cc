// Timers: SleepFor, SleepUntil, After and timed waits.
//
// Lower bounds are exact (a sleep never ends early); upper bounds are generous
// because the machine is small and noisy.
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "core/runtime.h"
#include "goro/goro.h"
#include "gtest/gtest.h"
#include "test_util.h"

// tests/spin_loop_x86_64_sysv_elf_gas.S
extern "C" uint64_t goro_test_spin_until(const volatile uint8_t* stop, uint64_t* counter);

namespace {

using goro_test::Eventually;
using goro_test::Now;
using goro_test::RunBounded;
using goro_test::Since;
using goro_test::Watchdog;

constexpr absl::Duration kSlack = absl::Seconds(1);

TEST(TimerTest, SleepForSleepsAtLeastTheDuration) {
  RunBounded([] {
    for (absl::Duration d : {absl::Microseconds(100), absl::Milliseconds(1), absl::Milliseconds(10),
                             absl::Milliseconds(50)}) {
      auto start = Now();
      goro::SleepFor(d);
      absl::Duration slept = Since(start);
      EXPECT_GE(slept, d) << "SleepFor(" << d << ") woke early";
      EXPECT_LT(slept, d + kSlack) << "SleepFor(" << d << ")";
    }
  });
}

TEST(TimerTest, SleepForZeroOrNegativeReturnsPromptly) {
  RunBounded([] {
    auto start = Now();
    goro::SleepFor(absl::ZeroDuration());
    goro::SleepFor(absl::Milliseconds(-5));
    goro::SleepFor(-absl::InfiniteDuration());
    EXPECT_LT(Since(start), kSlack);
  });
}

// SleepFor of zero or less does not yield, as Go's time.Sleep does not: a
// yield could queue the caller behind every preempted CPU hog in the global
// queue (51-59 ms with 8 hogs). On 1 P with 10 s slices a goroutine queued on
// the P runs only if main yields or parks; it must not have run after
// SleepFor(0), SleepFor(-5 ms) and SleepFor(-infinity).
//
// Fails while SleepFor(d <= 0) yielded: the queued goroutine ran during the
// first of them.
TEST(TimerTest, SleepForZeroOrNegativeDoesNotYield) {
  EXPECT_EXIT(
      {
        Watchdog dog(absl::Seconds(30));
        goro::Options opts;
        opts.max_procs = 1;
        opts.time_slice = absl::Seconds(10);
        bool yielded = false;
        goro::Run(
            [&] {
              std::atomic<bool> ran{false};
              goro::WaitGroup wg;
              wg.Add(1);
              goro::Go([&] {  // onto this P's queue
                ran = true;
                wg.Done();
              });
              for (absl::Duration d : {absl::ZeroDuration(), absl::Milliseconds(-5), -absl::InfiniteDuration()}) {
                goro::SleepFor(d);
                if (ran.load()) {
                  fprintf(stderr, "SleepFor(%s) yielded: the goroutine queued behind it ran\n",
                          absl::FormatDuration(d).c_str());
                  yielded = true;
                  break;
                }
              }
              wg.Wait();
            },
            opts);
        _exit(yielded ? 1 : 0);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(TimerTest, SleepUntilWakesAtOrAfterTheDeadline) {
  RunBounded([] {
    for (absl::Duration d : {absl::Milliseconds(1), absl::Milliseconds(30)}) {
      absl::Time deadline = absl::Now() + d;
      goro::SleepUntil(deadline);
      absl::Time woke = absl::Now();
      EXPECT_GE(woke, deadline);
      EXPECT_LT(woke, deadline + kSlack);
    }
  });
}

TEST(TimerTest, SleepUntilThePastReturnsPromptly) {
  RunBounded([] {
    auto start = Now();
    goro::SleepUntil(absl::Now() - absl::Seconds(10));
    goro::SleepUntil(absl::InfinitePast());
    EXPECT_LT(Since(start), kSlack);
  });
}

TEST(TimerTest, SleepOnAPlainThread) {
  Watchdog dog;
  auto start = Now();
  goro::SleepFor(absl::Milliseconds(20));
  EXPECT_GE(Since(start), absl::Milliseconds(20));
  absl::Time deadline = absl::Now() + absl::Milliseconds(20);
  goro::SleepUntil(deadline);
  EXPECT_GE(absl::Now(), deadline);
}

TEST(TimerTest, ThousandConcurrentSleepersAllWakeNeverEarly) {
  RunBounded([] {
    constexpr int kSleepers = 1000;
    goro::WaitGroup wg;
    std::atomic<int> woke{0}, early{0};
    std::mt19937 rng(12345);
    std::uniform_int_distribution<int> ms(1, 20);
    wg.Add(kSleepers);
    for (int i = 0; i < kSleepers; ++i) {
      absl::Duration d = absl::Milliseconds(ms(rng));
      goro::Go([&, d] {
        auto start = Now();
        goro::SleepFor(d);
        if (Since(start) < d) ++early;
        ++woke;
        wg.Done();
      });
    }
    wg.Wait();
    EXPECT_EQ(woke.load(), kSleepers);
    EXPECT_EQ(early.load(), 0);
  });
}

// Sleeping parks the goroutine, not its thread: with 2 Ps, 50 goroutines each
// sleeping 100 ms take about 100 ms, not 50 * 100 ms / 2.
TEST(TimerTest, SleepingGoroutinesDoNotHoldTheirThreads) {
  RunBounded([] {
    constexpr int kSleepers = 50;
    goro::WaitGroup wg;
    wg.Add(kSleepers);
    auto start = Now();
    for (int i = 0; i < kSleepers; ++i) {
      goro::Go([&] {
        goro::SleepFor(absl::Milliseconds(100));
        wg.Done();
      });
    }
    wg.Wait();
    absl::Duration took = Since(start);
    EXPECT_GE(took, absl::Milliseconds(100));
    EXPECT_LT(took, absl::Seconds(2)) << "sleepers ran one after another";
  });
}

TEST(TimerTest, AfterFiresOnceAfterTheDuration) {
  RunBounded([] {
    absl::Time before = absl::Now();
    auto start = Now();
    goro::Chan<absl::Time> c = goro::After(absl::Milliseconds(20));
    EXPECT_EQ(c.capacity(), 1u);
    std::optional<absl::Time> t = c.Recv();
    absl::Duration waited = Since(start);
    ASSERT_TRUE(t.has_value());
    EXPECT_GE(waited, absl::Milliseconds(20));
    EXPECT_LT(waited, absl::Milliseconds(20) + kSlack);
    EXPECT_GE(*t, before) << "the value is the time it fired";
    EXPECT_LE(*t, absl::Now());
    // It fires once: nothing more arrives.
    std::optional<absl::Time> again;
    goro::SleepFor(absl::Milliseconds(20));
    EXPECT_EQ(goro::Select(goro::OnRecv(c, &again), goro::OnDefault()), 1);
  });
}

TEST(TimerTest, AfterZeroFiresPromptly) {
  RunBounded([] {
    auto start = Now();
    EXPECT_TRUE(goro::After(absl::ZeroDuration()).Recv().has_value());
    EXPECT_LT(Since(start), kSlack);
  });
}

TEST(TimerTest, AfterNeedsNoReceiver) {
  RunBounded([] {
    // Nobody receives: the send goes into the buffer and never blocks the timer.
    for (int i = 0; i < 1000; ++i) goro::After(absl::Milliseconds(i % 5));
    auto c = goro::After(absl::Milliseconds(5));
    goro::SleepFor(absl::Milliseconds(50));
    EXPECT_EQ(c.size(), 1u) << "the fired value waits in the buffer";
  });
}

// A duration past what int64 nanoseconds hold is clamped (to 100 years, as in
// SleepFor), not wrapped round into the past: such an After never fires, and
// a select that uses it as "no timeout" waits for its other cases.
TEST(TimerTest, AfterAnEnormousDurationDoesNotFire) {
  RunBounded([] {
    goro::Chan<absl::Time> never = goro::After(absl::InfiniteDuration());
    goro::Chan<absl::Time> far = goro::After(absl::Hours(24 * 365 * 300));  // over 2^63 ns
    goro::SleepFor(absl::Milliseconds(50));
    EXPECT_EQ(never.size(), 0u) << "After(InfiniteDuration()) fired";
    EXPECT_EQ(far.size(), 0u) << "After(300 years) fired";
  });
}

TEST(TimerTest, EarlierAfterFiresFirst) {
  RunBounded([] {
    // Deadlines far apart, so that the order is not a matter of noise.
    goro::Chan<absl::Time> late = goro::After(absl::Seconds(2));
    goro::Chan<absl::Time> early = goro::After(absl::Milliseconds(20));
    std::optional<absl::Time> a, b;
    EXPECT_EQ(goro::Select(goro::OnRecv(late, &a), goro::OnRecv(early, &b)), 1);
    EXPECT_FALSE(a.has_value());
  });
}

// goro::Timer: Go's time.Timer with Go 1.23's guarantees.

// Whether a time (or tick) is waiting in a Timer's or Ticker's channel
// (non-blocking).
template <typename T>
bool Ready(T& t) {
  std::optional<absl::Time> v;
  return goro::Select(goro::OnRecv(t.C(), &v), goro::OnDefault()) == 0;
}

TEST(TimerTest, TimerFiresOnceAfterTheDuration) {
  RunBounded([] {
    absl::Time start = absl::Now();
    goro::Timer t(absl::Milliseconds(5));
    std::optional<absl::Time> fired = t.C().Recv();
    ASSERT_TRUE(fired.has_value());
    EXPECT_GE(*fired, start + absl::Milliseconds(5));
    goro::SleepFor(absl::Milliseconds(10));
    EXPECT_FALSE(Ready(t)) << "a second time arrived";
    EXPECT_FALSE(t.Stop()) << "Stop after the time was received";
  });
}

// Fails if Stop leaves the timer in the heap (it fires anyway).
TEST(TimerTest, StoppedTimerNeverFires) {
  RunBounded([] {
    goro::Timer t(absl::Milliseconds(5));
    EXPECT_TRUE(t.Stop());
    EXPECT_FALSE(t.Stop()) << "stopped twice";
    goro::SleepFor(absl::Milliseconds(30));
    EXPECT_FALSE(Ready(t));
  });
}

// Go 1.23: a time that fired but was not received is dropped by Stop, and
// Stop says it kept it from being received. Fails if the buffer is not
// drained.
TEST(TimerTest, StopDropsAnUnreceivedTime) {
  RunBounded([] {
    goro::Timer t(absl::Milliseconds(1));
    goro::SleepFor(absl::Milliseconds(20));  // fired into the buffer
    EXPECT_TRUE(t.Stop());
    EXPECT_FALSE(Ready(t)) << "a stale time after Stop";
  });
}

// Reset rearms a pending timer, and a fired but unreceived one without
// letting its stale time through: the time received is the new one's.
TEST(TimerTest, ResetRearmsAndDropsAStaleTime) {
  RunBounded([] {
    goro::Timer t(absl::Hours(1));
    absl::Time reset_at = absl::Now();
    EXPECT_TRUE(t.Reset(absl::Milliseconds(5))) << "Reset of a pending timer";
    std::optional<absl::Time> fired = t.C().Recv();
    ASSERT_TRUE(fired.has_value());
    EXPECT_GE(*fired, reset_at + absl::Milliseconds(5));

    EXPECT_FALSE(t.Reset(absl::Milliseconds(1))) << "Reset after the time was received";
    goro::SleepFor(absl::Milliseconds(20));  // fired into the buffer
    reset_at = absl::Now();
    EXPECT_TRUE(t.Reset(absl::Milliseconds(30))) << "Reset with an unreceived time";
    fired = t.C().Recv();
    ASSERT_TRUE(fired.has_value());
    EXPECT_GE(*fired, reset_at + absl::Milliseconds(30)) << "received the stale time";
  });
}

// Stop and Reset from several goroutines and a plain thread at once, while
// the goroutines also receive: nothing crashes or corrupts the heap, and a
// final Stop leaves nothing to receive. Fails (a crash, in 10 of 10 runs, or
// a time after the final Stop) if Stop and Reset are not serialised: two
// Resets both find the timer out of the heap and both add it.
TEST(TimerTest, ConcurrentStopAndResetLeaveOneConsistentTimer) {
  RunBounded([] {
    goro::Timer t(absl::Microseconds(50));
    goro::WaitGroup wg;
    std::atomic<int> received{0};
    for (int w = 0; w < 4; ++w) {
      wg.Add(1);
      goro::Go([&t, &wg, &received, w] {
        for (int i = 0; i < 20000; ++i) {
          if ((i + w) % 3 == 0) {
            t.Stop();
          } else {
            t.Reset(absl::Microseconds((i * 7 + w) % 100));
          }
          if (i % 50 == 0) goro::SleepFor(absl::Microseconds(150));  // let it fire now and then
          if (Ready(t)) received.fetch_add(1);
        }
        wg.Done();
      });
    }
    std::thread plain([&t] {
      for (int i = 0; i < 20000; ++i) t.Reset(absl::Microseconds(i % 50));
    });
    wg.Wait();
    goro::Syscall([&plain] {
      plain.join();
      return 0;
    });
    t.Stop();
    goro::SleepFor(absl::Milliseconds(5));
    EXPECT_FALSE(Ready(t)) << "a time after the final Stop";
    EXPECT_GT(received.load(), 0) << "no timer ever fired: the test proved nothing";
  });
}

// Reset of a pending timer from its own P changes its time where it lies in
// the heap: the P never looks timerless. A plain thread watches the P's
// earliest time while a goroutine resets a 1 h timer, for 200 ms and at
// least 10000 of the watcher's looks; it must always see a time within the
// hour. Fails if Reset deletes the timer and adds it again (the P looked
// empty, or only had a timer that other tests left for the next century, in
// thousands of the watcher's looks).
TEST(TimerTest, ResetOfAPendingTimerKeepsItInItsHeap) {
  std::atomic<int64_t> looks{0}, gaps{0};
  bool moved = false;
  RunBounded([&] {
    std::atomic<goro::internal::P*> watched{nullptr};
    std::atomic<bool> stop{false};
    std::thread watcher([&] {
      constexpr int64_t kTwoHoursNs = int64_t{2} * 3600 * 1000 * 1000 * 1000;
      while (!stop.load(std::memory_order_relaxed)) {
        goro::internal::P* p = watched.load();
        if (p == nullptr) continue;
        int64_t w = p->timer0_when.load(std::memory_order_relaxed);
        if (w == 0 || w - goro::internal::Nanotime() > kTwoHoursNs) gaps.fetch_add(1, std::memory_order_relaxed);
        looks.fetch_add(1, std::memory_order_relaxed);
      }
    });
    goro::Timer t(absl::Hours(1));
    goro::internal::P* p = goro::internal::CurrentM()->p;
    watched.store(p);
    // The watcher may wait for a CPU on a loaded machine: go on until it
    // has looked often enough, for 20 s at most.
    const auto start = Now();
    while (!moved && Since(start) < absl::Seconds(20) &&
           (Since(start) < absl::Milliseconds(200) || looks.load() < 10000)) {
      for (int i = 0; i < 1000; ++i) EXPECT_TRUE(t.Reset(absl::Hours(1)));
      // A goroutine that changed P takes its timer along (and leaves its old
      // P timerless): nothing to conclude.
      moved = goro::internal::CurrentM()->p != p;
    }
    stop.store(true);
    goro::Syscall([&watcher] {
      watcher.join();
      return 0;
    });
  });
  if (moved) GTEST_SKIP() << "the goroutine moved to another P";
  EXPECT_GE(looks.load(), 10000) << "the watcher hardly looked: the test proved little";
  EXPECT_EQ(gaps.load(), 0) << "of " << looks.load() << " looks, these found the timer out of its heap";
}

// Reset moves pending timers up and down their heap, many timers deep: of
// 200 timers due in an hour, 150 are reset (in random order) to 1-30 ms and
// a third of those then to 3 h. Each short one fires within a generous bound
// and no earlier than its last Reset asked; no long one fires. Fails if a
// timer moved earlier is left below a later one, or one moved later is left
// above the others: either holds the short ones back for an hour. The bound
// is kept by a plain thread, not a timer: a broken heap holds any timer back.
TEST(TimerTest, ResetReordersPendingTimers) {
  RunBounded([] {
    constexpr int kTimers = 200;
    std::vector<std::unique_ptr<goro::Timer>> timers;
    for (int i = 0; i < kTimers; ++i) timers.push_back(std::make_unique<goro::Timer>(absl::Hours(1) + absl::Seconds(i)));
    std::mt19937 rng(7);
    std::vector<int> order(kTimers);
    for (int i = 0; i < kTimers; ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), rng);
    // Half go later first, so that the heap is no longer in creation order.
    for (int k = 0; k < kTimers / 2; ++k) EXPECT_TRUE(timers[order[k]]->Reset(absl::Hours(2)));
    std::shuffle(order.begin(), order.end(), rng);
    std::vector<absl::Duration> due(kTimers, absl::InfiniteDuration());
    std::vector<absl::Time> reset_at(kTimers);
    const int shortened = kTimers * 3 / 4;
    for (int k = 0; k < shortened; ++k) {
      int i = order[k];
      due[i] = absl::Milliseconds(1 + rng() % 30);
      reset_at[i] = absl::Now();
      EXPECT_TRUE(timers[i]->Reset(due[i]));
    }
    std::shuffle(order.begin(), order.begin() + shortened, rng);
    for (int k = 0; k < shortened / 3; ++k) {
      int i = order[k];
      due[i] = absl::InfiniteDuration();
      EXPECT_TRUE(timers[i]->Reset(absl::Hours(3)));
    }
    goro::Chan<int> limit;
    absl::Notification done;
    std::thread limiter([&] {
      if (!done.WaitForNotificationWithTimeout(absl::Seconds(20))) limit.Close();
    });
    for (int i = 0; i < kTimers; ++i) {
      if (due[i] == absl::InfiniteDuration()) continue;
      std::optional<absl::Time> fired;
      std::optional<int> closed;
      int got = goro::Select(goro::OnRecv(timers[i]->C(), &fired), goro::OnRecv(limit, &closed));
      EXPECT_EQ(got, 0) << "timer " << i << ", reset to " << due[i] << ", did not fire within 20 s";
      if (got != 0) break;
      EXPECT_GE(*fired, reset_at[i] + due[i]) << "timer " << i << " fired early";
    }
    done.Notify();
    goro::Syscall([&limiter] {
      limiter.join();
      return 0;
    });
    goro::SleepFor(absl::Milliseconds(5));
    for (int i = 0; i < kTimers; ++i) EXPECT_FALSE(Ready(*timers[i])) << "timer " << i << " fired again, or is long and fired";
  });
}

// C() may be closed by its user (Go's receive-only t.C cannot be). Stop
// and Reset still say whether they kept a time from being received: the
// ready receive of a closed channel is not a time. Fails if the drain counts
// it as one (Stop of a stopped timer said true).
TEST(TimerTest, StopAndResetAfterCIsClosedSayWhatHappened) {
  RunBounded([] {
    goro::Timer t(absl::Hours(1));
    t.C().Close();
    EXPECT_TRUE(t.Stop()) << "Stop of a pending timer";
    EXPECT_FALSE(t.Stop()) << "Stop of a stopped timer, C() closed";
    EXPECT_FALSE(t.Reset(absl::Milliseconds(1))) << "Reset of a stopped timer, C() closed";
    goro::SleepFor(absl::Milliseconds(20));  // fired; its offer to the closed channel fails
    EXPECT_FALSE(t.Stop()) << "Stop after firing into a closed C()";
  });
}

TEST(TimerTest, TimerChannelOutlivesTheTimer) {
  RunBounded([] {
    goro::Chan<absl::Time> c;
    {
      goro::Timer t(absl::Milliseconds(1));
      c = t.C();
    }
    goro::SleepFor(absl::Milliseconds(20));
    std::optional<absl::Time> v;
    EXPECT_EQ(goro::Select(goro::OnRecv(c, &v), goro::OnDefault()), 1) << "a destroyed Timer fired";
  });
}

// Assigning to C() only changes what C() returns: the timer keeps the
// channel it was made with, fires into it and drains it on Stop and Reset,
// and leaves the assigned channel alone. Fails if the timer sends through
// the channel behind C() by a raw pointer and drains whatever C() holds: in
// the first part Stop takes the value the user put in `mine` and leaves the
// timer's time in its channel; in the second the assignment frees the
// timer's channel, and the time goes into freed memory (a crash or a hang
// in practice; if not, Stop drains the empty assigned channel, so returns
// false).
TEST(TimerTest, AssigningToCLeavesTheTimersOwnChannel) {
  RunBounded([] {
    {
      goro::Timer t(absl::Milliseconds(1));
      goro::Chan<absl::Time> own = t.C();
      goro::Chan<absl::Time> mine(1);
      mine.Send(absl::UnixEpoch());
      t.C() = mine;
      ASSERT_TRUE(own.Recv().has_value());
      EXPECT_FALSE(t.Reset(absl::Milliseconds(1))) << "Reset after the time was received";
      ASSERT_TRUE(Eventually([&] { return own.size() == 1; })) << "the timer did not fire again";
      EXPECT_TRUE(t.Stop()) << "Stop did not drop the unreceived time";
      EXPECT_EQ(own.size(), 0u) << "Stop left the timer's time to be received";
      EXPECT_EQ(mine.size(), 1u) << "Stop drained the channel assigned to C()";
      std::optional<absl::Time> v = t.C().Recv();
      EXPECT_EQ(v, std::optional<absl::Time>(absl::UnixEpoch())) << "C() is not what was assigned";
    }
    {
      goro::Timer t(absl::Milliseconds(1));
      goro::Chan<absl::Time> mine(1);
      t.C() = mine;  // the timer's channel has no handle left but the timer's
      goro::SleepFor(absl::Milliseconds(20));  // fired, unless the machine is slow
      // True either way: fired (the time is dropped) or not yet (Stop kept it).
      EXPECT_TRUE(t.Stop()) << "Stop did not find the timer's time";
      EXPECT_EQ(mine.size(), 0u) << "the timer fired into the channel assigned to C()";
    }
  });
}

// ---------------------------------------------------------------------------
// Ticker

// Ticks come again and again, none before its due time: the k-th at least
// k periods after the Ticker was made. Fails if the record is not put back
// after it fires (one tick, then the watchdog).
TEST(TickerTest, TicksRepeatAndNoneComesEarly) {
  RunBounded([] {
    constexpr absl::Duration kPeriod = absl::Milliseconds(3);
    absl::Time start = absl::Now();
    goro::Ticker tick(kPeriod);
    for (int k = 1; k <= 10; ++k) {
      std::optional<absl::Time> t = tick.C().Recv();
      ASSERT_TRUE(t.has_value());
      // absl::Now against the runtime's monotonic clock: allow 1 ms of skew.
      EXPECT_GE(*t, start + k * kPeriod - absl::Milliseconds(1)) << "tick " << k;
    }
  });
}

// Ticks are due at multiples of the period from the start, so lateness
// does not add up: every firing is somewhat late (a sleeping M's timeout
// has 50 us of timer slack, and it must then run), and a ticker that set
// its next tick a period after each firing would drift by that much per
// tick. After 100 ticks of 2 ms, the least late of the last 10 must be
// within 3 ms of its due time. Fails when the next tick is set from the
// firing time: 6.6 ms behind after 60 ticks in the check run, so about 11
// ms after 100. Five tries, for a loaded machine (a load average of 7 on
// two CPUs made three tries of 60 ticks within 1.5 ms fail once).
TEST(TickerTest, TicksKeepToTheirScheduleWithoutDrift) {
  RunBounded([] {
    constexpr absl::Duration kPeriod = absl::Milliseconds(2);
    constexpr int kTicks = 100;
    absl::Duration least_late;
    for (int attempt = 0; attempt < 5; ++attempt) {
      absl::Time start = absl::Now();
      goro::Ticker tick(kPeriod);
      least_late = absl::InfiniteDuration();
      for (int k = 1; k <= kTicks; ++k) {
        std::optional<absl::Time> t = tick.C().Recv();
        ASSERT_TRUE(t.has_value());
        // A tick received after it was dropped for being late is a later one.
        if (k > kTicks - 10) least_late = std::min(least_late, *t - (start + k * kPeriod));
      }
      if (least_late < absl::Milliseconds(3)) break;
    }
    EXPECT_LT(least_late, absl::Milliseconds(3)) << "the ticker drifted from its schedule";
  });
}

// A receiver that falls behind finds the oldest tick it missed; the newer
// ones are dropped, not delivered one after another when it comes back.
// After a 205 ms stall on a 20 ms ticker, the buffered tick is from the
// first half of the stall, and the next is due at 220 ms. Fails if a newer
// tick replaces the buffered one, or if missed ticks are queued.
TEST(TickerTest, MissedTicksAreDropped) {
  RunBounded([] {
    absl::Time start = absl::Now();
    goro::Ticker tick(absl::Milliseconds(20));
    goro::SleepFor(absl::Milliseconds(205));
    std::optional<absl::Time> first = tick.C().Recv();
    std::optional<absl::Time> second = tick.C().Recv();
    ASSERT_TRUE(first.has_value() && second.has_value());
    EXPECT_LT(*first - start, absl::Milliseconds(100)) << "the buffered tick is not the oldest one";
    EXPECT_GE(*second - start, absl::Milliseconds(219)) << "a missed tick was delivered after the stall";
  });
}

// Stop drops a tick already in the buffer, and no tick comes after it;
// Reset starts a stopped Ticker again with the new period. Fails if Stop
// leaves the record in its heap (ticks keep coming) or does not drain.
TEST(TickerTest, StopEndsTheTicksAndResetRestartsThem) {
  RunBounded([] {
    goro::Ticker tick(absl::Milliseconds(1));
    goro::SleepFor(absl::Milliseconds(10));  // a tick waits in the buffer
    tick.Stop();
    EXPECT_FALSE(Ready(tick)) << "a stale tick after Stop";
    goro::SleepFor(absl::Milliseconds(20));
    EXPECT_FALSE(Ready(tick)) << "a tick after Stop";
    tick.Stop();  // a second Stop does nothing

    absl::Time reset_at = absl::Now();
    tick.Reset(absl::Milliseconds(5));
    for (int k = 1; k <= 3; ++k) {
      std::optional<absl::Time> t = tick.C().Recv();
      ASSERT_TRUE(t.has_value());
      EXPECT_GE(*t, reset_at + k * absl::Milliseconds(5) - absl::Milliseconds(1)) << "tick " << k;
    }
  });
}

// Reset of a running ticker drops the tick of the old period that waits in
// the buffer, and the next tick comes a new period after the Reset.
TEST(TickerTest, ResetDropsAStaleTickAndChangesThePeriod) {
  RunBounded([] {
    goro::Ticker tick(absl::Milliseconds(1));
    goro::SleepFor(absl::Milliseconds(10));  // a tick waits in the buffer
    absl::Time reset_at = absl::Now();
    tick.Reset(absl::Milliseconds(30));
    std::optional<absl::Time> t = tick.C().Recv();
    ASSERT_TRUE(t.has_value());
    EXPECT_GE(*t, reset_at + absl::Milliseconds(29)) << "received a tick from before the Reset";
  });
}

// Stop and Reset from goroutines on both Ps and a plain thread at once,
// while ticks fire: the heap stays whole, and after a final Stop nothing
// comes. Fails (heap corruption, a tick after the final Stop) if Stop and
// Reset are not serialised with each other and with the firing.
TEST(TickerTest, ConcurrentStopAndResetLeaveOneConsistentTicker) {
  RunBounded([] {
    goro::Ticker tick(absl::Microseconds(50));
    goro::WaitGroup wg;
    std::atomic<int> received{0};
    for (int w = 0; w < 4; ++w) {
      wg.Add(1);
      goro::Go([&tick, &wg, &received, w] {
        for (int i = 0; i < 5000; ++i) {
          if ((i + w) % 3 == 0) {
            tick.Stop();
          } else {
            tick.Reset(absl::Microseconds(1 + (i * 7 + w) % 100));
          }
          if (i % 50 == 0) goro::SleepFor(absl::Microseconds(300));  // let it tick now and then
          if (Ready(tick)) received.fetch_add(1);
        }
        wg.Done();
      });
    }
    std::thread plain([&tick] {
      for (int i = 0; i < 5000; ++i) tick.Reset(absl::Microseconds(1 + i % 50));
    });
    wg.Wait();
    goro::Syscall([&plain] {
      plain.join();
      return 0;
    });
    tick.Stop();
    goro::SleepFor(absl::Milliseconds(5));
    EXPECT_FALSE(Ready(tick)) << "a tick after the final Stop";
    EXPECT_GT(received.load(), 0) << "no tick ever came: the test proved nothing";
  });
}

// A destroyed Ticker's channel, still held, never receives again.
TEST(TickerTest, ChannelOutlivesTheTicker) {
  RunBounded([] {
    goro::Chan<absl::Time> c;
    {
      goro::Ticker tick(absl::Milliseconds(1));
      c = tick.C();
    }
    goro::SleepFor(absl::Milliseconds(20));
    std::optional<absl::Time> v;
    EXPECT_EQ(goro::Select(goro::OnRecv(c, &v), goro::OnDefault()), 1) << "a destroyed Ticker ticked";
  });
}

// A period below 1 ns is rounded up to 1 ns, not truncated to 0, which
// made a one-shot timer: one tick, then none.
TEST(TickerTest, APeriodBelowOneNanosecondStillTicks) {
  RunBounded([] {
    goro::Ticker tick(absl::Nanoseconds(1) / 4);
    for (int k = 1; k <= 5; ++k) {
      std::optional<absl::Time> t, late;
      goro::Timer timeout(absl::Seconds(5));
      ASSERT_EQ(goro::Select(goro::OnRecv(tick.C(), &t), goro::OnRecv(timeout.C(), &late)), 0)
          << "tick " << k << " never came";
    }
  });
}

// A ticker that fires at every schedule (1 ns, nobody receiving) must not
// keep the global queue from its 1-in-61 turn, which a timer that has just
// fired defers. On 1 P, a call-free spinner is preempted to the global
// queue while 16 goroutines pass 8 tokens around a ring and keep the local
// queue busy; over 300 ms the spinner must run again. Fails when the turn
// is deferred at every schedule: the spinner ran one slice and never again
// (the reviewer: 4.5 million iterations against 800 million without the
// ticker).
[[noreturn]] void ShortTickerBesideARingAndASpinnerChild() {
  goro_test::Watchdog dog(absl::Seconds(30), "a 1 ns ticker beside a spinner and a ring");
  goro::Options opts;
  opts.max_procs = 1;
  goro::Run(
      [] {
        goro::Ticker tick(absl::Nanoseconds(1));
        std::atomic<uint8_t> stop{0};
        std::atomic<uint64_t> spins{0};
        goro::Go([&] {
          goro_test_spin_until(reinterpret_cast<const volatile uint8_t*>(&stop),
                               reinterpret_cast<uint64_t*>(&spins));
        });
        constexpr int kRing = 16;
        std::vector<goro::Chan<int>> ring;
        for (int i = 0; i < kRing; ++i) ring.emplace_back(4);
        for (int i = 0; i < 8; ++i) ring[i].Send(i);
        for (int i = 0; i < kRing; ++i) {
          goro::Go([in = ring[i], out = ring[(i + 1) % kRing]]() mutable {
            for (;;) out.Send(*in.Recv());
          });
        }
        goro::SleepFor(absl::Milliseconds(100));  // the spinner has had its first slice
        const uint64_t before = spins.load();
        goro::SleepFor(absl::Milliseconds(300));
        const uint64_t after = spins.load();
        CHILD_CHECK(after > before, "the spinner did not run again in 300 ms (%llu iterations in all)",
                    static_cast<unsigned long long>(after));
        _exit(goro_test::child_failures.load() == 0 ? 0 : 1);
      },
      opts);
  _exit(1);
}

TEST(TickerTest, AShortTickerDoesNotStarveTheGlobalQueue) {
  if (goro_test::kTsanBuild) {
    GTEST_SKIP() << "TSan builds run without async preemption, which the spinner needs to leave its P";
  }
  EXPECT_EXIT(ShortTickerBesideARingAndASpinnerChild(), ::testing::ExitedWithCode(0), "");
}

TEST(TickerDeathTest, NonPositiveIntervalIsFatal) {
  EXPECT_DEATH(
      goro::Run([] { goro::Ticker tick(absl::ZeroDuration()); }, goro_test::TestOptions()),
      "goroutine [0-9]+.*non-positive interval for Ticker: 0");
  EXPECT_DEATH(
      goro::Run(
          [] {
            goro::Ticker tick(absl::Seconds(1));
            tick.Reset(absl::Milliseconds(-5));
          },
          goro_test::TestOptions()),
      "non-positive interval for Ticker.Reset: -5ms");
}

TEST(TimerTest, CondVarWaitForTimesOut) {
  RunBounded([] {
    goro::Mutex mu;
    goro::CondVar cv;
    std::lock_guard<goro::Mutex> lock(mu);
    for (absl::Duration d : {absl::Milliseconds(1), absl::Milliseconds(25)}) {
      auto start = Now();
      EXPECT_FALSE(cv.WaitFor(mu, d));
      absl::Duration waited = Since(start);
      EXPECT_GE(waited, d);
      EXPECT_LT(waited, d + kSlack);
    }
  });
}

TEST(TimerTest, ManyConcurrentWaitForsAllTimeOut) {
  RunBounded([] {
    constexpr int kWaiters = 200;
    goro::Mutex mu;
    goro::CondVar cv;
    goro::WaitGroup wg;
    std::atomic<int> timed_out{0}, early{0};
    wg.Add(kWaiters);
    for (int i = 0; i < kWaiters; ++i) {
      absl::Duration d = absl::Milliseconds(1 + i % 20);
      goro::Go([&, d] {
        {
          std::lock_guard<goro::Mutex> lock(mu);
          auto start = Now();
          if (!cv.WaitFor(mu, d)) ++timed_out;
          if (Since(start) < d) ++early;
        }
        wg.Done();  // after the unlock: mu dies once Wait returns
      });
    }
    wg.Wait();
    EXPECT_EQ(timed_out.load(), kWaiters);
    EXPECT_EQ(early.load(), 0);
  });
}

// Timer callbacks run under their P's timer lock, a spin lock, and ready
// goroutines; the WakeP that follows may take sched.mu and start a thread,
// so it waits until RunTimers has dropped the lock. Four goroutines on 2 Ps
// spin 100 us and sleep 300 us in turn for 300 ms, so that timers fire in
// FindRunnable while the other P is idle and nobody spins. Fails if WakeP
// starts an M from inside RunTimers (M::running_timers still set).
std::atomic<int> wakeps{0}, wakeps_in_timers{0};

void CountWakeP() {
  wakeps.fetch_add(1);
  goro::internal::M* m = goro::internal::CurrentM();
  if (m != nullptr && m->running_timers) wakeps_in_timers.fetch_add(1);
}

TEST(TimerTest, WakePWaitsUntilTheTimerLockIsDropped) {
  RunBounded([] {
    goro::internal::wakep_start_hook.store(&CountWakeP);
    goro::WaitGroup wg;
    for (int i = 0; i < 4; ++i) {
      wg.Add(1);
      goro::Go([&wg] {
        const auto start = Now();
        while (Since(start) < absl::Milliseconds(300)) {
          goro_test::Spin(absl::Microseconds(100));
          goro::SleepFor(absl::Microseconds(300));
        }
        wg.Done();
      });
    }
    wg.Wait();
    goro::internal::wakep_start_hook.store(nullptr);
  });
  EXPECT_GT(wakeps.load(), 0) << "no M was started for work: the test proved nothing";
  EXPECT_EQ(wakeps_in_timers.load(), 0) << "of " << wakeps.load() << " Ms started, these were started under a timer lock";
}

}  // namespace
