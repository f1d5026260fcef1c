// The preemption signal handler (SIGURG by default).
//
// Runs in signal context on the M's alternate stack: only async-signal-safe
// calls, only data computed before the signal (the M and G records, the code
// range tables, the XSAVE size). It never switches stacks itself; when it is
// safe to stop the goroutine it edits the interrupted context so that, on
// return from the handler, the goroutine calls the trampoline
// (arch/preempt_*.S), which saves everything and parks it.
//
// It is safe to stop the goroutine only when all of these hold:
//   - the process is the one that started the runtime, not a child forked
//     from it without exec (a flag set by a pthread_atfork child handler is
//     checked first; there the signal only goes on to the previous handler);
//   - a signal of goro's is in flight to this M (M::signal_state), and this
//     delivery is it: sent by sysmon for the current generation (SI_QUEUE
//     from this process, with preempt_signal::kTag and the generation in
//     si_value), or any other once ours is marked sent. Standard signals do
//     not queue: one sent while another of the same number is pending on the
//     thread (a SIGURG the program queued to it, the kernel's for
//     out-of-band data, a late one of sysmon's from an earlier generation)
//     merges with it, and the handler runs once, with the first one's
//     siginfo; and the kernel delivers a thread's own pending signals before
//     the process's, so another SIGURG delivered after ours was sent means
//     ours merged into it. One delivered while ours is only about to be sent
//     is not ours. Every delivery that did not come from sysmon also goes to
//     the previous handler;
//   - the M runs a goroutine (not g0) and is not halfway through a switch;
//   - the goroutine is not in runtime code or a NoPreemptScope (preempt_off);
//   - the preemption request is still pending (stackguard0 == kStackPreempt);
//   - the interrupted code runs with its M's own signal mask (m_sigmask).
//     A signal blocked beyond it means the goroutine was interrupted inside a
//     signal handler of the program's (which blocks at least its own signal
//     while it runs): parked there and resumed on another thread, the
//     handler's sigreturn would install this thread's signal mask and
//     alternate stack on that one (two threads on one alternate stack
//     corrupt each other). A goroutine that changed its mask itself is not
//     preempted by signal either: the mask belongs to its thread and would
//     not follow it. (A handler installed with SA_NODEFER and an empty
//     sa_mask cannot be told apart this way; such handlers must not be on
//     goroutine threads.)
//   - the handler runs on the M's alternate stack. Called by a handler of
//     the program's installed later without SA_ONSTACK, it runs on the
//     goroutine's stack, below the kernel's signal frame, which begins right
//     under the red zone: the injected return address would overwrite that
//     frame (the XSAVE area's end marker, and then sigreturn restores only
//     the SSE part of the vector state). On another alternate stack, the
//     goroutine set one of its own, which belongs to this thread: it must
//     not be moved while it has it (signals/altstack.cc);
//   - the PC is in preemptible code (core/preempt.cc);
//   - the stack pointer is on the goroutine's stack, with room below the red
//     zone for the trampoline's frame.
// Otherwise the request stays in stackguard0: the goroutine yields at its next
// safe point, and sysmon signals again if it does not - at once when the last
// four rules refused it (the handler wakes sysmon), then with back-off.
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <ucontext.h>
#include <unistd.h>

#include "arch/cpu.h"
#include "core/fatal.h"
#include "core/runtime.h"
#include "signals/forward.h"

namespace goro::internal {

namespace {

struct sigaction previous_preempt;
int preempt_sig = 0;
pid_t our_pid = 0;  // the process that installed the handler (a forked child is not it)
// A forked child is told by in_forked_child (core/runtime.h), a flag rather
// than getpid() in the handler: that is a system call (glibc caches no pid)
// on every preemption.

// Room the trampoline needs below the red zone: return address, flags and 15
// registers, alignment, the XSAVE area, and the frames of the C++ it calls.
uintptr_t TrampolineRoom() { return 8 + 8 + 15 * 8 + 64 + goro_xsave_size + 2048; }

void ForwardPreempt(int sig, siginfo_t* info, void* uctx) {
  if (CallPreviousHandler(previous_preempt, sig, info, uctx)) return;
  // No handler: SIG_IGN, or SIG_DFL, whose action is done here. For SIGURG
  // (and SIGWINCH) that is to ignore it; for the other signals
  // Options::preempt_signal may be (SIGUSR1, SIGUSR2, real-time signals:
  // core/env.cc) it is to end the process. Dropping those too made a
  // kill -USR2 (or, when SIGINT and SIGTERM were accepted, a Ctrl-C and a
  // kill) do nothing at all.
  if (previous_preempt.sa_handler == SIG_DFL && DefaultActionEndsProcess(sig)) DieFromSignal(sig);
}

void PreemptHandler(int sig, siginfo_t* info, void* uctx_void) {
  goro_clear_alignment_check();  // the interrupted code's AC, kept by the kernel (arch/cpu.h)
  int saved_errno = errno;
  namespace ps = preempt_signal;
  // A child forked without exec has a copy of everything and no scheduler:
  // its copy of the forking M may say that a signal of goro's is in flight,
  // and its copy of the goroutine that a preemption is pending. Parked
  // there, the goroutine would leave the only thread to g0, which would run
  // the parent's goroutines' copies or wait for ever. Every signal there is
  // the program's.
  if (in_forked_child) {
    ForwardPreempt(sig, info, uctx_void);
    errno = saved_errno;
    return;
  }
  M* m = CurrentM();
  const auto value = reinterpret_cast<uintptr_t>(info->si_value.sival_ptr);
  const bool from_sysmon = info->si_code == SI_QUEUE && info->si_pid == our_pid && (value >> 32) == (ps::kTag >> 32);
  const auto sent = static_cast<uint32_t>(value);  // the word sysmon began, if from_sysmon
  bool ours = false;
  if (m != nullptr) {
    uint32_t v = m->signal_state.load(std::memory_order_acquire);
    // The signal in flight, or any other once it is marked sent (it merged
    // into this one). A late one of an earlier generation while the current
    // one is only begun is neither. Sysmon may mark it sent meanwhile (the
    // CAS fails): look again.
    while ((from_sysmon && ps::SameGeneration(v, sent) && ps::State(v) != ps::kIdle) || ps::State(v) == ps::kSent) {
      if (m->signal_state.compare_exchange_weak(v, ps::With(v, ps::kIdle), std::memory_order_acq_rel)) {
        ours = true;
        break;
      }
    }
  }
  if (!from_sysmon) ForwardPreempt(sig, info, uctx_void);
  if (!ours) {
    errno = saved_errno;
    return;
  }

  auto* uc = static_cast<ucontext_t*>(uctx_void);
  G* g = m->curg;
  if (g == nullptr || m->in_switch.load(std::memory_order_relaxed) ||
      g->preempt_off.load(std::memory_order_relaxed) != 0 ||
      g->stackguard0.load(std::memory_order_relaxed) != kStackPreempt) {
    errno = saved_errno;
    return;
  }
  // Refused below: the request stays in stackguard0, and sysmon is woken to
  // signal again (with back-off) rather than at its next look, up to a slice
  // later. Refusals above need no retry: the runtime code or the switch in
  // progress reaches a point that honours the request by itself.
  if (!IsMSignalMask(uc->uc_sigmask)) {  // interrupted with another mask than its M's
    m->sigmask_refused = true;  // g0 looks at the mask when the goroutine leaves
    WakeSysmonToRetry();
    errno = saved_errno;
    return;
  }
  // Not on the M's alternate stack: called by a handler of the program's
  // that runs on the goroutine's stack, right below the kernel's frame, or
  // the goroutine set an alternate stack of its own.
  const auto frame = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  const auto alt = reinterpret_cast<uintptr_t>(m->altstack);
  if (frame < alt || frame >= alt + m->altstack_size) {
    WakeSysmonToRetry();
    errno = saved_errno;
    return;
  }
  uintptr_t pc = static_cast<uintptr_t>(uc->uc_mcontext.gregs[REG_RIP]);
  uintptr_t sp = static_cast<uintptr_t>(uc->uc_mcontext.gregs[REG_RSP]);
  if (!PreemptiblePc(pc) || sp > g->stack.hi ||
      sp < g->stack.lo + 128 + TrampolineRoom() + 4096) {
    if (InLibraryCode(pc)) m->library_refusals.fetch_add(1, std::memory_order_relaxed);
    WakeSysmonToRetry();
    errno = saved_errno;
    return;
  }
  // Inject a call: below the red zone, push the interrupted PC as the return
  // address, and resume at the trampoline.
  sp -= 128;
  sp -= 8;
  *reinterpret_cast<uintptr_t*>(sp) = pc;
  uc->uc_mcontext.gregs[REG_RSP] = static_cast<greg_t>(sp);
  uc->uc_mcontext.gregs[REG_RIP] = reinterpret_cast<greg_t>(&goro_async_preempt);
  g->preempt_off.store(kInRuntime, std::memory_order_relaxed);  // until the trampoline has parked it
  errno = saved_errno;
}

}  // namespace

bool PreemptHandlerInstalled() {
  struct sigaction cur;
  if (sigaction(preempt_sig, nullptr, &cur) != 0) return true;  // cannot tell
  return (cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == PreemptHandler;
}

void InstallPreemptHandler(int sig) {
  preempt_sig = sig;
  our_pid = getpid();
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = PreemptHandler;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
  sigfillset(&sa.sa_mask);  // nothing may interrupt the context edit
  sigdelset(&sa.sa_mask, SIGSEGV);
  sigdelset(&sa.sa_mask, SIGBUS);
  if (sigaction(sig, &sa, &previous_preempt) != 0) {
    Fatal("cannot install the preemption signal handler");
  }
}

}  // namespace goro::internal
