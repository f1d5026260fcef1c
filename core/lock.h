// Runtime locks: short critical sections inside the runtime (a channel, a
// semaphore bucket, a timer heap). A holder never switches goroutines and
// never blocks, with one exception: the holder of a P's timer lock runs the
// expired timers' callbacks, which may take sched.mu when a full run queue
// spills into the global one (core/timer.cc; the WakeP that may start a
// thread waits until the lock is dropped). So spinning (then yielding the
// thread) is the right wait. Sleeping locks for long waits are the goroutine primitives.
// The lock order is in docs/scheduler.md.
#ifndef GORO_CORE_LOCK_H_
#define GORO_CORE_LOCK_H_

#include <sched.h>

#include <atomic>
#include <cstdint>

#include "arch/context.h"

namespace goro::internal {

// Lock and unlock a bare word (0 unlocked, 1 locked); used where the word lives
// in a public type whose layout cannot name SpinLock.
inline void LockWordSlow(std::atomic<uint32_t>& w) {
  for (int i = 0;; ++i) {
    if (w.load(std::memory_order_relaxed) == 0 && w.exchange(1, std::memory_order_acquire) == 0) return;
    if (i < 100) {
      arch::CpuRelax();
    } else {
      sched_yield();  // the holder's thread may have been descheduled
    }
  }
}
inline void LockWord(std::atomic<uint32_t>& w) {
  if (w.exchange(1, std::memory_order_acquire) == 0) return;
  LockWordSlow(w);
}
inline void UnlockWord(std::atomic<uint32_t>& w) { w.store(0, std::memory_order_release); }

class SpinLock {
 public:
  void Lock() { LockWord(word_); }
  void Unlock() { UnlockWord(word_); }
  bool TryLock() { return word_.exchange(1, std::memory_order_acquire) == 0; }

 private:
  std::atomic<uint32_t> word_{0};
};

}  // namespace goro::internal

#endif  // GORO_CORE_LOCK_H_
