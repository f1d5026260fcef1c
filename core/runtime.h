// The runtime's internal types: G (goroutine), M (OS thread), P (processor),
// the global scheduler state, and the calls the rest of core/ makes into the
// scheduler. The design is explained in the essay at the top of core/proc.cc.
#ifndef GORO_CORE_RUNTIME_H_
#define GORO_CORE_RUNTIME_H_

#include <pthread.h>
#include <signal.h>
#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "arch/context.h"
#include "core/lock.h"
#include "core/note.h"
#include "core/runq.h"
#include "core/sanitizer.h"
#include "goro/runtime.h"

namespace goro::internal {

struct M;
struct P;
struct Timer;

// Storage for a runtime global that the program's own static initialisers may
// reach (goro may be used from a static constructor; docs/robustness.md) and
// that is never destroyed (Ms and sysmon run past static destructors).
//
// Define it with GORO_EARLY_INIT, and name the object through a reference
// bound to `value`: binding it is constant initialisation (an address), so
// the reference is valid before any code runs:
//
//   GORO_EARLY_INIT EarlyGlobal<Sched> sched_storage;
//   constinit Sched& sched = sched_storage.value;
//
// A dynamic initialiser of priority 101 constructs the object; the linker runs
// those before every initialiser of default priority in the same linked image
// (executable or shared library), whatever the link order. A global reached
// this way must not need another one's constructor to have run.
template <typename T>
union EarlyGlobal {
  EarlyGlobal() { ::new (static_cast<void*>(&value)) T(); }
  ~EarlyGlobal() {}  // never destroys `value`
  T value;
};
#define GORO_EARLY_INIT __attribute__((init_priority(101)))

// Monotonic nanoseconds (CLOCK_MONOTONIC); the runtime's clock.
int64_t Nanotime();
// Nanotime() d from now, d taken as 0 if negative and as 100 years at most:
// an infinite or centuries-long d would otherwise wrap into the past.
int64_t NanotimeIn(absl::Duration d);
// Nanotime() as of sysmon's last wake-up (or start-up, or the end of an idle
// spell: WakeSysmon): for bookkeeping that needs no precision (how long a
// goroutine has waited), at the cost of a load.
int64_t CoarseNanotime();

// A goroutine's status. The comments say who owns the G in each state.
enum class GStatus : uint32_t {
  // Allocated, not yet started or already finished and on a free list;
  // owned by the free list or by the spawner.
  kIdle,
  // On a run queue (or about to be put on one), not running; owned by the
  // queue. Its stack, if it has one, holds a SwitchFrame.
  kRunnable,
  // Running on an M (g->m); owns its stack; on no run queue.
  kRunning,
  // Parked; owned by whatever will Ready it (a channel, a semaphore, a
  // timer). Its stack holds a SwitchFrame.
  kWaiting,
  // Returned from its function; being recycled by g0.
  kDead,
  // In a marked blocking region (goro::Syscall): running on its M, which may
  // have lost its P to sysmon meanwhile; on no run queue.
  kSyscall,
};

// Why a goroutine is waiting; printed by dumps.
enum class WaitReason : uint8_t {
  kNone,
  kChanReceive,
  kChanSend,
  kChanReceiveNilChan,
  kChanSendNilChan,
  kSelect,
  kSelectNoCases,
  kSleep,
  kSyncMutexLock,
  kSyncRWMutexRLock,  // a reader waits for a writer to release the lock
  kSyncRWMutexLock,   // a writer waits for the readers to leave
  kWaitGroupWait,
  kCondVarWait,
  kSemacquire,
  kRunWait,
  kIORead,
  kIOWrite,
  kIOClose,  // an io operation waits for io::Close of its fd to finish
  // Existed when exit() began, and taken to run since: set aside until the
  // freeze ends, if it does (see FreezeAtExit in core/proc.cc).
  kFrozenAtExit,
};
const char* WaitReasonString(WaitReason r);

// The C++ runtime's per-thread exception state (libstdc++'s __cxa_eh_globals,
// whose layout has been stable since the Itanium C++ ABI: the chain of
// exceptions currently caught, and std::uncaught_exceptions()). It belongs
// to the goroutine, not the thread: a goroutine parked inside a catch block
// must find its exception again wherever it resumes, so g0 swaps it in and
// out around every run of a goroutine.
struct EhGlobals {
  void* caught_exceptions = nullptr;
  unsigned int uncaught_exceptions = 0;
};
EhGlobals* ThreadEhGlobals();  // this thread's (libstdc++ __cxa_get_globals)

// libstdc++'s std::call_once hands its callable to the pthread_once proxy in
// two thread-locals (std::__once_callable and std::__once_call): inline code
// in the program sets them just before pthread_once, and an inline lambda
// reads them just inside it. Both places are preemptible code, so a goroutine
// interrupted in between must find its values again on the thread where it
// resumes (or it calls through a null pointer, or another goroutine's
// callable). g0 swaps them with the exception state.
struct OnceGlobals {
  void* callable = nullptr;
  void (*call)() = nullptr;
};

// A goroutine stack: usable memory [lo, hi); its guard (kStackGuardSize) lies
// below lo.
struct Stack {
  uintptr_t lo = 0;
  uintptr_t hi = 0;
};

// Inaccessible address space directly below every goroutine stack
// (core/stack.cc). Stacks are mapped next to one another, so below a guard
// lies the top of another goroutine's stack: a frame that skips the whole
// guard (a large local array touched at its low end, in code built without
// -fstack-clash-protection) writes there instead of faulting. A fault
// anywhere in the guard is reported as a stack overflow (signals/signals.cc).
// 64 KiB costs address space and page tables only (about 6% more of each
// with the default 1 MiB stacks); it is a multiple of any page size.
inline constexpr size_t kStackGuardSize = 64 * 1024;

// Room below stackguard0 that runtime code may still use after a check.
inline constexpr uintptr_t kStackGuardMargin = 16 * 1024;
// Stored in stackguard0 to ask a goroutine to yield at its next check; larger
// than any stack pointer, so every check fails into the slow path.
inline constexpr uintptr_t kStackPreempt = ~uintptr_t{0} - 1313;

// Layout: the first cache line holds everything that spawning, running and
// exiting a goroutine touch; the second the closure and what a block
// touches; the rest is cold. With a million goroutines live every G is cold,
// so each line touched is a cache miss (see docs/scheduler.md).
struct alignas(64) G {
  // --- line 0: spawn, run, exit ---
  // Checked by Checkpoint() and runtime entries: sp < stackguard0 means the
  // stack is nearly exhausted or a preemption was requested. Written by the
  // owner and by sysmon; hence atomic.
  std::atomic<uintptr_t> stackguard0{0};
  arch::Context ctx;  // saved registers while not running
  Stack stack;        // {0,0} until first run: a G that has not started has no stack
  std::atomic<GStatus> status{GStatus::kIdle};
  // > 0 while the goroutine runs runtime code or a user NoPreemptScope: the
  // signal handler does not inject then. Runtime code (RuntimeScope, and the
  // runtime's other entries and switches) adds kInRuntime, a NoPreemptScope
  // (and goro's dl_iterate_phdr wrapper) adds 1, so that InRuntimeCode can
  // tell the two apart. Written only by the goroutine's own thread (and by
  // the handler, which runs on it).
  std::atomic<int32_t> preempt_off{0};
  int64_t id = 0;
  G* sched_link = nullptr;   // free lists, ChanClose's wake list, Sched::frozen_gs
  uint64_t preemptions = 0;  // times this goroutine was preempted, both ways

  // --- line 1: the closure (kClosureOps of its type, or null) ---
  alignas(16) unsigned char closure[kInlineClosureSize];
  const ClosureOps* closure_ops = nullptr;

  // --- line 2: blocking ---
  int64_t wait_since = 0;  // CoarseNanotime() when it parked
  // Select: set to 1 by the first channel operation that completes one of the
  // G's select cases; others that find it set skip the G. `param` carries the
  // winning waiter to the woken G. Both are set by Select before it parks.
  std::atomic<uint32_t> select_done{0};
  WaitReason wait_reason = WaitReason::kNone;
  // A plain thread's stand-in G (see ExternalG); parks on `note`.
  bool external = false;
  // A stand-in G made while its thread ends (after FreeExternalG in
  // core/proc.cc): never counted in Sched::external_awake. Set before the G
  // is used.
  bool external_uncounted = false;
  // The stand-in for a wait begun in a signal handler while this one waits
  // (ExternalG in core/proc.cc); made on first use, freed with this one.
  G* nested_external = nullptr;
  // Run's goroutine, counted as exited (P::exited) just before it lets Run
  // return, so that GetStats() after Run no longer counts it; its own exit
  // then does not count it again. The goroutine's own.
  bool exit_counted = false;
  // Made while the freeze at exit was on by a plain thread or by a goroutine
  // that runs during exit, or the goroutine that called exit(): it runs on
  // while the others are frozen (FreezeAtExit in core/proc.cc). Written by its creator
  // before the G is queued (or by itself); atomic because the exit handler
  // reads it for the goroutine it finds running on another thread.
  std::atomic<bool> runs_during_exit{false};
  // Marked blocking regions entered and not left (core/syscall.cc): only the
  // outermost one enters and leaves the syscall state. An outermost region
  // that kept the P counts kSyscallKeptP instead of 1. The goroutine's own.
  int32_t syscall_depth = 0;
  void* param = nullptr;
  EhGlobals eh;      // the exception state while not running
  OnceGlobals once;  // std::call_once's callable while not running

  // --- cold ---
  Note note;
  int32_t lock_count = 0;  // LockOSThread nesting
  M* locked_m = nullptr;   // LockOSThread: the M this goroutine is wired to
  G* alllink = nullptr;    // sched.allgs: every G ever made (they are never freed)
  // The trace's flow id of the unblock that made it runnable (core/trace.cc):
  // set by the unblocker, taken by the start that follows.
  uint64_t trace_flow = 0;
  [[no_unique_address]] FiberState san;  // sanitizer fiber state (core/sanitizer.h)
};
static_assert(offsetof(G, preemptions) < 64, "G's first cache line overflowed");

// What runtime code adds to G::preempt_off (a NoPreemptScope adds 1).
inline constexpr int32_t kInRuntime = 1 << 16;
// Whether a goroutine whose preempt_off is `preempt_off` is inside runtime
// code (not merely inside a NoPreemptScope).
inline bool InRuntimeCode(int32_t preempt_off) { return preempt_off >= kInRuntime; }
// Whether a NoPreemptScope, or goro's dl_iterate_phdr wrapper, is open on a
// goroutine whose preempt_off is `preempt_off`: no other goroutine may run
// on its thread, not even at a goro call.
inline bool HoldsOffPreemption(int32_t preempt_off) { return preempt_off % kInRuntime != 0; }
// G::syscall_depth of an outermost marked region that kept its P: entered in
// a signal handler of the program's that interrupted runtime code
// (core/syscall.cc).
inline constexpr int32_t kSyscallKeptP = 1 << 30;
static_assert(offsetof(G, closure) == 64, "G's closure should start the second line");

// What a goroutine asks g0 to do when it switches to it.
// kPreempt: like kYield, but to the global run queue (a spent time slice).
// kSyscallExit: back from a blocking region with no P to run on: to the
// global run queue, and the M goes idle.
enum class SwitchRequest : uint8_t { kNone, kPark, kYield, kPreempt, kExit, kSyscallExit };

struct M {
  arch::Context g0ctx;  // the scheduler context on the thread's own stack
  // The running goroutine, or nullptr on g0. Stored with release after the
  // P's schedtick, so that sysmon, reading it with acquire, sees the tick of
  // the slice it belongs to.
  G* curg = nullptr;
  P* p = nullptr;       // the attached P, or nullptr when idle
  P* next_p = nullptr;  // the P handed to this M by whoever woke it
  int64_t id = 0;
  bool spinning = false;  // looking for work; counted in Sched::nmspinning
  // In RunTimers, whose callbacks run under a spin lock: Ready only notes
  // that a P may need waking (wakep_deferred), and RunTimers wakes one after
  // the unlock, so that no thread starts (sched.mu, pthread_create) while
  // others spin on the timer lock.
  bool running_timers = false;
  bool wakep_deferred = false;
  Note park;              // sleeps here while idle
  M* sched_link = nullptr;  // idle list, guarded by sched.mu
  // Request from curg to g0, with its argument: for kPark, `commit` runs on
  // g0 after the G's context is saved; false resumes the G at once.
  SwitchRequest request = SwitchRequest::kNone;
  bool (*park_commit)(G*, void*) = nullptr;
  void* park_arg = nullptr;
  uint64_t rand_state = 0;
  // The preemption signal in flight to this M, at most one: a word of
  // namespace preempt_signal (below). Sysmon begins one before it decides
  // to send (kSending), marks it kSent once its rt_tgsigqueueinfo has
  // returned, and the handler acknowledges it (kIdle).
  std::atomic<uint32_t> signal_state{0};
  // Preemption signals the handler refused because the goroutine was in
  // library code (InLibraryCode): sysmon takes the P of one that stays there
  // (core/sysmon.cc, kUnansweredRevokeNs).
  std::atomic<uint32_t> library_refusals{0};
  int64_t signal_sent_at = 0;  // sysmon's: when it last sent one
  // Between saving one context and restoring the next: never inject then.
  std::atomic<bool> in_switch{false};
  // The goroutine running here changed the thread's signal mask (with
  // pthread_sigmask or sigprocmask: signals/sigmask.cc) to another than the
  // runtime's; g0 restores it when that goroutine leaves the thread. Only
  // this M's thread touches it.
  bool sigmask_changed = false;
  // While sigmask_changed: the mask (kernel form) that goroutine last set
  // outside any signal handler of the program's, which it runs with outside
  // them; any other is a handler's (PreemptCooperative).
  uint64_t own_sigmask_bits = 0;
  // The preemption handler declined to preempt here because the thread's
  // mask was not the runtime's: a signal handler of the program's, or a
  // change the wrappers did not see (siglongjmp, setcontext, the system
  // call). g0 checks the mask when the goroutine leaves the thread
  // (CheckMSignalMask). Only this M's thread touches it (the handler too).
  bool sigmask_refused = false;
  // The same for the thread's alternate signal stack (sigaltstack:
  // signals/altstack.cc): the goroutine running here set another than the
  // M's; g0 gives the M's back when that goroutine leaves the thread.
  bool altstack_changed = false;
  // LockOSThread: the goroutine wired to this M, and one handed to it to run.
  G* locked_g = nullptr;
  G* next_g = nullptr;
  // A goroutine that yielded by switching straight to curg (YieldNow's fast
  // path): curg queues it first thing when it resumes (OnResumeG), once its
  // registers are saved. Set before curg names the goroutine switched to, so
  // that the SIGSEGV handler knows whose stack the switch pushes onto.
  G* pending_yield = nullptr;
  EhGlobals* eh = nullptr;  // this thread's exception state
  // This thread's std::call_once thread-locals (OnceGlobals); null with a
  // C++ library that keeps none.
  void** once_callable = nullptr;
  void (**once_call)() = nullptr;
  pthread_t thread{};
  pid_t tid = 0;
  clockid_t cpu_clock = 0;  // this thread's CPU-time clock (sysmon reads it)
  // Set by TryRevokeP: this M lost its P while its goroutine was blocked in
  // an unmarked call. Sysmon watches it: if the goroutine runs on without
  // entering the runtime, it is signalled like any hog (and re-acquires a P).
  std::atomic<bool> revoked{false};
  void* altstack = nullptr;  // sigaltstack memory (MAltStack::mem)
  size_t altstack_size = 0;
  // sched.allm: every M whose thread has not ended. Written under sched.mu
  // (pushed by NewM, unlinked by RetireMOnG0); read without it, and an M
  // unlinked keeps its alllink, so a reader standing on it goes on.
  std::atomic<M*> alllink{nullptr};
  // Its goroutine exited wired (LockOSThread): the thread ends once its P is
  // handed on (RetireMOnG0). Only this M's thread touches it.
  bool retiring = false;
  [[no_unique_address]] FiberState g0san;  // g0's sanitizer fiber state
};

inline constexpr int kStackCacheSize = 64;
// Slots a P keeps for wait records (core/wait_record.h); it trades half with
// the shared list when it runs out or over.
inline constexpr int kWaitRecordCacheSize = 64;
inline constexpr int kGoidBatch = 16;

struct P {
  int32_t id = 0;
  // kIdle: on sched.pidle, no M. kRunning: owned by p->m.
  // kSyscall: p->m is in a marked blocking region; sysmon may take the P by
  // CASing kSyscall -> kIdle, and the M takes it back by CASing kSyscall ->
  // kRunning. kRevoking: sysmon is deciding whether p->m's goroutine is
  // blocked in an unmarked call (see TryRevokeP); it ends in kRunning again
  // or in kIdle with p->m changed. Written by the owner and sysmon's CASes.
  enum class Status : uint8_t { kIdle, kRunning, kSyscall, kRevoking };
  std::atomic<Status> status{Status::kIdle};
  // Incremented by the owner each time it enters a blocking region; sysmon
  // hands the P off only after seeing the same region twice.
  std::atomic<uint32_t> syscalltick{0};
  // The M in a blocking region on this P. Leaving the region and sysmon's
  // retake both CAS it from that M to null, and whoever succeeds decides who
  // has the P. (A CAS on `status` alone would be ABA-prone: after a retake the
  // P may be in kSyscall again for another M when the first one returns.)
  std::atomic<M*> syscall_owner{nullptr};
  std::atomic<M*> m{nullptr};  // written by the owner; read racily by sysmon
  P* link = nullptr;           // idle list, guarded by sched.mu
  // Incremented (by the owner) when a G starts a new time slice, after
  // slice_start_tsc is stamped; sysmon reads both to time slices.
  std::atomic<uint32_t> schedtick{0};
  std::atomic<uint64_t> slice_start_tsc{0};
  // The slice sysmon last asked to end (PreemptOne): kSliceAsked | its tick.
  // A goroutine that inherits that slice inherits the request (PrepareToRun).
  std::atomic<uint64_t> slice_asked{0};
  // The goroutine that last ran here was preempted: the slice is spent, so
  // the next one starts a new slice even if it comes from runnext.
  bool slice_spent = false;
  // The global queue's 1-in-61 turn is due but was deferred because a timer
  // had just readied a goroutine here; at most once (global_turn_deferred),
  // since a ticker may fire at every schedule.
  bool global_turn_due = false;
  bool global_turn_deferred = false;
  RunQueue runq;

  // Timers whose goroutines last ran here: a binary min-heap by `when`.
  SpinLock timers_lock;
  std::vector<Timer*> timers;  // guarded by timers_lock
  // The earliest `when` in the heap, 0 if empty; read without the lock.
  std::atomic<int64_t> timer0_when{0};

  // Caches used only by the owner.
  Stack stack_cache[kStackCacheSize];
  int stack_cache_n = 0;
  // The fewest stacks the cache held since its last trim: the bottom ones
  // that many sat unused all along (StackTrimCache).
  int stack_cache_low = 0;
  // Set by sysmon at each scavenge while the P is not idle: its owner trims
  // the cache at its next schedule (FindRunnable), as sysmon cannot.
  std::atomic<bool> stack_cache_trim{false};
  // Free wait-record slots (core/wait_record.h). WaitRecordsIdle reads the
  // count racily.
  void* wait_records[kWaitRecordCacheSize];
  int wait_records_n = 0;
  G* gfree = nullptr;
  int gfree_n = 0;
  int64_t goid_next = 0, goid_end = 0;
  // Counters written by the owner, summed by GetStats.
  std::atomic<uint64_t> created{0};
  std::atomic<uint64_t> exited{0};
  std::atomic<uint64_t> steals{0};
};

// How soon sysmon looks again after asking a goroutine to yield.
inline constexpr int64_t kSysmonRecheckNs = 50 * 1000;
// P::slice_asked's mark that the tick beside it was asked to end.
inline constexpr uint64_t kSliceAsked = uint64_t{1} << 32;

// Whether a P's earliest timer (its timer0_when, 0 for none) is due at `now`
// or within one sysmon tick (kSysmonRecheckNs) of it: a goroutine waits to
// run behind it. Sysmon and HandoffP count it as work for a P whose M blocks
// (core/sysmon.cc).
inline bool TimerDueSoon(int64_t timer0_when, int64_t now) {
  return timer0_when != 0 && timer0_when - now <= kSysmonRecheckNs;
}

// Sched::sysmon_wake_at once someone has woken sysmon from its current
// sleep (below any time it could sleep until).
inline constexpr int64_t kSysmonWokenEarly = 0;
// A marked region entered with goroutines waiting wakes sysmon unless it
// looks within this anyway (WakeSysmonForSyscall).
inline constexpr int64_t kSyscallLookSoonNs = 1000 * 1000;

// Slices at least this long are timed by sysmon's observation, shorter ones
// by a TSC stamp (core/sysmon.cc).
inline constexpr int64_t kObservedSliceMinNs = 4 * 1000 * 1000;
// In observation mode sysmon looks at least every slice/kObservePerSlice
// (but no more often than every kObserveMinNs, and at least every 10 ms)
// while any P runs.
inline constexpr int64_t kObservePerSlice = 8;
inline constexpr int64_t kObserveMinNs = 250 * 1000;

// An entry of the global run queue. A goroutine put there because it was
// preempted carries the id of the P it left: a P takes such a goroutine
// alone, never in a batch into its ring. (In the entry, not the G: reading
// each G's flag made taking a batch a cache miss per goroutine under
// sched.mu.)
struct GlobalRunqEntry {
  G* g;
  int32_t spent_on;  // the P it was preempted from, or kNotSpent
  static constexpr int32_t kNotSpent = -1;
};

struct Sched {
  RuntimeMutex mu;
  // Global run queue: a ring that grows by doubling. (An intrusive list
  // through the Gs would make taking a batch a chain of dependent cache
  // misses under the lock.)
  std::vector<GlobalRunqEntry> runq ABSL_GUARDED_BY(mu) = std::vector<GlobalRunqEntry>(1024);
  size_t runq_head ABSL_GUARDED_BY(mu) = 0;  // index of the oldest
  std::atomic<int32_t> runq_size{0};  // written under mu; read racily as a hint
  // Idle Ms and Ps.
  M* midle ABSL_GUARDED_BY(mu) = nullptr;
  int nmidle ABSL_GUARDED_BY(mu) = 0;
  int mcount ABSL_GUARDED_BY(mu) = 0;
  P* pidle ABSL_GUARDED_BY(mu) = nullptr;
  std::atomic<int32_t> npidle{0};  // written under mu
  std::atomic<int32_t> nmspinning{0};
  // The M sleeping until the next timer (not on midle), and when it wakes.
  M* timer_sleeper ABSL_GUARDED_BY(mu) = nullptr;
  bool sleeper_polls ABSL_GUARDED_BY(mu) = false;  // it waits in epoll, not on its note
  std::atomic<int64_t> poll_until{0};  // when it wakes; INT64_MAX: only for I/O
  // Threads blocked in Run() waiting for their goroutine; deadlock is
  // reported only while this is positive.
  int run_waiters ABSL_GUARDED_BY(mu) = 0;
  // Of those, the ones whose Run began once exit() had (`exiting`): the only
  // ones a deadlock is reported for from then on (CheckDeadLocked).
  int exit_run_waiters ABSL_GUARDED_BY(mu) = 0;
  // The goroutines set aside while `frozen` (FreezeOnG0 in core/proc.cc),
  // linked through G::sched_link; made runnable when the freeze ends.
  G* frozen_gs ABSL_GUARDED_BY(mu) = nullptr;
  // Plain threads that have used goro and are not parked in it (a thread
  // sleeping in goro::SleepFor counts as awake). Any of them may yet wake a
  // goroutine, so no deadlock is reported while this is positive. Threads
  // that never touched goro cannot be known; see docs/scheduler.md.
  std::atomic<int> external_awake{0};
  // Free Gs shared between Ps.
  SpinLock gfree_lock;
  // Written under gfree_lock; GfreeGet peeks at it without (relaxed).
  std::atomic<G*> gfree{nullptr};
  int gfree_n = 0;     // guarded by gfree_lock

  std::vector<P*> allp;  // fixed after start
  int nprocs = 0;
  Options opts;  // as resolved at start (goro::GetOptions); fixed after start
  Options start_opts;  // as passed to the call that started it; fixed after start
  std::atomic<bool> started{false};
  std::atomic<int64_t> next_goid{1};
  std::atomic<int64_t> next_mid{1};
  std::atomic<uint64_t> created_off_p{0};   // goroutines made by plain threads
  // Preemption counters (Stats).
  std::atomic<uint64_t> async_preemptions{0};
  std::atomic<uint64_t> cooperative_preemptions{0};
  std::atomic<uint64_t> preempt_signals_sent{0};
  std::atomic<uint64_t> handoffs{0};
  // Ps sysmon took from goroutines that left a preemption request unanswered
  // for a whole further slice (core/sysmon.cc). Not in Stats.
  std::atomic<uint64_t> unanswered_revokes{0};
  // Ms asleep while wired to a blocked goroutine (LockOSThread).
  int nmlocked ABSL_GUARDED_BY(mu) = 0;
  // The network poller (core/netpoll.cc). Goroutines parked on I/O count as
  // something that can wake, like timers.
  std::atomic<int32_t> netpoll_waiters{0};
  std::atomic<int64_t> last_poll{0};  // Nanotime of the last netpoll; 0: an M is blocked in it
  // When sysmon is to check for deadlock (0: not asked): set when the last
  // awake plain thread exits (see FreeExternalG in core/proc.cc), and by a
  // check that found the program stuck, to report if it still is then.
  std::atomic<int64_t> deadlock_check_at{0};
  // Sysmon sleeps on this; sysmon_deep says it sleeps until work appears.
  Note sysmon_note;
  std::atomic<bool> sysmon_deep{false};
  // When sysmon looks next, if it sleeps with a deadline (else INT64_MAX):
  // a timer added for earlier, with no M left to sleep for it, wakes it, and
  // so does a marked region entered with goroutines waiting. The first of
  // the latter to CAS it to kSysmonWokenEarly wakes sysmon; the rest find
  // that. Sysmon stores it before it sleeps, INT64_MAX when it wakes.
  std::atomic<int64_t> sysmon_wake_at{INT64_MAX};
  // Every G ever allocated, for dumps: pushed by CAS, never removed (Gs are
  // recycled, not freed).
  std::atomic<G*> allgs{nullptr};
  // The Ms whose threads have not ended, linked through M::alllink. M
  // records are never freed, not even a retired one's (RetireMOnG0).
  std::atomic<M*> allm{nullptr};
  int64_t start_time = 0;  // Nanotime when the runtime started
  // GORODEBUG=schedtrace/scheddetail: sysmon prints a line every
  // schedtrace_ns (0: never), with per-P/M/G lines if scheddetail.
  int64_t schedtrace_ns = 0;
  bool scheddetail = false;
  std::atomic<int64_t> coarse_now{0};  // written by sysmon (see CoarseNanotime)
  int64_t time_slice_ns = 0;
  // Whether Execute stamps each new slice with the TSC (short slices only;
  // see core/sysmon.cc for why long ones are timed by observation).
  bool stamp_slices = false;
  // The goroutines made before exit() began are frozen (FreezeAtExit in
  // core/proc.cc set it): an M takes none of them to run. Cleared for good,
  // under mu, when a plain thread first waits in goro during exit, or when
  // sysmon sees the thread running exit() wait for a while
  // (ThawAfterExitFreeze). Read at every schedule and spawn, so it starts a
  // cache line that holds only fields written at most once after start-up
  // (none that sysmon writes).
  alignas(64) std::atomic<bool> frozen{false};
  // exit() has begun (FreezeAtExit set it): from then on only a Run begun
  // since is reported deadlocked (CheckDeadLocked). Never cleared.
  std::atomic<bool> exiting{false};
  // The thread running exit(), which sysmon watches while the freeze lasts
  // (WatchExitingThread in core/sysmon.cc): its CPU clock, and its kernel
  // thread id, stored last (release) by FreezeAtExit once its own wait is
  // over; 0 until then, and in a process that never calls exit().
  clockid_t exit_cpu_clock = 0;
  std::atomic<pid_t> exit_tid{0};
  bool async_preemption = true;
  int preempt_signal = 0;
};

// Never destroyed: Ms and sysmon run until the process ends, past static
// destructors. Constructed before the program's own static initialisers run
// (an EarlyGlobal).
extern Sched& sched;

// The M of the calling thread, or nullptr on a plain thread.
//
// A goroutine may resume on another thread after any switch, and a compiler
// may keep a thread-local variable's address in a register for a whole
// function, so the runtime never names its thread-local M directly. It reads
// the thread pointer with an asm volatile (re-executed at every call, never
// cached) and adds the variable's offset from it, which is the same on every
// thread because the variable uses the initial-exec TLS model.
// 0 until computed (at static initialisation, and again at start-up): then no
// thread can have an M yet.
extern "C" intptr_t goro_tls_m_offset;
inline M* CurrentM() {
  if (goro_tls_m_offset == 0) return nullptr;
  uintptr_t tp;
  asm volatile("movq %%fs:0, %0" : "=r"(tp));
  return *reinterpret_cast<M**>(tp + goro_tls_m_offset);
}
// Computes the offsets of the thread-local M and G; called at start-up.
void InitCurrentM();

// The running goroutine, or nullptr on g0 and on plain threads.
//
// This is the only safe way for code that may be preempted to find its own
// goroutine: it is ONE instruction (a load relative to %fs), so a signal
// cannot split it. Reading CurrentM() and then m->curg can be split: a
// preemption in between moves the goroutine to another thread, and it reads
// the old thread's current goroutine - someone else. Read the M only once
// preemption is off (inside a RuntimeScope, or on g0).
extern "C" intptr_t goro_tls_g_offset;
inline G* CurrentGoroutine() {
  if (goro_tls_g_offset == 0) return nullptr;
  G* g;
  asm volatile("movq %%fs:(%1), %0" : "=r"(g) : "r"(goro_tls_g_offset));
  return g;
}
// The running goroutine, or the calling plain thread's stand-in G (external).
G* CurrentG();
// Counts a plain thread as awake from its first goro call to its exit (see
// Sched::external_awake), so that a goroutine waiting for it is not taken for
// deadlocked. Every public entry calls it (through EnterFastPath or a
// RuntimeScope) before it acts.
void NoteThreadSlow();
[[noreturn]] void FatalGoroCallInMarkedRegion();
// True on a goroutine (not on g0, not on a plain thread).
bool OnGoroutine();
// A goroutine's function has returned: fatal if it left a marked region
// open (goro::SyscallScope).
void FatalIfEndingInsideAMarkedRegion(G* g);

// Starts the runtime if it has not started, with `opts` (and the environment).
// In a child forked without exec from a process whose runtime had started,
// a fatal error: the child has none of the runtime's threads.
void EnsureStarted(const Options& opts);
// Set in a child of fork() of a process whose runtime has started (a
// pthread_atfork child handler installed by EnsureStarted), where no
// scheduler runs and the runtime's threads do not exist. Read by signal
// handlers. posix_spawn's and system()'s children are made without the
// atfork handlers, but keep signals blocked until exec.
extern volatile sig_atomic_t in_forked_child;

// Parks the current goroutine (or plain thread): after its context is saved,
// commit(g, arg) runs on g0; if it returns false the goroutine resumes at once.
// Whoever will wake it calls Ready exactly once. Used with a lock held that
// `commit` releases, so a waker that takes the lock sees a fully parked G.
void Park(WaitReason reason, bool (*commit)(G*, void*), void* arg);
// Makes a waiting goroutine runnable: into the current P's runnext, or the
// global run queue off a P; for a plain thread's stand-in, wakes the thread.
void Ready(G* g);
// Starts an M spinning to look for work if a P is idle and none spins.
void WakeP();
// Tests: called by WakeP just before it starts an M.
extern std::atomic<void (*)()> wakep_start_hook;
// Tests: called on the goroutine a direct yield switched to, just before it
// queues the yielder (OnResumeG).
extern std::atomic<void (*)()> yield_queue_hook;
// Puts the current goroutine at the tail of its P's run queue and schedules.
void YieldNow();

// The end of a RuntimeScope or InRuntimeScope on g (null: off a goroutine):
// lowers preempt_off by kInRuntime, after the scope's work.
inline void LeaveRuntimeCode(G* g) {
  if (g == nullptr) return;
  // The scope's writes to its P (the run queue, the caches) reach whoever
  // sysmon hands the P to if it revokes it in a blocking call that follows;
  // membarrier orders them, which TSan does not see. TryRevokeP's load of
  // preempt_off acquires what this releases.
  SanRelease(&g->preempt_off);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  g->preempt_off.store(g->preempt_off.load(std::memory_order_relaxed) - kInRuntime, std::memory_order_relaxed);
}

// Marks runtime code running on a goroutine: async preemption is deferred
// inside (so a goroutine never parks holding a runtime lock or halfway through
// its P's queues), and a pending preemption request is honoured on entry: this
// is the cooperative half of preemption. Off a goroutine it does nothing.
class RuntimeScope {
 public:
  RuntimeScope() { Enter(true); }
  // For the slow path of a release (an unlock, the Add that ends a
  // WaitGroup's wait): the same, but a pending request is left for the next
  // safe point (an unlock's SafePoint, after the release), so that the
  // goroutine is not set aside still holding what it is giving up, or with
  // its waiters not yet woken.
  struct Releasing {};
  explicit RuntimeScope(Releasing) { Enter(false); }
  ~RuntimeScope() { LeaveRuntimeCode(g_); }
  RuntimeScope(const RuntimeScope&) = delete;
  RuntimeScope& operator=(const RuntimeScope&) = delete;

 private:
  void Enter(bool safe_point);
  G* g_;
};

// Marks runtime code that must not make RuntimeScope's checks (which may
// switch goroutines, or find a P): raises preempt_off by kInRuntime, and
// nothing else. Off a goroutine it does nothing.
class InRuntimeScope {
 public:
  InRuntimeScope();
  ~InRuntimeScope() { LeaveRuntimeCode(g_); }
  InRuntimeScope(const InRuntimeScope&) = delete;
  InRuntimeScope& operator=(const InRuntimeScope&) = delete;

 private:
  G* g_;
};

// Yields the current goroutine to the global run queue because its time
// slice is over (counted as a cooperative preemption).
void PreemptCooperative();
// What a RuntimeScope checks first, for a public entry whose fast path takes
// none - one that touches only its own object's atomics (no P, no runtime
// lock, no park): a Mutex's, an RWMutex's, a WaitGroup's. A plain thread is
// counted (NoteThreadSlow); on a goroutine inside a marked blocking region
// (goro::Syscall, SyscallScope) it is RuntimeScope's fatal error, so that an
// uncontended Mutex is not misused silently until the day it is contended.
// Returns the goroutine (null off one), for SafePoint.
inline G* NoteEntry() {
  G* g = CurrentGoroutine();
  if (g == nullptr) {
    if (CurrentM() == nullptr) NoteThreadSlow();  // a plain thread, not g0
  } else if (g->syscall_depth != 0) {
    FatalGoroCallInMarkedRegion();
  }
  return g;
}
// The safe point of such an entry, as every runtime entry is one (DESIGN.md):
// g, asked to yield, yields here. Otherwise a loop whose only calls are
// uncontended locks would keep its P, with async preemption off, for as long
// as it ran, and so would the goroutines queued behind it and the timers of
// its P. A lock takes it before it acquires, an unlock after it releases
// (touching only g, as the lock may be gone by then), so that a goroutine is
// not set aside holding a lock it was about to give up. Two loads of g's own
// fields when nothing is pending.
inline void SafePoint(G* g) {
  if (g != nullptr && g->stackguard0.load(std::memory_order_relaxed) == kStackPreempt &&
      g->preempt_off.load(std::memory_order_relaxed) == 0) [[unlikely]] {
    PreemptCooperative();
  }
}
inline void EnterFastPath() { SafePoint(NoteEntry()); }
// Called by goroutine g on entering the runtime, with preempt_off already
// raised: if sysmon took this M's P while g was blocked in an unmarked call,
// takes another P or waits in the global queue. Cheap when the P is ours.
inline void EnsurePAfterEntry(G* g);
void ReacquireP(M* m, G* g);
// Changes p's status on behalf of its owner (p->m), never over kRevoking:
// sysmon's decision takes one membarrier, so this waits it out.
void SetPStatusByOwner(P* p, P::Status s);
// Sysmon: takes p from its M if the M's goroutine is still in user code on
// the slice `tick` (it is blocked in an unmarked call); true if it did.
bool TryRevokeP(P* p, M* m, G* g, uint32_t tick);
// Whether unmarked blocking calls can be detected (membarrier available).
bool RevocationAvailable();
// Hands p to another M (when there is work for it, or nobody spins or
// idles to find any) or puts it on the idle list. Returns true if it gave p
// to an M (started or woken): what Stats::handoffs counts.
bool HandoffP(P* p);
// Wakes sysmon if it sleeps until work appears.
void WakeSysmon();
// For a marked region entered with goroutines waiting to run: wakes sysmon
// if its next look is more than kSyscallLookSoonNs away, at most once per
// sleep of sysmon's (core/sysmon.cc).
void WakeSysmonForSyscall();
// Wakes sysmon whatever it sleeps for, so that it asks again soon: the
// preemption handler could not take a request. Async-signal-safe (a store
// and a futex wake).
void WakeSysmonToRetry();
// For a timer added (due at `when`) that no M sleeps for and no idle P can
// run: wakes sysmon if it would sleep past it while some P blocks in a
// system call - the P sysmon may hand to an M that steals the timer.
void WakeSysmonForTimer(int64_t when);
// Reports Go's deadlock and ends the program if nothing can ever run again
// (takes sched.mu; for sysmon's deferred check).
void CheckDeadlock();
// Ends the freeze at exit for good, if it is on: the goroutines set aside
// run again (core/proc.cc). Takes sched.mu.
void ThawAfterExitFreeze();
// Starts the sysmon thread (core/sysmon.cc).
void StartSysmon();
// A detached thread that starts with every signal blocked (an M until it has
// its alternate stack; the template thread and sysmon for good). Returns
// pthread_create's error.
int CreateThreadWithSignalsBlocked(pthread_t* thread, void* (*start)(void*), void* arg);
// Asks the goroutine running on p to yield, if p is still in the slice
// numbered `tick`; true if one was asked. cpu_ns/cpu_wall: a reading of its
// thread's CPU clock taken moments ago, if sysmon has one (-1: none).
bool PreemptOne(P* p, uint32_t tick, int64_t cpu_ns = -1, int64_t cpu_wall = 0);
// Whether async preemption may stop code at pc (core/preempt.cc).
bool PreemptiblePc(uintptr_t pc);
// Whether pc is outside the program's own code (its executable segments and
// registered ranges): in a shared library, the vDSO or the dynamic loader.
bool InLibraryCode(uintptr_t pc);
// Fills the table PreemptiblePc reads (once; core/preempt.cc). Returns the
// runtime libraries linked into the main executable ("libstdc++ and libc"),
// which leave no code that may be interrupted, unless the program registered
// its own code first (then ""); "" when they are shared objects.
std::string InitPreemptibleRanges();

// A uniformly distributed random number for the calling thread.
uint32_t FastRand();
uint32_t FastRandN(uint32_t n);

// Timers (core/timer.cc). A Timer calls f(t) on some M with a P, holding the
// heap's lock, at or after `when`. f must not block or park.
struct Timer {
  int64_t when = 0;
  void (*f)(Timer*) = nullptr;
  void* arg = nullptr;
  P* p = nullptr;       // whose heap holds it
  int32_t index = -1;   // position in p->timers, -1 when not in a heap
  // > 0: a ticker's, in ns; once f has run, RunTimers puts it back on the
  // same heap at the next multiple of `period` after the time it was due
  // that lies in the future (ticks missed while late are skipped).
  int64_t period = 0;
};
void AddTimer(Timer* t);
// AddTimer without telling anyone that an earlier timer exists; returns the
// time the caller must then pass to WakeForTimer, after it has released any
// runtime lock it holds (which WakeForTimer's sched.mu and wake-ups must not
// be taken under).
int64_t AddTimerQuietly(Timer* t);
// Removes t if it has not fired. On return t's callback is not running and
// will not run. Returns true if it was removed before firing.
bool DelTimer(Timer* t);
// If t is pending (in a heap), sets it to fire at `when` instead and returns
// true; in one hold of its heap's lock when the caller runs on that heap's P
// or on none, else by DelTimer and AddTimer onto the caller's P. Returns
// false, changing nothing, if t has fired or was deleted; on return its
// callback is then not running and will not run, as after DelTimer. The
// caller serialises it with DelTimer and AddTimer of the same t.
bool ResetTimer(Timer* t, int64_t when);
// Runs p's expired timers; returns the earliest remaining `when` (0: none).
// If `fired` is given, adds the number of timers run to it.
int64_t RunTimers(P* p, int64_t now, int* fired = nullptr);
// The earliest timer over all Ps (0: none).
int64_t EarliestTimer();
// How many timers p's heap holds (takes its lock).
size_t TimerCount(P* p);
// Tells the scheduler a timer at `when` was added (wakes a sleeping M if needed).
void WakeForTimer(int64_t when);

// Switches from goroutine g to its M's g0 with a request; returns when g is
// resumed, possibly on another M.
void SwitchToG0(M* m, G* g, SwitchRequest req);
// Takes an idle P for m if there is one.
bool TryAcquireIdleP(M* m);
// Gets m a P back after a blocking call lost it, without moving g to another
// thread: an idle P if there is one, else g waits its turn in the global
// queue while wired to m, and whoever picks it up hands m its P (the
// LockOSThread hand-off). Not moving keeps thread-local state - errno, whose
// address the compiler may have computed before the call - valid.
void ReacquirePOnSameThread(M* m, G* g);
// If an M other than `except` holds p in a blocking region, takes p from it
// (the CAS on syscall_owner decides; the owner finds the P gone when it
// leaves its region) and leaves it kIdle with no M, for the caller to hand
// on or acquire; false if p is not held so. Sysmon's retake, and
// TakePFromBlockedM.
bool RetakePFromSyscall(P* p, M* except);
// Takes p, which another M holds in a blocking region, for m and its
// goroutine g, which carries on in a new slice; false if p is not held so.
bool TakePFromBlockedM(M* m, G* g, P* p);
// Writes / reads errno through a fresh call: errno's address is per thread,
// and a goroutine may have moved since a function computed it (GCC computes
// it once per function: __errno_location is declared const). A function that
// may park between a system call and reading its errno - every goro::io
// loop - reads it with Errno().
void SetErrno(int v);
int Errno();

// Blocking regions (core/syscall.cc). from_runtime: the runtime's own
// region (RuntimeSyscall), entered from runtime code at a point where it
// holds nothing of its P's; the program's (SyscallScope) keeps the P when
// it finds the goroutine inside runtime code.
void EnterSyscall(bool from_runtime);
void ExitSyscall();

// Runs fn() as the runtime's own marked blocking region, from inside runtime
// code (a RuntimeScope), and returns its result: goro::Syscall's
// counterpart for goro::io. Off a goroutine it just runs fn(). errno as left
// by fn is preserved.
template <typename F>
auto RuntimeSyscall(F&& fn) -> decltype(std::forward<F>(fn)()) {
  struct Region {
    Region() : active(CurrentGoroutine() != nullptr) {
      if (active) EnterSyscall(/*from_runtime=*/true);
    }
    ~Region() {
      if (active) ExitSyscall();
    }
    bool active;
  } region;
  return std::forward<F>(fn)();
}

// The network poller (core/netpoll.cc). NetpollReady collects the goroutines
// whose I/O became ready, waiting up to `timeout_ns` (0: not at all, <0:
// forever) for some, into a list linked through G::sched_link.
bool NetpollInited();
// Notes which files fds 0 to 2 hold, when the runtime starts: goro::io does
// not make those non-blocking (PollDesc::kBlockingStream).
void NoteStandardStreams();
G* Netpoll(int64_t timeout_ns);
// Interrupts an M blocked in Netpoll.
void NetpollBreak();
// Called when a plain thread waits on I/O: gets an M into epoll_wait if none
// is there or on its way (core/netpoll.cc, "Who calls epoll_wait").
void WakeNetpoller();
// Makes the goroutines of a Netpoll list runnable: onto the current P's run
// queue if the M has one, else the global queue; wakes Ps as needed.
void InjectGList(G* list);

// Writes one line per goroutine that exists (id, state, wait reason, how long
// it has waited) to fd, each followed by its backtrace if it is not running
// on another thread. Reads racily and takes no lock, so that it can run in a
// fatal error (core/dump.cc).
void DumpGoroutinesToFd(int fd);
void InstallQuitHandler();
// For dumps and traces: a goroutine status as a word ("running"), and the M
// whose curg g is (read racily; nullptr if none).
const char* GStatusString(GStatus s);
M* MRunning(const G* g);
// Writes "goroutine N [running]:" (or the thread's name) and the calling
// thread's backtrace to stderr: from uctx, a signal handler's context, or
// from the caller if uctx is null. N is g, or the current goroutine if g is
// null. For fatal errors.
void WriteTraceback(void* uctx, const G* g = nullptr);
// Loads libunwind (dlopen) now rather than at the first dump or fatal error.
void PreloadUnwinder();

// GORODEBUG=schedtrace: one line of scheduler state (and with `detail` one
// per P, M and goroutine) to stderr; sysmon calls it (core/schedtrace.cc).
void PrintSchedTrace(int64_t now, bool detail);

// Stacks (core/stack.cc).
Stack StackAlloc(P* p, int64_t goid);  // goid: named if no stack can be had
void StackFree(P* p, Stack s);
// Gives back the pages of stacks that sat unused since the last call, above a
// high-water mark, and unmaps a surplus of whole reservations none of whose
// stacks is in use (sysmon calls it every second). With `all`, every idle
// stack above the mark (sysmon, before it sleeps because every P is idle).
// Does a bounded batch; returns true if more remains.
bool StackScavenge(bool all = false);
// Moves the stack caches of the Ps on the idle list to the global pool,
// where StackScavenge gives their pages back once they stay unused (sysmon,
// before each scavenge). Takes sched.mu.
void StackFlushIdleCaches();
// By p's owner, asked by sysmon (P::stack_cache_trim): moves the stacks of
// p's cache that sat unused since the last trim to the global pool, so that
// a P that never goes idle does not keep up to a cache-full of stacks with
// their pages for ever.
void StackTrimCache(P* p);
// Stacks reserved and neither cached nor pooled: those of goroutines that
// have run and not exited, or leaked. For leak tests; exact only while the
// runtime is quiet (and sysmon is not between the two halves of a
// StackScavenge, when up to one batch counts as in use).
int64_t StacksInUse();
// G records allocated and not on a free list: live goroutines', or leaked.
// For leak tests; exact only while the runtime is quiet.
int64_t GoroutineRecordsInUse();
// Sets the size of every stack from Options::stack_size; returns it, rounded
// up to whole pages.
size_t StackInitGlobal(size_t stack_size);

// Signals (signals/signals.cc).
void InstallSignalHandlers();
void InstallPreemptHandler(int sig);
// Whether the preemption signal's handler is still goro's (the program may
// have installed its own since).
bool PreemptHandlerInstalled();
// io::Write sets this around write(2) on a non-socket: a SIGPIPE raised then
// is ignored (the write returns EPIPE), as Go does; elsewhere SIGPIPE keeps
// its default action.
extern __attribute__((tls_model("initial-exec"))) thread_local bool tls_in_io_write;
void MInitSignals(M* m);  // on a new M's thread: sigaltstack
// An alternate signal stack made for an M (MInitSignals). None is ever
// unmapped: the stack of an M whose thread ends waits on a free list for the
// next M (ReleaseMAltStack), so an address that was once an M's alternate
// stack stays the runtime's for the rest of the process. The sigaltstack
// interposer relies on that (signals/altstack.cc): a goroutine that sets
// one of them - another M's, or that of an M whose thread has ended - gets
// its own M's instead, never memory unmapped since or mapped again for
// something else.
struct MAltStack {
  void* mem = nullptr;  // above its guard page
  size_t size = 0;
  // On m_altstacks: set before the record is published there, then fixed.
  MAltStack* next = nullptr;
  // On the free list; written and read under its lock (signals/signals.cc).
  MAltStack* free_link = nullptr;
};
// Every alternate stack made for an M, in use or free, newest first. Pushed
// by MInitSignals (release) and never unlinked: read without a lock.
extern std::atomic<MAltStack*> m_altstacks;
// On the thread of an M that retired, once the thread's alternate stack is
// disabled for good (ExitMThread): puts the M's on the free list, its pages
// given back.
void ReleaseMAltStack(M* m);
// The signal mask every M runs with: that of the thread that started the
// runtime (what a thread it created would inherit), less the signals the
// runtime must receive (the preemption signal, synchronous faults). Set once
// at start-up, before the first M; m_sigmask_bits is its kernel form for the
// preemption handler.
extern sigset_t m_sigmask;
extern uint64_t m_sigmask_bits;
void InitMSignalMask(int preempt_signal);  // preempt_signal 0: async preemption off
// On m's g0: gives the thread the runtime's mask back, after a goroutine
// that changed it left (signals/sigmask.cc).
void RestoreMSignalMask(M* m);
// On m's g0, after the preemption handler declined because of the mask
// (M::sigmask_refused): RestoreMSignalMask if the thread's mask is not the
// runtime's.
void CheckMSignalMask(M* m);
// Test seam (tests/preempt_safety_test.cc): when set, the pthread_sigmask and
// sigprocmask wrappers call it on a goroutine with the M whose
// sigmask_changed they are about to write, before they read the thread's
// mask. Unset outside that test.
extern std::atomic<void (*)(M*)> sigmask_note_hook;
// On m's g0: gives the thread the M's alternate signal stack back, after a
// goroutine that set another left (signals/altstack.cc).
void RestoreMAltStack(M* m);
// The kernel's form of `mask`: 64 bits on x86-64 (the rest of glibc's
// sigset_t is padding).
inline uint64_t MaskBits(const sigset_t& mask) {
  uint64_t bits;
  memcpy(&bits, &mask, sizeof bits);
  return bits;
}
// Whether `mask` is the one every M runs with. A thread whose mask differs
// runs inside a signal handler of the program's (which blocks at least its
// own signal), or changed its mask itself.
inline bool IsMSignalMask(const sigset_t& mask) { return MaskBits(mask) == m_sigmask_bits; }
// IsMSignalMask of the calling thread's mask, now (a system call).
bool ThreadHasMSignalMask();
// Whether `mask` (kernel form) is a signal handler's of the program's on a
// goroutine whose own mask, outside handlers, is `own`: it blocks all that
// `own` does and more (at least the handler's signal). A handler installed
// with SA_NODEFER and an empty sa_mask, or one that unblocks its signal,
// cannot be told this way.
inline bool IsHandlersMask(uint64_t mask, uint64_t own) { return mask != own && (mask & own) == own; }
// On m's goroutine: IsHandlersMask of the calling thread's mask, now, and
// the goroutine's own - the one it set itself (M::own_sigmask_bits), or
// else the runtime's (a system call; true if it fails).
bool ThreadHasHandlersSignalMask(const M* m);

// M::signal_state: a generation, bumped by each signal begun, times four,
// plus the state.
namespace preempt_signal {
inline constexpr uint32_t kIdle = 0;
inline constexpr uint32_t kSending = 1;  // sysmon decided; perhaps not yet sent
inline constexpr uint32_t kSent = 2;     // sent: queued on the thread, or merged
inline uint32_t State(uint32_t word) { return word & 3; }
inline uint32_t With(uint32_t word, uint32_t state) { return (word & ~3u) | state; }
inline bool SameGeneration(uint32_t a, uint32_t b) { return (a >> 2) == (b >> 2); }
// Sysmon sends the signal with rt_tgsigqueueinfo, si_code SI_QUEUE, and
// si_value = kTag | the word it began: the handler tells it from anyone
// else's SIGURG, and a late one of an earlier generation from the current.
inline constexpr uint64_t kTag = uint64_t{0x676f726f} << 32;  // "goro"
}  // namespace preempt_signal

// On m's own thread, with the preemption signal unblocked: if a signal of
// goro's is marked sent but was never acknowledged, it is gone - merged into
// another of the same number that was pending on the thread (standard
// signals do not queue), and delivered as that one before sysmon marked it
// sent. Any system call delivers a pending unblocked signal on its way out,
// so one is made, and a signal still marked sent afterwards is forgotten.
void ForgetLostPreemptSignal(M* m);

// EnsurePAfterEntry, except in a signal handler of the program's (a signal
// mask other than the M's), which must not wait for a P: for
// dl_iterate_phdr's wrapper (core/preempt.cc).
void EnsurePAfterEntryOutsideHandlers(G* g);

// Whether m still holds its P (sysmon did not take it while m's goroutine
// blocked in an unmarked call).
inline bool HoldsItsP(M* m) {
  P* p = m->p;
  return p != nullptr && p->status.load(std::memory_order_relaxed) == P::Status::kRunning &&
         p->m.load(std::memory_order_relaxed) == m;
}

inline void EnsurePAfterEntry(G* g) {
  M* m = CurrentM();
  if (!HoldsItsP(m)) ReacquireP(m, g);
}

}  // namespace goro::internal

#endif  // GORO_CORE_RUNTIME_H_
