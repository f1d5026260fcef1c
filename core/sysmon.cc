// sysmon: the system monitor, a dedicated thread that runs without a P.
//
// It times every P's current slice and asks the goroutine that has run past
// Options::time_slice to yield: stackguard0 = kStackPreempt for the
// cooperative path, and (with async preemption) the preemption signal to its
// M for a goroutine that reaches no safe point.
//
// Timing. Go's sysmon notices a new slice only at its next wake-up (up to
// 10 ms later) and preempts at a later one, so a 10 ms slice lasts 10 to
// 20 ms there. goro times slices in one of two ways, and in both sysmon
// sleeps exactly until the earliest known slice end:
//
//   - Slices shorter than kObservedSliceMinNs (4 ms): Execute stamps each new
//     slice with the TSC (about 23 cycles), so its end is known exactly.
//   - Longer slices (the default 10 ms): no stamp, since a TSC read on every
//     schedule would cost Yield and spawn a noticeable fraction. Sysmon takes
//     the time it first sees a slice's tick as its start; while any P runs it
//     looks at least every slice/8 (and at least 250 us apart), so a slice
//     ends at most 1/8 late (1.25 ms at 10 ms), and 50 us after a preemption
//     it looks again, so the slice that follows a preemption - a sleeper
//     beside a spinner, the case latency depends on - is timed to ~50 us.
//     This costs about 900 wake-ups a second while goroutines run.
//
// Sleeping: until the earliest known slice end, at most slice/8 (and at
// least 250 us) in observation mode; after asking a goroutine to yield, 50 us
// (doubling while the request goes unanswered). Go's rule - 20 us after any
// action, doubling only after 50 idle rounds - wakes about 60 times per slice
// beside a single hog; each wake-up costs tens of microseconds in a VM. When
// every P is idle it sleeps until AcquireP wakes it (WakeSysmon).
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "arch/cpu.h"
#include "core/fatal.h"
#include "core/runtime.h"

namespace goro::internal {

namespace {

// Nanoseconds per TSC tick, measured at start-up.
double ns_per_tick = 0;

void CalibrateTsc() {
  int64_t t0 = Nanotime();
  uint64_t c0 = arch::ReadTsc();
  timespec ts{0, 2000000};
  nanosleep(&ts, nullptr);
  int64_t t1 = Nanotime();
  uint64_t c1 = arch::ReadTsc();
  ns_per_tick = c1 > c0 ? static_cast<double>(t1 - t0) / static_cast<double>(c1 - c0) : 1.0;
}

struct PState {
  uint32_t tick = 0;
  uint64_t start_tsc = 0;
  uint32_t syscalltick = 0;
  int64_t syscall_since = 0;  // when sysmon first saw this blocking region
};

constexpr int64_t kSyscallIdleHandoffNs = 10 * 1000 * 1000;
constexpr int64_t kNetpollEveryNs = 10 * 1000 * 1000;

constexpr int64_t kScavengePeriodNs = 100 * 1000 * 1000;
constexpr int64_t kScavengeBacklogNs = 2 * 1000 * 1000;

bool AllPsIdle() { return sched.npidle.load(std::memory_order_acquire) == sched.nprocs; }

void* SysmonMain(void*) {
  prctl(PR_SET_NAME, "goro-sysmon");
  prctl(PR_SET_TIMERSLACK, 1);  // wake on time: the slice end is the point
  CalibrateTsc();
  std::vector<PState> ps(sched.nprocs);
  const int64_t slice = sched.time_slice_ns;
  const bool stamped = sched.stamp_slices;
  // The longest sleep while any P runs: in observation mode it bounds how
  // late a slice that began unobserved can end.
  const int64_t max_sleep =
      stamped ? std::min<int64_t>(10 * 1000 * 1000, slice)
              : std::max<int64_t>(slice / kObservePerSlice, kObserveMinNs);
  int64_t retry = kSysmonRecheckNs;  // grows while a request goes unanswered
  int64_t sleep = max_sleep;
  int64_t next_scavenge = Nanotime() + kScavengePeriodNs;
  for (;;) {
    if (int64_t now = Nanotime(); now >= next_scavenge) {
      bool more = StackScavenge();
      next_scavenge = now + (more ? kScavengeBacklogNs : kScavengePeriodNs);
    }
    if (AllPsIdle() && StackScavenge(/*all=*/true)) {
      // What is idle now stays idle while we sleep; a backlog is worked off
      // in batches, so that sysmon never stops for long.
      sched.sysmon_note.SleepUntil(Nanotime() + kScavengeBacklogNs);
      sched.sysmon_note.Clear();
      continue;
    }
    if (AllPsIdle()) {
      sched.sysmon_deep.store(true, std::memory_order_seq_cst);
      if (AllPsIdle()) sched.sysmon_note.Sleep();
      sched.sysmon_deep.store(false, std::memory_order_relaxed);
      sched.sysmon_note.Clear();
    } else {
      sched.sysmon_note.SleepUntil(Nanotime() + std::max<int64_t>(sleep, 1000));
      sched.sysmon_note.Clear();
    }

    int64_t now = Nanotime();
    sched.coarse_now.store(now, std::memory_order_relaxed);
    // Nobody has polled the network for a while (every P busy): do it.
    if (NetpollInited()) {
      int64_t last = sched.last_poll.load(std::memory_order_relaxed);
      if (last != 0 && now - last > kNetpollEveryNs) InjectGList(Netpoll(0));
    }
    uint64_t now_tsc = arch::ReadTsc();
    bool asked = false;
    int64_t until_expiry = max_sleep;
    for (int i = 0; i < sched.nprocs; ++i) {
      P* p = sched.allp[i];
      P::Status st = p->status.load(std::memory_order_acquire);
      if (st == P::Status::kSyscall) {
        // Retake a P whose M blocks in a marked region: at the second look
        // at the same region if goroutines wait to run, else after 10 ms.
        uint32_t sc = p->syscalltick.load(std::memory_order_relaxed);
        bool work = !p->runq.Empty() || sched.runq_size.load(std::memory_order_relaxed) > 0;
        if (sc != ps[i].syscalltick) {
          ps[i].syscalltick = sc;
          ps[i].syscall_since = now;
          until_expiry = std::min(until_expiry, work ? kSysmonRecheckNs : kSyscallIdleHandoffNs);
          continue;
        }
        if (!work && now - ps[i].syscall_since < kSyscallIdleHandoffNs) {
          until_expiry = std::min(until_expiry, ps[i].syscall_since + kSyscallIdleHandoffNs - now);
          continue;
        }
        P::Status want = P::Status::kSyscall;
        if (p->status.compare_exchange_strong(want, P::Status::kIdle, std::memory_order_acq_rel)) {
          sched.handoffs.fetch_add(1, std::memory_order_relaxed);
          p->m.store(nullptr, std::memory_order_relaxed);
          HandoffP(p);
        }
        continue;
      }
      if (st != P::Status::kRunning || p->m.load(std::memory_order_relaxed) == nullptr) continue;
      uint32_t tick = p->schedtick.load(std::memory_order_acquire);
      if (tick != ps[i].tick) {
        ps[i].tick = tick;
        ps[i].start_tsc = stamped ? p->slice_start_tsc.load(std::memory_order_relaxed) : now_tsc;
      }
      int64_t ran = now_tsc > ps[i].start_tsc
                        ? static_cast<int64_t>(static_cast<double>(now_tsc - ps[i].start_tsc) * ns_per_tick)
                        : 0;
      if (ran >= slice) {
        if (PreemptOne(p, tick)) asked = true;
      } else {
        until_expiry = std::min(until_expiry, slice - ran);
      }
    }
    if (asked) {
      // Look again soon: to time the slice that follows the preemption (in
      // observation mode), and to signal again if the goroutine was at a
      // point where it could not stop. Back off while it stays unanswered.
      sleep = std::min(retry, until_expiry);
      retry = std::min(retry * 2, max_sleep);
    } else {
      sleep = until_expiry;
      retry = kSysmonRecheckNs;
    }
  }
  return nullptr;
}

}  // namespace

bool PreemptOne(P* p, uint32_t tick) {
  M* m = p->m.load(std::memory_order_acquire);
  if (m == nullptr) return false;
  G* g = __atomic_load_n(&m->curg, __ATOMIC_ACQUIRE);
  if (g == nullptr) return false;
  // If a new slice began since sysmon judged this one spent, `g` may be the
  // goroutine that just started: leave it alone. (A slice that begins after
  // this check can only see the request land on a goroutine that is no longer
  // running; Execute clears it, and the handler finds no request on the new one.)
  if (p->schedtick.load(std::memory_order_acquire) != tick) return false;
  g->stackguard0.store(kStackPreempt, std::memory_order_release);
  if (sched.async_preemption && !m->signal_pending.exchange(true, std::memory_order_seq_cst)) {
    // Never signal an M entering a blocking region: EnterSyscall publishes
    // kSyscall and then waits out signal_pending; we publish signal_pending
    // and then look at the status. One of us sees the other.
    if (p->status.load(std::memory_order_seq_cst) != P::Status::kRunning) {
      m->signal_pending.store(false, std::memory_order_release);
      return true;
    }
    if (::syscall(SYS_tgkill, getpid(), m->tid, sched.preempt_signal) == 0) {
      sched.preempt_signals_sent.fetch_add(1, std::memory_order_relaxed);
    } else {
      m->signal_pending.store(false, std::memory_order_relaxed);
    }
  }
  return true;
}

void WakeSysmon() {
  if (sched.sysmon_deep.load(std::memory_order_seq_cst)) sched.sysmon_note.Wakeup();
}

void StartSysmon() {
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);  // sysmon takes no signals
  pthread_t t;
  int err = pthread_create(&t, &attr, SysmonMain, nullptr);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  pthread_attr_destroy(&attr);
  if (err != 0) Fatal("cannot start sysmon");
}

}  // namespace goro::internal
