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

#include "absl/base/thread_annotations.h"
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

// The scheduler's lock (sched.mu): held for a few hundred nanoseconds, but
// taken by every P whenever the global run queue is in use, so under load
// it is contended all the time. It spins first, as Go's lock_futex does
// (a few rounds of PAUSE, then one sched_yield), and only then sleeps on
// the word with futex(2): a holder the OS has descheduled must not have a
// hundred returning system calls spinning behind it. With absl::Mutex, which
// it replaced, about 40% of the time went to the lock and its futex waits
// and wakes when 2 Ps took turns at the global queue (yield_many: 2.2x Go's
// time per Yield).
class ABSL_LOCKABLE RuntimeMutex {
 public:
  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() {
    uint32_t v = kFree;
    if (!word_.compare_exchange_strong(v, kHeld, std::memory_order_acquire, std::memory_order_relaxed)) {
      LockSlow();
    }
  }
  void Unlock() ABSL_UNLOCK_FUNCTION() {
    if (word_.exchange(kFree, std::memory_order_release) == kSleepers) WakeOne();
  }

 private:
  static constexpr uint32_t kFree = 0;
  static constexpr uint32_t kHeld = 1;
  static constexpr uint32_t kSleepers = 2;  // held, and someone may sleep on the word
  void LockSlow();
  void WakeOne();
  std::atomic<uint32_t> word_{kFree};
};

// absl::MutexLock for a RuntimeMutex.
class ABSL_SCOPED_LOCKABLE RuntimeMutexLock {
 public:
  explicit RuntimeMutexLock(RuntimeMutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  ~RuntimeMutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  RuntimeMutexLock(const RuntimeMutexLock&) = delete;
  RuntimeMutexLock& operator=(const RuntimeMutexLock&) = delete;

 private:
  RuntimeMutex* const mu_;
};

}  // namespace goro::internal

#endif  // GORO_CORE_LOCK_H_
