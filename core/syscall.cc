// Marked blocking regions (include/goro/syscall.h), after Go's entersyscall /
// exitsyscall.
//
// Entering: the goroutine keeps its M and the M keeps its P, but the P's
// status becomes kSyscall. From then on sysmon may take the P (CAS kSyscall ->
// kIdle) and hand it to another M: on its second look at the same region
// (one sysmon tick) if goroutines are waiting to run, or a timer of the P's
// is due while no P is idle (core/sysmon.cc); else after 10 ms. Sysmon
// never signals an M whose P is in kSyscall, and the goroutine's preempt_off
// is raised, so the call sees no EINTR from the runtime.
//
// Leaving: CAS kSyscall -> kRunning takes the P back if sysmon did not take
// it (the common case: no system call beyond the user's own). Otherwise the
// M grabs an idle P if there is one; failing that the goroutine waits its
// turn in the global run queue, wired to this M for the moment, so that it
// resumes on the same thread (Go moves it; goro keeps thread-local state such
// as errno where the caller's code expects it).
#include <pthread.h>
#include <signal.h>

#include <cerrno>

#include "absl/strings/str_cat.h"
#include "core/fatal.h"
#include "core/runtime.h"
#include "core/trace.h"
#include "goro/syscall.h"

namespace goro::internal {

namespace {

// Waits until the handler has taken the preemption signal in flight to this
// M (sent, or about to be), unless this thread has the signal blocked: the
// goroutine blocked it itself, or it runs inside a signal handler of the
// program's. Then the handler cannot run until the thread unblocks it, and
// waiting would spin for ever; nor can the signal land in the call. It stays
// pending with signal_pending set, so sysmon sends no other, and when the
// thread unblocks it the handler takes it as usual. (Go leaves such a signal
// pending too; its signalPending stays set until the handler runs.) It is
// not consumed here with sigtimedwait: sysmon may not have sent it yet, and
// the one pending may be the program's own SIGURG. The one hole: a call that
// unblocks the signal itself (ppoll, pselect, epoll_pwait or sigsuspend with
// such a mask) may see EINTR.
//
// The handler acknowledges any delivery, so the wait ends unless the signal
// never reaches it: the program installed a handler of its own for the
// signal after the runtime started. That is one clear fatal line, not a hang.
void WaitOutPreemptSignal(M* m) {
  sigset_t mask;
  if (pthread_sigmask(SIG_BLOCK, nullptr, &mask) == 0 && sigismember(&mask, sched.preempt_signal) == 1) return;
  int64_t check_at = Nanotime() + 10 * 1000 * 1000;
  while (m->signal_pending.load(std::memory_order_seq_cst)) {
    arch::CpuRelax();
    if (Nanotime() < check_at) continue;
    if (!PreemptHandlerInstalled()) {
      FatalG(absl::StrCat("the handler of signal ", sched.preempt_signal,
                          " (goro's preemption signal, Options::preempt_signal) was replaced after the runtime "
                          "started; choose another signal for one of the two, or set "
                          "Options::async_preemption = false"));
    }
    check_at = Nanotime() + 10 * 1000 * 1000;
  }
}

}  // namespace

void EnterSyscall() {
  G* g = CurrentGoroutine();
  // A region inside a region (goro::Syscall around code that uses another)
  // is part of the outer one.
  if (g->syscall_depth++ != 0) return;
  g->preempt_off.store(g->preempt_off.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  EnsurePAfterEntry(g);
  M* m = CurrentM();  // preemption is off: it cannot change now
  P* p = m->p;
  trace::SyscallEnter(p, g);
  g->status.store(GStatus::kSyscall, std::memory_order_relaxed);
  p->syscalltick.store(p->syscalltick.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  SetPStatusByOwner(p, P::Status::kSyscall);  // seq_cst CAS: see PreemptOne
  // The owner last: sysmon may take the P as soon as it sees us here. Had it
  // loaded our owner word in the previous region, its CAS can succeed in this
  // one, and then it must find the status already kSyscall, or our CAS above
  // would turn the kIdle it stores back into kSyscall.
  p->syscall_owner.store(m, std::memory_order_seq_cst);
  // A preemption signal sysmon decided to send before it saw kSyscall must
  // arrive now, not during the call (see PreemptOne).
  if (m->signal_pending.load(std::memory_order_seq_cst)) WaitOutPreemptSignal(m);
  // Work is waiting for this P: make sure sysmon looks soon.
  if (!p->runq.Empty() || sched.runq_size.load(std::memory_order_relaxed) > 0) WakeSysmon();
}

void ExitSyscall() {
  G* g = CurrentGoroutine();
  if (g->syscall_depth <= 0) FatalG("a marked blocking region ended on a goroutine that did not start it");
  if (--g->syscall_depth != 0) return;
  int saved_errno = errno;
  M* m = CurrentM();
  P* p = m->p;
  M* owner = m;
  if (p->syscall_owner.compare_exchange_strong(owner, nullptr, std::memory_order_acq_rel)) {
    SetPStatusByOwner(p, P::Status::kRunning);  // still ours: sysmon did not retake it
  } else {
    // Sysmon handed our P to another M: take an idle one, or wait our turn
    // in the global queue, wired to this thread (ReacquirePOnSameThread).
    m->p = nullptr;
    ReacquirePOnSameThread(m, g);
  }
  g->status.store(GStatus::kRunning, std::memory_order_relaxed);
  trace::SyscallExit(m->p, g);  // the same M (see above), perhaps another P
  std::atomic_signal_fence(std::memory_order_seq_cst);
  g->preempt_off.store(g->preempt_off.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
  SetErrno(saved_errno);  // perhaps another thread's errno now
}

}  // namespace goro::internal

namespace goro {

SyscallScope::SyscallScope() : active_(internal::CurrentGoroutine() != nullptr) {
  if (active_) internal::EnterSyscall();
}

SyscallScope::~SyscallScope() {
  if (active_) internal::ExitSyscall();
}

}  // namespace goro
