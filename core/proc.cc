// The goro scheduler.
//
// Goroutines, threads and processors
// ----------------------------------
// goro multiplexes many goroutines onto a few OS threads, as Go does, with
// three kinds of object (core/runtime.h):
//
//   G  a goroutine: a function, a stack, and the registers saved while it is
//      not running. A G that has not started has no stack yet; it gets one
//      from a cache the first time it runs and gives it back when it returns,
//      so spawning a million short goroutines touches a handful of stacks.
//   M  an OS thread ("machine"). Each M has its own scheduler context, g0,
//      which runs on the thread's native stack. A goroutine never runs the
//      scheduler on its own stack: to park, yield or exit it switches to g0
//      and asks (M::request); g0 finishes the job once the goroutine's
//      registers are saved, then picks the next goroutine.
//   P  a processor: the right to run goroutines. There are exactly
//      Options::max_procs Ps, so at most that many goroutines run at once. A P
//      owns a local run queue (a lock-free ring of 256 plus a `runnext` slot),
//      a timer heap, and caches of stacks and free Gs; an M must hold a P to
//      run goroutines, and an M without one sleeps.
//
// Finding work
// ------------
// FindRunnable, run by g0 of an M that holds a P, looks in this order:
//   1. the P's expired timers (which may ready goroutines);
//   2. once every 61 schedule ticks, the global run queue, so that a pair of
//      goroutines handing the P back and forth through runnext cannot starve
//      the global queue forever (deferred by one schedule when a timer has
//      just readied a goroutine here); then runnext, then the local ring;
//   3. the global run queue (a mutex-protected list: the only global lock on
//      a scheduling path): a fair share of it moves into the local ring, as
//      in Go, but preempted goroutines are taken only one at a time (see
//      "Choices");
//   4. stealing: up to four passes over the other Ps in a random order,
//      taking half of a victim's ring; on the last pass also a victim's
//      runnext (after a few microseconds' grace, since its owner probably
//      readied it to run next) and the victim's expired timers;
//   5. otherwise the M gives up its P and sleeps.
//
// Spinning threads
// ----------------
// An M that looks for work to steal is "spinning". Readying a goroutine
// wakes a sleeping M (WakeP) only when there is an idle P and no M is already
// spinning: one spinner is enough to find the new work, and when it finds
// some it stops spinning and wakes the next (ResetSpinning). At most half of
// the busy Ps may have a spinning M. The last spinner to give up re-checks
// every run queue after it stopped counting itself, so a goroutine readied in
// between is never left without an M (the classic lost wake-up).
//
// Idle threads sleep on a futex (Note) in an idle list and are reused; one of
// them, the timer sleeper, sleeps only until the earliest timer of any P, and
// whoever adds an earlier timer wakes it. It needs an idle P to run expired
// timers on: when none is idle, a P whose M blocks in a system call (marked
// or not) keeps its timers, and sysmon hands that P to another M once one of
// them is due, as it does for a P with goroutines waiting (core/sysmon.cc,
// docs/syscalls.md). When every M sleeps in the idle list, nothing is
// runnable, no timer is pending and some thread waits in Run(), nothing can
// ever happen again: that is Go's "all goroutines are asleep" deadlock,
// reported by the last M to go idle (CheckDeadLocked), by the last awake
// plain thread to park, or by sysmon soon after the last one exits.
//
// Making threads
// --------------
// A new thread starts as a copy of the one that creates it: its CPU
// affinity, scheduling policy and nice value, its namespaces (unshare,
// setns), the filesystem context it unshared (CLONE_FS: cwd, root, umask).
// An M runs any goroutine for the rest of the process, so it must not be
// copied from a thread whose state someone changed on purpose: an M wired
// to a goroutine (LockOSThread is how a goroutine asks for a thread it may
// change), or a plain thread of the program (Go, Run and Ready from one may
// start an M; so may sysmon, which has no M). Those queue the M they made
// for the template thread (NewM), as Go does since 1.10 (golang/go#20676:
// newm, newmHandoff, templateThread). The template thread only ever makes
// threads, sysmon's included, and sleeps on a futex in between; it is no M,
// holds no P and never runs a goroutine, so no accounting counts it. It is
// made when the runtime starts, by the thread that starts it, and first
// puts its affinity, policy and nice value back to the main thread's
// (MainThreadDefaults); the namespaces and filesystem context of that
// thread it cannot undo. An M not wired to a goroutine makes the next M
// itself (the common path: no hand-off), since its state is the template's
// unless an unwired goroutine changed it, which only a wired one may do.
// The other way round, a goroutine that exits wired ends its thread, as in
// Go (RetireMOnG0): whatever it did to the thread goes with it.
//
// Parking
// -------
// A goroutine blocks with Park(reason, commit, arg): it switches to g0, and g0
// marks it waiting and calls commit, typically to release the lock of the
// channel or semaphore the goroutine queued itself on. Because the lock is
// released only after the goroutine's registers are saved, whoever takes that
// lock and finds the goroutine may Ready it at once, from any thread.
// Ready puts it in the current P's runnext, where it inherits the rest of the
// time slice of the goroutine that readied it (the schedule tick does not
// advance), as in Go: a producer and consumer ping-ponging stay on one P and
// in cache. Plain threads use the same primitives through a stand-in G
// (ExternalG) that parks on a futex instead of switching.
//
// Exit
// ----
// Returning from main ends every goroutine in Go; in C++ exit() goes on to
// destroy the program's globals. The runtime's atexit handler (FreezeAtExit)
// freezes the goroutines that exist when it runs: ScheduleOnG0 sets such a
// goroutine aside instead of running it, at the cost of one load of
// sched.frozen per schedule, and the handler asks the running ones to stop
// and waits for them a little. Goroutines made during exit by plain threads
// (a Run from a static destructor) run normally. The freeze ends for good
// when a plain thread parks in goro (other than in Run for its own
// goroutine): the program waits for its goroutines - a global's destructor
// stopping its workers and waiting for them - so they run again, as before
// exit (ThawAfterExitFreeze, from the plain thread's Park, which is slow
// anyway; a goroutine's park pays nothing). It is a best effort that never
// makes exit() hang: it also ends when the thread running exit() has waited
// for about 100 ms, whatever for (a std::mutex a frozen goroutine holds, a
// join), which sysmon watches for (WatchExitingThread in core/sysmon.cc).
// An exit() that overlaps a fatal error's report on another thread waits for
// the report's abort (AwaitFatalReportAtExit in core/fatal.cc, first in each
// of the runtime's exit hooks), so that a fatal error always ends the
// process by SIGABRT, as one always ends a Go program with status 2.
// See docs/scheduler.md.
//
// Choices and their reasons
// -------------------------
// * Switching through g0 costs a second context switch per park compared with
//   switching from goroutine to goroutine directly, but it keeps scheduler
//   frames off goroutine stacks (a parked goroutine costs one page of stack),
//   and it makes every "finish after the switch" action trivially safe. The
//   one exception is Yield's fast path (TryYieldDirect): with local work ready
//   and nothing global due, it switches straight to the next goroutine, which
//   queues the yielder when it resumes (OnResumeG). Every place a goroutine
//   resumes therefore calls OnResumeG first.
// * Slices of 4 ms or more are timed by sysmon's observation, shorter ones by
//   a TSC stamp taken when the slice starts (see core/sysmon.cc).
// * The C++ exception state (the caught-exception chain and
//   uncaught_exceptions(), per thread in libstdc++) is swapped with each
//   goroutine, so a goroutine parked in a catch block keeps its exception;
//   so is std::call_once's callable, which libstdc++ passes to pthread_once
//   in thread-locals that inline code sets, where a signal may preempt.
// * Yield puts the goroutine at the tail of its own P's ring when the global
//   queue is empty, and on the global queue (as Go's Gosched always does)
//   otherwise: with nobody waiting globally there is nobody to be unfair to,
//   and the common ping-pong of yielding goroutines takes no shared lock.
// * A preempted goroutine goes to the tail of the global queue, and it never
//   moves into a P's ring in a batch: a P takes it alone, so CPU hogs rotate
//   through every P in one order. Go's batch (a share of the queue into the
//   local ring) lets the hogs in one P's batch run again before those in the
//   other P's: with 16 hogs on 2 Ps their turns drift apart by 8-17, and
//   min/max CPU share over 3 s falls to 0.83-0.88. The one exception: a P
//   does not take back a hog it preempted itself if the next one in line
//   left another P (AvoidSameP); else an even number of hogs on 2 Ps falls
//   into lockstep, each only ever on one P, and a slower CPU shortchanges
//   half of them.
// * Goroutine ids come from per-P batches and counters are per P, so spawning
//   touches no shared cache line except when a batch runs out.
// * What a blocked goroutine leaves for its waker (a channel's Sudog, a
//   semaphore's or CondVar's waiter) lives in a slot from its P's cache
//   (core/wait_record.h), as Go's sudogs do, not on its stack: a waker of
//   thousands walks their records, and on stacks 1 MiB apart each was a
//   TLB miss of its own.
// * A runtime lock (core/lock.h) spins and then yields the thread: holders
//   never block or switch while holding one. sched.mu, which every P takes
//   for the global queue, spins and then sleeps on a futex (RuntimeMutex).

#include <dlfcn.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <thread>
#include <utility>

#include <cxxabi.h>
#include <unwind.h>
#include <linux/membarrier.h>

#include "absl/strings/str_cat.h"
#include "arch/cpu.h"
#include "core/env.h"
#include "core/fatal.h"
#include "core/runtime.h"
#include "core/sema.h"
#include "core/trace.h"
#include "goro/preempt.h"
#include "goro/sync.h"

namespace goro::internal {

namespace {
GORO_EARLY_INIT EarlyGlobal<Sched> sched_storage;
}  // namespace
constinit Sched& sched = sched_storage.value;

namespace {

__attribute__((tls_model("initial-exec"))) thread_local M* tls_m = nullptr;
// The goroutine running on this thread (Execute sets it on g0 before switching
// in, FinishSwitchOnG0 clears it); read through CurrentGoroutine().
__attribute__((tls_model("initial-exec"))) thread_local G* tls_g = nullptr;

void CheckDeadLocked(bool report_now = false) ABSL_EXCLUSIVE_LOCKS_REQUIRED(sched.mu);

// Asks sysmon for the deadlock check (CheckDeadlock) 100 ms from now: a
// report needs the program to have stayed stuck that long.
void AskSysmonToCheckForDeadlock() {
  sched.deadlock_check_at.store(Nanotime() + 100 * 1000 * 1000, std::memory_order_release);
  WakeSysmonToRetry();
}

// The stand-in G of a plain thread (ExternalG), counted awake from its first
// goro call until the thread exits (see Sched::external_awake). A plain
// pointer that no destructor touches: the thread may call goro from its own
// thread_local destructors, and a thread that calls exit() (main, as a rule)
// from the static destructors and atexit handlers that run after those, all
// on this G (docs/scheduler.md). A pthread key's destructor frees it
// (FreeExternalG): the key holds the same pointer, and the C library runs key
// destructors when a thread exits, after its thread_local destructors, never
// in exit(). The G of a thread that calls exit() lives to the end of the
// process, as the runtime's globals do.
constinit thread_local G* tls_external_g = nullptr;
// FreeExternalG has run on this thread: a goro call from a pthread key
// destructor that runs after it gets a G that is not counted awake (see
// ExternalG).
constinit thread_local bool tls_external_g_freed = false;

// The destructor of ExternalGKey, when a plain thread that used goro exits.
// The last awake thread to exit may be what completes a deadlock, as when it
// parks (Park): the Ms may all have gone idle while it still counted. But a
// thread's exit may also be part of the program's: static destructors may
// join threads that used goro. Go does not look for deadlocks once main
// returns, and a report then would turn the end of the program into a fatal
// error. So the check is sysmon's, 100 ms later, and once exit() has begun
// (the runtime's atexit handler says so) it reports only a Run begun since
// (CheckDeadLocked); never for the main thread's exit (pthread_exit from
// main).
void FreeExternalG(void* arg) {
  G* g = static_cast<G*>(arg);
  tls_external_g = nullptr;
  tls_external_g_freed = true;
  if (!g->external_uncounted && sched.external_awake.fetch_sub(1) == 1 &&
      ::syscall(SYS_gettid) != getpid() && sched.started.load(std::memory_order_acquire)) {
    AskSysmonToCheckForDeadlock();
  }
  while (g != nullptr) delete std::exchange(g, g->nested_external);
}

pthread_key_t ExternalGKey() {
  static const pthread_key_t key = [] {
    pthread_key_t k;
    if (pthread_key_create(&k, FreeExternalG) != 0) Fatal("ExternalGKey: pthread_key_create failed");
    return k;
  }();
  return key;
}
thread_local uint64_t tls_rand = 0;

constexpr int kMaxThreads = 10000;
constexpr int kStealTries = 4;

}  // namespace

int64_t Nanotime() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1000000000 + ts.tv_nsec;
}

int64_t CoarseNanotime() { return sched.coarse_now.load(std::memory_order_relaxed); }

EhGlobals* ThreadEhGlobals() { return reinterpret_cast<EhGlobals*>(abi::__cxa_get_globals()); }

namespace {

// Records where this thread keeps the goroutine-owned parts of the C++
// runtime's per-thread state.
void InitThreadCxxState(M* m) {
  m->eh = ThreadEhGlobals();
#if defined(__GLIBCXX__) && defined(_GLIBCXX_HAVE_TLS)
  m->once_callable = &std::__once_callable;
  m->once_call = &std::__once_call;
#endif
}

// Puts g's share of that state on m's thread, before g runs there.
inline void InstallCxxState(M* m, G* g) {
  *m->eh = g->eh;
  if (m->once_callable != nullptr) {
    *m->once_callable = g->once.callable;
    *m->once_call = g->once.call;
  }
}

// Takes it back into g when g stops running on m, leaving the thread's clear.
inline void SaveCxxState(M* m, G* g) {
  g->eh = *m->eh;
  *m->eh = EhGlobals{};
  if (m->once_callable != nullptr) {
    g->once.callable = *m->once_callable;
    g->once.call = *m->once_call;
    *m->once_callable = nullptr;
    *m->once_call = nullptr;
  }
}

}  // namespace

}  // namespace goro::internal

extern "C" {
intptr_t goro_tls_m_offset = 0;  // declared in core/runtime.h
intptr_t goro_tls_g_offset = 0;
}

namespace goro::internal {

void InitCurrentM() {
  uintptr_t tp;
  asm volatile("movq %%fs:0, %0" : "=r"(tp));
  intptr_t m_off = reinterpret_cast<intptr_t>(&tls_m) - static_cast<intptr_t>(tp);
  intptr_t g_off = reinterpret_cast<intptr_t>(&tls_g) - static_cast<intptr_t>(tp);
  // Set by this file's static initialiser; EnsureStarted calls again in case
  // it runs first, and must not write while other threads read (a race).
  if (goro_tls_m_offset != m_off) goro_tls_m_offset = m_off;
  if (goro_tls_g_offset != g_off) goro_tls_g_offset = g_off;
}

namespace {
[[maybe_unused]] const bool tls_offset_ready = (InitCurrentM(), true);
}  // namespace


namespace {

G* NewStandIn(bool counted) {
  G* g = new G();
  g->external = true;
  g->status.store(GStatus::kRunning, std::memory_order_relaxed);
  if (counted) {
    sched.external_awake.fetch_add(1);
  } else {
    g->external_uncounted = true;
  }
  return g;
}

G* ExternalG() {
  G* g = tls_external_g;
  if (g == nullptr) {
    // Made by a pthread key destructor after FreeExternalG ran: the thread
    // is ending, and the C library may run out of rounds of key destructors
    // before FreeExternalG runs again (the G then leaks). Counted, it would
    // keep external_awake above zero for good, and no deadlock would be
    // reported again; so it is never counted, parked or not (Park, Ready).
    g = NewStandIn(/*counted=*/!tls_external_g_freed);
    if (pthread_setspecific(ExternalGKey(), g) != 0) Fatal("ExternalG: pthread_setspecific failed");
    tls_external_g = g;
    return g;
  }
  // Not running: this thread is asleep in a wait (Park), and a signal
  // handler that interrupted it calls goro - exit() from a SIGTERM handler
  // while main waits in Run, and a global's destructor that waits for its
  // workers. A wait of the handler's needs a G of its own: on the thread's,
  // whichever wake-up came first would end both waits. Not counted: the
  // thread counts as asleep in its own wait meanwhile (docs/scheduler.md).
  while (g->status.load(std::memory_order_relaxed) != GStatus::kRunning) [[unlikely]] {
    if (g->nested_external == nullptr) g->nested_external = NewStandIn(/*counted=*/false);
    g = g->nested_external;
  }
  return g;
}

}  // namespace

G* CurrentG() {
  if (G* g = CurrentGoroutine()) return g;
  return ExternalG();
}

void NoteThreadSlow() { ExternalG(); }

bool OnGoroutine() { return CurrentGoroutine() != nullptr; }

uint32_t FastRand() {
  // xorshift64*, seeded per thread.
  M* m = CurrentM();
  uint64_t* s = m != nullptr ? &m->rand_state : &tls_rand;
  if (*s == 0) *s = (static_cast<uint64_t>(Nanotime()) ^ reinterpret_cast<uintptr_t>(s)) | 1;
  uint64_t x = *s;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  *s = x;
  return static_cast<uint32_t>((x * 0x2545F4914F6CDD1DULL) >> 32);
}

uint32_t FastRandN(uint32_t n) {
  return static_cast<uint32_t>((static_cast<uint64_t>(FastRand()) * n) >> 32);
}

const char* WaitReasonString(WaitReason r) {
  switch (r) {
    case WaitReason::kNone: return "";
    case WaitReason::kChanReceive: return "chan receive";
    case WaitReason::kChanSend: return "chan send";
    case WaitReason::kChanReceiveNilChan: return "chan receive (nil chan)";
    case WaitReason::kChanSendNilChan: return "chan send (nil chan)";
    case WaitReason::kSelect: return "select";
    case WaitReason::kSelectNoCases: return "select (no cases)";
    case WaitReason::kSleep: return "sleep";
    case WaitReason::kSyncMutexLock: return "sync.Mutex.Lock";
    case WaitReason::kSyncRWMutexRLock: return "sync.RWMutex.RLock";
    case WaitReason::kSyncRWMutexLock: return "sync.RWMutex.Lock";
    case WaitReason::kWaitGroupWait: return "sync.WaitGroup.Wait";
    case WaitReason::kCondVarWait: return "sync.Cond.Wait";
    case WaitReason::kSemacquire: return "semacquire";
    case WaitReason::kRunWait: return "goro.Run";
    case WaitReason::kIORead: return "IO wait (read)";
    case WaitReason::kIOWrite: return "IO wait (write)";
    case WaitReason::kIOClose: return "IO wait (close)";
    case WaitReason::kFrozenAtExit: return "frozen at exit";
  }
  return "?";
}

// ---------------------------------------------------------------------------
// The global run queue and idle lists. All need sched.mu.

namespace {

// `spent_on`: the P a preempted goroutine left (GlobalRunqEntry).
void GlobrunqPutLocked(G* g, int32_t spent_on = GlobalRunqEntry::kNotSpent)
    ABSL_EXCLUSIVE_LOCKS_REQUIRED(sched.mu) {
  size_t size = static_cast<size_t>(sched.runq_size.load(std::memory_order_relaxed));
  std::vector<GlobalRunqEntry>& q = sched.runq;
  if (size == q.size()) {  // full: unroll into a ring twice the size
    // Out of memory here would lose the goroutines a caller is moving (a
    // batch from a full local queue): fatal, not an exception.
    std::vector<GlobalRunqEntry> bigger;
    try {
      bigger.resize(q.size() * 2);
    } catch (const std::bad_alloc&) {
      FatalF("cannot grow the global run queue to %zu goroutines: out of memory", q.size() * 2);
    }
    for (size_t i = 0; i < size; ++i) bigger[i] = q[(sched.runq_head + i) % q.size()];
    q.swap(bigger);
    sched.runq_head = 0;
  }
  q[(sched.runq_head + size) % q.size()] = GlobalRunqEntry{g, spent_on};
  sched.runq_size.store(static_cast<int32_t>(size + 1), std::memory_order_relaxed);
}

G* GlobrunqPopLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(sched.mu) {
  G* g = sched.runq[sched.runq_head].g;
  sched.runq_head = (sched.runq_head + 1) % sched.runq.size();
  sched.runq_size.fetch_sub(1, std::memory_order_relaxed);
  return g;
}

void GlobrunqPutBatchLocked(G** batch, uint32_t n) ABSL_EXCLUSIVE_LOCKS_REQUIRED(sched.mu) {
  for (uint32_t i = 0; i < n; ++i) GlobrunqPutLocked(batch[i]);
}

// If the two oldest goroutines in the global queue were both preempted, the
// first from p and the second from another P, they trade places, so that p
// runs the second. Without this, an even number of CPU hogs waiting on two Ps
// whose slices end in turn (sysmon ends them on schedule) come back to the P
// they left every time: half of them only ever run on one P, the other half
// on the other, and when the two CPUs are not equally fast (a VM's vCPUs,
// hybrid cores) one half gets less work done in the same time. The swap moves
// a goroutine by one place in the rotation, never more.
void AvoidSameP(P* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(sched.mu) {
  std::vector<GlobalRunqEntry>& q = sched.runq;
  GlobalRunqEntry& first = q[sched.runq_head];
  GlobalRunqEntry& second = q[(sched.runq_head + 1) % q.size()];
  if (first.spent_on == p->id && second.spent_on != GlobalRunqEntry::kNotSpent && second.spent_on != p->id) {
    std::swap(first, second);
  }
}

// Takes a fair share of the global queue: one G to return, and up to `max`
// more (0: no limit but half a ring) moved into p's local ring. The batch
// stops at a preempted goroutine: those are taken one at a time, so that
// CPU hogs rotate over all Ps in queue order.
G* GlobrunqGetLocked(P* p, int32_t max) ABSL_EXCLUSIVE_LOCKS_REQUIRED(sched.mu) {
  int32_t size = sched.runq_size.load(std::memory_order_relaxed);
  if (size == 0) return nullptr;
  if (size >= 2) AvoidSameP(p);
  int32_t n = std::min(size, size / sched.nprocs + 1);
  if (max > 0 && n > max) n = max;
  n = std::min<int32_t>(n, RunQueue::kSize / 2);
  G* g = GlobrunqPopLocked();
  for (int32_t i = 1; i < n && sched.runq[sched.runq_head].spent_on == GlobalRunqEntry::kNotSpent; ++i) {
    if (!p->runq.PutTail(GlobrunqPopLocked())) Fatal("GlobrunqGet: local run queue overflow");
  }
  return g;
}

void PidlePutLocked(P* p) ABSL_EXCLUSIVE_LOCKS_REQUIRED(sched.mu) {
  SetPStatusByOwner(p, P::Status::kIdle);
  p->m = nullptr;
  p->link = sched.pidle;
  sched.pidle = p;
  sched.npidle.fetch_add(1, std::memory_order_relaxed);
}

P* PidleGetLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(sched.mu) {
  P* p = sched.pidle;
  if (p != nullptr) {
    sched.pidle = p->link;
    sched.npidle.fetch_sub(1, std::memory_order_relaxed);
    // The last idle P is taken: a pending timer that a P blocked in a
    // system call must now be handed over for is sysmon's to watch, and it
    // may be asleep past it (it looked while this P was idle).
    if (sched.pidle == nullptr) {
      if (int64_t w = EarliestTimer(); w != 0) WakeSysmonForTimer(w);
    }
  }
  return p;
}

M* MidleGetLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(sched.mu) {
  M* m = sched.midle;
  if (m != nullptr) {
    sched.midle = m->sched_link;
    sched.nmidle--;
  }
  return m;
}

void AcquireP(M* m, P* p) {
  if (p->status != P::Status::kIdle || p->m != nullptr) Fatal("AcquireP: P is not idle");
  if (m->p != nullptr) Fatal("AcquireP: M already has a P");
  p->status = P::Status::kRunning;
  p->m = m;
  m->p = p;
  // The first goroutine starts a new slice, even one a timer just put in
  // runnext: the P ran nothing while it was idle (or handed off), and sysmon
  // has not seen its tick move meanwhile, so an inherited slice would be
  // timed from before that and preempted (or revoked) at once.
  p->slice_spent = true;
  WakeSysmon();
}

// ---------------------------------------------------------------------------
// Local run queue helpers.

void RunqPut(P* p, G* g, bool next) {
  if (next) {
    g = p->runq.PutNext(g);
    if (g == nullptr) return;
  }
  while (!p->runq.PutTail(g)) {
    G* batch[RunQueue::kSize / 2 + 1];
    uint32_t n = p->runq.TakeHalf(g, batch);
    if (n == 0) continue;  // thieves made room
    RuntimeMutexLock lock(&sched.mu);
    GlobrunqPutBatchLocked(batch, n);
    return;
  }
}

// ---------------------------------------------------------------------------
// Ms: creation, sleeping and waking.

void* MStart(void* arg);

// The main thread's CPU affinity mask, scheduling policy and nice value,
// read once when goro is loaded (by a static initialiser below: before main,
// on the main thread as a rule, as Go reads the mask at start-up), or by
// whatever starts the runtime first if that comes earlier (a static
// constructor). They stand for the process's, which Linux does not have
// (each thread has its own; `taskset -p` reads and sets the main thread's):
// what the template thread resets itself to, and the mask whose CPUs the
// default max_procs counts - never the state of whichever thread starts the
// runtime, which may be pinned (an I/O thread) or real-time (an audio
// thread). Later changes to the main thread are not seen. A part that could
// not be read stays unknown. Never freed: the template thread reads it.
struct ThreadDefaults {
  cpu_set_t* cpus = nullptr;  // null: unknown
  size_t cpus_size = 0;
  int ncpus = 0;
  int policy = -1;  // sched_getscheduler's (SCHED_RESET_ON_FORK included); -1: unknown
  sched_param param{};
  bool nice_known = false;
  int nice = 0;
};

const ThreadDefaults& MainThreadDefaults() {
  static const ThreadDefaults* const defaults = [] {
    auto* d = new ThreadDefaults();
    const pid_t main_tid = getpid();  // the main thread's id
    // A set large enough for the machine: EINVAL means the kernel's is larger.
    for (int cpus = 1024; cpus <= (1 << 20); cpus *= 2) {
      cpu_set_t* set = CPU_ALLOC(cpus);
      if (set == nullptr) break;
      size_t size = CPU_ALLOC_SIZE(cpus);
      CPU_ZERO_S(size, set);
      int rc = sched_getaffinity(main_tid, size, set);
      if (rc != 0 && errno == ESRCH) rc = sched_getaffinity(0, size, set);  // no main thread: ours
      int err = errno;
      int n = rc == 0 ? CPU_COUNT_S(size, set) : 0;
      if (n > 0) {
        d->cpus = set;
        d->cpus_size = size;
        d->ncpus = n;
        break;
      }
      CPU_FREE(set);
      if (rc == 0 || err != EINVAL) break;
    }
    int policy = sched_getscheduler(main_tid);
    if (policy >= 0 && sched_getparam(main_tid, &d->param) == 0) d->policy = policy;
    errno = 0;
    int nice = getpriority(PRIO_PROCESS, static_cast<id_t>(main_tid));  // per thread on Linux
    if (errno == 0) {
      d->nice = nice;
      d->nice_known = true;
    }
    return d;
  }();
  return *defaults;
}
[[maybe_unused]] const bool main_thread_defaults_read = (MainThreadDefaults(), true);

// On the template thread as it starts: back to the main thread's affinity,
// policy and nice value. Each may fail (none of those CPUs allowed any more,
// a priority this thread may not raise itself to); the thread then keeps its
// creator's. Namespaces and the rest are out of reach (see "Making threads").
void ResetToMainThreadDefaults() {
  const ThreadDefaults& d = MainThreadDefaults();
  if (d.cpus != nullptr) sched_setaffinity(0, d.cpus_size, d.cpus);
  if (d.policy >= 0) sched_setscheduler(0, d.policy, &d.param);
  if (d.nice_known) setpriority(PRIO_PROCESS, 0, d.nice);
}

}  // namespace

int CreateThreadWithSignalsBlocked(pthread_t* thread, void* (*start)(void*), void* arg) {
  pthread_attr_t attr;
  pthread_attr_init(&attr);
  pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  int err = pthread_create(thread, &attr, start, arg);
  pthread_sigmask(SIG_SETMASK, &old, nullptr);
  pthread_attr_destroy(&attr);
  return err;
}

namespace {

// The thread for m, made by the calling thread, which is clean: an M not
// wired to a goroutine, or the template thread. `nthreads`: for the message.
void CreateMThread(M* m, int nthreads) {
  if (int err = CreateThreadWithSignalsBlocked(&m->thread, MStart, m); err != 0) {
    FatalF("cannot start runtime thread M%lld: pthread_create: %s (errno %d; it would be thread %d of the runtime)",
           static_cast<long long>(m->id), strerror(err), err, nthreads);
  }
}

// Ms made by a thread that must not be copied, waiting for the template
// thread to make their threads; linked through sched_link. The template
// thread sleeps on newm_wake when it found the list empty (newm_waiting),
// and whoever queues an M then wakes it, once.
constinit M* newm_list ABSL_GUARDED_BY(sched.mu) = nullptr;
constinit bool newm_waiting ABSL_GUARDED_BY(sched.mu) = false;
constinit Note newm_wake;
constinit Note template_started;  // it has reset itself and started sysmon

// The template thread (see "Making threads" above). Never returns.
void* TemplateThreadMain(void*) {
  pthread_setname_np(pthread_self(), "goro-template");  // not its creator's name
  ResetToMainThreadDefaults();
  StartSysmon();  // a copy of this thread, as every M is
  template_started.Wakeup();
  for (;;) {
    M* list;
    int nthreads;
    {
      RuntimeMutexLock lock(&sched.mu);
      list = newm_list;
      newm_list = nullptr;
      newm_waiting = list == nullptr;
      nthreads = sched.mcount;
    }
    if (list == nullptr) {
      newm_wake.Sleep();
      newm_wake.Clear();
      continue;
    }
    while (M* m = list) {
      list = m->sched_link;
      m->sched_link = nullptr;
      CreateMThread(m, nthreads);
    }
  }
}

// Makes the template thread, which makes sysmon, and waits until both
// exist. It takes no signals (nor does sysmon, its copy).
void StartTemplateThread() {
  pthread_t t;
  if (int err = CreateThreadWithSignalsBlocked(&t, TemplateThreadMain, nullptr); err != 0) {
    FatalF("cannot start the runtime's template thread: pthread_create: %s (errno %d)", strerror(err), err);
  }
  template_started.Sleep();
}

void NewM(P* p, bool spinning) {
  auto* m = new (std::nothrow) M();
  if (m == nullptr) FatalF("cannot start a runtime thread: out of memory (struct M, %zu bytes)", sizeof(M));
  m->id = sched.next_mid.fetch_add(1, std::memory_order_relaxed);
  m->spinning = spinning;
  m->next_p = p;
  // Only an M that runs no wired goroutine may copy itself; any other caller
  // (a wired M, one retiring after its wired goroutine, a plain thread,
  // sysmon) hands the work to the template thread.
  M* self = CurrentM();
  const bool by_template = self == nullptr || self->locked_g != nullptr || self->retiring;
  bool wake_template = false;
  int nthreads;
  {
    RuntimeMutexLock lock(&sched.mu);
    if (++sched.mcount > kMaxThreads) Fatal(absl::StrCat("thread limit of ", kMaxThreads, " exhausted"));
    nthreads = sched.mcount;
    m->alllink.store(sched.allm.load(std::memory_order_relaxed), std::memory_order_relaxed);
    sched.allm.store(m, std::memory_order_release);  // read without the lock
    if (by_template) {
      m->sched_link = newm_list;
      newm_list = m;
      wake_template = newm_waiting;
      newm_waiting = false;
    }
  }
  // Counted from now, as running: the deadlock check must not find every M
  // idle while this one is still on its way.
  if (by_template) {
    if (wake_template) newm_wake.Wakeup();
    return;
  }
  CreateMThread(m, nthreads);
}

// Starts an M to run p (an idle P if p is null). `spinning` means the caller
// already counted the M in nmspinning.
void StartM(P* p, bool spinning) {
  M* m;
  {
    RuntimeMutexLock lock(&sched.mu);
    if (p == nullptr) {
      p = PidleGetLocked();
      if (p == nullptr) {
        if (spinning) sched.nmspinning.fetch_sub(1, std::memory_order_relaxed);
        return;
      }
    }
    m = MidleGetLocked();
  }
  if (m == nullptr) {
    NewM(p, spinning);
    return;
  }
  m->spinning = spinning;
  m->next_p = p;
  m->park.Wakeup();
}

// Wakes an M to look for work, if a P is idle and nobody is spinning already.
}  // namespace

std::atomic<void (*)()> wakep_start_hook{nullptr};
std::atomic<void (*)()> yield_queue_hook{nullptr};

void WakeP() {
  if (sched.npidle.load(std::memory_order_acquire) == 0) return;
  int32_t zero = 0;
  if (sched.nmspinning.load(std::memory_order_relaxed) != 0 ||
      !sched.nmspinning.compare_exchange_strong(zero, 1)) {
    return;
  }
  if (auto hook = wakep_start_hook.load(std::memory_order_relaxed)) hook();
  StartM(nullptr, true);
}

namespace {

void ResetSpinning(M* m) {
  m->spinning = false;
  if (sched.nmspinning.fetch_sub(1) < 1) Fatal("ResetSpinning: negative nmspinning");
  // We found work; there may be more, so get another M spinning.
  WakeP();
}

// Puts m on the idle list and sleeps until someone hands it a P.
void StopM(M* m) {
  {
    RuntimeMutexLock lock(&sched.mu);
    m->sched_link = sched.midle;
    sched.midle = m;
    sched.nmidle++;
    CheckDeadLocked();
  }
  m->park.Sleep();
  m->park.Clear();
  P* p = m->next_p;
  m->next_p = nullptr;
  if (m->next_g != nullptr) Fatal("StopM: an idle M was handed a wired goroutine");
  if (p == nullptr) Fatal("StopM: woken without a P");
  AcquireP(m, p);
}

// Called with sched.mu held when an M goes idle, when the last awake plain
// thread parks, or by sysmon after the last one exited: if no M is left
// running, no goroutine can be run or woken, no timer is pending and a thread
// waits in Run(), the program can never make progress - unless a plain
// thread goro has not seen yet is about to make its first goro call (one
// just started to feed a goroutine, say). So the report is sysmon's, 100 ms
// later, if all of this still holds then.
void CheckDeadLocked(bool report_now) {
  if (sched.run_waiters == 0) return;
  // Once exit() has begun, only a Run begun since counts: the Runs begun
  // before belong to the program that is ending (Go does not look for
  // deadlocks once main returns), and what they wait for may stop as part
  // of the exit (static destructors joining threads). A Run from an atexit
  // handler or a static destructor whose goroutine can never finish would
  // hang exit() for good.
  if (sched.exiting.load(std::memory_order_acquire) && sched.exit_run_waiters == 0) return;
  if (sched.external_awake.load() > 0) return;  // a plain thread may wake someone
  // Someone is running. Ms wired to a blocked goroutine are as idle as the
  // goroutine, and so is the timer sleeper, asleep on its futex until a
  // timer or in epoll_wait: it holds no P, and what it waits for is checked
  // below. A timer stopped since it went to sleep (goro::Timer::Stop,
  // DelTimer) does not wake it, nor does the end of the I/O wait it went to
  // poll for (io::Close, a deadline): netpoll_waiters counts a waiter until
  // it runs again, so one that was readied as the sleeper decided to poll
  // left it in epoll_wait with nothing to wait for, for good. The woken
  // waiter's M checks again when it next goes idle.
  const int32_t timer_sleeping = sched.timer_sleeper != nullptr ? 1 : 0;
  if (sched.mcount - sched.nmidle - sched.nmlocked - timer_sleeping > 0) return;
  if (sched.runq_size.load() != 0) return;
  for (P* p : sched.allp) {
    if (!p->runq.Empty()) return;
  }
  if (EarliestTimer() != 0) return;
  if (sched.netpoll_waiters.load() > 0) return;  // I/O may yet wake someone
  // Goroutines set aside by the freeze at exit run again once it ends, and
  // it ends when the thread running exit() waits for a while
  // (WatchExitingThread in core/sysmon.cc): no deadlock before that. The
  // check that follows the thaw, when the Ms go idle again, decides.
  if (sched.frozen_gs != nullptr) return;
  if (!report_now) {
    AskSysmonToCheckForDeadlock();
    return;
  }
  FatalDumpAll("all goroutines are asleep - deadlock!");
}

// ---------------------------------------------------------------------------
// Finding work.

// Tries to steal from other Ps; on the last pass also runs their timers.
G* StealWork(M* m, bool* inherit) {
  P* p = m->p;
  int n = sched.nprocs;
  for (int i = 0; i < kStealTries; ++i) {
    bool last = i == kStealTries - 1;
    // A random start and a stride coprime with n visit every P once.
    uint32_t start = FastRandN(n);
    uint32_t stride = 1;
    if (n > 2) {
      do stride = 1 + FastRandN(n - 1); while (std::__gcd<uint32_t>(stride, n) != 1);
    }
    for (int k = 0; k < n; ++k) {
      P* victim = sched.allp[(start + k * stride) % n];
      if (victim == p) continue;
      if (last && victim->timer0_when.load(std::memory_order_relaxed) != 0) {
        RunTimers(victim, Nanotime());
        bool inh;
        if (G* g = p->runq.Get(&inh)) {
          *inherit = inh;
          return g;
        }
      }
      if (G* g = p->runq.StealFrom(victim->runq, last)) {
        p->steals.fetch_add(1, std::memory_order_relaxed);
        trace::GoSteal(p, victim, g);
        *inherit = false;
        return g;
      }
    }
  }
  return nullptr;
}

// Blocks until it finds a goroutine to run; returns with m->p held.
G* FindRunnable(M* m, bool* inherit) {
  for (;;) {
    P* p = m->p;
    *inherit = false;
    if (p->stack_cache_trim.load(std::memory_order_relaxed)) [[unlikely]] StackTrimCache(p);
    int fired = 0;
    if (p->timer0_when.load(std::memory_order_relaxed) != 0) RunTimers(p, Nanotime(), &fired);
    bool timer_readied = fired > 0;

    // The global queue's turn, once every 61 slices. A goroutine its timer
    // just woke is not made to wait a whole slice more for it: the turn is
    // deferred to the next schedule (which keeps the guarantee). Once only:
    // a Ticker whose period is shorter than a schedule fires at every one,
    // and the goroutines in the global queue (every one preempted for its
    // slice) would never run while the local queue had any.
    if (p->schedtick.load(std::memory_order_relaxed) % 61 == 0) p->global_turn_due = true;
    if (p->global_turn_due && timer_readied && !p->global_turn_deferred) {
      p->global_turn_deferred = true;
    } else if (p->global_turn_due) {
      p->global_turn_due = false;
      p->global_turn_deferred = false;
      if (sched.runq_size.load(std::memory_order_relaxed) > 0) {
        RuntimeMutexLock lock(&sched.mu);
        if (G* g = GlobrunqGetLocked(p, 1)) return g;
      }
    }
    if (G* g = p->runq.Get(inherit)) return g;
    if (sched.runq_size.load(std::memory_order_relaxed) > 0) {
      RuntimeMutexLock lock(&sched.mu);
      if (G* g = GlobrunqGetLocked(p, 0)) return g;
    }
    // Ready I/O, without blocking, if nobody is blocked polling already.
    if (sched.netpoll_waiters.load(std::memory_order_relaxed) > 0 &&
        sched.last_poll.load(std::memory_order_relaxed) != 0) {
      if (G* list = Netpoll(0)) {
        InjectGList(list);
        continue;
      }
    }

    int32_t busy = sched.nprocs - sched.npidle.load(std::memory_order_relaxed);
    if (m->spinning || 2 * sched.nmspinning.load(std::memory_order_relaxed) < busy) {
      if (!m->spinning) {
        m->spinning = true;
        sched.nmspinning.fetch_add(1);
      }
      if (G* g = StealWork(m, inherit)) return g;
    }

    // Nothing to do: give up the P.
    {
      RuntimeMutexLock lock(&sched.mu);
      if (G* g = GlobrunqGetLocked(p, 0)) return g;
      m->p = nullptr;
      PidlePutLocked(p);
    }
    if (m->spinning) {
      m->spinning = false;
      if (sched.nmspinning.fetch_sub(1) < 1) Fatal("FindRunnable: negative nmspinning");
      // Work readied after our last look but before we stopped counting as a
      // spinner saw nmspinning > 0 and woke nobody: look once more.
      bool found = sched.runq_size.load() != 0;
      for (P* q : sched.allp) found = found || !q->runq.Empty();
      if (found) {
        P* np;
        {
          RuntimeMutexLock lock(&sched.mu);
          np = PidleGetLocked();
        }
        if (np != nullptr) {
          AcquireP(m, np);
          m->spinning = true;
          sched.nmspinning.fetch_add(1);
          continue;
        }
      }
    }

    // Sleep until the earliest timer, or until I/O is ready, if nobody else
    // does (the "timer sleeper"); else until handed a P.
    int64_t next = EarliestTimer();
    bool poll = NetpollInited() && sched.netpoll_waiters.load() > 0;
    bool timer_sleep = false;
    if (next != 0 || poll) {
      RuntimeMutexLock lock(&sched.mu);
      if (sched.timer_sleeper == nullptr) {
        sched.timer_sleeper = m;
        sched.sleeper_polls = poll;
        sched.poll_until.store(next != 0 ? next : INT64_MAX);
        timer_sleep = true;
      } else if (poll && !sched.sleeper_polls) {
        // The sleeper went to sleep on its futex before anyone waited on I/O:
        // nobody would call epoll_wait until its timer. Wake it to re-decide.
        sched.timer_sleeper->park.Wakeup();
      }
    }
    if (timer_sleep) {
      // A timer added after EarliestTimer but before poll_until was published
      // saw poll_until == 0 and only tried WakeP: look again.
      int64_t again = EarliestTimer();
      if (again != 0 && (next == 0 || again < next)) next = again;
      G* ready = nullptr;
      int64_t now = Nanotime();
      if (poll) {
        ready = Netpoll(next == 0 ? -1 : std::max<int64_t>(next - now, 0));
      } else if (next > now) {
        m->park.SleepUntil(next);
      }
      P* np;
      {
        RuntimeMutexLock lock(&sched.mu);
        sched.timer_sleeper = nullptr;
        sched.sleeper_polls = false;
        sched.poll_until.store(0);
        m->park.Clear();  // a late WakeForTimer may have set it
        while (G* g = ready) {
          ready = g->sched_link;
          GlobrunqPutLocked(g);
        }
        np = PidleGetLocked();
      }
      if (np == nullptr && sched.runq_size.load() > 0) WakeP();
      // Woken for a timer, with no P to run it: every P runs, or blocks in
      // a system call. Sysmon hands it one of the blocked ones; it may have
      // looked last while a P was still idle, and sleep past the timer.
      if (np == nullptr) {
        if (int64_t w = EarliestTimer(); TimerDueSoon(w, Nanotime())) {
          WakeSysmonToRetry();
        } else if (w != 0) {
          WakeSysmonForTimer(w);  // an earlier timer woke it, and nobody sleeps for this one now
        }
      }
      if (np != nullptr) {
        AcquireP(m, np);
        m->spinning = true;  // so that it runs every P's timers
        sched.nmspinning.fetch_add(1);
        continue;
      }
    }
    StopM(m);
  }
}

// ---------------------------------------------------------------------------
// Running goroutines.

void GoroutineMain(void* arg);

G* GfreeGet(P* p) {
  if (p->gfree == nullptr && sched.gfree.load(std::memory_order_relaxed) != nullptr) {
    sched.gfree_lock.Lock();
    while (p->gfree_n < 32 && sched.gfree.load(std::memory_order_relaxed) != nullptr) {
      G* g = sched.gfree.load(std::memory_order_relaxed);
      sched.gfree.store(g->sched_link, std::memory_order_relaxed);
      sched.gfree_n--;
      g->sched_link = p->gfree;
      p->gfree = g;
      p->gfree_n++;
    }
    sched.gfree_lock.Unlock();
  }
  G* g = p->gfree;
  if (g != nullptr) {
    p->gfree = g->sched_link;
    p->gfree_n--;
    // The next spawn will write both hot lines of the next free G.
    if (G* next = p->gfree) {
      __builtin_prefetch(next, 1);
      __builtin_prefetch(reinterpret_cast<char*>(next) + 64, 1);
    }
  }
  return g;
}

std::atomic<int64_t> gs_allocated{0};  // by NewProc; never freed

// A free G for a spawn from a plain thread (no P): from the global list only.
// Without this, every Run or Go from a thread made a new G, and the Gs they
// freed piled up on the global list for ever.
G* GfreeGetNoP() {
  sched.gfree_lock.Lock();
  G* g = sched.gfree;
  if (g != nullptr) {
    sched.gfree = g->sched_link;
    sched.gfree_n--;
  }
  sched.gfree_lock.Unlock();
  return g;
}

void GfreePut(P* p, G* g) {
  g->sched_link = p->gfree;
  p->gfree = g;
  if (++p->gfree_n >= 64) {
    sched.gfree_lock.Lock();
    while (p->gfree_n > 32) {
      G* x = p->gfree;
      p->gfree = x->sched_link;
      p->gfree_n--;
      x->sched_link = sched.gfree.load(std::memory_order_relaxed);
      sched.gfree.store(x, std::memory_order_relaxed);
      sched.gfree_n++;
    }
    sched.gfree_lock.Unlock();
  }
}

// A new time slice on p: stamped (short slices only) before the tick is
// published, so that sysmon never pairs a new tick with an old start.
void StartSlice(P* p) {
  p->slice_spent = false;
  if (sched.stamp_slices) p->slice_start_tsc.store(arch::ReadTsc(), std::memory_order_relaxed);
  p->schedtick.store(p->schedtick.load(std::memory_order_relaxed) + 1, std::memory_order_release);
}

// Makes g the goroutine running on m (before the switch to it): its slice,
// its stack, its status, curg. The caller switches to g->ctx with in_switch
// set.
void PrepareToRun(M* m, G* g, bool inherit) {
  P* p = m->p;
  if (!inherit || p->slice_spent) StartSlice(p);
  if (g->stack.hi == 0) {
    g->stack = StackAlloc(p, g->id);
    arch::MakeContext(&g->ctx, reinterpret_cast<void*>(g->stack.hi), GoroutineMain, g);
    SanFiberCreate(&g->san, g->stack.lo, g->stack.hi);
  }
  // Any preemption request was for an earlier slice - unless g inherits the
  // slice sysmon asked to end, from a goroutine that parked before it took
  // the request (a pair ping-ponging on a channel spends most of its time in
  // runtime code, where the signal is refused, and would otherwise keep the
  // slice until some later request happened to land between two operations).
  const bool asked = inherit && p->slice_asked.load(std::memory_order_relaxed) ==
                                    (kSliceAsked | p->schedtick.load(std::memory_order_relaxed));
  g->stackguard0.store(asked ? kStackPreempt : g->stack.lo + kStackGuardMargin, std::memory_order_relaxed);
  g->status.store(GStatus::kRunning, std::memory_order_relaxed);
  m->in_switch.store(true, std::memory_order_relaxed);
  __atomic_store_n(&m->curg, g, __ATOMIC_RELEASE);
  tls_g = g;
  trace::GoStart(p, g);
}

// Runs g on the current M until it switches back to g0.
void Execute(M* m, G* g, bool inherit) {
  PrepareToRun(m, g, inherit);
  InstallCxxState(m, g);  // the goroutine's exceptions in flight, on this thread
  SanStartSwitch(&m->g0san, g->san, false);
  arch::SwitchContext(&m->g0ctx, &g->ctx);
  SanFinishSwitch(&m->g0san);
  // The goroutine back on g0 is m->curg, not g: g may have yielded straight
  // to another one (TryYieldDirect), which switched here, while g itself may
  // now run on another M. Save its exception state before anyone can run it
  // elsewhere (FinishSwitchOnG0).
  SaveCxxState(m, m->curg);
  m->in_switch.store(false, std::memory_order_relaxed);
}

// On g0 after m->curg switched back: carries out its request.
// Returns a G to run at once (a park that did not commit), or nullptr.
G* FinishSwitchOnG0(M* m) {
  G* g = m->curg;
  __atomic_store_n(&m->curg, nullptr, __ATOMIC_RELAXED);  // sysmon reads it racily
  tls_g = nullptr;
  SwitchRequest req = m->request;
  m->request = SwitchRequest::kNone;
  // A mask the goroutine set is its own while it holds the thread: not left
  // to whatever runs here next (signals/sigmask.cc). A wired goroutine keeps
  // its thread, and one back from a blocking region waits for this thread.
  // The same for an alternate signal stack it set (signals/altstack.cc).
  const bool leaves = req == SwitchRequest::kExit || (g->locked_m == nullptr && req != SwitchRequest::kSyscallExit);
  if (m->sigmask_changed && leaves) RestoreMSignalMask(m);
  if (m->sigmask_refused && leaves) CheckMSignalMask(m);
  if (m->altstack_changed && leaves) RestoreMAltStack(m);
  switch (req) {
    case SwitchRequest::kPark: {
      auto commit = m->park_commit;
      void* arg = m->park_arg;
      m->park_commit = nullptr;
      m->park_arg = nullptr;
      trace::GoBlock(m->p, g);
      g->status.store(GStatus::kWaiting, std::memory_order_release);
      if (commit != nullptr && !commit(g, arg)) {
        g->status.store(GStatus::kRunnable, std::memory_order_relaxed);
        trace::GoUnblock(g);  // the park was called off: runnable again at once
        return g;
      }
      return nullptr;
    }
    case SwitchRequest::kYield:
      g->status.store(GStatus::kRunnable, std::memory_order_relaxed);
      if (sched.runq_size.load(std::memory_order_relaxed) > 0) {
        // Goroutines wait in the global queue (preempted ones do): queue
        // behind them, as Go's Gosched does, or frequent yielders would
        // outrank every preempted goroutine.
        RuntimeMutexLock lock(&sched.mu);
        GlobrunqPutLocked(g);
      } else {
        RunqPut(m->p, g, false);
      }
      return nullptr;
    case SwitchRequest::kPreempt: {
      // A spent slice goes to the global queue, so that it may resume on any
      // P: this is what spreads CPU hogs fairly over all Ps.
      g->status.store(GStatus::kRunnable, std::memory_order_relaxed);
      m->p->slice_spent = true;
      RuntimeMutexLock lock(&sched.mu);
      GlobrunqPutLocked(g, m->p->id);
      return nullptr;
    }
    case SwitchRequest::kSyscallExit: {
      // Back from a blocking region whose P was handed off, with no idle P
      // to take: queue the goroutine globally; ScheduleOnG0 parks this M.
      g->status.store(GStatus::kRunnable, std::memory_order_relaxed);
      {
        RuntimeMutexLock lock(&sched.mu);
        GlobrunqPutLocked(g);
      }
      WakeP();
      return nullptr;
    }
    case SwitchRequest::kExit: {
      P* p = m->p;
      if (g->locked_m != nullptr) {
        // Exited wired: the goroutine may have changed its thread in ways
        // nobody undoes (a namespace, unshare(CLONE_FS), capabilities, a
        // seccomp filter, affinity). As in Go, the thread ends with it:
        // ScheduleOnG0 retires the M once the G is recycled here.
        g->locked_m = nullptr;
        g->lock_count = 0;
        m->locked_g = nullptr;
        m->retiring = true;
      }
      g->status.store(GStatus::kDead, std::memory_order_relaxed);
      SanFiberDestroy(&g->san);
      SanStackExited(reinterpret_cast<uintptr_t>(g->ctx.sp), g->stack.hi);
      StackFree(p, g->stack);
      g->stack = Stack{};
      g->status.store(GStatus::kIdle, std::memory_order_relaxed);
      bool counted = g->exit_counted;
      g->exit_counted = false;
      GfreePut(p, g);
      if (!counted) p->exited.fetch_add(1, std::memory_order_release);  // see GetStats
      return nullptr;
    }
    case SwitchRequest::kNone:
      break;
  }
  Fatal("FinishSwitchOnG0: goroutine switched to g0 without a request");
}

// m's wired goroutine is not running: hands m's P on and sleeps until the
// goroutine is given back by StartLockedM. Returns it, with a P held.
G* StopLockedM(M* m) {
  if (P* p = m->p) {  // none if it lost it in a blocking call
    m->p = nullptr;
    SetPStatusByOwner(p, P::Status::kIdle);
    p->m = nullptr;
    HandoffP(p);
  }
  {
    RuntimeMutexLock lock(&sched.mu);
    sched.nmlocked++;  // StartLockedM un-counts it, before waking it
    // This M may be the last to stop: the others went idle while it still
    // counted as running, so their checks passed.
    CheckDeadLocked();
  }
  m->park.Sleep();
  m->park.Clear();
  P* np = m->next_p;
  G* g = m->next_g;
  m->next_p = nullptr;
  m->next_g = nullptr;
  if (g != m->locked_g) Fatal("StopLockedM: woken with a goroutine it is not wired to");
  AcquireP(m, np);
  return g;
}

// g is wired to another M: give it our P and g, and go idle.
void StartLockedM(M* m, G* g) {
  M* lm = g->locked_m;
  P* p = m->p;
  m->p = nullptr;
  SetPStatusByOwner(p, P::Status::kIdle);
  p->m = nullptr;
  lm->next_p = p;
  lm->next_g = g;
  {
    // Running from this moment: were it still counted asleep, StopM below
    // could find every M idle and report a deadlock before lm wakes.
    RuntimeMutexLock lock(&sched.mu);
    sched.nmlocked--;
  }
  lm->park.Wakeup();
  StopM(m);
}

// The Ms whose threads ended (RetireMOnG0), linked through sched_link: kept,
// never freed, and so not a leak to LeakSanitizer either.
constinit M* retired_ms ABSL_GUARDED_BY(sched.mu) = nullptr;

// m's goroutine exited wired (FinishSwitchOnG0): hands m's P on and takes m
// out of the runtime's accounting, as Go's mexit does; MStart then ends the
// thread (ExitMThread). The M record itself is never freed (nor are its
// fields reset): sysmon, dumps and the schedtrace read p->m and allm without
// a lock and may look at m a moment after this, and a freed record reused
// for a new M would pass sysmon's same-M comparisons (PState::cpu_m,
// P::syscall_owner). That costs sizeof(M) per thread ended.
void RetireMOnG0(M* m) {
  if (P* p = m->p) {  // held: GoroutineMain took one back if it had lost it
    m->p = nullptr;
    SetPStatusByOwner(p, P::Status::kIdle);
    p->m = nullptr;
    HandoffP(p);  // an M it starts comes from the template thread (NewM)
  }
  RuntimeMutexLock lock(&sched.mu);
  sched.mcount--;
  M* prev = nullptr;
  M* x = sched.allm.load(std::memory_order_relaxed);
  for (; x != nullptr && x != m; x = x->alllink.load(std::memory_order_relaxed)) prev = x;
  if (x == nullptr) Fatal("RetireMOnG0: the M is not on allm");
  M* next = m->alllink.load(std::memory_order_relaxed);
  if (prev == nullptr) {
    sched.allm.store(next, std::memory_order_release);
  } else {
    prev->alllink.store(next, std::memory_order_release);
  }
  m->sched_link = retired_ms;
  retired_ms = m;
  // It may have been the last M counted as running.
  CheckDeadLocked();
}

// The end of a retired M's thread, on g0 as MStart returns. No signal may
// land on the alternate stack once the next M may be given it, so every
// signal is blocked first, for good: one already pending on the thread
// (sysmon's, sent before the P was handed on) dies with it, and the
// program's process-wide signals go to other threads. The alternate stack
// stays mapped, for the next M (ReleaseMAltStack): a goroutine may have
// saved it, to set it again later. The thread's own stack goes back to the C
// library as the thread ends. Thread-local destructors that run after this
// find a plain thread (no M), as on any thread of the program.
void ExitMThread(M* m) {
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, nullptr);
  stack_t off{};
  off.ss_flags = SS_DISABLE;
  sigaltstack(&off, nullptr);
  ReleaseMAltStack(m);
  tls_m = nullptr;
}

// g existed when exit() began, and an M was about to run it: unless the
// freeze has ended meanwhile (then false: run it), it is set aside instead,
// on Sched::frozen_gs, as waiting, "frozen at exit" in dumps, until the
// freeze ends (ThawAfterExitFreeze), if it does. If it is wired, its M
// sleeps in StopLockedM until then. Under sched.mu, which orders
// it with the thaw: a goroutine is either on the list the thaw takes or run.
bool FreezeOnG0(G* g) {
  RuntimeMutexLock lock(&sched.mu);
  if (!sched.frozen.load(std::memory_order_relaxed)) return false;
  g->wait_reason = WaitReason::kFrozenAtExit;
  g->wait_since = CoarseNanotime();
  g->status.store(GStatus::kWaiting, std::memory_order_release);
  g->sched_link = sched.frozen_gs;
  sched.frozen_gs = g;
  return true;
}

}  // namespace

// Ends the freeze at exit, for good. Called when a plain thread is about to
// wait in goro while it is on (other than in Run for Run's own goroutine) -
// a global's destructor waiting for the goroutines it started to stop, most
// often - and by sysmon when the thread running exit() has waited for about
// kExitWaitThawNs (WatchExitingThread in core/sysmon.cc): for a lock or a
// join that a frozen goroutine would end, say. The program waits for its
// goroutines, as it could before exit, so they run again: every goroutine
// set aside is made runnable, and ScheduleOnG0 sets none aside from now on.
// The freeze protects programs that leave goroutines running and do not
// wait for them; it never makes exit() wait for good.
void ThawAfterExitFreeze() {
  {
    RuntimeMutexLock lock(&sched.mu);
    if (!sched.frozen.load(std::memory_order_relaxed)) return;  // another thread did
    sched.frozen.store(false, std::memory_order_release);
    while (G* g = sched.frozen_gs) {
      sched.frozen_gs = g->sched_link;
      g->sched_link = nullptr;
      g->wait_reason = WaitReason::kNone;
      GStatus want = GStatus::kWaiting;
      if (!g->status.compare_exchange_strong(want, GStatus::kRunnable, std::memory_order_acq_rel)) {
        Fatal("ThawAfterExitFreeze: a frozen goroutine is not waiting");
      }
      GlobrunqPutLocked(g);
    }
  }
  WakeP();  // the M that finds work wakes another (ResetSpinning), and so on
}

namespace {

// The scheduler loop of every M, on g0. Returns only when the M retires
// (its goroutine exited wired): then its thread is to end.
void ScheduleOnG0(M* m) {
  for (;;) {
    bool inherit = false;
    G* g;
    if (m->locked_g != nullptr) {
      // Wired to a goroutine that is not running: give the P away and sleep
      // until that goroutine is handed back to us.
      g = StopLockedM(m);
      inherit = false;
    } else {
      g = FindRunnable(m, &inherit);
      if (m->spinning) ResetSpinning(m);
      if (g->locked_m != nullptr && g->locked_m != m) {
        StartLockedM(m, g);
        continue;
      }
    }
    do {
      // While the freeze at exit is on, no goroutine made before exit() runs.
      // The one load on every schedule: `frozen` is almost always false.
      if (sched.frozen.load(std::memory_order_acquire) &&
          !g->runs_during_exit.load(std::memory_order_relaxed)) [[unlikely]] {
        if (FreezeOnG0(g)) break;
      }
      Execute(m, g, inherit);
      g = FinishSwitchOnG0(m);  // non-null: a park that did not commit
      inherit = true;
    } while (g != nullptr);
    if (m->retiring) {
      RetireMOnG0(m);
      return;
    }
    // Back from a blocking call that lost its P: wait to be handed one (a
    // wired M waits for its goroutine instead, at the top of the loop).
    if (m->p == nullptr && m->locked_g == nullptr) StopM(m);
  }
}

// no_sanitize("null"): a forced unwind carries no C++ object, and binding
// the catch clause's abi::__forced_unwind& to it is a null reference to
// UBSan (the clause only recognises the unwind; it reads nothing).
__attribute__((no_sanitize("null"))) void* MStart(void* arg) {
  M* m = static_cast<M*>(arg);
  tls_m = m;
  if (CurrentM() != m) Fatal("MStart: the thread-local M is not at the expected offset");
  m->tid = static_cast<pid_t>(::syscall(SYS_gettid));
  pthread_setname_np(pthread_self(), "goro-m");  // not its creator's name
  pthread_getcpuclockid(pthread_self(), &m->cpu_clock);
  InitThreadCxxState(m);
  MInitSignals(m);
  SanInitThreadContext(&m->g0san);
  pthread_sigmask(SIG_SETMASK, &m_sigmask, nullptr);
  P* p = m->next_p;
  m->next_p = nullptr;
  // Runtime code on g0 that runs out of memory (a run queue or the stack
  // pool that cannot grow) ends up here: say so in one line rather than
  // with std::terminate's.
  try {
    AcquireP(m, p);
    ScheduleOnG0(m);  // returns only if the M retires
  } catch (const std::bad_alloc&) {
    FatalG("out of memory in the scheduler (std::bad_alloc)");
  } catch (const std::exception& e) {
    FatalG(absl::StrCat("exception in the scheduler: ", e.what()));
  } catch (abi::__forced_unwind&) {
    // A cancellation a goroutine asked for (pthread_cancel(pthread_self()))
    // that acted only once the scheduler reached a cancellation point.
    FatalG("pthread_exit or pthread_cancel on a runtime thread: a goroutine's thread is not its own to end");
  }
  ExitMThread(m);
  return nullptr;
}

// The first thing a goroutine does whenever it resumes, on whatever M: finish
// the switch (queue a goroutine that yielded straight to this one).
void OnResumeG() {
  M* m = CurrentM();
  if (G* prev = m->pending_yield) {
    m->pending_yield = nullptr;
    prev->status.store(GStatus::kRunnable, std::memory_order_relaxed);
    if (auto hook = yield_queue_hook.load(std::memory_order_relaxed)) [[unlikely]] hook();
    RunqPut(m->p, prev, false);
    // Work this M will not do next: an idle P should take it. The spinner
    // the Ready before the yield may have started (Mutex hand-off, a
    // channel) may have looked at this queue before the yielder was in it
    // and gone to sleep; with nobody else spinning and this goroutine
    // running on without a safe point, the yielder would wait in this
    // queue for as long as it runs.
    WakeP();
  }
  m->in_switch.store(false, std::memory_order_relaxed);
}

std::terminate_handler previous_terminate = nullptr;

// Whether the return address `pc` lies in `fn`, known by its address or by
// its name in the dynamic symbol table (the address a non-PIE executable
// takes of a shared library's function is its PLT stub's).
bool ReturnsInto(uintptr_t pc, void* fn, const char* mangled) {
  void* start = _Unwind_FindEnclosingFunction(reinterpret_cast<void*>(pc - 1));
  if (start == nullptr) return false;
  if (start == fn) return true;
  Dl_info info;
  return dladdr(reinterpret_cast<void*>(pc - 1), &info) != 0 && info.dli_saddr == start &&
         info.dli_sname != nullptr && strcmp(info.dli_sname, mangled) == 0;
}

// Whether std::terminate was called by a throw or rethrow that found no
// handler: an exception escaping. std::current_exception() cannot tell (nor
// can std::uncaught_exceptions(), 0 in both cases): inside a catch block it
// is the exception being handled, whatever called std::terminate there (a
// joinable std::thread destroyed, say). libstdc++'s __cxa_throw,
// __cxa_rethrow and std::rethrow_exception (std::future::get) call
// std::terminate themselves when unwinding finds no handler, so the frame
// that called std::terminate says which. (Code built by Clang calls it from
// __clang_call_terminate, a hidden symbol this cannot name: a noexcept
// violation there reads as std::terminate called while handling.) When
// std::terminate is not found (an exception leaving a noexcept function
// takes another way in), the exception escaped too.
bool TerminateIsAnEscape() {
  struct Walk {
    bool after_terminate = false;
    bool escape = true;
  } walk;
  _Unwind_Backtrace(
      [](_Unwind_Context* ctx, void* arg) -> _Unwind_Reason_Code {
        auto* w = static_cast<Walk*>(arg);
        uintptr_t pc = _Unwind_GetIP(ctx);
        if (pc == 0) return _URC_END_OF_STACK;
        if (w->after_terminate) {  // std::terminate's caller
          w->escape =
              ReturnsInto(pc, reinterpret_cast<void*>(&abi::__cxa_throw), "__cxa_throw") ||
              ReturnsInto(pc, reinterpret_cast<void*>(&abi::__cxa_rethrow), "__cxa_rethrow") ||
              ReturnsInto(pc, reinterpret_cast<void*>(static_cast<void (*)(std::exception_ptr)>(&std::rethrow_exception)),
                          "_ZSt17rethrow_exceptionNSt15__exception_ptr13exception_ptrE");
          return _URC_END_OF_STACK;
        }
        w->after_terminate = ReturnsInto(pc, reinterpret_cast<void*>(&std::terminate), "_ZSt9terminatev");
        return _URC_NO_REASON;
      },
      &walk);
  return walk.escape;
}

// std::terminate on a goroutine with an exception in flight: an exception
// escaped it, or the program ended itself while handling one. Anything else
// is the program's business.
[[noreturn]] void OnTerminate() {
  if (CurrentGoroutine() != nullptr && std::current_exception() != nullptr) {
    const bool escape = TerminateIsAnEscape();
    std::string what;
    try {
      throw;
    } catch (const std::exception& e) {
      what = escape ? absl::StrCat("uncaught exception: ", e.what())
                    : absl::StrCat("std::terminate called while handling exception: ", e.what());
    } catch (...) {
      what = escape ? "uncaught exception of a type not derived from std::exception"
                    : "std::terminate called while handling an exception of a type not derived from "
                      "std::exception";
    }
    FatalG(what);
  }
  if (previous_terminate != nullptr) previous_terminate();
  std::abort();
}

__attribute__((no_sanitize("null"))) void GoroutineMain(void* arg) {  // see MStart
  G* g = static_cast<G*>(arg);
  SanFinishSwitch(&g->san);
  OnResumeG();
  // Born with preemption off (see NewProc), so that nothing could interrupt
  // the switch that started it; user code may be preempted from here on.
  std::atomic_signal_fence(std::memory_order_seq_cst);
  g->preempt_off.store(0, std::memory_order_relaxed);
  // No catch for exceptions: one that nothing catches finds the end of the
  // stack at goro_start_context, and the C++ runtime calls std::terminate
  // with the throwing frames still on the stack, where OnTerminate reports
  // it with their backtrace. Only a forced unwind is caught, pthread_exit's
  // or pthread_cancel's: past goro_start_context glibc would end the M's
  // thread, with its P and without a word (with one P the program hangs).
  // A cancel the goroutine left pending acts here, on the goroutine that
  // asked for it, not at the next cancellation point of whichever goroutine
  // runs on the thread next.
  try {
    g->closure_ops->run(g->closure);
    pthread_testcancel();
  } catch (abi::__forced_unwind&) {
    FatalG("pthread_exit or pthread_cancel on a goroutine: its thread is not its own to end "
           "(return from the goroutine's function instead)");
  }
  g->closure_ops->destroy(g->closure);  // the captures die while the goroutine still runs
  g->closure_ops = nullptr;
  FatalIfEndingInsideAMarkedRegion(g);
  g->preempt_off.store(kInRuntime, std::memory_order_relaxed);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  EnsurePAfterEntry(g);
  M* m = CurrentM();
  trace::GoEnd(m->p, g);
  m->request = SwitchRequest::kExit;
  m->in_switch.store(true, std::memory_order_relaxed);
  SanStartSwitch(&g->san, m->g0san, /*exiting=*/true);
  arch::SwitchContext(&g->ctx, &m->g0ctx);
  Fatal("GoroutineMain: a dead goroutine was resumed");
}


// Yield's fast path: when this P has another goroutine ready and nothing
// global needs looking at, switch to it directly instead of through g0 (one
// context switch instead of two). Every 16th slice, and whenever the global
// queue has work, Yield goes through g0, whose FindRunnable runs timers and
// serves the global queue. Returns false if the slow path must be taken.
bool TryYieldDirect(M* m, G* g1) {
  P* p = m->p;
  if (g1->locked_m != nullptr || sched.runq_size.load(std::memory_order_relaxed) > 0) return false;
  // During the freeze at exit the next goroutine may have to be set aside:
  // ScheduleOnG0 decides.
  if (sched.frozen.load(std::memory_order_acquire)) return false;
  if (m->sigmask_changed || m->sigmask_refused || m->altstack_changed) return false;  // via g0, which restores them
  if ((p->schedtick.load(std::memory_order_relaxed) + 1) % 16 == 0) return false;
  bool inherit;
  G* g2 = p->runq.Get(&inherit);
  if (g2 == nullptr) return false;
  if (g2->locked_m != nullptr) {  // must be handed to its own M: via g0
    if (G* displaced = p->runq.PutNext(g2)) RunqPut(p, displaced, false);
    return false;
  }
  // g2 queues g1 once g1's registers are saved. Set before curg names g2:
  // until the switch is done this thread pushes onto g1's stack, and the
  // fault handler finds g1 here if that overflows it.
  m->pending_yield = g1;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  PrepareToRun(m, g2, inherit);
  SaveCxxState(m, g1);
  InstallCxxState(m, g2);
  SanStartSwitch(&g1->san, g2->san, false);
  arch::SwitchContext(&g1->ctx, &g2->ctx);
  SanFinishSwitch(&g1->san);
  OnResumeG();
  return true;
}

}  // namespace

// A region left open would pass on to whatever goroutine reuses the G.
void FatalIfEndingInsideAMarkedRegion(G* g) {
  if (g->syscall_depth != 0) FatalG("goroutine ends inside a marked blocking region (a SyscallScope it never ended)");
}

void CheckDeadlock() {
  RuntimeMutexLock lock(&sched.mu);
  CheckDeadLocked(/*report_now=*/true);
}

void SwitchToG0(M* m, G* g, SwitchRequest req) {
  m->request = req;
  m->in_switch.store(true, std::memory_order_relaxed);
  SanStartSwitch(&g->san, m->g0san, false);
  arch::SwitchContext(&g->ctx, &m->g0ctx);
  SanFinishSwitch(&g->san);  // perhaps on another M
  OnResumeG();
}

namespace {
std::atomic<bool> revocation_available{false};
}  // namespace

bool RevocationAvailable() { return revocation_available.load(std::memory_order_relaxed); }

// The goroutine side of this protocol is RuntimeScope (and every other
// runtime entry): it raises preempt_off, then checks its P (EnsurePAfterEntry)
// with only a compiler barrier between. membarrier makes that enough: after it
// returns, either the goroutine's raised preempt_off is visible here (so we
// back off), or its check will see kRevoking and wait for our decision.
void SetPStatusByOwner(P* p, P::Status s) {
  P::Status cur = p->status.load(std::memory_order_acquire);
  for (;;) {
    if (cur == P::Status::kRevoking) {
      arch::CpuRelax();
      cur = p->status.load(std::memory_order_acquire);
      continue;
    }
    if (p->status.compare_exchange_weak(cur, s, std::memory_order_acq_rel)) return;
  }
}

bool TryRevokeP(P* p, M* m, G* g, uint32_t tick) {
  P::Status want = P::Status::kRunning;
  if (!p->status.compare_exchange_strong(want, P::Status::kRevoking, std::memory_order_seq_cst)) {
    return false;
  }
  ::syscall(SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
  bool still_blocked = p->m.load(std::memory_order_seq_cst) == m &&
                       __atomic_load_n(&m->curg, __ATOMIC_SEQ_CST) == g &&
                       p->schedtick.load(std::memory_order_seq_cst) == tick &&
                       g->preempt_off.load(std::memory_order_seq_cst) == 0 &&
                       !m->in_switch.load(std::memory_order_seq_cst);
  // Owners never write over kRevoking (SetPStatusByOwner), so these CASes
  // from it cannot fail; they are CASes so that a broken rule shows.
  if (!still_blocked) {
    P::Status rev = P::Status::kRevoking;
    if (!p->status.compare_exchange_strong(rev, P::Status::kRunning)) Fatal("TryRevokeP: status changed under it");
    return false;
  }
  p->m.store(nullptr, std::memory_order_release);
  trace::PHandoff(p, g, trace::HandoffWhy::kBlockedCall);
  // While the status is still kRevoking: the goroutine waits for our verdict
  // before it looks at its P, and ReacquireP clears `revoked` only after, so
  // this store cannot land on top of that (sysmon's revoked_ms trusts it).
  m->revoked.store(true, std::memory_order_seq_cst);
  P::Status rev = P::Status::kRevoking;
  if (!p->status.compare_exchange_strong(rev, P::Status::kIdle)) Fatal("TryRevokeP: status changed under it");
  if (HandoffP(p)) sched.handoffs.fetch_add(1, std::memory_order_relaxed);  // not when it went idle
  return true;
}

bool TryAcquireIdleP(M* m) {
  P* p;
  {
    RuntimeMutexLock lock(&sched.mu);
    p = PidleGetLocked();
  }
  if (p == nullptr) return false;
  AcquireP(m, p);
  return true;
}

void Park(WaitReason reason, bool (*commit)(G*, void*), void* arg) {
  M* m = CurrentM();
  if (m == nullptr || m->curg == nullptr) {
    // Runtime code never parks on g0: a signal handler of the program's
    // that interrupted a runtime thread between goroutines does.
    if (m != nullptr) {
      Fatal("a goro wait on one of the runtime's threads outside any goroutine: in a signal handler? "
            "(block the signal before the runtime starts and take it with sigwait on a thread of your own)");
    }
    G* g = ExternalG();
    g->note.Clear();
    g->wait_reason = reason;
    g->wait_since = Nanotime();
    g->status.store(GStatus::kWaiting, std::memory_order_release);
    if (commit != nullptr && !commit(g, arg)) {
      g->status.store(GStatus::kRunning, std::memory_order_relaxed);
      return;
    }
    // A plain thread waits for goroutines during exit (a global's destructor
    // waiting for its workers, say): the freeze ends. Before this thread
    // counts as asleep, so that no deadlock check sees the frozen ones as
    // blocked for ever in between. Not for Run's wait for its own goroutine
    // (which runs anyway if Run began during exit); decided by this wait's
    // reason, not by the thread's state, since a signal handler may wait
    // here (exit() from a SIGTERM handler, a global's destructor waiting for
    // its workers) on top of a Run's wait that it interrupted.
    if (sched.frozen.load(std::memory_order_acquire) && reason != WaitReason::kRunWait) [[unlikely]] {
      ThawAfterExitFreeze();
    }
    if (!g->external_uncounted && sched.external_awake.fetch_sub(1) == 1) {  // Ready counts it awake again
      // The last awake plain thread going to sleep may be what completes a
      // deadlock (the Ms may all have gone idle before it parked).
      RuntimeMutexLock lock(&sched.mu);
      CheckDeadLocked();
    }
    g->note.Sleep();
    g->status.store(GStatus::kRunning, std::memory_order_relaxed);
    g->wait_reason = WaitReason::kNone;
    return;
  }
  G* g = m->curg;
  g->wait_reason = reason;
  g->wait_since = CoarseNanotime();
  m->park_commit = commit;
  m->park_arg = arg;
  SwitchToG0(m, g, SwitchRequest::kPark);
  g->wait_reason = WaitReason::kNone;
}

void Ready(G* g) {
  GStatus want = GStatus::kWaiting;
  if (!g->status.compare_exchange_strong(want, GStatus::kRunnable, std::memory_order_acq_rel)) {
    Fatal(absl::StrCat("Ready: ", g->external ? "a plain thread" : absl::StrCat("goroutine ", g->id),
                       " is not waiting (status ", static_cast<int>(want), ")"));
  }
  if (g->external) {
    // Awake from this moment, before its thread runs: otherwise the last M
    // could go idle in between and see nobody who might wake anyone.
    if (!g->external_uncounted) sched.external_awake.fetch_add(1);
    g->note.Wakeup();
    return;
  }
  trace::GoUnblock(g);
  M* m = CurrentM();
  if (m != nullptr && m->p != nullptr) {
    RunqPut(m->p, g, true);
  } else {
    RuntimeMutexLock lock(&sched.mu);
    GlobrunqPutLocked(g);
  }
  if (m != nullptr && m->running_timers) {
    m->wakep_deferred = true;  // RunTimers wakes a P after its unlock
    return;
  }
  WakeP();
}

void YieldNow() {
  M* m = CurrentM();
  if (m == nullptr || m->curg == nullptr) {
    sched_yield();
    return;
  }
  trace::GoYield(m->p, m->curg);
  if (TryYieldDirect(m, m->curg)) return;
  SwitchToG0(m, m->curg, SwitchRequest::kYield);
}

void RuntimeScope::Enter(bool safe_point) {
  g_ = CurrentGoroutine();
  if (g_ == nullptr) {
    if (CurrentM() == nullptr) NoteThreadSlow();  // a plain thread, not g0
    return;
  }
  int32_t n = g_->preempt_off.load(std::memory_order_relaxed);
  if (safe_point && n == 0 && g_->stackguard0.load(std::memory_order_relaxed) == kStackPreempt) {
    PreemptCooperative();
  }
  g_->preempt_off.store(n + kInRuntime, std::memory_order_relaxed);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  if (n != 0 && g_->syscall_depth != 0) FatalGoroCallInMarkedRegion();
  // Nested too: what raised preempt_off first may not have checked the P.
  // dl_iterate_phdr's wrapper does not (core/preempt.cc), and a goroutine
  // whose P sysmon took during an unmarked call may call back into goro from
  // its callback. Inside a RuntimeScope the check is a few loads: the P
  // cannot be taken while preempt_off is raised.
  EnsurePAfterEntry(g_);
}

InRuntimeScope::InRuntimeScope() : g_(CurrentGoroutine()) {
  if (g_ == nullptr) return;
  g_->preempt_off.store(g_->preempt_off.load(std::memory_order_relaxed) + kInRuntime, std::memory_order_relaxed);
  std::atomic_signal_fence(std::memory_order_seq_cst);
}

void FatalGoroCallInMarkedRegion() {
  // Inside a marked region the P may be handed to another M at any time:
  // runtime code run here would use it from two threads.
  FatalG("goro call inside a marked blocking region (goro::Syscall or SyscallScope); end the region first");
}

void EnsurePAfterEntryOutsideHandlers(G* g) {
  M* m = CurrentM();
  if (!HoldsItsP(m) && ThreadHasMSignalMask()) ReacquireP(m, g);
}

void ReacquireP(M* m, G* g) {
  // Runtime code, whatever raised preempt_off (a NoPreemptScope, goro's
  // dl_iterate_phdr wrapper): it sets m->p to null, takes sched.mu, may
  // switch to g0. A marked region in a signal handler that interrupts it
  // must keep the P (core/syscall.cc).
  InRuntimeScope in_runtime;
  P* p = m->p;
  // Sysmon is deciding (TryRevokeP): it sees our raised preempt_off and
  // gives the P back, or has already committed; wait for the outcome.
  while (p != nullptr && p->status.load(std::memory_order_acquire) == P::Status::kRevoking) {
    arch::CpuRelax();
  }
  if (p != nullptr && p->m.load(std::memory_order_acquire) == m &&
      p->status.load(std::memory_order_acquire) == P::Status::kRunning) {
    return;
  }
  // The P was handed off while this goroutine blocked outside the runtime.
  m->p = nullptr;
  m->revoked.store(false, std::memory_order_seq_cst);  // see sysmon's revoked_ms
  ReacquirePOnSameThread(m, g);
}

bool RetakePFromSyscall(P* p, M* except) {
  M* owner = p->syscall_owner.load(std::memory_order_acquire);
  if (owner == nullptr || owner == except ||
      !p->syscall_owner.compare_exchange_strong(owner, nullptr, std::memory_order_acq_rel)) {
    return false;
  }
  // Ours now: the owner will find it gone when it leaves its region.
  trace::PHandoff(p, __atomic_load_n(&owner->curg, __ATOMIC_ACQUIRE), trace::HandoffWhy::kSyscall);
  p->status.store(P::Status::kIdle, std::memory_order_release);
  p->m.store(nullptr, std::memory_order_release);
  return true;
}

namespace {
// g, which got m's P (just acquired) without a switch, runs on in a new
// slice: the P ran nothing of g's meanwhile, and its old slice, timed from
// before that, would be preempted at once (AcquireP's slice_spent is seen
// only by a switch). A request made while g had no P was to bring it here.
void RunOnInANewSlice(M* m, G* g) {
  StartSlice(m->p);
  g->stackguard0.store(g->stack.lo + kStackGuardMargin, std::memory_order_relaxed);
  trace::GoStart(m->p, g);
}
}  // namespace

bool TakePFromBlockedM(M* m, G* g, P* p) {
  if (!RetakePFromSyscall(p, /*except=*/m)) return false;
  AcquireP(m, p);
  RunOnInANewSlice(m, g);
  return true;
}

void ReacquirePOnSameThread(M* m, G* g) {
  if (TryAcquireIdleP(m)) {
    RunOnInANewSlice(m, g);
    return;
  }
  bool wired = g->locked_m != nullptr;
  if (!wired) {  // temporarily, for the hand-off
    g->locked_m = m;
    m->locked_g = g;
  }
  SwitchToG0(m, g, SwitchRequest::kSyscallExit);
  if (!wired) {
    g->locked_m = nullptr;
    CurrentM()->locked_g = nullptr;  // the same M: that was the point
  }
}

// Parks g, the current goroutine, as preempted (to the global queue) and
// returns when it runs again, perhaps on another thread. The caller has
// raised g->preempt_off. errno travels with the goroutine on both paths: a
// goroutine preempted at Checkpoint(), a runtime entry or the end of a
// NoPreemptScope did not ask to be switched either, so it may rely on errno
// across the point.
namespace {
void ParkPreempted(G* g, bool async) {
  int saved_errno = errno;
  EnsurePAfterEntry(g);
  M* m = CurrentM();  // only now: with preemption off it cannot change under us
  g->stackguard0.store(g->stack.lo + kStackGuardMargin, std::memory_order_relaxed);
  g->preemptions++;
  (async ? sched.async_preemptions : sched.cooperative_preemptions).fetch_add(1, std::memory_order_relaxed);
  trace::GoPreempt(m->p, g, async);
  SwitchToG0(m, g, SwitchRequest::kPreempt);
  SetErrno(saved_errno);
}
}  // namespace

void PreemptCooperative() {
  // A child forked without exec has no scheduler to yield to; a request
  // copied from the parent stays pending there, harmless.
  G* g = CurrentGoroutine();
  if (in_forked_child || g == nullptr) return;
  g->preempt_off.fetch_add(kInRuntime, std::memory_order_relaxed);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  // Not inside a signal handler of the program's, which would return on
  // another thread: the request stays pending until a safe point outside
  // it, as the async path's does. A handler runs on an alternate signal
  // stack (SA_ONSTACK), or blocks at least its own signal beyond what the
  // goroutine's own mask does, the one it set itself outside any handler or
  // else the runtime's (signals/sigmask.cc). Looked at with preempt_off
  // raised, so that the M, its flags and the mask are one thread's.
  const auto sp = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  if (sp >= g->stack.lo && sp < g->stack.hi && !ThreadHasHandlersSignalMask(CurrentM())) {
    ParkPreempted(g, /*async=*/false);
  }
  g->preempt_off.fetch_sub(kInRuntime, std::memory_order_relaxed);
}

bool HandoffP(P* p) {
  // Work waiting, or a timer due (FindRunnable runs it first, and then what
  // it readied): start an M to run it.
  if (!p->runq.Empty() || sched.runq_size.load() > 0 || TimerDueSoon(p->timer0_when.load(), Nanotime())) {
    StartM(p, false);
    return true;
  }
  // Nobody spinning or idle: this P should look for work (to steal).
  int32_t zero = 0;
  if (sched.nmspinning.load() + sched.npidle.load() == 0 &&
      sched.nmspinning.compare_exchange_strong(zero, 1)) {
    StartM(p, true);
    return true;
  }
  {
    RuntimeMutexLock lock(&sched.mu);
    PidlePutLocked(p);
  }
  // Its timers now need the timer sleeper.
  if (int64_t w = p->timer0_when.load(); w != 0) WakeForTimer(w);
  // The last P to go idle while goroutines wait on I/O: someone must poll.
  // The M that handed it off will not (it blocks in a system call, or is
  // wired to a goroutine that waits), and an idle runtime sends sysmon into
  // its deep sleep. As in Go's handoffp.
  if (sched.netpoll_waiters.load() > 0 && sched.npidle.load() == sched.nprocs) WakeNetpoller();
  return false;
}

void WakeForTimer(int64_t when) {
  int64_t until = sched.poll_until.load();
  if (until != 0) {
    if (when < until) {
      RuntimeMutexLock lock(&sched.mu);
      if (sched.timer_sleeper != nullptr) {
        if (sched.sleeper_polls) {
          NetpollBreak();
        } else {
          sched.timer_sleeper->park.Wakeup();
        }
      }
    }
    return;
  }
  WakeP();
  WakeSysmonForTimer(when);
}

// Like Go's wakeNetPoller, which gets an M into the poller for a new timer:
// a goroutine that parks on I/O leaves its M in FindRunnable, which polls or
// becomes the polling sleeper, but a plain thread leaves nobody behind, and
// with every M idle nobody would ever call epoll_wait. Under sched.mu, so
// that a sleeper that has not yet seen netpoll_waiters either is seen here or
// sees it when it next looks.
void WakeNetpoller() {
  {
    RuntimeMutexLock lock(&sched.mu);
    if (sched.timer_sleeper != nullptr) {
      // In epoll_wait, or on its way there; else asleep on its note until a
      // timer: woken, it takes a P and re-decides (as in FindRunnable).
      if (!sched.sleeper_polls) sched.timer_sleeper->park.Wakeup();
      return;
    }
  }
  // No sleeper: an idle M with an idle P will become it. With no idle P, or
  // an M spinning already, the Ms at work pass through FindRunnable soon and
  // sysmon (awake while a P is busy) polls every 10 ms.
  WakeP();
}

void InjectGList(G* list) {
  if (list == nullptr) return;
  M* m = CurrentM();
  P* p = m != nullptr ? m->p : nullptr;
  if (p != nullptr && m->curg == nullptr) {  // g0 with a P: our own queue
    while (G* g = list) {
      list = g->sched_link;
      g->sched_link = nullptr;
      RunqPut(p, g, false);
    }
  } else {
    RuntimeMutexLock lock(&sched.mu);
    while (G* g = list) {
      list = g->sched_link;
      g->sched_link = nullptr;
      GlobrunqPutLocked(g);
    }
  }
  WakeP();
}

__attribute__((noinline)) void SetErrno(int v) {
  asm volatile("" ::: "memory");
  errno = v;
}

__attribute__((noinline)) int Errno() {
  asm volatile("" ::: "memory");
  return errno;
}

// Called by the trampoline (arch/preempt_*.S) on the goroutine's stack, with
// every register saved and preempt_off raised by the signal handler.
extern "C" void goro_async_preempt_go() {
  G* g = CurrentGoroutine();
  ParkPreempted(g, /*async=*/true);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  g->preempt_off.store(g->preempt_off.load(std::memory_order_relaxed) - kInRuntime, std::memory_order_relaxed);
}

namespace {

void NewProc(const ClosureOps* ops, void* f) {
  M* m = CurrentM();
  P* p = m != nullptr ? m->p : nullptr;
  G* g = p != nullptr ? GfreeGet(p) : GfreeGetNoP();
  if (g == nullptr) {
    g = new (std::nothrow) G();
    if (g == nullptr) {
      char msg[96];
      snprintf(msg, sizeof msg, "cannot allocate a goroutine: out of memory (struct G, %zu bytes)", sizeof(G));
      FatalG(msg);
    }
    gs_allocated.fetch_add(1, std::memory_order_relaxed);
    G* head = sched.allgs.load(std::memory_order_relaxed);
    do {
      g->alllink = head;
    } while (!sched.allgs.compare_exchange_weak(head, g, std::memory_order_release));
  }
  ops->move_to(g->closure, f);
  g->closure_ops = ops;
  // During the freeze at exit: made by a plain thread (a Run from an atexit
  // handler or a static destructor), or by a goroutine that runs during exit,
  // it runs; made by a goroutine frozen at exit that has not stopped yet, it
  // is frozen too. Before exit every G's flag is false, and once the freeze
  // has ended nobody reads it.
  if (sched.frozen.load(std::memory_order_relaxed)) [[unlikely]] {
    G* parent = CurrentGoroutine();
    g->runs_during_exit.store(parent == nullptr || parent->runs_during_exit.load(std::memory_order_relaxed),
                              std::memory_order_relaxed);
  }
  g->stackguard0.store(0, std::memory_order_relaxed);
  g->preempt_off.store(kInRuntime, std::memory_order_relaxed);  // see GoroutineMain
  g->preemptions = 0;
  if (p != nullptr) {
    if (p->goid_next == p->goid_end) {
      p->goid_next = sched.next_goid.fetch_add(kGoidBatch, std::memory_order_relaxed);
      p->goid_end = p->goid_next + kGoidBatch;
    }
    g->id = p->goid_next++;
    p->created.fetch_add(1, std::memory_order_relaxed);
    g->status.store(GStatus::kRunnable, std::memory_order_relaxed);
    trace::GoCreate(p, g);
    RunqPut(p, g, true);
  } else {
    g->id = sched.next_goid.fetch_add(1, std::memory_order_relaxed);
    sched.created_off_p.fetch_add(1, std::memory_order_relaxed);
    g->status.store(GStatus::kRunnable, std::memory_order_relaxed);
    trace::GoCreate(nullptr, g);
    RuntimeMutexLock lock(&sched.mu);
    GlobrunqPutLocked(g);
  }
  WakeP();
}

}  // namespace

int64_t GoroutineRecordsInUse() {
  int64_t free = 0;
  for (P* p : sched.allp) free += __atomic_load_n(&p->gfree_n, __ATOMIC_RELAXED);  // racy
  sched.gfree_lock.Lock();
  free += sched.gfree_n;
  sched.gfree_lock.Unlock();
  return gs_allocated.load(std::memory_order_relaxed) - free;
}

namespace {

// The CPUs this process may run on, as Go's default GOMAXPROCS counts them:
// the main thread's affinity mask (MainThreadDefaults), so that `taskset -c 0
// prog` or a container's cpuset gets as many Ps as it has CPUs (the hardware
// concurrency counts every online CPU), whichever thread starts the runtime.
// If the mask could not be read, the hardware concurrency.
int UsableCpus() {
  int n = MainThreadDefaults().ncpus;
  return n > 0 ? n : static_cast<int>(std::thread::hardware_concurrency());
}

// How long exit() waits, at most, for the goroutines running when it began to
// stop (FreezeAtExit).
constexpr int64_t kExitStopWaitNs = 20 * 1000 * 1000;
// How often one that has not stopped is asked again: a signal that came in
// library code was refused.
constexpr int64_t kExitAskAgainNs = 1000 * 1000;

// FreezeAtExit's wait for the goroutines running when exit() began.
void StopGoroutinesAtExit() {
  M* self_m = CurrentM();
  P* own = self_m != nullptr ? self_m->p : nullptr;
  for (M* m = sched.allm.load(std::memory_order_acquire); m != nullptr; m = m->alllink) {
    G* g = __atomic_load_n(&m->curg, __ATOMIC_ACQUIRE);
    if (g != nullptr && !g->runs_during_exit.load(std::memory_order_relaxed)) {
      g->stackguard0.store(kStackPreempt, std::memory_order_release);
    }
  }
  std::vector<G*> asked(sched.allp.size(), nullptr);
  std::vector<int64_t> asked_at(sched.allp.size(), 0);
  const int64_t deadline = Nanotime() + kExitStopWaitNs;
  for (;;) {
    // Ended already by another plain thread's wait: nothing to stop.
    if (!sched.frozen.load(std::memory_order_acquire)) return;
    bool running = false;
    const int64_t now = Nanotime();
    for (size_t i = 0; i < sched.allp.size(); ++i) {
      P* p = sched.allp[i];
      if (p == own) continue;
      if (p->status.load(std::memory_order_acquire) != P::Status::kRunning) continue;
      M* m = p->m.load(std::memory_order_acquire);
      G* g = m != nullptr ? __atomic_load_n(&m->curg, __ATOMIC_ACQUIRE) : nullptr;
      if (g == nullptr || g->runs_during_exit.load(std::memory_order_relaxed)) continue;
      running = true;
      if (asked[i] != g || now - asked_at[i] >= kExitAskAgainNs) {
        asked[i] = g;
        asked_at[i] = now;
        PreemptOne(p, p->schedtick.load(std::memory_order_acquire));
      }
    }
    if (!running || Nanotime() >= deadline) return;
    timespec pause = {0, 50 * 1000};
    nanosleep(&pause, nullptr);
  }
}

// The runtime's atexit handler, registered when it starts: exit() has begun.
// In Go, returning from main ends every goroutine at once; here exit() goes on
// to run the destructors of the program's globals, which goroutines still
// running would use as they are destroyed. So the goroutines that exist now
// are frozen: no M runs one of them again (ScheduleOnG0 sets it aside), and
// each running one is asked to stop as sysmon asks a goroutine whose slice is
// over (PreemptOne: the cooperative request, and the signal when async
// preemption is on), then waited for, up to kExitStopWaitNs in all; sysmon
// goes on asking at every look (core/sysmon.cc) one that a busy machine kept
// off its CPU longer. Best effort: one that reaches no safe point (in a
// blocking call, in library code, in a loop without calls with async
// preemption off) runs on until it next enters the scheduler, and the exit
// goes on without it. A goroutine in a blocking call whose M has lost its P
// (or in a marked region) gets the cooperative request only, and is not
// waited for: it stops at its next goro call or Checkpoint(), or when it
// next blocks.
// Goroutines made from now on by plain threads (a Run from an atexit handler
// or a static destructor), and those they make, run normally (NewProc), as
// does the goroutine that called exit(), if one did. The freeze lasts until a
// plain thread waits in goro, if one does, or until this thread has waited
// (made no CPU progress, asleep in the kernel) for about 100 ms, which
// sysmon watches for (WatchExitingThread in core/sysmon.cc): then all run
// again, as before exit (ThawAfterExitFreeze). The freeze never makes exit()
// wait for good for a goroutine it froze. While another thread reports a
// fatal error it freezes nothing: it waits for that report's abort
// (AwaitFatalReportAtExit).
void FreezeAtExit() {
  // A fatal error being reported on another thread ends the process by its
  // abort: nothing is frozen or destroyed under its report.
  AwaitFatalReportAtExit();
  G* self = CurrentGoroutine();
  // A child of fork() that calls exit() has none of the runtime's threads.
  const bool live = sched.started.load(std::memory_order_acquire) && !in_forked_child;
  if (self != nullptr) {
    self->runs_during_exit.store(true, std::memory_order_relaxed);
    // exit() inside a marked blocking region (goro::Syscall around a call
    // whose error path exits): the region would never end, and every goro
    // call of the destructors that follow would be the fatal "goro call
    // inside a marked blocking region". End it, nested ones and all, as
    // leaving it would: this M takes its P back, or another (a wait its
    // turn in the global queue, before any goroutine is frozen).
    if (live && self->syscall_depth != 0) {
      self->syscall_depth = self->syscall_depth >= kSyscallKeptP ? kSyscallKeptP : 1;
      ExitSyscall();
    }
  }
  goro::NoPreemptScope no_preempt;  // on a goroutine: stays on this M, whose P is skipped below
  sched.frozen.store(true, std::memory_order_seq_cst);
  sched.exiting.store(true, std::memory_order_seq_cst);
  if (!live) return;
  // The goroutine that called exit() stays on this thread, the one sysmon
  // watches (WatchExitingThread): a wait of the goroutine's is then a wait
  // of the thread's (StopLockedM), and no other M runs the destructors.
  if (self != nullptr) goro::LockOSThread();
  StopGoroutinesAtExit();
  // From now on sysmon watches this thread: one that waits during exit may
  // be waiting for a frozen goroutine (for a lock it holds, for a thread
  // whose Run it would let end), and would wait for ever.
  pthread_getcpuclockid(pthread_self(), &sched.exit_cpu_clock);
  sched.exit_tid.store(static_cast<pid_t>(::syscall(SYS_gettid)), std::memory_order_release);
  sched.sysmon_note.Wakeup();  // it may sleep until a P runs, and none may
}

}  // namespace

volatile sig_atomic_t in_forked_child = 0;

[[noreturn, gnu::cold, gnu::noinline]] void FatalInForkedChild() {
  Fatal("goro call in a child forked without exec: the runtime's threads did not survive fork, "
        "so no goroutine can run here");
}

void EnsureStarted(const Options& opts) {
  if (sched.started.load(std::memory_order_acquire)) [[likely]] {
    // Its copy of the scheduler has no Ms and no sysmon: a Run would wait
    // for ever, a goroutine never run.
    if (in_forked_child) [[unlikely]] FatalInForkedChild();
    return;
  }
  static absl::Mutex start_mu(absl::kConstInit);
  absl::MutexLock lock(&start_mu);
  if (sched.started.load(std::memory_order_relaxed)) return;

  InitCurrentM();
  NoteStandardStreams();
  EnvSettings env = ReadEnvironment();
  sched.start_opts = opts;
  Options o = CheckOptions(opts);
  if (o.max_procs == 0) {
    // Every CPU the process may run on, up to the limit an explicit value has too.
    o.max_procs = env.max_procs > 0 ? env.max_procs : std::clamp(UsableCpus(), 1, kMaxProcsLimit);
  }
  if (env.time_slice.has_value()) o.time_slice = *env.time_slice;
  if (env.async_preempt_off) o.async_preemption = false;
  sched.opts = o;
  sched.nprocs = o.max_procs;
  sched.time_slice_ns = absl::ToInt64Nanoseconds(o.time_slice);  // at least kMinTimeSlice
  sched.stamp_slices = sched.time_slice_ns < kObservedSliceMinNs;
  sched.preempt_signal = o.preempt_signal;
  sched.start_time = Nanotime();
  std::atexit(FreezeAtExit);
  pthread_atfork(nullptr, nullptr, [] { in_forked_child = 1; });
  sched.schedtrace_ns = env.schedtrace_ms * 1000 * 1000;
  sched.scheddetail = env.scheddetail;
  const arch::CpuInfo& cpu = arch::ProbeCpu();
  if (o.async_preemption && !cpu.xsave) {
    WriteStderr("goro: this CPU has no usable XSAVE; async preemption is off\n");
    o.async_preemption = false;
  }
  // TSan defers a signal to its next interceptor or safe point and runs the
  // handler there, with a context that no longer matches the interrupted
  // code: an injected call would land anywhere. Cooperative preemption stays.
  if (kTsanBuild) o.async_preemption = false;
  // The code a signal may interrupt: the executable's, unless libstdc++,
  // libgcc's unwinder, libc or malloc is linked into it (core/preempt.cc). Their
  // per-thread state cannot follow a goroutine to another thread, and their
  // code cannot be told from the program's, so then nothing is interrupted.
  if (std::string linked = InitPreemptibleRanges(); !linked.empty() && o.async_preemption) {
    bool several = linked.find(" and ") != std::string::npos;
    WriteStderr(absl::StrCat(
        "goro: ", linked, several ? " are" : " is",
        " linked into the executable, where ", several ? "their" : "its",
        " code cannot be told from the program's: async preemption is off, goroutines yield only at goro "
        "calls and Checkpoint(); link ", several ? "them" : "it",
        " as shared libraries (no -static, -static-libstdc++, -static-libgcc or static allocator library) "
        "to get it back, or register the program's own code with goro::RegisterPreemptibleCode before the "
        "runtime starts\n"));
    o.async_preemption = false;
  }
  sched.async_preemption = o.async_preemption;
  o.stack_size = StackInitGlobal(o.stack_size);
  sched.opts = o;
  // Unmarked blocking calls are detected only if sysmon can use membarrier
  // (Linux 4.14+); see TryRevokeP.
  revocation_available.store(
      ::syscall(SYS_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0,
      std::memory_order_relaxed);
  InstallSignalHandlers();
  InitMSignalMask(o.async_preemption ? o.preempt_signal : 0);
  if (env.sigquit_dump) InstallQuitHandler();
  previous_terminate = std::set_terminate(OnTerminate);
  // Now rather than in a fatal error, which may strike inside the dynamic
  // loader's lock (or with memory exhausted) where dlopen would fail or hang.
  PreloadUnwinder();
  if (o.async_preemption) InstallPreemptHandler(o.preempt_signal);
  {
    RuntimeMutexLock sl(&sched.mu);
    for (int i = 0; i < sched.nprocs; ++i) {
      P* p = new P();
      p->id = i;
      sched.allp.push_back(p);
    }
    for (int i = sched.nprocs - 1; i >= 0; --i) PidlePutLocked(sched.allp[i]);
  }
  sched.coarse_now.store(Nanotime(), std::memory_order_relaxed);
  StartTemplateThread();  // and sysmon, a copy of it
  sched.started.store(true, std::memory_order_release);
  trace::StartFromEnvironment();  // GOROTRACE
}

}  // namespace goro::internal

// ---------------------------------------------------------------------------
// The public API.

namespace goro {

using internal::sched;

namespace internal {

void GoClosure(const ClosureOps* ops, void* f) {
  EnsureStarted(Options{});
  RuntimeScope scope;
  if (!OnGoroutine()) CurrentG();  // a plain thread: known from now on
  NewProc(ops, f);
}

void FatalGoOfNilFunc() { FatalG("go of nil func value"); }

}  // namespace internal

void Go(absl::AnyInvocable<void() &&> fn) {
  using Fn = absl::AnyInvocable<void() &&>;
  static_assert(internal::kFitsInline<Fn>);
  if (fn == nullptr) internal::FatalGoOfNilFunc();
  internal::GoClosure(&internal::kClosureOps<Fn>, &fn);
}

void Run(absl::AnyInvocable<void() &&> fn, const Options& opts) {
  if (fn == nullptr) internal::FatalGoOfNilFunc();
  internal::EnsureStarted(opts);
  internal::WarnIgnoredOptions(opts, sched.start_opts, sched.opts);
  bool from_thread = !internal::OnGoroutine();
  bool during_exit = false;  // begun once exit() had (see CheckDeadLocked)
  // A semaphore, not a WaitGroup, so that the caller waits with its own
  // reason: a dump shows "[goro.Run]" (it showed "[sync.WaitGroup.Wait]").
  // The release does not touch it once the acquire has returned (sema.h),
  // so it may live on this stack.
  std::atomic<uint32_t> done{0};
  internal::SemaQueue done_waiters;
  if (from_thread) {
    // Known and awake before it counts as a waiter: until its goroutine is on
    // a queue, it is the only sign that anything is about to happen.
    internal::CurrentG();
    internal::RuntimeMutexLock lock(&sched.mu);
    sched.run_waiters++;
    if (sched.exiting.load(std::memory_order_acquire)) {
      during_exit = true;
      sched.exit_run_waiters++;
    }
  }
  internal::RuntimeScope scope;
  auto body = [&fn, &done, &done_waiters, from_thread, during_exit]() mutable {
    std::move(fn)();
    // Before the scope, which would call a region left open a goro call
    // inside it: the same error as for any goroutine (GoroutineMain).
    internal::FatalIfEndingInsideAMarkedRegion(internal::CurrentGoroutine());
    internal::RuntimeScope scope;
    if (from_thread) {
      // Stop counting as a waiter while this goroutine still runs, so that no
      // M can see the caller waiting after its goroutine has finished.
      internal::RuntimeMutexLock lock(&sched.mu);
      sched.run_waiters--;
      if (during_exit) sched.exit_run_waiters--;
    }
    // Finished as far as the caller can tell: GetStats() after Run returns
    // must not count this goroutine as live while it is still on its way out.
    internal::G* self = internal::CurrentGoroutine();
    self->exit_counted = true;
    internal::CurrentM()->p->exited.fetch_add(1, std::memory_order_release);
    internal::SemRelease(&done, &done_waiters);
  };
  internal::NewProc(&internal::kClosureOps<decltype(body)>, &body);
  // A plain thread's wait here, as kRunWait, does not end the freeze at exit
  // at once (Park): a Run begun during exit runs its goroutines anyway, and
  // one begun before belongs to the program that is ending.
  internal::SemAcquire(&done, &done_waiters, false, internal::WaitReason::kRunWait);
}

void Yield() {
  internal::RuntimeScope scope;
  internal::YieldNow();
}

void Checkpoint() {
  internal::G* g = internal::CurrentGoroutine();
  if (g == nullptr) return;
  uintptr_t sp = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  uintptr_t guard = g->stackguard0.load(std::memory_order_relaxed);
  if (sp >= guard) return;
  if (guard == internal::kStackPreempt) {
    if (g->preempt_off.load(std::memory_order_relaxed) == 0) internal::PreemptCooperative();
    return;
  }
  // An overflow if the stack pointer is on the goroutine's stack, in its
  // guard or in the stack below it (a frame larger than the guard jumps over
  // it: docs/robustness.md), unless a signal handler calls this on an
  // alternate signal stack, which may lie there too. Further down it is on a
  // stack of the program's own (a ucontext coroutine's, an alternate signal
  // stack): a plain safe point.
  const uintptr_t below = sp < g->stack.lo ? g->stack.lo - sp : 0;
  if (below > internal::kStackGuardSize + (g->stack.hi - g->stack.lo)) return;
  stack_t on;
  if (sigaltstack(nullptr, &on) == 0 && (on.ss_flags & SS_ONSTACK) != 0) return;
  internal::FatalG("stack overflow");
}

void LockOSThread() {
  internal::RuntimeScope scope;  // no migration while we wire
  internal::M* m = internal::CurrentM();
  if (m == nullptr || m->curg == nullptr) return;  // a plain thread is its own thread
  internal::G* g = m->curg;
  if (g->lock_count++ == 0) {
    g->locked_m = m;
    m->locked_g = g;
  }
}

void UnlockOSThread() {
  internal::RuntimeScope scope;
  internal::M* m = internal::CurrentM();
  if (m == nullptr || m->curg == nullptr) return;
  internal::G* g = m->curg;
  if (g->lock_count == 0) return;  // like Go: unlocking an unlocked goroutine is a no-op
  if (--g->lock_count == 0) {
    g->locked_m = nullptr;
    m->locked_g = nullptr;
  }
}

uint64_t CurrentGoroutinePreemptions() {
  internal::G* g = internal::CurrentGoroutine();
  return g != nullptr ? g->preemptions : 0;
}

int64_t GoroutineId() {
  internal::G* g = internal::CurrentGoroutine();
  return g != nullptr ? g->id : 0;
}

Stats GetStats() {
  // sched.mu is released on the thread that took it; and a marked region in
  // a signal handler that interrupts this keeps its P (core/syscall.cc),
  // since leaving one that lost it may take sched.mu.
  internal::InRuntimeScope in_runtime;
  Stats s;
  if (!sched.started.load(std::memory_order_acquire)) return s;
  // Exits first: a goroutine counted as exited was counted as created
  // before it ran, so a creation read afterwards is seen and `live` is never
  // negative. (Read the other way round, one created after its creator's
  // counter was read and exited before its P's was counted as exited only.)
  uint64_t exited = 0;
  for (internal::P* p : sched.allp) exited += p->exited.load(std::memory_order_acquire);
  uint64_t created = sched.created_off_p.load(std::memory_order_relaxed);
  for (internal::P* p : sched.allp) {
    created += p->created.load(std::memory_order_relaxed);
    s.steals += p->steals.load(std::memory_order_relaxed);
  }
  s.goroutines_created = created;
  s.goroutines_live = static_cast<int64_t>(created - exited);
  s.async_preemptions = sched.async_preemptions.load(std::memory_order_relaxed);
  s.cooperative_preemptions = sched.cooperative_preemptions.load(std::memory_order_relaxed);
  s.preempt_signals_sent = sched.preempt_signals_sent.load(std::memory_order_relaxed);
  s.handoffs = sched.handoffs.load(std::memory_order_relaxed);
  s.procs = sched.nprocs;
  internal::RuntimeMutexLock lock(&sched.mu);
  s.threads = sched.mcount;
  return s;
}

Options GetOptions() {
  if (!sched.started.load(std::memory_order_acquire)) return Options{};
  return sched.opts;  // fixed once started
}

}  // namespace goro
