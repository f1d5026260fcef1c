// A goroutine's changes to its thread's alternate signal stack.
//
// An alternate stack belongs to a thread, as its signal mask does
// (signals/sigmask.cc), and every M has one of its own (MInitSignals): the
// preemption handler and the stack-overflow reporter run on it. Code written
// for threads gives a thread another one for a while - save the old, set a
// new, work, restore the old, unmap the new - and on a goroutine the thread
// may change in between. Resumed on another thread, the goroutine would
// restore the first thread's alternate stack there (two threads on one
// stack corrupt each other's signal frames), and leave the first with the
// stack it then unmaps (the next signal there is a SIGSEGV). So goro
// interposes sigaltstack, as it does pthread_sigmask:
//   - a change made on a goroutine marks its M (M::altstack_changed) while
//     the thread's alternate stack is not the M's;
//   - the preemption handler runs on the thread's alternate stack, and
//     declines to preempt when that is not the M's (signals/preempt_handler.cc):
//     a goroutine is not moved by signal while it has one of its own;
//   - when it leaves the thread anyway - it parks, yields, exits - g0 gives
//     the thread the M's alternate stack back (RestoreMAltStack, from
//     FinishSwitchOnG0); a goroutine wired with LockOSThread keeps its own
//     until it exits;
//   - one that then sets an alternate stack of another M (the old one it
//     saved on the thread it left) gets its own M's instead. So does one
//     that sets the stack of an M whose thread has ended since (a goroutine
//     wired to it exited): M stacks are never unmapped, but kept for the next
//     M (ReleaseMAltStack), so the address is still an M stack, free or
//     another M's, and never memory the kernel would fault on or the program
//     has mapped again since.
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>

#include "core/runtime.h"

// Built without sanitizers (cmake/Sanitize.cmake): their runtimes call
// sigaltstack as they start, before instrumented code can run.

namespace goro::internal {
namespace {

// The system call, which is all libc's sigaltstack makes (and which needs no
// symbol lookup, in a dynamic or a static program, or while starting up).
int RealSigaltstack(const stack_t* ss, stack_t* old) {
  return static_cast<int>(syscall(SYS_sigaltstack, ss, old));
}

// Whether sp is an alternate stack made for an M: this one's, another's, or
// free. m_altstacks may be walked without a lock (core/runtime.h).
bool IsMAltStack(const void* sp) {
  for (MAltStack* s = m_altstacks.load(std::memory_order_acquire); s != nullptr; s = s->next) {
    if (s->mem == sp) return true;
  }
  return false;
}

}  // namespace

void RestoreMAltStack(M* m) {
  stack_t ss{};
  ss.ss_sp = m->altstack;
  ss.ss_size = m->altstack_size;
  RealSigaltstack(&ss, nullptr);
  m->altstack_changed = false;
}

namespace {

// A change made on goroutine g.
int GoroutineSigaltstack(G* g, const stack_t* ss, stack_t* old) {
  // The M, the change and the M's flag must be the same thread's: preemption
  // is deferred meanwhile, as in the mask wrappers (signals/sigmask.cc).
  g->preempt_off.store(g->preempt_off.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  M* m = CurrentM();
  stack_t set = *ss;
  if (!(set.ss_flags & SS_DISABLE) && IsMAltStack(set.ss_sp)) {
    set.ss_sp = m->altstack;  // the one it saved on the thread it left, or its own
    set.ss_size = m->altstack_size;
  }
  int r = RealSigaltstack(&set, old);
  if (r == 0) m->altstack_changed = (set.ss_flags & SS_DISABLE) || set.ss_sp != m->altstack;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  g->preempt_off.store(g->preempt_off.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
  return r;
}

}  // namespace
}  // namespace goro::internal

extern "C" int sigaltstack(const stack_t* ss, stack_t* old) {
  using namespace goro::internal;
  G* g = CurrentGoroutine();
  if (ss == nullptr || g == nullptr) return RealSigaltstack(ss, old);  // a read, a plain thread, or g0
  return GoroutineSigaltstack(g, ss, old);
}
