// Helpers shared by goro's tests.
//
// The rule these serve: no test may hang. A goroutine that never returns cannot
// be cancelled, so a wait that overruns its limit ends the process with a line
// naming the test (the ctest entry then fails with that line in its output).
#ifndef GORO_TESTS_TEST_UTIL_H_
#define GORO_TESTS_TEST_UTIL_H_

#include <sched.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <initializer_list>
#include <string>
#include <thread>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "goro/goro.h"

namespace goro_test {

// Checks in a child process (an EXPECT_EXIT body): gtest's own assertions
// reach the parent only through the exit code, so a failed check is printed
// on stderr, with where and why, and counted; the child then exits non-zero.
inline std::atomic<int> child_failures{0};
#define CHILD_CHECK(cond, ...)                                                 \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "%s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                            \
      fputc('\n', stderr);                                                     \
      ::goro_test::child_failures.fetch_add(1);                                \
    }                                                                          \
  } while (0)

// Sanitizer builds (docs/sanitizers.md). Under ThreadSanitizer goro runs with
// async preemption off, so tests of the signal path skip there.
#if defined(__SANITIZE_THREAD__)
#define GORO_TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define GORO_TEST_TSAN 1
#endif
#endif
#if defined(GORO_TEST_TSAN)
inline constexpr bool kTsanBuild = true;
#else
inline constexpr bool kTsanBuild = false;
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(GORO_TEST_TSAN)
#define GORO_TEST_SANITIZED_MEMORY 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GORO_TEST_SANITIZED_MEMORY 1
#endif
#endif
// ASan installs its own SIGSEGV/SIGBUS handler before goro's, which passes
// it the faults that are not goro's: tests of what those do without a
// previous handler skip there.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kAsanBuild = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kAsanBuild = true;
#else
inline constexpr bool kAsanBuild = false;
#endif
#else
inline constexpr bool kAsanBuild = false;
#endif
// ASan and TSan map shadow memory and keep freed blocks in quarantine: tests
// of address-space limits and of memory that must come back skip there.
#if defined(GORO_TEST_SANITIZED_MEMORY)
inline constexpr bool kSanitizedMemory = true;
#else
inline constexpr bool kSanitizedMemory = false;
#endif
#define SKIP_UNDER_MEMORY_SANITIZER(what)                                                       \
  do {                                                                                         \
    if (::goro_test::kSanitizedMemory) {                                                       \
      GTEST_SKIP() << "ASan/TSan build: its shadow memory and quarantine make " what            \
                   << " meaningless (docs/sanitizers.md)";                                     \
    }                                                                                          \
  } while (0)
#define SKIP_WITHOUT_ASYNC_PREEMPTION()                                                      \
  do {                                                                                       \
    if (::goro_test::kTsanBuild) {                                                           \
      GTEST_SKIP() << "ThreadSanitizer build: async preemption is off (docs/sanitizers.md)"; \
    }                                                                                        \
  } while (0)

// For printing uint64_t with %llu.
inline unsigned long long U(uint64_t v) { return static_cast<unsigned long long>(v); }

// The default limit for one test's waits. Generous: the machine is noisy.
inline constexpr absl::Duration kLimit = absl::Seconds(60);

// The options every test binary starts its runtime with. Options are read once
// per process, so every Run in a binary passes these (anything else runs in a
// subprocess).
goro::Options TestOptions();

// Ends the process (after printing `what` and the current test's name on
// stderr) unless destroyed within `limit`.
class Watchdog {
 public:
  explicit Watchdog(absl::Duration limit = kLimit, std::string what = "");
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

 private:
  absl::Notification done_;
  std::thread thread_;
};

// goro::Run(fn, TestOptions()) under a Watchdog.
void RunBounded(absl::AnyInvocable<void() &&> fn, absl::Duration limit = kLimit);

// Starts the runtime with TestOptions() (a Run of an empty goroutine).
void StartRuntime();

// Starts `fn` with goro::Go and blocks the calling *thread* (not via goro)
// until it returns; the process ends if that takes longer than `limit`.
void GoAndWait(absl::AnyInvocable<void() &&> fn, absl::Duration limit = kLimit);

// Polls `cond` every millisecond until it holds or `limit` passes; returns its
// last value. Sleeps with goro::SleepFor on a goroutine, std::this_thread off one.
bool Eventually(const std::function<bool()>& cond, absl::Duration limit = absl::Seconds(20));

// Sleeps without going through goro on a plain thread; goro::SleepFor on a goroutine.
void Pause(absl::Duration d);

// Monotonic clock (CLOCK_MONOTONIC, the clock goro's timers use).
inline std::chrono::steady_clock::time_point Now() { return std::chrono::steady_clock::now(); }
inline absl::Duration Since(std::chrono::steady_clock::time_point t) {
  return absl::FromChrono(std::chrono::steady_clock::now() - t);
}

// The kernel thread id of the caller.
int64_t ThreadId();

// Queues `sig` to the calling thread as pthread_sigqueue would
// (rt_tgsigqueueinfo, si_code SI_QUEUE from this process, si_value `value`):
// a SIGURG of someone else's, or one of sysmon's form. Delivered before the
// call returns unless the thread blocks it. Returns 0, or the errno.
int QueueSignalToThisThread(int sig, void* value = nullptr);

// Busy-waits for about `d` without calling into goro.
void Spin(absl::Duration d);

// Starts `n` goroutines, one at a time, that each wire themselves to their
// thread (LockOSThread) and wait there, so that each needs a thread of its
// own and the runtime must start new ones, while the calling goroutine or
// thread waits for each to report; returns how many of them found their
// thread's working directory to be `dir`. Releases them and waits for them
// to finish before it returns.
int WiredGoroutinesWithCwd(const std::string& dir, int n);

// A directory other than the calling thread's working directory ("/" or
// "/tmp"), and that working directory.
std::string OtherDirectory();
std::string WorkingDirectory();

// Prints the runtime's counters on stderr, labelled `when` (a child's
// diagnostics, shown when its check fails).
void PrintStats(const char* when);

// What a program run by RunCapturing did.
struct CapturedRun {
  int exit_code = -1;  // or 128 + the signal that ended it
  std::string out;
  std::string err;
};

// The exit status (or 128 + the signal that ended it) and the stdout of
// `command`, run by /bin/sh; the command redirects stderr (2>&1) and bounds
// its own time (coreutils' timeout) as it needs.
struct ShellRun {
  int exit_code = -1;
  std::string text;
};
ShellRun RunShell(const std::string& command);

// This process's environment (NAME=value strings) without the variables
// named in `drop`.
std::vector<std::string> EnvironmentWithout(std::initializer_list<const char*> drop);

// Runs argv[0] with the arguments argv[1...] and the environment `env`, with
// the CPU affinity `affinity` if not null (as `taskset` would), and captures
// its stdout and stderr. A program still running after `limit` is killed
// (and the test fails).
CapturedRun RunCapturing(const std::vector<std::string>& argv, const std::vector<std::string>& env,
                         const cpu_set_t* affinity = nullptr, absl::Duration limit = absl::Seconds(30));

}  // namespace goro_test

#endif  // GORO_TESTS_TEST_UTIL_H_
