#include "core/fatal.h"

#include <stdarg.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
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

// "fatal error: " + a + b + "\n" in one writev, so that the line is not
// interleaved with other threads' output and nothing is allocated.
[[noreturn]] void FatalLine(absl::string_view a, absl::string_view b) {
  static const char kPrefix[] = "fatal error: ";
  iovec iov[4] = {{const_cast<char*>(kPrefix), sizeof kPrefix - 1},
                  {const_cast<char*>(a.data()), a.size()},
                  {const_cast<char*>(b.data()), b.size()},
                  {const_cast<char*>("\n"), 1}};
  ssize_t want = static_cast<ssize_t>(iov[0].iov_len + a.size() + b.size() + 1);
  if (::writev(STDERR_FILENO, iov, 4) != want) {  // short or failed: try piecewise
    WriteStderr(absl::string_view(kPrefix, sizeof kPrefix - 1));
    WriteStderr(a);
    WriteStderr(b);
    WriteStderr("\n");
  }
  std::abort();
}

}  // namespace

void Fatal(absl::string_view msg) { FatalLine(msg, ""); }

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
  FatalLine(who, msg);
}

void FatalF(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (n < 0) n = 0;
  FatalLine(absl::string_view(buf, std::min<size_t>(static_cast<size_t>(n), sizeof buf - 1)), "");
}

}  // namespace goro::internal
