// Marked blocking regions (include/goro/syscall.h), after Go's entersyscall /
// exitsyscall.
//
// Entering: the goroutine keeps its M and the M keeps its P, but the P's
// status becomes kSyscall. From then on sysmon may take the P (CAS kSyscall ->
// kIdle) and hand it to another M: on its second look at the same region
// (one sysmon tick) if goroutines are waiting to run, or after 10 ms. Sysmon
// never signals an M whose P is in kSyscall, and the goroutine's preempt_off
// is raised, so the call sees no EINTR from the runtime.
//
// Leaving: CAS kSyscall -> kRunning takes the P back if sysmon did not take
// it (the common case: no system call beyond the user's own). Otherwise the
// M grabs an idle P if there is one; failing that the goroutine waits its
// turn in the global run queue, wired to this M for the moment, so that it
// resumes on the same thread (Go moves it; goro keeps thread-local state such
// as errno where the caller's code expects it).
#include <cerrno>

#include "absl/strings/str_cat.h"
#include "core/fatal.h"
#include "core/runtime.h"
#include "core/trace.h"
#include "goro/syscall.h"

namespace goro::internal {

void EnterSyscall() {
  G* g = CurrentGoroutine();
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
  while (m->signal_pending.load(std::memory_order_seq_cst)) arch::CpuRelax();
  // Work is waiting for this P: make sure sysmon looks soon.
  if (!p->runq.Empty() || sched.runq_size.load(std::memory_order_relaxed) > 0) WakeSysmon();
}

void ExitSyscall() {
  int saved_errno = errno;
  G* g = CurrentGoroutine();
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
