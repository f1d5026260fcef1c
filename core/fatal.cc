#include "core/fatal.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>

#include "core/runtime.h"

namespace goro::internal {

void WriteStderr(absl::string_view msg) {
  while (!msg.empty()) {
    ssize_t n = ::write(STDERR_FILENO, msg.data(), msg.size());
    if (n <= 0) return;
    msg.remove_prefix(static_cast<size_t>(n));
  }
}

namespace {

// The thread that is reporting a fatal error, set before its line is
// written. Another one that fails meanwhile prints its line and waits, so
// that the first report is not cut short by its abort; a fatal error inside
// the report aborts at once. An exit() begun meanwhile waits too
// (AwaitFatalReportAtExit).
std::atomic<pid_t> fatal_tid{0};

// Whether thread `tid` belongs to this process: not so in a child forked
// while another thread of its parent was reporting, which inherits
// fatal_tid but not the thread.
bool ThreadOfThisProcess(pid_t tid) { return ::syscall(SYS_tgkill, getpid(), tid, 0) == 0; }

// How long a thread waits for another's report to end in its abort: the
// report may itself hang (a lock held by the thread that failed).
constexpr time_t kReportWaitSeconds = 5;

// Sleeps up to kReportWaitSeconds, the other thread's abort ending the
// process meanwhile, as a rule; signals that interrupt the sleep do not
// shorten it.
void WaitForOtherReport() {
  struct timespec wait = {kReportWaitSeconds, 0};
  while (nanosleep(&wait, &wait) != 0 && errno == EINTR) {
  }
}

enum class Trace { kCaller, kSignal, kAll };

// "fatal error: " + a + b + "\n" in one writev, so that the line is not
// interleaved with other threads' output and nothing is allocated; then the
// backtrace `trace` asks for; then abort.
[[noreturn]] void Die(absl::string_view a, absl::string_view b, Trace trace, void* uctx,
                      const G* signal_g = nullptr) {
  static const char kPrefix[] = "fatal error: ";
  iovec iov[4] = {{const_cast<char*>(kPrefix), sizeof kPrefix - 1},
                  {const_cast<char*>(a.data()), a.size()},
                  {const_cast<char*>(b.data()), b.size()},
                  {const_cast<char*>("\n"), 1}};
  // Claimed before the line is written: an exit() that could see the line
  // sees the claim, and waits for this report.
  pid_t self = static_cast<pid_t>(::syscall(SYS_gettid));
  pid_t first = 0;
  bool reporter = fatal_tid.compare_exchange_strong(first, self);
  if (!reporter && first != self && !ThreadOfThisProcess(first)) {
    reporter = fatal_tid.compare_exchange_strong(first, self);
  }
  ssize_t want = static_cast<ssize_t>(iov[0].iov_len + a.size() + b.size() + 1);
  if (::writev(STDERR_FILENO, iov, 4) != want) {  // short or failed: try piecewise
    WriteStderr(absl::string_view(kPrefix, sizeof kPrefix - 1));
    WriteStderr(a);
    WriteStderr(b);
    WriteStderr("\n");
  }
  if (reporter) {
    if (trace == Trace::kAll) {
      WriteStderr("\n");
      DumpGoroutinesToFd(STDERR_FILENO);
    } else {
      WriteTraceback(trace == Trace::kSignal ? uctx : nullptr, signal_g);
    }
  } else if (first != self) {
    WaitForOtherReport();
  }
  signal(SIGABRT, SIG_DFL);
  std::abort();
}

// Registered with atexit before any default-priority static constructor of
// this image has run (and so before the program's, when goro is a shared
// library), it is one of the last things exit() runs before _exit: a report
// that began during the handlers and destructors that exit() ran first ends
// in its abort here, not in exit's status.
__attribute__((constructor(101))) void RegisterFatalReportWaitAtExit() {
  std::atexit(AwaitFatalReportAtExit);
}

}  // namespace

void AwaitFatalReportAtExit() {
  pid_t reporter = fatal_tid.load(std::memory_order_acquire);
  if (reporter == 0 || reporter == static_cast<pid_t>(::syscall(SYS_gettid)) || !ThreadOfThisProcess(reporter)) {
    return;
  }
  WaitForOtherReport();
  signal(SIGABRT, SIG_DFL);
  std::abort();
}

void Fatal(absl::string_view msg) { Die(msg, "", Trace::kCaller, nullptr); }
void FatalDumpAll(absl::string_view msg) { Die(msg, "", Trace::kAll, nullptr); }
void FatalSignal(absl::string_view msg, void* uctx, const G* g) { Die(msg, "", Trace::kSignal, uctx, g); }

void FatalG(absl::string_view msg) {
  G* g = CurrentGoroutine();
  M* m = CurrentM();
  char who[64];
  if (g != nullptr) {
    snprintf(who, sizeof who, "goroutine %lld: ", static_cast<long long>(g->id));
  } else if (m != nullptr) {
    snprintf(who, sizeof who, "runtime thread M%lld: ", static_cast<long long>(m->id));
  } else {
    snprintf(who, sizeof who, "thread %ld (not a goroutine): ", static_cast<long>(::syscall(SYS_gettid)));
  }
  Die(who, msg, Trace::kCaller, nullptr);
}

void FatalF(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (n < 0) n = 0;
  Die(absl::string_view(buf, std::min<size_t>(static_cast<size_t>(n), sizeof buf - 1)), "", Trace::kCaller,
      nullptr);
}

}  // namespace goro::internal
