// Channels: Go's chan semantics, from goroutines and from plain threads.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <iterator>
#include <memory>
#include <numeric>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "goro/goro.h"
#include "gtest/gtest.h"
#include "test_util.h"

namespace {

using goro_test::Eventually;
using goro_test::RunBounded;
using goro_test::Watchdog;

constexpr absl::Duration kShortWait = absl::Milliseconds(50);

// ---------------------------------------------------------------------------
// Unbuffered channels: a send and a receive meet.

TEST(ChanTest, UnbufferedSendBlocksUntilAReceiverTakesTheValue) {
  RunBounded([] {
    goro::Chan<int> c;
    EXPECT_EQ(c.capacity(), 0u);
    std::atomic<bool> sent{false};
    goro::WaitGroup wg;
    wg.Add(1);
    goro::Go([&] {
      c.Send(42);
      sent = true;
      wg.Done();
    });
    goro::SleepFor(kShortWait);
    EXPECT_FALSE(sent.load()) << "Send on an unbuffered channel returned with no receiver";
    EXPECT_EQ(c.size(), 0u) << "an unbuffered channel never holds a value";
    EXPECT_EQ(c.Recv().value_or(-1), 42);
    wg.Wait();
    EXPECT_TRUE(sent.load());
  });
}

TEST(ChanTest, UnbufferedRecvBlocksUntilASenderArrives) {
  RunBounded([] {
    goro::Chan<int> c;
    std::atomic<int> got{-1};
    goro::WaitGroup wg;
    wg.Add(1);
    goro::Go([&] {
      got = c.Recv().value_or(-2);
      wg.Done();
    });
    goro::SleepFor(kShortWait);
    EXPECT_EQ(got.load(), -1) << "Recv returned before anything was sent";
    c.Send(7);
    wg.Wait();
    EXPECT_EQ(got.load(), 7);
  });
}

TEST(ChanTest, UnbufferedPingPong) {
  RunBounded([] {
    constexpr int kRounds = 20000;
    goro::Chan<int> ping, pong;
    goro::WaitGroup wg;
    wg.Add(1);
    goro::Go([&] {
      for (int i = 0; i < kRounds; ++i) pong.Send(ping.Recv().value_or(-1) + 1);
      wg.Done();
    });
    int bad = 0;
    for (int i = 0; i < kRounds; ++i) {
      ping.Send(i);
      if (pong.Recv().value_or(-1) != i + 1) ++bad;
    }
    wg.Wait();
    EXPECT_EQ(bad, 0);
  });
}

// A literal 0 is a capacity, though it is also a null pointer constant:
// Chan<int>(0) is the unbuffered channel, and only nullptr makes the nil one.
// Fails to compile if the nil constructor takes anything a 0 converts to
// (Chan(size_t) and Chan(std::nullptr_t) were ambiguous for a 0).
static_assert(std::is_constructible_v<goro::Chan<int>, int>);
static_assert(std::is_constructible_v<goro::Chan<int>, std::nullptr_t>);
TEST(ChanTest, CapacityZeroIsUnbuffered) {
  RunBounded([] {
    goro::Chan<int> c(0);
    EXPECT_FALSE(c.is_nil());
    EXPECT_EQ(c.capacity(), 0u);
    goro::Go([c]() mutable { c.Send(7); });
    EXPECT_EQ(c.Recv(), std::optional<int>(7));
    EXPECT_TRUE(goro::Chan<int>(nullptr).is_nil());
  });
}

// ---------------------------------------------------------------------------
// Buffered channels: FIFO, capacity, blocking when full.

TEST(ChanTest, BufferedKeepsFifoOrderAndReportsSizeAndCapacity) {
  RunBounded([] {
    goro::Chan<int> c(100);
    EXPECT_EQ(c.capacity(), 100u);
    EXPECT_EQ(c.size(), 0u);
    for (int i = 0; i < 100; ++i) c.Send(i);  // room for every one: never blocks
    EXPECT_EQ(c.size(), 100u);
    EXPECT_EQ(c.capacity(), 100u);
    for (int i = 0; i < 100; ++i) {
      EXPECT_EQ(c.Recv().value_or(-1), i);
      EXPECT_EQ(c.size(), static_cast<size_t>(99 - i));
    }
  });
}

// Like Go's len(ch), size() is a snapshot that needs no lock: reading it while
// other goroutines send and receive is not a data race (TSan would say so).
TEST(ChanTest, SizeMayBeReadWhileOthersSendAndReceive) {
  RunBounded([] {
    goro::Chan<int> c(4);
    std::atomic<bool> stop{false};
    size_t largest = 0;
    std::thread reader([&] {
      while (!stop.load()) largest = std::max(largest, c.size());
    });
    goro::WaitGroup wg;
    wg.Add(1);
    goro::Go([c, &wg]() mutable {
      for (int i = 0; i < 20000; ++i) c.Send(i);
      wg.Done();
    });
    for (int i = 0; i < 20000; ++i) EXPECT_EQ(c.Recv().value_or(-1), i);
    wg.Wait();
    stop = true;
    reader.join();
    EXPECT_LE(largest, 4u);
  });
}

TEST(ChanTest, BufferedFifoAcrossWraparound) {
  RunBounded([] {
    goro::Chan<int> c(3);
    int next_send = 0, next_recv = 0, bad = 0;
    for (int round = 0; round < 1000; ++round) {
      int n = 1 + round % 3;
      for (int i = 0; i < n; ++i) c.Send(next_send++);
      for (int i = 0; i < n; ++i) {
        if (c.Recv().value_or(-1) != next_recv) ++bad;
        ++next_recv;
      }
    }
    EXPECT_EQ(bad, 0);
  });
}

TEST(ChanTest, BufferedSendBlocksWhenFull) {
  RunBounded([] {
    goro::Chan<int> c(2);
    c.Send(1);
    c.Send(2);
    EXPECT_EQ(c.size(), 2u);
    std::atomic<bool> third_sent{false};
    goro::WaitGroup wg;
    wg.Add(1);
    goro::Go([&] {
      c.Send(3);
      third_sent = true;
      wg.Done();
    });
    goro::SleepFor(kShortWait);
    EXPECT_FALSE(third_sent.load()) << "Send on a full channel did not block";
    EXPECT_EQ(c.size(), 2u);
    EXPECT_EQ(c.Recv().value_or(-1), 1);
    wg.Wait();  // the receive made room
    EXPECT_TRUE(third_sent.load());
    EXPECT_EQ(c.size(), 2u);
    EXPECT_EQ(c.Recv().value_or(-1), 2);
    EXPECT_EQ(c.Recv().value_or(-1), 3);
    EXPECT_EQ(c.size(), 0u);
  });
}

TEST(ChanTest, BufferedRecvBlocksWhenEmpty) {
  RunBounded([] {
    goro::Chan<int> c(4);
    std::atomic<int> got{-1};
    goro::WaitGroup wg;
    wg.Add(1);
    goro::Go([&] {
      got = c.Recv().value_or(-2);
      wg.Done();
    });
    goro::SleepFor(kShortWait);
    EXPECT_EQ(got.load(), -1);
    c.Send(5);
    wg.Wait();
    EXPECT_EQ(got.load(), 5);
  });
}

// ---------------------------------------------------------------------------
// Close.

TEST(ChanTest, RecvOnClosedReturnsBufferedValuesThenNullopt) {
  RunBounded([] {
    goro::Chan<int> c(3);
    c.Send(1);
    c.Send(2);
    c.Close();
    EXPECT_EQ(c.size(), 2u);
    EXPECT_EQ(c.Recv(), std::optional<int>(1));
    EXPECT_EQ(c.Recv(), std::optional<int>(2));
    EXPECT_EQ(c.Recv(), std::nullopt);
    EXPECT_EQ(c.Recv(), std::nullopt) << "a closed, drained channel stays drained";
  });
}

TEST(ChanTest, RecvOnClosedUnbufferedReturnsNulloptAtOnce) {
  RunBounded([] {
    goro::Chan<int> c;
    c.Close();
    for (int i = 0; i < 3; ++i) EXPECT_EQ(c.Recv(), std::nullopt);
  });
}

TEST(ChanTest, CloseWakesEveryBlockedReceiver) {
  for (size_t cap : {size_t{0}, size_t{4}}) {
    RunBounded([cap] {
      constexpr int kReceivers = 20;
      goro::Chan<int> c(cap);
      std::atomic<int> started{0}, got_nullopt{0}, got_value{0};
      goro::WaitGroup wg;
      wg.Add(kReceivers);
      for (int i = 0; i < kReceivers; ++i) {
        goro::Go([&] {
          ++started;
          if (c.Recv().has_value()) {
            ++got_value;
          } else {
            ++got_nullopt;
          }
          wg.Done();
        });
      }
      EXPECT_TRUE(Eventually([&] { return started.load() == kReceivers; }));
      goro::SleepFor(kShortWait);  // let them block
      EXPECT_EQ(got_nullopt.load() + got_value.load(), 0);
      c.Close();
      wg.Wait();
      EXPECT_EQ(got_nullopt.load(), kReceivers) << "cap " << cap;
      EXPECT_EQ(got_value.load(), 0);
    });
  }
}

// ---------------------------------------------------------------------------
// Range-style iteration.

TEST(ChanTest, RangeReceivesEverythingInOrderAndEndsAtClose) {
  for (size_t cap : {size_t{0}, size_t{1}, size_t{16}}) {
    RunBounded([cap] {
      constexpr int kCount = 1000;
      goro::Chan<int> c(cap);
      goro::Go([c]() mutable {
        for (int i = 0; i < kCount; ++i) c.Send(i);
        c.Close();
      });
      int expected = 0, bad = 0;
      for (int& v : c) {
        if (v != expected) ++bad;
        ++expected;
      }
      EXPECT_EQ(expected, kCount) << "cap " << cap;
      EXPECT_EQ(bad, 0) << "cap " << cap;
    });
  }
}

// A type that can be moved but not assigned (a const member) works with
// Send and Recv, so range must work too: it receives into its slot in place.
// Fails to compile if the iterator assigns the received optional.
struct NotAssignable {
  const int v;
  explicit NotAssignable(int x) : v(x) {}
  NotAssignable(NotAssignable&&) = default;
  NotAssignable& operator=(NotAssignable&&) = delete;
};

TEST(ChanTest, RangeOverAnUnassignableType) {
  RunBounded([] {
    goro::Chan<NotAssignable> c(4);
    for (int i = 0; i < 3; ++i) c.Send(NotAssignable(i));
    c.Close();
    int sum = 0, n = 0;
    for (NotAssignable& x : c) {
      sum += x.v;
      ++n;
    }
    EXPECT_EQ(n, 3);
    EXPECT_EQ(sum, 3);
  });
}

// The range iterator is a std::input_iterator, for any element type a
// channel takes (a move-only one, one that cannot be assigned), so standard
// algorithms and containers take it. Fails to compile if the iterator lacks
// `reference`, a postfix ++, a const operator* or (for NotAssignable) an
// assignment that constructs in place: std::input_iterator is then false
// and `std::vector<int> v(c.begin(), c.end())` does not compile.
static_assert(std::input_iterator<goro::Chan<int>::iterator>);
static_assert(std::input_iterator<goro::Chan<std::unique_ptr<int>>::iterator>);
static_assert(std::input_iterator<goro::Chan<NotAssignable>::iterator>);
TEST(ChanTest, RangeIteratorIsAnInputIterator) {
  RunBounded([] {
    goro::Chan<int> c(8);
    for (int i = 0; i < 5; ++i) c.Send(i);
    c.Close();
    std::vector<int> v(c.begin(), c.end());
    EXPECT_EQ(v, (std::vector<int>{0, 1, 2, 3, 4}));

    // *it++ is the value from before the ++.
    goro::Chan<std::unique_ptr<int>> p(4);
    p.Send(std::make_unique<int>(1));
    p.Send(std::make_unique<int>(2));
    p.Close();
    auto it = p.begin();
    std::unique_ptr<int> first = std::move(*it++);
    ASSERT_NE(first, nullptr);
    EXPECT_EQ(*first, 1);
    ASSERT_NE(it, p.end());
    EXPECT_EQ(**it, 2);
    ++it;
    EXPECT_EQ(it, p.end());
  });
}

TEST(ChanTest, RangeOverClosedEmptyChannelDoesNothing) {
  RunBounded([] {
    goro::Chan<int> c(2);
    c.Close();
    int n = 0;
    for ([[maybe_unused]] int& v : c) ++n;
    EXPECT_EQ(n, 0);
  });
}

// ---------------------------------------------------------------------------
// The nil channel.

TEST(ChanTest, NilChannelIsNeverReady) {
  RunBounded([] {
    goro::Chan<int> nil(nullptr);
    EXPECT_TRUE(nil.is_nil());
    EXPECT_EQ(nil.size(), 0u);
    EXPECT_EQ(nil.capacity(), 0u);
    EXPECT_FALSE(goro::Chan<int>(1).is_nil());
    std::optional<int> out;
    int v = 1;
    for (int i = 0; i < 100; ++i) {
      EXPECT_EQ(goro::Select(goro::OnRecv(nil, &out), goro::OnDefault()), 1);
      EXPECT_EQ(goro::Select(goro::OnSend(nil, &v), goro::OnDefault()), 1);
    }
    EXPECT_FALSE(out.has_value());
  });
}

TEST(ChanTest, NilChannelRecvAndSendBlockForever) {
  // The blocked goroutines are leaked on purpose; the flags they would set
  // live on the heap so that leaking them is harmless.
  auto recv_returned = std::make_shared<std::atomic<bool>>(false);
  auto send_returned = std::make_shared<std::atomic<bool>>(false);
  RunBounded([&] {
    goro::Chan<int> nil(nullptr);
    goro::Go([nil, recv_returned]() mutable {
      nil.Recv();
      *recv_returned = true;
    });
    goro::Go([nil, send_returned]() mutable {
      nil.Send(1);
      *send_returned = true;
    });
    goro::SleepFor(absl::Milliseconds(200));
  });
  EXPECT_FALSE(recv_returned->load()) << "Recv on a nil channel returned";
  EXPECT_FALSE(send_returned->load()) << "Send on a nil channel returned";
}

// ---------------------------------------------------------------------------
// Handles.

TEST(ChanTest, CopiesReferToTheSameChannel) {
  RunBounded([] {
    goro::Chan<int> a(1);
    goro::Chan<int> b = a;
    goro::Chan<int> other(1);
    EXPECT_TRUE(a == b);
    EXPECT_FALSE(a == other);
    b.Send(5);
    EXPECT_EQ(a.size(), 1u);
    EXPECT_EQ(a.Recv().value_or(-1), 5);
    b.Close();
    EXPECT_EQ(a.Recv(), std::nullopt);
  });
}

TEST(ChanTest, ChannelOutlivesTheHandleThatCreatedIt) {
  RunBounded([] {
    goro::Chan<std::string> keep(nullptr);
    {
      goro::Chan<std::string> c(2);
      c.Send("still here");
      keep = c;
    }
    EXPECT_EQ(keep.Recv().value_or(""), "still here");
  });
}

// ---------------------------------------------------------------------------
// Element types.

TEST(ChanTest, MoveOnlyElementsBuffered) {
  RunBounded([] {
    goro::Chan<std::unique_ptr<int>> c(4);
    for (int i = 0; i < 4; ++i) c.Send(std::make_unique<int>(i));
    for (int i = 0; i < 4; ++i) {
      std::optional<std::unique_ptr<int>> p = c.Recv();
      ASSERT_TRUE(p.has_value());
      ASSERT_NE(*p, nullptr);
      EXPECT_EQ(**p, i);
    }
  });
}

TEST(ChanTest, MoveOnlyElementsUnbufferedAndRange) {
  RunBounded([] {
    goro::Chan<std::unique_ptr<int>> c;
    goro::Go([c]() mutable {
      for (int i = 0; i < 100; ++i) c.Send(std::make_unique<int>(i));
      c.Close();
    });
    int expected = 0, bad = 0;
    for (std::unique_ptr<int>& p : c) {
      std::unique_ptr<int> mine = std::move(p);
      if (mine == nullptr || *mine != expected) ++bad;
      ++expected;
    }
    EXPECT_EQ(expected, 100);
    EXPECT_EQ(bad, 0);
  });
}

// A channel moves its elements with its lock held (a move that throws there
// is a fatal error: FatalTest.ChannelElementWhoseMoveThrows*). A copy that
// may throw is fine: the channel never copies. Here every copy throws, on
// every path an element takes.
struct CopyThrows {
  int v;
  explicit CopyThrows(int x) : v(x) {}
  CopyThrows(CopyThrows&& o) noexcept : v(o.v) {}
  CopyThrows(const CopyThrows&) : v(0) { throw std::runtime_error("a channel copied its element"); }
  CopyThrows& operator=(CopyThrows&&) noexcept = default;
};

TEST(ChanTest, ElementsWithANoexceptMoveAndAThrowingCopyAreNeverCopied) {
  RunBounded([] {
    // Buffered: into the buffer and out of it.
    goro::Chan<CopyThrows> b(2);
    b.Send(CopyThrows(1));
    b.Send(CopyThrows(2));
    // A full buffer with a sender waiting: the receiver takes the head and the
    // sender's value goes into the freed slot.
    goro::WaitGroup wg;
    wg.Add(1);
    goro::Go([b, &wg]() mutable {
      b.Send(CopyThrows(3));
      wg.Done();
    });
    goro::SleepFor(kShortWait);  // let it block
    for (int i = 1; i <= 3; ++i) EXPECT_EQ(b.Recv()->v, i);
    wg.Wait();
    // Unbuffered, both ways: to a waiting receiver and from a waiting sender.
    goro::Chan<CopyThrows> u;
    goro::Go([u]() mutable { u.Send(CopyThrows(4)); });
    EXPECT_EQ(u.Recv()->v, 4);
    goro::Chan<CopyThrows> got;
    goro::Go([u, got]() mutable { got.Send(std::move(*u.Recv())); });
    goro::SleepFor(kShortWait);  // let it block in Recv
    u.Send(CopyThrows(5));
    EXPECT_EQ(got.Recv()->v, 5);
    // Select, both ways, and range.
    CopyThrows six(6);
    EXPECT_EQ(goro::Select(goro::OnSend(b, &six)), 0);
    std::optional<CopyThrows> out;
    EXPECT_EQ(goro::Select(goro::OnRecv(b, &out)), 0);
    EXPECT_EQ(out->v, 6);
    b.Send(CopyThrows(7));
    b.Close();
    for (CopyThrows& e : b) EXPECT_EQ(e.v, 7);
  });
}

TEST(ChanTest, StringsSurviveTheTrip) {
  RunBounded([] {
    for (size_t cap : {size_t{0}, size_t{3}}) {
      goro::Chan<std::string> c(cap);
      goro::WaitGroup wg;
      wg.Add(1);
      goro::Go([c, &wg]() mutable {
        for (int i = 0; i < 200; ++i) c.Send(std::string(100 + i, static_cast<char>('a' + i % 26)));
        c.Close();
        wg.Done();
      });
      int i = 0, bad = 0;
      for (std::string& s : c) {
        if (s != std::string(100 + i, static_cast<char>('a' + i % 26))) ++bad;
        ++i;
      }
      wg.Wait();
      EXPECT_EQ(i, 200);
      EXPECT_EQ(bad, 0);
    }
  });
}

// Counts live instances, so that a leak or a double destruction shows.
struct Tracked {
  static std::atomic<int> live;
  int v;
  explicit Tracked(int x) : v(x) { ++live; }
  Tracked(Tracked&& o) noexcept : v(o.v) { ++live; }
  Tracked(const Tracked& o) : v(o.v) { ++live; }
  ~Tracked() { --live; }
};
std::atomic<int> Tracked::live{0};

TEST(ChanTest, BufferedValuesAreDestroyedWithTheChannel) {
  RunBounded([] {
    ASSERT_EQ(Tracked::live.load(), 0);
    {
      goro::Chan<Tracked> c(8);
      for (int i = 0; i < 5; ++i) c.Send(Tracked(i));
      EXPECT_EQ(Tracked::live.load(), 5) << "a channel holds exactly its buffered values";
      EXPECT_EQ(c.Recv()->v, 0);
      EXPECT_EQ(c.Recv()->v, 1);
      EXPECT_EQ(Tracked::live.load(), 3);
      c.Close();
      EXPECT_EQ(Tracked::live.load(), 3);
    }
    EXPECT_EQ(Tracked::live.load(), 0) << "values left in a dropped channel were not destroyed";
  });
}

// True once goroutine `id` is parked for `reason`, as a dump shows it.
bool ParkedFor(int64_t id, const std::string& reason) {
  std::ostringstream out;
  goro::DumpGoroutines(out);
  return out.str().find("goroutine " + std::to_string(id) + " [" + reason) != std::string::npos;
}

// A goroutine parked in Send keeps the channel, as its stack does in Go: when
// the last handle is dropped meanwhile, the channel and the value in its
// buffer stay. Fails if the last reference frees a channel with a Sudog
// queued: the drop then destroys the buffered value under the sender, whose
// waiter stays linked into freed memory. Afterwards the test takes a
// reference back (white-box: no program can), receives, so that the sender
// finishes, and drops the reference: the channel, with nobody waiting, is
// freed (LeakSanitizer checks that).
TEST(ChanTest, ParkedSenderKeepsItsChannelWhenTheLastHandleGoes) {
  RunBounded([] {
    ASSERT_EQ(Tracked::live.load(), 0);
    auto handle = std::make_unique<goro::Chan<Tracked>>(1);
    handle->Send(Tracked(1));  // the buffer is full
    goro::internal::ChanCore* core = handle->core();
    std::atomic<int64_t> id{0};
    goro::WaitGroup sender;
    sender.Add(1);
    goro::Go([c = handle.get(), &id, &sender] {
      id = goro::GoroutineId();
      c->Send(Tracked(2));  // parks: the buffer is full
      sender.Done();
    });
    bool parked = Eventually([&] { return id != 0 && ParkedFor(id, "chan send"); });
    EXPECT_TRUE(parked);
    EXPECT_EQ(Tracked::live.load(), 2);
    handle.reset();  // the last handle
    EXPECT_EQ(Tracked::live.load(), 2) << "the channel was freed under its parked sender";
    if (Tracked::live.load() != 2) return;  // freed: nothing to receive from
    goro::internal::ChanRef(core);
    {
      std::optional<Tracked> first;
      goro::internal::ChanRecv(core, &first);  // the sender's value moves into the buffer
      sender.Wait();
    }
    EXPECT_EQ(Tracked::live.load(), 1) << "the sender's value";
    goro::internal::ChanUnref(core);  // nobody waits: the channel goes
    EXPECT_EQ(Tracked::live.load(), 0) << "the channel or a value leaked";
  });
}

// A type with a strict alignment: the move constructor records any instance
// constructed at a misaligned address.
struct alignas(64) Aligned {
  static std::atomic<int> misaligned;
  char payload[96];
  explicit Aligned(char c) {
    Check();
    payload[0] = c;
  }
  Aligned(Aligned&& o) noexcept {
    Check();
    payload[0] = o.payload[0];
  }
  void Check() {
    if (reinterpret_cast<uintptr_t>(this) % 64 != 0) ++misaligned;
  }
};
std::atomic<int> Aligned::misaligned{0};

TEST(ChanTest, OverAlignedElementsStayAligned) {
  RunBounded([] {
    goro::Chan<Aligned> c(5);
    for (int round = 0; round < 3; ++round) {
      for (int i = 0; i < 5; ++i) c.Send(Aligned(static_cast<char>('a' + i)));
      for (int i = 0; i < 5; ++i) EXPECT_EQ(c.Recv()->payload[0], 'a' + i);
    }
    goro::Chan<Aligned> u;
    goro::Go([u]() mutable { u.Send(Aligned('z')); });
    EXPECT_EQ(u.Recv()->payload[0], 'z');
    EXPECT_EQ(Aligned::misaligned.load(), 0);
  });
}

// ---------------------------------------------------------------------------
// Many goroutines at once.

TEST(ChanTest, ManyProducersManyConsumersLoseAndDuplicateNothing) {
  for (size_t cap : {size_t{0}, size_t{8}}) {
    RunBounded([cap] {
      constexpr int kProducers = 8, kConsumers = 8, kPerProducer = 5000;
      goro::Chan<int64_t> c(cap);
      goro::WaitGroup producers, consumers;
      std::atomic<int64_t> sum{0}, count{0};
      producers.Add(kProducers);
      consumers.Add(kConsumers);
      for (int p = 0; p < kProducers; ++p) {
        goro::Go([&, p] {
          for (int i = 0; i < kPerProducer; ++i) c.Send(int64_t{p} * kPerProducer + i);
          producers.Done();
        });
      }
      for (int q = 0; q < kConsumers; ++q) {
        goro::Go([&] {
          int64_t local = 0, n = 0;
          for (int64_t& v : c) {
            local += v;
            ++n;
          }
          sum += local;
          count += n;
          consumers.Done();
        });
      }
      producers.Wait();
      c.Close();
      consumers.Wait();
      constexpr int64_t kN = int64_t{kProducers} * kPerProducer;
      EXPECT_EQ(count.load(), kN) << "cap " << cap;
      EXPECT_EQ(sum.load(), kN * (kN - 1) / 2) << "cap " << cap;
    });
  }
}

// ---------------------------------------------------------------------------
// Plain threads.

TEST(ChanThreadTest, ThreadToThreadWithoutGoroutines) {
  Watchdog dog;
  for (size_t cap : {size_t{0}, size_t{4}}) {
    goro::Chan<int> c(cap);
    std::thread producer([c]() mutable {
      for (int i = 0; i < 2000; ++i) c.Send(i);
      c.Close();
    });
    int expected = 0, bad = 0;
    for (int& v : c) {
      if (v != expected) ++bad;
      ++expected;
    }
    producer.join();
    EXPECT_EQ(expected, 2000) << "cap " << cap;
    EXPECT_EQ(bad, 0);
  }
}

TEST(ChanThreadTest, GoroutineSendsToAThread) {
  goro_test::StartRuntime();
  Watchdog dog;
  for (size_t cap : {size_t{0}, size_t{4}}) {
    goro::Chan<int> c(cap);
    goro::Go([c]() mutable {
      for (int i = 0; i < 2000; ++i) c.Send(i);
      c.Close();
    });
    int expected = 0, bad = 0;
    for (int& v : c) {  // this is the test's own thread, not a goroutine
      if (v != expected) ++bad;
      ++expected;
    }
    EXPECT_EQ(expected, 2000) << "cap " << cap;
    EXPECT_EQ(bad, 0);
  }
}

TEST(ChanThreadTest, ThreadSendsToAGoroutine) {
  goro_test::StartRuntime();
  for (size_t cap : {size_t{0}, size_t{4}}) {
    goro::Chan<int> c(cap);
    std::atomic<int> received{0}, bad{0};
    absl::Notification done;
    goro::Go([&] {
      int expected = 0;
      for (int& v : c) {
        if (v != expected) ++bad;
        ++expected;
      }
      received = expected;
      done.Notify();
    });
    Watchdog dog;
    for (int i = 0; i < 2000; ++i) c.Send(i);  // from the test's thread
    c.Close();
    done.WaitForNotification();
    EXPECT_EQ(received.load(), 2000) << "cap " << cap;
    EXPECT_EQ(bad.load(), 0);
  }
}

TEST(ChanThreadTest, ThreadsAndGoroutinesShareOneChannel) {
  goro_test::StartRuntime();
  Watchdog dog;
  constexpr int kPerProducer = 3000;
  goro::Chan<int64_t> c(8);
  std::atomic<int64_t> sum{0}, count{0};
  auto produce = [c](int p) mutable {
    for (int i = 0; i < kPerProducer; ++i) c.Send(int64_t{p} * kPerProducer + i);
  };
  auto consume = [c, &sum, &count]() mutable {
    int64_t local = 0, n = 0;
    for (int64_t& v : c) {
      local += v;
      ++n;
    }
    sum += local;
    count += n;
  };
  goro::WaitGroup goro_producers;
  absl::Notification consumers_done[2];
  goro_producers.Add(2);
  for (int p = 0; p < 2; ++p) {
    goro::Go([&, p] {
      produce(p);
      goro_producers.Done();
    });
  }
  for (int q = 0; q < 2; ++q) {
    goro::Go([&, q] {
      consume();
      consumers_done[q].Notify();
    });
  }
  std::vector<std::thread> threads;
  for (int p = 2; p < 4; ++p) threads.emplace_back([&, p] { produce(p); });
  for (int q = 0; q < 2; ++q) threads.emplace_back(consume);
  threads[0].join();
  threads[1].join();
  goro_producers.Wait();  // WaitGroup from a plain thread
  c.Close();
  threads[2].join();
  threads[3].join();
  for (auto& n : consumers_done) n.WaitForNotification();
  constexpr int64_t kN = 4 * int64_t{kPerProducer};
  EXPECT_EQ(count.load(), kN);
  EXPECT_EQ(sum.load(), kN * (kN - 1) / 2);
}

}  // namespace
