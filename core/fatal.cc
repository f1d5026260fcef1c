#include "core/fatal.h"

#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
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

// The thread that is reporting a fatal error. Another one that fails
// meanwhile prints its line and waits, so that the first report is not cut
// short by its abort; a fatal error inside the report aborts at once.
std::atomic<pid_t> fatal_tid{0};

enum class Trace { kCaller, kSignal, kAll };

[[noreturn]] void Die(absl::string_view msg, Trace trace, void* uctx) {
  // One write, so that the line stays whole beside other threads' output; no
  // allocation, because the failure may be that memory ran out.
  char line[1024];
  constexpr absl::string_view kPrefix = "fatal error: ";
  size_t n = std::min(msg.size(), sizeof line - kPrefix.size() - 1);
  memcpy(line, kPrefix.data(), kPrefix.size());
  memcpy(line + kPrefix.size(), msg.data(), n);
  line[kPrefix.size() + n] = '\n';
  WriteStderr(absl::string_view(line, kPrefix.size() + n + 1));
  pid_t self = static_cast<pid_t>(::syscall(SYS_gettid));
  pid_t first = 0;
  if (fatal_tid.compare_exchange_strong(first, self)) {
    if (trace == Trace::kAll) {
      WriteStderr("\n");
      DumpGoroutinesToFd(STDERR_FILENO);
    } else {
      WriteTraceback(trace == Trace::kSignal ? uctx : nullptr);
    }
  } else if (first != self) {
    struct timespec wait = {5, 0};  // bounded: the first report may itself hang
    nanosleep(&wait, nullptr);
  }
  signal(SIGABRT, SIG_DFL);
  std::abort();
}

}  // namespace

void Fatal(absl::string_view msg) { Die(msg, Trace::kCaller, nullptr); }
void FatalDumpAll(absl::string_view msg) { Die(msg, Trace::kAll, nullptr); }
void FatalSignal(absl::string_view msg, void* uctx) { Die(msg, Trace::kSignal, uctx); }

void FatalG(absl::string_view msg) {
  G* g = CurrentGoroutine();
  M* m = CurrentM();
  std::string who;
  if (g != nullptr) {
    who = absl::StrCat("goroutine ", g->id);
  } else if (m != nullptr) {
    who = absl::StrCat("runtime thread M", m->id);
  } else {
    who = absl::StrCat("thread ", static_cast<long>(::syscall(SYS_gettid)), " (not a goroutine)");
  }
  Fatal(absl::StrCat(who, ": ", msg));
}

}  // namespace goro::internal
