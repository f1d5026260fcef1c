// Goroutine dumps: SIGQUIT (Ctrl-\\) prints every goroutine and exits with
// status 2, like Go; goro::DumpGoroutines prints the same to a stream.
//
//   goroutine 1 [chan receive, 12 s]:
//   goroutine 7 [running]:
//   goroutine 9 [sleep, 3 ms]:
//
// The SIGQUIT path runs in a signal handler while other threads keep
// running: it reads goroutine records racily, formats into a stack buffer and
// writes with write(2). Backtraces are not printed yet (they need libunwind;
// see the note on issue 5).
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include <ostream>

#include "core/fatal.h"
#include "core/runtime.h"

namespace goro::internal {

namespace {

size_t Append(char* buf, size_t n, size_t cap, const char* s) {
  while (*s != '\0' && n < cap) buf[n++] = *s++;
  return n;
}

size_t AppendInt(char* buf, size_t n, size_t cap, int64_t v) {
  char tmp[24];
  int k = 0;
  uint64_t u = v < 0 ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
  do {
    tmp[k++] = static_cast<char>('0' + u % 10);
    u /= 10;
  } while (u != 0);
  if (v < 0 && n < cap) buf[n++] = '-';
  while (k > 0 && n < cap) buf[n++] = tmp[--k];
  return n;
}

const char* StateName(GStatus s) {
  switch (s) {
    case GStatus::kRunnable: return "runnable";
    case GStatus::kRunning: return "running";
    case GStatus::kWaiting: return "waiting";
    case GStatus::kSyscall: return "syscall";
    default: return nullptr;  // free or finished: not shown
  }
}

size_t AppendDuration(char* buf, size_t n, size_t cap, int64_t ns) {
  if (ns >= 120LL * 1000000000) return Append(buf, AppendInt(buf, n, cap, ns / 60000000000), cap, " minutes");
  if (ns >= 1000000000) return Append(buf, AppendInt(buf, n, cap, ns / 1000000000), cap, " s");
  return Append(buf, AppendInt(buf, n, cap, ns / 1000000), cap, " ms");
}

// Formats one goroutine's line; returns its length (0: not shown).
size_t FormatG(const G* g, int64_t now, char* buf, size_t cap) {
  GStatus st = g->status.load(std::memory_order_relaxed);
  const char* name = StateName(st);
  if (name == nullptr) return 0;
  size_t n = Append(buf, 0, cap, "goroutine ");
  n = AppendInt(buf, n, cap, g->id);
  n = Append(buf, n, cap, " [");
  if (st == GStatus::kWaiting && g->wait_reason != WaitReason::kNone) {
    n = Append(buf, n, cap, WaitReasonString(g->wait_reason));
    int64_t since = g->wait_since;
    if (since > 0 && now > since) {
      n = Append(buf, n, cap, ", ");
      n = AppendDuration(buf, n, cap, now - since);
    }
  } else {
    n = Append(buf, n, cap, name);
  }
  if (g->locked_m != nullptr) n = Append(buf, n, cap, ", locked to thread");
  n = Append(buf, n, cap, "]:\n");
  return n;
}

void QuitHandler(int) {
  WriteStderr("SIGQUIT: quit\n\n");
  DumpGoroutinesToFd(STDERR_FILENO);
  _exit(2);
}

}  // namespace

void DumpGoroutinesToFd(int fd) {
  int64_t now = Nanotime();
  for (G* g = sched.allgs.load(std::memory_order_acquire); g != nullptr; g = g->alllink) {
    char line[160];
    size_t n = FormatG(g, now, line, sizeof line);
    if (n > 0) {
      ssize_t w = write(fd, line, n);
      (void)w;
    }
  }
}

void InstallQuitHandler() {
  struct sigaction cur;
  if (sigaction(SIGQUIT, nullptr, &cur) != 0) return;
  if ((cur.sa_flags & SA_SIGINFO) || cur.sa_handler != SIG_DFL) return;  // the program's own choice
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = QuitHandler;
  sa.sa_flags = SA_ONSTACK | SA_RESTART;
  sigfillset(&sa.sa_mask);
  sigaction(SIGQUIT, &sa, nullptr);
}

}  // namespace goro::internal

namespace goro {

void DumpGoroutines(std::ostream& out) {
  int64_t now = internal::Nanotime();
  for (internal::G* g = internal::sched.allgs.load(std::memory_order_acquire); g != nullptr; g = g->alllink) {
    char line[160];
    size_t n = internal::FormatG(g, now, line, sizeof line);
    if (n > 0) out.write(line, static_cast<std::streamsize>(n));
  }
}

}  // namespace goro
