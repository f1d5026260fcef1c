// Goroutine dumps: SIGQUIT (Ctrl-\\) prints every goroutine and exits with
// status 2, like Go; goro::DumpGoroutines prints the same to a stream.
//
//   goroutine 1 [chan receive, 12 s]:
//   goroutine 7 [running]:
//   goroutine 9 [sleep, 3 ms]:
//
// Each parked goroutine's line is followed by its backtrace, walked by
// libunwind from the registers its last switch saved (arch::SwitchFrame).
// libunwind is dlopen'ed with RTLD_LOCAL at the first dump rather than linked:
// Debian's libunwind exports _Unwind_* too, and linked in it would take over
// C++ exception unwinding from libgcc (DESIGN.md, "Tracebacks").
//
// The SIGQUIT path runs in a signal handler while other threads keep
// running: it reads goroutine records racily and exits afterwards, so it may
// do what a handler should not (dlopen, demangling), like Go's.
#include <cxxabi.h>
#include <dlfcn.h>
#include <signal.h>
#include <ucontext.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <ostream>

#include <cstdlib>

#include "core/fatal.h"
#include "core/runtime.h"

#define UNW_LOCAL_ONLY
#include <libunwind.h>  // types only; the functions come from dlopen

namespace goro::internal {

namespace {

struct Unwinder {
  int (*init_local)(unw_cursor_t*, unw_context_t*) = nullptr;
  int (*step)(unw_cursor_t*) = nullptr;
  int (*get_proc_name)(unw_cursor_t*, char*, size_t, unw_word_t*) = nullptr;
  int (*get_reg)(unw_cursor_t*, unw_regnum_t, unw_word_t*) = nullptr;
};

const Unwinder& GetUnwinder() {
  static const Unwinder u = [] {
    Unwinder w;
    void* h = dlopen("libunwind.so.8", RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) return w;
    w.init_local = reinterpret_cast<decltype(w.init_local)>(dlsym(h, "_ULx86_64_init_local"));
    w.step = reinterpret_cast<decltype(w.step)>(dlsym(h, "_ULx86_64_step"));
    w.get_proc_name = reinterpret_cast<decltype(w.get_proc_name)>(dlsym(h, "_ULx86_64_get_proc_name"));
    w.get_reg = reinterpret_cast<decltype(w.get_reg)>(dlsym(h, "_ULx86_64_get_reg"));
    if (!w.init_local || !w.step || !w.get_proc_name || !w.get_reg) w = Unwinder{};
    return w;
  }();
  return u;
}

// Writes "\t<function>+0x<offset>\n" lines for a parked goroutine, walked from
// the registers its last switch saved. Calls out(line, length) per line.
template <typename Out>
GORO_NO_SANITIZE_THREAD void BacktraceParked(const G* g, Out out) {
  const Unwinder& u = GetUnwinder();
  if (u.init_local == nullptr || g->stack.hi == 0 || g->ctx.sp == nullptr) return;
  auto* f = static_cast<const arch::SwitchFrame*>(g->ctx.sp);
  unw_context_t uc;
  memset(&uc, 0, sizeof uc);
  // The state just after SwitchContext returned into its caller: the caller's
  // PC, its stack pointer above the popped frame, and its callee-saved
  // registers (all that DWARF unwinding needs).
  uc.uc_mcontext.gregs[REG_RIP] = static_cast<greg_t>(f->rip);
  uc.uc_mcontext.gregs[REG_RSP] = static_cast<greg_t>(reinterpret_cast<uintptr_t>(f) + sizeof *f);
  uc.uc_mcontext.gregs[REG_RBP] = static_cast<greg_t>(f->rbp);
  uc.uc_mcontext.gregs[REG_RBX] = static_cast<greg_t>(f->rbx);
  uc.uc_mcontext.gregs[REG_R12] = static_cast<greg_t>(f->r12);
  uc.uc_mcontext.gregs[REG_R13] = static_cast<greg_t>(f->r13);
  uc.uc_mcontext.gregs[REG_R14] = static_cast<greg_t>(f->r14);
  uc.uc_mcontext.gregs[REG_R15] = static_cast<greg_t>(f->r15);
  unw_cursor_t cur;
  if (u.init_local(&cur, &uc) != 0) return;
  for (int depth = 0; depth < 32; ++depth) {
    unw_word_t sp = 0;
    u.get_reg(&cur, UNW_REG_SP, &sp);
    if (sp < g->stack.lo || sp > g->stack.hi) break;  // left the stack: stop
    char name[256];
    unw_word_t off = 0;
    char line[400];
    size_t n = 0;
    if (u.get_proc_name(&cur, name, sizeof name, &off) == 0) {
      int status = -1;
      char* dem = abi::__cxa_demangle(name, nullptr, nullptr, &status);
      const char* shown = status == 0 && dem != nullptr ? dem : name;
      n = static_cast<size_t>(snprintf(line, sizeof line, "\t%.300s+0x%lx\n", shown,
                                       static_cast<unsigned long>(off)));
      free(dem);
    } else {
      n = static_cast<size_t>(snprintf(line, sizeof line, "\t?\n"));
    }
    out(line, std::min(n, sizeof line - 1));
    if (u.step(&cur) <= 0) break;
  }
}

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
GORO_NO_SANITIZE_THREAD size_t FormatG(const G* g, int64_t now, char* buf, size_t cap) {
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

// Writes every existing goroutine's line, and a backtrace for each parked
// one, through out(chars, length). A waiting goroutine stays put while its
// stack is walked unless something readies it meanwhile; a runnable one may
// be picked up by another thread at any moment, so it is walked only when
// the process is about to exit anyway (walk_runnable, the SIGQUIT path).
// Reads goroutine records racily (see the top of this file): not for TSan.
template <typename Out>
GORO_NO_SANITIZE_THREAD void DumpAll(Out out, bool walk_runnable) {
  int64_t now = Nanotime();
  for (G* g = sched.allgs.load(std::memory_order_acquire); g != nullptr; g = g->alllink) {
    char line[160];
    size_t n = FormatG(g, now, line, sizeof line);
    if (n == 0) continue;
    out(line, n);
    GStatus st = g->status.load(std::memory_order_acquire);
    if (st == GStatus::kWaiting || (walk_runnable && st == GStatus::kRunnable)) BacktraceParked(g, out);
    out("\n", 1);
  }
}

void QuitHandler(int) {
  WriteStderr("SIGQUIT: quit\n\n");
  DumpGoroutinesToFd(STDERR_FILENO);
  _exit(2);
}

}  // namespace

void DumpGoroutinesToFd(int fd) {
  auto out = [fd](const char* s, size_t n) {
    ssize_t w = write(fd, s, n);
    (void)w;
  };
  DumpAll(out, /*walk_runnable=*/true);
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
  internal::DumpAll([&out](const char* s, size_t n) { out.write(s, static_cast<std::streamsize>(n)); },
                    /*walk_runnable=*/false);
}

}  // namespace goro
