// Goroutine stacks: overflow is caught and reported, deep recursion within the
// reservation works, stacks stay put while parked, and a million parked
// goroutines fit under vm.max_map_count because the guard does not split
// the stack's mapping (MADV_GUARD_INSTALL).
#include <alloca.h>
#include <sys/mman.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>

#include "goro/goro.h"
#include "gtest/gtest.h"
#include "test_util.h"

namespace {

using goro_test::RunBounded;

// ---------------------------------------------------------------------------
// Overflow.

volatile bool g_keep_going = true;

// Recurses until `g_keep_going` is false (never, in practice), using about 1 KiB
// of stack per frame; the volatile array and the work after the call stop the
// compiler from turning it into a loop.
__attribute__((noinline)) int RecurseForever(int depth) {
  volatile char frame[1024];
  frame[0] = static_cast<char>(depth);
  frame[sizeof(frame) - 1] = static_cast<char>(depth);
  if (!g_keep_going) return frame[0];
  return RecurseForever(depth + 1) + frame[sizeof(frame) - 1];
}

TEST(StackTest, UnboundedRecursionDiesWithStackOverflow) {
  EXPECT_DEATH(
      {
        goro_test::Watchdog dog(absl::Seconds(30));
        goro::Run([] { RecurseForever(0); }, goro_test::TestOptions());
      },
      "goroutine [0-9]+: stack overflow");
}

// The report carries the overflowing goroutine's backtrace, walked from the
// fault's signal context: the recursing function is on top, demangled.
TEST(StackTest, OverflowReportShowsTheRecursion) {
  EXPECT_DEATH(
      {
        goro_test::Watchdog dog(absl::Seconds(30));
        goro::Run([] { RecurseForever(0); }, goro_test::TestOptions());
      },
      "stack overflow[^\n]*\n\ngoroutine [0-9]+ \\[running\\]:\n\t[^\n]*RecurseForever\\(int\\)(.|\n)*"
      "additional frames elided");
}

TEST(StackTest, OverflowOnAGoroutineStartedWithGo) {
  EXPECT_DEATH(
      {
        goro_test::Watchdog dog(absl::Seconds(30));
        goro::Run(
            [] {
              goro::WaitGroup wg;
              wg.Add(1);
              goro::Go([&wg] {
                RecurseForever(0);
                wg.Done();
              });
              wg.Wait();
            },
            goro_test::TestOptions());
      },
      "goroutine [0-9]+: stack overflow");
}

TEST(StackTest, OverflowWithASmallStackSize) {
  EXPECT_DEATH(
      {
        goro_test::Watchdog dog(absl::Seconds(30));
        goro::Options opts = goro_test::TestOptions();
        opts.stack_size = 64 << 10;
        goro::Run([] { RecurseForever(0); }, opts);
      },
      "goroutine [0-9]+: stack overflow");
}

// An overflow inside malloc: the faulting thread holds the allocator's lock,
// so the report must not look up or demangle names (both allocate): it gives
// each frame as object+offset, and aborts. Each level's frame is
// smaller than malloc's own, so the guard page is hit inside malloc; odd
// levels ask for more than the per-thread cache serves (4000 bytes) and even
// levels drain its small bins, so malloc takes the arena lock. Fails (the
// watchdog's message, no frame after the header) if the report looks names
// up: libunwind's malloc waits for the lock its own thread holds.
void* volatile g_kept[1 << 16];
std::atomic<unsigned> g_nkept{0};

__attribute__((noinline)) int RecurseMalloc(int depth) {
  volatile char frame[16];  // read after the call: no compiler turns this into a loop
  frame[0] = static_cast<char>(depth);
  size_t size = (depth & 1) ? 4000 : 16 + static_cast<size_t>(depth / 2 % 32) * 16;
  void* p = malloc(size);
  g_kept[g_nkept.fetch_add(1, std::memory_order_relaxed) & 0xffff] = p;
  if (!g_keep_going) return frame[0];
  return RecurseMalloc(depth + 1) + frame[0];
}

TEST(StackTest, OverflowInsideMallocStillReportsAndAborts) {
  if (goro_test::kTsanBuild) {
    GTEST_SKIP() << "ThreadSanitizer build: malloc is TSan's, and a fault inside it leaves TSan's own "
                    "locks held, which the report's intercepted calls then wait for";
  }
  EXPECT_EXIT(
      {
        goro_test::Watchdog dog(absl::Seconds(20));
        goro::Run([] { RecurseMalloc(0); }, goro_test::TestOptions());
      },
      ::testing::KilledBySignal(SIGABRT),
      "stack overflow[^\n]*\n\ngoroutine [0-9]+ \\[running\\]:\n\t\\(no function names[^\n]*\n"
      "(\t\\?\\? \\([^\n]*\\+0x[0-9a-f]+\\)\n){3}");
}

// A frame larger than a page near the end of the stack. stack_test is built
// without -fstack-clash-protection (tests/CMakeLists.txt), as much code is
// (GCC's default on Debian): the compiler moves the stack pointer by the whole
// frame at once and writes only where the code writes. Below every stack's
// guard lies the top of another goroutine's stack, so a frame that skips the
// guard writes there without a fault. The guard must be larger than such a
// frame, and a fault anywhere in it must be reported.

// A 16 KiB frame written only at its low end (a large buffer of which the
// first bytes are used). ASan would move the array to its fake stack.
__attribute__((noinline, no_sanitize("address"))) int SixteenKiBFrame() {
  volatile char buf[16 * 1024];
  buf[0] = 1;
  return buf[0];
}

// Descends in small frames, every page touched on the way (no frame skips
// anything), until the stack pointer is below `stop`; then SixteenKiBFrame.
__attribute__((noinline, no_sanitize("address"))) int DescendThenBigFrame(uintptr_t stop) {
  volatile char frame[512];
  frame[0] = 0;
  if (reinterpret_cast<uintptr_t>(&frame[0]) < stop) {
    return SixteenKiBFrame() + frame[0];
  }
  return DescendThenBigFrame(stop) + frame[0];
}

// Four goroutines park; one of them, V, whose stack lies directly above
// another parked one's (N), descends to 6 KiB above its stack's low end and
// calls SixteenKiBFrame, whose write lands about 10 KiB below V's stack: past
// a one-page guard, in N's stack, with no fault. Fails ("failed to die") with
// a one-page guard; must report V's overflow.
TEST(StackTest, FrameLargerThanAPageNextToAParkedGoroutineIsReported) {
  EXPECT_DEATH(
      {
        goro_test::Watchdog dog(absl::Seconds(30));
        constexpr size_t kStackSize = 1 << 20;
        goro::Options opts = goro_test::TestOptions();
        opts.max_procs = 1;
        opts.stack_size = kStackSize;
        goro::Run(
            [] {
              constexpr int kN = 4;
              goro::Chan<uintptr_t> tops(kN);
              goro::Chan<int> go[kN];
              goro::WaitGroup wg;
              wg.Add(kN);
              for (int i = 0; i < kN; ++i) {
                goro::Go([&, i] {
                  volatile char here = 0;
                  // Stacks are page-aligned and the goroutine's first frames
                  // are far smaller than a page.
                  uintptr_t hi = (reinterpret_cast<uintptr_t>(&here) + 4095) & ~uintptr_t{4095};
                  tops.Send(hi * kN + i);  // hi is a multiple of kN
                  if (go[i].Recv().value_or(0) == 1) DescendThenBigFrame(hi - kStackSize + 6 * 1024);
                  wg.Done();
                });
              }
              uintptr_t hi[kN];
              for (int k = 0; k < kN; ++k) {
                uintptr_t v = tops.Recv().value_or(0);
                hi[v % kN] = v / kN;
              }
              // V: a goroutine with another's stack at most 64 KiB below its own.
              int victim = -1;
              for (int v = 0; v < kN && victim < 0; ++v) {
                for (int n = 0; n < kN; ++n) {
                  uintptr_t lo = hi[v] - kStackSize;
                  if (hi[n] < lo && lo - hi[n] <= 64 * 1024) victim = v;
                }
              }
              if (victim < 0) {
                fprintf(stderr, "no two goroutine stacks are adjacent: cannot test\n");
                return;
              }
              go[victim].Send(1);  // the others stay parked meanwhile
              goro::SleepFor(absl::Milliseconds(100));
              fprintf(stderr, "no fault: the frame wrote into another goroutine's stack\n");
              for (int i = 0; i < kN; ++i) {
                if (i != victim) go[i].Send(0);
              }
              wg.Wait();
            },
            opts);
      },
      "goroutine [0-9]+: stack overflow");
}

// An overflow while goro::Yield switches straight to the next goroutine
// (TryYieldDirect): the runtime already names that goroutine as the M's
// current one while the switch still pushes onto the yielder's stack.

// Calls goro::Yield with the stack pointer about `room` bytes above `lo`, the
// low end of the calling goroutine's stack.
__attribute__((noinline, no_sanitize("address"))) void YieldWithRoom(uintptr_t lo, size_t room) {
  volatile char probe = 0;
  size_t n = reinterpret_cast<uintptr_t>(&probe) - lo - room;
  char* pad = static_cast<char*>(alloca(n));  // not touched: nothing is skipped
  asm volatile("" : : "r"(pad) : "memory");
  goro::Yield();
}

// Exits 0 (no fault at this depth) or dies by SIGABRT (the runtime's report);
// a plain SIGSEGV is an overflow that went unreported.
bool ExitedZeroOrAborted(int status) {
  return (WIFEXITED(status) && WEXITSTATUS(status) == 0) || (WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
}

// One P, two goroutines that only yield, so Yield takes the direct path; the
// yielding goroutine's stack pointer is swept from its stack's low end up in
// 16-byte steps (the call alignment), so that some step overflows at each
// push of the Yield path, the direct switch's included. Each step is a child
// process that must either not fault or report the overflow. Fails (a child
// killed by SIGSEGV, in this build at 176 and 192 bytes of room) if the
// handler looks only at the M's current goroutine.
TEST(StackTest, OverflowDuringYieldsDirectSwitchIsReported) {
  constexpr size_t kStackSize = 1 << 20;
  for (size_t room = 0; room < 1024; room += 16) {
    EXPECT_EXIT(
        {
          goro_test::Watchdog dog(absl::Seconds(30));
          goro::Options opts = goro_test::TestOptions();
          opts.max_procs = 1;
          opts.async_preemption = false;
          opts.stack_size = kStackSize;
          goro::Run(
              [room] {
                for (int i = 0; i < 2; ++i) {
                  goro::Go([] {
                    for (;;) goro::Yield();
                  });
                }
                goro::Yield();  // both have run and are queued
                volatile char here = 0;
                uintptr_t hi = (reinterpret_cast<uintptr_t>(&here) + 4095) & ~uintptr_t{4095};
                YieldWithRoom(hi - kStackSize, room);
                fprintf(stderr, "no fault\n");
                _exit(0);
              },
              opts);
        },
        ExitedZeroOrAborted, "^(no fault|fatal error: goroutine [0-9]+: stack overflow)")
        << "room " << room;
  }
}

// A signal whose handler does not run on the alternate signal stack (most
// programs' handlers) arrives when the goroutine's stack is nearly used up:
// the kernel cannot write the signal frame there, and sends a SIGSEGV with
// si_code SI_KERNEL and no fault address instead. A level of this recursion
// needs a few hundred bytes, the signal frame several KiB, so the frame is
// what overflows first.
std::atomic<int64_t> g_usr1_handled{0};
void CountUsr1(int) { g_usr1_handled.fetch_add(1, std::memory_order_relaxed); }

__attribute__((noinline)) int RecurseRaisingUsr1(int depth) {
  volatile char frame[200];
  frame[0] = static_cast<char>(depth);
  raise(SIGUSR1);
  if (!g_keep_going) return frame[0];
  return RecurseRaisingUsr1(depth + 1) + frame[0];
}

// Fails (killed by SIGSEGV instead of SIGABRT, with no report) if the handler
// looks only at the fault address.
TEST(StackTest, OverflowBySignalFrameIsReported) {
  if (goro_test::kTsanBuild) {
    GTEST_SKIP() << "ThreadSanitizer build: it delivers the program's signals later, from its own frames";
  }
  EXPECT_EXIT(
      {
        goro_test::Watchdog dog(absl::Seconds(30));
        struct sigaction sa {};
        sa.sa_handler = CountUsr1;  // no SA_ONSTACK
        sigemptyset(&sa.sa_mask);
        sigaction(SIGUSR1, &sa, nullptr);
        goro::Run([] { RecurseRaisingUsr1(0); }, goro_test::TestOptions());
      },
      ::testing::KilledBySignal(SIGABRT), "goroutine [0-9]+: stack overflow");
}

// Checkpoint() in a signal handler on an alternate signal stack that the
// goroutine set itself, in .bss: far below the goroutine's stack, so the
// handler's stack pointer is below stackguard0 without any overflow. Fails
// (killed by SIGABRT, "goroutine N: stack overflow") if Checkpoint judges
// the stack pointer without asking whether it is on the goroutine's stack.
alignas(64) char g_own_altstack[256 * 1024];
std::atomic<int> g_altstack_handled{0};
std::atomic<bool> g_handler_on_altstack{false};
void CheckpointOnAltStack(int) {
  char probe = 0;
  auto at = reinterpret_cast<uintptr_t>(&probe);
  auto lo = reinterpret_cast<uintptr_t>(g_own_altstack);
  g_handler_on_altstack.store(at >= lo && at < lo + sizeof g_own_altstack);
  goro::Checkpoint();
  g_altstack_handled.fetch_add(1);
}

TEST(StackTest, CheckpointOnAGoroutinesOwnAltStackIsNoOverflow) {
  if (goro_test::kTsanBuild) {
    GTEST_SKIP() << "ThreadSanitizer build: it runs the program's handlers later, from its own frames, "
                    "not on the alternate stack";
  }
  EXPECT_EXIT(
      {
        goro_test::Watchdog dog(absl::Seconds(30));
        struct sigaction sa {};
        sa.sa_handler = CheckpointOnAltStack;
        sa.sa_flags = SA_ONSTACK;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGUSR1, &sa, nullptr);
        goro::Run(
            [] {
              stack_t ss{};
              ss.ss_sp = g_own_altstack;
              ss.ss_size = sizeof g_own_altstack;
              CHILD_CHECK(sigaltstack(&ss, nullptr) == 0, "sigaltstack: %s", strerror(errno));
              raise(SIGUSR1);
              ss.ss_flags = SS_DISABLE;
              sigaltstack(&ss, nullptr);
            },
            goro_test::TestOptions());
        CHILD_CHECK(g_altstack_handled.load() == 1, "the handler ran %d times", g_altstack_handled.load());
        CHILD_CHECK(g_handler_on_altstack.load(), "the handler did not run on the goroutine's alternate stack");
        fflush(stderr);
        _exit(goro_test::child_failures.load() == 0 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

// ---------------------------------------------------------------------------
// Deep but bounded recursion and stack reuse.

__attribute__((noinline)) int RecurseTo(int depth) {
  volatile char frame[1024];
  frame[0] = static_cast<char>(depth);
  if (depth == 0) return frame[0];
  return RecurseTo(depth - 1) + frame[0];
}

TEST(StackTest, HalfTheDefaultStackIsUsable) {
  RunBounded([] {
    // ~1.1 KiB per frame: about 560 KiB of the 1 MiB reservation.
    goro::WaitGroup wg;
    std::atomic<int> done{0};
    wg.Add(4);
    for (int i = 0; i < 4; ++i) {
      goro::Go([&] {
        RecurseTo(500);
        goro::Yield();
        RecurseTo(500);
        ++done;
        wg.Done();
      });
    }
    wg.Wait();
    EXPECT_EQ(done.load(), 4);
  });
}

TEST(StackTest, ManyShortLivedGoroutinesWithDeepStacks) {
  // Stacks come back to the pools dirty and are reused.
  RunBounded([] {
    std::atomic<int> done{0};
    for (int round = 0; round < 20; ++round) {
      goro::WaitGroup wg;
      wg.Add(100);
      for (int i = 0; i < 100; ++i) {
        goro::Go([&, i] {
          RecurseTo(64 + (i % 4) * 64);
          ++done;
          wg.Done();
        });
      }
      wg.Wait();
    }
    EXPECT_EQ(done.load(), 2000);
  });
}

// Stacks never move: a pointer into a parked goroutine's stack stays valid.
TEST(StackTest, PointersIntoAParkedStackStayValid) {
  RunBounded([] {
    goro::Chan<int*> addresses;
    goro::Chan<int> written;
    std::atomic<int> seen{-1};
    goro::WaitGroup wg;
    wg.Add(1);
    goro::Go([&] {
      int local = 0;
      addresses.Send(&local);
      written.Recv();  // parked; the other goroutine writes to `local`
      goro::SleepFor(absl::Milliseconds(1));
      seen = local;
      wg.Done();
    });
    int* p = addresses.Recv().value_or(nullptr);
    ASSERT_NE(p, nullptr);
    *p = 1234;
    written.Send(1);
    wg.Wait();
    EXPECT_EQ(seen.load(), 1234);
  });
}

// Idle stacks give their pages back. 300 goroutines each write 768 KiB of
// their stack, park, and exit; once every P is idle, sysmon must give back the
// pages of all idle stacks but a few (at most 16 MiB of reservation). Fails if
// RSS stays 32 MiB or more above where it was before the goroutines started
// (polled for 20 s): the stacks in the Ps' caches (up to 64 each) and 64 more
// in the pool kept their pages for ever. Checked by hand: without the fix RSS
// stayed 127 MiB above; with it, 6 to 12 MiB.

__attribute__((noinline)) void WriteStack(size_t bytes) {
  char* buf = static_cast<char*>(alloca(bytes));
  memset(buf, 1, bytes);
  asm volatile("" : : "r"(buf) : "memory");
}

int64_t RssKiB() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return strtoll(line.c_str() + 6, nullptr, 10);
  }
  return -1;
}

// On a goroutine: `n` goroutines each write 768 KiB of their stack and wait
// until all have, so that all of them hold their stacks at once; then they
// exit. Returns once they have; `at_peak` runs while they all hold them.
void StackBurst(int n, const std::function<void()>& at_peak = {}) {
  goro::Chan<int> gate;
  goro::WaitGroup written, done;
  written.Add(n);
  done.Add(n);
  for (int i = 0; i < n; ++i) {
    goro::Go([&] {
      WriteStack(768 * 1024);
      written.Done();
      gate.Recv();
      done.Done();
    });
  }
  written.Wait();
  if (at_peak) at_peak();
  gate.Close();
  done.Wait();
}

// Polls RSS until it is less than `above_kib` over `before`, for up to
// `limit`; returns whether it got there, with the last reading in *after.
bool RssFallsToWithin(int64_t before, int64_t above_kib, absl::Duration limit, int64_t* after) {
  return goro_test::Eventually(
      [&] {
        *after = RssKiB();
        return *after - before < above_kib;
      },
      limit);
}

TEST(StackTest, IdleStacksGiveTheirPagesBack) {
  SKIP_UNDER_MEMORY_SANITIZER("RSS measurements");
  goro_test::StartRuntime();
  const int64_t before = RssKiB();
  RunBounded([] { StackBurst(300); });
  int64_t after = -1;
  bool fell = RssFallsToWithin(before, 32 * 1024, absl::Seconds(20), &after);
  fprintf(stderr, "RSS %lld KiB before, %lld KiB once idle\n", static_cast<long long>(before),
          static_cast<long long>(after));
  EXPECT_TRUE(fell) << "idle stacks kept " << (after - before) / 1024 << " MiB of pages";
}

// The same while a P stays busy, which sysmon's periodic scavenge must not
// wait for: one goroutine loops on Checkpoint() throughout. Fails if RSS
// stays 64 MiB or more above where it was (polled for 20 s): the periodic
// scavenge measured idle stacks from a low-water mark that started at 0 and
// could only fall, so it gave back nothing, and only a scavenge with every
// P idle did. Checked by hand: without the fix RSS stayed 231 MiB above;
// with it, it fell below that within about 2 s (sysmon scavenges every
// second while a P runs).
TEST(StackTest, IdleStacksGiveTheirPagesBackWhileAPStaysBusy) {
  SKIP_UNDER_MEMORY_SANITIZER("RSS measurements");
  goro_test::StartRuntime();
  const int64_t before = RssKiB();
  std::atomic<bool> stop{false};
  goro::WaitGroup busy_done;
  busy_done.Add(1);
  goro::Go([&] {
    while (!stop.load(std::memory_order_relaxed)) goro::Checkpoint();
    busy_done.Done();
  });
  RunBounded([] { StackBurst(300); });
  int64_t after = -1;
  bool fell = RssFallsToWithin(before, 64 * 1024, absl::Seconds(20), &after);
  stop = true;
  busy_done.Wait();
  fprintf(stderr, "RSS %lld KiB before, %lld KiB with a P busy\n", static_cast<long long>(before),
          static_cast<long long>(after));
  EXPECT_TRUE(fell) << "idle stacks kept " << (after - before) / 1024 << " MiB of pages while a P stayed busy";
}

// A P that never goes idle does not keep its own cache of stacks, with their
// pages, for ever: sysmon asks it to move the ones that sat unused since the
// last scavenge to the pool, which gives their pages back. On 1 P, 100
// goroutines each write 768 KiB of stack and exit, their stacks in the P's
// cache (up to 64) and the pool; then a goroutine loops on Checkpoint() for
// good. Fails if RSS stays 32 MiB or more above where it began (polled for
// 20 s): the cache's 64 stacks kept their pages. Checked by hand: without
// the trim RSS stayed 47 MiB above (77 MiB at the burst); with it, it fell
// below 32 MiB within about 4 s (a trim and then a scavenge, a second each).
[[noreturn]] void BusyPCacheChild() {
  goro_test::Watchdog dog(absl::Seconds(40), "a busy P's stack cache");
  goro::Options opts = goro_test::TestOptions();
  opts.max_procs = 1;
  goro::Run([] {}, opts);
  const int64_t before = RssKiB();
  static std::atomic<bool> stop{false}, burst_done{false};
  static std::atomic<int64_t> peak{0};
  goro::Go([] {
    StackBurst(100, [] { peak = RssKiB(); });
    burst_done = true;
    while (!stop.load(std::memory_order_relaxed)) goro::Checkpoint();  // the P never idles again
  });
  if (!goro_test::Eventually([] { return burst_done.load(); }, absl::Seconds(10))) _exit(3);
  int64_t after = -1;
  bool fell = RssFallsToWithin(before, 32 * 1024, absl::Seconds(20), &after);
  stop = true;
  fprintf(stderr, "RSS %lld KiB before, %lld KiB after the burst, %lld KiB with the P busy\n",
          static_cast<long long>(before), static_cast<long long>(peak.load()), static_cast<long long>(after));
  if (peak.load() - before < 48 * 1024) _exit(2);  // the burst did not take the memory: proved nothing
  _exit(fell ? 0 : 1);
}

TEST(StackTest, ABusyPsOwnStackCacheGivesItsPagesBack) {
  SKIP_UNDER_MEMORY_SANITIZER("RSS measurements");
  EXPECT_EXIT(BusyPCacheChild(), ::testing::ExitedWithCode(0), "");
}

// ---------------------------------------------------------------------------
// A million parked goroutines.

int64_t CountLines(const char* path) {
  std::ifstream in(path);
  std::string line;
  int64_t n = 0;
  while (std::getline(in, line)) ++n;
  return n;
}

int64_t ReadInt(const char* path) {
  std::ifstream in(path);
  int64_t v = -1;
  in >> v;
  return v;
}

// Whether this kernel accepts madvise(MADV_GUARD_INSTALL) (Linux 6.13+).
bool KernelHasMadvGuardInstall() {
  constexpr int kMadvGuardInstall = 102;
  long page = sysconf(_SC_PAGESIZE);
  void* p = mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return false;
  bool ok = madvise(p, page, kMadvGuardInstall) == 0;
  munmap(p, 2 * page);
  return ok;
}

// Needs MADV_GUARD_INSTALL: with an mprotect guard every stack is two mappings
// and a million of them cannot fit under the default vm.max_map_count (65530).
// On an older kernel this test is expected to fail; it says so in its output.
TEST(StackTest, MillionParkedGoroutinesNeedMadvGuardInstall) {
  if (goro_test::kTsanBuild) {
    GTEST_SKIP() << "ThreadSanitizer build: TSan tracks at most 8128 live threads and fibers "
                    "(one per goroutine), this test parks a million goroutines";
  }
  const bool guard_install = KernelHasMadvGuardInstall();
  utsname u{};
  uname(&u);
  const int64_t max_map_count = ReadInt("/proc/sys/vm/max_map_count");
  std::string context = std::string("kernel ") + u.release + ", MADV_GUARD_INSTALL " +
                        (guard_install ? "supported" : "NOT supported (expected to fail)") +
                        ", vm.max_map_count " + std::to_string(max_map_count);
  RecordProperty("environment", context);
  fprintf(stderr, "%s\n", context.c_str());

  constexpr int kGoroutines = 1'000'000;
  int64_t maps_while_parked = -1;
  int64_t live_while_parked = -1;
  std::atomic<int> woke{0};
  RunBounded(
      [&] {
        goro::Chan<int> gate;
        goro::WaitGroup started, finished;
        started.Add(kGoroutines);
        finished.Add(kGoroutines);
        for (int i = 0; i < kGoroutines; ++i) {
          goro::Go([&] {
            started.Done();
            gate.Recv();  // parks here until the Close below
            ++woke;
            finished.Done();
          });
        }
        started.Wait();
        goro::SleepFor(absl::Milliseconds(200));  // let the last ones park
        live_while_parked = goro::GetStats().goroutines_live;
        maps_while_parked = CountLines("/proc/self/maps");
        gate.Close();
        finished.Wait();
      },
      absl::Seconds(240));
  fprintf(stderr, "/proc/self/maps had %lld lines with %lld goroutines live\n",
          static_cast<long long>(maps_while_parked), static_cast<long long>(live_while_parked));
  EXPECT_EQ(woke.load(), kGoroutines);
  EXPECT_GE(live_while_parked, kGoroutines);
  ASSERT_GT(max_map_count, 0);
  EXPECT_LT(maps_while_parked, max_map_count / 4)
      << "guard pages split the stack mappings (" << context << ")";
}

}  // namespace
