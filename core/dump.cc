// Goroutine dumps: SIGQUIT (Ctrl-\\) prints every goroutine and exits with
// status 2, like Go; goro::DumpGoroutines prints the same to a stream.
//
//   goroutine 1 [chan receive, 12 s]:
//   goroutine 7 [running]:
//   goroutine 9 [sleep, 3 ms]:
//
// Each parked goroutine's line is followed by its backtrace, walked by
// libunwind from the registers its last switch saved (arch::SwitchFrame).
// libunwind is dlopen'ed with RTLD_LOCAL when the runtime starts, not linked:
// Debian's libunwind exports _Unwind_* too, and linked in it would take over
// C++ exception unwinding from libgcc (DESIGN.md, "Tracebacks").
//
// The SIGQUIT path runs in a signal handler while other threads keep
// running: it reads goroutine records racily and exits afterwards, so it may
// do what a handler should not (dlopen, demangling), like Go's. Looking up
// names and demangling them allocate, though, and a handler may have
// interrupted the allocator on its own thread, whose lock that thread then
// holds: reports made from a handler in that state print each frame as its
// object and offset, which addr2line turns into a function and line.
#include <cxxabi.h>
#include <dlfcn.h>
#include <link.h>
#include <signal.h>
#include <ucontext.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <iterator>
#include <atomic>
#include <cstdio>
#include <ostream>

#include <cstdlib>

#include "arch/cpu.h"
#include "core/fatal.h"
#include "core/runtime.h"

#define UNW_LOCAL_ONLY
#include <libunwind.h>  // types only; the functions come from dlopen

namespace goro::internal {

namespace {

struct Unwinder {
  int (*init_local)(unw_cursor_t*, unw_context_t*) = nullptr;
  int (*init_local2)(unw_cursor_t*, unw_context_t*, int) = nullptr;
  int (*getcontext)(unw_context_t*) = nullptr;
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
    w.init_local2 = reinterpret_cast<decltype(w.init_local2)>(dlsym(h, "_ULx86_64_init_local2"));
    w.getcontext = reinterpret_cast<decltype(w.getcontext)>(dlsym(h, "_Ux86_64_getcontext"));
    w.step = reinterpret_cast<decltype(w.step)>(dlsym(h, "_ULx86_64_step"));
    w.get_proc_name = reinterpret_cast<decltype(w.get_proc_name)>(dlsym(h, "_ULx86_64_get_proc_name"));
    w.get_reg = reinterpret_cast<decltype(w.get_reg)>(dlsym(h, "_ULx86_64_get_reg"));
    if (!w.init_local || !w.init_local2 || !w.getcontext || !w.step || !w.get_proc_name || !w.get_reg) {
      w = Unwinder{};
    }
    return w;
  }();
  return u;
}

constexpr int kMaxFrames = 64;

// Set by a report made from a signal handler that interrupted the allocator
// on this thread (see the top of this file): WalkFrames must not look up
// names (libunwind allocates to read the symbol table) or demangle them.
__attribute__((tls_model("initial-exec"))) thread_local bool tls_no_names = false;

// The code of the allocator's entry points, found when the runtime starts.
// Its internal functions have no exported names, but they are reached only
// through these, so a thread inside the allocator has one of them near the
// top of its stack.
struct CodeRange {
  uintptr_t lo = 0, hi = 0;
};
CodeRange allocator_code[8];

void FindAllocatorCode() {
  void* const entries[] = {reinterpret_cast<void*>(&malloc),        reinterpret_cast<void*>(&free),
                           reinterpret_cast<void*>(&calloc),        reinterpret_cast<void*>(&realloc),
                           reinterpret_cast<void*>(&posix_memalign), reinterpret_cast<void*>(&aligned_alloc)};
  static_assert(std::size(entries) <= std::size(allocator_code));
  for (size_t i = 0; i < std::size(entries); ++i) {
    Dl_info info;
    void* entry = nullptr;
    if (dladdr1(entries[i], &info, &entry, RTLD_DL_SYMENT) == 0 || entry == nullptr) continue;
    const auto* sym = static_cast<const ElfW(Sym)*>(entry);
    auto lo = reinterpret_cast<uintptr_t>(info.dli_saddr);
    allocator_code[i] = CodeRange{lo, lo + sym->st_size};
  }
}

// Whether the code a signal interrupted on this thread is inside the
// allocator. Only stepping and reading registers: no names.
bool InterruptedAllocator(void* uctx) {
  const Unwinder& u = GetUnwinder();
  if (u.init_local2 == nullptr || uctx == nullptr) return false;
  unw_cursor_t cur;
  if (u.init_local2(&cur, static_cast<unw_context_t*>(uctx), UNW_INIT_SIGNAL_FRAME) != 0) return false;
  for (int depth = 0; depth < kMaxFrames; ++depth) {
    unw_word_t ip = 0;
    u.get_reg(&cur, UNW_REG_IP, &ip);
    for (const CodeRange& r : allocator_code) {
      if (ip >= r.lo && ip < r.hi) return true;
    }
    if (u.step(&cur) <= 0) break;
  }
  return false;
}

// Decides whether this thread's report may look up names (from the context
// of the signal it is made in), and says so in the report when it may not.
template <typename Out>
void DecideNames(void* uctx, Out out) {
  tls_no_names = InterruptedAllocator(uctx);
  if (tls_no_names) {
    const char kNote[] =
        "\t(no function names: the signal interrupted the allocator on this thread; "
        "addr2line -f -C -e OBJECT OFFSET gives them)\n";
    out(kNote, sizeof kNote - 1);
  }
}

// The frames of the fatal-error machinery itself, left off the top of a
// fatal error's backtrace so that it starts where the program failed.
bool ReportingFrame(const char* name) {
  static constexpr const char* kPrefixes[] = {
      "goro::internal::WriteTraceback",   "goro::internal::(anonymous namespace)::Die",
      "goro::internal::Fatal",            "goro::internal::(anonymous namespace)::OnTerminate",
      "std::rethrow_exception",           "std::terminate",
      "__cxxabiv1::",
  };
  for (const char* p : kPrefixes) {
    if (strncmp(name, p, strlen(p)) == 0) return true;
  }
  return false;
}

// Writes "\t<function>+0x<offset>\n" lines through out(line, length) from
// an initialized cursor, at most max_frames of them (then a line saying
// more were left out), stopping where the stack pointer leaves [lo, hi]
// (hi == 0: no bound, for thread stacks). skip_reporting: leave off leading
// frames of the fatal-error machinery.
template <typename Out>
void WalkFrames(unw_cursor_t* cur, uintptr_t lo, uintptr_t hi, int max_frames, Out out,
                bool skip_reporting = false) {
  const Unwinder& u = GetUnwinder();
  for (int depth = 0;; ++depth) {
    unw_word_t sp = 0;
    u.get_reg(cur, UNW_REG_SP, &sp);
    if (hi != 0 && (sp < lo || sp > hi)) break;  // left the stack: stop
    if (depth == max_frames) {
      const char kElided[] = "\t...additional frames elided...\n";
      out(kElided, sizeof kElided - 1);
      break;
    }
    char name[256];
    unw_word_t off = 0;
    char line[400];
    size_t n = 0;
    if (!tls_no_names && u.get_proc_name(cur, name, sizeof name, &off) == 0) {
      int status = -1;
      char* dem = abi::__cxa_demangle(name, nullptr, nullptr, &status);
      const char* shown = status == 0 && dem != nullptr ? dem : name;
      if (skip_reporting && ReportingFrame(shown)) {
        free(dem);
        --depth;
        if (u.step(cur) <= 0) break;
        continue;
      }
      skip_reporting = false;
      n = static_cast<size_t>(snprintf(line, sizeof line, "\t%.300s+0x%lx\n", shown,
                                       static_cast<unsigned long>(off)));
      free(dem);
    } else {
      // No symbol (libunwind could not read the object, as when memory ran
      // out, or must not try): the object and offset, which addr2line turns
      // into a line.
      unw_word_t ip = 0;
      u.get_reg(cur, UNW_REG_IP, &ip);
      Dl_info info;
      if (dladdr(reinterpret_cast<void*>(ip), &info) != 0 && info.dli_fname != nullptr) {
        auto off_in_object = static_cast<unsigned long>(ip - reinterpret_cast<uintptr_t>(info.dli_fbase));
        n = static_cast<size_t>(
            snprintf(line, sizeof line, "\t?? (%.300s+0x%lx)\n", info.dli_fname, off_in_object));
      } else {
        n = static_cast<size_t>(
            snprintf(line, sizeof line, "\t?? (pc 0x%lx)\n", static_cast<unsigned long>(ip)));
      }
    }
    out(line, std::min(n, sizeof line - 1));
    if (u.step(cur) <= 0) break;
  }
}

// A parked goroutine's backtrace, walked from the registers its last switch
// saved.
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
  WalkFrames(&cur, g->stack.lo, g->stack.hi, kMaxFrames, out);
}

// The backtrace of the code a signal interrupted on this thread, from the
// handler's context. g: the goroutine it interrupted (bounds the walk), or
// nullptr for a thread stack.
template <typename Out>
void BacktraceSignal(const G* g, void* uctx, Out out) {
  const Unwinder& u = GetUnwinder();
  if (u.init_local2 == nullptr || uctx == nullptr) return;
  unw_cursor_t cur;
  if (u.init_local2(&cur, static_cast<unw_context_t*>(uctx), UNW_INIT_SIGNAL_FRAME) != 0) return;
  uintptr_t lo = g != nullptr ? g->stack.lo - kStackGuardSize : 0;  // a fault may sit in the guard
  WalkFrames(&cur, lo, g != nullptr ? g->stack.hi : 0, kMaxFrames, out);
}

// The calling thread's backtrace, from its caller's frame (or from the first
// frame outside the fatal-error machinery).
template <typename Out>
__attribute__((noinline)) void BacktraceHere(const G* g, Out out, bool skip_reporting = false) {
  const Unwinder& u = GetUnwinder();
  if (u.getcontext == nullptr) return;
  unw_context_t uc;
  unw_cursor_t cur;
  if (u.getcontext(&uc) != 0 || u.init_local(&cur, &uc) != 0) return;
  if (u.step(&cur) <= 0) return;  // this function's own frame
  WalkFrames(&cur, g != nullptr ? g->stack.lo : 0, g != nullptr ? g->stack.hi : 0, kMaxFrames, out,
             skip_reporting);
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

size_t AppendDuration(char* buf, size_t n, size_t cap, int64_t ns) {
  if (ns >= 120LL * 1000000000) return Append(buf, AppendInt(buf, n, cap, ns / 60000000000), cap, " minutes");
  if (ns >= 1000000000) return Append(buf, AppendInt(buf, n, cap, ns / 1000000000), cap, " s");
  return Append(buf, AppendInt(buf, n, cap, ns / 1000000), cap, " ms");
}

// Formats one goroutine's line; returns its length (0: not shown).
GORO_NO_SANITIZE_THREAD size_t FormatG(const G* g, int64_t now, char* buf, size_t cap) {
  GStatus st = g->status.load(std::memory_order_relaxed);
  if (st == GStatus::kIdle || st == GStatus::kDead) return 0;  // free or finished: not shown
  const char* name = GStatusString(st);
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

// Who is dumping, which decides what may be walked:
//   kFromCode  goro::DumpGoroutines: the process goes on, so only goroutines
//              that cannot move meanwhile are walked (waiting ones, and the
//              caller itself);
//   kFatal     a fatal error: the process is about to abort; runnable ones
//              are walked too;
//   kSigquit   SIGQUIT: as kFatal, and each goroutine running (or blocked in
//              a system call) on another thread is walked by that thread,
//              from the context of a SIGQUIT sent to it.
enum class DumpMode { kFromCode, kFatal, kSigquit };

// A SIGQUIT dump asks one thread at a time for its running goroutine's
// backtrace: it stores the thread's M here and signals it; the thread's
// handler writes the backtrace to trace_fd and clears trace_target.
std::atomic<M*> trace_target{nullptr};
int trace_fd = -1;
std::atomic<bool> sigquit_dumping{false};

struct FdOut {
  int fd;
  void operator()(const char* s, size_t n) const {
    ssize_t w = write(fd, s, n);
    (void)w;
  }
};

// The backtrace of g, running on m (another thread), by that thread.
void AskThreadForBacktrace(M* m, int fd) {
  trace_fd = fd;
  trace_target.store(m, std::memory_order_release);
  if (syscall(SYS_tgkill, getpid(), m->tid, SIGQUIT) != 0) {
    trace_target.store(nullptr, std::memory_order_relaxed);
    return;
  }
  for (int i = 0; i < 500 && trace_target.load(std::memory_order_acquire) != nullptr; ++i) {
    struct timespec ms = {0, 1000 * 1000};
    nanosleep(&ms, nullptr);
  }
  if (trace_target.exchange(nullptr, std::memory_order_acq_rel) != nullptr) {
    FdOut{fd}("\t(no backtrace: its thread did not answer within 500 ms)\n", 57);
  }
}

// Writes every existing goroutine's line, and the backtrace of each that
// `mode` allows, through out(chars, length). A waiting goroutine stays put
// while its stack is walked unless something readies it meanwhile.
// uctx: the signal context of the calling thread (kSigquit), or nullptr.
// Reads goroutine records racily (see the top of this file): not for TSan.
template <typename Out>
GORO_NO_SANITIZE_THREAD void DumpAll(Out out, DumpMode mode, void* uctx = nullptr, int fd = -1) {
  int64_t now = Nanotime();
  M* self = CurrentM();
  G* self_g = CurrentGoroutine();
  for (G* g = sched.allgs.load(std::memory_order_acquire); g != nullptr; g = g->alllink) {
    char line[160];
    size_t n = FormatG(g, now, line, sizeof line);
    if (n == 0) continue;
    out(line, n);
    GStatus st = g->status.load(std::memory_order_acquire);
    if (st == GStatus::kWaiting || (mode != DumpMode::kFromCode && st == GStatus::kRunnable)) {
      BacktraceParked(g, out);
    } else if (st == GStatus::kRunning || st == GStatus::kSyscall) {
      M* m = MRunning(g);
      if (mode == DumpMode::kSigquit && m != nullptr && m == self) {
        BacktraceSignal(g, uctx, out);
      } else if (g == self_g) {
        BacktraceHere(g, out);
      } else if (mode == DumpMode::kSigquit && m != nullptr && m->tid != 0) {
        AskThreadForBacktrace(m, fd);
      } else {
        const char kElsewhere[] = "\t(running on another thread)\n";
        out(kElsewhere, sizeof kElsewhere - 1);
      }
    }
    out("\n", 1);
  }
}

void QuitHandler(int sig, siginfo_t* info, void* uctx) {
  goro_clear_alignment_check();  // the interrupted code's AC, kept by the kernel (arch/cpu.h)
  M* m = CurrentM();
  if (m != nullptr && trace_target.load(std::memory_order_acquire) == m) {
    // A dumping thread asks for our goroutine's backtrace.
    DecideNames(uctx, FdOut{trace_fd});
    if (G* g = m->curg) BacktraceSignal(g, uctx, FdOut{trace_fd});
    trace_target.store(nullptr, std::memory_order_release);
    return;
  }
  if (sigquit_dumping.exchange(true)) return;  // another thread is dumping; it exits
  GetUnwinder();  // loaded before any other thread is asked to use it
  WriteStderr("SIGQUIT: quit\n\n");
  DecideNames(uctx, FdOut{STDERR_FILENO});
  DumpAll(FdOut{STDERR_FILENO}, DumpMode::kSigquit, uctx, STDERR_FILENO);
  _exit(2);
}

}  // namespace

const char* GStatusString(GStatus s) {
  switch (s) {
    case GStatus::kIdle: return "idle";
    case GStatus::kRunnable: return "runnable";
    case GStatus::kRunning: return "running";
    case GStatus::kWaiting: return "waiting";
    case GStatus::kSyscall: return "syscall";
    case GStatus::kDead: return "dead";
  }
  return "?";
}

M* MRunning(const G* g) {
  for (M* m = sched.allm.load(std::memory_order_acquire); m != nullptr; m = m->alllink) {
    if (__atomic_load_n(&m->curg, __ATOMIC_RELAXED) == g) return m;
  }
  return nullptr;
}

void DumpGoroutinesToFd(int fd) { DumpAll(FdOut{fd}, DumpMode::kFatal); }

void WriteTraceback(void* uctx, const G* g) {
  if (g == nullptr) g = CurrentGoroutine();
  M* m = CurrentM();
  char line[96];
  int n;
  if (g != nullptr) {
    n = snprintf(line, sizeof line, "\ngoroutine %lld [running]:\n", static_cast<long long>(g->id));
  } else if (m != nullptr) {
    n = snprintf(line, sizeof line, "\nruntime thread M%lld:\n", static_cast<long long>(m->id));
  } else {
    n = snprintf(line, sizeof line, "\nthread %ld:\n", static_cast<long>(syscall(SYS_gettid)));
  }
  FdOut out{STDERR_FILENO};
  out(line, static_cast<size_t>(std::max(n, 0)));
  if (uctx != nullptr) {
    DecideNames(uctx, out);
    BacktraceSignal(g, uctx, out);
  } else {
    BacktraceHere(g, out, /*skip_reporting=*/true);
  }
}

void PreloadUnwinder() {
  GetUnwinder();
  FindAllocatorCode();
}

void InstallQuitHandler() {
  struct sigaction cur;
  if (sigaction(SIGQUIT, nullptr, &cur) != 0) return;
  if ((cur.sa_flags & SA_SIGINFO) || cur.sa_handler != SIG_DFL) return;  // the program's own choice
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = QuitHandler;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
  sigfillset(&sa.sa_mask);
  sigaction(SIGQUIT, &sa, nullptr);
}

}  // namespace goro::internal

namespace goro {

void DumpGoroutines(std::ostream& out) {
  internal::DumpAll([&out](const char* s, size_t n) { out.write(s, static_cast<std::streamsize>(n)); },
                    internal::DumpMode::kFromCode);
}

}  // namespace goro
