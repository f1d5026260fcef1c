// goro/sync.h: WaitGroup, Mutex, RWMutex, CondVar and Once for goroutines
// (Go's sync package).
//
// All of them block only the calling goroutine, never its thread, when called
// on a goroutine; called from a plain thread they block that thread. They may
// be shared freely between goroutines and plain threads. None of them may be
// copied or moved while in use.
#ifndef GORO_SYNC_H_
#define GORO_SYNC_H_

#include <atomic>
#include <cstdint>
#include <utility>

#include "absl/functional/function_ref.h"
#include "absl/time/time.h"

namespace goro {

namespace internal {
// The queue of goroutines sleeping on one semaphore word (core/sema.cc). Each
// Mutex and WaitGroup owns one (an RWMutex two), so waking a waiter never
// searches a table.
struct SemaQueue {
  std::atomic<uint32_t> lock{0};
  std::atomic<uint32_t> nwait{0};  // waiters queued; read without the lock
  void* head = nullptr;            // guarded by lock
  void* tail = nullptr;            // guarded by lock
};
}  // namespace internal

// Waits for a collection of goroutines to finish (Go's sync.WaitGroup).
// Add(n) before starting the work, Done() when each part finishes, Wait()
// blocks until the counter is zero. A negative counter, or a delta outside
// int32's range (the counter's width), is a fatal error.
// As with std::latch, a WaitGroup may be destroyed once every Wait call on it
// has returned, even if the Done that released them has not; with a single
// waiter, that is as soon as its Wait returns. With several, the first to
// return may not destroy it: the others still read it as they wake.
class WaitGroup {
 public:
  WaitGroup() = default;
  WaitGroup(const WaitGroup&) = delete;
  WaitGroup& operator=(const WaitGroup&) = delete;

  void Add(int64_t n);
  void Done() { Add(-1); }
  void Wait();

 private:
  void Settle(int64_t n, uint64_t state);
  void WaitSlow();

  // High 32 bits: the counter. Low 32 bits: the number of waiters.
  std::atomic<uint64_t> state_{0};
  std::atomic<uint32_t> sema_{0};
  internal::SemaQueue waiters_;
};

// A mutual-exclusion lock (Go's sync.Mutex), with Go's starvation mode: a
// waiter blocked for more than 1 ms switches the mutex to FIFO hand-off until
// the queue drains. Not recursive. Unlocking an unlocked Mutex is a fatal error.
// The lower-case names let std::lock_guard and std::unique_lock use it.
// As with std::mutex, a Mutex may be destroyed as soon as it is unlocked and
// no goroutine is in (or will call) Lock, even if another goroutine's Unlock
// has not returned yet: an Unlock that still has a waiter to wake holds that
// waiter's Lock back until it is done with the Mutex. (Go's Unlock frees the
// lock before it picks a waiter, which only its garbage collector makes safe.)
class Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock();
  void Unlock();
  bool TryLock();

  void lock() { Lock(); }
  void unlock() { Unlock(); }
  bool try_lock() { return TryLock(); }

 private:
  friend class RWMutex;  // unlocks its writers' Mutex with Release
  void LockSlow();
  // Unlock without its safe point and, in starvation mode, without its yield
  // to the waiter it handed the Mutex to (returns true then), which
  // RWMutex::Unlock takes only once the RWMutex is released too.
  bool Release();
  bool UnlockSlow(int32_t state);

  // Bit 0: locked. Bit 1: a woken waiter is competing. Bit 2: starvation mode.
  // Bits 3..31: number of waiters blocked on sema_.
  std::atomic<int32_t> state_{0};
  std::atomic<uint32_t> sema_{0};
  internal::SemaQueue waiters_;
};

// A reader/writer lock (Go's sync.RWMutex): held by any number of readers
// (RLock) or by one writer (Lock). Writers go first: once a Lock is waiting,
// new RLock calls block until that writer has had the lock and released it,
// so a steady stream of readers cannot starve a writer. So a reader must not
// take the read lock again while it holds it (recursive read locking): if a
// writer's Lock began in between, the second RLock waits for that writer,
// which waits for the first RLock to be undone, and neither returns. Readers
// that were already blocked when a writer releases the lock get it before
// the next writer does.
// A locked RWMutex belongs to no goroutine: one may RLock (Lock) it and
// another RUnlock (Unlock) it. RUnlock of an RWMutex not locked for reading,
// and Unlock of one not locked for writing, are fatal errors (not every such
// misuse is caught). TryLock and TryRLock never block; a TryRLock fails while
// a writer holds the lock or waits for it.
// The lower-case names let std::unique_lock and std::shared_lock use it.
// As with std::shared_mutex, an RWMutex may be destroyed as soon as it is
// unlocked and nobody is in (or will call) a lock function, even if another
// goroutine's Unlock or RUnlock has not returned yet (core/sync.cc explains
// the order of Unlock's steps that makes this hold; Go's order does not).
class RWMutex {
 public:
  RWMutex() = default;
  RWMutex(const RWMutex&) = delete;
  RWMutex& operator=(const RWMutex&) = delete;

  void Lock();
  void Unlock();
  bool TryLock();
  void RLock();
  void RUnlock();
  bool TryRLock();

  void lock() { Lock(); }
  void unlock() { Unlock(); }
  bool try_lock() { return TryLock(); }
  void lock_shared() { RLock(); }
  void unlock_shared() { RUnlock(); }
  bool try_lock_shared() { return TryRLock(); }

 private:
  friend struct RWMutexAccess;  // tests/rwmutex_test.cc reads readers_
  void RLockSlow();
  void RUnlockSlow(int32_t old);
  void LockSlow(int32_t readers);
  void UnlockSlow(int32_t old);

  // Held by the writer that holds the lock or is waiting for its readers to
  // leave; other writers queue on it.
  Mutex writer_;
  // The readers that hold the lock or wait for it, minus kMaxReaders for a
  // writer that holds it or waits for it (minus twice that between a
  // writer's release of writer_ and its release of the readers, when the
  // next writer has announced itself already).
  std::atomic<int32_t> readers_{0};
  // Readers a waiting writer still waits for: each leaving reader takes one
  // off, and the one that reaches zero wakes the writer.
  std::atomic<int32_t> departing_{0};
  std::atomic<uint32_t> writer_sema_{0};  // the waiting writer sleeps here
  std::atomic<uint32_t> reader_sema_{0};  // readers blocked by a writer sleep here
  internal::SemaQueue writer_waiters_;
  internal::SemaQueue reader_waiters_;
};

// A condition variable (Go's sync.Cond with the mutex passed to Wait).
// Wait and WaitFor must be called with `mu` held; they release it while
// blocked and hold it again when they return. Signal wakes the longest waiter.
// Signal and SignalAll may be called with or without `mu` held. As POSIX
// allows, a CondVar may be destroyed once nobody is blocked on it: by a
// waiter once its Wait has returned, even if the Signal that woke it has
// not; by a signaller right after a SignalAll, even if the waiters it woke
// have not returned yet. Destroying it while goroutines are still blocked on
// it (as when the program ends with goroutines waiting on a global CondVar)
// detaches them: nothing can signal them any more, but a WaitFor still
// returns false when its time is up.
class CondVar {
 public:
  CondVar() = default;
  // Goroutines still waiting on it are detached (a WaitFor still times out).
  // Waits, yielding, only for a WaitFor's timeout that is firing, or a
  // Signal/SignalAll still cancelling the timer of a waiter it woke; never
  // for a woken waiter to run again.
  ~CondVar();
  CondVar(const CondVar&) = delete;
  CondVar& operator=(const CondVar&) = delete;

  void Wait(Mutex& mu);
  // Returns true when woken by Signal/SignalAll, false when `d` passed first.
  bool WaitFor(Mutex& mu, absl::Duration d);
  void Signal();
  void SignalAll();

  struct Waiter;  // defined in core/sync.cc

 private:
  friend struct CondVarAccess;
  bool WaitUntilNanos(Mutex& mu, int64_t deadline_ns);

  std::atomic<uint32_t> lock_{0};
  // WaitFor timers whose callback may still take lock_: +1 as the waiter is
  // queued (under lock_), -1 as the callback's last act or, if the timer is
  // removed before it fires, by whoever removes it (the waker, the waiter's
  // park, ~CondVar; core/sync.cc). Fills the padding after lock_, so
  // sizeof(CondVar) is unchanged.
  std::atomic<int32_t> timers_{0};
  Waiter* head_ = nullptr;  // guarded by lock_
  Waiter* tail_ = nullptr;  // guarded by lock_
};

// Runs a function once (Go's sync.Once). The first Do calls f; every Do,
// the first included, returns only after f has returned, and sees what f
// did. A Do that arrives while f runs blocks (its goroutine, not its
// thread). Once f has returned, Do is one acquire load.
// If f throws, the exception reaches the caller of that Do and the Once is
// not done: the next Do calls its own f, as with std::call_once. (Go differs:
// a panicking f counts as done.)
// Calling Do on the same Once from inside f never returns (as in Go): the
// inner Do waits for f to return.
class Once {
 public:
  Once() = default;
  Once(const Once&) = delete;
  Once& operator=(const Once&) = delete;

  template <typename F>
  void Do(F&& f) {
    if (done_.load(std::memory_order_acquire) != 0) return;
    DoSlow([&f] { std::forward<F>(f)(); });  // f may be mutable; FunctionRef calls it const
  }

 private:
  void DoSlow(absl::FunctionRef<void()> f);

  std::atomic<uint32_t> done_{0};  // set, under mu_, once f has returned
  Mutex mu_;
};

}  // namespace goro

#endif  // GORO_SYNC_H_
