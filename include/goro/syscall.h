// goro/syscall.h: blocking system calls without blocking other goroutines.
//
// A goroutine that blocks its thread in the kernel (read on a pipe, a slow
// disk, a third-party library's blocking call) would hold its processor (P)
// hostage. Marking the call as a blocking region, like Go's entersyscall /
// exitsyscall, lets the runtime hand the P to another thread while it blocks:
// after one sysmon tick if other goroutines are waiting to run, or as soon as
// a timer on that P falls due if no other P is idle (after 10 ms otherwise).
// When the call returns the goroutine gets its P back, or another idle P, or
// waits in the global run queue.
//
// Inside a marked region the goroutine is never sent the preemption signal,
// so the call sees no EINTR caused by the runtime. It must not call goro
// functions (channels, locks, Go, sleeps, goro::io) before the region ends:
// that is a fatal error. A region inside a region is part of the outer one.
// exit() called inside a region (an error path of the wrapped call) ends it,
// nested ones and all, before the static destructors run, so that they may
// call goro.
// A region in a signal handler that interrupted goro's own code (a channel
// operation, say) keeps the P: that code may be using it (docs/syscalls.md).
//
// Unmarked blocking calls are detected too, after a while (see
// docs/syscalls.md), but marking them is cheaper and hands off sooner.
#ifndef GORO_SYSCALL_H_
#define GORO_SYSCALL_H_

#include <type_traits>
#include <utility>

namespace goro {

// Marks the lifetime of the object as a blocking region. Off a goroutine it
// does nothing.
class SyscallScope {
 public:
  SyscallScope();
  ~SyscallScope();
  SyscallScope(const SyscallScope&) = delete;
  SyscallScope& operator=(const SyscallScope&) = delete;

 private:
  bool active_;
};

// Runs fn() as a blocking region and returns its result. errno as left by fn
// is preserved for the caller.
template <typename F>
auto Syscall(F&& fn) -> decltype(std::forward<F>(fn)()) {
  SyscallScope scope;
  return std::forward<F>(fn)();
}

}  // namespace goro

#endif  // GORO_SYSCALL_H_
