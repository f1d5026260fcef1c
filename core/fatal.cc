#include "core/fatal.h"

#include <sys/syscall.h>
#include <unistd.h>

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

void Fatal(absl::string_view msg) {
  WriteStderr(absl::StrCat("fatal error: ", msg, "\n"));
  std::abort();
}

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
