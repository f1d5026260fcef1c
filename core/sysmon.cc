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
//     looks at least every slice/8 (at least 250 us apart, at most 10 ms),
//     so a slice ends at most 1/8 late (1.25 ms at 10 ms), and 50 us after a
//     preemption it looks again, so the slice that follows a preemption - a
//     sleeper beside a spinner, the case latency depends on - is timed to
//     ~50 us.
//     This costs about 900 wake-ups a second while goroutines run.
//     While every look finds every running P on a slice it has not seen,
//     after a new slice every 100 us or less on average (goroutines
//     switching constantly, as in a server), and none in a marked region,
//     there is nothing to time, and the period doubles up to slice/2 (at
//     most 10 ms). A slice first seen after such a gap is dated slice/8
//     after the look before (no earlier than the planned gap allows), so it
//     still ends at most 1/8 late; it may end up to 3/8 early. On a
//     10,000-connection echo server pinned to one CPU, which sysmon shares,
//     this cut context switches from ~1,400 to ~450 a second and raised
//     requests/s by 4-12%.
//
// Sleeping: until the earliest known slice end, at most slice/8 (and at
// least 250 us) in observation mode - slice/2 while it backs off as above -
// and never over 10 ms while a P runs.
// After asking a goroutine to yield, in observation mode 50 us, to time the
// slice that follows; with stamps one slice, since the stamp of the slice
// that follows times it. A request the signal handler had to refuse
// (library code, signals blocked) wakes sysmon at once to ask again, then
// again after 50 us, doubling, per P.
// While no P is idle, also no later than the earliest timer of a P whose M
// blocks (in a marked region, or found asleep in an unmarked call): that P
// is then handed on (see the loop).
// A marked region entered while goroutines wait wakes sysmon if it would
// look more than 1 ms later (WakeSysmonForSyscall), at most once per sleep;
// for 10 ms after such a wake-up sysmon sleeps at most 1 ms at a time, so
// that a stream of short marked calls does not cut every sleep short.
// One look per stamped slice also needs a CPU-time verdict at that look:
// SampleCpu compares with the previous look's sample of the same M, even if
// that was in the slice before.
//
// Go's rule - 20 us after any action, doubling only after 50 idle rounds -
// wakes about 60 times per slice beside a single hog; each wake-up costs
// tens of microseconds in a VM. When
// every P is idle it sleeps until AcquireP wakes it (WakeSysmon).
#include <pthread.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <fcntl.h>
#include <string.h>

#include <algorithm>
#include <cstdio>
#include <new>
#include <vector>

#include "arch/cpu.h"
#include "core/fatal.h"
#include "core/runtime.h"
#include "core/trace.h"

namespace goro::internal {

namespace {

// Nanoseconds per TSC tick. A first estimate over 50 us at start-up, made
// precise over the first second by RefineTsc at every look: sysmon's first
// look must not wait for a long measurement (a 2 ms sleep here delayed the
// first hand-off and the first preemption after start-up by as much).
double ns_per_tick = 0;
int64_t calib_ns = 0;    // where the measurement began: the clock
uint64_t calib_tsc = 0;  // and the TSC

constexpr int64_t kTscFirstEstimateNs = 50 * 1000;
constexpr int64_t kTscRefineForNs = 1000 * 1000 * 1000;

void CalibrateTsc() {
  calib_ns = Nanotime();
  calib_tsc = arch::ReadTsc();
  int64_t t;
  uint64_t c;
  do {
    t = Nanotime();
    c = arch::ReadTsc();
  } while (t - calib_ns < kTscFirstEstimateNs);
  ns_per_tick = c > calib_tsc ? static_cast<double>(t - calib_ns) / static_cast<double>(c - calib_tsc) : 1.0;
}

void RefineTsc(int64_t now, uint64_t now_tsc) {
  if (calib_ns == 0 || now_tsc <= calib_tsc) return;
  ns_per_tick = static_cast<double>(now - calib_ns) / static_cast<double>(now_tsc - calib_tsc);
  if (now - calib_ns >= kTscRefineForNs) calib_ns = 0;  // precise enough: fixed from now on
}

// A thread's CPU clock and the wall time it was read at.
struct CpuReading {
  int64_t cpu = -1;  // -1: none
  int64_t wall = 0;
};

struct PState {
  CpuReading fresh;  // SampleCpu's latest reading, whatever the slice
  uint32_t tick = 0;
  uint64_t start_tsc = 0;
  // The last sample of an M's CPU time: which M, and the slice it was taken in.
  M* cpu_m = nullptr;
  uint32_t cpu_tick = 0;
  int64_t cpu_ns = 0;
  int64_t cpu_wall = 0;
  // The slice sysmon last asked to end; a second request for the same slice
  // means the first went unanswered. Repeats wait until retry_at, with
  // retry_delay doubling from kSysmonRecheckNs.
  uint32_t asked_tick = 0;
  bool asked = false;
  int64_t asked_at = 0;  // when the first request for asked_tick went out
  uint32_t asked_refusals = 0;  // the M's library_refusals then
  int64_t retry_at = 0;
  int64_t retry_delay = 0;
  uint32_t syscalltick = 0;
  int64_t syscall_since = 0;  // when sysmon first saw this blocking region
};

constexpr int64_t kSyscallIdleHandoffNs = 10 * 1000 * 1000;
// The least time a preemption request stays unanswered, while goroutines
// wait, before sysmon takes the P (a membarrier and a hand-off).
constexpr int64_t kUnansweredRevokeNs = 10 * 1000 * 1000;

enum class Verdict { kUnknown, kRunning, kBlocked };

// Whether the thread is asleep in the kernel (state S or D in
// /proc/self/task/TID/stat) rather than runnable but waiting for a CPU (R),
// which shows no CPU progress either. Read only to confirm a suspicion.
bool AsleepInKernel(pid_t tid) {
  char path[64];
  snprintf(path, sizeof path, "/proc/self/task/%d/stat", static_cast<int>(tid));
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[512];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return false;
  buf[n] = 0;
  const char* paren = strrchr(buf, ')');  // the command name may contain anything
  if (paren == nullptr || paren[1] != ' ') return false;
  return paren[2] == 'S' || paren[2] == 'D';
}



// Samples the CPU time of m's thread and compares it with the previous
// sample of the same M, at least 20 us old.
//   - At least 1/8 of a CPU over the interval: running. The interval may span
//     slices (one sample per look then serves both the verdict and the next
//     baseline, and a short slice needs one look, at its end). The thread may
//     have entered a blocking call since; whoever acts on kRunning with a
//     signal checks that it is still on a CPU right before (StillOnCpu).
//   - Less, within one slice: asleep in the kernel (or descheduled; handing
//     its P on is harmless then too).
//   - Less across slices: unknown; the M may have idled between them.
Verdict SampleCpu(PState& s, M* m, uint32_t tick, int64_t now) {
  timespec ts;
  if (clock_gettime(m->cpu_clock, &ts) != 0) return Verdict::kUnknown;
  int64_t cpu = int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
  s.fresh = CpuReading{cpu, Nanotime()};
  Verdict v = Verdict::kUnknown;
  const bool same_m = s.cpu_m == m;
  const int64_t dw = now - s.cpu_wall;
  if (same_m && dw >= 20 * 1000) {
    if ((cpu - s.cpu_ns) * 8 >= dw) {
      v = Verdict::kRunning;
    } else if (s.cpu_tick == tick) {
      v = Verdict::kBlocked;
    }
  }
  if (!(same_m && s.cpu_tick == tick && dw < 20 * 1000)) {
    s.cpu_m = m;
    s.cpu_tick = tick;
    s.cpu_ns = cpu;
    s.cpu_wall = now;
  }
  return v;
}
constexpr int64_t kNetpollEveryNs = 10 * 1000 * 1000;

// The freeze at exit (FreezeAtExit in core/proc.cc) gives way when the thread
// running exit() waits: a global's destructor that locks a std::mutex a
// frozen goroutine holds, joins a thread whose Run waits for a frozen
// goroutine, or waits for one in goro from a signal handler, would wait for
// ever. Waiting is what its CPU clock shows: less than 1/8 of a CPU over
// every look for kExitWaitThawNs, and asleep in the kernel at the end (not
// runnable and kept off a CPU by a busy machine). It may be waiting for
// something else (a slow write, a sleep): the freeze then ends all the same,
// and the goroutines run on during the rest of the exit, as they did before
// there was a freeze. Sysmon looks at least every kExitWatchEveryNs while
// the freeze lasts, and judges intervals of at least half that.
constexpr int64_t kExitWaitThawNs = 100 * 1000 * 1000;
constexpr int64_t kExitWatchEveryNs = 10 * 1000 * 1000;

struct ExitWatch {
  int64_t cpu = -1;  // the thread's CPU clock at the last look judged (-1: none yet)
  int64_t wall = 0;  // and when it was read
  int64_t waiting_since = 0;  // the first look of the intervals it has waited through
};

// Whether the freeze at exit is on and FreezeAtExit has published the thread
// to watch.
bool WatchingExitingThread() {
  return sched.frozen.load(std::memory_order_acquire) && sched.exit_tid.load(std::memory_order_acquire) != 0;
}

void WatchExitingThread(ExitWatch& w, int64_t now) {
  if (!WatchingExitingThread()) return;
  if (w.cpu >= 0 && now - w.wall < kExitWatchEveryNs / 2) return;  // too short to judge
  timespec ts;
  if (clock_gettime(sched.exit_cpu_clock, &ts) != 0) return;
  const int64_t cpu = int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
  if (w.cpu < 0 || (cpu - w.cpu) * 8 >= now - w.wall) {
    w.waiting_since = now;  // the first look, or it ran
  } else if (now - w.waiting_since >= kExitWaitThawNs &&
             AsleepInKernel(sched.exit_tid.load(std::memory_order_relaxed))) {
    ThawAfterExitFreeze();
  }
  w.cpu = cpu;
  w.wall = now;
}

// The preemption signal, one in flight per M (M::signal_state). Sysmon
// begins one (kSending) before its last checks, and either ends it (kIdle)
// or sends it and marks it sent (kSent); the handler acknowledges it (kIdle)
// at any point after the send. A standard signal marked sent and never
// acknowledged for this long was lost (merged into a SIGURG of the program's
// that was pending on the thread, and delivered as that one before sysmon
// marked it sent): it may be begun again.
constexpr int64_t kLostPreemptSignalNs = 10 * 1000 * 1000;

// Whether signals of this number queue, one entry per send, rather than
// merge with one pending: the realtime signals, from the kernel's SIGRTMIN
// (32; glibc's SIGRTMIN is above it, after the signals it keeps for itself).
// Such a signal is never lost: one not acknowledged is still pending, on a
// thread that blocks it. Sent again every kLostPreemptSignalNs, each would
// queue behind it and take one of the user's RLIMIT_SIGPENDING entries,
// which every process of the user shares; once they are gone, sigqueue,
// timers and AIO fail with EAGAIN everywhere.
bool PreemptSignalQueues() { return sched.preempt_signal >= 32; }

// getpid() and getuid() are system calls: asked once, by StartSysmon, before
// anyone can send a signal (sysmon, or exit(): FreezeAtExit in core/proc.cc).
pid_t process_id = 0;
uid_t user_id = 0;

// Begins a signal to m unless one is in flight; on success *word is the
// state word to pass to EndPreemptSignal or SendPreemptSignal.
bool BeginPreemptSignal(M* m, int64_t now, uint32_t* word) {
  namespace ps = preempt_signal;
  uint32_t v = m->signal_state.load(std::memory_order_seq_cst);
  if (ps::State(v) == ps::kSending) return false;
  if (ps::State(v) == ps::kSent && (PreemptSignalQueues() || now - m->signal_sent_at < kLostPreemptSignalNs)) {
    return false;  // pending still (never lost, if realtime), or merged into another only just
  }
  uint32_t next = ps::With(v + 4, ps::kSending);  // a new generation
  if (!m->signal_state.compare_exchange_strong(v, next, std::memory_order_seq_cst)) return false;
  *word = next;
  return true;
}

// Ends a signal begun and not sent (the handler may have ended it already:
// a tgkill of the program's from this process looks like ours).
void EndPreemptSignal(M* m, uint32_t word) {
  m->signal_state.compare_exchange_strong(word, preempt_signal::With(word, preempt_signal::kIdle),
                                          std::memory_order_seq_cst);
}

void SendPreemptSignal(M* m, uint32_t word) {
  siginfo_t si;
  memset(&si, 0, sizeof si);
  si.si_signo = sched.preempt_signal;
  si.si_code = SI_QUEUE;
  si.si_pid = process_id;
  si.si_uid = user_id;
  si.si_value.sival_ptr = reinterpret_cast<void*>(static_cast<uintptr_t>(preempt_signal::kTag | word));
  if (::syscall(SYS_rt_tgsigqueueinfo, process_id, m->tid, sched.preempt_signal, &si) == 0) {
    sched.preempt_signals_sent.fetch_add(1, std::memory_order_relaxed);
    m->signal_sent_at = Nanotime();
    // Fails if the handler has acknowledged it already.
    m->signal_state.compare_exchange_strong(word, preempt_signal::With(word, preempt_signal::kSent),
                                            std::memory_order_seq_cst);
  } else {
    EndPreemptSignal(m, word);
  }
}

// Right before a signal: is the thread still on a CPU? Its CPU clock must
// advance over ~3 us, or the kernel must say it is not asleep. This shrinks
// the window in which a thread that just entered a blocking call (after the
// last sample showed it running) would be interrupted with EINTR; it cannot
// close it, which is why blocking calls should be marked (goro::Syscall).
// `last` is a reading of the clock taken moments ago (by SampleCpu), which
// saves one system call and part of the wait; without one, it reads twice.
bool StillOnCpu(M* m, CpuReading last) {
  timespec ts;
  if (last.cpu < 0 || Nanotime() - last.wall > 50 * 1000) {
    if (clock_gettime(m->cpu_clock, &ts) != 0) return true;
    last = CpuReading{int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec, Nanotime()};
  }
  int64_t c1 = last.cpu;
  int64_t until = last.wall + 3000;
  while (Nanotime() < until) arch::CpuRelax();
  if (clock_gettime(m->cpu_clock, &ts) != 0) return true;
  int64_t c2 = int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
  return c2 - c1 > 1000 || !AsleepInKernel(m->tid);
}

// While any P runs, stacks that sat unused for a whole period give their
// pages back. At 100 ms, a program that runs bursts of goroutines back to
// back (fib(27) on 2 Ps, 0.2 s a run) had thousands of stacks given back
// between two bursts and faulted in again by the next: 25% slower. A second
// keeps that rare and still gives memory back soon after a burst; with every
// P idle, sysmon gives back at once.
constexpr int64_t kScavengePeriodNs = 1000 * 1000 * 1000;
constexpr int64_t kScavengeBacklogNs = 2 * 1000 * 1000;

bool AllPsIdle() { return sched.npidle.load(std::memory_order_acquire) == sched.nprocs; }

// Sysmon's sleep while some P runs, published for WakeSysmonForTimer and
// WakeSysmonForSyscall. Returns true if WakeSysmonForSyscall cut it short.
bool SleepUntil(int64_t until) {
  sched.sysmon_wake_at.store(until, std::memory_order_seq_cst);
  sched.sysmon_note.SleepUntil(until);
  const bool for_syscall = sched.sysmon_wake_at.exchange(INT64_MAX, std::memory_order_relaxed) == kSysmonWokenEarly;
  sched.sysmon_note.Clear();
  return for_syscall;
}

void SysmonLoop() {
  prctl(PR_SET_NAME, "goro-sysmon");
  prctl(PR_SET_TIMERSLACK, 1);  // wake on time: the slice end is the point
  CalibrateTsc();
  std::vector<PState> ps(sched.nprocs);
  // How often a goroutine whose P was revoked is looked at, while its thread
  // runs or has just been revoked (see the revoked_ms loop for the back-off).
  constexpr int64_t kRevokedLookNs = kSysmonRecheckNs * 4;
  struct RevokedM {
    M* m;
    G* g;
    PState cpu;
    int64_t next_look = 0;  // back-off while its thread stays asleep, or runs on unanswering
    int64_t delay = kRevokedLookNs;
    bool signalled = false;  // asked by signal at the last look, and still revoked
  };
  std::vector<RevokedM> revoked_ms;
  const int64_t slice = sched.time_slice_ns;
  const bool stamped = sched.stamp_slices;
  // The longest sleep while any P runs: in observation mode it bounds how
  // late a slice that began unobserved can end. Never over 10 ms (Go's
  // sysmon's longest sleep too): a P blocked in a system call is looked at
  // no later than that, whatever the slice. (With a 10 s slice, slice/8 kept
  // a goroutine queued behind a blocked P waiting 1.2 s. Entering a marked
  // region with goroutines waiting now wakes sysmon too, if it would look
  // more than 1 ms later: WakeSysmonForSyscall.)
  constexpr int64_t kLongestSleepNs = 10 * 1000 * 1000;
  const int64_t max_sleep = std::min<int64_t>(
      kLongestSleepNs, stamped ? slice : std::max<int64_t>(slice / kObservePerSlice, kObserveMinNs));
  // Stamped slices may be ended this much early by a look that comes then
  // anyway. After a request sysmon sleeps one slice, not until the next
  // slice's stamp (which comes a few microseconds later, once the goroutine
  // has stopped), so its next look may come that much before the next
  // slice's end: ending the slice there, rather than sleeping again for the
  // few microseconds left, keeps it to one wake-up per slice instead of two.
  const int64_t early = stamped ? std::min<int64_t>(slice / 8, kSysmonRecheckNs) : 0;
  // Observation mode backs off while every look finds every running P
  // switching constantly: on a new slice, after at least one new slice per
  // kChurnSliceNs on average since the look before (an echo server makes
  // one or two per request, over a hundred a millisecond). Its looks then
  // time nothing, and each one costs the program a context switch on a CPU
  // it uses. The period doubles from max_sleep up to half a slice (at most
  // 10 ms) and drops back at the first look that finds a P keeping its
  // slice, switching less often, or in a marked region (whose hand-off the
  // short looks time). A look that comes less than max_sleep after the one
  // before (the recheck after a request, the first after a deep sleep)
  // leaves the period as it is. (A goroutine sleeping 1 ms at a time beside
  // an unmarked blocking call switches about once a millisecond: the short
  // looks stay, and find the call in time for its timer.)
  // A slice first seen after a longer gap than max_sleep is dated max_sleep
  // after the look before, so it still ends at most max_sleep late; it may
  // end up to look_every - max_sleep early instead (3/8 of a slice at most),
  // never more, however late sysmon wakes.
  constexpr int64_t kChurnSliceNs = 100 * 1000;
  const int64_t max_look_every =
      stamped ? max_sleep : std::min<int64_t>(kLongestSleepNs, std::max<int64_t>(slice / 2, max_sleep));
  int64_t look_every = max_sleep;
  int64_t last_look = Nanotime();
  int64_t sleep = max_sleep;
  // Until then sysmon sleeps at most kSyscallLookSoonNs at a time, which no
  // marked region cuts short: for kLongestSleepNs after a region entered
  // with goroutines waiting woke it. A goroutine that makes one short marked
  // call after another, with work queued, would otherwise wake it early from
  // nearly every longer sleep (measured with empty marked calls beside a
  // goroutine that yields, on 1 P: 550-1500 early wake-ups a second without
  // this, 80-90 with it).
  int64_t short_sleeps_until = 0;
  int64_t next_scavenge = Nanotime() + kScavengePeriodNs;
  const int64_t trace_every = sched.schedtrace_ns;
  int64_t next_trace = trace_every > 0 ? sched.start_time + trace_every : INT64_MAX;
  ExitWatch exit_watch;
  for (;;) {
    if (int64_t at = sched.deadlock_check_at.load(std::memory_order_acquire); at != 0 && Nanotime() >= at) {
      sched.deadlock_check_at.store(0, std::memory_order_relaxed);
      CheckDeadlock();  // after exit() has begun, only for a Run begun since
    }
    WatchExitingThread(exit_watch, Nanotime());
    if (int64_t now = Nanotime(); now >= next_trace) {
      PrintSchedTrace(now, sched.scheddetail);
      next_trace += trace_every * ((now - next_trace) / trace_every + 1);
    }
    // Idle Ps' stack caches go to the pool first: its scavenger gives back
    // their pages once they stay unused (every one above a small budget
    // when no P runs), which a P's cache alone never does.
    if (int64_t now = Nanotime(); now >= next_scavenge) {
      StackFlushIdleCaches();
      for (int i = 0; i < sched.nprocs; ++i) {
        P* p = sched.allp[i];
        if (p->status.load(std::memory_order_relaxed) != P::Status::kIdle) {
          p->stack_cache_trim.store(true, std::memory_order_relaxed);
        }
      }
      bool more = StackScavenge();
      next_scavenge = now + (more ? kScavengeBacklogNs : kScavengePeriodNs);
    }
    const bool all_idle = AllPsIdle();
    if (all_idle) StackFlushIdleCaches();
    if (all_idle && StackScavenge(/*all=*/true)) {
      // What is idle now stays idle while we sleep; a backlog is worked off
      // in batches, so that sysmon never stops for long.
      sched.sysmon_note.SleepUntil(Nanotime() + kScavengeBacklogNs);
      sched.sysmon_note.Clear();
      last_look = Nanotime();  // whatever runs now began during that sleep
      continue;
    }
    // What sysmon wakes for even with nothing to run: the next schedtrace
    // line, a deadlock check that is due.
    int64_t wake_for = next_trace;
    if (int64_t at = sched.deadlock_check_at.load(std::memory_order_acquire); at != 0) {
      wake_for = std::min(wake_for, at);
    }
    // The thread running exit(), while it freezes goroutines that may be
    // all there is (FreezeAtExit wakes us for it).
    if (WatchingExitingThread()) wake_for = std::min(wake_for, Nanotime() + kExitWatchEveryNs);
    if (AllPsIdle()) {
      // Deep: the first P to run wakes it (WakeSysmon). Tracing or not: a
      // sleep until the next line that nothing could end left a spinner
      // that started meanwhile unpreempted, and a deadlock unreported,
      // until that line.
      sched.sysmon_deep.store(true, std::memory_order_seq_cst);
      if (AllPsIdle()) {
        if (wake_for == INT64_MAX) {
          sched.sysmon_note.Sleep();
        } else {
          sched.sysmon_note.SleepUntil(wake_for);
        }
      }
      sched.sysmon_deep.store(false, std::memory_order_relaxed);
      sched.sysmon_note.Clear();
      // Whatever runs now began as sysmon was woken.
      last_look = Nanotime();
    } else {
      if (Nanotime() < short_sleeps_until) sleep = std::min(sleep, kSyscallLookSoonNs);
      if (SleepUntil(std::min(wake_for, Nanotime() + std::max<int64_t>(sleep, 1000)))) {
        short_sleeps_until = Nanotime() + kLongestSleepNs;
      }
    }

    int64_t now = Nanotime();
    sched.coarse_now.store(now, std::memory_order_relaxed);
    // Nobody has polled the network for a while (every P busy): do it.
    if (NetpollInited()) {
      int64_t last = sched.last_poll.load(std::memory_order_relaxed);
      if (last != 0 && now - last > kNetpollEveryNs) InjectGList(Netpoll(0));
    }
    uint64_t now_tsc = arch::ReadTsc();
    RefineTsc(now, now_tsc);
    bool recheck = false;  // look again soon: see the end of the loop
    // Constant switching on every running P: churning and not calm.
    bool churning = false;  // some running P is on a slice this look has not seen before
    bool calm = false;  // some P keeps its slice, switches less than constantly, or is in a marked region
    int64_t until_expiry = max_look_every;
    // A P's timers are run by the M that holds it, or by another M's last
    // stealing pass. While an M blocks with its P (below), only a P that is
    // idle lets another M in: the timer sleeper wakes for the earliest timer
    // of any P, takes an idle P and steals the expired timers. With none
    // idle it finds no P and sleeps on (waking sysmon), so a timer due on
    // any P - the blocked one, or one whose goroutine runs on - counts as
    // work for a blocked P, like a waiting goroutine: the M it is handed to
    // steals the timer. Sysmon wakes when the timer is due.
    //
    // Goroutines queued on another P count too while no P is idle and no M
    // spins: nobody else would steal them, and WakeP, finding no idle P,
    // starts nobody. The blocked P then goes to a spinning M (HandoffP),
    // which steals them; without this a loop of marked calls shorter than
    // 10 ms kept its P however long the queues beside it grew. (Go retakes
    // a P in a system call whenever no P is idle or spinning; goro keeps the
    // P with its M unless there is work for it.)
    bool timer_due = false;
    int64_t until_timer = INT64_MAX;  // how soon a pending timer falls due
    if (sched.npidle.load(std::memory_order_relaxed) == 0) {
      if (int64_t w = EarliestTimer(); w != 0) {
        timer_due = TimerDueSoon(w, now);
        if (!timer_due) until_timer = w - now;
      }
    }
    bool queued_elsewhere = false;  // goroutines wait in some P's queue that nobody would steal
    if (sched.npidle.load(std::memory_order_relaxed) == 0 && sched.nmspinning.load(std::memory_order_relaxed) == 0) {
      for (int i = 0; i < sched.nprocs && !queued_elsewhere; ++i) queued_elsewhere = !sched.allp[i]->runq.Empty();
    }
    for (int i = 0; i < sched.nprocs; ++i) {
      P* p = sched.allp[i];
      P::Status st = p->status.load(std::memory_order_acquire);
      // What waits for this P should its M be blocked: goroutines to run, or
      // (no P being idle) a timer.
      const bool work = !p->runq.Empty() || sched.runq_size.load(std::memory_order_relaxed) > 0 || timer_due;
      if (st == P::Status::kSyscall) {
        calm = true;
        // Retake a P whose M blocks in a marked region: at the second look
        // at the same region if goroutines wait to run - on this P, in the
        // global queue, or (no P idle, no M spinning) on any P - or one of
        // its timers is due while no P is idle; else after 10 ms of the
        // region. Other Ps' queues do not count as work for an M asleep in
        // an unmarked call (below): its slice is timed across its calls, so
        // it loses its P within 10 ms (or half a longer slice) anyway, and
        // counting them would sample the CPU clock of every running P at
        // each look while any queue is non-empty, and revoke (a membarrier)
        // far more often.
        const bool wanted = work || queued_elsewhere;
        uint32_t sc = p->syscalltick.load(std::memory_order_relaxed);
        if (sc != ps[i].syscalltick) {
          ps[i].syscalltick = sc;
          ps[i].syscall_since = now;
          until_expiry = std::min({until_expiry, wanted ? kSysmonRecheckNs : kSyscallIdleHandoffNs, until_timer});
          continue;
        }
        if (!wanted && now - ps[i].syscall_since < kSyscallIdleHandoffNs) {
          until_expiry = std::min({until_expiry, ps[i].syscall_since + kSyscallIdleHandoffNs - now, until_timer});
          continue;
        }
        if (RetakePFromSyscall(p, /*except=*/nullptr)) {
          if (HandoffP(p)) sched.handoffs.fetch_add(1, std::memory_order_relaxed);  // not when it went idle
          // The goroutine the P goes to may block in a marked call of its
          // own at once (many goroutines taking turns at blocking calls):
          // look again in a tick, as Go's sysmon does after a retake. Left
          // to the 1 ms sleeps after WakeSysmonForSyscall, each hand-off
          // waited about 1 ms for its first look (200 goroutines making ten
          // 2 ms calls each on 1 P took 2.2 s; now about a quarter of that).
          if (wanted) until_expiry = std::min(until_expiry, kSysmonRecheckNs);
        }
        continue;
      }
      M* m = p->m.load(std::memory_order_acquire);
      if (st != P::Status::kRunning || m == nullptr) continue;
      uint32_t tick = p->schedtick.load(std::memory_order_acquire);
      // Only a slice that is still running since sysmon's last look can be
      // stuck (in a blocking call) or overdue; while slices change quickly,
      // scheduling is healthy and there is nothing to sample.
      bool same_slice = tick == ps[i].tick;
      if (!same_slice) {
        // Constant switching: a new slice every kChurnSliceNs at least, on
        // average, since the last look.
        if (static_cast<int64_t>(tick - ps[i].tick) * kChurnSliceNs < now - last_look) calm = true;
        ps[i].tick = tick;
        // Observed: dated now, or max_sleep after the last look if that was
        // longer ago - but no earlier than the planned gap allows (see
        // look_every).
        const int64_t unseen = std::clamp<int64_t>(now - last_look - max_sleep, 0, look_every - max_sleep);
        ps[i].start_tsc = stamped ? p->slice_start_tsc.load(std::memory_order_relaxed)
                                  : now_tsc - static_cast<uint64_t>(static_cast<double>(unseen) / ns_per_tick);
        churning = true;
      } else {
        calm = true;
      }
      int64_t ran = now_tsc > ps[i].start_tsc
                        ? static_cast<int64_t>(static_cast<double>(now_tsc - ps[i].start_tsc) * ns_per_tick)
                        : 0;
      G* g = __atomic_load_n(&m->curg, __ATOMIC_ACQUIRE);
      // Once exit() has begun (FreezeAtExit, core/proc.cc), a goroutine made
      // before is asked to stop at every look, whatever its slice, until a
      // scheduling point sets it aside: the exit hook waits only so long.
      const int64_t p_slice =
          g != nullptr && sched.frozen.load(std::memory_order_relaxed) &&
                  !g->runs_during_exit.load(std::memory_order_relaxed)
              ? 0
              : slice;
      // Is the thread running, or asleep in the kernel (an unmarked blocking
      // call)? Compare its CPU time over an interval of this same slice. A
      // thread is never signalled without a sample showing it on a CPU.
      // The first look at a slice samples too when goroutines wait, so that
      // its end finds a verdict ready instead of needing a second look.
      Verdict v = Verdict::kUnknown;
      if (g != nullptr && (work || ran >= p_slice / 2)) v = SampleCpu(ps[i], m, tick, now);
      bool asleep = false;
      if (v == Verdict::kBlocked) {
        if (g->preempt_off.load(std::memory_order_relaxed) != 0 || m->in_switch.load(std::memory_order_relaxed)) {
          // Asleep inside runtime code (a contended lock): not a blocking
          // call of its own; neither signalled nor revoked.
          v = Verdict::kUnknown;
        } else {
          // No CPU progress: asleep in the kernel, or runnable but waiting
          // for a CPU. Only the first is a blocking call; the second may be
          // signalled like any running goroutine.
          asleep = AsleepInKernel(m->tid);
          if (!asleep) v = Verdict::kRunning;
        }
      }
      // A goroutine asleep inside runtime code (a contended lock) is not in a
      // blocking call of its own, and TryRevokeP would back off anyway, after
      // a membarrier - an interrupt on every CPU. Check first, cheaply.
      if (asleep && (work || ran >= kSyscallIdleHandoffNs) && RevocationAvailable()) {
        if (TryRevokeP(p, m, g, tick)) revoked_ms.push_back(RevokedM{m, g, {}});
        continue;
      }
      // Asleep in an unmarked call with nothing to do yet: look again when
      // a timer of its P's falls due.
      if (asleep) until_expiry = std::min(until_expiry, until_timer);
      if (ran >= p_slice - early) {
        // A request the goroutine could not take (the signal came in library
        // code, or with signals blocked) wakes sysmon from the handler
        // (WakeSysmonToRetry), and the next request may follow at once;
        // later ones back off, and a look at retry_delay covers requests
        // that wake nobody.
        const bool again = ps[i].asked && ps[i].asked_tick == tick;
        // A request unanswered for a whole further slice (10 ms at least)
        // while goroutines wait, with its signals refused in library code:
        // the goroutine runs where no signal may stop it, typically a loop
        // over calls into libc or another shared library (a write(2) loop
        // spends nearly all its time there, and a signal lands on the
        // executable's few instructions between calls once in thousands).
        // Go's system calls are safe points of their own; here its P is
        // taken as from an unmarked blocking call, so that the goroutines
        // waiting for it run, and the goroutine runs on without one until it
        // enters the runtime (below, revoked_ms). Not for other refusals
        // (code the program excluded, a mask that blocks the signal, a
        // NoPreemptScope), nor with async preemption off: those keep their
        // P, as a call-free loop with async preemption off does in Go.
        if (v == Verdict::kRunning && again && work && sched.async_preemption &&
            now - ps[i].asked_at >= std::max(p_slice, kUnansweredRevokeNs) &&
            m->library_refusals.load(std::memory_order_relaxed) != ps[i].asked_refusals && RevocationAvailable()) {
          if (TryRevokeP(p, m, g, tick)) {
            revoked_ms.push_back(RevokedM{m, g, {}});
            sched.unanswered_revokes.fetch_add(1, std::memory_order_relaxed);
            continue;
          }
        }
        if (v == Verdict::kRunning && again && now < ps[i].retry_at) {
          until_expiry = std::min(until_expiry, ps[i].retry_at - now);
        } else if (v == Verdict::kRunning && PreemptOne(p, tick, ps[i].fresh.cpu, ps[i].fresh.wall)) {
          if (again) {
            ps[i].retry_delay = std::min(ps[i].retry_delay * 2, max_sleep);
            ps[i].retry_at = now + ps[i].retry_delay;
            until_expiry = std::min(until_expiry, ps[i].retry_delay);
          } else {
            ps[i].asked = true;
            ps[i].asked_tick = tick;
            ps[i].asked_at = now;
            ps[i].asked_refusals = m->library_refusals.load(std::memory_order_relaxed);
            ps[i].retry_delay = kSysmonRecheckNs / 2;
            ps[i].retry_at = now;
            // An observed slice needs a look soon after, to time the next.
            if (!stamped) recheck = true;
          }
        } else if (v == Verdict::kUnknown) {
          until_expiry = std::min(until_expiry, kSysmonRecheckNs);  // sample again soon
        }
      } else {
        until_expiry = std::min(until_expiry, slice - ran);
        if (work && same_slice && v == Verdict::kUnknown) until_expiry = std::min(until_expiry, kSysmonRecheckNs);
      }
    }
    // Ms that lost their P in an unmarked blocking call: once the goroutine
    // runs again without entering the runtime, signal it into the runtime,
    // where it takes a P again (or waits for one).
    for (size_t k = 0; k < revoked_ms.size();) {
      RevokedM& r = revoked_ms[k];
      if (!r.m->revoked.load(std::memory_order_acquire) ||
          __atomic_load_n(&r.m->curg, __ATOMIC_ACQUIRE) != r.g) {
        r = revoked_ms.back();
        revoked_ms.pop_back();
        continue;
      }
      if (now < r.next_look) {
        until_expiry = std::min(until_expiry, r.next_look - now);
        ++k;
        continue;
      }
      Verdict v = SampleCpu(r.cpu, r.m, 0, now);
      // Looked at every 200 us at first, then less often while its thread
      // sleeps on in the kernel (a read that waits for good would otherwise
      // wake sysmon 5000 times a second), but at least every max_sleep: as
      // long as that, a goroutine back from its call may run without a P.
      // Signalled at the last look and still running without a P: the signal
      // was refused (library code), so back off the same way.
      const bool backoff = v == Verdict::kBlocked || (v == Verdict::kRunning && r.signalled);
      r.delay = backoff ? std::min(r.delay * 2, std::max(max_sleep, kRevokedLookNs)) : kRevokedLookNs;
      r.signalled = false;
      r.next_look = now + r.delay;
      // Running: ask it to yield, so that its next safe point (a runtime
      // entry, Checkpoint()) takes it to ReacquireP - with async preemption
      // off that is the only way back to a P, and without the request it
      // would run on without one for as long as it computes. With async
      // preemption on, a goroutine that reaches no safe point is signalled
      // too (as PreemptOne does), once its thread is seen still on a CPU.
      if (v == Verdict::kRunning) r.g->stackguard0.store(kStackPreempt, std::memory_order_release);
      if (v == Verdict::kRunning && sched.async_preemption && StillOnCpu(r.m, r.cpu.fresh)) {
        if (uint32_t word; BeginPreemptSignal(r.m, now, &word)) {
          // As in PreemptOne: the goroutine may have entered the runtime
          // since (ReacquireP clears `revoked`) and be on its way into a
          // marked region, which waits out the signal. We publish the
          // signal, then look at `revoked`; it clears `revoked` before
          // EnterSyscall looks at the signal. One sees the other.
          if (r.m->revoked.load(std::memory_order_seq_cst) &&
              __atomic_load_n(&r.m->curg, __ATOMIC_SEQ_CST) == r.g) {
            SendPreemptSignal(r.m, word);
            r.signalled = true;
          } else {
            EndPreemptSignal(r.m, word);
          }
        }
      }
      until_expiry = std::min(until_expiry, r.delay);
      ++k;
    }
    if (now - last_look < max_sleep) {
      // Too soon after the look before to tell constant switching.
    } else if (churning && !calm) {
      look_every = std::min(look_every * 2, max_look_every);
    } else {
      look_every = max_sleep;
    }
    last_look = now;
    // In observation mode, look again soon after a request, to time the
    // slice that follows.
    sleep = recheck ? std::min(kSysmonRecheckNs, until_expiry) : std::min(until_expiry, look_every);
  }
}

// Sysmon allocates only its small per-P tables and the stack pool's lists;
// if even that fails, one line says so (not std::terminate's).
void* SysmonMain(void*) {
  try {
    SysmonLoop();
  } catch (const std::bad_alloc&) {
    Fatal("sysmon: out of memory (std::bad_alloc)");
  }
  return nullptr;
}

}  // namespace

bool PreemptOne(P* p, uint32_t tick, int64_t cpu_ns, int64_t cpu_wall) {
  M* m = p->m.load(std::memory_order_acquire);
  if (m == nullptr) return false;
  G* g = __atomic_load_n(&m->curg, __ATOMIC_ACQUIRE);
  if (g == nullptr) return false;
  // If a new slice began since sysmon judged this one spent, `g` may be the
  // goroutine that just started: leave it alone. (A slice that begins after
  // this check can only see the request land on a goroutine that is no longer
  // running; Execute clears it, and the handler finds no request on the new one.)
  if (p->schedtick.load(std::memory_order_acquire) != tick) return false;
  p->slice_asked.store(kSliceAsked | tick, std::memory_order_relaxed);
  g->stackguard0.store(kStackPreempt, std::memory_order_release);
  uint32_t word;
  if (sched.async_preemption && BeginPreemptSignal(m, Nanotime(), &word)) {
    // Never signal an M entering a blocking region: EnterSyscall publishes
    // kSyscall and then waits out the signal; we publish the signal and
    // then look at the status. One of us sees the other - if the status is
    // that of m's P. m was p's when we loaded it, but sysmon may have been
    // descheduled since: m may have left p (its goroutine parked, and it
    // went idle) and be entering a region on another P, whose status we do
    // not look at. So p must still be m's, in the same slice: m stores
    // p->m = null before it can take another P, and a region on that P
    // looks at the signal after that, so either it sees our signal or we
    // see p->m changed.
    if (p->m.load(std::memory_order_seq_cst) != m || p->schedtick.load(std::memory_order_seq_cst) != tick ||
        p->status.load(std::memory_order_seq_cst) != P::Status::kRunning ||
        !StillOnCpu(m, CpuReading{cpu_ns, cpu_wall})) {
      EndPreemptSignal(m, word);
      return true;
    }
    SendPreemptSignal(m, word);
  }
  return true;
}

void WakeSysmon() {
  if (sched.sysmon_deep.load(std::memory_order_seq_cst)) {
    // CoarseNanotime stood still while every P was idle; the goroutines
    // this P runs may park (and stamp wait_since) before sysmon is up.
    sched.coarse_now.store(Nanotime(), std::memory_order_relaxed);
    sched.sysmon_note.Wakeup();
  }
}

void WakeSysmonForSyscall() {
  // Sysmon hands the P on at its second look at the region, one tick after
  // its first; left to itself it may sleep up to 10 ms (slice/8, capped)
  // before the first. A goroutine that makes many short marked calls with
  // work queued pays one futex wake per sleep of sysmon's at most: the CAS
  // lets one caller through, and after the wake-up sysmon sleeps a tick.
  int64_t at = sched.sysmon_wake_at.load(std::memory_order_seq_cst);
  if (at == INT64_MAX) {
    // Asleep until a P runs (WakeSysmon), or awake: then it looks at this P
    // in this round unless it has passed it already, and in that window of
    // a few microseconds the region waits for its next regular look.
    WakeSysmon();
    return;
  }
  if (at == kSysmonWokenEarly || at - Nanotime() <= kSyscallLookSoonNs) return;
  if (sched.sysmon_wake_at.compare_exchange_strong(at, kSysmonWokenEarly, std::memory_order_seq_cst)) {
    sched.sysmon_note.Wakeup();
  }
}

void WakeSysmonToRetry() { sched.sysmon_note.Wakeup(); }

void WakeSysmonForTimer(int64_t when) {
  if (sched.npidle.load(std::memory_order_seq_cst) != 0 ||
      when >= sched.sysmon_wake_at.load(std::memory_order_seq_cst)) {
    return;
  }
  for (P* p : sched.allp) {
    if (p->status.load(std::memory_order_relaxed) == P::Status::kSyscall) {
      sched.sysmon_note.Wakeup();
      return;
    }
  }
}

void StartSysmon() {
  process_id = getpid();
  user_id = getuid();
  pthread_t t;  // sysmon takes no signals
  if (int err = CreateThreadWithSignalsBlocked(&t, SysmonMain, nullptr); err != 0) FatalF("cannot start the sysmon thread: pthread_create: %s (errno %d)", strerror(err), err);
}

}  // namespace goro::internal
