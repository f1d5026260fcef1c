// Select: Go's select statement.
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "core/runtime.h"  // a preemption request set by hand
#include "goro/goro.h"
#include "gtest/gtest.h"
#include "test_util.h"

namespace {

using goro_test::Eventually;
using goro_test::Now;
using goro_test::RunBounded;
using goro_test::Since;
using goro_test::Watchdog;

// ---------------------------------------------------------------------------
// Non-blocking select (with a default case).

TEST(SelectTest, DefaultIsChosenWhenNothingIsReady) {
  RunBounded([] {
    goro::Chan<int> empty_buffered(1), unbuffered, full(1);
    full.Send(1);
    std::optional<int> r1, r2;
    int v1 = 10, v2 = 20;
    int idx = goro::Select(goro::OnRecv(empty_buffered, &r1), goro::OnRecv(unbuffered, &r2),
                           goro::OnSend(unbuffered, &v1), goro::OnSend(full, &v2),
                           goro::OnDefault());
    EXPECT_EQ(idx, 4);
    EXPECT_FALSE(r1.has_value());
    EXPECT_FALSE(r2.has_value());
    EXPECT_EQ(full.size(), 1u);
    EXPECT_EQ(empty_buffered.size(), 0u);
  });
}

TEST(SelectTest, DefaultIsNeverChosenWhenACaseIsReady) {
  RunBounded([] {
    goro::Chan<int> c(1);
    std::optional<int> r;
    int defaults = 0, wrong_value = 0;
    for (int i = 0; i < 2000; ++i) {
      c.Send(i);
      // Default first in argument order: being first must not make it win.
      int idx = goro::Select(goro::OnDefault(), goro::OnRecv(c, &r));
      if (idx != 1) ++defaults;
      if (idx == 1 && r != std::optional<int>(i)) ++wrong_value;
    }
    EXPECT_EQ(defaults, 0);
    EXPECT_EQ(wrong_value, 0);
    EXPECT_EQ(c.size(), 0u);
  });
}

TEST(SelectTest, SendCaseIsReadyWhileTheBufferHasRoom) {
  RunBounded([] {
    goro::Chan<int> c(2);
    int v = 1;
    EXPECT_EQ(goro::Select(goro::OnSend(c, &v), goro::OnDefault()), 0);
    v = 2;
    EXPECT_EQ(goro::Select(goro::OnSend(c, &v), goro::OnDefault()), 0);
    v = 3;
    EXPECT_EQ(goro::Select(goro::OnSend(c, &v), goro::OnDefault()), 1) << "sent into a full buffer";
    EXPECT_EQ(c.size(), 2u);
    EXPECT_EQ(c.Recv().value_or(-1), 1);
    EXPECT_EQ(c.Recv().value_or(-1), 2);
  });
}

TEST(SelectTest, UnbufferedSendCaseIsReadyWhenAReceiverWaits) {
  RunBounded([] {
    goro::Chan<int> c;
    std::atomic<int> got{-1};
    goro::WaitGroup wg;
    wg.Add(1);
    goro::Go([&] {
      got = c.Recv().value_or(-2);
      wg.Done();
    });
    int v = 99;
    // Retry until the receiver is parked; each miss must take the default.
    bool sent = Eventually([&] { return goro::Select(goro::OnSend(c, &v), goro::OnDefault()) == 0; });
    EXPECT_TRUE(sent);
    wg.Wait();
    EXPECT_EQ(got.load(), 99);
  });
}

TEST(SelectTest, UnbufferedRecvCaseIsReadyWhenASenderWaits) {
  RunBounded([] {
    goro::Chan<int> c;
    goro::Go([c]() mutable { c.Send(17); });
    std::optional<int> r;
    bool received =
        Eventually([&] { return goro::Select(goro::OnRecv(c, &r), goro::OnDefault()) == 0; });
    EXPECT_TRUE(received);
    EXPECT_EQ(r, std::optional<int>(17));
  });
}

TEST(SelectTest, ClosedChannelCaseIsReady) {
  RunBounded([] {
    goro::Chan<int> closed, open;
    closed.Close();
    std::optional<int> r1 = 5, r2;
    EXPECT_EQ(goro::Select(goro::OnRecv(closed, &r1), goro::OnDefault()), 0);
    EXPECT_FALSE(r1.has_value()) << "a receive from a closed channel yields nullopt";
    // Blocking form: the closed channel is chosen at once.
    EXPECT_EQ(goro::Select(goro::OnRecv(open, &r2), goro::OnRecv(closed, &r1)), 1);
    EXPECT_FALSE(r1.has_value());
    EXPECT_FALSE(r2.has_value());
  });
}

TEST(SelectTest, ClosedBufferedChannelYieldsItsValuesFirst) {
  RunBounded([] {
    goro::Chan<int> c(2);
    c.Send(1);
    c.Send(2);
    c.Close();
    std::optional<int> r;
    EXPECT_EQ(goro::Select(goro::OnRecv(c, &r), goro::OnDefault()), 0);
    EXPECT_EQ(r, std::optional<int>(1));
    EXPECT_EQ(goro::Select(goro::OnRecv(c, &r), goro::OnDefault()), 0);
    EXPECT_EQ(r, std::optional<int>(2));
    EXPECT_EQ(goro::Select(goro::OnRecv(c, &r), goro::OnDefault()), 0);
    EXPECT_EQ(r, std::nullopt);
  });
}

TEST(SelectTest, MoveOnlyValueIsMovedOnlyWhenItsCaseIsChosen) {
  RunBounded([] {
    goro::Chan<std::unique_ptr<int>> c(1);
    c.Send(std::make_unique<int>(1));  // now full
    auto p = std::make_unique<int>(2);
    EXPECT_EQ(goro::Select(goro::OnSend(c, &p), goro::OnDefault()), 1);
    ASSERT_NE(p, nullptr) << "the value of a send case that was not chosen was moved from";
    EXPECT_EQ(*p, 2);
    std::optional<std::unique_ptr<int>> r;
    EXPECT_EQ(goro::Select(goro::OnRecv(c, &r), goro::OnDefault()), 0);
    ASSERT_TRUE(r.has_value() && *r != nullptr);
    EXPECT_EQ(**r, 1);
    EXPECT_EQ(goro::Select(goro::OnSend(c, &p), goro::OnDefault()), 0);
    EXPECT_EQ(p, nullptr);
    EXPECT_EQ(*c.Recv().value(), 2);
  });
}

TEST(SelectTest, SameChannelInTwoCasesDeliversOnce) {
  RunBounded([] {
    goro::Chan<int> c(1);
    int counts[2] = {0, 0};
    int bad = 0;
    for (int i = 0; i < 1000; ++i) {
      c.Send(i);
      std::optional<int> a, b;
      int idx = goro::Select(goro::OnRecv(c, &a), goro::OnRecv(c, &b), goro::OnDefault());
      if (idx == 0 && a == std::optional<int>(i) && !b) {
        ++counts[0];
      } else if (idx == 1 && b == std::optional<int>(i) && !a) {
        ++counts[1];
      } else {
        ++bad;
      }
      if (c.size() != 0) ++bad;
    }
    EXPECT_EQ(bad, 0);
    EXPECT_GT(counts[0], 0);
    EXPECT_GT(counts[1], 0);
  });
}

// ---------------------------------------------------------------------------
// Blocking select.

TEST(SelectTest, BlockingSelectWakesOnEitherChannel) {
  RunBounded([] {
    for (int which = 0; which < 2; ++which) {
      goro::Chan<int> a, b;
      goro::Go([a, b, which]() mutable {
        goro::SleepFor(absl::Milliseconds(20));
        (which == 0 ? a : b).Send(100 + which);
      });
      std::optional<int> ra, rb;
      int idx = goro::Select(goro::OnRecv(a, &ra), goro::OnRecv(b, &rb));
      EXPECT_EQ(idx, which);
      EXPECT_EQ(which == 0 ? ra : rb, std::optional<int>(100 + which));
      EXPECT_FALSE((which == 0 ? rb : ra).has_value());
    }
  });
}

// A blocking Select over N receive cases, woken by a send on case `which`.
template <size_t... I>
int SelectOnAll(std::vector<goro::Chan<int>>& chans, std::vector<std::optional<int>>& outs,
                std::index_sequence<I...>) {
  return goro::Select(goro::OnRecv(chans[I], &outs[I])...);
}

// Wide selects block and wake like two-case ones: 20 cases take their
// Sudogs from the P's wait-record cache (reserved before the channel locks),
// 40 from an array of their own (more than a cache batch of 32).
template <size_t N>
void WideSelectWakesOnEachCase() {
  for (int which : {0, static_cast<int>(N) / 2, static_cast<int>(N) - 1}) {
    std::vector<goro::Chan<int>> chans(N);
    std::vector<std::optional<int>> outs(N);
    goro::Chan<int> done;
    goro::Go([&] { done.Send(SelectOnAll(chans, outs, std::make_index_sequence<N>())); });
    goro::SleepFor(absl::Milliseconds(5));  // usually parked by now; either way it must win `which`
    chans[which].Send(which + 1000);
    EXPECT_EQ(done.Recv(), std::optional<int>(which)) << N << " cases";
    for (int i = 0; i < static_cast<int>(N); ++i) {
      EXPECT_EQ(outs[i], i == which ? std::optional<int>(which + 1000) : std::nullopt) << N << " cases, case " << i;
    }
  }
}

TEST(SelectTest, WideBlockingSelectsWakeOnEachCase) {
  RunBounded([] {
    WideSelectWakesOnEachCase<20>();
    WideSelectWakesOnEachCase<40>();
  });
}

TEST(SelectTest, BlockingSendCaseWakesWhenAReceiverArrives) {
  RunBounded([] {
    goro::Chan<int> out, in;
    std::atomic<int> got{-1};
    goro::WaitGroup wg;
    wg.Add(1);
    goro::Go([&] {
      goro::SleepFor(absl::Milliseconds(20));
      got = out.Recv().value_or(-2);
      wg.Done();
    });
    int v = 5;
    std::optional<int> r;
    EXPECT_EQ(goro::Select(goro::OnRecv(in, &r), goro::OnSend(out, &v)), 1);
    wg.Wait();
    EXPECT_EQ(got.load(), 5);
  });
}

TEST(SelectTest, CloseWakesABlockedSelect) {
  RunBounded([] {
    goro::Chan<int> a, b;
    goro::Go([b]() mutable {
      goro::SleepFor(absl::Milliseconds(20));
      b.Close();
    });
    std::optional<int> ra, rb = 1;
    EXPECT_EQ(goro::Select(goro::OnRecv(a, &ra), goro::OnRecv(b, &rb)), 1);
    EXPECT_FALSE(rb.has_value());
  });
}

// Counts destructions of the instances it was made with (not of moved-from
// ones), to see when a channel holding one in its buffer is freed.
struct Counted {
  explicit Counted(std::atomic<int>* d) : destroyed(d) {}
  Counted(Counted&& o) noexcept : destroyed(std::exchange(o.destroyed, nullptr)) {}
  ~Counted() {
    if (destroyed != nullptr) destroyed->fetch_add(1);
  }
  std::atomic<int>* destroyed;
};

// True once goroutine `id` is parked in a Select, as a dump shows it.
bool ParkedInSelect(int64_t id) {
  std::ostringstream out;
  goro::DumpGoroutines(out);
  return out.str().find("goroutine " + std::to_string(id) + " [select") != std::string::npos;
}

// Go lets the last reference to a channel go while a goroutine selects on it
// (`s.work = make(chan T)` while another goroutine waits on the old one). Here
// the only handle to a full channel is dropped while a Select waits to send
// on it; another case then wakes the Select. The channel, with the value in
// its buffer, must live until the Select has left its queue, and go then.
// Fails if a parked Select holds no reference: the drop frees the channel
// (destroying the buffered value at once), and the Select's clean-up then
// unlinks its waiter from freed memory, which a new channel may own.
TEST(SelectTest, ParkedSelectKeepsAChannelWhoseLastHandleGoes) {
  RunBounded([] {
    std::atomic<int> destroyed{0};
    auto full = std::make_unique<goro::Chan<Counted>>(1);
    full->Send(Counted(&destroyed));
    goro::Chan<int> quit;
    std::atomic<int64_t> id{0};
    goro::WaitGroup wg;
    wg.Add(1);
    int chosen = -1;
    goro::Go([&] {
      id = goro::GoroutineId();
      Counted v(nullptr);
      std::optional<int> q;
      chosen = goro::Select(goro::OnSend(*full, &v), goro::OnRecv(quit, &q));
      wg.Done();
    });
    ASSERT_TRUE(Eventually([&] { return id != 0 && ParkedInSelect(id); }));
    full.reset();  // the last handle
    EXPECT_EQ(destroyed.load(), 0) << "the channel was freed under the parked Select";
    quit.Close();
    wg.Wait();
    EXPECT_EQ(chosen, 1);
    EXPECT_EQ(destroyed.load(), 1) << "the Select kept the channel after it woke";
  });
}

TEST(SelectTest, SelectWithOnlyNilChannelsOrNoCasesBlocksForever) {
  auto nil_returned = std::make_shared<std::atomic<bool>>(false);
  auto empty_returned = std::make_shared<std::atomic<bool>>(false);
  RunBounded([&] {
    goro::Go([nil_returned] {
      goro::Chan<int> nil(nullptr);
      std::optional<int> r;
      int v = 1;
      goro::Select(goro::OnRecv(nil, &r), goro::OnSend(nil, &v));
      *nil_returned = true;
    });
    goro::Go([empty_returned] {
      goro::Select();
      *empty_returned = true;
    });
    goro::SleepFor(absl::Milliseconds(200));
  });
  EXPECT_FALSE(nil_returned->load());
  EXPECT_FALSE(empty_returned->load());
}

TEST(SelectTest, TimeoutWithAfter) {
  RunBounded([] {
    goro::Chan<int> never;
    auto timeout = goro::After(absl::Milliseconds(30));
    std::optional<int> r;
    std::optional<absl::Time> fired;
    auto start = Now();
    int idx = goro::Select(goro::OnRecv(never, &r), goro::OnRecv(timeout, &fired));
    absl::Duration waited = Since(start);
    EXPECT_EQ(idx, 1);
    EXPECT_TRUE(fired.has_value());
    EXPECT_GE(waited, absl::Milliseconds(30));
    EXPECT_LT(waited, absl::Seconds(5));
  });
}

// Go's `case <-time.After(d)`: the case takes the temporary channel straight
// from After, and keeps it alive itself, so a case kept in a variable and
// used after the temporary is gone still works. Without the reference the
// channel is freed once its timer fires (ASan: heap-use-after-free).
TEST(SelectTest, CaseOnATemporaryChannelKeepsItAlive) {
  RunBounded([] {
    goro::Chan<int> never;
    std::optional<int> r;
    std::optional<absl::Time> fired;
    EXPECT_EQ(goro::Select(goro::OnRecv(never, &r), goro::OnRecv(goro::After(absl::Milliseconds(5)), &fired)), 1);
    EXPECT_TRUE(fired.has_value());

    fired.reset();
    goro::SelectCase timeout = goro::OnRecv(goro::After(absl::Milliseconds(5)), &fired);
    goro::SleepFor(absl::Milliseconds(20));  // the timer has fired and dropped its reference
    goro::SelectCase copy = timeout;         // a copy holds one of its own
    EXPECT_EQ(goro::Select(goro::OnRecv(never, &r), copy), 1);
    EXPECT_TRUE(fired.has_value());

    std::optional<int> sent_back;
    int v = 7;
    goro::Chan<int> shared(1);
    auto handle = [&shared] { return shared; };  // a copy of a handle, as a function returns one
    EXPECT_EQ(goro::Select(goro::OnSend(handle(), &v)), 0);
    EXPECT_EQ(goro::Select(goro::OnRecv(handle(), &sent_back)), 0);
    EXPECT_EQ(sent_back, std::optional<int>(7));
  });
}

TEST(SelectTest, ValueBeatsALongTimeout) {
  RunBounded([] {
    goro::Chan<int> c;
    goro::Go([c]() mutable {
      goro::SleepFor(absl::Milliseconds(10));
      c.Send(3);
    });
    auto timeout = goro::After(absl::Seconds(20));
    std::optional<int> r;
    std::optional<absl::Time> fired;
    auto start = Now();
    EXPECT_EQ(goro::Select(goro::OnRecv(c, &r), goro::OnRecv(timeout, &fired)), 0);
    EXPECT_EQ(r, std::optional<int>(3));
    EXPECT_FALSE(fired.has_value());
    EXPECT_LT(Since(start), absl::Seconds(10));
  });
}

// A receive case writes its target only when it is chosen, as Go's
// `case v = <-c:` does: a value, or nullopt once the channel is closed and
// drained - also for a case kept and used again, and for a Select blocked
// when Close comes. Fails if the target is reset when the case is made
// (it was): the kept case kept its old 7, and the default's Select wiped 42.
TEST(SelectTest, RecvCaseWritesItsTargetOnlyWhenChosen) {
  RunBounded([] {
    goro::Chan<int> c(1);
    std::optional<int> v;
    const goro::SelectCase kept = goro::OnRecv(c, &v);
    c.Send(7);
    EXPECT_EQ(goro::Select(kept), 0);
    EXPECT_EQ(v, std::optional<int>(7));
    c.Close();
    EXPECT_EQ(goro::Select(kept), 0);
    EXPECT_EQ(v, std::nullopt) << "a kept case on a closed, drained channel kept its last value";

    goro::Chan<int> idle;
    std::optional<int> last = 42;
    EXPECT_EQ(goro::Select(goro::OnRecv(idle, &last), goro::OnDefault()), 1);
    EXPECT_EQ(last, std::optional<int>(42)) << "a case that was not chosen changed its target";

    goro::Chan<int> closing;
    std::optional<int> got = 5;
    goro::Go([closing]() mutable {
      goro::SleepFor(absl::Milliseconds(5));
      closing.Close();
    });
    EXPECT_EQ(goro::Select(goro::OnRecv(closing, &got), goro::OnRecv(idle, &last)), 0);
    EXPECT_EQ(got, std::nullopt) << "the Close that woke the Select left its target's old value";
    EXPECT_EQ(last, std::optional<int>(42));
  });
}

// Go's `case cur = <-sw:` beside `case x := <-cur:`, which is
// Select(OnRecv(*cur, &x), OnRecv(sw, &cur)): when the switch wins, the old
// value of `cur`, the last handle to a channel this Select has locked, goes.
// Fails if the target is assigned with the channel locks held (the watchdog
// ends the test): the old handle's release waits for ever for the lock of
// its channel, which the Select holds.
TEST(SelectTest, RecvCaseMayReplaceTheLastHandleOfAnotherCasesChannel) {
  RunBounded([] {
    goro::Chan<goro::Chan<int>> sw(1);
    std::optional<goro::Chan<int>> cur = goro::Chan<int>(1);
    for (int i = 0; i < 3; ++i) {
      sw.Send(goro::Chan<int>(1));
      std::optional<int> x;
      EXPECT_EQ(goro::Select(goro::OnRecv(*cur, &x), goro::OnRecv(sw, &cur)), 1);
      ASSERT_TRUE(cur.has_value());
      cur->Send(i);  // the new channel works
      EXPECT_EQ(cur->Recv(), std::optional<int>(i));
    }
  });
}

// A token that goes back to its pool when it is destroyed (RAII).
struct PoolToken {
  PoolToken(goro::Chan<PoolToken>* pool, int id) : pool(pool), id(id) {}
  PoolToken(PoolToken&& o) noexcept : pool(std::exchange(o.pool, nullptr)), id(o.id) {}
  ~PoolToken() {
    if (pool != nullptr) pool->Send(PoolToken(pool, id));
  }
  goro::Chan<PoolToken>* pool;  // nullptr: moved from, or not to go back
  int id;
};

// A Select that takes a token into the same target each round: assigning
// the target destroys the previous token, which sends itself back on the
// channel the Select received from. Fails if the target is assigned with the
// channel's lock held (the watchdog ends the test): that Send waits for ever
// for the lock its own Select holds.
TEST(SelectTest, RecvCaseTargetOldValueMayUseTheChannel) {
  RunBounded([] {
    goro::Chan<PoolToken> pool(2);
    pool.Send(PoolToken(&pool, 1));
    pool.Send(PoolToken(&pool, 2));
    goro::Chan<int> quit;
    std::optional<PoolToken> token;
    for (int i = 0; i < 4; ++i) {
      std::optional<int> q;
      EXPECT_EQ(goro::Select(goro::OnRecv(pool, &token), goro::OnRecv(quit, &q)), 0);
      ASSERT_TRUE(token.has_value());
      EXPECT_EQ(pool.size(), 1u) << "the previous token did not go back";
    }
    token->pool = nullptr;
    pool.Close();
    for (PoolToken& t : pool) t.pool = nullptr;
  });
}

// The old value's destructor is the program's code, not the runtime's: it
// may be preempted, and it may block where sysmon can take the P away. Here
// it asks its goroutine to yield, as sysmon would, and reaches Checkpoint().
// Fails if the target is assigned inside the runtime (preemption deferred:
// the Checkpoint does not yield).
struct YieldsWhenDestroyed {
  explicit YieldsWhenDestroyed(uint64_t* yielded) : yielded(yielded) {}
  YieldsWhenDestroyed(YieldsWhenDestroyed&& o) noexcept : yielded(std::exchange(o.yielded, nullptr)) {}
  ~YieldsWhenDestroyed() {
    if (yielded == nullptr) return;
    const uint64_t before = goro::CurrentGoroutinePreemptions();
    goro::internal::CurrentGoroutine()->stackguard0.store(goro::internal::kStackPreempt);
    goro::Checkpoint();
    *yielded += goro::CurrentGoroutinePreemptions() - before;
  }
  uint64_t* yielded;  // nullptr: moved from
};

TEST(SelectTest, RecvCaseTargetOldValueIsDestroyedOutsideTheRuntime) {
  RunBounded([] {
    uint64_t yielded = 0;
    goro::Chan<YieldsWhenDestroyed> c(1);
    goro::Chan<int> quit;
    std::optional<YieldsWhenDestroyed> target(std::in_place, &yielded);
    c.Send(YieldsWhenDestroyed(nullptr));
    std::optional<int> q;
    EXPECT_EQ(goro::Select(goro::OnRecv(c, &target), goro::OnRecv(quit, &q)), 0);
    EXPECT_EQ(yielded, 1u) << "the old value's destructor ran where preemption is deferred";
  });
}

// An element too large or too aligned for the Select's inline scratch
// storage is received through an allocated one, at once and when parked.
TEST(SelectTest, RecvCaseOfALargeOverAlignedElement) {
  struct alignas(64) Wide {
    char bytes[200];
    int v;
  };
  RunBounded([] {
    goro::Chan<Wide> wide(1);
    goro::Chan<int> narrow;
    Wide w{};
    w.v = 1;
    wide.Send(w);
    std::optional<Wide> got;
    std::optional<int> n;
    EXPECT_EQ(goro::Select(goro::OnRecv(narrow, &n), goro::OnRecv(wide, &got)), 1);
    ASSERT_TRUE(got.has_value());
    EXPECT_EQ(got->v, 1);
    goro::Go([wide]() mutable {
      Wide w2{};
      w2.v = 2;
      wide.Send(w2);
    });
    EXPECT_EQ(goro::Select(goro::OnRecv(narrow, &n), goro::OnRecv(wide, &got)), 1);
    ASSERT_TRUE(got.has_value());
    EXPECT_EQ(got->v, 2);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(&*got) % 64, 0u);
  });
}

// Records the goroutine that destroys it (0 for a plain thread), unless it
// was moved from.
struct DestroyedBy {
  explicit DestroyedBy(std::atomic<int64_t>* by) : by(by) {}
  DestroyedBy(DestroyedBy&& o) noexcept : by(std::exchange(o.by, nullptr)) {}
  ~DestroyedBy() {
    if (by != nullptr) by->store(goro::GoroutineId());
  }
  std::atomic<int64_t>* by;
};

// A parked Select's receive case completed by another goroutine's Send, or
// by its Close: the target's old value is destroyed by the selecting
// goroutine when it wakes, as Go assigns `case v = <-c:` there. Fails if the
// sender or closer assigns the target (it did, under the channel's lock).
TEST(SelectTest, RecvCaseTargetOldValueIsDestroyedByTheSelectingGoroutine) {
  RunBounded([] {
    for (bool close : {false, true}) {
      goro::Chan<DestroyedBy> c;
      goro::Chan<int> quit;
      std::atomic<int64_t> id{0};
      std::atomic<int64_t> destroyed_by{-1};
      goro::WaitGroup wg;
      wg.Add(1);
      goro::Go([&] {
        std::optional<DestroyedBy> target;
        target.emplace(&destroyed_by);
        std::optional<int> q;
        id = goro::GoroutineId();
        EXPECT_EQ(goro::Select(goro::OnRecv(c, &target), goro::OnRecv(quit, &q)), 0);
        EXPECT_EQ(target.has_value(), !close);
        wg.Done();
      });
      ASSERT_TRUE(Eventually([&] { return id != 0 && ParkedInSelect(id); }));
      if (close) {
        c.Close();
      } else {
        c.Send(DestroyedBy(nullptr));
      }
      wg.Wait();
      EXPECT_EQ(destroyed_by.load(), id.load())
          << (close ? "Close" : "Send") << " destroyed the parked Select's old value (goroutine "
          << goro::GoroutineId() << " is the " << (close ? "closer" : "sender") << ")";
    }
  });
}

// ---------------------------------------------------------------------------
// Fairness: among ready cases the choice is uniformly random.

TEST(SelectTest, FairBetweenTwoAlwaysReadyClosedChannels) {
  RunBounded([] {
    constexpr int kSelects = 10000;
    goro::Chan<int> a, b;
    a.Close();
    b.Close();
    int counts[2] = {0, 0};
    std::optional<int> ra, rb;
    for (int i = 0; i < kSelects; ++i) {
      int idx = goro::Select(goro::OnRecv(a, &ra), goro::OnRecv(b, &rb));
      ASSERT_TRUE(idx == 0 || idx == 1) << idx;
      ++counts[idx];
    }
    // Uniform choice: mean 5000, standard deviation 50; 40%..60% is 20 sigma.
    EXPECT_GE(counts[0], kSelects * 4 / 10) << counts[0] << " vs " << counts[1];
    EXPECT_LE(counts[0], kSelects * 6 / 10) << counts[0] << " vs " << counts[1];
  });
}

TEST(SelectTest, FairBetweenTwoReadyBufferedChannels) {
  RunBounded([] {
    constexpr int kSelects = 10000;
    goro::Chan<int> a(1), b(1);
    a.Send(0);
    b.Send(1);
    int counts[2] = {0, 0};
    int bad = 0;
    for (int i = 0; i < kSelects; ++i) {
      std::optional<int> ra, rb;
      int idx = goro::Select(goro::OnRecv(a, &ra), goro::OnRecv(b, &rb), goro::OnDefault());
      if (idx == 0 && ra == std::optional<int>(0)) {
        ++counts[0];
        a.Send(0);
      } else if (idx == 1 && rb == std::optional<int>(1)) {
        ++counts[1];
        b.Send(1);
      } else {
        ++bad;
      }
    }
    EXPECT_EQ(bad, 0);
    EXPECT_GE(counts[0], kSelects * 4 / 10) << counts[0] << " vs " << counts[1];
    EXPECT_LE(counts[0], kSelects * 6 / 10) << counts[0] << " vs " << counts[1];
  });
}

TEST(SelectTest, FairBetweenAReadySendAndAReadyRecv) {
  RunBounded([] {
    constexpr int kSelects = 10000;
    goro::Chan<int> in(1), out(1);
    in.Send(0);
    int counts[2] = {0, 0};
    for (int i = 0; i < kSelects; ++i) {
      std::optional<int> r;
      int v = 1;
      int idx = goro::Select(goro::OnRecv(in, &r), goro::OnSend(out, &v));
      ASSERT_TRUE(idx == 0 || idx == 1) << idx;
      ++counts[idx];
      if (idx == 0) {
        in.Send(0);
      } else {
        out.Recv();
      }
    }
    EXPECT_GE(counts[0], kSelects * 4 / 10) << counts[0] << " vs " << counts[1];
    EXPECT_LE(counts[0], kSelects * 6 / 10) << counts[0] << " vs " << counts[1];
  });
}

// ---------------------------------------------------------------------------
// Many goroutines selecting at once: no value lost, none delivered twice,
// and the Go idiom of turning a closed channel into a nil one.

TEST(SelectTest, ConcurrentSelectsLoseAndDuplicateNothing) {
  for (size_t cap : {size_t{0}, size_t{4}}) {
    RunBounded([cap] {
      constexpr int kProducers = 4, kConsumers = 4, kPerProducer = 4000;
      goro::Chan<int64_t> a(cap), b(cap);
      goro::WaitGroup producers, consumers;
      std::atomic<int64_t> sum{0}, count{0};
      producers.Add(kProducers);
      consumers.Add(kConsumers);
      for (int p = 0; p < kProducers; ++p) {
        goro::Go([&, p] {
          for (int i = 0; i < kPerProducer; ++i) {
            int64_t v = int64_t{p} * kPerProducer + i;
            goro::Select(goro::OnSend(a, &v), goro::OnSend(b, &v));
          }
          producers.Done();
        });
      }
      for (int q = 0; q < kConsumers; ++q) {
        goro::Go([&] {
          goro::Chan<int64_t> ca = a, cb = b;
          int64_t local = 0, n = 0;
          while (!ca.is_nil() || !cb.is_nil()) {
            std::optional<int64_t> ra, rb;
            int idx = goro::Select(goro::OnRecv(ca, &ra), goro::OnRecv(cb, &rb));
            std::optional<int64_t>& r = idx == 0 ? ra : rb;
            if (!r) {
              (idx == 0 ? ca : cb) = goro::Chan<int64_t>(nullptr);  // closed: stop selecting on it
              continue;
            }
            local += *r;
            ++n;
          }
          sum += local;
          count += n;
          consumers.Done();
        });
      }
      producers.Wait();
      a.Close();
      b.Close();
      consumers.Wait();
      constexpr int64_t kN = int64_t{kProducers} * kPerProducer;
      EXPECT_EQ(count.load(), kN) << "cap " << cap;
      EXPECT_EQ(sum.load(), kN * (kN - 1) / 2) << "cap " << cap;
    });
  }
}

// ---------------------------------------------------------------------------
// Plain threads.

TEST(SelectThreadTest, SelectFromAPlainThread) {
  goro_test::StartRuntime();
  Watchdog dog;
  goro::Chan<int> a, b;
  goro::Go([b]() mutable {
    goro::SleepFor(absl::Milliseconds(10));
    b.Send(8);
  });
  std::optional<int> ra, rb;
  EXPECT_EQ(goro::Select(goro::OnRecv(a, &ra), goro::OnRecv(b, &rb)), 1);
  EXPECT_EQ(rb, std::optional<int>(8));
  EXPECT_EQ(goro::Select(goro::OnRecv(a, &ra), goro::OnDefault()), 1);
  auto timeout = goro::After(absl::Milliseconds(10));
  std::optional<absl::Time> fired;
  EXPECT_EQ(goro::Select(goro::OnRecv(a, &ra), goro::OnRecv(timeout, &fired)), 1);
  EXPECT_TRUE(fired.has_value());
}

}  // namespace
