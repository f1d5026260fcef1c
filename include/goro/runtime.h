// goro/runtime.h: starting the runtime, spawning goroutines, and scheduling
// calls that act on the current goroutine.
#ifndef GORO_RUNTIME_H_
#define GORO_RUNTIME_H_

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <new>
#include <type_traits>
#include <utility>

#include "absl/functional/any_invocable.h"
#include "absl/time/time.h"

namespace goro {

// Tunables of the runtime. They are read once, by the call that starts the
// runtime: the first Run, unless a call that needs the runtime came before it
// and started it with the defaults - Go, After, a Timer, a CondVar wait or a
// goro::io call (not SleepFor or SleepUntil on a plain thread). Later calls cannot
// change them; the first Run whose Options are ignored so says on stderr, in
// one line naming them. The environment (GOROMAXPROCS, GORODEBUG) is read at
// the same moment; see docs/environment.md. A value that cannot work is a
// fatal error then, in one line naming the option and the value.
struct Options {
  // Number of logical processors (Ps): how many goroutines run in parallel.
  // 0 means $GOROMAXPROCS when set and valid, else the number of CPUs the
  // process may run on (its affinity mask, sched_getaffinity, as Go counts
  // them: 1 under `taskset -c 0`), or the hardware concurrency if that fails.
  // The process's mask is its main thread's as the program was loaded (Go
  // reads it at start-up too), whichever thread starts the runtime.
  // At most 1024: a larger value is capped, a negative one taken as 0, each
  // with one line on stderr.
  int max_procs = 0;
  // How long a goroutine may run before it is asked to yield: at least 50us
  // (a shorter one, zero or negative, is a fatal error).
  // GORODEBUG=timeslice=DURATION overrides it.
  absl::Duration time_slice = absl::Milliseconds(10);
  // Whether a goroutine that never reaches a safe point is interrupted by a
  // signal. GORODEBUG=asyncpreemptoff=1 turns it off. Always off in a
  // ThreadSanitizer build (docs/sanitizers.md), and off, with one line on
  // stderr, when libstdc++, libgcc's unwinder or libc is linked into the
  // executable (static linking: docs/preemption.md).
  bool async_preemption = true;
  // Address space reserved for each goroutine's stack. Pages are committed as
  // they are touched; a 64 KiB guard below the stack catches overflow (for
  // frames larger than that, see docs/robustness.md). At least 64 KiB (a
  // smaller value is raised to that) and at most 1 GiB, about Go's limit (a
  // larger one is a fatal error); rounded up to whole pages.
  size_t stack_size = size_t{1} << 20;
  // The signal sysmon sends to interrupt a goroutine (Go uses SIGURG). Change
  // it only where another runtime in the process already owns SIGURG. It must
  // be a signal with no purpose of its own: SIGURG, SIGWINCH, SIGUSR1, SIGUSR2
  // or a real-time signal (SIGRTMIN to SIGRTMAX); any other is a fatal error
  // at start-up naming it (SIGINT or SIGTERM would no longer end the process).
  // Someone else's signal of that number goes to the handler installed
  // before goro's, or gets its default action (for SIGUSR1, SIGUSR2 and
  // real-time signals, the end of the process).
  int preempt_signal = 23;  // SIGURG on Linux
};

// Starts the runtime on first use, runs `fn` as a goroutine and blocks the
// caller until `fn` returns. May be called from any thread, including from a
// goroutine (then only the calling goroutine blocks), and more than once. An
// empty `fn` is a fatal error ("go of nil func value").
// The runtime's threads descend from a template thread that the thread that
// starts the runtime makes; it takes back the main thread's CPU affinity,
// scheduling policy and nice value, but keeps the starter's namespaces and
// filesystem context (cwd after unshare(CLONE_FS)): start the runtime from a
// thread in the namespaces goroutines should use. A thread that changes its
// own state later, or a goroutine wired with LockOSThread, passes nothing on
// (docs/scheduler.md, "Making threads").
// While a thread waits here and every goroutine has been blocked for 100 ms
// with nothing that could wake one, the process ends with
// "fatal error: all goroutines are asleep - deadlock!". A plain thread counts
// as something that could from its first goro call (docs/scheduler.md).
// Once exit() has begun, only a Run begun since (from an atexit handler or a
// static destructor) is reported: the program is ending, and Go does not
// look for deadlocks once main returns.
//
// Goroutines alive at exit. Returning from main (or any call of exit()) does
// not wait for goroutines, as it does not wait for std::threads; in Go it
// ends them. Here, the goroutines that exist when exit() begins are frozen:
// none runs, and none is destroyed (what it holds - locks, memory - it
// keeps). Those running are asked to stop, and exit() waits for each to reach
// a safe point for up to about 20 ms in all (sysmon goes on asking after
// that); one that reaches none (in a blocking call, in library code, in a
// loop without calls when async preemption is off) runs on until it next
// yields, blocks or calls into goro.
// The freeze comes from an atexit handler that the runtime registers when it
// starts, so it precedes the destruction of every global constructed before
// the runtime started (the program's globals, in the common case), while a
// global constructed afterwards (a function-local static first used later)
// is destroyed before it, with the goroutines still running. A Run begun
// during exit (from an atexit handler, a static or thread_local destructor)
// and the goroutines it starts run normally, as does a goroutine that calls
// exit() itself. What they wait for from a frozen goroutine comes once the
// freeze ends (below).
//
// The freeze ends for good as soon as a thread that is not a goroutine - the
// one running exit(), or any other - waits in goro during exit
// (WaitGroup::Wait, a channel operation, Select, Mutex, CondVar, SleepFor
// ...), unless it waits in Run for Run's own goroutine: the program asked to
// wait for its goroutines, so all of them run again, as before exit. A
// global whose destructor stops the goroutines it started and waits for them
// thus works as it would without the freeze (the goroutines then run while
// globals are destroyed, as they did before it).
// The freeze is a best effort that never makes exit() wait for good: it
// also ends once the thread running exit() has waited (used no CPU, asleep
// in the kernel) for about 100 ms, whatever it waits for - a std::mutex a
// frozen goroutine holds, the join of a thread whose Run waits for a frozen
// goroutine, Run's own wait, a wait of the goroutine that called exit(), a
// long sleep or a slow write. The goroutines then run on during the rest of
// the exit. A program that wants its goroutines to finish waits for them (a
// WaitGroup) before main returns.
void Run(absl::AnyInvocable<void() &&> fn, const Options& opts = {});

namespace internal {
// How a goroutine's closure is moved into, run from and destroyed in the
// goroutine's own inline buffer (so that spawning allocates nothing).
struct ClosureOps {
  // Move-constructs at dst from src. It does not destroy src: src's owner
  // does (destroying it here too would destroy it twice; GCC then drops the
  // stores that empty src, and the moved-from object frees what it gave away).
  void (*move_to)(void* dst, void* src);
  void (*run)(void* self);                 // std::move(*self)()
  void (*destroy)(void* self);
};
inline constexpr size_t kInlineClosureSize = 48;
inline constexpr size_t kInlineClosureAlign = 16;
template <typename F>
inline constexpr ClosureOps kClosureOps = {
    [](void* dst, void* src) { ::new (dst) F(std::move(*static_cast<F*>(src))); },
    [](void* self) { std::move(*static_cast<F*>(self))(); },
    [](void* self) { static_cast<F*>(self)->~F(); },
};
template <typename F>
inline constexpr bool kFitsInline = sizeof(F) <= kInlineClosureSize &&
                                    alignof(F) <= kInlineClosureAlign &&
                                    std::is_nothrow_move_constructible_v<F>;
// `f` points to a closure of the type `ops` was made for; it is moved from
// (and still destroyed by its owner).
void GoClosure(const ClosureOps* ops, void* f);
// Callables that may be empty: function pointers, and classes that compare
// with nullptr (std::function, absl::AnyInvocable). A captureless lambda
// compares too, through its conversion to a function pointer, but is never
// empty.
template <typename F>
inline constexpr bool kMayBeNil = std::is_pointer_v<F> || (!std::is_empty_v<F> && requires(const F& f) {
  { f == nullptr } -> std::convertible_to<bool>;
});
// Go or Run of an empty callable: a fatal error naming the caller, with Go's
// message "go of nil func value".
[[noreturn]] void FatalGoOfNilFunc();
}  // namespace internal

// Run of a callable that may be empty (a function pointer, a std::function):
// checked here, because an AnyInvocable made from an empty std::function is
// not empty, and calling it would throw std::bad_function_call in the
// goroutine instead of the fatal error promised above.
template <typename F>
  requires(!std::is_same_v<std::decay_t<F>, absl::AnyInvocable<void() &&>> &&
           std::is_invocable_v<std::decay_t<F>> && internal::kMayBeNil<std::decay_t<F>>)
void Run(F&& fn, const Options& opts = {}) {
  std::decay_t<F> f(std::forward<F>(fn));
  if (f == nullptr) internal::FatalGoOfNilFunc();
  Run(absl::AnyInvocable<void() &&>(std::move(f)), opts);
}

// Starts `fn` as a new goroutine and returns at once. Callable from a goroutine
// or from any thread; starts the runtime with default Options if needed.
// An exception escaping `fn` is a fatal error naming the goroutine, and so is
// pthread_exit or pthread_cancel on it (its thread is not its own to end; its
// destructors have run by then); an empty `fn` (a null function pointer, an
// empty std::function or AnyInvocable) is one at the call, naming the caller:
// "go of nil func value", as in Go.
void Go(absl::AnyInvocable<void() &&> fn);

// The same for any callable that fits in a goroutine's 48-byte inline closure
// buffer (a lambda capturing up to six pointers): no allocation at all.
// Larger callables go through the AnyInvocable overload above, after the
// check for an empty one (an AnyInvocable made from it would not be empty).
template <typename F>
  requires(!std::is_same_v<std::decay_t<F>, absl::AnyInvocable<void() &&>> &&
           std::is_invocable_v<std::decay_t<F>> &&
           (internal::kFitsInline<std::decay_t<F>> || internal::kMayBeNil<std::decay_t<F>>))
void Go(F&& fn) {
  std::decay_t<F> f(std::forward<F>(fn));
  if constexpr (internal::kMayBeNil<std::decay_t<F>>) {
    if (f == nullptr) internal::FatalGoOfNilFunc();
  }
  if constexpr (internal::kFitsInline<std::decay_t<F>>) {
    internal::GoClosure(&internal::kClosureOps<std::decay_t<F>>, &f);
  } else {
    Go(absl::AnyInvocable<void() &&>(std::move(f)));
  }
}

// Puts the calling goroutine at the back of its processor's run queue, or at
// the back of the global run queue when that is not empty (Go's
// runtime.Gosched always uses the global one), and runs another one. Off a
// goroutine: sched_yield().
void Yield();

// Blocks the calling goroutine (or thread) for at least `d`. A zero or
// negative `d` returns at once, as Go's time.Sleep does: it does not yield
// (Yield does), though a goroutine whose time slice is over is preempted
// there, as at any call into goro. On a plain thread it does not start the
// runtime.
void SleepFor(absl::Duration d);
// Blocks the calling goroutine (or thread) until at least `t`. `t` is read
// against the wall clock once, at the call, and the sleep is then timed on
// the monotonic clock like every goro timer (as Go's time.Sleep(time.Until(t))
// would be): a later step of the wall clock does not move it.
void SleepUntil(absl::Time t);

// A safe point: if the runtime asked this goroutine to yield (its time slice
// is over), yields now. Cheap when nothing is pending: a load and a compare.
void Checkpoint();

// The id of the calling goroutine (1, 2, ...), or 0 when called off a goroutine.
int64_t GoroutineId();

// Process-wide counters since the runtime started.
struct Stats {
  uint64_t goroutines_created = 0;
  int64_t goroutines_live = 0;
  uint64_t async_preemptions = 0;        // signal-driven preemptions that took effect
  uint64_t cooperative_preemptions = 0;  // requests honoured at a safe point
  uint64_t preempt_signals_sent = 0;
  uint64_t steals = 0;    // successful steals of goroutines from another P
  uint64_t handoffs = 0;  // Ps handed from a blocked or revoked M to another M (not those put idle)
  int procs = 0;          // number of Ps (0 before the runtime starts)
  int threads = 0;        // Ms (OS threads) alive now: created, less those ended
                          // with a goroutine that exited wired (LockOSThread)
};
Stats GetStats();

// The settings the runtime runs with: the Options it was started with as the
// environment (GOROMAXPROCS, GORODEBUG), the build (no async preemption under
// ThreadSanitizer, nor with the runtime libraries linked statically) and the
// CPU (none without XSAVE) changed them, with
// max_procs the number of Ps. Before the runtime starts: Options{}.
Options GetOptions();

// Writes every goroutine - its id, state, what it waits for and for how long,
// and for a parked one (and the caller) its backtrace - like Go's goroutine
// dump:
//   goroutine 7 [chan receive, 12 s]:
//   	goro::internal::ChanRecv(...)+0xd2
//   	Worker(goro::Chan<int>)+0x1a
// Goroutines running on other threads are listed without a backtrace here.
// SIGQUIT (Ctrl-\ in a terminal) prints the same to stderr, with those too
// (each thread walks its own goroutine from a signal), and exits with status
// 2, as in Go, unless GORODEBUG=sigquitdump=0 is set or, when the runtime
// starts, SIGQUIT has a handler of the program's or is ignored (SIG_IGN).
// Unlike Go, an ignore inherited from the parent (a background job of a
// non-interactive shell has one) is kept too, since the runtime cannot tell
// it from one the program chose; reset SIGQUIT to SIG_DFL before the runtime
// starts to get the dump there. Fatal errors print the failing goroutine's
// backtrace (and a deadlock every goroutine's). Backtraces need
// libunwind.so.8 at run time (loaded by dlopen when the runtime starts, not
// linked); without it they are left out. See docs/debugging.md.
void DumpGoroutines(std::ostream& out);

}  // namespace goro

#endif  // GORO_RUNTIME_H_
