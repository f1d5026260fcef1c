// A goroutine's changes to its thread's signal mask.
//
// A signal mask belongs to a thread, and a goroutine borrows one. goro
// interposes pthread_sigmask and sigprocmask so that a change made on a
// goroutine lasts only while that goroutine holds the thread: the M notes
// that its mask is no longer the runtime's (M::sigmask_changed), and when
// the goroutine leaves the thread - it parks, yields, is preempted or exits -
// g0 puts the runtime's mask back (RestoreMSignalMask, from
// FinishSwitchOnG0). A goroutine wired with LockOSThread keeps its mask
// until it exits. Without this, a goroutine that blocked a signal and exited
// (or migrated before restoring it) left the block on the thread, and the
// preemption handler, which takes any mask but the M's for a signal handler
// of the program's and declines to preempt there, never again preempted a
// call-free goroutine on that thread.
//
// glibc's own callers (posix_spawn, system, sigsuspend) change the mask
// through internal entry points and restore it themselves; they do not pass
// through here. Its legacy calls (sighold, sigrelse, sigset, sigblock,
// sigsetmask) use the same internal entry points and leave the change:
// they are redone below on top of sigprocmask. What else bypasses the
// wrappers (siglongjmp restoring a saved mask, setcontext, the system call
// itself) is caught later: the preemption handler, declining to preempt
// because of the mask, marks the M (M::sigmask_refused), and when the
// goroutine running there leaves the thread, g0 reads the thread's mask
// and puts the runtime's back if it differs.
#include <dlfcn.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <atomic>
#include <cstring>

#include "core/runtime.h"

// The static libc's entry point behind its weak pthread_sigmask; in a
// dynamic program dlsym(RTLD_NEXT) finds libc's pthread_sigmask instead.
extern "C" int __pthread_sigmask(int how, const sigset_t* set, sigset_t* old) __attribute__((weak));
extern "C" int __sigprocmask(int how, const sigset_t* set, sigset_t* old) __attribute__((weak));

namespace goro::internal {
namespace {

using MaskFn = int (*)(int, const sigset_t*, sigset_t*);

// The last resort, should a static link have left out libc's own: the
// system call (libc also keeps its cancellation signals unblocked; a
// program that has neither function can hardly use those).
int RawPthreadSigmask(int how, const sigset_t* set, sigset_t* old) {
  return syscall(SYS_rt_sigprocmask, how, set, old, _NSIG / 8) == 0 ? 0 : errno;
}
int RawSigprocmask(int how, const sigset_t* set, sigset_t* old) {
  return syscall(SYS_rt_sigprocmask, how, set, old, _NSIG / 8) == 0 ? 0 : -1;
}

// libc's function `name` (resolved on first use, then cached): dlsym's, the
// static libc's `fallback`, or `raw`.
MaskFn Real(std::atomic<MaskFn>& cache, const char* name, MaskFn fallback, MaskFn raw) {
  MaskFn f = cache.load(std::memory_order_acquire);
  if (f == nullptr) {
    f = reinterpret_cast<MaskFn>(dlsym(RTLD_NEXT, name));
    if (f == nullptr) f = fallback;
    if (f == nullptr) f = raw;
    cache.store(f, std::memory_order_release);
  }
  return f;
}

// Resolved before main (dlsym is not async-signal-safe, and pthread_sigmask
// is); a call from an earlier static constructor resolves it itself.
std::atomic<MaskFn> real_pthread_sigmask{nullptr};
std::atomic<MaskFn> real_sigprocmask{nullptr};

MaskFn RealPthreadSigmask() {
  return Real(real_pthread_sigmask, "pthread_sigmask", __pthread_sigmask, RawPthreadSigmask);
}
MaskFn RealSigprocmask() { return Real(real_sigprocmask, "sigprocmask", __sigprocmask, RawSigprocmask); }

__attribute__((constructor(101))) void ResolveMaskFunctions() {
  RealPthreadSigmask();
  RealSigprocmask();
}

// The mask the goroutine on m runs with outside signal handlers, in kernel
// form: the one it set itself, or else the runtime's.
uint64_t OwnSigmaskBits(const M* m) { return m->sigmask_changed ? m->own_sigmask_bits : m_sigmask_bits; }

// After a successful change by the program on a goroutine: whether the
// thread's mask is now another than the runtime's.
//
// The M, the mask read and the write of the M's flag must all be the same
// thread's: a goroutine switched between them (this is the executable's code,
// and a mask that is the runtime's again lets the preemption handler in)
// would write the flag of the M it left, from the mask of the thread it
// resumed on - clearing the flag another goroutine had set there since, whose
// blocked signals would then outlive it on that thread (and racing with that
// M's g0, which reads the flag). So preemption is deferred meanwhile:
// preempt_off raised, not a NoPreemptScope, since pthread_sigmask is called
// in signal handlers, where the scope's check of the P could wait for one
// and its end could switch goroutines (as in dl_iterate_phdr's wrapper). A
// request that arrives meanwhile waits for the next safe point or signal.
//
// `before` is the mask the change replaced. If it blocks all that the
// goroutine's own mask (the one it set itself outside signal handlers, or
// else the runtime's) does and more, the change is made inside a handler of
// the program's, which blocks at least its own signal too, and whose return
// puts the mask back: the goroutine's own stays what it was, and the
// thread's is restored when it leaves. Otherwise it is made outside any
// handler (or after a change the wrappers did not see: siglongjmp,
// setcontext), and the new mask becomes the goroutine's own.
void NoteMaskChange(const sigset_t& before) {
  G* g = CurrentGoroutine();
  if (g == nullptr) return;  // a plain thread, or the runtime on g0
  g->preempt_off.store(g->preempt_off.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  M* m = CurrentM();
  if (auto hook = sigmask_note_hook.load(std::memory_order_relaxed)) hook(m);
  const uint64_t own = OwnSigmaskBits(m);
  if (IsHandlersMask(MaskBits(before), own)) {
    m->own_sigmask_bits = own;
    m->sigmask_changed = true;
  } else {
    sigset_t now;
    if (RealPthreadSigmask()(SIG_BLOCK, nullptr, &now) == 0) {
      m->own_sigmask_bits = MaskBits(now);
      m->sigmask_changed = m->own_sigmask_bits != m_sigmask_bits;
    }
  }
  std::atomic_signal_fence(std::memory_order_seq_cst);
  g->preempt_off.store(g->preempt_off.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
}

// pthread_sigmask and sigprocmask, through libc's `real` one: it is given
// a set of the wrapper's as `old`, for NoteMaskChange, copied out after.
int ChangeMask(MaskFn real, int how, const sigset_t* set, sigset_t* old) {
  sigset_t before;
  sigemptyset(&before);  // the kernel writes only its 64 bits
  int r = real(how, set, &before);
  if (r != 0) return r;
  if (old != nullptr) *old = before;
  if (set != nullptr) NoteMaskChange(before);
  return 0;
}

}  // namespace

std::atomic<void (*)(M*)> sigmask_note_hook{nullptr};

bool ThreadHasMSignalMask() {
  sigset_t cur;
  return RealPthreadSigmask()(SIG_BLOCK, nullptr, &cur) == 0 && IsMSignalMask(cur);
}

bool ThreadHasHandlersSignalMask(const M* m) {
  sigset_t cur;
  if (RealPthreadSigmask()(SIG_BLOCK, nullptr, &cur) != 0) return true;
  return IsHandlersMask(MaskBits(cur), OwnSigmaskBits(m));
}

void RestoreMSignalMask(M* m) {
  RealPthreadSigmask()(SIG_SETMASK, &m_sigmask, nullptr);
  m->sigmask_changed = false;
  m->sigmask_refused = false;
}

void CheckMSignalMask(M* m) {
  m->sigmask_refused = false;
  if (!ThreadHasMSignalMask()) RestoreMSignalMask(m);
}

}  // namespace goro::internal

extern "C" int pthread_sigmask(int how, const sigset_t* set, sigset_t* old) {
  return goro::internal::ChangeMask(goro::internal::RealPthreadSigmask(), how, set, old);
}

extern "C" int sigprocmask(int how, const sigset_t* set, sigset_t* old) {
  return goro::internal::ChangeMask(goro::internal::RealSigprocmask(), how, set, old);
}

// The legacy calls, as glibc does them, but through sigprocmask (above).
namespace {
int ChangeOne(int how, int sig) {
  sigset_t set;
  sigemptyset(&set);
  if (sigaddset(&set, sig) != 0) return -1;
  return sigprocmask(how, &set, nullptr);
}

// sigblock and sigsetmask: the mask of the first 32 signals as an int.
int ChangeOld(int how, int mask) {
  sigset_t set, old;
  sigemptyset(&set);
  set.__val[0] = static_cast<unsigned int>(mask);
  if (sigprocmask(how, &set, &old) != 0) return -1;
  return static_cast<int>(static_cast<unsigned int>(old.__val[0]));
}
}  // namespace

extern "C" int sighold(int sig) noexcept { return ChangeOne(SIG_BLOCK, sig); }
extern "C" int sigrelse(int sig) noexcept { return ChangeOne(SIG_UNBLOCK, sig); }
extern "C" int sigblock(int mask) noexcept { return ChangeOld(SIG_BLOCK, mask); }
extern "C" int sigsetmask(int mask) noexcept { return ChangeOld(SIG_SETMASK, mask); }

extern "C" __sighandler_t sigset(int sig, __sighandler_t disp) noexcept {
  sigset_t set, old;
  sigemptyset(&set);
  if (sigaddset(&set, sig) != 0) return SIG_ERR;
  struct sigaction act, oact;
  if (disp == SIG_HOLD) {
    if (sigprocmask(SIG_BLOCK, &set, &old) != 0) return SIG_ERR;
    if (sigismember(&old, sig) == 1) return SIG_HOLD;
    if (sigaction(sig, nullptr, &oact) != 0) return SIG_ERR;
    return oact.sa_handler;
  }
  memset(&act, 0, sizeof act);
  act.sa_handler = disp;
  sigemptyset(&act.sa_mask);
  if (sigaction(sig, &act, &oact) != 0) return SIG_ERR;
  if (sigprocmask(SIG_UNBLOCK, &set, &old) != 0) return SIG_ERR;
  return sigismember(&old, sig) == 1 ? SIG_HOLD : oact.sa_handler;
}
