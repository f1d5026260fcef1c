// goro::io: blocking-style I/O that parks the goroutine (the network poller).
//
// Every test runs in the IoTest fixture, which checks that the test left no
// file descriptor open (entries of /proc/self/fd) and no goroutine alive
// (GetStats().goroutines_live) beyond what was there before the body ran.
// The runtime has 2 Ps (TestOptions()). Waits are bounded by deadlines on the
// I/O calls themselves and by the watchdog of RunBounded. Each test says what
// would make it fail.
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "core/netpoll.h"
#include "core/runtime.h"
#include "goro/goro.h"
#include "gtest/gtest.h"
#include "test_util.h"

namespace {

namespace io = goro::io;
using goro_test::Now;
using goro_test::Since;

// Deadlines are absl::Time (wall clock); the runtime converts them to its
// monotonic clock. A millisecond of slack on lower bounds covers that
// conversion, nothing else.
constexpr absl::Duration kClockSlack = absl::Milliseconds(1);

absl::Time In(absl::Duration d) { return absl::Now() + d; }

// Open file descriptors of this process (not counting the directory's own).
int CountOpenFds() {
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return -1;
  int n = 0;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(d);
  return n - 1;
}

std::string ListOpenFds() {
  std::string out;
  DIR* d = opendir("/proc/self/fd");
  if (d == nullptr) return "?";
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    char target[256] = {};
    std::string link = absl::StrCat("/proc/self/fd/", e->d_name);
    ssize_t n = readlink(link.c_str(), target, sizeof target - 1);
    absl::StrAppend(&out, " ", e->d_name, "->", n > 0 ? target : "?");
  }
  closedir(d);
  return out;
}

int64_t Live() { return goro::GetStats().goroutines_live; }

// A byte of a reproducible pattern.
uint8_t PatternByte(size_t i, uint32_t seed) {
  uint64_t x = (i + 1) * 0x9e3779b97f4a7c15ull + seed;
  x ^= x >> 29;
  return static_cast<uint8_t>(x ^ (x >> 11) ^ (i >> 12));
}

std::vector<uint8_t> Pattern(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = PatternByte(i, seed);
  return v;
}

// Reads exactly n bytes (an early end of file is an error).
absl::Status ReadFull(int fd, void* buf, size_t n, absl::Time deadline) {
  auto* p = static_cast<char*>(buf);
  size_t got = 0;
  while (got < n) {
    absl::StatusOr<size_t> r = io::Read(fd, p + got, n - got, deadline);
    if (!r.ok()) return r.status();
    if (*r == 0) return absl::DataLossError(absl::StrCat("end of file after ", got, " of ", n, " bytes"));
    got += *r;
  }
  return absl::OkStatus();
}

// A non-blocking TCP listener on 127.0.0.1 (an ephemeral port).
int Listen(sockaddr_in* addr, int backlog = SOMAXCONN) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof a;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(fd, backlog) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    close(fd);
    return -1;
  }
  *addr = a;
  return fd;
}

int TcpSocket() { return socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0); }

// Whether the poller has latched an edge for reading on pd.
bool ReadyLatched(goro::internal::PollDesc* pd) {
  pd->lock.Lock();
  bool ready = pd->rready;
  pd->lock.Unlock();
  return ready;
}

const sockaddr* Sa(const sockaddr_in& a) { return reinterpret_cast<const sockaddr*>(&a); }

// On a goroutine: connects socket c to the listener lfd at addr and accepts
// the connection, through goro::io; returns the accepted fd.
absl::StatusOr<int> ConnectAndAccept(int lfd, const sockaddr_in& addr, int c) {
  if (absl::Status s = io::Connect(c, Sa(addr), sizeof addr, In(absl::Seconds(5))); !s.ok()) return s;
  return io::Accept(lfd, In(absl::Seconds(5)));
}

// Raises the soft RLIMIT_NOFILE to the hard limit. Returns false (and why)
// if the hard limit is below `need`.
bool RaiseFdLimit(rlim_t need, std::string* why) {
  rlimit rl;
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) {
    *why = absl::StrCat("getrlimit: ", strerror(errno));
    return false;
  }
  if (rl.rlim_cur < rl.rlim_max) {
    rlimit raised = rl;
    raised.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) rl = raised;
  }
  if (rl.rlim_max < need || rl.rlim_cur < need) {
    *why = absl::StrCat("RLIMIT_NOFILE is ", rl.rlim_cur, " (hard limit ", rl.rlim_max, "); this test needs ",
                        need, " file descriptors (raise the hard limit, e.g. `ulimit -Hn ", need,
                        "` as root, to run it)");
    return false;
  }
  return true;
}

bool IsBadFdError(const absl::Status& s) {
  return absl::IsFailedPrecondition(s) || absl::IsInvalidArgument(s);
}

// ---------------------------------------------------------------------------
// The fixture: a started runtime with its poller, and a leak check.

class IoTest : public ::testing::Test {
 protected:
  void SetUp() override {
    goro_test::StartRuntime();
    // The poller creates its epoll instance and eventfd on first use: make
    // that happen before the baseline is taken.
    int p[2];
    ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
    char c = 'w';
    ASSERT_TRUE(io::Write(p[1], &c, 1).ok());
    ASSERT_TRUE(io::Read(p[0], &c, 1).ok());
    ASSERT_TRUE(io::Close(p[0]).ok());
    ASSERT_TRUE(io::Close(p[1]).ok());
    goro_test::Eventually([] { return Live() == 0; }, absl::Seconds(10));
    fds0_ = CountOpenFds();
    live0_ = Live();
  }

  void TearDown() override {
    // At most the baseline: the baseline may have counted an fd that sysmon
    // had open for a moment (it reads threads' CPU times from /proc).
    bool ok = goro_test::Eventually([&] { return CountOpenFds() <= fds0_ && Live() == live0_; },
                                    absl::Seconds(10));
    EXPECT_TRUE(ok) << "leak: " << CountOpenFds() << " open fds (baseline " << fds0_ << "), " << Live()
                    << " live goroutines (baseline " << live0_ << "); open:" << ListOpenFds();
  }

  int fds0_ = 0;
  int64_t live0_ = 0;
};

// ---------------------------------------------------------------------------
// Pipes, socketpairs, eventfds.
//
// Fails if a Read parked on an empty pipe is not woken when data arrives (the
// watchdog or the 10 s deadline), if bytes are lost, reordered or duplicated,
// or if the end of file is not reported as 0 bytes (once the writer closed,
// and again on the next Read).

TEST_F(IoTest, PipeReadWriteAndEofReturnsZero) {
  int p[2];
  ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
  const std::vector<std::string> msgs = {"first", " second message", " and a third, longer one", "!"};
  std::string want;
  for (const auto& m : msgs) want += m;
  std::string got;
  absl::Status err;
  int eofs = 0;
  goro_test::RunBounded(
      [&] {
        goro::WaitGroup wg;
        wg.Add(1);
        goro::Go([&] {
          char buf[7];  // smaller than the messages: several reads each
          for (;;) {
            absl::StatusOr<size_t> r = io::Read(p[0], buf, sizeof buf, In(absl::Seconds(10)));
            if (!r.ok()) {
              err = r.status();
              break;
            }
            if (*r == 0) {
              ++eofs;
              // End of file stays end of file.
              absl::StatusOr<size_t> again = io::Read(p[0], buf, sizeof buf, In(absl::Seconds(10)));
              if (again.ok() && *again == 0) ++eofs;
              break;
            }
            got.append(buf, *r);
          }
          wg.Done();
        });
        for (const auto& m : msgs) {
          absl::StatusOr<size_t> w = io::Write(p[1], m.data(), m.size(), In(absl::Seconds(10)));
          EXPECT_TRUE(w.ok()) << w.status();
          if (w.ok()) {
            EXPECT_EQ(*w, m.size());
          }
          goro::SleepFor(absl::Milliseconds(5));  // the reader parks in between
        }
        EXPECT_TRUE(io::Close(p[1]).ok());
        wg.Wait();
        EXPECT_TRUE(io::Close(p[0]).ok());
      },
      absl::Seconds(25));
  EXPECT_TRUE(err.ok()) << err;
  EXPECT_EQ(got, want);
  EXPECT_EQ(eofs, 2) << "Read did not return 0 at end of file (twice)";
}

TEST_F(IoTest, SocketpairPingPong) {
  int s[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, s), 0);
  constexpr int kRounds = 2000;
  int bad = 0;
  goro_test::RunBounded(
      [&] {
        goro::WaitGroup wg;
        wg.Add(1);
        goro::Go([&] {
          // Echoes each number plus one until end of file.
          for (;;) {
            uint32_t v;
            absl::Status st = ReadFull(s[1], &v, sizeof v, In(absl::Seconds(10)));
            if (!st.ok()) {
              if (!absl::IsDataLoss(st)) ADD_FAILURE() << st;  // DataLoss: end of file
              break;
            }
            ++v;
            absl::StatusOr<size_t> w = io::Write(s[1], &v, sizeof v, In(absl::Seconds(10)));
            if (!w.ok()) {
              ADD_FAILURE() << w.status();
              break;
            }
          }
          wg.Done();
        });
        for (uint32_t i = 0; i < kRounds; ++i) {
          uint32_t v = i * 3;
          absl::StatusOr<size_t> w = io::Write(s[0], &v, sizeof v, In(absl::Seconds(10)));
          ASSERT_TRUE(w.ok()) << w.status();
          absl::Status st = ReadFull(s[0], &v, sizeof v, In(absl::Seconds(10)));
          ASSERT_TRUE(st.ok()) << st;
          if (v != i * 3 + 1) ++bad;
        }
        EXPECT_TRUE(io::Close(s[0]).ok());
        wg.Wait();
        EXPECT_TRUE(io::Close(s[1]).ok());
      },
      absl::Seconds(25));
  EXPECT_EQ(bad, 0);
}

TEST_F(IoTest, EventfdReadBlocksUntilWritten) {
  int e = eventfd(0, EFD_CLOEXEC);
  ASSERT_GE(e, 0);
  goro_test::RunBounded(
      [&] {
        std::atomic<bool> returned{false};
        uint64_t got = 0;
        goro::WaitGroup wg;
        wg.Add(1);
        goro::Go([&] {
          absl::StatusOr<size_t> r = io::Read(e, &got, sizeof got, In(absl::Seconds(10)));
          EXPECT_TRUE(r.ok()) << r.status();
          if (r.ok()) {
            EXPECT_EQ(*r, sizeof got);
          }
          returned = true;
          wg.Done();
        });
        goro::SleepFor(absl::Milliseconds(30));
        EXPECT_FALSE(returned.load()) << "Read on an eventfd with a zero count did not block";
        uint64_t three = 3;
        ASSERT_TRUE(io::Write(e, &three, sizeof three).ok());
        wg.Wait();
        EXPECT_EQ(got, 3u);

        // Two writes add up; one read takes the sum and resets the count.
        uint64_t four = 4, five = 5;
        ASSERT_TRUE(io::Write(e, &four, sizeof four).ok());
        ASSERT_TRUE(io::Write(e, &five, sizeof five).ok());
        uint64_t sum = 0;
        absl::StatusOr<size_t> r = io::Read(e, &sum, sizeof sum, In(absl::Seconds(10)));
        ASSERT_TRUE(r.ok()) << r.status();
        EXPECT_EQ(sum, 9u);
        r = io::Read(e, &sum, sizeof sum, In(absl::Milliseconds(20)));
        EXPECT_TRUE(absl::IsDeadlineExceeded(r.status())) << r.status();
        EXPECT_TRUE(io::Close(e).ok());
      },
      absl::Seconds(25));
}

// 8 MiB through a socketpair with a small send buffer, in one Write call,
// while the reader reads in small pieces and sleeps now and then.
//
// Fails if Write returns after a partial write (less than 8 MiB), gives up on
// EAGAIN instead of waiting for the socket to drain, is not woken when the
// reader makes room (watchdog / deadline), or corrupts the data.
TEST_F(IoTest, LargeWriteCompletesAgainstSlowReader) {
  constexpr size_t kSize = size_t{8} << 20;
  int s[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, s), 0);
  int sndbuf = 64 << 10;
  setsockopt(s[0], SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
  const std::vector<uint8_t> data = Pattern(kSize, 17);
  std::vector<uint8_t> got;
  got.reserve(kSize);
  absl::StatusOr<size_t> written = absl::UnknownError("not run");
  absl::Status read_err;
  int reads = 0;
  goro_test::RunBounded(
      [&] {
        goro::WaitGroup wg;
        wg.Add(1);
        goro::Go([&] {
          std::vector<uint8_t> buf(24 << 10);
          for (;;) {
            absl::StatusOr<size_t> r = io::Read(s[1], buf.data(), buf.size(), In(absl::Seconds(20)));
            if (!r.ok()) {
              read_err = r.status();
              break;
            }
            if (*r == 0) break;
            got.insert(got.end(), buf.begin(), buf.begin() + *r);
            if (++reads % 16 == 0) goro::SleepFor(absl::Milliseconds(2));  // slow
          }
          wg.Done();
        });
        written = io::Write(s[0], data.data(), data.size(), In(absl::Seconds(20)));
        EXPECT_TRUE(io::Close(s[0]).ok());  // the reader sees end of file
        wg.Wait();
        EXPECT_TRUE(io::Close(s[1]).ok());
      },
      absl::Seconds(28));
  ASSERT_TRUE(written.ok()) << written.status();
  EXPECT_EQ(*written, kSize);
  EXPECT_TRUE(read_err.ok()) << read_err;
  ASSERT_EQ(got.size(), kSize);
  size_t first_diff = std::mismatch(got.begin(), got.end(), data.begin()).first - got.begin();
  EXPECT_EQ(first_diff, kSize) << "data differ from byte " << first_diff;
  EXPECT_GT(reads, 16) << "the reader should have needed many reads";
}

// ---------------------------------------------------------------------------
// Deadlines.
//
// Fail if a deadline does not fire (the read would wait for the 2 s bound and
// beyond; the watchdog ends it), fires early, leaves the fd unusable (a stale
// waiter makes the next wait fail with "already waiting"), or if a deadline
// already past still blocks.

TEST_F(IoTest, ReadDeadlineOnEmptyPipe) {
  int p[2];
  ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
  goro_test::RunBounded(
      [&] {
        char c;
        auto t0 = Now();
        absl::StatusOr<size_t> r = io::Read(p[0], &c, 1, In(absl::Milliseconds(50)));
        absl::Duration took = Since(t0);
        EXPECT_TRUE(absl::IsDeadlineExceeded(r.status())) << r.status();
        EXPECT_GE(took, absl::Milliseconds(50) - kClockSlack);
        EXPECT_LT(took, absl::Seconds(2));

        // Again, several times: each wait cleans up after itself.
        for (int i = 0; i < 5; ++i) {
          t0 = Now();
          r = io::Read(p[0], &c, 1, In(absl::Milliseconds(10)));
          EXPECT_TRUE(absl::IsDeadlineExceeded(r.status())) << "round " << i << ": " << r.status();
          EXPECT_GE(Since(t0), absl::Milliseconds(10) - kClockSlack);
        }

        // The fd still works: data written later is read before the deadline.
        goro::Go([&] {
          goro::SleepFor(absl::Milliseconds(20));
          EXPECT_TRUE(io::Write(p[1], "z", 1).ok());
        });
        t0 = Now();
        r = io::Read(p[0], &c, 1, In(absl::Seconds(10)));
        ASSERT_TRUE(r.ok()) << r.status();
        EXPECT_EQ(*r, 1u);
        EXPECT_EQ(c, 'z');
        EXPECT_LT(Since(t0), absl::Seconds(5));
        EXPECT_TRUE(io::Close(p[0]).ok());
        EXPECT_TRUE(io::Close(p[1]).ok());
      },
      absl::Seconds(25));
}

// A deadline that fires while the park is still being committed. The commit
// runs on the old M after the goroutine switched out, and adds the deadline
// timer before it unlocks the PollDesc; another M may fire that timer at
// once, and the goroutine resume there and return. Fails (a crash, or a
// PollDesc lock held for ever and the watchdog) if the commit reads the
// wait record, which lives on the goroutine's stack, after adding the timer:
// each goroutine here overwrites that stack as soon as its read returns.
// Deadlines of 0-40 us on 2 Ps; before the fix it crashed within 5 s in
// every run, usually within 1 s.
__attribute__((noinline)) void ScribbleOverTheStack() {
  volatile char scratch[8192];
  for (size_t i = 0; i < sizeof scratch; ++i) scratch[i] = static_cast<char>(0xAB);
}

TEST_F(IoTest, DeadlineFiringDuringTheParkCommitLeavesTheWaitersFrameAlone) {
  goro_test::RunBounded(
      [] {
        std::atomic<bool> stop{false};
        std::atomic<int64_t> timeouts{0};
        goro::WaitGroup wg;
        for (int k = 0; k < 6; ++k) {
          wg.Add(1);
          goro::Go([&, k] {
            int p[2];
            EXPECT_EQ(pipe2(p, O_CLOEXEC), 0);
            uint32_t x = 12345 + k;
            char c;
            while (!stop.load(std::memory_order_relaxed)) {
              x = x * 1664525 + 1013904223;
              absl::StatusOr<size_t> r = io::Read(p[0], &c, 1, absl::Now() + absl::Microseconds(x % 40));
              if (absl::IsDeadlineExceeded(r.status())) timeouts.fetch_add(1, std::memory_order_relaxed);
              ScribbleOverTheStack();
            }
            EXPECT_TRUE(io::Close(p[0]).ok());
            EXPECT_TRUE(io::Close(p[1]).ok());
            wg.Done();
          });
        }
        goro::SleepFor(absl::Seconds(2));
        stop = true;
        wg.Wait();
        EXPECT_GT(timeouts.load(), 1000);
      },
      absl::Seconds(30));
}

TEST_F(IoTest, DeadlineInThePastFailsAtOnce) {
  int p[2];
  ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
  sockaddr_in addr;
  int lfd = Listen(&addr);
  ASSERT_GE(lfd, 0);
  goro_test::RunBounded(
      [&] {
        char c;
        for (absl::Time past : {absl::Now() - absl::Seconds(1), absl::InfinitePast()}) {
          auto t0 = Now();
          absl::StatusOr<size_t> r = io::Read(p[0], &c, 1, past);
          EXPECT_TRUE(absl::IsDeadlineExceeded(r.status())) << r.status();
          absl::Status w = io::WaitReadable(p[0], past);
          EXPECT_TRUE(absl::IsDeadlineExceeded(w)) << w;
          absl::StatusOr<int> a = io::Accept(lfd, past);
          EXPECT_TRUE(absl::IsDeadlineExceeded(a.status())) << a.status();
          if (a.ok()) close(*a);
          EXPECT_LT(Since(t0), absl::Milliseconds(500)) << "a deadline in the past blocked";
        }
        // A full pipe: Write with a past deadline fails at once too.
        std::vector<char> big(1 << 20, 'x');
        absl::StatusOr<size_t> w = io::Write(p[1], big.data(), big.size(), In(absl::Milliseconds(20)));
        EXPECT_TRUE(absl::IsDeadlineExceeded(w.status())) << "filling the pipe: " << w.status();
        auto t0 = Now();
        w = io::Write(p[1], big.data(), big.size(), absl::Now() - absl::Seconds(1));
        EXPECT_TRUE(absl::IsDeadlineExceeded(w.status())) << w.status();
        absl::Status ww = io::WaitWritable(p[1], absl::InfinitePast());
        EXPECT_TRUE(absl::IsDeadlineExceeded(ww)) << ww;
        EXPECT_LT(Since(t0), absl::Milliseconds(500));
        EXPECT_TRUE(io::Close(p[0]).ok());
        EXPECT_TRUE(io::Close(p[1]).ok());
        EXPECT_TRUE(io::Close(lfd).ok());
      },
      absl::Seconds(25));
}

// A Write that fails after writing part of its buffer says how much it
// wrote, as Go's returns n with the error: after a deadline on a full pipe
// (blocking and non-blocking, 4 KiB of room), *written is what the reader
// can then read, and writing the rest from there delivers the whole buffer
// once, in order. Fails if `written` is not kept up to date (0, or the
// buffer's size, against the 4096 bytes in the pipe).
TEST_F(IoTest, WriteThatFailsPartWaySaysHowMuchItWrote) {
  for (int flags : {O_CLOEXEC, O_CLOEXEC | O_NONBLOCK}) {
    int p[2];
    ASSERT_EQ(pipe2(p, flags), 0);
    ASSERT_EQ(fcntl(p[1], F_SETPIPE_SZ, 4096), 4096);
    goro_test::RunBounded(
        [&] {
          std::string sent(10000, '\0');
          for (size_t i = 0; i < sent.size(); ++i) sent[i] = static_cast<char>('a' + i % 26);
          size_t written = 12345;
          absl::StatusOr<size_t> w = io::Write(p[1], sent.data(), sent.size(), In(absl::Milliseconds(30)), &written);
          EXPECT_TRUE(absl::IsDeadlineExceeded(w.status())) << w.status();
          EXPECT_GT(written, 0u) << "flags " << flags;
          EXPECT_LT(written, sent.size()) << "flags " << flags;
          std::string got;
          goro::WaitGroup wg;
          wg.Add(1);
          goro::Go([&] {
            char buf[1000];
            while (got.size() < sent.size()) {
              absl::StatusOr<size_t> r = io::Read(p[0], buf, sizeof buf, In(absl::Seconds(10)));
              if (!r.ok()) break;
              got.append(buf, *r);
            }
            wg.Done();
          });
          size_t rest_written = 0;
          w = io::Write(p[1], sent.data() + written, sent.size() - written, In(absl::Seconds(10)), &rest_written);
          EXPECT_TRUE(w.ok()) << w.status();
          EXPECT_EQ(rest_written, sent.size() - written);
          wg.Wait();
          EXPECT_EQ(got, sent) << "flags " << flags << ": " << got.size() << " bytes read, " << written
                               << " said to be written before the deadline";
          size_t bad = 7;
          EXPECT_FALSE(io::Write(-1, sent.data(), 1, absl::InfiniteFuture(), &bad).ok());
          EXPECT_EQ(bad, 0u);
          EXPECT_TRUE(io::Close(p[0]).ok());
          EXPECT_TRUE(io::Close(p[1]).ok());
        },
        absl::Seconds(25));
  }
}

// As in Go, a deadline already passed fails before any system call, so the
// operation takes nothing that was ready: the data stays for the next Read,
// the pipe's room stays empty, the pending connection stays queued, and
// Connect starts no connection that would go on after it said it failed.
TEST_F(IoTest, DeadlineInThePastTakesNothingThatIsReady) {
  int p[2];
  ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
  sockaddr_in addr;
  int lfd = Listen(&addr);
  ASSERT_GE(lfd, 0);
  int pending = TcpSocket();
  ASSERT_GE(pending, 0);
  int late = TcpSocket();
  ASSERT_GE(late, 0);
  goro_test::RunBounded(
      [&] {
        const absl::Time past = absl::Now() - absl::Seconds(1);
        ASSERT_EQ(write(p[1], "abc", 3), 3);
        char buf[8];
        absl::StatusOr<size_t> r = io::Read(p[0], buf, sizeof buf, past);
        EXPECT_TRUE(absl::IsDeadlineExceeded(r.status())) << "Read of ready data: " << r.status();
        r = io::Read(p[0], buf, sizeof buf, In(absl::Seconds(5)));
        ASSERT_TRUE(r.ok()) << r.status();
        EXPECT_EQ(*r, 3u) << "a Read with a past deadline took the data";

        absl::StatusOr<size_t> w = io::Write(p[1], "x", 1, past);
        EXPECT_TRUE(absl::IsDeadlineExceeded(w.status())) << "Write with room: " << w.status();
        int queued = -1;
        ASSERT_EQ(ioctl(p[0], FIONREAD, &queued), 0);
        EXPECT_EQ(queued, 0) << "a Write with a past deadline wrote";

        ASSERT_TRUE(io::Connect(pending, Sa(addr), sizeof addr, In(absl::Seconds(5))).ok());
        absl::StatusOr<int> a = io::Accept(lfd, past);
        EXPECT_TRUE(absl::IsDeadlineExceeded(a.status())) << "Accept of a queued connection: " << a.status();
        if (a.ok()) close(*a);
        a = io::Accept(lfd, In(absl::Seconds(5)));
        EXPECT_TRUE(a.ok()) << "the queued connection was taken: " << a.status();
        if (a.ok()) close(*a);

        absl::Status c = io::Connect(late, Sa(addr), sizeof addr, past);
        EXPECT_TRUE(absl::IsDeadlineExceeded(c)) << "Connect: " << c;
        sockaddr_in peer;
        socklen_t plen = sizeof peer;
        EXPECT_NE(getpeername(late, reinterpret_cast<sockaddr*>(&peer), &plen), 0)
            << "Connect said DeadlineExceeded but connected";
        EXPECT_TRUE(absl::IsDeadlineExceeded(io::WaitReadable(p[0], past)));
        EXPECT_TRUE(absl::IsDeadlineExceeded(io::WaitWritable(p[1], past))) << "WaitWritable with room";
        for (int fd : {p[0], p[1], lfd, pending, late}) EXPECT_TRUE(io::Close(fd).ok());
      },
      absl::Seconds(25));
}

TEST_F(IoTest, WriteDeadlineOnFullPipe) {
  int p[2];
  ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
  goro_test::RunBounded(
      [&] {
        std::vector<char> big(4 << 20, 'y');  // far more than a pipe holds
        auto t0 = Now();
        absl::StatusOr<size_t> w = io::Write(p[1], big.data(), big.size(), In(absl::Milliseconds(50)));
        absl::Duration took = Since(t0);
        EXPECT_TRUE(absl::IsDeadlineExceeded(w.status())) << w.status();
        EXPECT_GE(took, absl::Milliseconds(50) - kClockSlack);
        EXPECT_LT(took, absl::Seconds(2));
        EXPECT_TRUE(io::Close(p[0]).ok());
        EXPECT_TRUE(io::Close(p[1]).ok());
      },
      absl::Seconds(25));
}

TEST_F(IoTest, WaitReadableWithDeadline) {
  int p[2];
  ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
  goro_test::RunBounded(
      [&] {
        auto t0 = Now();
        absl::Status s = io::WaitReadable(p[0], In(absl::Milliseconds(50)));
        absl::Duration took = Since(t0);
        EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
        EXPECT_GE(took, absl::Milliseconds(50) - kClockSlack);
        EXPECT_LT(took, absl::Seconds(2));

        goro::Go([&] {
          goro::SleepFor(absl::Milliseconds(30));
          EXPECT_TRUE(io::Write(p[1], "ab", 2).ok());
        });
        t0 = Now();
        s = io::WaitReadable(p[0], In(absl::Seconds(10)));
        EXPECT_TRUE(s.ok()) << s;
        EXPECT_LT(Since(t0), absl::Seconds(5));
        // Waiting consumed nothing: the bytes are all there.
        char buf[4] = {};
        absl::StatusOr<size_t> r = io::Read(p[0], buf, sizeof buf, In(absl::Seconds(1)));
        ASSERT_TRUE(r.ok()) << r.status();
        EXPECT_EQ(std::string(buf, *r), "ab");

        // An empty pipe's write end is writable.
        s = io::WaitWritable(p[1], In(absl::Seconds(10)));
        EXPECT_TRUE(s.ok()) << s;
        EXPECT_TRUE(io::Close(p[0]).ok());
        EXPECT_TRUE(io::Close(p[1]).ok());
      },
      absl::Seconds(25));
}

// ---------------------------------------------------------------------------
// io::Close wakes waiters.
//
// Fails if Close does not wake a goroutine (or plain thread) parked on the
// fd: it would sleep until its 10 s deadline and then report
// DeadlineExceeded instead of CancelledError.

TEST_F(IoTest, CloseWakesBlockedReaderWriterAndAcceptor) {
  int p[2], q[2];
  ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
  ASSERT_EQ(pipe2(q, O_CLOEXEC), 0);
  sockaddr_in addr;
  int lfd = Listen(&addr);
  ASSERT_GE(lfd, 0);
  absl::Status read_st, write_st, accept_st;
  absl::Duration read_took, write_took, accept_took;
  goro_test::RunBounded(
      [&] {
        // Fill q so that a writer blocks.
        std::vector<char> big(1 << 20, 'q');
        absl::StatusOr<size_t> fill = io::Write(q[1], big.data(), big.size(), In(absl::Milliseconds(20)));
        ASSERT_TRUE(absl::IsDeadlineExceeded(fill.status())) << fill.status();
        std::atomic<int> started{0};
        goro::WaitGroup wg;
        wg.Add(3);
        goro::Go([&] {
          char c;
          started++;
          auto t0 = Now();
          read_st = io::Read(p[0], &c, 1, In(absl::Seconds(10))).status();
          read_took = Since(t0);
          wg.Done();
        });
        goro::Go([&] {
          started++;
          auto t0 = Now();
          write_st = io::Write(q[1], big.data(), big.size(), In(absl::Seconds(10))).status();
          write_took = Since(t0);
          wg.Done();
        });
        goro::Go([&] {
          started++;
          auto t0 = Now();
          absl::StatusOr<int> a = io::Accept(lfd, In(absl::Seconds(10)));
          accept_st = a.status();
          if (a.ok()) close(*a);
          accept_took = Since(t0);
          wg.Done();
        });
        goro_test::Eventually([&] { return started.load() == 3; });
        goro::SleepFor(absl::Milliseconds(50));  // they park
        EXPECT_TRUE(io::Close(p[0]).ok());
        EXPECT_TRUE(io::Close(q[1]).ok());
        EXPECT_TRUE(io::Close(lfd).ok());
        wg.Wait();
        EXPECT_TRUE(io::Close(p[1]).ok());
        EXPECT_TRUE(io::Close(q[0]).ok());
      },
      absl::Seconds(25));
  EXPECT_TRUE(absl::IsCancelled(read_st)) << "Read: " << read_st;
  EXPECT_TRUE(absl::IsCancelled(write_st)) << "Write: " << write_st;
  EXPECT_TRUE(absl::IsCancelled(accept_st)) << "Accept: " << accept_st;
  EXPECT_LT(read_took, absl::Seconds(5));
  EXPECT_LT(write_took, absl::Seconds(5));
  EXPECT_LT(accept_took, absl::Seconds(5));
}

TEST_F(IoTest, CloseWakesPlainThreadReader) {
  int p[2];
  ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
  std::atomic<bool> started{false}, returned{false};
  absl::Status st;
  absl::Duration took;
  goro_test::Watchdog dog(absl::Seconds(25), "plain thread reader");
  std::thread reader([&] {
    char c;
    started = true;
    auto t0 = Now();
    st = io::Read(p[0], &c, 1, In(absl::Seconds(10))).status();
    took = Since(t0);
    returned = true;
  });
  ASSERT_TRUE(goro_test::Eventually([&] { return started.load(); }));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(returned.load());
  EXPECT_TRUE(io::Close(p[0]).ok());
  reader.join();
  EXPECT_TRUE(absl::IsCancelled(st)) << st;
  EXPECT_LT(took, absl::Seconds(5));
  EXPECT_TRUE(io::Close(p[1]).ok());
}

// io::Close and a reused fd number. Linux gives a new file the lowest free
// number, so the number of a file closed with io::Close may be registered
// again, by another file, before the goroutine that Close woke has run. That
// goroutine must still get CancelledError. Fails if it decides by the
// PollDesc's state alone, which the new registration resets: it then reads
// the new pipe's second byte (or, had that pipe been empty, parks on it).
// On one P, in a child process: the woken reader cannot run until the main
// goroutine, which closes, reopens and reads the number without letting go
// of the P (a NoPreemptScope), waits for it.
[[noreturn]] void CloseThenReuseNumberChild() {
  using goro_test::child_failures;
  goro_test::Watchdog dog(absl::Seconds(20), "io::Close and a reused fd number");
  static int p[2], q[2];
  static std::atomic<bool> reader_started{false};
  static absl::Status reader_status;
  static std::string reader_got;
  if (pipe2(p, O_CLOEXEC) != 0) _exit(2);
  goro::Options opts;
  opts.max_procs = 1;
  goro::Run(
      [] {
        goro::WaitGroup wg;
        wg.Add(1);
        goro::Go([&wg] {
          char buf[16];
          reader_started = true;
          absl::StatusOr<size_t> r = io::Read(p[0], buf, sizeof buf, In(absl::Seconds(10)));
          reader_status = r.status();
          if (r.ok()) reader_got.assign(buf, *r);
          wg.Done();
        });
        goro_test::Eventually([] { return reader_started.load(); });
        goro::SleepFor(absl::Milliseconds(50));  // it parks on the empty pipe
        {
          goro::NoPreemptScope keep_the_p;
          CHILD_CHECK(io::Close(p[0]).ok(), "io::Close of the reader's fd");
          if (pipe2(q, O_CLOEXEC) != 0) _exit(3);
          if (q[0] != p[0]) {  // not the lowest free number: make it so
            CHILD_CHECK(dup2(q[0], p[0]) == p[0], "dup2: %s", strerror(errno));
            close(q[0]);
            q[0] = p[0];
          }
          CHILD_CHECK(write(q[1], "AB", 2) == 2, "write: %s", strerror(errno));
          char c = 0;
          absl::StatusOr<size_t> mine = io::Read(q[0], &c, 1, In(absl::Seconds(5)));  // registers the number again
          CHILD_CHECK(mine.ok() && *mine == 1 && c == 'A', "the new pipe's first byte: %s",
                      mine.status().ToString().c_str());
        }
        wg.Wait();
        char c = 0;
        absl::StatusOr<size_t> rest = io::Read(q[0], &c, 1, In(absl::Seconds(2)));
        CHILD_CHECK(rest.ok() && *rest == 1 && c == 'B', "the new pipe's second byte: %s",
                    rest.ok() ? std::string(&c, *rest).c_str() : rest.status().ToString().c_str());
        CHILD_CHECK(io::Close(q[0]).ok(), "close");
        CHILD_CHECK(io::Close(q[1]).ok(), "close");
        CHILD_CHECK(io::Close(p[1]).ok(), "close");
      },
      opts);
  CHILD_CHECK(absl::IsCancelled(reader_status), "the reader of the closed pipe got %s, data \"%s\"",
              reader_status.ToString().c_str(), reader_got.c_str());
  _exit(child_failures.load() == 0 ? 0 : 1);
}

TEST(IoChildTest, ReaderWokenByCloseIsCancelledThoughTheNumberIsReused) {
  EXPECT_EXIT(CloseThenReuseNumberChild(), ::testing::ExitedWithCode(0), "");
}

// io::Close racing with an operation that registers the same fd. Close takes
// the fd out of epoll and only then closes it. Fails if an operation that
// registers the fd in between is let through: it adds the still-open file to
// epoll again and marks the PollDesc polled, close(2) then drops the epoll
// entry, and the PollDesc stays polled - an operation that parked there is
// never woken, and the next file that gets the number is never added to
// epoll (it gets no wake-ups and stays blocking). A racer registers the fd
// over and over (WaitReadable with a deadline already passed registers and
// returns) while the main goroutine, in rounds, puts a pipe on the number,
// lets a reader park on it and closes it with io::Close. After each Close
// the reader must have got CancelledError, the PollDesc must not be left
// polled, and a second pipe put on the number with a byte queued must be
// readable (WaitReadable) and made non-blocking. The racer is a goroutine
// for the first second, a plain thread for the next (each waits in its own
// way while Close is under way). Waking the parked reader (and with it an
// idle P: 3 Ps) widens the window to a few microseconds. Before the fix each
// of 20 runs failed, within 6100 rounds with the goroutine racer (a second
// here holds 10000 or more), and each of 20 with the thread racer alone did
// within 330. In a child process, with a number of its own (kCloseRaceFd)
// that nothing else gets while the racer registers it closed.
constexpr int kCloseRaceFd = 200;
std::atomic<bool> close_race_done{false};
std::atomic<int64_t> close_race_spins{0}, close_race_cancelled{0};

void CloseRaceSpin() {
  while (!close_race_done.load(std::memory_order_relaxed)) {
    absl::Status s = io::WaitReadable(kCloseRaceFd, absl::InfinitePast());
    close_race_spins.fetch_add(1, std::memory_order_relaxed);
    if (absl::IsCancelled(s)) close_race_cancelled.fetch_add(1, std::memory_order_relaxed);
  }
}

[[noreturn]] void CloseRacingRegistrationChild() {
  namespace internal = goro::internal;
  using goro_test::child_failures;
  constexpr int kFd = kCloseRaceFd;
  goro_test::Watchdog dog(absl::Seconds(30), "io::Close racing a registration");
  rlimit rl;
  CHILD_CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur > static_cast<rlim_t>(kFd),
              "RLIMIT_NOFILE does not allow fd %d", kFd);
  CHILD_CHECK(fcntl(kFd, F_GETFD) < 0, "fd %d is in use", kFd);
  if (child_failures.load() != 0) _exit(1);
  static int rounds[2] = {0, 0};
  goro::Options opts;
  opts.max_procs = 3;
  goro::Run(
      [] {
        internal::PollDesc* pd = internal::PollDescFor(kFd);
        for (int on_thread = 0; on_thread < 2 && child_failures.load() == 0; ++on_thread) {
          close_race_done = false;
          goro::WaitGroup racer;
          std::thread thread;
          if (on_thread) {
            thread = std::thread(CloseRaceSpin);
          } else {
            racer.Add(1);
            goro::Go([&racer] {
              CloseRaceSpin();
              racer.Done();
            });
          }
          absl::Time end = absl::Now() + absl::Seconds(1);
          for (int& round = rounds[on_thread]; absl::Now() < end && child_failures.load() == 0; ++round) {
            const char* who = on_thread ? "thread racer" : "goroutine racer";
            int p[2], q[2];
            if (pipe2(p, O_CLOEXEC) != 0 || dup3(p[0], kFd, O_CLOEXEC) != kFd) _exit(3);
            close(p[0]);
            goro::WaitGroup reader;
            reader.Add(1);
            goro::Go([&] {
              char c;
              absl::StatusOr<size_t> r = io::Read(kFd, &c, 1, In(absl::Seconds(10)));
              CHILD_CHECK(absl::IsCancelled(r.status()), "%s, round %d: the parked reader got %s", who, round,
                          r.status().ToString().c_str());
              reader.Done();
            });
            while (pd->rg.load() == nullptr) goro::Yield();  // it parks
            CHILD_CHECK(io::Close(kFd).ok(), "io::Close");
            reader.Wait();
            close(p[1]);
            pd->lock.Lock();
            bool polled = pd->state == internal::PollDesc::Registration::kPolled;
            pd->lock.Unlock();
            CHILD_CHECK(!polled, "%s, round %d: the PollDesc of the closed fd %d was left polled", who, round, kFd);
            if (pipe2(q, O_CLOEXEC) != 0 || dup3(q[0], kFd, O_CLOEXEC) != kFd) _exit(3);
            close(q[0]);
            CHILD_CHECK(write(q[1], "x", 1) == 1, "write: %s", strerror(errno));
            absl::Status s = io::WaitReadable(kFd, In(absl::Seconds(5)));
            CHILD_CHECK(s.ok(), "%s, round %d: a new pipe on fd %d with a byte queued: WaitReadable said %s", who,
                        round, kFd, s.ToString().c_str());
            CHILD_CHECK((fcntl(kFd, F_GETFL) & O_NONBLOCK) != 0, "%s, round %d: the new pipe on fd %d is blocking",
                        who, round, kFd);
            CHILD_CHECK(io::Close(kFd).ok(), "io::Close");
            close(q[1]);
          }
          close_race_done = true;
          if (on_thread) {
            thread.join();
          } else {
            racer.Wait();
          }
        }
      },
      opts);
  fprintf(stderr, "rounds: %d with a goroutine racer, %d with a thread; %lld registrations, %lld CancelledError\n",
          rounds[0], rounds[1], static_cast<long long>(close_race_spins.load()),
          static_cast<long long>(close_race_cancelled.load()));
  _exit(child_failures.load() == 0 ? 0 : 1);
}

TEST(IoChildTest, CloseRacingARegistrationLeavesNoStaleRegistration) {
  EXPECT_EXIT(CloseRacingRegistrationChild(), ::testing::ExitedWithCode(0), "");
}

// An operation on a new file that got the number of a file io::Close is
// still closing. Linux frees the number as soon as close(2) begins, and
// close(2) may then take long - here a TCP socket with SO_LINGER and unsent
// data that the peer does not take, which it waits a second for. Fails if
// an operation that finds the number being closed takes its file for the
// one being closed: the Read of the new pipe on the number then gets
// CancelledError instead of its byte; or if the Read, waiting for io::Close
// on a plain thread the runtime knows nothing of, is taken for a deadlock.
// (It waits until io::Close is done: nothing tells the new file from the
// old one while close(2) runs.)
// A server that closes a connection with plain close(2), not io::Close, then
// accepts another that gets the same number. Fails (DeadlineExceeded after
// 5 s; with no deadline, a hang) if the old registration is taken for the
// new connection's: epoll dropped the old file when it died, and the new one
// is never added, so the reader parked on it is never woken.
TEST_F(IoTest, AcceptedNumberOfAPlainClosedConnectionIsRegisteredAfresh) {
  goro_test::RunBounded(
      [&] {
        sockaddr_in addr;
        int lfd = Listen(&addr);
        ASSERT_GE(lfd, 0);
        int c1 = TcpSocket();
        absl::StatusOr<int> s1 = ConnectAndAccept(lfd, addr, c1);
        ASSERT_TRUE(s1.ok()) << s1.status();
        EXPECT_TRUE(absl::IsDeadlineExceeded(io::WaitReadable(*s1, absl::InfinitePast())));  // registers it
        const int number = *s1;
        int c2 = TcpSocket();  // before the close, so that it does not get the number itself
        close(number);         // plain close(2): goro is not told
        absl::StatusOr<int> s2 = ConnectAndAccept(lfd, addr, c2);
        ASSERT_TRUE(s2.ok()) << s2.status();
        if (*s2 == number) {  // the lowest free number, unless another thread took it meanwhile
          absl::StatusOr<size_t> r = absl::UnknownError("not run");
          char c = 0;
          goro::WaitGroup wg;
          wg.Add(1);
          goro::Go([&] {
            r = io::Read(*s2, &c, 1, In(absl::Seconds(5)));
            wg.Done();
          });
          goro::SleepFor(absl::Milliseconds(50));  // the reader parks on the empty socket
          EXPECT_EQ(write(c2, "x", 1), 1);
          wg.Wait();
          EXPECT_TRUE(r.ok() && *r == 1 && c == 'x') << "the new connection's reader: " << r.status();
        } else {
          ADD_FAILURE() << "the second connection got fd " << *s2 << ", not " << number;
        }
        EXPECT_TRUE(io::Close(*s2).ok());
        close(c1);
        close(c2);
        close(lfd);
      },
      absl::Seconds(30));
}

TEST_F(IoTest, NewFileOnTheNumberOfAFileStillBeingClosedIsNotCancelled) {
  bool still_closing = false;  // when the new pipe took the number
  goro_test::RunBounded(
      [&] {
        sockaddr_in addr;
        int lfd = Listen(&addr);
        ASSERT_GE(lfd, 0);
        int c = TcpSocket();
        ASSERT_GE(c, 0);
        absl::StatusOr<int> s = ConnectAndAccept(lfd, addr, c);
        ASSERT_TRUE(s.ok()) << s.status();
        int small = 4096;
        setsockopt(*s, SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
        std::vector<char> big(1 << 20, 'b');
        absl::Status filled;
        do {  // until the peer's window and c's send buffer are full
          filled = io::Write(c, big.data(), big.size(), In(absl::Milliseconds(20))).status();
        } while (filled.ok());
        ASSERT_TRUE(absl::IsDeadlineExceeded(filled)) << filled;
        linger lg{1, 1};
        ASSERT_EQ(setsockopt(c, SOL_SOCKET, SO_LINGER, &lg, sizeof lg), 0);

        std::atomic<bool> closed{false};
        absl::Status close_status;
        std::thread closer([&] {
          close_status = io::Close(c);
          closed = true;
        });
        // The number is free once close(2) has begun.
        EXPECT_TRUE(goro_test::Eventually([&] { return fcntl(c, F_GETFD) < 0; }, absl::Seconds(10)));
        still_closing = !closed.load();
        int q[2];
        EXPECT_EQ(pipe2(q, O_CLOEXEC), 0);
        if (q[0] != c) {  // not the lowest free number: make it so
          EXPECT_EQ(dup3(q[0], c, O_CLOEXEC), c) << strerror(errno);
          close(q[0]);
        }
        EXPECT_EQ(write(q[1], "x", 1), 1);
        char ch = 0;
        auto t0 = Now();
        absl::StatusOr<size_t> r = io::Read(c, &ch, 1, In(absl::Seconds(10)));
        absl::Duration took = Since(t0);
        closer.join();
        EXPECT_TRUE(r.ok() && *r == 1 && ch == 'x') << "the new pipe on fd " << c << ": " << r.status();
        EXPECT_LT(took, absl::Seconds(5));
        EXPECT_TRUE(close_status.ok()) << close_status;
        EXPECT_TRUE(io::Close(c).ok());
        EXPECT_TRUE(io::Close(q[1]).ok());
        EXPECT_TRUE(io::Close(*s).ok());
        EXPECT_TRUE(io::Close(lfd).ok());
      },
      absl::Seconds(25));
  if (!still_closing) GTEST_SKIP() << "close(2) of the lingering socket was over before the new pipe got its number";
}

// An event that a poller fetched from epoll_wait before io::Close, but
// handles only after the number was registered again by another file. The
// test hands such an event to the poller's handler itself (the window in a
// real run is a few instructions). Fails if the handler takes it for the new
// file's: the new, empty pipe is then marked ready (and a Read would try it
// at once). The same event with the new file's tag must mark it ready, or
// the check would pass with a handler that drops everything. (WaitReadable
// would not tell: it asks poll(2) whether the pipe is readable.)
TEST_F(IoTest, StaleEventOfAClosedFileDoesNotMarkTheReusedNumberReady) {
  namespace internal = goro::internal;
  goro_test::RunBounded(
      [&] {
        int p[2], q[2];
        ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
        EXPECT_TRUE(absl::IsDeadlineExceeded(io::WaitReadable(p[0], absl::InfinitePast())));  // registers p[0]
        internal::PollDesc* pd = internal::PollDescFor(p[0]);
        ASSERT_NE(pd, nullptr);
        pd->lock.Lock();
        uint64_t old_seq = pd->seq;
        pd->lock.Unlock();
        ASSERT_TRUE(io::Close(p[0]).ok());
        ASSERT_EQ(pipe2(q, O_CLOEXEC), 0);
        if (q[0] != p[0]) {  // not the lowest free number: make it so
          ASSERT_EQ(dup2(q[0], p[0]), p[0]) << strerror(errno);
          close(q[0]);
          q[0] = p[0];
        }
        EXPECT_TRUE(absl::IsDeadlineExceeded(io::WaitReadable(q[0], absl::InfinitePast())));  // registers q[0]

        epoll_event stale{};
        stale.events = EPOLLIN;
        stale.data.u64 = internal::PollTag(q[0], old_seq);
        internal::InjectGList(internal::NetpollHandle(&stale, 1, /*blocking=*/false));
        EXPECT_FALSE(ReadyLatched(pd)) << "the closed file's event made the new one ready";

        pd->lock.Lock();
        uint64_t new_seq = pd->seq;
        pd->lock.Unlock();
        epoll_event current = stale;
        current.data.u64 = internal::PollTag(q[0], new_seq);
        internal::InjectGList(internal::NetpollHandle(&current, 1, /*blocking=*/false));
        EXPECT_TRUE(ReadyLatched(pd)) << "the new file's own event was dropped";

        EXPECT_TRUE(io::Close(q[0]).ok());
        EXPECT_TRUE(io::Close(q[1]).ok());
        EXPECT_TRUE(io::Close(p[1]).ok());
      },
      absl::Seconds(25));
}

// ---------------------------------------------------------------------------
// The wake-up of the M blocked in epoll_wait.
//
// While every P is idle and a goroutine waits on I/O, one M blocks in
// epoll_wait until the earliest timer; a timer added for earlier writes to
// the poller's eventfd (NetpollBreak) to wake it. A non-blocking poll by
// another M or by sysmon may run meanwhile. Fails if that poll takes the
// eventfd's token before the woken M has looked: the kernel then finds
// nothing for it and it sleeps on - here for ever, as no other timer is due -
// so the timer never fires. The test makes that poll itself, from this
// thread through the runtime's internals, right after adding the timer. The
// woken M may still look first (its wake-up and this poll race in the
// kernel), so the test gives it 20 chances.

// The timer sleeper is in epoll_wait with no timeout.
bool PollerBlockedInEpoll() {
  return goro::internal::sched.last_poll.load() == 0 && goro::internal::sched.poll_until.load() == INT64_MAX;
}

// The timer sleeper waits in the poller while goroutines wait on I/O, with
// the time to the next timer as its timeout. Fails if that timeout is
// rounded up to whole milliseconds (epoll_wait): a 300 us poll then never
// returns in under 1 ms, and timers beside an idle connection fire up to a
// millisecond late. The shortest of 10 polls is taken, so that a busy
// machine cannot make it fail; an event arriving could only make it pass.
TEST_F(IoTest, PollerTimeoutIsNotRoundedUpToAMillisecond) {
  namespace internal = goro::internal;
  internal::InjectGList(internal::Netpoll(300 * 1000));  // finds out whether the kernel has epoll_pwait2
  if (!internal::NetpollPreciseTimeouts()) {
    GTEST_SKIP() << "epoll_pwait2 is not available (Linux before 5.11, or a seccomp filter): millisecond timeouts";
  }
  absl::Duration shortest = absl::InfiniteDuration();
  for (int i = 0; i < 10; ++i) {
    auto t0 = Now();
    internal::InjectGList(internal::Netpoll(300 * 1000));
    shortest = std::min(shortest, Since(t0));
  }
  EXPECT_LT(shortest, absl::Microseconds(900));
}

TEST_F(IoTest, NonBlockingPollLeavesTheBlockedPollersWakeUp) {
  namespace internal = goro::internal;
  goro_test::Watchdog dog(absl::Seconds(50), "the blocked poller's wake-up");
  int p[2];
  ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
  absl::Notification reader_done;
  goro::Go([&] {
    char c;
    EXPECT_TRUE(io::Read(p[0], &c, 1).ok());  // no deadline, so no timer
    reader_done.Notify();
  });
  static std::atomic<bool> fired;
  for (int round = 0; round < 20; ++round) {
    ASSERT_TRUE(goro_test::Eventually(PollerBlockedInEpoll)) << "round " << round << ": no M blocked in epoll_wait";
    fired = false;
    internal::Timer t;
    t.when = internal::Nanotime() + 1000 * 1000;
    t.f = [](internal::Timer*) { fired = true; };
    internal::AddTimer(&t);                        // NetpollBreak
    internal::InjectGList(internal::Netpoll(0));  // the non-blocking poll
    if (!goro_test::Eventually([] { return fired.load(); }, absl::Seconds(2))) {
      internal::DelTimer(&t);
      ADD_FAILURE() << "round " << round << ": a 1 ms timer did not fire within 2 s";
      break;
    }
  }
  ASSERT_EQ(write(p[1], "x", 1), 1);  // wakes the reader (and a stuck poller)
  reader_done.WaitForNotification();
  EXPECT_TRUE(io::Close(p[0]).ok());
  EXPECT_TRUE(io::Close(p[1]).ok());
}

// A non-blocking poll leaves last_poll at 0 while an M is blocked in
// epoll_wait: FindRunnable and sysmon read 0 as "someone is polling" and do
// not poll themselves. Fails if Netpoll(0) stores its own time over it
// (then every idle M and sysmon poll as if nobody did, and the test above
// could not see the blocked poller).
TEST_F(IoTest, NonBlockingPollKeepsTheBlockedPollersMark) {
  namespace internal = goro::internal;
  goro_test::Watchdog dog(absl::Seconds(30), "last_poll");
  int p[2];
  ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
  absl::Notification reader_done;
  goro::Go([&] {
    char c;
    EXPECT_TRUE(io::Read(p[0], &c, 1).ok());
    reader_done.Notify();
  });
  ASSERT_TRUE(goro_test::Eventually(PollerBlockedInEpoll)) << "no M blocked in epoll_wait";
  internal::InjectGList(internal::Netpoll(0));
  EXPECT_EQ(internal::sched.last_poll.load(), 0) << "a non-blocking poll hid the blocked one";
  ASSERT_EQ(write(p[1], "x", 1), 1);
  reader_done.WaitForNotification();
  EXPECT_TRUE(io::Close(p[0]).ok());
  EXPECT_TRUE(io::Close(p[1]).ok());
}

// ---------------------------------------------------------------------------
// Bad file descriptors: an error status, never a crash.
//
// Fails (crash) if a negative or huge fd indexes the poller's table, or if a
// closed fd is treated as open; fails if the status is not the documented
// one (FailedPrecondition for EBADF, InvalidArgument for impossible numbers).

void CheckBadFd(int fd, const char* what) {
  SCOPED_TRACE(absl::StrCat(what, " (fd ", fd, ")"));
  char buf[4] = {};
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  absl::Time dl = In(absl::Seconds(1));
  absl::Status r = io::Read(fd, buf, sizeof buf, dl).status();
  absl::Status w = io::Write(fd, buf, sizeof buf, dl).status();
  absl::Status a = io::Accept(fd, dl).status();
  absl::Status c = io::Connect(fd, Sa(addr), sizeof addr, dl);
  absl::Status wr = io::WaitReadable(fd, dl);
  absl::Status ww = io::WaitWritable(fd, dl);
  for (const absl::Status& s : {r, w, a, c, wr, ww}) {
    EXPECT_TRUE(IsBadFdError(s)) << s;
    if (fd >= 0 && fd < (1 << 20)) {
      EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
    }
  }
}

TEST_F(IoTest, BadFdsGiveErrorsNeverCrash) {
  // A number that was never open... (the lowest free number is what the next
  // open gets, so this is free right after closing it).
  int p[2];
  ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
  close(p[0]);
  close(p[1]);
  const int never_registered = p[0];
  // ...and one that was used through io and closed with io::Close.
  int q[2];
  ASSERT_EQ(pipe2(q, O_CLOEXEC), 0);
  ASSERT_TRUE(io::Write(q[1], "x", 1).ok());
  ASSERT_TRUE(io::Close(q[1]).ok());
  ASSERT_TRUE(io::Close(q[0]).ok());
  const int io_closed = q[0];

  auto check_all = [&] {
    CheckBadFd(-1, "-1");
    CheckBadFd(INT_MIN, "INT_MIN");
    CheckBadFd(INT_MAX, "INT_MAX");
    CheckBadFd(1 << 30, "2^30");
    CheckBadFd(never_registered, "closed, never used with io");
    CheckBadFd(io_closed, "closed with io::Close");
    EXPECT_TRUE(IsBadFdError(io::Close(-1)));
    EXPECT_TRUE(IsBadFdError(io::Close(INT_MAX)));
    EXPECT_TRUE(absl::IsFailedPrecondition(io::Close(io_closed))) << "closing twice";
  };
  {
    SCOPED_TRACE("on a plain thread");
    check_all();
  }
  {
    SCOPED_TRACE("on a goroutine");
    goro_test::RunBounded(check_all, absl::Seconds(25));
  }
  // A closed fd still works as a regular number afterwards.
  int r[2];
  ASSERT_EQ(pipe2(r, O_CLOEXEC), 0);
  goro_test::RunBounded(
      [&] {
        ASSERT_TRUE(io::Write(r[1], "ok", 2).ok());
        char buf[2];
        ASSERT_TRUE(ReadFull(r[0], buf, 2, In(absl::Seconds(5))).ok());
        EXPECT_EQ(std::string(buf, 2), "ok");
      },
      absl::Seconds(25));
  EXPECT_TRUE(io::Close(r[0]).ok());
  EXPECT_TRUE(io::Close(r[1]).ok());
}

// ---------------------------------------------------------------------------
// Writes to a peer that is gone: UnavailableError.
//
// Fails if EPIPE / ECONNRESET map to anything else, or if the write raises
// SIGPIPE (the process would die: see IoChildTest below for pipes).

TEST_F(IoTest, WriteToResetPeerIsUnavailable) {
  goro_test::RunBounded(
      [&] {
        // A socketpair whose other end is closed: EPIPE.
        int s[2];
        ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, s), 0);
        close(s[1]);
        absl::StatusOr<size_t> w = io::Write(s[0], "hello", 5, In(absl::Seconds(5)));
        EXPECT_TRUE(absl::IsUnavailable(w.status())) << "socketpair: " << w.status();
        EXPECT_TRUE(io::Close(s[0]).ok());

        // TCP reset by the peer (SO_LINGER 0 sends RST): ECONNRESET or EPIPE.
        sockaddr_in addr;
        int lfd = Listen(&addr);
        ASSERT_GE(lfd, 0);
        int c = TcpSocket();
        ASSERT_GE(c, 0);
        absl::StatusOr<int> a = ConnectAndAccept(lfd, addr, c);
        ASSERT_TRUE(a.ok()) << a.status();
        linger lg{1, 0};
        ASSERT_EQ(setsockopt(*a, SOL_SOCKET, SO_LINGER, &lg, sizeof lg), 0);
        EXPECT_TRUE(io::Close(*a).ok());
        absl::Status last;
        for (int i = 0; i < 100; ++i) {
          last = io::Write(c, "data", 4, In(absl::Seconds(5))).status();
          if (!last.ok()) break;
          goro::SleepFor(absl::Milliseconds(5));
        }
        EXPECT_TRUE(absl::IsUnavailable(last)) << "TCP after RST: " << last;
        EXPECT_TRUE(io::Close(c).ok());
        EXPECT_TRUE(io::Close(lfd).ok());
      },
      absl::Seconds(25));
}

// A pipe whose read end is closed: write(2) fails with EPIPE *and* raises
// SIGPIPE, whose default action ends the process. io::Write must return
// UnavailableError (as Go does for every fd but stdout/stderr), so the
// runtime has to keep SIGPIPE from killing the process. Runs in a child
// process so that a death is reported as such.
[[noreturn]] void PipeEpipeChild() {
  goro_test::Watchdog dog(absl::Seconds(20), "pipe EPIPE child");
  int failures = 0;
  goro::Run(
      [&] {
        int p[2];
        if (pipe2(p, O_CLOEXEC) != 0) {
          ++failures;
          return;
        }
        close(p[0]);
        absl::StatusOr<size_t> w = io::Write(p[1], "hello", 5, In(absl::Seconds(5)));
        if (!absl::IsUnavailable(w.status())) {
          fprintf(stderr, "io::Write to a pipe with no reader: %s (want UNAVAILABLE)\n",
                  w.status().ToString().c_str());
          ++failures;
        }
        (void)io::Close(p[1]);
      },
      goro_test::TestOptions());
  fprintf(stderr, "survived the write (failures: %d)\n", failures);
  fflush(stderr);
  _exit(failures == 0 ? 0 : 1);
}

TEST(IoChildTest, PipeWriteWithNoReaderIsUnavailableNotSigpipe) {
  EXPECT_EXIT(PipeEpipeChild(), ::testing::ExitedWithCode(0), "");
}

// io::Write sends on sockets (send with MSG_NOSIGNAL) and writes anything
// else with write(2) straight away: a send first, which says ENOTSOCK for a
// pipe, an eventfd or a tty, would double the system calls of each chunk.
// Here a seccomp filter makes every sendto(2) (what send() calls) fail with
// EACCES, in a child process, on every thread. Fails if a Write to a pipe or
// an eventfd tries send first: it gets EACCES, not ENOTSOCK, and returns
// PermissionDenied. The Write to a socketpair must get PermissionDenied:
// sockets are still sent to, and the filter works.
#if defined(__x86_64__) || defined(__aarch64__)
#define GORO_IO_TEST_SECCOMP 1
// Makes sendto(2) fail with EACCES on every thread of the process; false
// (errno set) if the kernel refuses the filter.
bool FailSendto() {
#if defined(__x86_64__)
  constexpr uint32_t kArch = AUDIT_ARCH_X86_64;
#else
  constexpr uint32_t kArch = AUDIT_ARCH_AARCH64;
#endif
  sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, kArch, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_sendto, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EACCES),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  sock_fprog prog{static_cast<unsigned short>(sizeof filter / sizeof filter[0]), filter};
  return prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
         syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_TSYNC, &prog) == 0;
}

[[noreturn]] void WriteToAPipeMakesNoSendChild() {
  goro_test::Watchdog dog(absl::Seconds(20), "io::Write with sendto(2) refused");
  CHILD_CHECK(FailSendto(), "seccomp: %s", strerror(errno));
  goro_test::RunBounded([&] {
    int p[2];
    CHILD_CHECK(pipe2(p, O_CLOEXEC) == 0, "pipe2: %s", strerror(errno));
    absl::StatusOr<size_t> w = io::Write(p[1], "hello", 5, In(absl::Seconds(5)));
    CHILD_CHECK(w.ok() && *w == 5, "Write to a pipe: %s", w.status().ToString().c_str());
    char buf[8] = {};
    absl::StatusOr<size_t> r = io::Read(p[0], buf, sizeof buf, In(absl::Seconds(5)));
    CHILD_CHECK(r.ok() && std::string(buf, *r) == "hello", "Read of the pipe: %s", r.status().ToString().c_str());
    const int efd = eventfd(0, EFD_CLOEXEC);
    const uint64_t one = 1;
    w = io::Write(efd, &one, sizeof one, In(absl::Seconds(5)));
    CHILD_CHECK(w.ok() && *w == sizeof one, "Write to an eventfd: %s", w.status().ToString().c_str());
    int sv[2];
    CHILD_CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0, "socketpair: %s", strerror(errno));
    w = io::Write(sv[0], "x", 1, In(absl::Seconds(5)));
    CHILD_CHECK(absl::IsPermissionDenied(w.status()), "Write to a socket with sendto refused: %s",
                w.status().ToString().c_str());
    for (int fd : {p[0], p[1], efd, sv[0], sv[1]}) CHILD_CHECK(io::Close(fd).ok(), "io::Close(%d)", fd);
  });
  _exit(goro_test::child_failures.load() == 0 ? 0 : 1);
}
#endif

TEST(IoChildTest, WriteToAPipeOrEventfdMakesNoSend) {
#if defined(GORO_IO_TEST_SECCOMP)
  // Whether this kernel (and container) takes the filter: a forked child
  // tries, doing nothing else.
  pid_t probe = fork();
  ASSERT_GE(probe, 0) << strerror(errno);
  if (probe == 0) _exit(FailSendto() ? 0 : 1);
  int status = 0;
  ASSERT_EQ(waitpid(probe, &status, 0), probe);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) GTEST_SKIP() << "seccomp filters are not available here";
  EXPECT_EXIT(WriteToAPipeMakesNoSendChild(), ::testing::ExitedWithCode(0), "");
#else
  GTEST_SKIP() << "the seccomp filter is written for x86-64 and aarch64 only";
#endif
}

// An fd beyond the poller's table cannot be waited on, but io::Close still
// closes it (nothing can be waiting on it). Fails if Close returns an error
// and leaves the fd open. Skipped unless RLIMIT_NOFILE allows such an fd.
TEST_F(IoTest, CloseOfAnFdBeyondThePollersTableClosesIt) {
  const int high = goro::internal::kMaxPollFds;
  std::string why;
  if (!RaiseFdLimit(static_cast<rlim_t>(high) + 1, &why)) GTEST_SKIP() << why;
  int p[2];
  ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
  ASSERT_EQ(dup3(p[0], high, O_CLOEXEC), high) << strerror(errno);
  close(p[0]);
  close(p[1]);
  absl::Status st = io::Close(high);
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_EQ(fcntl(high, F_GETFD), -1) << "fd " << high << " is still open";
  if (fcntl(high, F_GETFD) != -1) close(high);
  EXPECT_TRUE(absl::IsFailedPrecondition(io::Close(high))) << "closing twice";
}

// ---------------------------------------------------------------------------
// TCP on 127.0.0.1.
//
// Fails if Accept ignores its deadline, if a non-blocking connect is not
// waited for (Connect returns before the connection exists, or never), if
// the accepted fd is not non-blocking / close-on-exec as documented, if a
// reader and a writer on the same socket (two goroutines) disturb each
// other, or if any byte of the echo differs. A connection to a port nobody
// listens on must fail with an error, not hang.

TEST_F(IoTest, TcpAcceptDeadlineConnectEcho) {
  sockaddr_in addr;
  int lfd = Listen(&addr);
  ASSERT_GE(lfd, 0);
  const std::vector<uint8_t> data = Pattern(300 << 10, 5);
  goro_test::RunBounded(
      [&] {
        auto t0 = Now();
        absl::StatusOr<int> none = io::Accept(lfd, In(absl::Milliseconds(50)));
        absl::Duration took = Since(t0);
        EXPECT_TRUE(absl::IsDeadlineExceeded(none.status())) << none.status();
        if (none.ok()) close(*none);
        EXPECT_GE(took, absl::Milliseconds(50) - kClockSlack);
        EXPECT_LT(took, absl::Seconds(2));

        goro::WaitGroup wg;
        wg.Add(1);
        goro::Go([&] {  // the server: echoes one connection until end of file
          absl::StatusOr<int> c = io::Accept(lfd, In(absl::Seconds(10)));
          if (!c.ok()) {
            ADD_FAILURE() << c.status();
            wg.Done();
            return;
          }
          EXPECT_NE(fcntl(*c, F_GETFL) & O_NONBLOCK, 0) << "accepted fd is blocking";
          EXPECT_NE(fcntl(*c, F_GETFD) & FD_CLOEXEC, 0) << "accepted fd is not close-on-exec";
          std::vector<char> buf(16 << 10);
          for (;;) {
            absl::StatusOr<size_t> r = io::Read(*c, buf.data(), buf.size(), In(absl::Seconds(10)));
            if (!r.ok()) {
              ADD_FAILURE() << "server read: " << r.status();
              break;
            }
            if (*r == 0) break;
            absl::StatusOr<size_t> w = io::Write(*c, buf.data(), *r, In(absl::Seconds(10)));
            if (!w.ok()) {
              ADD_FAILURE() << "server write: " << w.status();
              break;
            }
          }
          EXPECT_TRUE(io::Close(*c).ok());
          wg.Done();
        });

        int s = TcpSocket();
        ASSERT_GE(s, 0);
        absl::Status cs = io::Connect(s, Sa(addr), sizeof addr, In(absl::Seconds(10)));
        ASSERT_TRUE(cs.ok()) << cs;
        // Write and read at the same time, from two goroutines.
        std::vector<uint8_t> echoed(data.size());
        absl::Status read_st;
        goro::WaitGroup rd;
        rd.Add(1);
        goro::Go([&] {
          read_st = ReadFull(s, echoed.data(), echoed.size(), In(absl::Seconds(15)));
          rd.Done();
        });
        absl::StatusOr<size_t> w = io::Write(s, data.data(), data.size(), In(absl::Seconds(15)));
        EXPECT_TRUE(w.ok()) << w.status();
        rd.Wait();
        EXPECT_TRUE(read_st.ok()) << read_st;
        EXPECT_TRUE(echoed == data) << "echo differs";
        EXPECT_TRUE(io::Close(s).ok());  // the server sees end of file
        wg.Wait();

        // Nobody listens on this port any more.
        EXPECT_TRUE(io::Close(lfd).ok());
        int s2 = TcpSocket();
        ASSERT_GE(s2, 0);
        t0 = Now();
        absl::Status refused = io::Connect(s2, Sa(addr), sizeof addr, In(absl::Seconds(10)));
        EXPECT_FALSE(refused.ok());
        EXPECT_FALSE(absl::IsDeadlineExceeded(refused)) << refused;
        EXPECT_LT(Since(t0), absl::Seconds(5));
        EXPECT_TRUE(io::Close(s2).ok());
      },
      absl::Seconds(25));
}

// A Unix-domain listener with a full queue: a non-blocking connect says
// EAGAIN, which means no connection is under way. Fails if io::Connect treats
// it as "in progress" and returns OK for a socket that is not connected.
TEST_F(IoTest, ConnectToAFullUnixListenerIsAnError) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::string name = absl::StrCat("goro-io-test-full-listener-", getpid());
  memcpy(addr.sun_path + 1, name.data(), name.size());  // the abstract namespace
  socklen_t len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + name.size());
  const sockaddr* sa = reinterpret_cast<const sockaddr*>(&addr);
  int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(lfd, 0);
  ASSERT_EQ(bind(lfd, sa, len), 0) << strerror(errno);
  ASSERT_EQ(listen(lfd, 0), 0) << strerror(errno);
  std::vector<int> queued;  // never accepted
  bool full = false;
  while (!full && queued.size() < 64) {
    int c = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    ASSERT_GE(c, 0);
    if (connect(c, sa, len) == 0) {
      queued.push_back(c);
      continue;
    }
    EXPECT_EQ(errno, EAGAIN) << strerror(errno);
    close(c);
    full = true;
  }
  ASSERT_TRUE(full) << "the listener's queue never filled";
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(s, 0);
  absl::Status st;
  goro_test::GoAndWait([&] { st = io::Connect(s, sa, len, In(absl::Seconds(2))); });
  EXPECT_TRUE(absl::IsUnavailable(st)) << st;
  sockaddr_un peer{};
  socklen_t plen = sizeof peer;
  if (st.ok()) {
    EXPECT_EQ(getpeername(s, reinterpret_cast<sockaddr*>(&peer), &plen), 0)
        << "io::Connect returned OK for a socket that is not connected: " << strerror(errno);
  }
  EXPECT_TRUE(io::Close(s).ok());
  for (int c : queued) close(c);
  close(lfd);
}

// Accepts one loopback connection: *client (a blocking socket, so that a
// plain thread can use it) and *server (goro::io's). False if any step failed.
bool TcpPair(int* client, int* server) {
  sockaddr_in addr;
  int lfd = Listen(&addr);
  if (lfd < 0) return false;
  *client = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  bool ok = *client >= 0 && connect(*client, Sa(addr), sizeof addr) == 0;
  *server = -1;
  for (int i = 0; ok && i < 1000 && *server < 0; ++i) {
    *server = accept4(lfd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (*server < 0) usleep(1000);
  }
  close(lfd);
  int one = 1;
  if (*client >= 0) setsockopt(*client, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return ok && *server >= 0;
}

// Read system calls made by this process so far (/proc/self/io's syscr), or
// -1 where the kernel does not keep that count.
int64_t ReadSyscalls() {
  FILE* f = fopen("/proc/self/io", "r");
  if (f == nullptr) return -1;
  long long n = -1;
  char line[128];
  while (fgets(line, sizeof line, f) != nullptr) {
    if (sscanf(line, "syscr: %lld", &n) == 1) break;
  }
  fclose(f);
  return n;
}

// A read of a TCP socket that returns less than asked for has emptied the
// receive queue, so the next io::Read waits for the poller's edge instead of
// first making a read that would say EAGAIN: an echo server makes one read
// per message, not two. Counted with /proc/self/io over 2,000 round trips,
// with the client's reads (one per round trip) included. Fails if io::Read
// always tries the read first (about 2.6 reads per round trip measured).
// A Read whose deadline has already passed fails and leaves what is queued,
// after a short read as on a fresh socket, and the short read's mark does
// not outlive it: the next Read returns the data.
TEST_F(IoTest, ReadWithAPassedDeadlineAfterAShortTcpReadLeavesWhatIsQueued) {
  int client, server;
  ASSERT_TRUE(TcpPair(&client, &server));
  goro_test::RunBounded(
      [&] {
        char buf[100];
        ASSERT_EQ(write(client, "0123456789", 10), 10);
        absl::StatusOr<size_t> r = io::Read(server, buf, sizeof buf, In(absl::Seconds(10)));
        ASSERT_TRUE(r.ok() && *r == 10) << r.status();  // short: 10 of 100
        ASSERT_EQ(write(client, "abcdefghij", 10), 10);
        // Queued, and its edge seen (not with WaitReadable, which would
        // clear the short read's mark).
        goro::internal::PollDesc* pd = goro::internal::PollDescFor(server);
        goro_test::Eventually([&] { return ReadyLatched(pd); }, absl::Seconds(5));
        ASSERT_TRUE(ReadyLatched(pd));
        ASSERT_TRUE(pd->drained.load());
        r = io::Read(server, buf, sizeof buf, absl::Now());
        EXPECT_TRUE(absl::IsDeadlineExceeded(r.status())) << r.status();
        r = io::Read(server, buf, sizeof buf, In(absl::Seconds(10)));
        ASSERT_TRUE(r.ok()) << r.status();
        EXPECT_EQ(std::string(buf, *r), "abcdefghij");
      },
      absl::Seconds(30));
  EXPECT_TRUE(io::Close(server).ok());
  close(client);
}

TEST_F(IoTest, ShortTcpReadWaitsForTheEdgeWithoutAnotherRead) {
  if (ReadSyscalls() < 0) GTEST_SKIP() << "/proc/self/io is not available (no task I/O accounting)";
  int client, server;
  ASSERT_TRUE(TcpPair(&client, &server));
  constexpr int kRounds = 2000;
  int64_t reads = 0;
  goro_test::RunBounded(
      [&] {
        goro::WaitGroup wg;
        wg.Add(1);
        goro::Go([&] {
          char buf[4096];
          for (;;) {
            absl::StatusOr<size_t> r = io::Read(server, buf, sizeof buf, In(absl::Seconds(20)));
            if (!r.ok() || *r == 0) {
              EXPECT_TRUE(r.ok()) << r.status();
              break;
            }
            EXPECT_TRUE(io::Write(server, buf, *r, In(absl::Seconds(20))).ok());
          }
          wg.Done();
        });
        std::thread t([&] {  // the client: a plain thread with a blocking socket
          int64_t before = ReadSyscalls();
          char msg[64], back[64];
          for (int i = 0; i < kRounds; ++i) {
            memset(msg, 'a' + i % 26, sizeof msg);
            if (write(client, msg, sizeof msg) != static_cast<ssize_t>(sizeof msg)) {
              ADD_FAILURE() << "client write: " << strerror(errno);
              break;
            }
            size_t got = 0;
            while (got < sizeof back) {
              ssize_t r = read(client, back + got, sizeof back - got);
              if (r <= 0) break;
              got += r;
            }
            if (got != sizeof back || memcmp(msg, back, sizeof msg) != 0) {
              ADD_FAILURE() << "round " << i << ": echo differs or ended";
              break;
            }
          }
          reads = ReadSyscalls() - before;
          shutdown(client, SHUT_WR);
        });
        wg.Wait();
        t.join();
      },
      absl::Seconds(30));
  EXPECT_TRUE(io::Close(server).ok());
  close(client);
  fprintf(stderr, "%d round trips: %lld read system calls\n", kRounds, static_cast<long long>(reads));
  EXPECT_GE(reads, 2 * kRounds);
  EXPECT_LT(reads, 2 * kRounds + kRounds / 4) << "the server tries a read before waiting";
}

// A Read of 0 bytes returns 0 at once, as read(2) and Go's Read(p[:0]) do,
// also right after a short TCP read (whose mark makes the next Read wait for
// an edge first); the mark still holds for the Read after it. A Write of 0
// bytes returns 0 at once, here on a socket whose send buffer is full.
// Fails (the 0-byte Read waits until its 5 s deadline) if the short read's
// wait comes before the length is looked at.
TEST_F(IoTest, ZeroLengthReadAndWriteReturnAtOnce) {
  int client, server;
  ASSERT_TRUE(TcpPair(&client, &server));
  goro_test::RunBounded(
      [&] {
        char buf[64];
        ASSERT_EQ(write(client, "abc", 3), 3);
        absl::StatusOr<size_t> r = io::Read(server, buf, sizeof buf, In(absl::Seconds(10)));
        ASSERT_TRUE(r.ok() && *r == 3) << r.status();  // short: 3 of 64
        ASSERT_TRUE(goro::internal::PollDescFor(server)->drained.load());
        auto t0 = Now();
        r = io::Read(server, buf, 0, In(absl::Seconds(5)));
        ASSERT_TRUE(r.ok()) << r.status();
        EXPECT_EQ(*r, 0u);
        EXPECT_LT(Since(t0), absl::Seconds(2)) << "a 0-byte Read waited for data";
        EXPECT_TRUE(goro::internal::PollDescFor(server)->drained.load());
        ASSERT_EQ(write(client, "de", 2), 2);
        r = io::Read(server, buf, sizeof buf, In(absl::Seconds(10)));
        ASSERT_TRUE(r.ok()) << r.status();
        EXPECT_EQ(std::string(buf, *r), "de");
        // Fill the send buffer (the client reads nothing).
        std::vector<char> block(64 << 10, 'x');
        while (send(server, block.data(), block.size(), MSG_DONTWAIT | MSG_NOSIGNAL) > 0) {
        }
        ASSERT_EQ(errno, EAGAIN);
        t0 = Now();
        absl::StatusOr<size_t> w = io::Write(server, block.data(), 0, In(absl::Seconds(5)));
        ASSERT_TRUE(w.ok()) << w.status();
        EXPECT_EQ(*w, 0u);
        EXPECT_LT(Since(t0), absl::Seconds(2)) << "a 0-byte Write waited for room";
      },
      absl::Seconds(30));
  EXPECT_TRUE(io::Close(server).ok());
  close(client);
}

// Data and the peer's FIN in one segment (TCP_CORK holds the data until
// shutdown adds the FIN): the poller reports them with one edge, which wakes
// the parked reader. Its read returns the data, short, but the FIN is still
// queued and raises no further edge, so the next io::Read must read at once
// rather than wait. Fails (the second Read times out) if a short read after a
// hang-up is taken to mean that the socket is empty.
TEST_F(IoTest, ShortTcpReadBeforeAQueuedFinStillSeesTheEnd) {
  int client, server;
  ASSERT_TRUE(TcpPair(&client, &server));
  int one = 1;
  ASSERT_EQ(setsockopt(client, IPPROTO_TCP, TCP_CORK, &one, sizeof one), 0);
  goro_test::RunBounded(
      [&] {
        std::atomic<bool> parked{false};
        goro::WaitGroup wg;
        wg.Add(1);
        goro::Go([&] {
          char buf[256];
          parked = true;  // about to park: nothing has been sent yet
          absl::StatusOr<size_t> r = io::Read(server, buf, sizeof buf, In(absl::Seconds(10)));
          EXPECT_TRUE(r.ok() && *r == 10u) << (r.ok() ? absl::StrCat(*r, " bytes") : r.status().ToString());
          auto t0 = Now();
          absl::StatusOr<size_t> eof = io::Read(server, buf, sizeof buf, In(absl::Seconds(3)));
          EXPECT_TRUE(eof.ok() && *eof == 0u)
              << (eof.ok() ? absl::StrCat(*eof, " bytes") : eof.status().ToString()) << " after "
              << absl::FormatDuration(Since(t0)) << "; wanted the end of file";
          wg.Done();
        });
        while (!parked.load()) goro::SleepFor(absl::Milliseconds(1));
        goro::SleepFor(absl::Milliseconds(20));  // let it park in Read
        EXPECT_EQ(write(client, "0123456789", 10), 10);
        EXPECT_EQ(shutdown(client, SHUT_WR), 0);
        wg.Wait();
      },
      absl::Seconds(20));
  EXPECT_TRUE(io::Close(server).ok());
  close(client);
}

// A Read after a short one waits for the poller's edge first; if its
// deadline passes before the edge is fetched, it still reads what is queued.
// Made deterministic by hiding the edge: the byte is queued and the latch
// cleared by hand, as if the poller had not yet fetched it. Fails (the Read
// says DeadlineExceeded) if that wait's expiry ends the Read.
TEST_F(IoTest, ReadAfterAShortOneWhoseDeadlinePassesBeforeTheEdgeStillReads) {
  int client, server;
  ASSERT_TRUE(TcpPair(&client, &server));
  goro_test::RunBounded(
      [&] {
        char buf[100];
        ASSERT_EQ(write(client, "0123456789", 10), 10);
        absl::StatusOr<size_t> r = io::Read(server, buf, sizeof buf, In(absl::Seconds(10)));
        ASSERT_TRUE(r.ok() && *r == 10) << r.status();  // short: the next Read waits for an edge
        goro::internal::PollDesc* pd = goro::internal::PollDescFor(server);
        ASSERT_TRUE(pd->drained.load());
        ASSERT_EQ(write(client, "x", 1), 1);
        goro_test::Eventually([&] { return ReadyLatched(pd); }, absl::Seconds(5));
        pd->lock.Lock();
        pd->rready = false;  // the edge, not yet fetched
        pd->lock.Unlock();
        r = io::Read(server, buf, sizeof buf, In(absl::Milliseconds(20)));
        ASSERT_TRUE(r.ok()) << r.status();
        EXPECT_EQ(std::string(buf, *r), "x");
      },
      absl::Seconds(30));
  EXPECT_TRUE(io::Close(server).ok());
  close(client);
}

// WaitReadable / WaitWritable wait for the fd to be ready now, not for a
// readiness latched from an edge whose data has been taken since: a caller
// that waits, reads (or writes) until EAGAIN with plain calls and waits again
// must sleep in the second wait. Each first wait parks until a goroutine
// makes the fd ready, so that the poller latches the edge. Fails if a
// latched readiness alone makes the wait return (it then returns OK at
// once, over and over: hundreds of thousands of times in the 300 ms).
TEST_F(IoTest, WaitReadableAndWritableDoNotReturnForReadinessUsedUp) {
  int p[2];
  ASSERT_EQ(pipe2(p, O_CLOEXEC | O_NONBLOCK), 0);
  int sp[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sp), 0);
  goro_test::RunBounded(
      [&] {
        char c;
        goro::WaitGroup helpers;  // they use this frame's variables: waited for before any ASSERT
        EXPECT_TRUE(absl::IsDeadlineExceeded(io::WaitReadable(p[0], absl::InfinitePast())));  // registers it
        helpers.Add(1);
        goro::Go([&] {
          goro::SleepFor(absl::Milliseconds(20));
          const char x = 'x';
          EXPECT_EQ(write(p[1], &x, 1), 1);
          helpers.Done();
        });
        absl::Status first = io::WaitReadable(p[0], In(absl::Seconds(10)));
        helpers.Wait();
        ASSERT_TRUE(first.ok()) << first;
        ASSERT_EQ(read(p[0], &c, 1), 1);
        int spurious = 0;
        absl::Time end = In(absl::Milliseconds(300));
        absl::Status s;
        while ((s = io::WaitReadable(p[0], end)).ok() && spurious < 1000) {
          if (read(p[0], &c, 1) < 0) ++spurious;
        }
        EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
        EXPECT_LE(spurious, 1) << "WaitReadable returned OK on an empty pipe";

        // Fill the socket; the peer makes room, and it is filled again.
        char block[4096] = {};
        char sink[4096];
        while (write(sp[0], block, sizeof block) > 0) {
        }
        helpers.Add(1);
        goro::Go([&] {
          goro::SleepFor(absl::Milliseconds(20));
          while (read(sp[1], sink, sizeof sink) > 0) {
          }
          helpers.Done();
        });
        absl::Status room = io::WaitWritable(sp[0], In(absl::Seconds(10)));
        helpers.Wait();  // the drainer is done (the peer's socket is empty)
        ASSERT_TRUE(room.ok()) << room;
        while (write(sp[0], block, sizeof block) > 0) {
        }
        spurious = 0;
        end = In(absl::Milliseconds(300));
        while ((s = io::WaitWritable(sp[0], end)).ok() && spurious < 1000) {
          if (write(sp[0], block, sizeof block) < 0) ++spurious;
        }
        EXPECT_TRUE(absl::IsDeadlineExceeded(s)) << s;
        EXPECT_LE(spurious, 1) << "WaitWritable returned OK on a full socket";
        // And a wait that must end: the peer drains the socket.
        helpers.Add(1);
        goro::Go([&] {
          goro::SleepFor(absl::Milliseconds(20));
          while (read(sp[1], sink, sizeof sink) > 0) {
          }
          helpers.Done();
        });
        EXPECT_TRUE(io::WaitWritable(sp[0], In(absl::Seconds(10))).ok());
        helpers.Wait();
      },
      absl::Seconds(30));
  for (int fd : {p[0], p[1], sp[0], sp[1]}) EXPECT_TRUE(io::Close(fd).ok());
}

// WaitReadable after a short TCP read: the edge it waits for is the one the
// next Read would have waited for, so the Read must not wait again. Fails
// (the Read times out with the byte queued) if WaitReadable leaves the short
// read's mark in place.
TEST_F(IoTest, ReadAfterWaitReadableThatFollowedAShortReadReadsAtOnce) {
  int client, server;
  ASSERT_TRUE(TcpPair(&client, &server));
  goro_test::RunBounded(
      [&] {
        char buf[100];
        ASSERT_EQ(write(client, "0123456789", 10), 10);
        absl::StatusOr<size_t> r = io::Read(server, buf, sizeof buf, In(absl::Seconds(10)));
        ASSERT_TRUE(r.ok() && *r == 10) << r.status();
        goro::WaitGroup writer;
        writer.Add(1);
        goro::Go([&] {
          goro::SleepFor(absl::Milliseconds(20));  // WaitReadable parks first
          EXPECT_EQ(write(client, "y", 1), 1);
          writer.Done();
        });
        absl::Status w = io::WaitReadable(server, In(absl::Seconds(10)));
        writer.Wait();  // before any ASSERT returns: it uses this frame
        ASSERT_TRUE(w.ok()) << w;
        r = io::Read(server, buf, sizeof buf, In(absl::Seconds(2)));
        ASSERT_TRUE(r.ok()) << r.status();
        EXPECT_EQ(std::string(buf, *r), "y");
      },
      absl::Seconds(30));
  EXPECT_TRUE(io::Close(server).ok());
  close(client);
}

// io::Connect reads errno after it has parked, perhaps on another thread:
// through a stale address (GCC computes errno's once per function) it read
// the first thread's errno. Here a Connect that never completes (the
// listener's queue is full) is woken again and again as by a readiness that
// proves nothing; each time getpeername says ENOTCONN and it must wait on,
// to its deadline. Fails (the Connect ends early with an error getpeername
// never gave, "Operation now in progress" or EAGAIN) if errno is read through
// the address taken before a wait.
TEST_F(IoTest, ConnectWokenOnAnotherThreadReadsThatThreadsErrno) {
  sockaddr_in addr;
  const int lfd = Listen(&addr, 0);
  ASSERT_GE(lfd, 0);
  int fill[4];
  for (int& c : fill) {
    c = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    connect(c, Sa(addr), sizeof addr);
  }
  const int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(s, 0);
  goro_test::RunBounded(
      [&] {
        goro::SleepFor(absl::Milliseconds(20));  // the queue fills
        goro::internal::PollDesc* pd = goro::internal::PollDescFor(s);
        std::atomic<bool> done{false};
        absl::Status st;
        goro::WaitGroup wg;
        wg.Add(1);
        goro::Go([&] {
          st = io::Connect(s, Sa(addr), sizeof addr, In(absl::Milliseconds(500)));
          done = true;
          wg.Done();
        });
        int wakes = 0;
        while (!done.load()) {
          if (pd->wg.load() != nullptr) {
            goro::internal::G* list = nullptr;
            pd->lock.Lock();
            pd->wready = true;
            goro::internal::TakeWaiter(pd->wg, &list);
            pd->lock.Unlock();
            goro::internal::InjectGList(list);
            ++wakes;
          }
          goro::SleepFor(absl::Microseconds(200));
        }
        wg.Wait();
        EXPECT_TRUE(absl::IsDeadlineExceeded(st)) << st << " after " << wakes << " wake-ups";
        EXPECT_GT(wakes, 0);
      },
      absl::Seconds(30));
  EXPECT_TRUE(io::Close(s).ok());
  for (int c : fill) close(c);
  close(lfd);
}

// The errors name what is wrong: an fd open, but not for this operation
// (reading a pipe's write end) is not "not open"; an fd beyond the poller's
// table is not "not valid".
TEST_F(IoTest, ErrorsForAnFdOpenTheWrongWayAndForOneBeyondTheTable) {
  int p[2];
  ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
  char c;
  absl::StatusOr<size_t> r = io::Read(p[1], &c, 1, In(absl::Seconds(5)));
  EXPECT_TRUE(absl::IsFailedPrecondition(r.status())) << r.status();
  EXPECT_NE(r.status().message().find("not open for this operation"), std::string::npos) << r.status();
  r = io::Read(goro::internal::kMaxPollFds, &c, 1, In(absl::Seconds(5)));
  EXPECT_TRUE(absl::IsInvalidArgument(r.status())) << r.status();
  EXPECT_NE(r.status().message().find("beyond the poller's table"), std::string::npos) << r.status();
  EXPECT_TRUE(io::Close(p[0]).ok());
  EXPECT_TRUE(io::Close(p[1]).ok());
}

// Several goroutines Accept on one listener, as Go servers often do: they
// take turns (Go's fdMutex) instead of the second failing at once with
// "another goroutine is already waiting". Fails if any Accept fails.
TEST_F(IoTest, ConcurrentAcceptsOnOneListenerTakeTurns) {
  sockaddr_in addr;
  const int lfd = Listen(&addr);
  ASSERT_GE(lfd, 0);
  constexpr int kAcceptors = 4;
  int accepted[kAcceptors];
  absl::Status errors[kAcceptors];
  int clients[kAcceptors];
  goro_test::RunBounded(
      [&] {
        goro::WaitGroup wg;
        for (int i = 0; i < kAcceptors; ++i) {
          wg.Add(1);
          goro::Go([&, i] {
            absl::StatusOr<int> c = io::Accept(lfd, In(absl::Seconds(10)));
            accepted[i] = c.ok() ? *c : -1;
            errors[i] = c.status();
            wg.Done();
          });
        }
        goro::SleepFor(absl::Milliseconds(20));  // all of them waiting
        for (int& c : clients) {
          c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
          EXPECT_EQ(connect(c, Sa(addr), sizeof addr), 0) << strerror(errno);
        }
        wg.Wait();
      },
      absl::Seconds(30));
  for (int i = 0; i < kAcceptors; ++i) {
    EXPECT_TRUE(errors[i].ok()) << "acceptor " << i << ": " << errors[i];
    if (accepted[i] >= 0) {
      EXPECT_TRUE(io::Close(accepted[i]).ok());
    }
    close(clients[i]);
  }
  EXPECT_TRUE(io::Close(lfd).ok());
}

// Concurrent Writes to one socket, each 256 KiB of its own byte, through a
// small send buffer (so each takes many partial writes): a reader must see
// each Write's bytes in one run, as with Go's conn.Write. Fails if Writes
// interleave their chunks, or if a Write fails (the second writer used to
// get "another goroutine is already waiting" when the first waited for room).
TEST_F(IoTest, ConcurrentWritesDoNotInterleave) {
  int sp[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp), 0);
  int small = 4096;
  setsockopt(sp[0], SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
  constexpr int kWriters = 4;
  constexpr size_t kEach = 256 * 1024;
  std::vector<char> got;
  std::thread reader([&] {  // a plain thread, blocking reads
    char buf[8192];
    while (got.size() < kWriters * kEach) {
      ssize_t r = read(sp[1], buf, sizeof buf);
      if (r <= 0) break;
      got.insert(got.end(), buf, buf + r);
    }
  });
  absl::Status errors[kWriters];
  goro_test::RunBounded(
      [&] {
        goro::WaitGroup wg;
        for (int i = 0; i < kWriters; ++i) {
          wg.Add(1);
          goro::Go([&, i] {
            std::vector<char> data(kEach, static_cast<char>('a' + i));
            absl::StatusOr<size_t> w = io::Write(sp[0], data.data(), data.size(), In(absl::Seconds(20)));
            errors[i] = w.status();
            wg.Done();
          });
        }
        wg.Wait();
      },
      absl::Seconds(40));
  shutdown(sp[0], SHUT_WR);
  reader.join();
  for (int i = 0; i < kWriters; ++i) EXPECT_TRUE(errors[i].ok()) << "writer " << i << ": " << errors[i];
  ASSERT_EQ(got.size(), kWriters * kEach);
  int runs = 1;
  for (size_t i = 1; i < got.size(); ++i) runs += got[i] != got[i - 1];
  EXPECT_EQ(runs, kWriters) << "the Writes' bytes were interleaved";
  EXPECT_TRUE(io::Close(sp[0]).ok());
  close(sp[1]);
}

// A Read waiting for its turn behind another keeps its own deadline, and
// io::Close ends the wait of those still queued. On an empty pipe: A reads
// with no deadline (it holds the turn), B with 50 ms, C with none. Fails if
// B does not time out in about 50 ms, or if the Close leaves A or C waiting
// (the bounded run fails) or not cancelled.
TEST_F(IoTest, ReadWaitingForItsTurnKeepsItsDeadlineAndIsCancelledByClose) {
  int p[2];
  ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
  goro_test::RunBounded(
      [&] {
        absl::Status a, c;
        absl::Status b;
        absl::Duration b_took;
        goro::WaitGroup wg;
        wg.Add(3);
        goro::Go([&] {
          char ch;
          a = io::Read(p[0], &ch, 1).status();
          wg.Done();
        });
        goro::SleepFor(absl::Milliseconds(10));  // A holds the turn, parked on the pipe
        goro::Go([&] {
          char ch;
          auto t0 = Now();
          b = io::Read(p[0], &ch, 1, In(absl::Milliseconds(50))).status();
          b_took = Since(t0);
          wg.Done();
        });
        goro::Go([&] {
          char ch;
          c = io::Read(p[0], &ch, 1).status();
          wg.Done();
        });
        goro::SleepFor(absl::Milliseconds(200));  // B timed out meanwhile
        EXPECT_TRUE(io::Close(p[0]).ok());
        wg.Wait();
        EXPECT_TRUE(absl::IsDeadlineExceeded(b)) << b;
        EXPECT_GE(b_took, absl::Milliseconds(50) - kClockSlack);
        EXPECT_TRUE(absl::IsCancelled(a)) << a;
        EXPECT_TRUE(absl::IsCancelled(c)) << c;
      },
      absl::Seconds(30));
  EXPECT_TRUE(io::Close(p[1]).ok());
}

// n concurrent loopback connections, each echoing a short message.
//
// Every client holds its connection open until all n have got their echo, so
// at that moment 2n sockets are open at once (checked). Fails if the poller
// loses a wake-up among thousands of registered fds (a client waits until
// its deadline), mixes up fds (wrong bytes back), or if anything leaks.
void EchoMany(int n, absl::Duration limit) {
  sockaddr_in addr;
  const int lfd = Listen(&addr, 65535);  // the kernel caps it at somaxconn
  ASSERT_GE(lfd, 0);
  const int fds_before = CountOpenFds();
  std::atomic<int> ok_clients{0}, failed_clients{0}, server_errors{0};
  std::atomic<int> peak_extra_fds{0};
  absl::Mutex mu;
  std::string first_error;
  auto note_error = [&](const std::string& e) {
    absl::MutexLock l(&mu);
    if (first_error.empty()) first_error = e;
  };
  auto start = Now();
  goro_test::RunBounded(
      [&] {
        const absl::Time deadline = In(limit);
        std::atomic<bool> closing{false};
        goro::WaitGroup servers, acceptor, clients, echoed;
        goro::Chan<int> release;  // closed when every client has its echo

        acceptor.Add(1);
        goro::Go([&] {
          for (;;) {
            absl::StatusOr<int> c = io::Accept(lfd, deadline);
            if (!c.ok()) {
              if (!closing.load()) {
                server_errors++;
                note_error(absl::StrCat("accept: ", c.status().ToString()));
              }
              break;
            }
            servers.Add(1);
            int fd = *c;
            goro::Go([&, fd] {
              char buf[256];
              for (;;) {
                absl::StatusOr<size_t> r = io::Read(fd, buf, sizeof buf, deadline);
                if (!r.ok()) {
                  server_errors++;
                  note_error(absl::StrCat("server read: ", r.status().ToString()));
                  break;
                }
                if (*r == 0) break;
                absl::StatusOr<size_t> w = io::Write(fd, buf, *r, deadline);
                if (!w.ok()) {
                  server_errors++;
                  note_error(absl::StrCat("server write: ", w.status().ToString()));
                  break;
                }
              }
              (void)io::Close(fd);
              servers.Done();
            });
          }
          acceptor.Done();
        });

        clients.Add(n);
        echoed.Add(n);
        for (int i = 0; i < n; ++i) {
          goro::Go([&, i] {
            bool ok = false;
            std::string why;
            int s = TcpSocket();
            if (s < 0) {
              why = absl::StrCat("socket: ", strerror(errno));
            } else if (absl::Status cs = io::Connect(s, Sa(addr), sizeof addr, deadline); !cs.ok()) {
              why = absl::StrCat("connect: ", cs.ToString());
            } else {
              std::string msg = absl::StrCat("client ", i, " of ", n, " says ", i * 7919 % 100003, ".");
              std::string back(msg.size(), '\0');
              absl::StatusOr<size_t> w = io::Write(s, msg.data(), msg.size(), deadline);
              absl::Status r = w.ok() ? ReadFull(s, back.data(), back.size(), deadline) : w.status();
              if (!r.ok()) {
                why = absl::StrCat("echo: ", r.ToString());
              } else if (back != msg) {
                why = absl::StrCat("client ", i, " got '", back, "' for '", msg, "'");
              } else {
                ok = true;
              }
            }
            if (ok) {
              ok_clients++;
            } else {
              failed_clients++;
              note_error(why);
            }
            echoed.Done();
            (void)release.Recv();  // hold the connection until everyone has echoed
            if (s >= 0) (void)io::Close(s);
            clients.Done();
          });
        }
        echoed.Wait();
        peak_extra_fds = CountOpenFds() - fds_before;
        release.Close();
        clients.Wait();
        // Every accepted connection has its echo goroutine by now (a client
        // got its echo only after the acceptor's servers.Add).
        servers.Wait();
        closing = true;
        (void)io::Close(lfd);  // wakes the acceptor with CancelledError
        acceptor.Wait();
      },
      limit + absl::Seconds(5));
  absl::Duration took = Since(start);
  fprintf(stderr, "%d connections: %s, peak %d extra fds, %d threads\n", n, absl::FormatDuration(took).c_str(),
          peak_extra_fds.load(), goro::GetStats().threads);
  EXPECT_EQ(ok_clients.load(), n) << failed_clients.load() << " clients failed; first error: " << first_error;
  EXPECT_EQ(server_errors.load(), 0) << "first error: " << first_error;
  EXPECT_GE(peak_extra_fds.load(), 2 * n) << "the connections were not all open at once";
}

TEST_F(IoTest, TwoThousandConcurrentTcpConnections) {
  std::string why;
  if (!RaiseFdLimit(4200, &why)) GTEST_SKIP() << why;
  // About 0.1 s; under ThreadSanitizer 14 s on an idle 2-CPU machine, and
  // past 20 s when other tests keep it busy.
  EchoMany(2000, goro_test::kTsanBuild ? absl::Seconds(60) : absl::Seconds(20));
}

TEST_F(IoTest, TenThousandConcurrentTcpConnections) {
  std::string why;
  if (!RaiseFdLimit(20100, &why)) GTEST_SKIP() << why;
  EchoMany(10000, absl::Seconds(22));
}

// The same at 10,000 connections with the server in its own process (the
// echo_server example, itself a goro program: one goroutine per connection),
// so that each process needs about 10,000 descriptors rather than 20,000 -
// more than some machines' hard limit. Fails if any client's bytes come back
// wrong or late, or if the connections were not all open at once.
TEST_F(IoTest, TenThousandConnectionsToAGoroServerProcess) {
  if (goro_test::kTsanBuild) {
    GTEST_SKIP() << "ThreadSanitizer build: TSan tracks at most 8128 live threads and fibers "
                    "(one per goroutine), the server runs 10,000 goroutines";
  }
  constexpr int kConns = 10000;
  std::string why;
  if (!RaiseFdLimit(kConns + 200, &why)) GTEST_SKIP() << why;
  int out[2];
  ASSERT_EQ(pipe2(out, O_CLOEXEC), 0);
  pid_t server = fork();
  ASSERT_GE(server, 0);
  if (server == 0) {
    dup2(out[1], STDOUT_FILENO);
    execl(GORO_ECHO_SERVER_PATH, GORO_ECHO_SERVER_PATH, "--port=0", "--seconds=60", "--procs=1",
          static_cast<char*>(nullptr));
    _exit(127);
  }
  close(out[1]);
  // "listening on 127.0.0.1:PORT"
  std::string line;
  char c;
  while (line.find('\n') == std::string::npos && read(out[0], &c, 1) == 1) line += c;
  close(out[0]);
  int port = 0;
  size_t colon = line.rfind(':');
  ASSERT_NE(colon, std::string::npos) << "echo_server printed '" << line << "'";
  port = atoi(line.c_str() + colon + 1);
  ASSERT_GT(port, 0) << "echo_server printed '" << line << "'";
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);

  std::atomic<int> ok_clients{0}, open_at_once{0}, peak{0};
  absl::Mutex mu;
  std::string first_error;
  goro_test::RunBounded(
      [&] {
        const absl::Time deadline = In(absl::Seconds(40));
        goro::WaitGroup echoed, clients;
        goro::Chan<int> release;
        echoed.Add(kConns);
        clients.Add(kConns);
        for (int i = 0; i < kConns; ++i) {
          goro::Go([&, i] {
            std::string why;
            int s = TcpSocket();
            if (s < 0) {
              why = absl::StrCat("socket: ", strerror(errno));
            } else if (absl::Status cs = io::Connect(s, Sa(addr), sizeof addr, deadline); !cs.ok()) {
              why = absl::StrCat("connect: ", cs.ToString());
            } else {
              int now = ++open_at_once;
              int p = peak.load();
              while (now > p && !peak.compare_exchange_weak(p, now)) {
              }
              std::string msg = absl::StrCat("client ", i, " says ", i * 7919 % 100003, ".");
              std::string back(msg.size(), '\0');
              absl::StatusOr<size_t> w = io::Write(s, msg.data(), msg.size(), deadline);
              absl::Status r = w.ok() ? ReadFull(s, back.data(), back.size(), deadline) : w.status();
              if (!r.ok()) {
                why = absl::StrCat("echo: ", r.ToString());
              } else if (back != msg) {
                why = absl::StrCat("client ", i, " got '", back, "' for '", msg, "'");
              } else {
                ok_clients++;
              }
            }
            if (!why.empty()) {
              absl::MutexLock l(&mu);
              if (first_error.empty()) first_error = why;
            }
            echoed.Done();
            (void)release.Recv();  // hold the connection until everyone has echoed
            if (s >= 0) {
              --open_at_once;
              (void)io::Close(s);
            }
            clients.Done();
          });
        }
        echoed.Wait();
        release.Close();
        clients.Wait();
      },
      absl::Seconds(50));
  kill(server, SIGTERM);
  int status;
  waitpid(server, &status, 0);
  fprintf(stderr, "%d connections to a goro echo_server process: %d echoed, peak %d open\n", kConns,
          ok_clients.load(), peak.load());
  EXPECT_EQ(ok_clients.load(), kConns) << "first error: " << first_error;
  EXPECT_EQ(peak.load(), kConns) << "the connections were not all open at once";
}

// The exit status and the output (stdout and stderr) of `program args`,
// killed after 10 s (coreutils' timeout: status 124).
std::pair<int, std::string> RunExample(const char* program, const std::string& args) {
  goro_test::ShellRun r = goro_test::RunShell(absl::StrCat("timeout 10 '", program, "' ", args, " 2>&1"));
  return {r.exit_code, r.text};
}

// echo_server gave htons() any int: --port=70000 listened on 4464 and
// --port=-1 on 65535. A negative or NaN --seconds ran until killed. Each is
// now one line and status 2, before anything listens.
TEST(EchoExampleTest, EchoServerRejectsAPortOrDurationOutOfRange) {
  if (access(GORO_ECHO_SERVER_PATH, X_OK) != 0) GTEST_SKIP() << "the examples are not built";
  const std::pair<const char*, const char*> cases[] = {
      {"--port=70000", "echo_server: --port=70000: want 0 (a free port) to 65535\n"},
      {"--port=-1", "echo_server: --port=-1: want 0 (a free port) to 65535\n"},
      {"--port=0 --seconds=-1",
       "echo_server: --seconds=-1: want 0 (run until killed) or a finite number of seconds\n"},
      {"--port=0 --seconds=nan",
       "echo_server: --seconds=nan: want 0 (run until killed) or a finite number of seconds\n"},
      {"--port=0 --seconds=inf",
       "echo_server: --seconds=inf: want 0 (run until killed) or a finite number of seconds\n"},
  };
  for (const auto& [args, line] : cases) {
    auto [status, out] = RunExample(GORO_ECHO_SERVER_PATH, args);
    EXPECT_EQ(status, 2) << args << "\n" << out;
    EXPECT_EQ(out, line) << args;
  }
}

// echo_load took --seconds=nan or inf and --warmup=nan, and then reported
// "FAIL: hung" (its watchdog's wait ended at once); --messages=-5 ran for
// --seconds, and --threads=0 ran one thread. Each is now one line, status 2.
TEST(EchoExampleTest, EchoLoadRejectsBadCountsAndDurations) {
  if (access(GORO_ECHO_LOAD_PATH, X_OK) != 0) GTEST_SKIP() << "the examples are not built";
  const std::pair<const char*, const char*> cases[] = {
      {"--seconds=nan", "echo_load: --seconds=nan: want more than 0, at most 86400\n"},
      {"--seconds=inf", "echo_load: --seconds=inf: want more than 0, at most 86400\n"},
      {"--seconds=0.2 --warmup=nan", "echo_load: --warmup=nan: want 0 to 86400\n"},
      {"--seconds=0.2 --messages=-5", "echo_load: --messages=-5: want 0 (run for --seconds) or more\n"},
      {"--seconds=0.2 --client=epoll --threads=0", "echo_load: --threads=0: want 1 or more\n"},
      {"--seconds=0.2 --reply_timeout=inf", "echo_load: --reply_timeout=inf: want more than 0, at most 24h\n"},
  };
  for (const auto& [args, line] : cases) {
    auto [status, out] = RunExample(GORO_ECHO_LOAD_PATH, absl::StrCat("--conns=2 ", args));
    EXPECT_EQ(status, 2) << args << "\n" << out;
    EXPECT_EQ(out, line) << args;
  }
}

// ---------------------------------------------------------------------------
// Regular files: epoll refuses them, so io falls back to a marked blocking
// call. Fails if the fallback is missing (epoll_ctl's EPERM would surface as
// an error), if Write stops after a partial write, or if data differ.

TEST_F(IoTest, RegularFileGoesThroughSyscallFallback) {
  std::string path = absl::StrCat(::testing::TempDir(), "/goro_io_test_XXXXXX");
  int fd = mkstemp(path.data());
  ASSERT_GE(fd, 0) << strerror(errno);
  const std::vector<uint8_t> data = Pattern((1 << 20) + 3, 99);
  std::vector<uint8_t> got;
  goro_test::RunBounded(
      [&] {
        absl::StatusOr<size_t> w = io::Write(fd, data.data(), data.size(), In(absl::Seconds(10)));
        ASSERT_TRUE(w.ok()) << w.status();
        EXPECT_EQ(*w, data.size());
        EXPECT_TRUE(io::WaitReadable(fd, In(absl::Seconds(1))).ok());
        EXPECT_TRUE(io::WaitWritable(fd, In(absl::Seconds(1))).ok());
        ASSERT_EQ(lseek(fd, 0, SEEK_SET), 0);
        std::vector<uint8_t> buf(64 << 10);
        for (;;) {
          absl::StatusOr<size_t> r = io::Read(fd, buf.data(), buf.size(), In(absl::Seconds(10)));
          ASSERT_TRUE(r.ok()) << r.status();
          if (*r == 0) break;
          got.insert(got.end(), buf.begin(), buf.begin() + *r);
        }
      },
      absl::Seconds(25));
  EXPECT_TRUE(got == data) << "read back " << got.size() << " bytes of " << data.size();
  // On a plain thread too.
  ASSERT_EQ(lseek(fd, 0, SEEK_SET), 0);
  char head[8];
  absl::StatusOr<size_t> r = io::Read(fd, head, sizeof head);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(*r, sizeof head);
  EXPECT_EQ(memcmp(head, data.data(), sizeof head), 0);
  EXPECT_TRUE(io::Close(fd).ok());
  unlink(path.c_str());
}

// ---------------------------------------------------------------------------
// Plain threads (not goroutines) block in io::Read until data arrives.
//
// The data come from another plain thread with write(2), while no goroutine
// runs at all. Then a goroutine writes: fails (the reader waits until its
// deadline) if a plain thread's wake-up is lost. The reader's deadline is a
// timer, which gets an M into epoll_wait by itself; the test below waits
// without one.

TEST_F(IoTest, PlainThreadReadBlocksUntilData) {
  int p[2];
  ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
  goro_test::Watchdog dog(absl::Seconds(25), "plain thread reads");
  for (int round = 0; round < 2; ++round) {
    SCOPED_TRACE(round == 0 ? "written by a plain thread" : "written by a goroutine");
    std::atomic<bool> started{false}, returned{false};
    absl::StatusOr<size_t> r = absl::UnknownError("not run");
    char buf[16] = {};
    auto t0 = Now();
    std::thread reader([&] {
      started = true;
      r = io::Read(p[0], buf, sizeof buf, In(absl::Seconds(10)));
      returned = true;
    });
    ASSERT_TRUE(goro_test::Eventually([&] { return started.load(); }));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_FALSE(returned.load()) << "Read returned on an empty pipe";
    if (round == 0) {
      std::thread writer([&] { EXPECT_EQ(write(p[1], "plain", 5), 5); });
      writer.join();
    } else {
      goro_test::GoAndWait([&] { EXPECT_TRUE(io::Write(p[1], "goro!", 5).ok()); }, absl::Seconds(10));
    }
    reader.join();
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(std::string(buf, *r), round == 0 ? "plain" : "goro!");
    EXPECT_LT(Since(t0), absl::Seconds(5));
  }
  // And a deadline on a plain thread.
  char c;
  auto t0 = Now();
  absl::StatusOr<size_t> r = io::Read(p[0], &c, 1, In(absl::Milliseconds(50)));
  EXPECT_TRUE(absl::IsDeadlineExceeded(r.status())) << r.status();
  EXPECT_GE(Since(t0), absl::Milliseconds(50) - kClockSlack);
  EXPECT_LT(Since(t0), absl::Seconds(2));
  EXPECT_TRUE(io::Close(p[0]).ok());
  EXPECT_TRUE(io::Close(p[1]).ok());
}


// A plain thread that waits on I/O with no deadline while the runtime is idle:
// every M asleep in the idle list, sysmon asleep until a P has work, no timer.
// Unlike a goroutine, the thread leaves no M behind that looks for work (and
// polls) once it parks, so it must get one into epoll_wait itself. Another
// plain thread writes 100 ms later. Fails (the watchdog, or the check after
// 10 s) if nobody polls: the byte waits in the pipe for ever. In the second
// child the Read is the first goro call of the process (an accept loop on
// main()): it starts the runtime, and no M exists yet.
[[noreturn]] void PlainThreadReadNoDeadlineChild(bool start_first) {
  goro_test::Watchdog dog(absl::Seconds(30), "a plain thread's Read without a deadline");
  if (start_first) {
    goro_test::StartRuntime();
    CHILD_CHECK(goro_test::Eventually([] { return goro::internal::sched.sysmon_deep.load(); }),
                "sysmon never went to sleep for good: the runtime is not idle");
  }
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) _exit(3);
  std::atomic<bool> returned{false};
  absl::StatusOr<size_t> r = absl::UnknownError("not run");
  char c = 0;
  std::thread reader([&] {
    r = io::Read(p[0], &c, 1);  // no deadline: no timer
    returned = true;
  });
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    CHILD_CHECK(write(p[1], "x", 1) == 1, "write: %s", strerror(errno));
  });
  writer.join();
  if (!goro_test::Eventually([&] { return returned.load(); }, absl::Seconds(10))) {
    fprintf(stderr, "io::Read on a plain thread was not woken 10 s after the data came\n");
    _exit(1);  // the reader is stuck in Read: do not join it
  }
  reader.join();
  CHILD_CHECK(r.ok() && *r == 1 && c == 'x', "Read: %s", r.status().ToString().c_str());
  _exit(goro_test::child_failures.load() == 0 ? 0 : 1);
}

TEST(IoChildTest, PlainThreadReadWithoutDeadlineWakesOnAnIdleRuntime) {
  EXPECT_EXIT(PlainThreadReadNoDeadlineChild(/*start_first=*/true), ::testing::ExitedWithCode(0), "");
}

TEST(IoChildTest, PlainThreadReadWithoutDeadlineStartsTheRuntime) {
  EXPECT_EXIT(PlainThreadReadNoDeadlineChild(/*start_first=*/false), ::testing::ExitedWithCode(0), "");
}

// Makes std_fd (STDIN_FILENO or STDOUT_FILENO) its end of a new pipe, which
// is blocking, as a shell's pipe is; returns the other end. In a child: exits
// with status 3 if it cannot.
int PipeOnStdStream(int std_fd) {
  int p[2];
  const int mine = std_fd == STDIN_FILENO ? 0 : 1;
  if (pipe(p) != 0 || dup2(p[mine], std_fd) != std_fd) _exit(3);
  close(p[mine]);
  return p[1 - mine];
}

// A blocking standard stream (here stdin, a pipe; often the shell's
// terminal) is shared with other processes. Fails if goro::io leaves it
// O_NONBLOCK (the next program of the shell then fails to read it with
// EAGAIN), or if deadlines stop working on it: it is waited on with poll(2)
// in a marked region instead of the poller.
[[noreturn]] void BlockingStdinChild() {
  goro_test::Watchdog dog(absl::Seconds(30), "io on a blocking stdin");
  const int writer_end = PipeOnStdStream(STDIN_FILENO);
  goro_test::RunBounded([&] {
    char c = 0;
    absl::Time t0 = absl::Now();
    absl::StatusOr<size_t> r = io::Read(STDIN_FILENO, &c, 1, In(absl::Milliseconds(50)));
    CHILD_CHECK(absl::IsDeadlineExceeded(r.status()), "Read of an empty stdin: %s", r.status().ToString().c_str());
    CHILD_CHECK(absl::Now() - t0 >= absl::Milliseconds(50) - kClockSlack, "the deadline fired early");
    absl::Status w = io::WaitReadable(STDIN_FILENO, In(absl::Milliseconds(20)));
    CHILD_CHECK(absl::IsDeadlineExceeded(w), "WaitReadable of an empty stdin: %s", w.ToString().c_str());
    goro::Go([&] {
      goro::SleepFor(absl::Milliseconds(30));
      CHILD_CHECK(write(writer_end, "x", 1) == 1, "write: %s", strerror(errno));
    });
    r = io::Read(STDIN_FILENO, &c, 1);  // no deadline: blocks in read(2), its P handed off
    CHILD_CHECK(r.ok() && *r == 1 && c == 'x', "Read of stdin: %s", r.status().ToString().c_str());
  });
  int flags = fcntl(STDIN_FILENO, F_GETFL);
  CHILD_CHECK(flags >= 0 && (flags & O_NONBLOCK) == 0, "stdin was left O_NONBLOCK (flags %#x)", flags);
  _exit(goro_test::child_failures.load() == 0 ? 0 : 1);
}

TEST(IoChildTest, BlockingStdinStaysBlockingAndKeepsItsDeadlines) {
  EXPECT_EXIT(BlockingStdinChild(), ::testing::ExitedWithCode(0), "");
}

// A write with a deadline to a blocking standard stream nobody reads (here
// stdout, a pipe). Fails if the write, once poll(2) has said "room", tries
// to write all that is left in one write(2): that blocks until it all fits,
// here for ever (the watchdog), past the deadline.
[[noreturn]] void BlockingStdoutWriteDeadlineChild() {
  goro_test::Watchdog dog(absl::Seconds(30), "a write with a deadline to a blocking stdout nobody reads");
  PipeOnStdStream(STDOUT_FILENO);  // its reader end stays open, unread
  goro_test::RunBounded([&] {
    std::string big(1 << 20, 'x');
    absl::Time t0 = absl::Now();
    absl::StatusOr<size_t> r = io::Write(STDOUT_FILENO, big.data(), big.size(), In(absl::Milliseconds(100)));
    CHILD_CHECK(absl::IsDeadlineExceeded(r.status()), "Write to a full stdout: %s", r.status().ToString().c_str());
    CHILD_CHECK(absl::Now() - t0 < absl::Seconds(10), "the write took %s",
                absl::FormatDuration(absl::Now() - t0).c_str());
  });
  _exit(goro_test::child_failures.load() == 0 ? 0 : 1);
}

TEST(IoChildTest, WriteDeadlineOnABlockingStdoutIsKept) {
  EXPECT_EXIT(BlockingStdoutWriteDeadlineChild(), ::testing::ExitedWithCode(0), "");
}

// Two goroutines Write 256 KiB each to a blocking stdout (a pipe) whose
// reader starts 100 ms later, so that both find it full. Fails if their
// bytes interleave: Writes to a stream the poller does not watch take turns
// too, as Go's os.File's do. Without a deadline each blocks in one write(2),
// which the pipe takes piecewise as it drains, from either writer in turn;
// with one, each writes PIPE_BUF bytes after each poll(2), and the chunks
// alternate.
[[noreturn]] void ConcurrentStdoutWritesChild(bool with_deadline) {
  goro_test::Watchdog dog(absl::Seconds(30), "concurrent Writes to a blocking stdout");
  const int reader_end = PipeOnStdStream(STDOUT_FILENO);
  constexpr size_t kEach = 256 << 10;
  std::string got;
  std::thread reader([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    char buf[8192];
    for (;;) {
      ssize_t r = read(reader_end, buf, sizeof buf);
      if (r <= 0) break;
      got.append(buf, r);
    }
  });
  goro_test::RunBounded([&] {
    goro::WaitGroup wg;
    wg.Add(2);
    for (char c : {'a', 'b'}) {
      goro::Go([&, c] {
        std::string data(kEach, c);
        absl::StatusOr<size_t> w = io::Write(STDOUT_FILENO, data.data(), data.size(),
                                             with_deadline ? In(absl::Seconds(20)) : absl::InfiniteFuture());
        CHILD_CHECK(w.ok() && *w == kEach, "Write of '%c's: %s", c, w.status().ToString().c_str());
        wg.Done();
      });
    }
    wg.Wait();
  });
  const int flags = fcntl(STDOUT_FILENO, F_GETFL);
  CHILD_CHECK(flags >= 0 && (flags & O_NONBLOCK) == 0, "stdout was polled, not a blocking stream (flags %#x)", flags);
  close(STDOUT_FILENO);  // the reader's end of file
  reader.join();
  CHILD_CHECK(got.size() == 2 * kEach, "read %zu bytes of %zu", got.size(), 2 * kEach);
  size_t runs = got.empty() ? 0 : 1;
  for (size_t i = 1; i < got.size(); ++i) runs += got[i] != got[i - 1];
  CHILD_CHECK(runs == 2, "the two Writes' bytes came in %zu runs, not 2: interleaved", runs);
  _exit(goro_test::child_failures.load() == 0 ? 0 : 1);
}

TEST(IoChildTest, ConcurrentWritesToABlockingStdoutDoNotInterleave) {
  EXPECT_EXIT(ConcurrentStdoutWritesChild(/*with_deadline=*/false), ::testing::ExitedWithCode(0), "");
}

TEST(IoChildTest, ConcurrentWritesWithDeadlinesToABlockingStdoutDoNotInterleave) {
  EXPECT_EXIT(ConcurrentStdoutWritesChild(/*with_deadline=*/true), ::testing::ExitedWithCode(0), "");
}

// Two goroutines Write 256 KiB each with a 300 ms deadline to a blocking
// stdout (a pipe) that nobody reads: both must fail with DeadlineExceeded
// at about their deadline. Fails (a Write still under way 10 s later, freed
// then by draining the pipe) if they poll(2) side by side: both find room
// for PIPE_BUF bytes, one takes it, and the other's write(2) blocks until
// the pipe is read.
[[noreturn]] void ConcurrentStdoutWriteDeadlinesChild() {
  goro_test::Watchdog dog(absl::Seconds(40), "concurrent Writes with deadlines to a blocking stdout nobody reads");
  const int reader_end = PipeOnStdStream(STDOUT_FILENO);
  goro_test::RunBounded([&] {
    std::atomic<int> returned{0};
    absl::Status status[2];
    absl::Duration took[2];
    goro::WaitGroup wg;
    wg.Add(2);
    const absl::Time t0 = absl::Now();
    for (int i = 0; i < 2; ++i) {
      goro::Go([&, i] {
        std::string data(256 << 10, static_cast<char>('a' + i));
        status[i] = io::Write(STDOUT_FILENO, data.data(), data.size(), t0 + absl::Milliseconds(300)).status();
        took[i] = absl::Now() - t0;
        returned.fetch_add(1);
        wg.Done();
      });
    }
    if (!goro_test::Eventually([&] { return returned.load() == 2; }, absl::Seconds(10))) {
      CHILD_CHECK(false, "a Write with a 300 ms deadline was still under way 10 s later");
      std::thread([fd = reader_end] {  // free it
        char buf[8192];
        while (read(fd, buf, sizeof buf) > 0) {
        }
      }).detach();
    }
    wg.Wait();
    for (int i = 0; i < 2; ++i) {
      CHILD_CHECK(absl::IsDeadlineExceeded(status[i]), "Write %d: %s", i, status[i].ToString().c_str());
      CHILD_CHECK(took[i] < absl::Seconds(5), "Write %d took %s", i, absl::FormatDuration(took[i]).c_str());
    }
  });
  const int flags = fcntl(STDOUT_FILENO, F_GETFL);
  CHILD_CHECK(flags >= 0 && (flags & O_NONBLOCK) == 0, "stdout was polled, not a blocking stream (flags %#x)", flags);
  _exit(goro_test::child_failures.load() == 0 ? 0 : 1);
}

TEST(IoChildTest, ConcurrentWritesToABlockingStdoutNobodyReadsKeepTheirDeadlines) {
  EXPECT_EXIT(ConcurrentStdoutWriteDeadlinesChild(), ::testing::ExitedWithCode(0), "");
}

// Two goroutines Read a blocking stdin (a pipe) with a 300 ms deadline; one
// byte comes 50 ms in, then nothing. One Read gets it, and the other must
// fail with DeadlineExceeded at its deadline. Fails (a Read still under way
// 10 s later, freed then by a second byte) if they poll(2) side by side:
// both wake for the one byte, and the one whose read(2) finds the pipe
// empty again blocks there.
[[noreturn]] void ConcurrentStdinReadDeadlinesChild() {
  goro_test::Watchdog dog(absl::Seconds(40), "concurrent Reads with deadlines of a blocking stdin");
  const int writer_end = PipeOnStdStream(STDIN_FILENO);
  goro_test::RunBounded([&] {
    std::atomic<int> returned{0};
    absl::StatusOr<size_t> result[2] = {absl::UnknownError("not run"), absl::UnknownError("not run")};
    char got[2] = {0, 0};
    absl::Duration took[2];
    goro::WaitGroup wg;
    wg.Add(2);
    const absl::Time t0 = absl::Now();
    for (int i = 0; i < 2; ++i) {
      goro::Go([&, i] {
        result[i] = io::Read(STDIN_FILENO, &got[i], 1, t0 + absl::Milliseconds(300));
        took[i] = absl::Now() - t0;
        returned.fetch_add(1);
        wg.Done();
      });
    }
    goro::SleepFor(absl::Milliseconds(50));
    CHILD_CHECK(write(writer_end, "x", 1) == 1, "write: %s", strerror(errno));
    if (!goro_test::Eventually([&] { return returned.load() == 2; }, absl::Seconds(10))) {
      CHILD_CHECK(false, "a Read with a 300 ms deadline was still under way 10 s later");
      CHILD_CHECK(write(writer_end, "y", 1) == 1, "write: %s", strerror(errno));  // free it
    }
    wg.Wait();
    int got_x = 0, timed_out = 0;
    for (int i = 0; i < 2; ++i) {
      got_x += result[i].ok() && *result[i] == 1 && got[i] == 'x';
      timed_out += absl::IsDeadlineExceeded(result[i].status()) && took[i] < absl::Seconds(5);
    }
    CHILD_CHECK(got_x == 1 && timed_out == 1, "Reads: %s after %s, %s after %s", result[0].status().ToString().c_str(),
                absl::FormatDuration(took[0]).c_str(), result[1].status().ToString().c_str(),
                absl::FormatDuration(took[1]).c_str());
  });
  const int flags = fcntl(STDIN_FILENO, F_GETFL);
  CHILD_CHECK(flags >= 0 && (flags & O_NONBLOCK) == 0, "stdin was polled, not a blocking stream (flags %#x)", flags);
  _exit(goro_test::child_failures.load() == 0 ? 0 : 1);
}

TEST(IoChildTest, ConcurrentReadsOfABlockingStdinKeepTheirDeadlines) {
  EXPECT_EXIT(ConcurrentStdinReadDeadlinesChild(), ::testing::ExitedWithCode(0), "");
}

// Only the files a standard stream held when the runtime started are left
// blocking. A socket the program creates after closing stdin gets number 0,
// and is the program's own: polled, so io::Close wakes a goroutine reading it.
// Fails (the reader still blocked 10 s later) if it is taken for the
// inherited stdin and read in a blocking region, which io::Close cannot wake.
[[noreturn]] void ProgramsOwnSocketOnFdZeroChild() {
  goro_test::Watchdog dog(absl::Seconds(30), "io::Close of the program's own socket on fd 0");
  goro_test::StartRuntime();  // stdin is still the inherited one here
  close(STDIN_FILENO);
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0 || sv[0] != STDIN_FILENO) _exit(3);
  static std::atomic<bool> returned{false};
  static absl::StatusOr<size_t> r = absl::UnknownError("not run");
  goro::Go([] {
    char c;
    r = io::Read(STDIN_FILENO, &c, 1);
    returned = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // it parks on the empty socket
  CHILD_CHECK(io::Close(STDIN_FILENO).ok(), "io::Close of fd 0");
  if (!goro_test::Eventually([] { return returned.load(); }, absl::Seconds(10))) {
    fprintf(stderr, "the reader of fd 0 was not woken 10 s after io::Close\n");
    _exit(1);
  }
  CHILD_CHECK(absl::IsCancelled(r.status()), "Read of the closed socket: %s", r.status().ToString().c_str());
  close(sv[1]);
  _exit(goro_test::child_failures.load() == 0 ? 0 : 1);
}

TEST(IoChildTest, TheProgramsOwnSocketOnFdZeroIsPolled) {
  EXPECT_EXIT(ProgramsOwnSocketOnFdZeroChild(), ::testing::ExitedWithCode(0), "");
}

// A turn belongs to the file, not to the number. A goroutine reading a
// blocking stdin with no deadline sits in read(2), holding fd 0's read
// turn, and io::Close(0) cannot wake it (io.h); the socket made next gets
// number 0, and its Read must not queue behind that reader, which returns
// only when someone writes to the old pipe. Fails (the new socket's Read
// times out with its data queued) if the closed file's turn outlives it.
[[noreturn]] void ClosedStdinsTurnChild() {
  goro_test::Watchdog dog(absl::Seconds(30), "a Read of a new file on the number of a closed, blocked stdin");
  const int writer_end = PipeOnStdStream(STDIN_FILENO);
  static std::atomic<bool> old_returned{false};
  goro_test::RunBounded([&] {
    goro::WaitGroup old_reader;
    old_reader.Add(1);
    goro::Go([&] {
      char c;
      (void)io::Read(STDIN_FILENO, &c, 1);  // in read(2) until the pipe is written to
      old_returned = true;
      old_reader.Done();
    });
    goro::SleepFor(absl::Milliseconds(100));  // it is in read(2) by now
    CHILD_CHECK(io::Close(STDIN_FILENO).ok(), "io::Close of stdin");
    int sv[2];
    CHILD_CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) == 0 && sv[0] == STDIN_FILENO,
                "the new socket did not get fd 0");
    CHILD_CHECK(write(sv[1], "hi", 2) == 2, "write: %s", strerror(errno));
    char buf[4];
    absl::StatusOr<size_t> r = io::Read(STDIN_FILENO, buf, sizeof buf, In(absl::Seconds(2)));
    CHILD_CHECK(r.ok() && *r == 2, "Read of the new socket on fd 0: %s", r.status().ToString().c_str());
    CHILD_CHECK(!old_returned.load(), "the old reader returned: the test proved nothing");
    CHILD_CHECK(write(writer_end, "x", 1) == 1, "write: %s", strerror(errno));  // lets the old reader out
    old_reader.Wait();
    // Its late release must leave the new file's turn alone.
    r = io::Read(STDIN_FILENO, buf, sizeof buf, In(absl::Milliseconds(50)));
    CHILD_CHECK(absl::IsDeadlineExceeded(r.status()), "Read of the empty socket: %s", r.status().ToString().c_str());
    CHILD_CHECK(write(sv[1], "yo", 2) == 2, "write: %s", strerror(errno));
    r = io::Read(STDIN_FILENO, buf, sizeof buf, In(absl::Seconds(2)));
    CHILD_CHECK(r.ok() && *r == 2, "second Read of the new socket: %s", r.status().ToString().c_str());
  });
  _exit(goro_test::child_failures.load() == 0 ? 0 : 1);
}

TEST(IoChildTest, ANewFileOnTheNumberOfAClosedBlockedStdinHasItsOwnTurns) {
  if (goro_test::kTsanBuild) {
    GTEST_SKIP() << "ThreadSanitizer build: TSan reports the close(2) of a file that another thread is reading as "
                    "a race, which is what this test does on purpose (io.h: io::Close cannot wake that reader)";
  }
  EXPECT_EXIT(ClosedStdinsTurnChild(), ::testing::ExitedWithCode(0), "");
}

// A goroutine wired with LockOSThread that waits on I/O with no deadline,
// while the other P is idle. Its M does not go looking for work (and poll)
// as other Ms do: it hands its P off and sleeps until the goroutine is
// ready. Fails (no wake-up 10 s after the data came) if nobody then polls:
// the P goes to the idle list, sysmon to its deep sleep.
[[noreturn]] void LockedGoroutineReadNoDeadlineChild() {
  goro_test::Watchdog dog(absl::Seconds(30), "a wired goroutine's Read without a deadline");
  static int p[2];
  static std::atomic<bool> returned{false};
  static absl::StatusOr<size_t> r = absl::UnknownError("not run");
  static char c = 0;
  if (pipe2(p, O_CLOEXEC) != 0) _exit(3);
  std::thread runner([] {
    goro::Run(
        [] {
          goro::LockOSThread();
          r = io::Read(p[0], &c, 1);  // no deadline: no timer
          returned = true;
          goro::UnlockOSThread();
        },
        goro_test::TestOptions());
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHILD_CHECK(write(p[1], "x", 1) == 1, "write: %s", strerror(errno));
  if (!goro_test::Eventually([] { return returned.load(); }, absl::Seconds(10))) {
    fprintf(stderr, "io::Read on a wired goroutine was not woken 10 s after the data came\n");
    _exit(1);  // the goroutine is stuck in Read: do not join its thread
  }
  runner.join();
  CHILD_CHECK(r.ok() && *r == 1 && c == 'x', "Read: %s", r.status().ToString().c_str());
  _exit(goro_test::child_failures.load() == 0 ? 0 : 1);
}

TEST(IoChildTest, LockedGoroutineReadWithoutDeadlineWakes) {
  EXPECT_EXIT(LockedGoroutineReadNoDeadlineChild(), ::testing::ExitedWithCode(0), "");
}

}  // namespace
