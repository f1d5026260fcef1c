// Blocking system calls: marked regions (goro::Syscall / SyscallScope) and
// unmarked ones (a plain read() on a goroutine) must not hold a P hostage,
// must never see EINTR caused by the runtime, and must give the goroutine
// back intact afterwards.
//
// Tests that need their own Options (one P, a 200 us slice) run in a child
// process (EXPECT_EXIT), since Options are read once per process. A child
// reports every failed check on stderr and exits non-zero; its own watchdog
// turns a hang into a failure. The others run on the test runtime (2 Ps).
// Each test says what would make it fail.
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <link.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <array>
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/runtime.h"
#include "goro/goro.h"
#include "gtest/gtest.h"
#include "test_util.h"

namespace {

using goro_test::Now;
using goro_test::Since;

// ---------------------------------------------------------------------------
// Helpers for child processes.

using goro_test::child_failures;
using goro_test::U;

using goro_test::PrintStats;

[[noreturn]] void ExitChild() {
  PrintStats("at exit");
  fflush(stderr);
  _exit(child_failures.load() == 0 ? 0 : 1);
}

goro::Options Opts(int procs, absl::Duration slice) {
  goro::Options opts;
  opts.max_procs = procs;
  opts.time_slice = slice;
  return opts;
}

#define EXPECT_CHILD_OK(call) EXPECT_EXIT(call, ::testing::ExitedWithCode(0), "")

// Sleeps `d` in the kernel with nanosleep(2); returns 0 or the errno.
int NanosleepErr(absl::Duration d) {
  timespec ts = absl::ToTimespec(d);
  return nanosleep(&ts, nullptr) == 0 ? 0 : errno;
}

// poll(2) on `fd` (an empty pipe) for `ms`: returns 0 on a timeout, the errno
// on failure, or -1 if poll reported the empty pipe ready.
int PollErr(int fd, int ms) {
  pollfd p{fd, POLLIN, 0};
  int r = poll(&p, 1, ms);
  if (r < 0) return errno;
  return r == 0 ? 0 : -1;
}

// epoll_wait(2) likewise.
int EpollErr(int epfd, int ms) {
  epoll_event ev;
  int r = epoll_wait(epfd, &ev, 1, ms);
  if (r < 0) return errno;
  return r == 0 ? 0 : -1;
}

// ---------------------------------------------------------------------------
// A goroutine blocked in the kernel on one P does not stop the others.
//
// On one P, main (the reader) spawns a counting goroutine and then blocks in
// read() on an empty pipe, marked or not. A plain thread samples the counter
// twice, 100 ms apart, while the reader is still blocked, and only then is
// the pipe written.
//
// Fails without the P hand-off: the reader's M keeps the only P while it
// sleeps in the kernel, the counter never runs (both samples equal), and
// GetStats().handoffs does not move. For the unmarked read this is the
// detection of a thread asleep in the kernel (sysmon's CPU-time sampling and
// P revocation); without it the unmarked test fails the same way. The checks
// after the read fail if the goroutine does not get a P back properly (a
// crash, a hang caught by the watchdog, a corrupted stack or goroutine id, or
// channel values lost or duplicated).

// A goroutine that counts until `stop`, with a safe point every 1024 counts;
// wg.Done() when it stops (the caller has added it).
void StartCounter(goro::WaitGroup& wg, std::atomic<bool>& stop, std::atomic<uint64_t>& counter) {
  goro::Go([&wg, &stop, &counter] {
    uint64_t n = 0;
    while (!stop.load(std::memory_order_relaxed)) {
      counter.fetch_add(1, std::memory_order_relaxed);
      if (++n % 1024 == 0) goro::Checkpoint();
    }
    wg.Done();
  });
}

[[noreturn]] void BlockedReaderChild(bool marked) {
  goro_test::Watchdog dog(absl::Seconds(25), marked ? "marked read on one P" : "unmarked read on one P");
  static std::atomic<uint64_t> counter{0};
  static std::atomic<bool> stop{false};
  static std::atomic<bool> reader_blocking{false};
  static std::atomic<bool> reader_done{false};
  static std::atomic<bool> sampled{false};
  static int fds[2];
  CHILD_CHECK(pipe2(fds, O_CLOEXEC) == 0, "pipe2: %s", strerror(errno));
  static const char kMsg[] = "through the pipe";

  // The sampler: a plain thread, so that it needs no P. For the unmarked
  // read it also writes the pipe; for the marked one a goroutine does, which
  // itself can run only if the P was handed off.
  std::thread sampler([marked] {
    auto start = Now();
    while (!reader_blocking.load() && Since(start) < absl::Seconds(10)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    CHILD_CHECK(reader_blocking.load(), "the reader never started");
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    uint64_t c1 = counter.load();
    // The counter must move while the reader blocks; how soon depends on the
    // machine (two copies of this binary at once once kept it still for a
    // fixed 100 ms window), so wait for it, up to 10 s. The reader blocks
    // until this thread is done.
    auto t1 = Now();
    goro_test::Eventually([c1] { return counter.load() > c1; }, absl::Seconds(10));
    uint64_t c2 = counter.load();
    bool still_blocked = !reader_done.load();
    fprintf(stderr, "counter while the reader blocks: %llu then %llu (%s later)\n", U(c1), U(c2),
            absl::FormatDuration(Since(t1)).c_str());
    CHILD_CHECK(still_blocked, "the reader returned before the pipe was written");
    CHILD_CHECK(c2 > c1, "the counting goroutine did not run while the reader blocked (%llu -> %llu)",
                U(c1), U(c2));
    sampled = true;
    if (!marked) {
      CHILD_CHECK(write(fds[1], kMsg, sizeof kMsg) == static_cast<ssize_t>(sizeof kMsg), "write: %s",
                  strerror(errno));
    }
  });

  goro::Run(
      [marked] {
        goro::WaitGroup wg;
        wg.Add(1);
        StartCounter(wg, stop, counter);
        if (marked) {
          wg.Add(1);
          goro::Go([&wg] {
            // Polls with goro::SleepFor: runs only on a P.
            goro_test::Eventually([] { return sampled.load(); }, absl::Seconds(15));
            CHILD_CHECK(write(fds[1], kMsg, sizeof kMsg) == static_cast<ssize_t>(sizeof kMsg), "write: %s",
                        strerror(errno));
            wg.Done();
          });
        }
        // Things that must survive the block: the stack, the goroutine id.
        std::array<uint64_t, 64> canary;
        for (size_t i = 0; i < canary.size(); ++i) canary[i] = 0x9e3779b97f4a7c15ull * (i + 1);
        const int64_t id = goro::GoroutineId();
        const uint64_t handoffs0 = goro::GetStats().handoffs;

        char buf[64] = {};
        reader_blocking = true;
        ssize_t r;
        if (marked) {
          r = goro::Syscall([&] { return read(fds[0], buf, sizeof buf); });
        } else {
          r = read(fds[0], buf, sizeof buf);  // deliberately unmarked
        }
        int err = errno;
        reader_done = true;
        CHILD_CHECK(r == static_cast<ssize_t>(sizeof kMsg), "read returned %zd (errno %d)", r, err);
        CHILD_CHECK(r > 0 && memcmp(buf, kMsg, sizeof kMsg) == 0, "read returned the wrong bytes");
        CHILD_CHECK(sampled.load(), "the read returned before the sampler was done");

        // Plain user code first (the goroutine may be running without a P
        // until its next runtime entry), then the runtime.
        uint64_t sum = 0;
        for (size_t i = 0; i < canary.size(); ++i) sum += canary[i] ^ (0x9e3779b97f4a7c15ull * (i + 1));
        CHILD_CHECK(sum == 0, "the reader's stack changed while it blocked");
        CHILD_CHECK(goro::GoroutineId() == id, "goroutine id %lld became %lld", static_cast<long long>(id),
                    static_cast<long long>(goro::GoroutineId()));

        const uint64_t handoffs1 = goro::GetStats().handoffs;
        CHILD_CHECK(handoffs1 > handoffs0, "GetStats().handoffs did not increase (%llu)", U(handoffs1));

        // Channels: a ping-pong with a fresh goroutine, every value once.
        goro::Chan<int> ping, pong;
        wg.Add(1);
        goro::Go([&] {
          for (;;) {
            std::optional<int> v = ping.Recv();
            if (!v) break;
            pong.Send(*v * 2 + 1);
          }
          wg.Done();
        });
        bool chan_ok = true;
        for (int i = 0; i < 2000; ++i) {
          ping.Send(i);
          std::optional<int> v = pong.Recv();
          if (!v || *v != i * 2 + 1) chan_ok = false;
        }
        ping.Close();
        CHILD_CHECK(chan_ok, "channel values were lost or changed after the block");

        // Sleeping, a Mutex shared with other goroutines, Yield.
        auto t0 = Now();
        goro::SleepFor(absl::Milliseconds(20));
        CHILD_CHECK(Since(t0) >= absl::Milliseconds(19), "SleepFor(20ms) returned after %s",
                    absl::FormatDuration(Since(t0)).c_str());
        goro::Mutex mu;
        int64_t shared = 0;
        goro::WaitGroup adders;
        adders.Add(4);
        for (int g = 0; g < 4; ++g) {
          goro::Go([&] {
            for (int i = 0; i < 1000; ++i) {
              std::lock_guard<goro::Mutex> l(mu);
              ++shared;
              if (i % 100 == 0) goro::Yield();
            }
            adders.Done();
          });
        }
        adders.Wait();
        CHILD_CHECK(shared == 4000, "mutex-protected counter is %lld, not 4000", static_cast<long long>(shared));
        CHILD_CHECK(goro::GoroutineId() == id, "goroutine id changed after goro calls");
        sum = 0;
        for (size_t i = 0; i < canary.size(); ++i) sum += canary[i] ^ (0x9e3779b97f4a7c15ull * (i + 1));
        CHILD_CHECK(sum == 0, "the reader's stack changed after goro calls");

        stop = true;
        wg.Wait();
      },
      Opts(1, absl::Milliseconds(10)));
  sampler.join();
  ExitChild();
}

TEST(SyscallTest, MarkedBlockingReadOnOneProcLetsOthersRun) { EXPECT_CHILD_OK(BlockedReaderChild(true)); }

TEST(SyscallTest, UnmarkedBlockingReadOnOneProcLetsOthersRun) { EXPECT_CHILD_OK(BlockedReaderChild(false)); }

// ---------------------------------------------------------------------------
// A timer on a P whose M blocks fires on time.
//
// On one P, each round the main goroutine starts a blocker and sleeps 1 ms
// with goro::SleepFor. The blocker runs as soon as main parks and blocks in
// poll() on an empty pipe (marked or not, for at most 300 ms): the sleep's
// timer is on the only P, whose M is now blocked with it and no other P is
// idle. Once awake, main writes the pipe, which ends the block, and waits for
// the blocker before the next round. The first round only warms up (it
// starts the extra M); the median of the other rounds is checked.
//
// Fails without sysmon counting a due timer as work on a P whose M blocks:
// the M that sleeps until the next timer wakes on time but finds no idle P,
// and the P stays with the blocked M until the 10 ms idle hand-off (marked)
// or revocation (unmarked), so every sleep takes 10 ms or more (measured:
// medians of 11.3-11.4 ms marked, 10.3-10.4 ms unmarked). With it sysmon
// hands the P on when the timer is due: medians of about 1.4 ms marked and
// 1.7 ms unmarked, at most 2.6 ms with a second copy of this binary running,
// 1.7 ms beside two busy loops on the 2 CPUs. The bound, 5 ms, is far from
// both.
[[noreturn]] void TimerBesideBlockedCallChild(bool marked) {
  goro_test::Watchdog dog(absl::Seconds(25),
                          marked ? "a timer beside a marked poll on one P" : "a timer beside an unmarked poll on one P");
  constexpr int kRounds = 16;  // the first one warms up
  static int fds[2];
  CHILD_CHECK(pipe2(fds, O_CLOEXEC) == 0, "pipe2: %s", strerror(errno));
  goro::Run(
      [marked] {
        goro::SleepFor(absl::Milliseconds(50));  // let sysmon settle in
        std::vector<double> slept_ms;
        int unended = 0;  // blocks that did not last until main's write
        for (int round = 0; round < kRounds; ++round) {
          goro::WaitGroup wg;
          std::atomic<int> polled{-2};
          wg.Add(1);
          goro::Go([marked, &polled, &wg] {
            auto wait = [] {
              pollfd p{fds[0], POLLIN, 0};
              int r;
              do r = poll(&p, 1, 300); while (r < 0 && errno == EINTR);
              return r;
            };
            // A slice of its own: a goroutine started by Go inherits the rest
            // of its creator's, and once a slice has lasted 10 ms sysmon
            // revokes the P of an M that blocks in it, timers or not.
            goro::Yield();
            int r = marked ? goro::Syscall(wait) : wait();  // deliberately unmarked if !marked
            char c;
            if (r == 1) CHILD_CHECK(read(fds[0], &c, 1) == 1, "read: %s", strerror(errno));
            polled = r;
            wg.Done();
          });
          auto t0 = Now();
          goro::SleepFor(absl::Milliseconds(1));  // the blocker runs now
          absl::Duration slept = Since(t0);
          char c = 'x';
          CHILD_CHECK(write(fds[1], &c, 1) == 1, "write: %s", strerror(errno));
          wg.Wait();
          if (polled.load() != 1) {
            ++unended;
            // A block that timed out leaves the byte behind: drain it.
            pollfd p{fds[0], POLLIN, 0};
            if (poll(&p, 1, 0) == 1) CHILD_CHECK(read(fds[0], &c, 1) == 1, "read: %s", strerror(errno));
          }
          if (round > 0) slept_ms.push_back(absl::ToDoubleMilliseconds(slept));
        }
        std::vector<double> sorted = slept_ms;
        std::sort(sorted.begin(), sorted.end());
        const double median = sorted[sorted.size() / 2];
        int late = 0;
        std::string all;
        for (double ms : slept_ms) {
          late += ms >= 9.0;
          absl::StrAppend(&all, " ", absl::StrFormat("%.2f", ms));
        }
        fprintf(stderr, "1 ms sleeps beside a %s poll on 1 P (ms):%s\nmedian %.2f ms, %d of %zu took 9 ms or more\n",
                marked ? "marked" : "unmarked", all.c_str(), median, late, slept_ms.size());
        CHILD_CHECK(unended == 0, "%d blocks ended before main's write (poll timed out or failed)", unended);
        CHILD_CHECK(median < 5.0,
                    "the median 1 ms sleep took %.2f ms: a timer on a P whose M blocks waited for the "
                    "10 ms hand-off",
                    median);
      },
      Opts(1, absl::Milliseconds(10)));
  ExitChild();
}

TEST(SyscallTest, TimerBesideAMarkedCallOnOneProcFiresOnTime) { EXPECT_CHILD_OK(TimerBesideBlockedCallChild(true)); }

TEST(SyscallTest, TimerBesideAnUnmarkedCallOnOneProcFiresOnTime) {
  EXPECT_CHILD_OK(TimerBesideBlockedCallChild(false));
}

// A goroutine whose P sysmon took while it blocked in an unmarked read, and
// whose first goro calls after it are made from a dl_iterate_phdr callback:
// goro's wrapper of dl_iterate_phdr raises preempt_off without checking the
// P (it must work in signal handlers), so the runtime entries inside must
// check it themselves. Fails without that (a reviewer's reproducer crashed
// in 4 of 6 runs, and once overflowed a run queue): the spawns in the
// callback use the P that another M now runs goroutines on.
[[noreturn]] void GoroCallsInADlIteratePhdrCallbackAfterARevokedReadChild() {
  goro_test::Watchdog dog(absl::Seconds(25), "goro calls in a dl_iterate_phdr callback after a revoked read");
  static int fds[2];
  static std::atomic<bool> other_running{false};
  static std::atomic<bool> stop{false};
  static std::atomic<int> ran{0};
  static goro::WaitGroup* spawned_wg = nullptr;
  constexpr int kWalks = 200, kPerCallback = 20;  // all alive until the walks end
  CHILD_CHECK(pipe2(fds, O_CLOEXEC) == 0, "pipe2: %s", strerror(errno));
  std::thread writer([] {
    goro_test::Eventually([] { return other_running.load(); }, absl::Seconds(10));
    std::this_thread::sleep_for(std::chrono::milliseconds(30));  // sysmon revokes the reader's P meanwhile
    char c = 'x';
    CHILD_CHECK(write(fds[1], &c, 1) == 1, "write: %s", strerror(errno));
  });
  static int callbacks = 0;
  goro::Run(
      [] {
        goro::WaitGroup wg, spawned;
        spawned_wg = &spawned;
        wg.Add(1);
        goro::Go([&wg] {  // runs on the reader's P once sysmon takes it
          other_running = true;
          while (!stop.load()) {
            goro::Go([] {});
            goro::Yield();
          }
          wg.Done();
        });
        const uint64_t handoffs0 = goro::GetStats().handoffs;
        char c;
        ssize_t r = read(fds[0], &c, 1);  // deliberately unmarked
        for (int k = 0; k < kWalks; ++k) {
          dl_iterate_phdr(
              [](dl_phdr_info*, size_t, void*) {
                ++callbacks;
                spawned_wg->Add(kPerCallback);
                for (int i = 0; i < kPerCallback; ++i) {
                  goro::Go([] {
                    ran.fetch_add(1);
                    spawned_wg->Done();
                  });
                }
                return 0;
              },
              nullptr);
        }
        spawned.Wait();
        // Only now: GetStats checks the P, and would get one before the walks.
        CHILD_CHECK(r == 1, "read: %s", strerror(errno));
        CHILD_CHECK(goro::GetStats().handoffs > handoffs0, "the P was not revoked during the read");
        stop = true;
        wg.Wait();
      },
      Opts(1, absl::Milliseconds(10)));
  writer.join();
  CHILD_CHECK(ran.load() == callbacks * kPerCallback, "%d of %d goroutines spawned in callbacks ran", ran.load(),
              callbacks * kPerCallback);
  ExitChild();
}

TEST(SyscallTest, GoroCallsInADlIteratePhdrCallbackAfterARevokedReadGetAPFirst) {
  if (goro_test::kTsanBuild) {
    GTEST_SKIP() << "ThreadSanitizer build: keeps over 100,000 goroutines alive at once; TSan allows 8128 fibers";
  }
  EXPECT_CHILD_OK(GoroCallsInADlIteratePhdrCallbackAfterARevokedReadChild());
}

// The median of `ms`, after printing them all under `what`.
double PrintAndMedian(const char* what, const std::vector<double>& ms) {
  std::string all;
  for (double x : ms) absl::StrAppend(&all, " ", absl::StrFormat("%.2f", x));
  std::vector<double> sorted = ms;
  std::sort(sorted.begin(), sorted.end());
  const double median = sorted[sorted.size() / 2];
  fprintf(stderr, "%s (ms):%s\nmedian %.2f ms\n", what, all.c_str(), median);
  return median;
}

// Voluntary context switches of the sysmon thread so far (-1 if not found):
// each is one of its sleeps.
long SysmonSleeps() {
  long n = -1;
  DIR* d = opendir("/proc/self/task");
  if (d == nullptr) return -1;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    std::string base = absl::StrCat("/proc/self/task/", e->d_name);
    char name[32] = {};
    FILE* f = fopen((base + "/comm").c_str(), "r");
    if (f == nullptr) continue;
    bool sysmon = fgets(name, sizeof name, f) != nullptr && strncmp(name, "goro-sysmon", 11) == 0;
    fclose(f);
    if (!sysmon || (f = fopen((base + "/status").c_str(), "r")) == nullptr) continue;
    char line[256];
    while (fgets(line, sizeof line, f) != nullptr) {
      if (strncmp(line, "voluntary_ctxt_switches:", 24) == 0) n = atol(line + 24);
    }
    fclose(f);
  }
  closedir(d);
  return n;
}

// On 2 Ps (10 ms slices, so sysmon looks every 1.25 ms while a P runs), a
// spinner runs while another goroutine waits for good in an unmarked read,
// whose P sysmon took. Sysmon keeps an eye on the read's thread, to signal
// it into the runtime once it runs again, but backs off while it sleeps on.
// Fails without the back-off: sysmon looked every 200 us, 2400-3100 times a
// second (890 with it; a reviewer counted 960 with no read at all).
[[noreturn]] void SysmonBacksOffFromARevokedSleeperChild() {
  goro_test::Watchdog dog(absl::Seconds(25), "sysmon beside a revoked read");
  static int fds[2];
  CHILD_CHECK(pipe2(fds, O_CLOEXEC) == 0, "pipe2: %s", strerror(errno));
  static long per_second = -1;
  goro::Run(
      [] {
        std::atomic<bool> stop{false};
        goro::WaitGroup wg;
        wg.Add(2);
        goro::Go([&] {
          while (!stop.load(std::memory_order_relaxed)) {
          }
          wg.Done();
        });
        goro::Go([&] {
          char c;
          CHILD_CHECK(read(fds[0], &c, 1) == 1, "read: %s", strerror(errno));  // deliberately unmarked
          wg.Done();
        });
        goro::SleepFor(absl::Milliseconds(300));  // revoked by now
        const uint64_t handoffs = goro::GetStats().handoffs;
        long before = SysmonSleeps();
        auto start = Now();
        goro::SleepFor(absl::Seconds(1));
        long after = SysmonSleeps();
        per_second = static_cast<long>((after - before) / absl::ToDoubleSeconds(Since(start)));
        CHILD_CHECK(before >= 0 && after >= 0, "no goro-sysmon thread in /proc/self/task");
        CHILD_CHECK(handoffs > 0, "the read's P was never taken: the test proved nothing");
        stop = true;
        char c = 'x';
        CHILD_CHECK(write(fds[1], &c, 1) == 1, "write: %s", strerror(errno));
        wg.Wait();
      },
      Opts(2, absl::Milliseconds(10)));
  fprintf(stderr, "sysmon slept %ld times a second\n", per_second);
  CHILD_CHECK(per_second < 1600, "sysmon woke %ld times a second beside a read that never returned", per_second);
  ExitChild();
}

TEST(SyscallTest, SysmonBacksOffFromARevokedGoroutineThatSleepsOn) {
  EXPECT_CHILD_OK(SysmonBacksOffFromARevokedSleeperChild());
}

// How the goroutines of SysmonSleepsBeside loop.
enum class Loop {
  kCheckpoint,  // keep each slice to its end
  kYield,  // switch constantly
  kYieldEvery400us,  // switch, but less often than every 100 us
};

// On 1 P with the default 10 ms slice: sysmon's sleeps over 175 ms beside
// `goroutines` goroutines that each loop until told to stop, as `loop` says,
// added to *sleeps, and the time to *seconds, the loops' turns to *turns.
void SysmonSleepsBeside(int goroutines, Loop loop, long* sleeps, double* seconds, uint64_t* turns) {
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> count{0};
  goro::WaitGroup wg;
  wg.Add(goroutines);
  for (int i = 0; i < goroutines; ++i) {
    goro::Go([&] {
      while (!stop.load(std::memory_order_relaxed)) {
        if (loop == Loop::kYieldEvery400us) {
          auto until = Now() + std::chrono::microseconds(400);
          while (Now() < until) goro::Checkpoint();
        }
        if (loop == Loop::kCheckpoint) {
          goro::Checkpoint();
        } else {
          goro::Yield();
        }
        count.fetch_add(1, std::memory_order_relaxed);
      }
      wg.Done();
    });
  }
  goro::SleepFor(absl::Milliseconds(30));  // let sysmon settle
  long before = SysmonSleeps();
  auto start = Now();
  goro::SleepFor(absl::Milliseconds(175));
  long after = SysmonSleeps();
  *seconds += absl::ToDoubleSeconds(Since(start));
  CHILD_CHECK(before >= 0 && after >= 0, "no goro-sysmon thread in /proc/self/task");
  stop = true;
  wg.Wait();
  *turns += count.load();
  *sleeps += after - before;
}

struct BackOffFigures {
  long keeping = 0, switching = 0, seldom = 0;  // sysmon's sleeps a second beside each
  uint64_t checkpoints = 0, yields = 0, seldom_yields = 0;
};

// Taken in turns, so that a neighbour's load falls on all three.
BackOffFigures MeasureBackOff() {
  BackOffFigures f;
  long sleeps[3] = {};
  double seconds[3] = {};
  for (int rep = 0; rep < 4; ++rep) {
    SysmonSleepsBeside(1, Loop::kCheckpoint, &sleeps[0], &seconds[0], &f.checkpoints);
    SysmonSleepsBeside(2, Loop::kYield, &sleeps[1], &seconds[1], &f.yields);
    SysmonSleepsBeside(2, Loop::kYieldEvery400us, &sleeps[2], &seconds[2], &f.seldom_yields);
  }
  f.keeping = static_cast<long>(sleeps[0] / seconds[0]);
  f.switching = static_cast<long>(sleeps[1] / seconds[1]);
  f.seldom = static_cast<long>(sleeps[2] / seconds[2]);
  return f;
}

bool ShowsBackOff(const BackOffFigures& f) {
  return f.yields > 10000 && f.seldom_yields > 500 && f.switching * 10 < f.keeping * 7 &&
         f.seldom * 2 >= f.keeping;
}

// Every look of sysmon's beside two goroutines yielding to each other finds
// a slice it has not seen, so there is nothing to time, and its looks back
// off from every 1.25 ms (slice/8) to every 5 ms (slice/2). Beside one
// goroutine that keeps its slices they stay at every 1.25 ms, and so they do
// beside two that yield every 400 us: new slices at every look, but too few
// to count as constant switching. Quiet: ~200 sleeps a second beside the
// constant yielders, ~770 beside the 400 us ones, ~870 beside the goroutine
// that keeps its slices (preemptions add looks). Busy (ASan, three tests on
// two CPUs; the three taken in turns share the load): 0.2-0.4 and 0.8 of
// that last figure, since a look that finds the yielders' thread kept off its
// CPU sees no switch and drops back.
//
// A machine so busy that the goroutines' thread is kept off its CPU for
// much of the time (TSan with a load average of 7 on two CPUs) drives the
// figures towards each other, so the measurement is taken up to three
// times and the test judges the last.
//
// Fails without the back-off (all ~800, in every attempt). Without the
// least rate of switching: ~200 beside the 400 us yielders too.
[[noreturn]] void SysmonBacksOffBesideConstantSwitchingChild() {
  goro_test::Watchdog dog(absl::Seconds(60), "sysmon beside two goroutines yielding to each other");
  constexpr int kAttempts = 3;
  static BackOffFigures figures[kAttempts];
  static int attempts = 0;
  goro::Run(
      [] {
        while (attempts < kAttempts) {
          figures[attempts] = MeasureBackOff();
          if (ShowsBackOff(figures[attempts++])) break;
        }
      },
      Opts(1, absl::Milliseconds(10)));
  for (int i = 0; i < attempts; ++i) {
    const BackOffFigures& f = figures[i];
    fprintf(stderr,
            "attempt %d: sysmon slept %ld times a second beside %llu checkpoints, %ld beside %llu yields, "
            "%ld beside %llu yields every 400 us\n",
            i + 1, f.keeping, U(f.checkpoints), f.switching, U(f.yields), f.seldom, U(f.seldom_yields));
  }
  const BackOffFigures& f = figures[attempts - 1];
  CHILD_CHECK(f.yields > 10000,
              "only %llu yields: the goroutines did not switch constantly; the test proved nothing", U(f.yields));
  CHILD_CHECK(f.seldom_yields > 500, "only %llu yields every 400 us: the test proved nothing", U(f.seldom_yields));
  CHILD_CHECK(f.switching * 10 < f.keeping * 7,
              "sysmon woke %ld times a second with nothing to time, %ld beside slices to time: no back-off",
              f.switching, f.keeping);
  CHILD_CHECK(f.seldom * 2 >= f.keeping,
              "sysmon woke %ld times a second beside a switch every 400 us, %ld beside slices to time: it backed "
              "off from goroutines that do not switch constantly",
              f.seldom, f.keeping);
  ExitChild();
}

TEST(SyscallTest, SysmonBacksOffBesideGoroutinesThatSwitchConstantly) {
  EXPECT_CHILD_OK(SysmonBacksOffBesideConstantSwitchingChild());
}

// The back-off must not lengthen slices: a slice sysmon first sees after a
// look it skipped is dated no later than where the skipped look would have
// been. On 1 P with a 40 ms slice sysmon looks every 5 ms (slice/8), and
// every 10 ms while two goroutines yield to each other; then the main
// goroutine stops them and runs Checkpoint() in a loop until one of them
// runs again. That first slice lasts 35-45 ms with the dating, 40-50 ms
// without it (dated at the look that found it). The rounds end the back-off
// at points 0.7 ms apart, sweeping sysmon's period, so the slices of about
// a third of them begin late in a 10 ms gap and are dated back: they end
// before 40 ms. Without the dating no slice can end before 40 ms, and a busy
// machine only delays sysmon, so the test checks for slices under 39 ms.
// (Whether the late side stays within 45 ms is a timing matter for a quiet
// machine: 4-6 of 15 rounds over 46.5 ms without the dating, none with it;
// under TSan with three tests on two CPUs sysmon's wake-ups alone push up to
// 4 over. A round may also take two slices: every 61st turn the scheduler
// looks at the global queue first, where the preempted goroutine waits.)
//
// Fails without the dating rule: no slice under 40 ms.
[[noreturn]] void SliceAfterBackedOffLooksChild() {
  goro_test::Watchdog dog(absl::Seconds(40), "a slice begun while sysmon's looks were backed off");
  constexpr int kRounds = 15;
  static std::vector<double> slice_ms;
  goro::Run(
      [] {
        for (int round = 0; round < kRounds; ++round) {
          std::atomic<bool> stop{false};
          std::atomic<bool> witnessed{false};
          std::chrono::steady_clock::time_point witness_at;
          goro::WaitGroup wg;
          wg.Add(2);
          for (int i = 0; i < 2; ++i) {
            goro::Go([&] {
              while (!stop.load(std::memory_order_relaxed)) goro::Yield();
              if (!witnessed.exchange(true)) witness_at = Now();
              wg.Done();
            });
          }
          // Back off, ending at a different point of sysmon's period each round.
          goro::SleepFor(absl::Milliseconds(60) + absl::Microseconds(700 * round));
          stop = true;
          auto start = Now();
          auto give_up = start + std::chrono::seconds(2);
          while (!witnessed.load(std::memory_order_acquire) && Now() < give_up) goro::Checkpoint();
          CHILD_CHECK(witnessed.load(), "round %d: the slice was never ended", round);
          wg.Wait();
          slice_ms.push_back(absl::ToDoubleMilliseconds(absl::FromChrono(witness_at - start)));
        }
      },
      Opts(1, absl::Milliseconds(40)));
  PrintAndMedian("first slice after backed-off looks", slice_ms);
  const auto dated_back = std::count_if(slice_ms.begin(), slice_ms.end(), [](double ms) { return ms < 39.0; });
  CHILD_CHECK(dated_back > 0,
              "no first slice after backed-off looks ended before 39 ms (40 ms slice): slices first seen after a "
              "skipped look are dated at the look that found them");
  ExitChild();
}

TEST(SyscallTest, ASliceBegunWhileSysmonLooksLessOftenIsDatedBackToTheSkippedLook) {
  EXPECT_CHILD_OK(SliceAfterBackedOffLooksChild());
}

// Waits for a byte on fds[0] in a marked region, for up to `ms`; returns
// poll's result (1 once the byte came, and reads it).
int MarkedPollAndRead(const int fds[2], int ms) {
  int r = goro::Syscall([fds, ms] {
    pollfd p{fds[0], POLLIN, 0};
    int r;
    do r = poll(&p, 1, ms); while (r < 0 && errno == EINTR);
    return r;
  });
  char c;
  if (r == 1) CHILD_CHECK(read(fds[0], &c, 1) == 1, "read: %s", strerror(errno));
  return r;
}

// On 2 Ps with long slices: one goroutine blocks in a marked poll, holding
// its P; on the other, a goroutine sleeps 1 ms while a call-free spinner
// runs. No P is idle, so the timer sleeper that wakes for the timer finds no
// P to run it with, and the spinner's M will not look before its slice ends.
// A timer due on any P counts as work for the blocked P: sysmon hands it to
// an M, which steals the timer.
//
// Fails without that: the sleep lasts until the blocked P's 10 ms hand-off
// (about 9.7 ms here), or until the spinner's 100 ms slice ends.
[[noreturn]] void TimerOnARunningPBesideABlockedPChild() {
  goro_test::Watchdog dog(absl::Seconds(25), "a timer on a running P beside a blocked P");
  constexpr int kRounds = 12;
  static int fds[2];
  CHILD_CHECK(pipe2(fds, O_CLOEXEC) == 0, "pipe2: %s", strerror(errno));
  goro::Run(
      [] {
        goro::SleepFor(absl::Milliseconds(50));  // let sysmon settle in
        std::vector<double> slept_ms;
        for (int round = 0; round < kRounds; ++round) {
          goro::WaitGroup wg;
          std::atomic<bool> blocking{false};
          std::atomic<bool> stop{false};
          std::atomic<int> polled{-2};
          wg.Add(2);
          goro::Go([&] {
            goro::Yield();
            blocking = true;
            polled = MarkedPollAndRead(fds, 2000);
            wg.Done();
          });
          CHILD_CHECK(goro_test::Eventually(
                          [&] {
                            goro::Yield();
                            return blocking.load();
                          },
                          absl::Seconds(10)),
                      "the blocker never ran");
          goro_test::Spin(absl::Microseconds(300));  // it is in poll(2) now
          goro::Go([&] {
            while (!stop.load(std::memory_order_relaxed)) {
            }
            wg.Done();
          });
          auto t0 = Now();
          goro::SleepFor(absl::Milliseconds(1));  // the spinner runs on this P now
          absl::Duration slept = Since(t0);
          stop = true;
          char c = 'x';
          CHILD_CHECK(write(fds[1], &c, 1) == 1, "write: %s", strerror(errno));
          wg.Wait();
          CHILD_CHECK(polled.load() == 1, "round %d: the blocker's poll returned %d", round, polled.load());
          if (round > 0) slept_ms.push_back(absl::ToDoubleMilliseconds(slept));
        }
        const double median =
            PrintAndMedian("1 ms sleeps beside a spinner on 2 Ps, the other P blocked in a marked poll", slept_ms);
        CHILD_CHECK(median < 7.0,  // 1.05 ms with the fix (up to 4-5 under load), 11-14 without
                    "the median 1 ms sleep took %.2f ms: a timer due on a running P waited for the blocked "
                    "P's 10 ms hand-off",
                    median);
      },
      Opts(2, absl::Milliseconds(100)));
  ExitChild();
}

// With a very long slice (10 s: no preemption at all here) sysmon slept
// slice/8 while a P ran, so a goroutine queued behind a P blocked in a marked
// call waited up to 1.25 s for the hand-off instead of one sysmon tick. On 2
// Ps: a spinner holds one P, the other's goroutine queues a goroutine and
// blocks in a marked poll. Fails if the queued goroutine waits more than
// 300 ms (about 1.25 s without the 10 ms cap on sysmon's sleep; a few ms with
// it).
void QueuedBehindABlockedPWithALongSliceChild() {
  goro_test::Watchdog dog(absl::Seconds(25), "queued goroutine behind a blocked P, 10 s slice");
  goro::Run(
      [] {
        int fds[2];
        CHILD_CHECK(pipe2(fds, O_CLOEXEC) == 0, "pipe2: %s", strerror(errno));
        std::atomic<bool> stop{false}, spinning{false};
        goro::WaitGroup wg;
        wg.Add(2);
        goro::Go([&] {
          spinning = true;
          while (!stop.load(std::memory_order_relaxed)) {
          }
          wg.Done();
        });
        // Polls with SleepFor, not Yield: a yield could hand this P to the
        // spinner and leave this goroutine queued behind it, which nothing
        // preempts where async preemption is off (TSan).
        CHILD_CHECK(goro_test::Eventually([&] { return spinning.load(); }, absl::Seconds(10)),
                    "the spinner never ran");
        std::atomic<int64_t> ran_after_ns{-1};
        const auto t0 = Now();
        goro::Go([&] {  // onto this P's queue
          ran_after_ns = absl::ToInt64Nanoseconds(Since(t0));
          char c = 'x';
          CHILD_CHECK(write(fds[1], &c, 1) == 1, "write: %s", strerror(errno));
          wg.Done();
        });
        int polled = MarkedPollAndRead(fds, 3000);
        stop = true;
        wg.Wait();
        CHILD_CHECK(polled == 1, "the poll returned %d before the queued goroutine wrote", polled);
        const double ms = ran_after_ns.load() / 1e6;
        fprintf(stderr, "the queued goroutine ran %.2f ms after it was queued\n", ms);
        CHILD_CHECK(ms >= 0 && ms < 300, "the goroutine queued behind the blocked P waited %.2f ms", ms);
        close(fds[0]);
        close(fds[1]);
      },
      Opts(2, absl::Seconds(10)));
  ExitChild();
}

TEST(SyscallTest, GoroutineQueuedBehindABlockedPWithALongSliceRunsSoon) {
  EXPECT_CHILD_OK(QueuedBehindABlockedPWithALongSliceChild());
}

// Entering a marked region with a goroutine waiting for the P wakes sysmon
// if its next look is more than 1 ms away, so the P is handed on one sysmon
// tick later, not at sysmon's next regular look (up to 10 ms away: slice/8,
// capped). One P, 1 s slices: each round main sleeps 3 ms (every P idle:
// sysmon sleeps until the P runs again, and then plans its next look 10 ms
// on), queues a goroutine and blocks in a marked poll that the goroutine
// ends. The median wait of the queued goroutine over 15 rounds is checked.
//
// Fails without the wake-up: a median of 7.0 ms in 3 of 3 runs (sysmon's
// regular look); with it 0.10-0.18 ms on a loaded 2-CPU machine. The bound
// is 3 ms.
[[noreturn]] void QueuedBehindAMarkedCallWakesSysmonChild() {
  goro_test::Watchdog dog(absl::Seconds(25), "queued goroutine behind a marked call, 1 s slice");
  goro::Run(
      [] {
        int fds[2];
        CHILD_CHECK(pipe2(fds, O_CLOEXEC) == 0, "pipe2: %s", strerror(errno));
        std::vector<double> waited_ms;
        for (int round = 0; round < 15; ++round) {
          goro::SleepFor(absl::Milliseconds(3));
          std::atomic<int64_t> ran_after_ns{-1};
          goro::WaitGroup wg;
          wg.Add(1);
          const auto t0 = Now();
          goro::Go([&] {  // onto this P's queue
            ran_after_ns = absl::ToInt64Nanoseconds(Since(t0));
            char c = 'x';
            CHILD_CHECK(write(fds[1], &c, 1) == 1, "write: %s", strerror(errno));
            wg.Done();
          });
          int polled = MarkedPollAndRead(fds, 3000);
          wg.Wait();
          CHILD_CHECK(polled == 1, "round %d: the poll returned %d before the queued goroutine wrote", round, polled);
          waited_ms.push_back(ran_after_ns.load() / 1e6);
        }
        const double median = PrintAndMedian("waits of a goroutine queued behind a marked poll on 1 P", waited_ms);
        CHILD_CHECK(median < 3.0,
                    "the median wait was %.2f ms: sysmon was not woken for the region, and looked at its "
                    "next regular wake-up",
                    median);
        close(fds[0]);
        close(fds[1]);
      },
      Opts(1, absl::Seconds(1)));
  ExitChild();
}

TEST(SyscallTest, GoroutineQueuedBehindAMarkedCallRunsWithinATick) {
  EXPECT_CHILD_OK(QueuedBehindAMarkedCallWakesSysmonChild());
}

TEST(SyscallTest, TimerOnARunningPBesideABlockedPFiresOnTime) {
  EXPECT_CHILD_OK(TimerOnARunningPBesideABlockedPChild());
}

// A P whose goroutine makes one short marked call after another is lent to
// goroutines queued on a busy P, since no other P could run them. On 2 Ps
// with 10 s slices (nothing is preempted): a goroutine loops on marked 1 ms
// nanosleeps; main queues 50 goroutines on its own P and then computes,
// reaching no safe point, until they have all run or 2 s have passed. Only
// the looping goroutine's P can run them, and only once sysmon hands it on.
//
// Fails without counting other Ps' queues as work for a P in a marked
// region: each call ends long before the 10 ms hand-off, no P is idle for
// WakeP, and none of the 50 runs in the 2 s (0 hand-offs). With it they all
// run within a few ms.
[[noreturn]] void MarkedCallLoopLendsItsPChild() {
  goro_test::Watchdog dog(absl::Seconds(25), "marked call loop beside goroutines queued on a busy P");
  goro::Run(
      [] {
        constexpr int kQueued = 50;
        std::atomic<bool> stop{false};
        std::atomic<int> calls{0}, ran{0};
        goro::WaitGroup wg;
        wg.Add(1 + kQueued);
        goro::Go([&] {
          while (!stop.load(std::memory_order_relaxed)) {
            CHILD_CHECK(goro::Syscall([] { return NanosleepErr(absl::Milliseconds(1)); }) == 0, "nanosleep failed");
            calls.fetch_add(1, std::memory_order_relaxed);
          }
          wg.Done();
        });
        // Sleeping lets the looping goroutine take this P; this goroutine
        // wakes on the other one.
        CHILD_CHECK(goro_test::Eventually([&] { return calls.load() >= 3; }, absl::Seconds(10)),
                    "the marked call loop never ran");
        const uint64_t handoffs0 = goro::GetStats().handoffs;
        const auto t0 = Now();
        for (int i = 0; i < kQueued; ++i) {
          goro::Go([&] {  // onto this P's queue
            ran.fetch_add(1, std::memory_order_relaxed);
            wg.Done();
          });
        }
        while (ran.load(std::memory_order_relaxed) < kQueued && Since(t0) < absl::Seconds(2)) {
        }
        const int ran_while_busy = ran.load();
        const double ms = absl::ToDoubleMilliseconds(Since(t0));
        const uint64_t handoffs = goro::GetStats().handoffs - handoffs0;
        stop = true;
        wg.Wait();
        fprintf(stderr, "%d of %d queued goroutines ran in %.2f ms while their P was busy (%llu hand-offs)\n",
                ran_while_busy, kQueued, ms, U(handoffs));
        CHILD_CHECK(ran_while_busy == kQueued,
                    "only %d of %d goroutines queued on a busy P ran in %.0f ms: the P of a loop of short "
                    "marked calls was never lent to them",
                    ran_while_busy, kQueued, ms);
      },
      Opts(2, absl::Seconds(10)));
  ExitChild();
}

TEST(SyscallTest, MarkedCallLoopLendsItsPToGoroutinesQueuedOnABusyP) {
  EXPECT_CHILD_OK(MarkedCallLoopLendsItsPChild());
}

// A goroutine whose P was taken away while it blocked in an unmarked call,
// and whose first step afterwards is a NoPreemptScope, must still get a P of
// its own before it runs runtime code: the scope raises preempt_off, and
// later runtime entries inside it do not check the P again. On 1 P the
// goroutine then holds the only P, so while it spins inside the scope the
// counting goroutine cannot move.
//
// Fails without NoPreemptScope checking the P: Yield inside the scope runs
// on the P that sysmon handed to another M, two Ms run goroutines of one P,
// and the counter advances during the spin (or the run queue breaks).
[[noreturn]] void ScopeAfterRevokedCallChild() {
  goro_test::Watchdog dog(absl::Seconds(25), "NoPreemptScope after a revoked unmarked read");
  static std::atomic<uint64_t> counter{0};
  static std::atomic<bool> stop{false};
  static std::atomic<bool> reader_blocking{false};
  static int fds[2];
  CHILD_CHECK(pipe2(fds, O_CLOEXEC) == 0, "pipe2: %s", strerror(errno));
  // A plain thread writes the pipe once sysmon has had ample time to revoke.
  std::thread writer([] {
    goro_test::Eventually([] { return reader_blocking.load(); }, absl::Seconds(10));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    char c = 'x';
    CHILD_CHECK(write(fds[1], &c, 1) == 1, "write: %s", strerror(errno));
  });
  goro::Run(
      [] {
        goro::WaitGroup wg;
        wg.Add(1);
        StartCounter(wg, stop, counter);
        const uint64_t handoffs0 = goro::GetStats().handoffs;
        reader_blocking = true;
        char c;
        ssize_t r = read(fds[0], &c, 1);  // deliberately unmarked
        {
          goro::NoPreemptScope no_preempt;  // the first goro call after the read
          goro::Yield();
          const uint64_t c0 = counter.load(std::memory_order_relaxed);
          goro_test::Spin(absl::Milliseconds(50));
          const uint64_t c1 = counter.load(std::memory_order_relaxed);
          CHILD_CHECK(c1 - c0 < 1000,
                      "the counter moved from %llu to %llu while this goroutine held the only P "
                      "inside a NoPreemptScope: two Ms ran one P",
                      U(c0), U(c1));
        }
        CHILD_CHECK(r == 1, "read returned %zd", r);
        CHILD_CHECK(goro::GetStats().handoffs > handoffs0, "the P was not revoked during the read");
        stop = true;
        wg.Wait();
      },
      Opts(1, absl::Milliseconds(10)));
  writer.join();
  ExitChild();
}

TEST(SyscallTest, NoPreemptScopeAfterARevokedCallGetsItsOwnP) { EXPECT_CHILD_OK(ScopeAfterRevokedCallChild()); }

// With async preemption off (Options::async_preemption, GORODEBUG=
// asyncpreemptoff=1, TSan and static builds) a goroutine whose P sysmon
// revoked during an unmarked call, and which then computes, gets back to a
// P only at a safe point, and only if asked: sysmon must set its
// stackguard0 when it sees it running, signal or no signal. One P: A blocks
// in an unmarked 30 ms nanosleep while B is queued, so sysmon revokes A's P
// and hands it to B, which computes with Checkpoint() calls; A then computes
// with Checkpoint() calls until it holds a P again (looked at white-box,
// with preempt_off raised so that nothing changes meanwhile).
//
// Fails without the request: A runs on without a P, beside B on the one P,
// until its 2 s limit. With it, A holds a P again 17-45 ms after it woke
// (sysmon's look, then B's slice ends: it waits in the global queue) on a
// loaded 2-CPU machine; the bound is 500 ms.
bool HoldsAP() {
  goro::internal::InRuntimeScope in_runtime;  // no revocation, no reacquisition
  return goro::internal::HoldsItsP(goro::internal::CurrentM());
}

[[noreturn]] void RevokedThenComputesAsyncOffChild() {
  goro_test::Watchdog dog(absl::Seconds(25), "a revoked goroutine computes with async preemption off");
  goro::Options opts = Opts(1, absl::Milliseconds(10));
  opts.async_preemption = false;
  goro::Run(
      [] {
        const uint64_t handoffs0 = goro::GetStats().handoffs;
        std::atomic<bool> a_done{false};
        goro::WaitGroup wg;
        wg.Add(2);
        int64_t pless_ms = -1;
        goro::Go([&] {  // A
          CHILD_CHECK(NanosleepErr(absl::Milliseconds(30)) == 0, "nanosleep failed");  // deliberately unmarked
          const auto woke = goro_test::Now();
          while (!HoldsAP() && goro_test::Since(woke) < absl::Seconds(2)) {
            goro_test::Spin(absl::Microseconds(20));
            goro::Checkpoint();
          }
          pless_ms = absl::ToInt64Milliseconds(goro_test::Since(woke));
          a_done = true;
          wg.Done();
        });
        goro::Go([&] {  // B: queued behind A, then runs on A's P
          while (!a_done.load()) {
            goro_test::Spin(absl::Microseconds(20));
            goro::Checkpoint();
          }
          wg.Done();
        });
        wg.Wait();
        fprintf(stderr, "A held no P for %lld ms after it woke\n", static_cast<long long>(pless_ms));
        CHILD_CHECK(goro::GetStats().handoffs > handoffs0, "A's P was not revoked during its nanosleep");
        CHILD_CHECK(pless_ms < 500, "A held no P for %lld ms after it woke: it ran on without one",
                    static_cast<long long>(pless_ms));
      },
      opts);
  ExitChild();
}

TEST(SyscallTest, RevokedGoroutineThatComputesGetsAPBackWithAsyncPreemptionOff) {
  EXPECT_CHILD_OK(RevokedThenComputesAsyncOffChild());
}

// Stats::handoffs counts Ps handed from a blocked M to another M, not Ps
// that sysmon took and put on the idle list. On 2 Ps a lone goroutine makes
// a 30 ms marked sleep, then a 30 ms unmarked one: with nothing to run and
// the other P idle, sysmon takes the P after 10 ms each time (checked
// white-box: both Ps idle during the sleep) and HandoffP puts it on the idle
// list. Fails if those count: the counter went up by 2.
[[noreturn]] void IdleRetakesAreNotHandoffsChild() {
  goro_test::Watchdog dog(absl::Seconds(20), "retakes to the idle list are not hand-offs");
  goro::Run(
      [] {
        using goro::internal::sched;
        goro::SleepFor(absl::Milliseconds(20));  // whatever started with the runtime has settled
        const uint64_t handoffs0 = goro::GetStats().handoffs;
        bool marked_taken = false;
        goro::Syscall([&] {
          NanosleepErr(absl::Milliseconds(30));
          marked_taken = sched.npidle.load() == sched.nprocs;
          return 0;
        });
        CHILD_CHECK(NanosleepErr(absl::Milliseconds(30)) == 0, "nanosleep failed");  // deliberately unmarked
        const bool unmarked_taken = !HoldsAP() && sched.npidle.load() == sched.nprocs;
        const uint64_t handoffs1 = goro::GetStats().handoffs;
        CHILD_CHECK(marked_taken, "sysmon did not take the P of the marked sleep: the test proved nothing");
        CHILD_CHECK(unmarked_taken, "sysmon did not take the P of the unmarked sleep: the test proved nothing");
        CHILD_CHECK(handoffs1 == handoffs0,
                    "Stats::handoffs went from %llu to %llu, though no P went to another M",
                    U(handoffs0), U(handoffs1));
      },
      Opts(2, absl::Milliseconds(10)));
  ExitChild();
}

TEST(SyscallTest, RetakesToTheIdleListAreNotHandoffs) { EXPECT_CHILD_OK(IdleRetakesAreNotHandoffsChild()); }

// A P that went idle starts a new slice with the first goroutine it runs,
// even one its timer put in runnext (which otherwise inherits the slice).
// On 1 P a lone goroutine sleeps 3 ms (the P goes idle), then makes a
// 300 us unmarked call, 40 times. Nothing waits for the P, so sysmon may
// take it only from a call that has run 10 ms. Fails if the slice is
// inherited across the idle time: the P's tick never moves, sysmon times
// the call from the first slice, and takes the P in most rounds (33-48 of 50
// in the reviewer's runs; checked by hand: 31-33 of 40 here, and the tick moved once or twice).
[[noreturn]] void IdlePStartsANewSliceChild() {
  goro_test::Watchdog dog(absl::Seconds(20), "a P back from idle starts a new slice");
  goro::Run(
      [] {
        using goro::internal::sched;
        constexpr int kRounds = 40;
        const uint32_t tick0 = sched.allp[0]->schedtick.load();
        int taken = 0;
        for (int i = 0; i < kRounds; ++i) {
          goro::SleepFor(absl::Milliseconds(3));
          usleep(300);  // deliberately unmarked
          taken += !HoldsAP();
        }
        const uint32_t ticks = sched.allp[0]->schedtick.load() - tick0;
        CHILD_CHECK(ticks >= kRounds, "the P's tick moved %u times in %d wake-ups from idle", ticks, kRounds);
        // A call can take 10 ms on a loaded host: allow a few.
        CHILD_CHECK(taken <= 5, "sysmon took the P during %d of %d 300 us calls", taken, kRounds);
      },
      Opts(1, absl::Milliseconds(10)));
  ExitChild();
}

TEST(SyscallTest, APBackFromIdleStartsANewSlice) { EXPECT_CHILD_OK(IdlePStartsANewSliceChild()); }

// The same for a goroutine that takes the idle P back itself: on 1 P it
// makes a 40 ms unmarked sleep (sysmon takes the P after 10 ms, and it goes
// idle), then a runtime entry that does not switch (a Send on a buffered
// channel with room) takes the P back, and the goroutine computes 3 ms, 20
// times. Fails if the goroutine keeps the P's old slice: the tick did not
// move in 20 of 20 rounds, and sysmon preempted the 3 ms in 7-17 of them
// (the reviewer's runs).
[[noreturn]] void ReacquiredIdlePStartsANewSliceChild() {
  goro_test::Watchdog dog(absl::Seconds(30), "a P taken back from idle starts a new slice");
  goro::Run(
      [] {
        using goro::internal::sched;
        constexpr int kRounds = 20;
        goro::Chan<int> ch(1);
        int revoked = 0, old_tick = 0, preempted = 0;
        for (int i = 0; i < kRounds; ++i) {
          const uint32_t tick0 = sched.allp[0]->schedtick.load();
          usleep(40000);  // deliberately unmarked
          revoked += !HoldsAP();
          ch.Send(i);
          old_tick += sched.allp[0]->schedtick.load() == tick0;
          const uint64_t p0 = goro::GetStats().async_preemptions + goro::GetStats().cooperative_preemptions;
          goro_test::Spin(absl::Milliseconds(3));
          preempted += goro::GetStats().async_preemptions + goro::GetStats().cooperative_preemptions != p0;
          ch.Recv();
        }
        CHILD_CHECK(revoked > kRounds / 2, "sysmon took the P in only %d of %d sleeps: the test proved nothing",
                    revoked, kRounds);
        CHILD_CHECK(old_tick <= kRounds - revoked, "the goroutine took the P back with its old tick in %d of %d rounds",
                    old_tick, kRounds);
        // A 3 ms loop can take 10 ms on a loaded host: allow a few.
        CHILD_CHECK(preempted <= 5, "%d of %d 3 ms loops right after taking the P back were preempted", preempted,
                    kRounds);
      },
      Opts(1, absl::Milliseconds(10)));
  ExitChild();
}

TEST(SyscallTest, APTakenBackFromIdleStartsANewSlice) { EXPECT_CHILD_OK(ReacquiredIdlePStartsANewSliceChild()); }

// Goroutines taking turns at blocking calls: on 1 P, 8 goroutines each make
// 10 marked calls that last until the P is taken from them (or 20 ms), so
// every call but the last hands the P on, and each measures how long that
// took. After a hand-off sysmon looks again in a tick, so the next call's P
// goes within about two ticks (100 us; Go's sysmon, 20-40 us). Fails if
// sysmon sleeps its 1 ms steps after a hand-off: the median was about 1 ms.
[[noreturn]] void TurnsAtBlockingCallsChild() {
  goro_test::Watchdog dog(absl::Seconds(30), "goroutines taking turns at blocking calls");
  goro::Run(
      [] {
        constexpr int kGoroutines = 8, kCalls = 10;
        std::vector<absl::Duration> took;
        goro::Mutex mu;
        goro::WaitGroup wg;
        for (int i = 0; i < kGoroutines; ++i) {
          wg.Add(1);
          goro::Go([&] {
            for (int k = 0; k < kCalls; ++k) {
              absl::Duration d;
              goro::Syscall([&] {
                goro::internal::M* self = goro::internal::CurrentM();
                const auto start = Now();
                while (goro::internal::sched.allp[0]->syscall_owner.load() == self &&
                       goro_test::Since(start) < absl::Milliseconds(20)) {
                  NanosleepErr(absl::Microseconds(20));
                }
                d = goro_test::Since(start);
                return 0;
              });
              mu.Lock();
              took.push_back(d);
              mu.Unlock();
            }
            wg.Done();
          });
        }
        wg.Wait();
        std::sort(took.begin(), took.end());
        const absl::Duration median = took[took.size() / 2];
        fprintf(stderr, "P handed on after %s (median), %s (90th percentile) of a blocking call\n",
                absl::FormatDuration(median).c_str(), absl::FormatDuration(took[took.size() * 9 / 10]).c_str());
        CHILD_CHECK(median < absl::Microseconds(500), "the median call kept the P for %s with goroutines waiting",
                    absl::FormatDuration(median).c_str());
      },
      Opts(1, absl::Milliseconds(10)));
  ExitChild();
}

// A goroutine back from a blocking call whose P went to another M that now
// blocks in a call of its own takes the P back from it at once, as Go's
// exitsyscallfast does, instead of waiting for sysmon to hand it on. On 1 P:
// main blocks in a marked call; sysmon hands the P to a queued goroutine
// (one hand-off), which blocks in a marked call until main is back. Fails
// without the take: main waited in the global queue until sysmon took the
// P from the other call and handed it on, a second hand-off.
[[noreturn]] void TakesThePFromABlockedMChild() {
  goro_test::Watchdog dog(absl::Seconds(30), "a goroutine back from a blocking call");
  goro::Run(
      [] {
        using goro::internal::sched;
        std::atomic<bool> other_blocking{false}, main_back{false}, other_lost_p{false};
        goro::WaitGroup wg;
        wg.Add(1);
        goro::Go([&] {
          goro::Syscall([&] {
            other_blocking = true;
            const auto start = Now();
            while (!main_back.load() && goro_test::Since(start) < absl::Seconds(10)) {
              NanosleepErr(absl::Microseconds(50));
            }
            other_lost_p = sched.allp[0]->syscall_owner.load() != goro::internal::CurrentM();
            return 0;
          });
          wg.Done();
        });
        uint64_t handoffs_before = 0;
        goro::Syscall([&] {
          const auto start = Now();
          while (!other_blocking.load() && goro_test::Since(start) < absl::Seconds(10)) {
            NanosleepErr(absl::Microseconds(50));
          }
          handoffs_before = goro::GetStats().handoffs;
          NanosleepErr(absl::Milliseconds(1));
          return 0;
        });
        const uint64_t handoffs_after = goro::GetStats().handoffs;
        main_back = true;
        wg.Wait();
        CHILD_CHECK(other_blocking.load(), "the queued goroutine never blocked: the test proved nothing");
        CHILD_CHECK(other_lost_p.load(), "the other goroutine kept the P while main ran");
        CHILD_CHECK(handoffs_after == handoffs_before,
                    "main waited for sysmon to hand it the P (%llu hand-offs while it came back)",
                    U(handoffs_after - handoffs_before));
      },
      Opts(1, absl::Seconds(1)));
  ExitChild();
}

TEST(SyscallTest, ABlockingCallsReturnTakesThePFromAnotherBlockedCall) { EXPECT_CHILD_OK(TakesThePFromABlockedMChild()); }

TEST(SyscallTest, GoroutinesTakingTurnsAtBlockingCallsHandThePOnWithinTicks) {
  EXPECT_CHILD_OK(TurnsAtBlockingCallsChild());
}

// A loop over libc calls (write(2) to /dev/null) spends nearly all its time
// in libc or the kernel, where the preemption signal is refused, and makes no
// goro call. On 1 P two such loops run while the main goroutine sleeps 10 ms,
// 20 times. Go's system calls are safe points; here sysmon takes the P of a
// goroutine that leaves a request unanswered for a further slice, as from an
// unmarked blocking call. Fails without that: a sleep took 1-10 s or more
// (the reviewer's program was still waiting after 10 s in 10 of 10 runs;
// Go 1.19 took 11-46 ms), and no P was taken.
[[noreturn]] void LibcLoopLosesItsPChild() {
  goro_test::Watchdog dog(absl::Seconds(40), "a loop over write(2) keeps its P");
  static int fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
  CHILD_CHECK(fd >= 0, "open /dev/null: %s", strerror(errno));
  goro::Run(
      [] {
        std::atomic<bool> stop{false};
        goro::WaitGroup wg;
        for (int i = 0; i < 2; ++i) {
          wg.Add(1);
          goro::Go([&] {
            while (!stop.load(std::memory_order_relaxed)) {
              if (write(fd, ".", 1) != 1) break;
            }
            wg.Done();
          });
        }
        goro::SleepFor(absl::Milliseconds(1));
        absl::Duration worst;
        for (int i = 0; i < 20; ++i) {
          const auto start = Now();
          goro::SleepFor(absl::Milliseconds(10));
          worst = std::max(worst, goro_test::Since(start));
        }
        stop = true;
        wg.Wait();
        fprintf(stderr, "worst SleepFor(10ms) beside two write(2) loops: %s; %llu Ps taken\n",
                absl::FormatDuration(worst).c_str(), U(goro::internal::sched.unanswered_revokes.load()));
        // Go: 11-46 ms. A second is far beyond that, and far below the
        // seconds the loops kept the P.
        CHILD_CHECK(worst < absl::Seconds(1), "a 10 ms sleep took %s beside two write(2) loops",
                    absl::FormatDuration(worst).c_str());
        CHILD_CHECK(goro::internal::sched.unanswered_revokes.load() > 0, "no P was taken from the loops");
      },
      Opts(1, absl::Milliseconds(10)));
  ExitChild();
}

TEST(SyscallTest, LoopOverLibcCallsLosesItsP) {
  SKIP_WITHOUT_ASYNC_PREEMPTION();
  EXPECT_CHILD_OK(LibcLoopLosesItsPChild());
}

// A marked region inside another (goro::Syscall around code that marks its
// own calls) is part of the outer one. On 1 P the goroutine must be able to
// run on afterwards. Fails without the nesting count: the inner region's
// entry took its own P, in kSyscall, for one taken from it and dropped it,
// and the outer region's exit then lost it for good (the watchdog).
[[noreturn]] void NestedRegionsChild() {
  goro_test::Watchdog dog(absl::Seconds(20), "nested marked regions");
  goro::Run(
      [] {
        {
          goro::SyscallScope outer;
          int r = goro::Syscall([] { return usleep(1000); });
          CHILD_CHECK(r == 0, "usleep: %s", strerror(errno));
        }
        goro::Yield();
        goro::SleepFor(absl::Milliseconds(1));
        goro::Chan<int> c(1);
        goro::Go([c]() mutable { c.Send(7); });
        CHILD_CHECK(c.Recv() == 7, "a goroutine started after the regions did not run");
      },
      Opts(1, absl::Milliseconds(10)));
  ExitChild();
}

TEST(SyscallTest, NestedMarkedRegionsAreOne) { EXPECT_CHILD_OK(NestedRegionsChild()); }

// A marked region in a signal handler of the program's that interrupted the
// goroutine inside runtime code keeps the P: the interrupted code may be
// using it (halfway through its run queue, holding sched.mu, between setting
// its switch request and switching), and it resumes when the handler
// returns. One P; a goroutine is queued on it, so sysmon would hand the P on
// after one tick; the handler's region sleeps 100 ms. Inside a RuntimeScope
// (white-box: as if the signal had come during a channel operation) the
// queued goroutine must not run during the handler; inside a user's
// NoPreemptScope the region hands the P on as anywhere else, and it must.
//
// Fails without the check in EnterSyscall: the P is handed to another M,
// which runs the queued goroutine during the handler (a reviewer's
// reproducer, signalling goroutines that ping-pong on channels, crashed in
// 12 of 13 runs: "goroutine switched to g0 without a request", or SIGSEGV).
// The second half fails if the check took a NoPreemptScope for runtime code.
std::atomic<bool> queued_ran{false};
std::atomic<int> queued_ran_in_handler{-1};  // -1: the handler has not run

void MarkedSleepHandler(int) {
  int saved = errno;
  goro::Syscall([] { return NanosleepErr(absl::Milliseconds(100)); });
  queued_ran_in_handler = queued_ran.load() ? 1 : 0;
  errno = saved;
}

// Queues a goroutine on the only P, then sends the handler's signal to this
// thread inside a `Scope`; returns whether the queued goroutine ran during
// the handler.
template <typename Scope>
bool QueuedRanDuringHandler() {
  queued_ran = false;
  queued_ran_in_handler = -1;
  goro::WaitGroup wg;
  wg.Add(1);
  goro::Go([&wg] {
    queued_ran = true;
    wg.Done();
  });
  {
    Scope scope;
    syscall(SYS_tgkill, getpid(), static_cast<pid_t>(syscall(SYS_gettid)), SIGUSR1);  // handled before it returns
    CHILD_CHECK(goro::internal::HoldsItsP(goro::internal::CurrentM()), "the goroutine lost its P");
  }
  CHILD_CHECK(queued_ran_in_handler.load() >= 0, "the handler did not run");
  wg.Wait();
  return queued_ran_in_handler.load() == 1;
}

[[noreturn]] void RegionInAHandlerChild() {
  goro_test::Watchdog dog(absl::Seconds(20), "a marked region in a signal handler");
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = MarkedSleepHandler;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  CHILD_CHECK(sigaction(SIGUSR1, &sa, nullptr) == 0, "sigaction: %s", strerror(errno));
  goro::Run(
      [] {
        CHILD_CHECK(!QueuedRanDuringHandler<goro::internal::RuntimeScope>(),
                    "the region in a handler that interrupted runtime code gave the P away");
        CHILD_CHECK(QueuedRanDuringHandler<goro::NoPreemptScope>(),
                    "the region in a handler that interrupted a NoPreemptScope kept the P");
      },
      Opts(1, absl::Milliseconds(10)));
  ExitChild();
}

TEST(SyscallTest, MarkedRegionInAHandlerKeepsThePOfInterruptedRuntimeCode) {
  EXPECT_CHILD_OK(RegionInAHandlerChild());
}

// dl_iterate_phdr, which goro wraps to defer preemption, is called inside
// signal handlers by unwinders (goro's own SIGQUIT report, a profiler's). On
// a goroutine whose P was taken while it blocked in an unmarked read, such a
// handler must not wait for a P. One P: goroutine A blocks in read() until
// sysmon hands its P to B, which then holds it inside a NoPreemptScope for
// 1.5 s; a SIGUSR1 handler on A's thread calls dl_iterate_phdr. Fails if the
// wrapper checks the P on entry (as NoPreemptScope does): the handler waits
// for B's scope to end, about 1.5 s.
std::atomic<pid_t> reader_tid{0};
std::atomic<int64_t> handler_ns{-1};

int CountObjects(dl_phdr_info*, size_t, void* data) {
  ++*static_cast<int*>(data);
  return 0;
}

void UnwinderLikeHandler(int) {
  int saved = errno;
  timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  int n = 0;
  dl_iterate_phdr(CountObjects, &n);  // what libunwind does at each step
  clock_gettime(CLOCK_MONOTONIC, &t1);
  handler_ns.store((t1.tv_sec - t0.tv_sec) * 1000000000LL + (t1.tv_nsec - t0.tv_nsec));
  errno = saved;
}

[[noreturn]] void HandlerAfterRevokedCallChild() {
  goro_test::Watchdog dog(absl::Seconds(25), "dl_iterate_phdr in a handler after a revoked call");
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = UnwinderLikeHandler;
  sa.sa_flags = SA_RESTART | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  CHILD_CHECK(sigaction(SIGUSR1, &sa, nullptr) == 0, "sigaction: %s", strerror(errno));
  static int fds[2];
  CHILD_CHECK(pipe2(fds, O_CLOEXEC) == 0, "pipe2: %s", strerror(errno));
  static std::atomic<bool> b_in_scope{false};
  std::thread helper([] {
    goro_test::Eventually([] { return b_in_scope.load(); }, absl::Seconds(10));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    syscall(SYS_tgkill, getpid(), reader_tid.load(), SIGUSR1);  // A is still in read()
    goro_test::Eventually([] { return handler_ns.load() >= 0; }, absl::Seconds(5));
    char c = 'x';
    CHILD_CHECK(write(fds[1], &c, 1) == 1, "write: %s", strerror(errno));
  });
  goro::Run(
      [] {
        goro::WaitGroup wg;
        wg.Add(1);
        goro::Go([&wg] {  // B: runs only once A's P was handed over (one P)
          goro::NoPreemptScope no_preempt;
          b_in_scope = true;
          goro_test::Spin(absl::Milliseconds(1500));
          wg.Done();
        });
        reader_tid = static_cast<pid_t>(syscall(SYS_gettid));
        char c;
        ssize_t r = read(fds[0], &c, 1);  // A: deliberately unmarked
        CHILD_CHECK(r == 1, "read returned %zd", r);
        wg.Wait();
      },
      Opts(1, absl::Milliseconds(10)));
  helper.join();
  CHILD_CHECK(b_in_scope.load(), "B never ran: the P was not handed over during the read");
  CHILD_CHECK(handler_ns.load() >= 0, "the handler did not run");
  CHILD_CHECK(handler_ns.load() < 200 * 1000 * 1000,
              "dl_iterate_phdr in a signal handler took %lld ms: it waited for a P inside the handler",
              static_cast<long long>(handler_ns.load() / 1000000));
  ExitChild();
}

TEST(SyscallTest, DlIteratePhdrInAHandlerAfterARevokedCallDoesNotWaitForAP) {
  EXPECT_CHILD_OK(HandlerAfterRevokedCallChild());
}

// ---------------------------------------------------------------------------
// No EINTR caused by the runtime.
//
// nanosleep, poll and epoll_wait are never restarted after a signal handler
// runs, even with SA_RESTART: a preemption signal delivered while the thread
// sleeps in one makes it return EINTR. Hogs (call-free loops) run on both Ps
// with a 200 us slice, so sysmon asks for preemptions all the time; other
// goroutines make ~100 such calls each. None may see EINTR.
//
// Marked calls: each call follows a 300 us spin, longer than the slice, so
// sysmon tends to decide to preempt the goroutine just as it enters the
// region. Fails if sysmon signals an M in a marked region, or if a signal it
// had already decided to send lands after the region began (EnterSyscall
// waits out the signal in flight), or if it signals a P's previous M after a
// hand-off.
//
// Unmarked calls: the goroutine spends almost no time in user code between
// calls (a Yield, so that each call starts on a P with hogs waiting). Sysmon
// thinks it has run past its slice; fails if it sends the signal without
// noticing the thread is asleep in the kernel (without the detection every
// call longer than a slice is interrupted). (A spin before an unmarked call
// would make a signal that sysmon sent while the thread still ran user code
// land in the call - no runtime can avoid that - so there is none here.)

enum class CallKind { kNanosleep, kPoll, kEpoll };

[[noreturn]] void NoEintrChild(bool marked) {
  goro_test::Watchdog dog(absl::Seconds(28), marked ? "marked calls beside hogs" : "unmarked calls beside hogs");
  constexpr int kIterations = 100;
  static std::atomic<bool> stop{false};
  static std::atomic<uint64_t> hog_work{0};
  static std::atomic<int> eintr[3], other_err[3], done[3];
  const std::vector<CallKind> callers = {CallKind::kNanosleep, CallKind::kNanosleep, CallKind::kPoll,
                                         CallKind::kPoll,      CallKind::kEpoll,     CallKind::kEpoll};
  goro::Run(
      [&callers, marked] {
        goro::WaitGroup hogs, workers;
        for (int h = 0; h < 2; ++h) {
          hogs.Add(1);
          goro::Go([&hogs] {
            while (!stop.load(std::memory_order_relaxed)) hog_work.fetch_add(1, std::memory_order_relaxed);
            hogs.Done();
          });
        }
        for (CallKind kind : callers) {
          workers.Add(1);
          goro::Go([kind, marked, &workers] {
            int k = static_cast<int>(kind);
            int p[2];
            CHILD_CHECK(pipe2(p, O_CLOEXEC) == 0, "pipe2: %s", strerror(errno));
            int ep = epoll_create1(EPOLL_CLOEXEC);
            epoll_event ev{};
            ev.events = EPOLLIN;
            CHILD_CHECK(ep >= 0 && epoll_ctl(ep, EPOLL_CTL_ADD, p[0], &ev) == 0, "epoll: %s", strerror(errno));
            auto call = [&]() -> int {
              switch (kind) {
                case CallKind::kNanosleep:
                  return NanosleepErr(absl::Milliseconds(50));
                case CallKind::kPoll:
                  return PollErr(p[0], 20);
                case CallKind::kEpoll:
                  return EpollErr(ep, 20);
              }
              return -2;
            };
            for (int i = 0; i < kIterations; ++i) {
              int err;
              if (marked) {
                goro_test::Spin(absl::Microseconds(300));
                err = goro::Syscall(call);
              } else {
                err = call();
                goro::Yield();
              }
              if (err == EINTR) {
                eintr[k].fetch_add(1);
              } else if (err != 0) {
                if (other_err[k].fetch_add(1) == 0) fprintf(stderr, "call kind %d returned %d\n", k, err);
              }
            }
            done[k].fetch_add(kIterations);
            close(ep);
            close(p[0]);
            close(p[1]);
            workers.Done();
          });
        }
        workers.Wait();
        stop = true;
        hogs.Wait();
      },
      Opts(2, absl::Microseconds(200)));
  static const char* const kNames[] = {"nanosleep", "poll", "epoll_wait"};
  for (int k = 0; k < 3; ++k) {
    fprintf(stderr, "%s: %d calls, %d EINTR, %d other errors\n", kNames[k], done[k].load(), eintr[k].load(),
            other_err[k].load());
    CHILD_CHECK(done[k].load() == 2 * kIterations, "%s: only %d calls finished", kNames[k], done[k].load());
    // Marked calls: never. Unmarked calls: the runtime checks that a thread is
    // on a CPU right before signalling it, but a signal sent to a thread in
    // user code is delivered by an IPI, tens of microseconds later in a VM; a
    // thread that enters a non-restartable call (poll) in between gets EINTR.
    // No runtime can close that window, so the bound for unmarked calls is a
    // small rate (without the detection nearly every call is interrupted).
    const int allowed = marked ? 0 : std::max(2, done[k].load() / 50);
    CHILD_CHECK(eintr[k].load() <= allowed, "%s returned EINTR %d times (allowed %d)", kNames[k],
                eintr[k].load(), allowed);
    CHILD_CHECK(other_err[k].load() == 0, "%s failed %d times", kNames[k], other_err[k].load());
  }
  goro::Stats s = goro::GetStats();
  // Otherwise nothing was tested: sysmon must have been busy preempting.
  CHILD_CHECK(s.preempt_signals_sent > 0, "no preemption signal was sent: the hogs did not run?");
  CHILD_CHECK(hog_work.load() > 0, "the hogs never ran");
  ExitChild();
}

TEST(SyscallTest, MarkedCallsSeeNoEintrBesideHogs) {
  SKIP_WITHOUT_ASYNC_PREEMPTION();
  EXPECT_CHILD_OK(NoEintrChild(true));
}

TEST(SyscallTest, UnmarkedCallsSeeNoEintrBesideHogs) {
  SKIP_WITHOUT_ASYNC_PREEMPTION();
  EXPECT_CHILD_OK(NoEintrChild(false));
}

// ---------------------------------------------------------------------------
// A marked call with the preemption signal blocked.
//
// EnterSyscall waits until the handler has taken a preemption signal that
// sysmon decided to send, so that it cannot land in the call. A goroutine
// that blocks the signal on its thread (pthread_sigmask) and runs past its
// slice is sent one that stays pending: the handler cannot run. Fails (the
// watchdog ends the child) if a marked call waits for it anyway: it spun at
// 100% CPU for ever. Then, with the signal unblocked, the pending signal must
// be taken as the one in flight and the goroutine preempted by signal again:
// fails if the M is left with a signal counted in flight that never comes.

[[noreturn]] void BlockedPreemptSignalChild() {
  goro_test::Watchdog dog(absl::Seconds(40), "a marked call with the preemption signal blocked");
  const goro::Options opts = Opts(1, absl::Milliseconds(1));
  goro::Run(
      [sig = opts.preempt_signal] {
        sigset_t block, old, pending;
        sigemptyset(&block);
        sigaddset(&block, sig);
        CHILD_CHECK(pthread_sigmask(SIG_BLOCK, &block, &old) == 0, "pthread_sigmask");
        // No goro call (no safe point) until the marked call, so the goroutine
        // stays on this thread while sysmon signals it for its spent slice.
        bool signalled = false;
        auto t0 = Now();
        while (!signalled && Since(t0) < absl::Seconds(10)) {
          goro_test::Spin(absl::Milliseconds(1));
          signalled = sigpending(&pending) == 0 && sigismember(&pending, sig) == 1;
        }
        CHILD_CHECK(signalled, "no preemption signal became pending within 10 s");
        int r = goro::Syscall([] { return 7; });
        CHILD_CHECK(r == 7, "goro::Syscall returned %d", r);
        CHILD_CHECK(pthread_sigmask(SIG_SETMASK, &old, nullptr) == 0, "pthread_sigmask");  // taken here
        const uint64_t async0 = goro::GetStats().async_preemptions;
        t0 = Now();
        while (goro::GetStats().async_preemptions == async0 && Since(t0) < absl::Seconds(10)) {
          goro_test::Spin(absl::Milliseconds(5));
        }
        CHILD_CHECK(goro::GetStats().async_preemptions > async0,
                    "not preempted by signal within 10 s after unblocking it");
      },
      opts);
  ExitChild();
}

TEST(SyscallTest, MarkedCallWithThePreemptSignalBlockedDoesNotWaitForIt) {
  SKIP_WITHOUT_ASYNC_PREEMPTION();
  EXPECT_CHILD_OK(BlockedPreemptSignalChild());
}

// ---------------------------------------------------------------------------
// SyscallScope off a goroutine does nothing; errno survives Syscall.
//
// Fails if the scope touches goroutine state on a plain thread (a crash on a
// null G), starts the runtime, or counts a hand-off; and if Syscall loses the
// errno its callee set (ExitSyscall saves it before it may switch threads and
// restores it on the thread it resumes on: errno is per thread).

TEST(SyscallTest, ScopeOffGoroutineIsANoOp) {
  // Before the runtime exists.
  {
    goro::SyscallScope scope;
    goro::SyscallScope nested;
  }
  errno = 0;
  int r = goro::Syscall([] {
    errno = EXDEV;
    return -7;
  });
  EXPECT_EQ(r, -7);
  EXPECT_EQ(errno, EXDEV);
  EXPECT_EQ(goro::GetStats().procs, 0) << "a SyscallScope on a plain thread started the runtime";

  goro_test::StartRuntime();
  goro::Stats before = goro::GetStats();
  {
    goro::SyscallScope scope;
    errno = ENOTDIR;
  }
  EXPECT_EQ(errno, ENOTDIR);
  // A real blocking call in a scope on a plain thread: it just blocks.
  int fds[2];
  ASSERT_EQ(pipe2(fds, O_CLOEXEC), 0);
  std::thread writer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    char c = 'x';
    EXPECT_EQ(write(fds[1], &c, 1), 1);
  });
  char got = 0;
  ssize_t n = goro::Syscall([&] { return read(fds[0], &got, 1); });
  writer.join();
  EXPECT_EQ(n, 1);
  EXPECT_EQ(got, 'x');
  errno = 0;
  n = goro::Syscall([] {
    char c;
    return read(-1, &c, 1);
  });
  EXPECT_EQ(n, -1);
  EXPECT_EQ(errno, EBADF);
  close(fds[0]);
  close(fds[1]);
  EXPECT_EQ(goro::GetStats().handoffs, before.handoffs) << "a scope on a plain thread handed off a P";
}

// errno is per thread, and the compiler may compute its address once per
// function (glibc declares __errno_location() `const`), so a goroutine that
// resumes on another thread can read the old thread's errno through the
// cached address. These helpers look it up afresh on every call, on the
// thread that runs them.
#if defined(__clang__)
#define GORO_TEST_OPAQUE __attribute__((noinline, optnone))
#else
#define GORO_TEST_OPAQUE __attribute__((noinline, noipa))
#endif
GORO_TEST_OPAQUE int CurrentErrno() { return errno; }
GORO_TEST_OPAQUE void SetCurrentErrno(int e) { errno = e; }

// Runs `body` (on a goroutine) while both Ps have work waiting, so that a
// marked call's P is handed off and the goroutine resumes through the slow
// path (perhaps on another thread). Returns the hand-offs counted meanwhile.
uint64_t WithBusyPs(const std::function<void()>& body) {
  std::atomic<bool> stop{false};
  uint64_t handoffs = 0;
  goro_test::RunBounded(
      [&] {
        const uint64_t h0 = goro::GetStats().handoffs;
        goro::WaitGroup wg;
        for (int i = 0; i < 4; ++i) {
          wg.Add(1);
          goro::Go([&] {
            while (!stop.load(std::memory_order_relaxed)) {
              goro_test::Spin(absl::Microseconds(100));
              goro::Checkpoint();
            }
            wg.Done();
          });
        }
        body();
        handoffs = goro::GetStats().handoffs - h0;
        stop = true;
        wg.Wait();
      },
      absl::Seconds(25));
  return handoffs;
}

constexpr int kRounds = 20;
constexpr int kErrs[] = {EXDEV, ENOTDIR, EROFS, EMLINK, ENOSPC};

// The runtime's part: ExitSyscall saves the errno fn left on the thread that
// ran it and restores it on the thread the goroutine resumes on. Read here
// with a fresh lookup. Fails if that save/restore is missing (the errno of
// whatever thread the goroutine lands on is read instead).
TEST(SyscallTest, ErrnoSetInsideSyscallIsVisibleAfter) {
  // A failing call, no hand-off.
  goro_test::RunBounded(
      [] {
        SetCurrentErrno(0);
        char c;
        ssize_t n = goro::Syscall([&] { return read(-1, &c, 1); });
        EXPECT_EQ(n, -1);
        EXPECT_EQ(CurrentErrno(), EBADF);
      },
      absl::Seconds(25));
  int wrong = 0;
  uint64_t handoffs = WithBusyPs([&] {
    for (int i = 0; i < kRounds; ++i) {
      const int want = kErrs[i % 5];
      SetCurrentErrno(0);
      int r = goro::Syscall([want] {
        NanosleepErr(absl::Milliseconds(15));
        SetCurrentErrno(want);
        return -1;
      });
      int got = CurrentErrno();
      if (r != -1 || got != want) {
        ++wrong;
        ADD_FAILURE() << "round " << i << ": Syscall returned " << r << ", errno " << got << ", want " << want;
      }
    }
  });
  EXPECT_EQ(wrong, 0);
  // Otherwise the slow path was not exercised.
  EXPECT_GT(handoffs, 0u) << "no P was handed off during the blocking calls";
}

// The user's part: the idiom everyone writes, `errno` read right after the
// call, in a loop (so the compiler computes errno's address once, before the
// loop, on whatever thread the goroutine was on then). syscall.h promises
// "errno as left by fn is preserved for the caller". Fails if the goroutine
// can resume on another thread after a hand-off: the cached address is then
// the old thread's errno (0, or an earlier round's value). Only keeping the
// goroutine on its thread across a marked region makes this idiom safe.
TEST(SyscallTest, ErrnoIdiomAfterSyscallInALoop) {
  int fds[2];
  ASSERT_EQ(pipe2(fds, O_CLOEXEC), 0);
  int wrong = 0;
  uint64_t handoffs = WithBusyPs([&] {
    for (int i = 0; i < kRounds; ++i) {
      // A different failure each round, set by libc on the thread that ran it.
      const int kind = i % 4;
      const int want = kind == 0 ? EBADF : kind == 1 ? ESPIPE : kind == 2 ? ENOTDIR : EISDIR;
      errno = 0;
      long r = goro::Syscall([&]() -> long {
        NanosleepErr(absl::Milliseconds(15));
        switch (kind) {
          case 0: {
            char c;
            return read(-1, &c, 1);
          }
          case 1:
            return lseek(fds[0], 0, SEEK_SET);
          case 2:
            return open("/dev/null/x", O_RDONLY | O_CLOEXEC);
          default:
            return open("/", O_WRONLY | O_CLOEXEC);
        }
      });
      if (r == -1 && errno == want) continue;
      int got = errno;
      ++wrong;
      ADD_FAILURE() << "round " << i << ": Syscall returned " << r << ", errno " << got << " (" << strerror(got)
                    << "), want " << want << " (" << strerror(want) << ")";
    }
  });
  close(fds[0]);
  close(fds[1]);
  EXPECT_EQ(wrong, 0);
  EXPECT_GT(handoffs, 0u) << "no P was handed off during the blocking calls";
}

// ---------------------------------------------------------------------------
// Many goroutines sleeping in marked calls at once overlap.
//
// 50 goroutines each make 4 marked nanosleep(20 ms) calls on 2 Ps. With the
// hand-off they all sleep at the same time (~80 ms plus thread start-up).
// Fails without it: each P would be held by one sleeper at a time, so the
// whole run would take at least 50 * 4 * 20 ms / 2 = 2 s; the bound here is
// 1 s (50 * 20 ms), still far above the expected time on a noisy machine.

TEST(SyscallTest, ManyMarkedSleepsOverlap) {
  constexpr int kGoroutines = 50;
  constexpr int kSleeps = 4;
  std::atomic<int> sleeps_done{0}, eintr{0};
  absl::Duration elapsed;
  uint64_t handoffs0 = 0, handoffs1 = 0;
  goro_test::RunBounded(
      [&] {
        handoffs0 = goro::GetStats().handoffs;
        auto start = Now();
        goro::WaitGroup wg;
        wg.Add(kGoroutines);
        for (int i = 0; i < kGoroutines; ++i) {
          goro::Go([&] {
            for (int j = 0; j < kSleeps; ++j) {
              int err = goro::Syscall([] { return NanosleepErr(absl::Milliseconds(20)); });
              if (err == EINTR) eintr.fetch_add(1);
              sleeps_done.fetch_add(1);
            }
            wg.Done();
          });
        }
        wg.Wait();
        elapsed = Since(start);
        handoffs1 = goro::GetStats().handoffs;
      },
      absl::Seconds(25));
  EXPECT_EQ(sleeps_done.load(), kGoroutines * kSleeps);
  EXPECT_EQ(eintr.load(), 0);
  EXPECT_LT(elapsed, absl::Milliseconds(kGoroutines * 20))
      << "marked sleeps did not overlap: " << absl::FormatDuration(elapsed)
      << " (serialised on 2 Ps they take >= 2 s)";
  EXPECT_GT(handoffs1, handoffs0);
  fprintf(stderr, "%d goroutines x %d marked 20 ms sleeps on 2 Ps: %s, %llu hand-offs, %d threads\n",
          kGoroutines, kSleeps, absl::FormatDuration(elapsed).c_str(), U(handoffs1 - handoffs0),
          goro::GetStats().threads);
}

}  // namespace

// A goroutine's last runtime code before an unmarked blocking call writes
// its P's state (its run queue, its caches: a blocking channel operation
// takes and gives back a wait record there), and the M that sysmon hands
// the P to reads it. membarrier(2) orders the two, which ThreadSanitizer
// cannot see: LeaveRuntimeCode tells it. On 2 Ps, 8 goroutines ping-pong
// on one channel and every 64 operations sleep 15 ms in usleep, so sysmon
// revokes their Ps. Every operation must complete, and Ps must have been
// revoked. In a TSan build, fails without LeaveRuntimeCode's SanRelease:
// TSan reports 7-8 data races on P::wait_records and the process exits 66
// (3 of 3 runs).
TEST(SyscallTest, WhatAGoroutineWroteToItsPReachesTheNextOwnerAfterARevoke) {
  goro_test::StartRuntime();  // which finds out whether membarrier works
  if (!goro::internal::RevocationAvailable()) GTEST_SKIP() << "membarrier is unavailable: no revocation";
  goro_test::RunBounded([] {
    constexpr int kPairs = 4;
    constexpr int kOps = 1024;
    goro::Chan<int> ch;
    goro::WaitGroup wg;
    std::atomic<int64_t> received{0};
    const uint64_t handoffs0 = goro::GetStats().handoffs;
    wg.Add(2 * kPairs);
    for (int i = 0; i < 2 * kPairs; ++i) {
      goro::Go([&, sender = i % 2 == 0] {
        for (int k = 0; k < kOps; ++k) {
          if (sender) {
            ch.Send(k);
          } else if (ch.Recv().has_value()) {
            received.fetch_add(1, std::memory_order_relaxed);
          }
          if (k % 64 == 63) usleep(15000);  // unmarked: sysmon revokes the P
        }
        wg.Done();
      });
    }
    wg.Wait();
    EXPECT_EQ(received.load(), int64_t{kPairs} * kOps);
    EXPECT_GT(goro::GetStats().handoffs, handoffs0) << "no P was revoked during the sleeps: the test proved nothing";
  });
}
