// goro/preempt.h: controlling preemption and thread identity.
//
// goro preempts like Go 1.14+: a goroutine that has run for longer than
// Options::time_slice is asked to yield. It yields at the next safe point (any
// goro call, an uncontended Mutex or RWMutex one included - a lock before it
// acquires, an unlock after it releases - or Checkpoint()); if it
// reaches none - a tight loop with no calls -
// the runtime interrupts its thread with a signal and, when the interrupted
// instruction is in preemptible code, parks the goroutine there, with every
// register (including AVX/AVX-512 state, flags and errno) saved. Either way
// the preempted goroutine goes to the back of the global run queue (Yield
// uses that queue only when it is not empty), and it may resume on a
// different OS thread.
//
// Preemptible code is the main executable, by default. Code in shared
// libraries (libc, libstdc++, allocators with per-thread caches, the dynamic
// loader) is never interrupted: its preemption waits for the next safe point.
// When libstdc++, libgcc's unwinder, libc or an allocator is linked into the
// executable (-static, -static-libstdc++, -static-libgcc, a static tcmalloc
// or jemalloc), nothing is preemptible and
// async preemption is off, with one line on stderr, unless the program
// registered its own code first. See docs/preemption.md for this and for
// what preemption means for thread_local variables.
#ifndef GORO_PREEMPT_H_
#define GORO_PREEMPT_H_

#include <cstdint>

namespace goro {

// Wires the calling goroutine to the OS thread it runs on (Go's
// runtime.LockOSThread): until a matching UnlockOSThread, it runs only on this
// thread, and no other goroutine does. Calls nest. Use it for code that needs
// thread identity: thread_local state kept across blocking calls, thread-
// affine libraries (OpenGL, some GUI toolkits), per-thread kernel state
// (a network namespace, CPU affinity, unshare(CLONE_FS)), and locks whose
// owner is the thread (std::recursive_mutex, error-checking or robust pthread
// mutexes, flockfile): held by a goroutine that is preempted, such a lock
// lets in the next goroutine that runs on the thread. (Or hold one inside a
// NoPreemptScope with no blocking call; or use goro::Mutex.) Threads the
// runtime starts meanwhile are not copies of this one, so kernel-state
// changes stay on it. If the goroutine exits still locked, its thread ends
// with it, as in Go: the way to throw away a thread whose state cannot be
// put back. Unlock first to give the thread back to the runtime. No effect
// off a goroutine.
void LockOSThread();
// Undoes one LockOSThread. Unlocking a goroutine that is not locked is a no-op.
void UnlockOSThread();

// While an object of this type lives on a goroutine, the goroutine is not
// preempted at all: not by a signal, and not at goro calls or Checkpoint()
// either. A preemption request waits and is honoured when the scope ends.
// Keep such scopes short.
class NoPreemptScope {
 public:
  NoPreemptScope();
  ~NoPreemptScope();
  NoPreemptScope(const NoPreemptScope&) = delete;
  NoPreemptScope& operator=(const NoPreemptScope&) = delete;

 private:
  void* g_;
};

// Marks [begin, end) as code where a goroutine may be interrupted, for
// example a shared library of yours that keeps no per-thread state. At most
// 64 ranges (the main executable's, which the runtime adds when it starts, do
// not count); call before the code runs goroutines. Returns false when full.
// In an executable with the runtime libraries linked in (above), ranges
// registered before the runtime starts are the only preemptible code, and
// keep async preemption on. Safe to call from several threads at once.
bool RegisterPreemptibleCode(const void* begin, const void* end);
// Marks [begin, end) as code where a goroutine is never interrupted, even in
// the main executable. Exclusions win over registrations. At most 64 ranges
// (the runtime's own do not count); returns false when full. Safe to call
// from several threads at once.
bool ExcludeFromPreemption(const void* begin, const void* end);

// How many times the calling goroutine has been preempted (both ways).
uint64_t CurrentGoroutinePreemptions();

}  // namespace goro

#endif  // GORO_PREEMPT_H_
