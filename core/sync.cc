// WaitGroup, Mutex and CondVar (include/goro/sync.h).
#include <sched.h>

#include "absl/strings/str_cat.h"
#include "core/fatal.h"
#include "core/runtime.h"
#include "core/sema.h"
#include "goro/sync.h"

namespace goro {

namespace internal {
std::atomic<void (*)()> mutex_unlock_wake_hook{nullptr};
std::atomic<void (*)()> condvar_signal_hook{nullptr};
}  // namespace internal

using internal::Nanotime;
using internal::WaitReason;

// ---------------------------------------------------------------------------
// WaitGroup

void WaitGroup::Add(int64_t n) {
  internal::RuntimeScope scope;
  // The counter is the state's high 32 bits: a wider delta would lose bits.
  if (n < INT32_MIN || n > INT32_MAX) {
    internal::FatalG(absl::StrCat("sync: WaitGroup delta ", n, " out of int32 range"));
  }
  uint64_t state = state_.fetch_add(static_cast<uint64_t>(n) << 32, std::memory_order_acq_rel) +
                   (static_cast<uint64_t>(n) << 32);
  int32_t v = static_cast<int32_t>(state >> 32);
  uint32_t w = static_cast<uint32_t>(state);
  if (v < 0) internal::FatalG("sync: negative WaitGroup counter");
  if (w != 0 && n > 0 && v == static_cast<int32_t>(n)) {
    internal::FatalG("sync: WaitGroup misuse: Add called concurrently with Wait");
  }
  if (v > 0 || w == 0) return;
  // The counter reached zero with waiters: nobody may touch the state now but
  // us, so reset it and release every waiter.
  if (state_.load(std::memory_order_relaxed) != state) {
    internal::FatalG("sync: WaitGroup misuse: Add called concurrently with Wait");
  }
  state_.store(0, std::memory_order_relaxed);
  // All in one step, which is Add's last touch of the WaitGroup: no waiter
  // returns before it. Each waiter still reads state_ as it wakes, so the
  // WaitGroup may go only once every Wait has returned.
  internal::SemReleaseN(&sema_, &waiters_, w, false);
}

void WaitGroup::Wait() {
  internal::RuntimeScope scope;
  uint64_t state = state_.load(std::memory_order_acquire);
  for (;;) {
    if ((state >> 32) == 0) return;
    if (state_.compare_exchange_weak(state, state + 1, std::memory_order_acq_rel)) {
      internal::SemAcquire(&sema_, &waiters_, false, WaitReason::kWaitGroupWait);
      if (state_.load(std::memory_order_acquire) != 0) {
        internal::FatalG("sync: WaitGroup is reused before previous Wait has returned");
      }
      return;
    }
  }
}

// ---------------------------------------------------------------------------
// Mutex
//
// The lock word packs four things (see sync.h). In normal mode, waiters queue
// FIFO, but a woken waiter competes with newly arriving goroutines, which
// usually win because they are already running; a waiter that loses goes to
// the front of the queue. A waiter that has waited more than 1 ms switches the
// mutex to starvation mode: Unlock then hands the mutex straight to the first
// waiter and newcomers queue at the back without trying. The mutex returns to
// normal mode when a waiter that got it waited less than 1 ms or was the last.

namespace {

constexpr int32_t kLocked = 1;
constexpr int32_t kWoken = 2;
constexpr int32_t kStarving = 4;
constexpr int kWaiterShift = 3;
constexpr int64_t kStarvationNs = 1000000;

// Spin only briefly, only on a multi-P runtime with other Ps running, and only
// if this P has nothing else to run: otherwise spinning delays the holder.
bool CanSpin(int iter) {
  using internal::sched;
  // A plain thread may lock a Mutex while another starts the runtime: read
  // nprocs only once it has been published.
  if (iter >= 4 || !sched.started.load(std::memory_order_acquire) || sched.nprocs <= 1) return false;
  if (sched.nprocs <= sched.npidle.load(std::memory_order_relaxed) +
                          sched.nmspinning.load(std::memory_order_relaxed) + 1) {
    return false;
  }
  internal::M* m = internal::CurrentM();
  return m != nullptr && m->p != nullptr && m->p->runq.Empty();
}

void Spin() {
  for (int i = 0; i < 30; ++i) arch::CpuRelax();
}

}  // namespace

void Mutex::Lock() {
  int32_t unlocked = 0;
  if (state_.compare_exchange_strong(unlocked, kLocked, std::memory_order_acquire)) return;
  LockSlow();
}

bool Mutex::TryLock() {
  int32_t old = state_.load(std::memory_order_relaxed);
  if (old & (kLocked | kStarving)) return false;
  return state_.compare_exchange_strong(old, old | kLocked, std::memory_order_acquire);
}

void Mutex::LockSlow() {
  internal::RuntimeScope scope;
  int64_t wait_start = 0;
  bool starving = false;
  bool awoke = false;
  int iter = 0;
  int32_t old = state_.load(std::memory_order_relaxed);
  for (;;) {
    // Spin while the holder runs, in normal mode only; set kWoken so Unlock
    // does not wake another waiter meanwhile.
    if ((old & (kLocked | kStarving)) == kLocked && CanSpin(iter)) {
      if (!awoke && (old & kWoken) == 0 && (old >> kWaiterShift) != 0 &&
          state_.compare_exchange_weak(old, old | kWoken, std::memory_order_relaxed)) {
        awoke = true;
      }
      Spin();
      iter++;
      old = state_.load(std::memory_order_relaxed);
      continue;
    }
    int32_t next = old;
    if ((old & kStarving) == 0) next |= kLocked;  // newcomers do not grab a starving mutex
    if (old & (kLocked | kStarving)) next += 1 << kWaiterShift;
    if (starving && (old & kLocked)) next |= kStarving;
    if (awoke) {
      if ((next & kWoken) == 0) internal::FatalG("sync: inconsistent mutex state");
      next &= ~kWoken;
    }
    if (!state_.compare_exchange_weak(old, next, std::memory_order_acq_rel)) continue;
    if ((old & (kLocked | kStarving)) == 0) return;  // locked it
    bool lifo = wait_start != 0;
    if (wait_start == 0) wait_start = Nanotime();
    internal::SemAcquire(&sema_, &waiters_, lifo, WaitReason::kSyncMutexLock);
    starving = starving || Nanotime() - wait_start > kStarvationNs;
    old = state_.load(std::memory_order_relaxed);
    if (old & kStarving) {
      // Handed to us directly: the mutex is ours, fix up the state.
      if ((old & (kLocked | kWoken)) != 0 || (old >> kWaiterShift) == 0) {
        internal::FatalG("sync: inconsistent mutex state");
      }
      int32_t delta = kLocked - (1 << kWaiterShift);
      if (!starving || (old >> kWaiterShift) == 1) delta -= kStarving;  // leave starvation mode
      state_.fetch_add(delta, std::memory_order_acquire);
      return;
    }
    awoke = true;
    iter = 0;
  }
}

void Mutex::Unlock() {
  int32_t old = kLocked;
  if (!state_.compare_exchange_strong(old, 0, std::memory_order_release, std::memory_order_relaxed)) {
    UnlockSlow(old);
  }
}

// Unlike Go's unlock, which frees the lock and then picks a waiter to wake,
// this picks the waiter in the same step that frees the lock. Go's order lets
// a newcomer take the lock in between and wake the same waiter on its own
// Unlock; that waiter may then destroy the Mutex while the first Unlock is
// still to touch it. Here a waiter's Lock returns only after the semaphore
// release that wakes it, which touches the Mutex last.
void Mutex::UnlockSlow(int32_t old) {
  internal::RuntimeScope scope;
  for (;;) {
    if ((old & kLocked) == 0) internal::FatalG("sync: unlock of unlocked mutex");
    if (old & kStarving) {
      // Starvation mode, which only a waiter can end, and only after this
      // hand-off: newcomers do not take the lock meanwhile, so nobody's Lock
      // returns before the first waiter's, which the release makes.
      state_.fetch_sub(kLocked, std::memory_order_release);
      internal::SemRelease(&sema_, &waiters_, true);
      return;
    }
    // Wake a waiter unless none sleeps or one is awake already (spinning, or
    // woken and not yet back).
    bool wake = (old >> kWaiterShift) != 0 && (old & kWoken) == 0;
    int32_t next = old & ~kLocked;
    if (wake) next = (next - (1 << kWaiterShift)) | kWoken;
    if (state_.compare_exchange_weak(old, next, std::memory_order_release, std::memory_order_relaxed)) {
      if (wake) {
        if (auto hook = internal::mutex_unlock_wake_hook.load(std::memory_order_relaxed)) hook();
        internal::SemRelease(&sema_, &waiters_, false);
      }
      return;
    }
  }
}

// ---------------------------------------------------------------------------
// CondVar
//
// Waiters queue FIFO on the CondVar's own lock. A waiter is enqueued before
// the user's Mutex is released (so no Signal after that can be missed) and
// parks afterwards; `parked` tells a signaller whether the waiter has parked
// yet, and so whether to Ready it or just let it see `woken` and not park.

struct CondVar::Waiter {
  internal::G* g = nullptr;
  Waiter* next = nullptr;
  Waiter* prev = nullptr;
  bool queued = false;
  bool parked = false;
  bool signalled = false;
  bool woken = false;  // signalled or timed out
  CondVar* cv = nullptr;
};

namespace {

void Unlink(CondVar::Waiter*& head, CondVar::Waiter*& tail, CondVar::Waiter* w) {
  if (w->prev != nullptr) {
    w->prev->next = w->next;
  } else {
    head = w->next;
  }
  if (w->next != nullptr) {
    w->next->prev = w->prev;
  } else {
    tail = w->prev;
  }
  w->next = w->prev = nullptr;
  w->queued = false;
}

struct CondVarPark {
  std::atomic<uint32_t>* lock;
  CondVar::Waiter* w;
  internal::Timer* timer;
};

bool CommitCondVarPark(internal::G*, void* arg) {
  auto* a = static_cast<CondVarPark*>(arg);
  if (a->timer != nullptr) internal::AddTimer(a->timer);
  internal::LockWord(*a->lock);
  if (a->w->woken) {
    internal::UnlockWord(*a->lock);
    return false;
  }
  a->w->parked = true;
  internal::UnlockWord(*a->lock);
  return true;
}

}  // namespace

// Friend-free access to the private queue: the timer callback and the
// signallers share these helpers through CondVar's public Waiter type.
//
// A waiter may destroy the CondVar as soon as its Wait returns, so a waker
// makes a parked waiter runnable only after dropping lock_, its last touch of
// the CondVar: WakeLocked returns the goroutine to Ready then. (A waiter
// that has not parked yet sees `woken` under lock_ and does not park.)
struct CondVarAccess {
  static internal::G* WakeLocked(CondVar* cv, CondVar::Waiter* w, bool signalled) {
    Unlink(cv->head_, cv->tail_, w);
    w->woken = true;
    w->signalled = signalled;
    return w->parked ? w->g : nullptr;
  }
  static void Timeout(internal::Timer* t) {
    auto* w = static_cast<CondVar::Waiter*>(t->arg);
    CondVar* cv = w->cv;
    internal::G* g = nullptr;
    internal::LockWord(cv->lock_);
    if (w->queued) g = WakeLocked(cv, w, false);
    internal::UnlockWord(cv->lock_);
    if (g != nullptr) internal::Ready(g);
  }
};

void CondVar::Wait(Mutex& mu) { WaitUntilNanos(mu, 0); }

bool CondVar::WaitFor(Mutex& mu, absl::Duration d) {
  if (d <= absl::ZeroDuration()) d = absl::ZeroDuration();
  if (d > absl::Hours(24 * 365 * 100)) d = absl::Hours(24 * 365 * 100);
  return WaitUntilNanos(mu, Nanotime() + absl::ToInt64Nanoseconds(d));
}

bool CondVar::WaitUntilNanos(Mutex& mu, int64_t deadline_ns) {
  internal::EnsureStarted(Options{});
  internal::RuntimeScope scope;
  Waiter w;
  w.g = internal::CurrentG();
  w.cv = this;
  internal::LockWord(lock_);
  w.prev = tail_;
  if (tail_ != nullptr) {
    tail_->next = &w;
  } else {
    head_ = &w;
  }
  tail_ = &w;
  w.queued = true;
  internal::UnlockWord(lock_);
  mu.Unlock();

  internal::Timer timer;
  if (deadline_ns != 0) {
    timer.when = deadline_ns;
    timer.f = CondVarAccess::Timeout;
    timer.arg = &w;
  }
  CondVarPark park{&lock_, &w, deadline_ns != 0 ? &timer : nullptr};
  internal::Park(WaitReason::kCondVarWait, CommitCondVarPark, &park);
  // After DelTimer the timeout callback is neither running nor pending, so `w`
  // may safely go away with this frame.
  if (deadline_ns != 0) internal::DelTimer(&timer);
  mu.Lock();
  return w.signalled;
}

void CondVar::Signal() {
  internal::RuntimeScope scope;
  internal::G* g = nullptr;
  internal::LockWord(lock_);
  if (head_ != nullptr) g = CondVarAccess::WakeLocked(this, head_, true);
  if (auto hook = internal::condvar_signal_hook.load(std::memory_order_relaxed)) hook();
  internal::UnlockWord(lock_);
  if (g != nullptr) internal::Ready(g);
}

void CondVar::SignalAll() {
  internal::RuntimeScope scope;
  // The parked waiters in queue order, chained through their records' `next`
  // (free once unlinked); a record stays valid until its goroutine is made
  // runnable.
  Waiter* parked = nullptr;
  Waiter* last = nullptr;
  internal::LockWord(lock_);
  while (head_ != nullptr) {
    Waiter* w = head_;
    if (CondVarAccess::WakeLocked(this, w, true) != nullptr) {
      (last != nullptr ? last->next : parked) = w;
      last = w;
    }
  }
  if (auto hook = internal::condvar_signal_hook.load(std::memory_order_relaxed)) hook();
  internal::UnlockWord(lock_);
  while (parked != nullptr) {
    Waiter* next = parked->next;
    internal::G* g = parked->g;
    internal::Ready(g);
    parked = next;
  }
}

}  // namespace goro
