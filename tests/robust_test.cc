// Robustness: what the runtime does when the system says no, when it runs for
// a long time, when signals rain on it, and when the program forks.
//
//   - Running out of address space (RLIMIT_AS) while creating goroutines, or
//     memory for a goroutine record, or a thread: one clear fatal line and
//     abort(), never a crash elsewhere or a hang (death tests: the limit binds
//     the whole process, so each runs in a child).
//   - 100,000 goroutines created and destroyed in waves for a minute
//     (GORO_ROBUST_SECONDS, GORO_ROBUST_WAVE) leave RSS and address space
//     where they were after the first wave.
//   - A storm of SIGURG (foreign), SIGCHLD and SIGALRM, from a thread and from
//     another process, changes no result of a busy program and leaks no EINTR
//     out of goro::io.
//   - fork()+exec, posix_spawn, popen and system() from goroutines while
//     others run and are preempted.
// Each comment says what would make the test fail. See docs/robustness.md.
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <signal.h>
#include <spawn.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/runtime.h"  // StackScavenge: settle the stack pool before measuring
#include "goro/goro.h"
#include "gtest/gtest.h"
#include "test_util.h"

extern char** environ;

namespace {

using goro_test::Now;
using goro_test::Since;

// ---------------------------------------------------------------------------
// Helpers.

// A field of /proc/self/status in KiB ("VmRSS:", "VmSize:"), or -1.
int64_t StatusKiB(const char* key) {
  std::ifstream in("/proc/self/status");
  std::string line;
  size_t n = strlen(key);
  while (std::getline(in, line)) {
    if (line.compare(0, n, key) == 0) return strtoll(line.c_str() + n, nullptr, 10);
  }
  return -1;
}

// Limits the address space to what is mapped now plus `margin` bytes.
void LimitAddressSpace(size_t margin) {
  int64_t vm_kib = StatusKiB("VmSize:");
  if (vm_kib <= 0) {
    fprintf(stderr, "cannot read VmSize\n");
    _exit(4);
  }
  rlimit rl;
  rl.rlim_cur = rl.rlim_max = static_cast<rlim_t>(vm_kib) * 1024 + margin;
  if (setrlimit(RLIMIT_AS, &rl) != 0) {
    perror("setrlimit(RLIMIT_AS)");
    _exit(4);
  }
}

// The whole of a death test's stderr must be this one line.
::testing::Matcher<const std::string&> OneFatalLine(const std::string& re) {
  return ::testing::MatchesRegex("fatal error: " + re + "\n");
}

// ---------------------------------------------------------------------------
// Out of address space while goroutines start.
//
// Goroutine stacks are reserved 16 at a time (16 x (1 MiB + a guard page));
// with RLIMIT_AS a few MiB above what is mapped, the next reservation fails
// once the P's cache of spare stacks is used up. Fails if the failure is not
// reported as exactly one line naming the goroutine, mmap, the errno and the
// sizes, followed by abort() (a SIGSEGV, a hang caught by the watchdog, an
// exception's std::terminate message or any other output fail it).

[[noreturn]] void StackReservationFailsChild() {
  goro_test::Watchdog dog(absl::Seconds(60), "stack reservation under RLIMIT_AS");
  goro::Options opts;
  opts.max_procs = 1;  // one M: no thread is started after the limit is set
  goro::Run(
      [] {
        goro::Chan<int> never;  // nobody sends: every goroutine parks on it
        goro::WaitGroup warm;   // threads, malloc arenas, absl's per-thread data
        warm.Add(100);
        for (int i = 0; i < 100; ++i) goro::Go([&warm] { warm.Done(); });
        warm.Wait();
        LimitAddressSpace(size_t{4} << 20);
        for (int i = 0; i < 100000; ++i) {
          goro::Go([never]() mutable { never.Recv(); });
          goro::Yield();  // the new goroutine runs now, so takes its stack now
        }
      },
      opts);
  fprintf(stderr, "100000 goroutines started under RLIMIT_AS\n");
  _exit(3);
}

TEST(RobustTest, StackReservationFailureIsOneFatalLine) {
  EXPECT_EXIT(StackReservationFailsChild(), ::testing::KilledBySignal(SIGABRT),
              OneFatalLine("goroutine [0-9]+: cannot allocate a goroutine stack: mmap: Cannot allocate "
                           "memory \\(errno 12; reserving 16 stacks of 1048576 bytes plus a 4096-byte "
                           "guard page each, 16842752 bytes in all; the address-space limit "
                           "\\(RLIMIT_AS, ulimit -v\\) is [0-9]+ bytes\\)"));
}

// Out of memory for a goroutine's record (struct G) in goro::Go.
//
// One malloc arena, no address space to spare, and the arena's free space
// eaten; goroutines are then spawned (not run, so they take no stack) until
// the free list of G records is used up. Fails if the failed allocation
// escapes as std::bad_alloc (std::terminate's two lines, or an "uncaught
// exception" line) or crashes, instead of one line naming the spawner.

[[noreturn]] void GoroutineRecordAllocationFailsChild() {
  goro_test::Watchdog dog(absl::Seconds(60), "G allocation under RLIMIT_AS");
  mallopt(M_ARENA_MAX, 1);
  goro::Options opts;
  opts.max_procs = 1;
  goro::Run(
      [] {
        constexpr int kWarm = 2000;
        goro::WaitGroup warm;
        warm.Add(kWarm);
        for (int i = 0; i < kWarm; ++i) goro::Go([&warm] { warm.Done(); });  // queued, not run
        warm.Wait();  // all ran and exited: kWarm G records are free for reuse
        LimitAddressSpace(0);
        size_t eaten = 0;
        for (size_t size = 64 * 1024; size >= 16; size /= 2) {
          while (eaten < (size_t{1} << 30) && malloc(size) != nullptr) eaten += size;
        }
        goro::Chan<int> never;
        for (int i = 0; i < 100000; ++i) goro::Go([never]() mutable { never.Recv(); });
      },
      opts);
  fprintf(stderr, "100000 goroutines spawned with no memory left\n");
  _exit(3);
}

TEST(RobustTest, GoroutineRecordAllocationFailureIsOneFatalLine) {
  EXPECT_EXIT(GoroutineRecordAllocationFailsChild(), ::testing::KilledBySignal(SIGABRT),
              OneFatalLine("goroutine 1: cannot allocate a goroutine: out of memory \\(struct G, [0-9]+ bytes\\)"));
}

// Out of address space for a new runtime thread (an M).
//
// Two goroutines block in marked system calls on both Ps' threads while a
// third waits to run: sysmon hands a P to a new thread, whose 8 MiB stack
// does not fit under the limit (small goroutine stacks do: 16 x 68 KiB).
// Fails unless one line names the thread and pthread_create's error.

[[noreturn]] void ThreadCreationFailsChild() {
  goro_test::Watchdog dog(absl::Seconds(60), "thread creation under RLIMIT_AS");
  goro::Options opts;
  opts.max_procs = 2;
  opts.stack_size = 64 * 1024;
  goro::Run(
      [] {
        goro::WaitGroup warm;
        warm.Add(100);
        for (int i = 0; i < 100; ++i) goro::Go([&warm] { warm.Done(); });
        warm.Wait();
        LimitAddressSpace(size_t{4} << 20);
        for (int i = 0; i < 3; ++i) {
          goro::Go([] { goro::Syscall([] { return usleep(20 * 1000 * 1000); }); });
        }
        goro::Syscall([] { return usleep(20 * 1000 * 1000); });
      },
      opts);
  fprintf(stderr, "no thread was needed\n");
  _exit(3);
}

TEST(RobustTest, ThreadCreationFailureIsOneFatalLine) {
  EXPECT_EXIT(ThreadCreationFailsChild(), ::testing::KilledBySignal(SIGABRT),
              OneFatalLine("cannot start runtime thread M[0-9]+: pthread_create: Resource temporarily "
                           "unavailable \\(errno 11; it would be thread [0-9]+ of the runtime\\)"));
}

}  // namespace
