// Wait records (core/wait_record.h): the slots blocked goroutines leave
// for their wakers, from per-P caches and a shared list.
//
// This binary replaces the aligned nothrow operator new, which is where new
// blocks of slots (64 of them, 8 KiB) come from, to see which channel locks
// the goroutine that allocates holds.
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <new>
#include <optional>

#include "core/chan_internal.h"
#include "core/wait_record.h"
#include "goro/goro.h"
#include "gtest/gtest.h"
#include "test_util.h"

namespace {

constexpr int kWatched = 3;
std::atomic<goro::internal::ChanCore*> watched[kWatched];
std::atomic<int> block_allocs{0};
std::atomic<int> allocs_under_a_channel_lock{0};

}  // namespace

void* operator new(std::size_t size, std::align_val_t align, const std::nothrow_t&) noexcept {
  if (size == 64 * goro::internal::kWaitRecordSize &&
      static_cast<size_t>(align) == goro::internal::kWaitRecordAlign) {
    block_allocs.fetch_add(1);
    for (auto& w : watched) {
      goro::internal::ChanCore* c = w.load();
      if (c != nullptr && goro::internal::ChanLockHeldForTest(c)) {
        allocs_under_a_channel_lock.fetch_add(1);
        break;
      }
    }
  }
  const size_t a = static_cast<size_t>(align);
  return std::aligned_alloc(a, (size + a - 1) / a * a);
}

namespace {

using goro_test::Eventually;
using goro_test::RunBounded;
using goro_test::Watchdog;

// A goroutine that blocks on a channel takes its Sudog with the channel's
// lock held (a Select: with every case's lock held), and an empty cache
// then needs a new block: malloc, which may wait on glibc's arena lock or
// make a system call, while the other Ps spin on the channel. The slots are
// reserved before the lock is taken. On 1 P, in a fresh process (so that
// the shared list is empty), 100 goroutines each block in a Send, a Recv
// and a two-case Select on watched channels: 400 slots, several blocks. The
// replaced operator new finds a watched channel locked whenever a block is
// made under one: each such allocation fails the child.
[[noreturn]] void BlockOnWatchedChannelsChild() {
  Watchdog dog(absl::Seconds(30), "goroutines blocking on watched channels");
  goro::Options opts;
  opts.max_procs = 1;
  goro::Run(
      [] {
        constexpr int kEach = 100;
        goro::Chan<int> send_ch, recv_ch, select_ch;
        watched[0] = send_ch.core();
        watched[1] = recv_ch.core();
        watched[2] = select_ch.core();
        goro::WaitGroup ended;
        ended.Add(3 * kEach);
        for (int i = 0; i < kEach; ++i) {
          goro::Go([&] {
            send_ch.Send(1);
            ended.Done();
          });
          goro::Go([&] {
            recv_ch.Recv();
            ended.Done();
          });
          goro::Go([&] {
            std::optional<int> a, b;
            goro::Select(goro::OnRecv(recv_ch, &a), goro::OnRecv(select_ch, &b));
            ended.Done();
          });
        }
        const int64_t want = 4 * kEach;
        CHILD_CHECK(Eventually([&] { return goro::internal::WaitRecordsInUse() >= want; }),
                    "%lld wait records in use, want %lld", static_cast<long long>(goro::internal::WaitRecordsInUse()),
                    static_cast<long long>(want));
        for (int i = 0; i < kEach; ++i) send_ch.Recv();
        recv_ch.Close();
        ended.Wait();
        for (auto& w : watched) w = nullptr;
        CHILD_CHECK(block_allocs.load() >= want / 64, "%d blocks of slots made, want at least %lld",
                    block_allocs.load(), static_cast<long long>(want / 64));
        CHILD_CHECK(allocs_under_a_channel_lock.load() == 0, "%d of %d blocks of slots made under a channel lock",
                    allocs_under_a_channel_lock.load(), block_allocs.load());
      },
      opts);
  _exit(goro_test::child_failures.load() == 0 ? 0 : 1);
}

TEST(WaitRecordTest, NoBlockOfSlotsIsMadeUnderAChannelLock) {
  EXPECT_EXIT(BlockOnWatchedChannelsChild(), ::testing::ExitedWithCode(0), "");
}

// Blocked goroutines' waiter records come from the pooled slots, not from
// their stacks: 100 goroutines each blocked in a receive, a send, a
// two-case Select, a Mutex Lock and a CondVar Wait take 600 slots. Once all
// have woken and ended, every slot is back: a path that forgot to give its
// record back (Select's pass 3, a WaitFor's timeout) would leave some out.
TEST(WaitRecordTest, BlockedGoroutinesHoldPooledRecordsAndGiveThemBack) {
  RunBounded([] {
    using goro::internal::WaitRecordsInUse;
    constexpr int kEach = 100;
    goro::Chan<int> recv_ch, send_ch, select_a, select_b;
    goro::Mutex held, cv_mu;
    goro::CondVar cv, timed_cv;
    bool go = false;  // guarded by cv_mu
    std::atomic<int> ended{0};
    const int64_t base = WaitRecordsInUse();
    held.Lock();
    for (int i = 0; i < kEach; ++i) {
      goro::Go([&] {
        recv_ch.Recv();
        ended.fetch_add(1);
      });
      goro::Go([&] {
        send_ch.Send(1);
        ended.fetch_add(1);
      });
      goro::Go([&] {
        std::optional<int> a, b;
        goro::Select(goro::OnRecv(select_a, &a), goro::OnRecv(select_b, &b));
        ended.fetch_add(1);
      });
      goro::Go([&] {
        held.Lock();
        held.Unlock();
        ended.fetch_add(1);
      });
      goro::Go([&] {
        cv_mu.Lock();
        while (!go) cv.Wait(cv_mu);
        cv_mu.Unlock();
        ended.fetch_add(1);
      });
    }
    const int64_t want = base + 6 * kEach;
    int64_t in_use = 0;
    EXPECT_TRUE(Eventually([&] { return (in_use = WaitRecordsInUse()) >= want; }))
        << "blocked goroutines hold " << in_use - base << " wait records, want " << 6 * kEach;
    // A timed wait that times out gives its record back too.
    {
      std::unique_lock<goro::Mutex> lock(cv_mu);
      EXPECT_FALSE(timed_cv.WaitFor(cv_mu, absl::Milliseconds(1)));
    }
    recv_ch.Close();
    for (int i = 0; i < kEach; ++i) send_ch.Recv();
    select_a.Close();
    held.Unlock();
    {
      std::lock_guard<goro::Mutex> lock(cv_mu);
      go = true;
      cv.SignalAll();
    }
    EXPECT_TRUE(Eventually([&] { return ended.load() == 5 * kEach; }))
        << ended.load() << " of " << 5 * kEach << " waiters ended";
    EXPECT_TRUE(Eventually([&] { return (in_use = WaitRecordsInUse()) == base; }))
        << in_use - base << " wait records were not given back";
  });
}

// WaitRecordsInUse takes the shared list's lock. Were a signal to preempt the
// counting goroutine while it holds it, the next goroutine on its P to
// refill its cache would spin on the lock for ever, with preemption off, and
// the holder would never run again. On 1 P with 1 ms slices, one goroutine
// counts without pause while rounds of 200 goroutines block on a channel and
// wake. Fails without the NoPreemptScope in WaitRecordsInUse: the P hangs in
// the first rounds, and the watchdog ends the child.
[[noreturn]] void CountingWhileWaitersComeAndGoChild() {
  Watchdog dog(absl::Seconds(30), "counting wait records beside goroutines that block and wake");
  goro::Options opts;
  opts.max_procs = 1;
  opts.time_slice = absl::Milliseconds(1);
  goro::Run(
      [] {
        std::atomic<bool> stop{false};
        goro::WaitGroup counter_done;
        counter_done.Add(1);
        goro::Go([&] {
          while (!stop.load(std::memory_order_relaxed)) goro::internal::WaitRecordsInUse();
          counter_done.Done();
        });
        for (int round = 0; round < 50; ++round) {
          goro::Chan<int> c;
          goro::WaitGroup wg;
          wg.Add(200);
          for (int i = 0; i < 200; ++i) {
            goro::Go([&] {
              c.Recv();
              wg.Done();
            });
          }
          goro::Yield();
          c.Close();
          wg.Wait();
        }
        stop = true;
        counter_done.Wait();
      },
      opts);
  _exit(0);
}

TEST(WaitRecordTest, CountingThemFromAPreemptibleGoroutineNeverStallsItsP) {
  EXPECT_EXIT(CountingWhileWaitersComeAndGoChild(), ::testing::ExitedWithCode(0), "");
}

}  // namespace
