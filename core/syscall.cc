// Marked blocking regions (include/goro/syscall.h), after Go's entersyscall /
// exitsyscall.
//
// Entering: the goroutine keeps its M and the M keeps its P, but the P's
// status becomes kSyscall. From then on sysmon may take the P (CAS kSyscall ->
// kIdle) and hand it to another M: on its second look at the same region
// (one sysmon tick) if goroutines are waiting to run, or a timer of the P's
// is due while no P is idle (core/sysmon.cc); else after 10 ms. After such
// a hand-off sysmon looks again in a tick (the next goroutine may block at
// once). With
// goroutines waiting, entering wakes sysmon for its first look if it would
// look later than 1 ms from now (WakeSysmonForSyscall). Sysmon
// never signals an M whose P is in kSyscall, and the goroutine's preempt_off
// is raised, so the call sees no EINTR from the runtime.
//
// A region the program enters while the goroutine is inside runtime code -
// from a signal handler of its own that interrupted that code - keeps the
// P instead (see EnterSyscall).
//
// Leaving: CAS kSyscall -> kRunning takes the P back if sysmon did not take
// it (the common case: no system call beyond the user's own). Otherwise, if
// the M it went to blocks in a region of its own, the goroutine takes it
// from that M as sysmon would (TakePFromBlockedM; Go's exitsyscallfast), or
// the M grabs an idle P if there is one; failing that the goroutine waits its
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
// pending, marked sent (a standard one that sysmon sends again after 10 ms
// merges with it; a realtime one is not sent again), and when the thread
// unblocks it the handler takes it as usual. (Go leaves
// such a signal pending too; its signalPending stays set until the handler
// runs.) It is
// not consumed here with sigtimedwait: sysmon may not have sent it yet, and
// the one pending may be the program's own SIGURG. The one hole: a call that
// unblocks the signal itself (ppoll, pselect, epoll_pwait or sigsuspend with
// such a mask) may see EINTR.
//
// A signal marked sent that the handler never acknowledged was lost, merged
// into one of the program's (ForgetLostPreemptSignal): forgotten after a
// short wait. So was one that went to a handler the program installed for
// the signal after the runtime started: that is one clear fatal line.
void WaitOutPreemptSignal(M* m) {
  namespace ps = preempt_signal;
  sigset_t mask;
  if (pthread_sigmask(SIG_BLOCK, nullptr, &mask) == 0 && sigismember(&mask, sched.preempt_signal) == 1) return;
  const int64_t forget_at = Nanotime() + 50 * 1000;  // a signal sent arrives well within this
  while (ps::State(m->signal_state.load(std::memory_order_seq_cst)) != ps::kIdle) {
    arch::CpuRelax();
    if (Nanotime() >= forget_at) ForgetLostPreemptSignal(m);
  }
}

}  // namespace

void ForgetLostPreemptSignal(M* m) {
  namespace ps = preempt_signal;
  uint32_t v = m->signal_state.load(std::memory_order_seq_cst);
  if (ps::State(v) != ps::kSent) return;
  // A system call (this one): a pending signal is delivered on its way out.
  if (!PreemptHandlerInstalled()) {
    FatalG(absl::StrCat("the handler of signal ", sched.preempt_signal,
                        " (goro's preemption signal, Options::preempt_signal) was replaced after the runtime "
                        "started; choose another signal for one of the two, or set "
                        "Options::async_preemption = false"));
  }
  m->signal_state.compare_exchange_strong(v, ps::With(v, ps::kIdle), std::memory_order_seq_cst);
}

void EnterSyscall(bool from_runtime) {
  G* g = CurrentGoroutine();
  // A region inside a region (goro::Syscall around code that uses another)
  // is part of the outer one.
  if (int32_t depth = g->syscall_depth; depth != 0) {
    g->syscall_depth = depth + 1;
    return;
  }
  const int32_t off = g->preempt_off.load(std::memory_order_relaxed);
  // The program's region, with the goroutine inside runtime code: only a
  // signal handler of the program's gets here, having interrupted that code
  // (the runtime enters its own regions with from_runtime). The code it
  // interrupted may be using the P - halfway through its run queue, holding
  // sched.mu, between `m->request = req` and the switch in SwitchToG0 - and
  // resumes when the handler returns: the P must not go to another M
  // meanwhile, nor may leaving the region wait for a P or switch to g0. The
  // region keeps the P instead, as a nested one would. (A NoPreemptScope is
  // user code: its regions hand off as any others.)
  if (!from_runtime && InRuntimeCode(off)) {
    g->syscall_depth = kSyscallKeptP;
    return;
  }
  g->syscall_depth = 1;
  g->preempt_off.store(off + kInRuntime, std::memory_order_relaxed);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  M* m = CurrentM();  // preemption is off: it cannot change now
  // Halfway through a switch (runtime code raises preempt_off before it
  // switches, so this should not happen; the switch is the worst place for
  // a hand-off to land).
  if (!from_runtime && m->in_switch.load(std::memory_order_relaxed)) {
    std::atomic_signal_fence(std::memory_order_seq_cst);
    g->preempt_off.store(off, std::memory_order_relaxed);
    g->syscall_depth = kSyscallKeptP;
    return;
  }
  EnsurePAfterEntry(g);
  m = CurrentM();  // the same M (ReacquireP keeps the goroutine on it)
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
  if (preempt_signal::State(m->signal_state.load(std::memory_order_seq_cst)) != preempt_signal::kIdle) {
    WaitOutPreemptSignal(m);
  }
  // Work is waiting for this P: make sure sysmon looks soon.
  if (!p->runq.Empty() || sched.runq_size.load(std::memory_order_relaxed) > 0) WakeSysmonForSyscall();
}

void ExitSyscall() {
  G* g = CurrentGoroutine();
  const int32_t depth = g->syscall_depth;
  if (depth <= 0) FatalG("a marked blocking region ended on a goroutine that did not start it");
  if (depth != 1 && depth != kSyscallKeptP) {  // a nested region
    g->syscall_depth = depth - 1;
    return;
  }
  // From here to the end preempt_off still says "runtime code" (raised on
  // entry, or by the code whose handler a kept region is in): a region in a
  // signal handler that interrupts this keeps the P.
  g->syscall_depth = 0;
  if (depth == kSyscallKeptP) return;
  int saved_errno = errno;
  M* m = CurrentM();
  P* p = m->p;
  M* owner = m;
  if (p->syscall_owner.compare_exchange_strong(owner, nullptr, std::memory_order_acq_rel)) {
    SetPStatusByOwner(p, P::Status::kRunning);  // still ours: sysmon did not retake it
  } else {
    // Sysmon handed our P to another M. If that M is in a blocking region of
    // its own, take the P from it as sysmon would (Go's exitsyscallfast does
    // the same with its old P): goroutines taking turns at blocking calls
    // then pass the P from one that returns to one that blocks without
    // waiting for sysmon and a thread wake-up each time. Else take an idle
    // P, or wait our turn in the global queue, wired to this thread
    // (ReacquirePOnSameThread).
    m->p = nullptr;
    if (!TakePFromBlockedM(m, g, p)) ReacquirePOnSameThread(m, g);
  }
  g->status.store(GStatus::kRunning, std::memory_order_relaxed);
  trace::SyscallExit(m->p, g);  // the same M (see above), perhaps another P
  std::atomic_signal_fence(std::memory_order_seq_cst);
  g->preempt_off.store(g->preempt_off.load(std::memory_order_relaxed) - kInRuntime, std::memory_order_relaxed);
  SetErrno(saved_errno);  // perhaps another thread's errno now
}

}  // namespace goro::internal

namespace goro {

SyscallScope::SyscallScope() : active_(internal::CurrentGoroutine() != nullptr) {
  if (active_) internal::EnterSyscall(/*from_runtime=*/false);
}

SyscallScope::~SyscallScope() {
  if (active_) internal::ExitSyscall();
}

}  // namespace goro
