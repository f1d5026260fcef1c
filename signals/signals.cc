// Signal handling for goro. The handlers in this file run in signal context:
// they call only async-signal-safe functions and read only data computed
// before the signal arrived (the M and G records, the stack bounds).
//
//   SIGPIPE         Ignored while the thread is inside io::Write (the write
//                   returns EPIPE, as in Go); otherwise the default action.
//                   Installed only if the program left SIGPIPE at SIG_DFL.
//   SIGSEGV/SIGBUS  A fault in the guard below the running goroutine's stack
//                   (kStackGuardSize, 64 KiB), or the kernel's failure to
//                   write a signal frame on that stack, is reported as
//                   "goroutine N: stack overflow" and aborts.
//                   Any other fault goes to the handler installed before ours,
//                   or to the default action; without a handler, a SIGSEGV or
//                   SIGBUS sent by kill or raise kills the process as it would
//                   without goro (or is ignored, if the program ignores it). The handler runs on the M's
//                   alternate signal stack, because the goroutine's stack is
//                   exactly what has run out.
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <new>

#include "arch/cpu.h"
#include "core/fatal.h"
#include "core/runtime.h"
#include "signals/forward.h"

namespace goro::internal {

namespace {

struct sigaction previous_segv;
struct sigaction previous_pipe;
struct sigaction previous_bus;

// How far above the stack pointer the kernel may write a signal frame: the
// frame itself (AT_MINSIGSTKSZ: its size with this CPU's register state,
// 11 KiB with AMX) and the 128-byte red zone it skips. Set before the
// handlers are installed.
uintptr_t signal_frame_reach = 0;

void InitSignalFrameReach() {
  unsigned long frame = getauxval(AT_MINSIGSTKSZ);  // 0 before Linux 5.14
  signal_frame_reach = std::max<unsigned long>(frame, 2048) + 128;  // 2048: the old MINSIGSTKSZ
}

// Formats v in decimal into buf (no allocation); returns the length.
size_t FormatDecimal(char* buf, int64_t v) {
  char tmp[24];
  size_t n = 0;
  bool neg = v < 0;
  uint64_t u = neg ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
  do {
    tmp[n++] = static_cast<char>('0' + u % 10);
    u /= 10;
  } while (u != 0);
  size_t len = 0;
  if (neg) buf[len++] = '-';
  while (n > 0) buf[len++] = tmp[--n];
  return len;
}

// Whether the kernel sent sig for a fault of this thread (an access, with its
// address in si_addr). SI_USER, SI_TKILL, SI_QUEUE and the like, from kill,
// tgkill, raise or sigqueue, are <= 0; SI_KERNEL (0x80) is a fault whose
// address the kernel does not give.
bool IsFault(const siginfo_t* info) { return info->si_code > 0; }

// A fault signal that is not a goroutine's stack overflow: the handler
// installed before ours, or what its disposition would have done.
void ForwardSignal(int sig, siginfo_t* info, void* uctx, const struct sigaction& prev) {
  if (CallPreviousHandler(prev, sig, info, uctx)) return;
  if (!IsFault(info)) {
    if (prev.sa_handler == SIG_IGN) return;  // sent, and the program ignores it
    // Sent by a program (raise(SIGSEGV), kill -SEGV): returning would not
    // send it again. Die by it now, as Go's dieFromSignal does.
    DieFromSignal(sig);
  }
  // A fault: restore the default action and return, so the faulting
  // instruction runs again and the kernel kills the process with the right
  // signal and core (even if the program ignores the signal).
  signal(sig, SIG_DFL);
}

// Whether addr lies in g's guard (anywhere in it: a frame larger than a page
// may skip its top) or in the lowest page of g's stack.
bool InGuard(const G* g, uintptr_t addr) {
  if (g == nullptr || g->stack.lo == 0) return false;
  uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  return addr < g->stack.lo + page && addr >= g->stack.lo - kStackGuardSize;
}

// Whether sp, the stack pointer at a fault without an address, leaves no room
// below it in g's stack for a signal frame: in the guard, or less than a
// frame above it.
bool NoRoomForSignalFrame(const G* g, uintptr_t sp) {
  if (g == nullptr || g->stack.lo == 0) return false;
  return sp >= g->stack.lo - kStackGuardSize && sp < g->stack.lo + signal_frame_reach;
}

// The goroutine whose stack overflowed, if the fault is a stack overflow. The
// thread may be on the stack of either of two goroutines: curg, or, during
// Yield's direct switch (TryYieldDirect), the goroutine switching away
// (pending_yield), onto whose stack the switch still pushes while curg
// already names the goroutine switched to.
//
// Usually the fault's address is in the guard. But when the kernel cannot
// write the frame of a signal whose handler does not run on the alternate
// stack (most programs' handlers), it sends SIGSEGV with si_code SI_KERNEL
// and no address: then the interrupted stack pointer tells. (A general
// protection fault, such as an access at a non-canonical address, also comes
// as SI_KERNEL: with the stack nearly used up it is reported as an overflow.)
G* OverflowedGoroutine(M* m, const siginfo_t* info, void* uctx) {
  uintptr_t addr = reinterpret_cast<uintptr_t>(info->si_addr);
  for (G* g : {m->curg, m->pending_yield}) {
    if (InGuard(g, addr)) return g;
  }
  if (info->si_code == SI_KERNEL) {
    uintptr_t sp = static_cast<uintptr_t>(static_cast<ucontext_t*>(uctx)->uc_mcontext.gregs[REG_RSP]);
    for (G* g : {m->curg, m->pending_yield}) {
      if (NoRoomForSignalFrame(g, sp)) return g;
    }
  }
  return nullptr;
}

[[noreturn]] void ReportStackOverflow(const G* g, void* uctx) {
  char msg[160];
  size_t n = 0;
  auto put = [&](const char* s) {
    size_t l = strlen(s);
    memcpy(msg + n, s, l);
    n += l;
  };
  put("goroutine ");
  n += FormatDecimal(msg + n, g->id);
  put(": stack overflow (stack of ");
  n += FormatDecimal(msg + n, static_cast<int64_t>(g->stack.hi - g->stack.lo));
  put(" bytes exhausted)");
  FatalSignal(absl::string_view(msg, n), uctx, g);
}

void FaultHandler(int sig, siginfo_t* info, void* uctx) {
  // The kernel keeps the faulting code's EFLAGS.AC for the handler: set, the
  // first misaligned access here or in the loader's lazy binding would fault
  // again, for ever (SA_NODEFER). sigreturn restores it, so a goroutine's
  // own misaligned access with AC set faults again and dies by SIGBUS.
  goro_clear_alignment_check();
  int saved_errno = errno;
  M* m = CurrentM();
  if (m != nullptr && IsFault(info)) {
    if (const G* g = OverflowedGoroutine(m, info, uctx)) ReportStackOverflow(g, uctx);
  }
  errno = saved_errno;
  ForwardSignal(sig, info, uctx, sig == SIGSEGV ? previous_segv : previous_bus);
}

void PipeHandler(int sig, siginfo_t* info, void* uctx) {
  goro_clear_alignment_check();  // as in FaultHandler
  if (tls_in_io_write) return;  // the write returns EPIPE
  // Not ours: the default action (terminate), as if we were not here.
  signal(SIGPIPE, SIG_DFL);
  raise(SIGPIPE);
}

}  // namespace

__attribute__((tls_model("initial-exec"))) thread_local bool tls_in_io_write = false;

void InstallSignalHandlers() {
  // SIGPIPE: only if the program left it at the default; a handler or SIG_IGN
  // of the program's own is kept (and with SIG_IGN writes return EPIPE).
  struct sigaction cur;
  if (sigaction(SIGPIPE, nullptr, &cur) == 0 && !(cur.sa_flags & SA_SIGINFO) && cur.sa_handler == SIG_DFL) {
    struct sigaction sp;
    memset(&sp, 0, sizeof sp);
    sp.sa_sigaction = PipeHandler;
    sp.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sp.sa_mask);
    sigaction(SIGPIPE, &sp, &previous_pipe);
  }
  InitSignalFrameReach();
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = FaultHandler;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, &previous_segv);
  sigaction(SIGBUS, &sa, &previous_bus);
}

sigset_t m_sigmask;
uint64_t m_sigmask_bits = 0;

// Go does the same: its threads start from the mask the program had at
// start-up and unblock only the signals the runtime needs. A program that
// blocks SIGTERM in main to collect it with sigwait keeps it blocked on
// every runtime thread, so it is not delivered to one of them instead.
void InitMSignalMask(int preempt_signal) {
  pthread_sigmask(SIG_SETMASK, nullptr, &m_sigmask);
  // Faults in goroutine code: blocked, they kill the process outright.
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP}) sigdelset(&m_sigmask, sig);
  if (preempt_signal != 0) sigdelset(&m_sigmask, preempt_signal);
  m_sigmask_bits = 0;
  for (int sig = 1; sig <= 64; ++sig) {
    if (sigismember(&m_sigmask, sig) == 1) m_sigmask_bits |= uint64_t{1} << (sig - 1);
  }
}

std::atomic<MAltStack*> m_altstacks{nullptr};

namespace {

// The alternate stacks of Ms whose threads ended, linked through free_link,
// with their pages given back; the next M takes one before it maps another.
SpinLock altstack_free_lock;
MAltStack* altstack_free = nullptr;  // under altstack_free_lock

MAltStack* TakeFreeAltStack() {
  altstack_free_lock.Lock();
  MAltStack* s = altstack_free;
  if (s != nullptr) altstack_free = s->free_link;
  altstack_free_lock.Unlock();
  return s;
}

MAltStack* MapAltStack() {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  size_t size = std::max<size_t>(64 * 1024, static_cast<size_t>(sysconf(_SC_SIGSTKSZ)));
  size = (size + page - 1) / page * page;
  // A guard page below: handlers the program installed before the runtime
  // started, written for a thread's stack, run on this one when goro's
  // forwards a signal to them, and one that overflows it must fault, not
  // write over the mapping below.
  void* region = mmap(nullptr, size + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (region == MAP_FAILED || mprotect(region, page, PROT_NONE) != 0) {
    int err = errno;
    FatalF("cannot allocate a signal stack for a new runtime thread: mmap of %zu bytes: %s (errno %d)",
           size + page, strerror(err), err);
  }
  auto* s = new (std::nothrow) MAltStack;
  if (s == nullptr) Fatal("cannot allocate a signal stack record for a new runtime thread");
  s->mem = static_cast<char*>(region) + page;
  s->size = size;
  // Published before any thread can be given it, let alone a goroutine save it.
  s->next = m_altstacks.load(std::memory_order_relaxed);
  while (!m_altstacks.compare_exchange_weak(s->next, s, std::memory_order_release, std::memory_order_relaxed)) {
  }
  return s;
}

}  // namespace

void MInitSignals(M* m) {
  MAltStack* s = TakeFreeAltStack();
  if (s == nullptr) s = MapAltStack();
  // Pre-fault it: a handler must not take page faults on a nearly full
  // system. (A free one gave its pages back.)
  memset(s->mem, 0, s->size);
  stack_t ss;
  ss.ss_sp = s->mem;
  ss.ss_size = s->size;
  ss.ss_flags = 0;
  if (sigaltstack(&ss, nullptr) != 0) Fatal("sigaltstack failed for a new thread");
  m->altstack = s->mem;
  m->altstack_size = s->size;
}

void ReleaseMAltStack(M* m) {
  MAltStack* s = m_altstacks.load(std::memory_order_acquire);
  while (s != nullptr && s->mem != m->altstack) s = s->next;
  if (s == nullptr) Fatal("ReleaseMAltStack: the M's alternate stack is not the runtime's");
  madvise(s->mem, s->size, MADV_DONTNEED);
  altstack_free_lock.Lock();
  s->free_link = altstack_free;
  altstack_free = s;
  altstack_free_lock.Unlock();
}

}  // namespace goro::internal
