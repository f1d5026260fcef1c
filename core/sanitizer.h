// Fiber annotations for AddressSanitizer and ThreadSanitizer.
//
// Both sanitizers keep per-thread state about "the stack we are on": ASan the
// stack bounds (and its fake stack, for stack-use-after-return), TSan a shadow
// call stack and a vector clock. A context switch changes stacks under their
// feet, so every arch::SwitchContext in core/proc.cc is bracketed:
//
//   SanStartSwitch(&from, to, exiting);   // just before SwitchContext
//   arch::SwitchContext(...);
//   SanFinishSwitch(&self);               // first thing after it returns
//
// and a goroutine's first instructions (GoroutineMain) call SanFinishSwitch
// too, since it resumes there rather than after a SwitchContext. The async
// preemption path needs nothing of its own: the signal handler never switches
// stacks, and the trampoline parks through SwitchToG0.
//
// With no sanitizer every call here is an empty inline function and
// FiberState an empty struct ([[no_unique_address]] where it is a member):
// the normal build's code is unchanged.
#ifndef GORO_CORE_SANITIZER_H_
#define GORO_CORE_SANITIZER_H_

#include <cstddef>
#include <cstdint>

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define GORO_ASAN 1
#endif
#if __has_feature(thread_sanitizer)
#define GORO_TSAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) && !defined(GORO_ASAN)
#define GORO_ASAN 1
#endif
#if defined(__SANITIZE_THREAD__) && !defined(GORO_TSAN)
#define GORO_TSAN 1
#endif

#if defined(GORO_ASAN)
#include <pthread.h>
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#endif
#if defined(GORO_TSAN)
#include <sanitizer/tsan_interface.h>
#endif

// For code that reads other threads' records racily on purpose (the SIGQUIT
// dump): TSan does not instrument its memory accesses.
#define GORO_NO_SANITIZE_THREAD __attribute__((no_sanitize("thread")))

namespace goro::internal {

// Built with ThreadSanitizer: async preemption is off (see EnsureStarted).
#if defined(GORO_TSAN)
inline constexpr bool kTsanBuild = true;
#else
inline constexpr bool kTsanBuild = false;
#endif

// The sanitizer state of one execution context: a goroutine (G::san) or an
// M's scheduler context g0 (M::g0san). Touched only by the thread running or
// switching that context.
struct FiberState {
#if defined(GORO_ASAN)
  // ASan's fake stack of this context while it is switched out; nullptr
  // before its first switch (a fresh context has none).
  void* fake_stack = nullptr;
  const void* stack_bottom = nullptr;  // its stack: [bottom, bottom + size)
  size_t stack_size = 0;
#endif
#if defined(GORO_TSAN)
  void* tsan_fiber = nullptr;  // __tsan_create_fiber's, or the thread's own for g0
#endif
};

// A goroutine's context is new (its stack just allocated): records its stack
// and, under TSan, creates its fiber.
inline void SanFiberCreate(FiberState* f, uintptr_t lo, uintptr_t hi) {
#if defined(GORO_ASAN)
  f->fake_stack = nullptr;
  f->stack_bottom = reinterpret_cast<const void*>(lo);
  f->stack_size = hi - lo;
#endif
#if defined(GORO_TSAN)
  f->tsan_fiber = __tsan_create_fiber(0);
#endif
}

// A goroutine has exited for good (called on g0, after the switch away).
inline void SanFiberDestroy(FiberState* f) {
#if defined(GORO_TSAN)
  __tsan_destroy_fiber(f->tsan_fiber);
  f->tsan_fiber = nullptr;
#endif
  *f = FiberState{};
}

// g0 is the thread's own context: records the thread's stack and TSan fiber.
// Called once by the thread that will run g0, before its first switch.
inline void SanInitThreadContext(FiberState* g0) {
#if defined(GORO_ASAN)
  pthread_attr_t attr;
  void* addr = nullptr;
  size_t size = 0;
  if (pthread_getattr_np(pthread_self(), &attr) == 0) {
    pthread_attr_getstack(&attr, &addr, &size);
    pthread_attr_destroy(&attr);
  }
  g0->stack_bottom = addr;
  g0->stack_size = size;
#endif
#if defined(GORO_TSAN)
  g0->tsan_fiber = __tsan_get_current_fiber();
#endif
  (void)g0;
}

// Just before switching from the running context `from` to `to`. `exiting`:
// `from` will never run again (ASan frees its fake stack).
inline void SanStartSwitch(FiberState* from, const FiberState& to, bool exiting) {
#if defined(GORO_ASAN)
  __sanitizer_start_switch_fiber(exiting ? nullptr : &from->fake_stack, to.stack_bottom, to.stack_size);
#endif
#if defined(GORO_TSAN)
  // Synchronising (flags 0): g0 and the goroutines of an M hand state to one
  // another through plain fields; that hand-off is ordered by the switch.
  __tsan_switch_to_fiber(to.tsan_fiber, 0);
#endif
  (void)from, (void)to, (void)exiting;
}

// First thing on `self` once a switch to it has completed.
inline void SanFinishSwitch(FiberState* self) {
#if defined(GORO_ASAN)
  __sanitizer_finish_switch_fiber(self->fake_stack, nullptr, nullptr);
  self->fake_stack = nullptr;
#endif
  (void)self;
}

// A goroutine has exited with its frames in [sp, hi) still live (they never
// return: GoroutineMain's, below goro_start_context): unpoison them before
// the stack goes back to a pool, or the next goroutine on it would trip over
// their redzones. Frames below sp returned, and unpoisoned themselves.
inline void SanStackExited(uintptr_t lo, uintptr_t hi) {
#if defined(GORO_ASAN)
  ASAN_UNPOISON_MEMORY_REGION(reinterpret_cast<void*>(lo), hi - lo);
#endif
  (void)lo, (void)hi;
}

// A happens-before edge ThreadSanitizer cannot see: one made by
// membarrier(2), which orders a goroutine's plain writes before sysmon's
// reads when sysmon takes its P in an unmarked blocking call (TryRevokeP).
// An atomic load of `addr` with acquire or stronger order acquires it.
inline void SanRelease(void* addr) {
#if defined(GORO_TSAN)
  __tsan_release(addr);
#endif
  (void)addr;
}

}  // namespace goro::internal

#endif  // GORO_CORE_SANITIZER_H_
