// RWMutex: readers share, a writer excludes everyone, a waiting writer goes
// before new readers, misuse is fatal, and the lock may be destroyed by its
// last user while another's Unlock is still running.
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <thread>
#include <vector>

#include "absl/synchronization/notification.h"
#include "core/sema.h"
#include "goro/goro.h"
#include "gtest/gtest.h"
#include "test_util.h"

namespace goro {
// Reads the reader count (friend of RWMutex): below -kMaxReaders once a
// second writer has announced itself before the first gave its count back.
struct RWMutexAccess {
  static int32_t Readers(const RWMutex& rw) { return rw.readers_.load(); }
};
}  // namespace goro

namespace {

using goro_test::Eventually;
using goro_test::RunBounded;
using goro_test::Watchdog;

constexpr absl::Duration kShortWait = absl::Milliseconds(50);
constexpr int32_t kMaxReaders = 1 << 30;  // core/sync.cc

// Counts a broken invariant, and says which at once: a broken RWMutex may
// go on to end the process before the test reports.
void Violation(std::atomic<int>& violations, const char* what) {
  fprintf(stderr, "violation: %s\n", what);
  violations.fetch_add(1);
}

// Raises `max` to at least `v`.
void RaiseTo(std::atomic<int>& max, int v) {
  int m = max.load();
  while (m < v && !max.compare_exchange_weak(m, v)) {
  }
}

// Several goroutines hold the read lock at once: each, once in, waits until
// all of them are in. An RWMutex that let readers in one at a time keeps the
// others out until the first gives up waiting.
TEST(RWMutexTest, ReadersShareTheLock) {
  RunBounded([] {
    constexpr int kReaders = 4;
    goro::RWMutex rw;
    std::atomic<int> inside{0}, max_inside{0}, arrived{0};
    goro::WaitGroup wg;
    wg.Add(kReaders);
    for (int i = 0; i < kReaders; ++i) {
      goro::Go([&] {
        rw.RLock();
        RaiseTo(max_inside, inside.fetch_add(1) + 1);
        arrived.fetch_add(1);
        Eventually([&] { return arrived.load() == kReaders; }, absl::Seconds(5));
        goro_test::Spin(absl::Milliseconds(2));  // both Ps run readers at once
        inside.fetch_sub(1);
        rw.RUnlock();
        wg.Done();
      });
    }
    wg.Wait();
    EXPECT_EQ(max_inside.load(), kReaders) << "readers did not hold the lock together";
  });
}

// Writers and readers on 2 Ps, holding the lock while they spin in loops with
// no call into goro (so they are preempted holding it), now and then longer
// than a time slice. Inside, a writer must find nobody else, a reader no
// writer, and the data a writer changes must not change under a reader.
TEST(RWMutexTest, WriterExcludesReadersAndWriters) {
  RunBounded([] {
    constexpr int kWriters = 3, kReaders = 5, kIters = 150;
    goro::RWMutex rw;
    std::atomic<int> writers_in{0}, readers_in{0}, violations{0};
    int64_t a = 0, b = 0;  // guarded by rw; a writer keeps them equal, plain on purpose
    uint64_t preempted_before = goro::GetStats().async_preemptions;
    goro::WaitGroup wg;
    wg.Add(kWriters + kReaders);
    for (int w = 0; w < kWriters; ++w) {
      goro::Go([&, w] {
        for (int i = 0; i < kIters; ++i) {
          rw.Lock();
          if (writers_in.fetch_add(1) != 0) Violation(violations, "two writers in");
          if (readers_in.load() != 0) Violation(violations, "a writer got in with readers in");
          a = a + 1;
          goro_test::Spin(i % 50 == w ? absl::Milliseconds(15) : absl::Microseconds(30));
          b = b + 1;
          if (readers_in.load() != 0) Violation(violations, "a reader got in while a writer held the lock");
          writers_in.fetch_sub(1);
          rw.Unlock();
        }
        wg.Done();
      });
    }
    for (int r = 0; r < kReaders; ++r) {
      goro::Go([&, r] {
        for (int i = 0; i < kIters; ++i) {
          rw.RLock();
          readers_in.fetch_add(1);
          if (writers_in.load() != 0) Violation(violations, "a reader got in with a writer in");
          int64_t seen = a;
          if (b != seen) Violation(violations, "a reader saw a writer's work half done");
          goro_test::Spin(i % 50 == r ? absl::Milliseconds(15) : absl::Microseconds(20));
          if (a != seen || b != seen || writers_in.load() != 0) {
            Violation(violations, "a writer got in while a reader held the lock");
          }
          readers_in.fetch_sub(1);
          rw.RUnlock();
          if (i % 8 == 0) goro::Yield();
        }
        wg.Done();
      });
    }
    wg.Wait();
    EXPECT_EQ(violations.load(), 0);
    EXPECT_EQ(a, int64_t{kWriters} * kIters);
    EXPECT_EQ(b, a);
    if (!goro_test::kTsanBuild) {
      EXPECT_GT(goro::GetStats().async_preemptions, preempted_before)
          << "nobody was preempted: the test did not test what it should";
    }
  });
}

// Once a writer waits, a new reader waits for that writer: a reader holds the
// lock, a writer blocks in Lock, and a second reader's RLock must neither get
// in while the first still holds it nor before the writer has had its turn.
TEST(RWMutexTest, AWaitingWriterGoesBeforeNewReaders) {
  RunBounded([] {
    goro::RWMutex rw;
    std::atomic<int> next{0}, writer_turn{-1}, reader_turn{-1};
    rw.RLock();  // the first reader
    goro::WaitGroup wg;
    wg.Add(2);
    goro::Go([&] {
      rw.Lock();
      writer_turn = next.fetch_add(1);
      goro::SleepFor(absl::Milliseconds(10));
      rw.Unlock();
      wg.Done();
    });
    goro::SleepFor(kShortWait);  // the writer is blocked in Lock by now
    ASSERT_EQ(writer_turn.load(), -1) << "the writer got in while a reader held the lock";
    goro::Go([&] {
      rw.RLock();
      reader_turn = next.fetch_add(1);
      rw.RUnlock();
      wg.Done();
    });
    goro::SleepFor(kShortWait);
    EXPECT_EQ(reader_turn.load(), -1) << "a new reader got in past a waiting writer";
    rw.RUnlock();
    wg.Wait();
    EXPECT_EQ(writer_turn.load(), 0);
    EXPECT_EQ(reader_turn.load(), 1) << "the new reader went before the waiting writer";
  });
}

TEST(RWMutexTest, TryLockAndTryRLock) {
  RunBounded([] {
    goro::RWMutex rw;
    EXPECT_TRUE(rw.TryRLock());
    EXPECT_TRUE(rw.TryRLock()) << "a second reader was refused";
    EXPECT_FALSE(rw.TryLock()) << "TryLock succeeded while readers held the lock";
    rw.RUnlock();
    EXPECT_FALSE(rw.TryLock());
    rw.RUnlock();
    EXPECT_TRUE(rw.TryLock());
    EXPECT_FALSE(rw.TryLock()) << "TryLock succeeded on a write-held lock";
    EXPECT_FALSE(rw.TryRLock()) << "TryRLock succeeded on a write-held lock";
    std::atomic<int> other_read{-1}, other_write{-1};
    goro::WaitGroup wg;
    wg.Add(1);
    goro::Go([&] {
      other_read = rw.TryRLock() ? 1 : 0;
      other_write = rw.TryLock() ? 1 : 0;
      wg.Done();
    });
    wg.Wait();
    EXPECT_EQ(other_read.load(), 0);
    EXPECT_EQ(other_write.load(), 0);
    rw.Unlock();
    EXPECT_TRUE(rw.TryRLock());
    rw.RUnlock();

    // A writer waiting for a reader makes TryRLock fail, and gets in once the
    // reader leaves.
    rw.RLock();
    std::atomic<bool> writer_in{false};
    wg.Add(1);
    goro::Go([&] {
      rw.Lock();
      writer_in = true;
      rw.Unlock();
      wg.Done();
    });
    EXPECT_TRUE(Eventually([&] {
      if (!rw.TryRLock()) return true;
      rw.RUnlock();
      return false;
    })) << "TryRLock kept succeeding while a writer waited";
    EXPECT_FALSE(writer_in.load());
    rw.RUnlock();
    wg.Wait();
    EXPECT_TRUE(writer_in.load());
    EXPECT_TRUE(rw.TryLock());
    rw.Unlock();
  });
}

TEST(RWMutexTest, StdSharedLockAndUniqueLockWork) {
  RunBounded([] {
    goro::RWMutex rw;
    {
      std::shared_lock<goro::RWMutex> r1(rw);
      std::shared_lock<goro::RWMutex> r2(rw, std::try_to_lock);
      EXPECT_TRUE(r2.owns_lock());
      std::unique_lock<goro::RWMutex> w(rw, std::try_to_lock);
      EXPECT_FALSE(w.owns_lock());
    }
    {
      std::unique_lock<goro::RWMutex> w(rw);
      std::shared_lock<goro::RWMutex> r(rw, std::try_to_lock);
      EXPECT_FALSE(r.owns_lock());
    }
    std::scoped_lock lock(rw);
    EXPECT_FALSE(rw.TryRLock());
  });
}

// Plain threads and goroutines, readers and writers at once.
TEST(RWMutexTest, PlainThreadsAndGoroutinesMixed) {
  goro_test::StartRuntime();
  Watchdog dog;
  constexpr int kIters = 4000;
  goro::RWMutex rw;
  int64_t a = 0, b = 0;  // guarded by rw
  std::atomic<int> writers_in{0}, readers_in{0}, violations{0};
  auto work = [&](int who) {
    for (int i = 0; i < kIters; ++i) {
      if ((i + who) % 4 == 0) {
        std::unique_lock<goro::RWMutex> lock(rw);
        if (writers_in.fetch_add(1) != 0 || readers_in.load() != 0) Violation(violations, "a writer was not alone");
        a = a + 1;
        b = b + 1;
        writers_in.fetch_sub(1);
      } else {
        std::shared_lock<goro::RWMutex> lock(rw);
        readers_in.fetch_add(1);
        if (writers_in.load() != 0 || a != b) Violation(violations, "a reader found a writer in");
        readers_in.fetch_sub(1);
      }
    }
  };
  absl::Notification goroutines_done[2];
  for (int g = 0; g < 2; ++g) {
    goro::Go([&, g] {
      work(g);
      goroutines_done[g].Notify();
    });
  }
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) threads.emplace_back(work, 2 + t);
  for (auto& t : threads) t.join();
  for (auto& done : goroutines_done) done.WaitForNotification();
  std::unique_lock<goro::RWMutex> lock(rw);
  EXPECT_EQ(violations.load(), 0);
  EXPECT_EQ(a, int64_t{kIters});  // a quarter of each worker's 4000 turns
  EXPECT_EQ(b, a);
}

// A plain thread holds the write lock; goroutines blocked in RLock and Lock
// wait as goroutines, leaving their threads (and Ps) to others.
TEST(RWMutexTest, BlockedGoroutinesLeaveTheirThreads) {
  goro_test::StartRuntime();
  Watchdog dog;
  constexpr int kBlocked = 16;
  goro::RWMutex rw;
  rw.Lock();  // by the test's thread
  std::atomic<int> started{0}, done{0};
  for (int i = 0; i < kBlocked; ++i) {
    goro::Go([&, i] {
      started.fetch_add(1);
      if (i % 4 == 0) {
        rw.Lock();
        rw.Unlock();
      } else {
        rw.RLock();
        rw.RUnlock();
      }
      done.fetch_add(1);
    });
  }
  ASSERT_TRUE(Eventually([&] { return started.load() == kBlocked; }));
  goro_test::Pause(kShortWait);
  // Another goroutine still runs.
  absl::Notification ran;
  goro::Go([&] { ran.Notify(); });
  EXPECT_TRUE(ran.WaitForNotificationWithTimeout(absl::Seconds(20)));
  EXPECT_EQ(done.load(), 0);
  EXPECT_LT(goro::GetStats().threads, kBlocked) << "blocked goroutines kept threads";
  rw.Unlock();
  EXPECT_TRUE(Eventually([&] { return done.load() == kBlocked; }));
}

// ---------------------------------------------------------------------------
// Destruction while an Unlock is still running.

// Stops the unlocker at the seam `stop_at` for up to 200 ms (a plain spin, no
// runtime call), or until `stop` is set, and records what was set meanwhile.
namespace stall {
goro::internal::RWMutexUnlockPoint stop_at;
std::atomic<bool> hook_ran{false};
std::atomic<bool> stop{false};
std::atomic<bool> stop_seen_in_hook{false};
std::atomic<bool> wanted_second_writer{false};
std::atomic<bool> second_writer_seen{false};
goro::RWMutex* watched = nullptr;

void Hook(goro::internal::RWMutexUnlockPoint where) {
  if (where != stop_at || hook_ran.exchange(true)) return;
  using Clock = std::chrono::steady_clock;
  auto start = Clock::now();
  while (!stop.load() && Clock::now() - start < std::chrono::milliseconds(200)) {
    // At the gap: stop as soon as the second writer has announced itself.
    if (wanted_second_writer.load() && goro::RWMutexAccess::Readers(*watched) < -kMaxReaders) {
      second_writer_seen = true;
      break;
    }
  }
  stop_seen_in_hook = stop.load();
}

void Reset(goro::internal::RWMutexUnlockPoint at) {
  stop_at = at;
  hook_ran = stop = stop_seen_in_hook = wanted_second_writer = second_writer_seen = false;
}
}  // namespace stall

// The reader that a writer's Unlock wakes may destroy the RWMutex as soon as
// it has read-unlocked it (it is the last user). The seam stops the writer
// just before its last touch, for up to 200 ms, while the other P is free to
// run the reader: it must not get out of RLock meanwhile. (Go's order wakes
// the readers and then unlocks the writers' Mutex: the reader gets in and
// frees the RWMutex under that Unlock, which ASan reports.)
TEST(RWMutexTest, NoRLockReturnsBeforeTheUnlockThatWakesItIsDone) {
  using namespace stall;
  RunBounded([] {
    for (int attempt = 0; attempt < 10 && !hook_ran.load(); ++attempt) {
      Reset(goro::internal::RWMutexUnlockPoint::kWake);
      auto* rw = new goro::RWMutex;
      rw->Lock();
      goro::WaitGroup wg;
      wg.Add(1);
      goro::Go([&wg, rw] {
        rw->RLock();
        stop = true;  // in: the writer's Unlock should be over
        rw->RUnlock();
        delete rw;  // the last user
        wg.Done();
      });
      goro::SleepFor(absl::Milliseconds(20));  // the reader is blocked by now (almost always)
      goro::internal::rwmutex_unlock_hook.store(&Hook);
      rw->Unlock();
      goro::internal::rwmutex_unlock_hook.store(nullptr);
      wg.Wait();
    }
  });
  ASSERT_TRUE(stall::hook_ran.load()) << "the writer never found a blocked reader to wake";
  EXPECT_FALSE(stall::stop_seen_in_hook.load())
      << "a reader got the lock while the Unlock that woke it was still to touch the RWMutex";
}

// The next writer takes the writers' Mutex in the gap before the Unlock gives
// the readers' count back, and announces itself. The readers blocked behind
// the first writer still go first; the second writer gets in after them (or
// at once, with none), and, the last user, destroys the RWMutex.
void SecondWriterAnnouncedInTheGap(int blocked_readers) {
  using namespace stall;
  bool announced = false;
  RunBounded([&] {
    for (int attempt = 0; attempt < 10 && !announced; ++attempt) {
      Reset(goro::internal::RWMutexUnlockPoint::kGap);
      auto* rw = new goro::RWMutex;
      watched = rw;
      rw->Lock();
      std::atomic<int> next{0}, writer_turn{-1};
      std::atomic<int> readers_in{0}, violations{0};
      goro::WaitGroup wg;
      wg.Add(blocked_readers + 1);
      for (int i = 0; i < blocked_readers; ++i) {
        goro::Go([&, rw] {
          rw->RLock();
          readers_in.fetch_add(1);
          next.fetch_add(1);
          goro::SleepFor(absl::Milliseconds(5));
          readers_in.fetch_sub(1);
          rw->RUnlock();
          wg.Done();
        });
      }
      goro::Go([&, rw] {
        rw->Lock();
        if (readers_in.load() != 0) Violation(violations, "the second writer got in with readers in");
        writer_turn = next.fetch_add(1);
        rw->Unlock();
        delete rw;  // the last user
        wg.Done();
      });
      goro::SleepFor(absl::Milliseconds(20));  // all blocked by now (almost always)
      wanted_second_writer = true;
      goro::internal::rwmutex_unlock_hook.store(&Hook);
      rw->Unlock();
      goro::internal::rwmutex_unlock_hook.store(nullptr);
      announced = second_writer_seen.load();
      wg.Wait();
      EXPECT_EQ(violations.load(), 0) << "the second writer got in with readers in";
      EXPECT_EQ(writer_turn.load(), blocked_readers) << "the second writer went before the blocked readers";
    }
  });
  EXPECT_TRUE(announced) << "the second writer never announced itself in the gap";
}

TEST(RWMutexTest, SecondWriterAnnouncedInTheGapWaitsForTheBlockedReaders) {
  SecondWriterAnnouncedInTheGap(3);
}

TEST(RWMutexTest, SecondWriterAnnouncedInTheGapWithNoBlockedReaders) { SecondWriterAnnouncedInTheGap(0); }

// An Unlock that hands the writers' Mutex (in starvation mode) to the next
// writer yields to it only once the RWMutex is released, not while it is
// still write-held: at the gap (the writers' Mutex unlocked, the readers'
// count not yet given back) that writer must not have run. On 1 P: W2 blocks
// in Lock on the writers' Mutex, and finds it taken again after an Unlock
// woke it more than 1 ms later (starvation mode); then the holder's Unlock
// hands it over. Fails if the hand-off yields before the gap: W2 has
// announced itself there (the readers' count below -kMaxReaders).
namespace handoff {
goro::RWMutex* rw = nullptr;
std::atomic<bool> hook_ran{false};
std::atomic<int32_t> readers_at_gap{0};
void Hook(goro::internal::RWMutexUnlockPoint where) {
  if (where != goro::internal::RWMutexUnlockPoint::kGap || hook_ran.exchange(true)) return;
  readers_at_gap = goro::RWMutexAccess::Readers(*rw);
}
}  // namespace handoff

[[noreturn]] void HandOffWhileWriteHeldChild() {
  using namespace handoff;
  Watchdog dog(absl::Seconds(20), "an RWMutex Unlock handing the writers' Mutex over");
  goro::Options opts = goro_test::TestOptions();
  opts.max_procs = 1;
  goro::Run(
      [] {
        rw = new goro::RWMutex;
        rw->Lock();
        std::atomic<bool> contending{false};
        goro::WaitGroup wg;
        wg.Add(1);
        goro::Go([&] {  // W2
          contending = true;
          rw->Lock();
          rw->Unlock();
          wg.Done();
        });
        while (!contending.load()) goro::Yield();
        goro::Yield();  // W2 blocks on the writers' Mutex
        goro_test::Spin(absl::Milliseconds(3));
        rw->Unlock();  // wakes W2
        rw->Lock();    // before it runs: it waits again, over 1 ms now
        goro::Yield();  // W2 finds the writers' Mutex held: starvation mode
        goro::internal::rwmutex_unlock_hook.store(&Hook);
        rw->Unlock();  // hands it to W2
        goro::internal::rwmutex_unlock_hook.store(nullptr);
        wg.Wait();
      },
      opts);
  int failures = 0;
  if (!hook_ran.load()) {
    fprintf(stderr, "the Unlock never reached its gap\n");
    failures++;
  }
  if (readers_at_gap.load() != -kMaxReaders) {
    fprintf(stderr, "at the gap the readers' count was %d, not -kMaxReaders: the writer handed the writers' Mutex "
            "ran while the RWMutex was still write-held\n", readers_at_gap.load());
    failures++;
  }
  fflush(stderr);
  _exit(failures == 0 ? 0 : 1);
}

TEST(RWMutexTest, AStarvationHandOffToTheNextWriterWaitsUntilTheRWMutexIsReleased) {
  EXPECT_EXIT(HandOffWhileWriteHeldChild(), ::testing::ExitedWithCode(0), "");
}

// Many rounds on a heap-allocated RWMutex, each ending with its last user
// deleting it right after an unlock, while the unlock or wake-up of another
// user may still be running: a writer's Unlock waking a reader (that frees
// it), a reader's RUnlock letting a writer in (that frees it), and a crowd
// whose members each finish with a Lock/Unlock, the last of them freeing it.
// Partners are goroutines and plain threads. Meant for the ASan build, which
// reports a touch after the delete; elsewhere it checks that nothing hangs.
TEST(RWMutexTest, DestroyedByTheLastUserWhileAnotherUnlockRuns) {
  goro_test::StartRuntime();
  Watchdog dog;
  constexpr int kRounds = 3000;
  enum class Role { kReadThenDelete, kWriteThenDelete, kCrowdReader, kCrowdWriter, kQuit };
  struct Task {
    Role role;
    goro::RWMutex* rw;
    std::atomic<int>* ready;    // counted just before the first lock call
    std::atomic<int>* closed;   // crowd members that have finished
    int crowd;                  // crowd size, the driver included
  };
  // The crowd's last step: counted under the write lock, so the last to
  // count knows every other user has unlocked.
  auto close = [](const Task& t) {
    t.rw->Lock();
    bool last = t.closed->fetch_add(1) + 1 == t.crowd;
    t.rw->Unlock();
    if (last) delete t.rw;
  };
  // Channels are handles: each partner holds its own, so none is freed under
  // a partner still returning from a Recv or Send.
  auto serve = [close](goro::Chan<Task> in, goro::Chan<int> out) {
    for (;;) {
      Task t = *in.Recv();
      switch (t.role) {
        case Role::kQuit: return;
        case Role::kReadThenDelete:
          t.ready->fetch_add(1);
          t.rw->RLock();
          t.rw->RUnlock();
          delete t.rw;
          break;
        case Role::kWriteThenDelete:
          t.ready->fetch_add(1);
          t.rw->Lock();
          t.rw->Unlock();
          delete t.rw;
          break;
        case Role::kCrowdReader:
          t.ready->fetch_add(1);
          t.rw->RLock();
          t.rw->RUnlock();
          close(t);
          break;
        case Role::kCrowdWriter:
          t.ready->fetch_add(1);
          t.rw->Lock();
          t.rw->Unlock();
          close(t);
          break;
      }
      out.Send(1);
    }
  };
  constexpr int kPartners = 4;  // 0, 1: goroutines; 2, 3: plain threads
  std::vector<goro::Chan<Task>> in;
  goro::Chan<int> out(kPartners);
  for (int p = 0; p < kPartners; ++p) in.emplace_back(1);
  goro::WaitGroup partners_done;  // the goroutine partners'
  partners_done.Add(2);
  for (int p = 0; p < 2; ++p) {
    goro::Go([serve, in = in[p], out, &partners_done] {
      serve(in, out);
      partners_done.Done();
    });
  }
  std::vector<std::thread> threads;
  for (int p = 2; p < kPartners; ++p) threads.emplace_back(serve, in[p], out);

  absl::Notification finished;
  goro::Go([&] {
    for (int round = 0; round < kRounds; ++round) {
      auto* rw = new goro::RWMutex;
      std::atomic<int> ready{0}, closed{0};
      int partner = round % kPartners;
      int kind = (round / kPartners) % 3;
      // Sometimes the partner is blocked when the driver unlocks, sometimes
      // it is still on its way into the lock call.
      absl::Duration lag = absl::Microseconds(round % 7 * 3);
      if (kind == 0) {  // the driver writes; the partner, a reader, deletes
        rw->Lock();
        in[partner].Send({Role::kReadThenDelete, rw, &ready, &closed, 0});
        while (ready.load() == 0) goro::Yield();
        goro_test::Spin(lag);
        rw->Unlock();
        out.Recv();
      } else if (kind == 1) {  // the driver reads; the partner, a writer, deletes
        rw->RLock();
        in[partner].Send({Role::kWriteThenDelete, rw, &ready, &closed, 0});
        while (ready.load() == 0) goro::Yield();
        goro_test::Spin(lag);
        rw->RUnlock();
        out.Recv();
      } else {  // the driver writes; every partner joins in, two read, two write
        rw->Lock();
        for (int p = 0; p < kPartners; ++p) {
          Role role = (p + round) % 2 == 0 ? Role::kCrowdReader : Role::kCrowdWriter;
          in[p].Send({role, rw, &ready, &closed, kPartners + 1});
        }
        while (ready.load() < kPartners) goro::Yield();
        goro_test::Spin(lag);
        rw->Unlock();
        close({Role::kCrowdWriter, rw, &ready, &closed, kPartners + 1});
        for (int p = 0; p < kPartners; ++p) out.Recv();
      }
    }
    for (int p = 0; p < kPartners; ++p) in[p].Send({Role::kQuit, nullptr, nullptr, nullptr, 0});
    finished.Notify();
  });
  finished.WaitForNotification();
  for (auto& t : threads) t.join();
  partners_done.Wait();
}

// ---------------------------------------------------------------------------
// Misuse

// Runs `fn` in the death-test child under a watchdog, so that a runtime that
// neither dies nor returns still ends (with a message the regex does not match).
void RunInChild(absl::AnyInvocable<void() &&> fn) {
  goro_test::Watchdog dog(absl::Seconds(30), "expected a fatal error");
  goro::Run(std::move(fn), goro_test::TestOptions());
}

#define GOROUTINE_LINE(what) "goroutine [0-9]+[^\n]*" what

TEST(RWMutexDeathTest, RUnlockOfUnlockedRWMutex) {
  EXPECT_DEATH(RunInChild([] {
                 goro::RWMutex rw;
                 rw.RLock();
                 rw.RUnlock();
                 rw.RUnlock();
               }),
               GOROUTINE_LINE("sync: RUnlock of unlocked RWMutex"));
}

TEST(RWMutexDeathTest, RUnlockOfWriteLockedRWMutex) {
  EXPECT_DEATH(RunInChild([] {
                 goro::RWMutex rw;
                 rw.Lock();
                 rw.RUnlock();
               }),
               GOROUTINE_LINE("sync: RUnlock of unlocked RWMutex"));
}

TEST(RWMutexDeathTest, UnlockOfUnlockedRWMutex) {
  EXPECT_DEATH(RunInChild([] {
                 goro::RWMutex rw;
                 rw.Lock();
                 rw.Unlock();
                 rw.Unlock();
               }),
               GOROUTINE_LINE("sync: Unlock of unlocked RWMutex"));
}

TEST(RWMutexDeathTest, UnlockOfReadLockedRWMutex) {
  EXPECT_DEATH(RunInChild([] {
                 goro::RWMutex rw;
                 rw.RLock();
                 rw.Unlock();
               }),
               GOROUTINE_LINE("sync: Unlock of unlocked RWMutex"));
}

}  // namespace
