// WaitGroup, Mutex, RWMutex, Once and CondVar (include/goro/sync.h).
#include <sched.h>

#include <climits>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "core/fatal.h"
#include "core/runtime.h"
#include "core/sema.h"
#include "core/wait_record.h"
#include "goro/sync.h"

namespace goro {

namespace internal {
std::atomic<void (*)()> mutex_unlock_wake_hook{nullptr};
std::atomic<void (*)()> condvar_signal_hook{nullptr};
std::atomic<void (*)()> condvar_detach_hook{nullptr};
std::atomic<void (*)(RWMutexUnlockPoint)> rwmutex_unlock_hook{nullptr};
}  // namespace internal

using internal::Nanotime;
using internal::WaitReason;

// ---------------------------------------------------------------------------
// WaitGroup

// Add and Wait take their fast paths without a RuntimeScope (see
// EnterFastPath): an Add that leaves the counter above zero, or at zero
// with nobody waiting, and a Wait on a zero counter touch only state_.

void WaitGroup::Add(int64_t n) {
  internal::EnterFastPath();
  // The counter is the state's high 32 bits: a wider delta would lose bits.
  if (n < INT32_MIN || n > INT32_MAX) [[unlikely]] {
    internal::RuntimeScope scope;
    internal::FatalG(absl::StrCat("sync: WaitGroup delta ", n, " out of int32 range"));
  }
  uint64_t state = state_.fetch_add(static_cast<uint64_t>(n) << 32, std::memory_order_acq_rel) +
                   (static_cast<uint64_t>(n) << 32);
  int32_t v = static_cast<int32_t>(state >> 32);
  uint32_t w = static_cast<uint32_t>(state);
  // Settle has something to do only if the counter went negative, reached
  // zero with waiters to release, or rose from zero while they wait.
  if (w == 0 ? v >= 0 : v > 0 && (n <= 0 || v != n)) return;
  Settle(n, state);
}

// The rest of an Add that made `state`: its misuse checks, and the release
// of the waiters when the counter reached zero.
void WaitGroup::Settle(int64_t n, uint64_t state) {
  internal::RuntimeScope scope{internal::RuntimeScope::Releasing{}};
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
  internal::SemReleaseN(&sema_, &waiters_, w);
}

void WaitGroup::Wait() {
  internal::EnterFastPath();
  if ((state_.load(std::memory_order_acquire) >> 32) == 0) return;
  WaitSlow();
}

void WaitGroup::WaitSlow() {
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
  internal::EnterFastPath();  // the slow path's RuntimeScope would be too late
  int32_t unlocked = 0;
  if (state_.compare_exchange_strong(unlocked, kLocked, std::memory_order_acquire)) return;
  LockSlow();
}

bool Mutex::TryLock() {
  internal::EnterFastPath();
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
  internal::G* g = internal::NoteEntry();
  if (Release()) internal::YieldToHandedOff();
  internal::SafePoint(g);  // after the release: see SafePoint
}

bool Mutex::Release() {
  int32_t old = kLocked;
  if (state_.compare_exchange_strong(old, 0, std::memory_order_release, std::memory_order_relaxed)) return false;
  return UnlockSlow(old);
}

// Unlike Go's unlock, which frees the lock and then picks a waiter to wake,
// this picks the waiter in the same step that frees the lock. Go's order lets
// a newcomer take the lock in between and wake the same waiter on its own
// Unlock; that waiter may then destroy the Mutex while the first Unlock is
// still to touch it. Here a waiter's Lock returns only after the semaphore
// release that wakes it, which touches the Mutex last.
bool Mutex::UnlockSlow(int32_t old) {
  internal::RuntimeScope scope{internal::RuntimeScope::Releasing{}};  // Unlock's SafePoint comes after
  for (;;) {
    if ((old & kLocked) == 0) internal::FatalG("sync: unlock of unlocked mutex");
    if (old & kStarving) {
      // Starvation mode, which only a waiter can end, and only after this
      // hand-off: newcomers do not take the lock meanwhile, so nobody's Lock
      // returns before the first waiter's, which the release makes.
      state_.fetch_sub(kLocked, std::memory_order_release);
      return internal::SemRelease(&sema_, &waiters_);  // the caller yields to it
    }
    // Wake a waiter unless none sleeps or one is awake already (spinning, or
    // woken and not yet back).
    bool wake = (old >> kWaiterShift) != 0 && (old & kWoken) == 0;
    int32_t next = old & ~kLocked;
    if (wake) next = (next - (1 << kWaiterShift)) | kWoken;
    if (state_.compare_exchange_weak(old, next, std::memory_order_release, std::memory_order_relaxed)) {
      if (wake) {
        if (auto hook = internal::mutex_unlock_wake_hook.load(std::memory_order_relaxed)) hook();
        internal::SemRelease(&sema_, &waiters_);
      }
      return false;
    }
  }
}

// ---------------------------------------------------------------------------
// RWMutex
//
// Go's algorithm. readers_ counts the readers that hold the lock or wait for
// it; a writer, once it holds writer_ (which settles the writers among
// themselves), announces itself by taking kMaxReaders off it. From then on an
// RLock that finds readers_ negative sleeps on reader_sema_, and the writer
// waits for the readers it found (the count it took kMaxReaders from) to
// leave: it adds their number to departing_, each of them takes one off as
// it leaves (its RUnlock found readers_ negative), and whoever brings
// departing_ to zero - the writer itself if they had all left already, or
// the last reader - lets the writer in. The writer's Unlock gives kMaxReaders
// back; what it then finds in readers_ is the number of readers that blocked
// meanwhile, and it wakes that many.
//
// The order of Unlock's steps is goro's own. Go gives readers_ back first,
// then wakes the blocked readers, then unlocks writer_: a reader can then
// get in, get out and - being the last user, as the std::shared_mutex rule
// allows - destroy the RWMutex while the Unlock has writer_ (or the readers'
// semaphore) still to touch. Go's garbage collector makes that harmless; here
// it would be a use after free. So Unlock unlocks writer_ first, while the
// lock is still write-held (readers_ negative), when no one can take the
// RWMutex for unlocked and destroy it. Its last touch is then the addition
// to readers_, or a semaphore release that comes after it:
//  - readers_ back at zero: nothing follows; readers and writers may come
//    and go, and the RWMutex may be destroyed.
//  - readers_ above zero: that many readers are blocked in RLock, and the
//    RWMutex cannot be destroyed while they are; one SemReleaseN wakes them
//    all, and none of their SemAcquire calls returns before it is done with
//    the semaphore (core/sema.h). (A reader that comes after a new writer
//    may take one of those wake-ups from a slower reader blocked earlier -
//    the semaphore's count is not addressed to anyone - but then the new
//    writer, which counted the slower reader, waits in Lock until as many
//    readers as it counted have left, which takes every one of the wake-ups.)
//  - readers_ still negative: the next writer took writer_ in the gap and
//    announced itself before the kMaxReaders came back (readers_ went down to
//    -2 * kMaxReaders plus the blocked readers). Its Lock found readers_
//    negative and sleeps on writer_sema_ unconditionally; the Unlock stands
//    in for its announcement: it puts the blocked readers into departing_ for
//    it, wakes them, and, when there were none, wakes the writer itself. That
//    writer is in Lock until the last woken reader (or this Unlock) releases
//    writer_sema_, so nothing can destroy the RWMutex before; and each woken
//    reader's RUnlock comes after the SemAcquire that the SemReleaseN has
//    finished with. The blocked readers get the lock before that writer, as
//    in Go, where they are woken before the next writer can announce itself.
// An RUnlock's last touch is its subtraction from readers_, or, if a writer
// waits for it, from departing_, or the release of writer_sema_ that lets the
// writer in; the writer's Lock returns only after that release. Lock, RLock,
// TryLock and TryRLock touch the RWMutex only while their caller is in a lock
// function, when it may not be destroyed.

namespace {

// More than any number of readers; twice it is the lowest readers_ can be.
constexpr int32_t kMaxReaders = 1 << 30;

}  // namespace

void RWMutex::RLock() {
  internal::EnterFastPath();
  if (readers_.fetch_add(1, std::memory_order_acq_rel) >= 0) return;
  RLockSlow();  // a writer holds the lock or waits for it
}

void RWMutex::RLockSlow() {
  internal::RuntimeScope scope;
  internal::SemAcquire(&reader_sema_, &reader_waiters_, false, WaitReason::kSyncRWMutexRLock);
}

bool RWMutex::TryRLock() {
  internal::EnterFastPath();
  int32_t c = readers_.load(std::memory_order_relaxed);
  while (c >= 0) {
    if (readers_.compare_exchange_weak(c, c + 1, std::memory_order_acquire, std::memory_order_relaxed)) {
      return true;
    }
  }
  return false;
}

void RWMutex::RUnlock() {
  internal::G* g = internal::NoteEntry();
  int32_t old = readers_.fetch_sub(1, std::memory_order_acq_rel);
  if (old <= 0) RUnlockSlow(old);  // a writer waits for the readers to leave, or misuse
  internal::SafePoint(g);          // after the release: see SafePoint
}

void RWMutex::RUnlockSlow(int32_t old) {
  internal::RuntimeScope scope{internal::RuntimeScope::Releasing{}};
  // Nobody held it for reading: unlocked, write-held with nobody blocked, or
  // with nobody blocked in the gap where the next writer has announced itself
  // before the last one's Unlock gave its count back (INT32_MIN; the
  // subtraction wrapped).
  if (old == 0 || old == -kMaxReaders || old == INT32_MIN) {
    internal::FatalG("sync: RUnlock of unlocked RWMutex");
  }
  if (departing_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
    // The last reader the writer waits for.
    internal::SemRelease(&writer_sema_, &writer_waiters_);
  }
}

void RWMutex::Lock() {
  writer_.Lock();
  int32_t readers = readers_.fetch_add(-kMaxReaders, std::memory_order_acq_rel);
  if (readers == 0) return;
  LockSlow(readers);
}

void RWMutex::LockSlow(int32_t readers) {
  internal::RuntimeScope scope;
  // readers < 0: the previous writer's Unlock has not given its kMaxReaders
  // back yet, and will count our readers for us.
  if (readers > 0 && departing_.fetch_add(readers, std::memory_order_acq_rel) + readers == 0) return;
  internal::SemAcquire(&writer_sema_, &writer_waiters_, false, WaitReason::kSyncRWMutexLock);
}

bool RWMutex::TryLock() {
  if (!writer_.TryLock()) return false;
  int32_t unlocked = 0;
  if (!readers_.compare_exchange_strong(unlocked, -kMaxReaders, std::memory_order_acq_rel,
                                        std::memory_order_relaxed)) {
    writer_.Unlock();
    return false;
  }
  return true;
}

void RWMutex::Unlock() {
  internal::G* g = internal::NoteEntry();
  if (readers_.load(std::memory_order_relaxed) >= 0) {
    internal::RuntimeScope scope;
    internal::FatalG("sync: Unlock of unlocked RWMutex");
  }
  // First: see above. No safe point, nor a yield to a writer it hands
  // writer_ to, while still write-held.
  const bool handed_off = writer_.Release();
  if (auto hook = internal::rwmutex_unlock_hook.load(std::memory_order_relaxed)) [[unlikely]] {
    hook(internal::RWMutexUnlockPoint::kGap);
  }
  int32_t old = readers_.fetch_add(kMaxReaders, std::memory_order_acq_rel);
  if (old != -kMaxReaders) UnlockSlow(old);  // readers blocked, or a writer next
  if (handed_off) internal::YieldToHandedOff();
  internal::SafePoint(g);  // after the release: see SafePoint
}

void RWMutex::UnlockSlow(int32_t old) {
  internal::RuntimeScope scope{internal::RuntimeScope::Releasing{}};
  if (old >= 0) internal::FatalG("sync: Unlock of unlocked RWMutex");  // two Unlocks raced
  int32_t readers = old + kMaxReaders;  // what readers_ holds now
  auto hook = internal::rwmutex_unlock_hook.load(std::memory_order_relaxed);
  if (hook != nullptr) hook(internal::RWMutexUnlockPoint::kWake);
  if (readers > 0) {
    // The readers that blocked while we held the lock.
    internal::SemReleaseN(&reader_sema_, &reader_waiters_, static_cast<uint32_t>(readers));
    return;
  }
  // Below zero: the next writer has announced itself. The readers blocked
  // behind us go first, and it waits for them as if it had found them.
  int32_t blocked = readers + kMaxReaders;
  if (blocked == 0) {
    internal::SemRelease(&writer_sema_, &writer_waiters_);
    return;
  }
  departing_.fetch_add(blocked, std::memory_order_acq_rel);
  internal::SemReleaseN(&reader_sema_, &reader_waiters_, static_cast<uint32_t>(blocked));
}

// ---------------------------------------------------------------------------
// Once

void Once::DoSlow(absl::FunctionRef<void()> f) {
  std::lock_guard<Mutex> lock(mu_);  // unlocked if f throws: not done then
  if (done_.load(std::memory_order_relaxed) != 0) return;
  f();
  done_.store(1, std::memory_order_release);
}

// ---------------------------------------------------------------------------
// CondVar
//
// Waiters queue FIFO on the CondVar's own lock. A waiter is enqueued before
// the user's Mutex is released (so no Signal after that can be missed) and
// parks afterwards; the `state` on its own record tells a waker whether it
// has parked yet, and so whether to Ready it or just mark it woken so that it
// does not park.
//
// As POSIX allows, the CondVar may be destroyed once no waiter is queued on
// it: right after a SignalAll, say, while the waiters it woke are still on
// their way out of Wait. So once a waker has unlinked a waiter, nothing that
// waiter's Wait still does may touch the CondVar unless the destructor waits
// for it. Its park commit touches only its record. The timer of a WaitFor is
// the exception: its callback runs on some M, unordered with the waker, and
// takes lock_ to see whether the waiter is still queued. timers_ counts the
// timers that may still do so, and ~CondVar waits until it is zero. Whoever
// removes a timer before it fires drops its count: the waker of a parked
// waiter, after dropping lock_ and before making it runnable (the record,
// which the waiter gives back once it runs, is valid until then); the park
// commit of a waiter woken while it was committing; ~CondVar for a waiter it detaches. A fired
// timer's callback drops it as its last touch of the CondVar. The timer is
// added only in the park commit, so a waiter woken before its commit began
// has none: its waker drops the count, under lock_. (That waiter may be
// anywhere between its Unlock of the Mutex - which in starvation mode hands
// the Mutex over and yields - and its park, and at exit it may be frozen
// there for good.) So ~CondVar never
// waits for a woken waiter to run - which one frozen at exit never does -
// only for a callback or a waker already under way, in runtime code.
//
// A CondVar destroyed with waiters still queued (a global one as the program
// returns from main, with goroutines blocked on it) detaches them: nothing
// can signal them any more, but a WaitFor still times out, and its timer's
// callback must then not touch the CondVar. Callback and destructor settle
// which of them owns the timer's count with one CAS on the waiter's
// `timer_state`.

struct CondVar::Waiter {
  // `state`: kWaiting until the park commit begins (kCommitting: it adds the
  // timer) and ends (kParked), or a waker (holding lock_) makes it kWoken
  // from any of them. The waker Readies the goroutine only if it had parked,
  // and drops the timer's count if the commit had not begun.
  static constexpr uint32_t kWaiting = 0;
  static constexpr uint32_t kParked = 1;
  static constexpr uint32_t kWoken = 2;
  static constexpr uint32_t kCommitting = 3;
  // `timer_state` of a WaitFor: kAttached until its callback starts
  // (kTimingOut: it will take lock_ and drop the count) or ~CondVar detaches
  // the waiter (kDetached: the destructor dropped the count; the callback
  // must not touch the CondVar).
  static constexpr uint32_t kAttached = 0;
  static constexpr uint32_t kTimingOut = 1;
  static constexpr uint32_t kDetached = 2;

  internal::G* g = nullptr;
  Waiter* next = nullptr;  // next, prev, queued: guarded by the CondVar's lock_
  Waiter* prev = nullptr;
  bool queued = false;
  bool timed = false;      // a WaitFor: its timer's count is in timers_
  bool signalled = false;  // written by the waker before it stores kWoken
  std::atomic<uint32_t> state{kWaiting};
  std::atomic<uint32_t> timer_state{kAttached};
  CondVar* cv = nullptr;
  internal::Timer* timer = nullptr;  // a WaitFor's, on the waiter's stack; set before it is queued
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

}  // namespace

// Friend-free access to the private queue: the timer callback and the
// signallers share these helpers through CondVar's public Waiter type.
//
// A waiter may destroy the CondVar as soon as its Wait returns, so a waker
// makes a parked waiter runnable only after dropping lock_, its last touch of
// the CondVar: WakeLocked returns the goroutine to Ready then.
struct CondVarAccess {
  // Unlinks w (lock_ held) and returns its goroutine if it has parked. If it
  // has not, its commit sees kWoken and does not park: w may be gone as soon
  // as the exchange is done. If its commit had not even begun, it never adds
  // its timer, and the timer's count is dropped here: the waiter may not run
  // again (frozen at exit) while ~CondVar waits for the count.
  static internal::G* WakeLocked(CondVar* cv, CondVar::Waiter* w, bool signalled) {
    Unlink(cv->head_, cv->tail_, w);
    w->signalled = signalled;
    const bool timed = w->timed;
    internal::G* g = w->g;
    uint32_t was = w->state.exchange(CondVar::Waiter::kWoken, std::memory_order_acq_rel);
    if (was == CondVar::Waiter::kWaiting && timed) cv->timers_.fetch_sub(1, std::memory_order_release);
    return was == CondVar::Waiter::kParked ? g : nullptr;
  }
  // Marks w woken; returns its goroutine to Ready if it had parked. Touches
  // only the record. For a waiter no longer queued, a waker may have woken
  // it already (then this does nothing), or ~CondVar detached it (then this
  // times it out).
  static internal::G* WakeDetached(CondVar::Waiter* w) {
    internal::G* g = w->g;
    uint32_t was = w->state.exchange(CondVar::Waiter::kWoken, std::memory_order_acq_rel);
    return was == CondVar::Waiter::kParked ? g : nullptr;
  }
  // The record stays valid throughout, because the waiter's DelTimer waits for
  // this callback; the CondVar does, because this timer's count in timers_
  // holds its destructor back until the fetch_sub, the last touch of it.
  static void Timeout(internal::Timer* t) {
    auto* w = static_cast<CondVar::Waiter*>(t->arg);
    uint32_t attached = CondVar::Waiter::kAttached;
    if (!w->timer_state.compare_exchange_strong(attached, CondVar::Waiter::kTimingOut,
                                                std::memory_order_acq_rel)) {
      // Detached by ~CondVar, which dropped our count: the CondVar is gone.
      if (internal::G* g = WakeDetached(w)) internal::Ready(g);
      return;
    }
    CondVar* cv = w->cv;
    internal::LockWord(cv->lock_);
    internal::G* g = w->queued ? WakeLocked(cv, w, false) : WakeDetached(w);
    internal::UnlockWord(cv->lock_);
    cv->timers_.fetch_sub(1, std::memory_order_release);
    if (g != nullptr) internal::Ready(g);
  }
  // After w was woken, with lock_ not held (a firing callback holds its
  // P's timer lock and takes lock_): removes w's timer if it has not fired,
  // and then drops its count - the last touch of the CondVar, which the
  // count keeps alive until then. If it has fired, its callback dropped the
  // count (DelTimer waits for one still running). By the waker of a parked
  // waiter before it Readies it, or by the park commit of one woken while
  // it committed: never by the woken goroutine, which may not run again
  // (frozen at exit) while ~CondVar waits for the count.
  static void DropTimerOfWoken(CondVar::Waiter* w) {
    if (w->timer == nullptr || !internal::DelTimer(w->timer)) return;
    w->cv->timers_.fetch_sub(1, std::memory_order_release);
  }
  // ~CondVar with waiters still queued: unlinks them all (lock_ held).
  static void DetachAllLocked(CondVar* cv) {
    while (cv->head_ != nullptr) {
      CondVar::Waiter* w = cv->head_;
      Unlink(cv->head_, cv->tail_, w);
      uint32_t attached = CondVar::Waiter::kAttached;
      if (w->timed && w->timer_state.compare_exchange_strong(attached, CondVar::Waiter::kDetached,
                                                             std::memory_order_acq_rel)) {
        cv->timers_.fetch_sub(1, std::memory_order_relaxed);  // the callback will not
      }
      // Otherwise no timer, or its callback has started and waits for lock_:
      // it finds the waiter unlinked, times it out and drops its count.
    }
  }
};

namespace {

struct CondVarPark {
  CondVar::Waiter* w;
  internal::Timer* timer;
};

// On g0, after the waiter switched away. A waker may have unlinked it since
// it was enqueued, and the CondVar may be gone: only the waiter's record and
// timer are touched. A successful CAS to kParked is the last touch of those
// too, since a waker that sees kParked Readies the goroutine, which then gives
// the record back (core/wait_record.h) and ends the timer's frame. A waiter woken before the commit began has no timer, and its
// waker dropped the count; one woken while committing takes its timer back
// here, on g0, where nothing can freeze it at exit: ~CondVar may be waiting
// for the count (which keeps the CondVar alive until the fetch_sub).
bool CommitCondVarPark(internal::G*, void* arg) {
  auto* a = static_cast<CondVarPark*>(arg);
  CondVar::Waiter* w = a->w;
  uint32_t waiting = CondVar::Waiter::kWaiting;
  if (!w->state.compare_exchange_strong(waiting, CondVar::Waiter::kCommitting, std::memory_order_acq_rel)) {
    return false;
  }
  if (a->timer != nullptr) internal::AddTimer(a->timer);
  uint32_t committing = CondVar::Waiter::kCommitting;
  if (w->state.compare_exchange_strong(committing, CondVar::Waiter::kParked, std::memory_order_acq_rel)) return true;
  CondVarAccess::DropTimerOfWoken(w);
  return false;
}

}  // namespace

CondVar::~CondVar() {
  // Goroutines still blocked on it, as on a global CondVar when the program
  // returns from main, are detached: nothing can signal them any more, and
  // their timers (which may be hours away) are not waited for. Not an error:
  // a Go program may end with goroutines blocked too.
  {
    // Not set aside holding lock_: a timeout callback of a waiter still
    // queued would spin on it, on g0, and never let this goroutine run again.
    internal::InRuntimeScope in_runtime;
    internal::LockWord(lock_);
    CondVarAccess::DetachAllLocked(this);
    if (auto hook = internal::condvar_detach_hook.load(std::memory_order_relaxed)) [[unlikely]] hook();
    internal::UnlockWord(lock_);
  }
  if (timers_.load(std::memory_order_acquire) == 0) return;
  // A woken WaitFor's timer callback is running, or its waker (or park
  // commit) is between lock_ and dropping the count: runtime code, under
  // way, that drops it without waiting for any goroutine to run.
  internal::RuntimeScope scope;
  while (timers_.load(std::memory_order_acquire) != 0) internal::YieldNow();
}

void CondVar::Wait(Mutex& mu) { WaitUntilNanos(mu, 0); }

bool CondVar::WaitFor(Mutex& mu, absl::Duration d) { return WaitUntilNanos(mu, internal::NanotimeIn(d)); }

bool CondVar::WaitUntilNanos(Mutex& mu, int64_t deadline_ns) {
  internal::EnsureStarted(Options{});
  internal::RuntimeScope scope;
  internal::WaitRecord<Waiter> w;
  w->g = internal::CurrentG();
  w->cv = this;
  internal::Timer timer;
  if (deadline_ns != 0) {
    timer.when = deadline_ns;
    timer.f = CondVarAccess::Timeout;
    timer.arg = w.get();
    w->timer = &timer;
  }
  internal::LockWord(lock_);
  w->prev = tail_;
  if (tail_ != nullptr) {
    tail_->next = w.get();
  } else {
    head_ = w.get();
  }
  tail_ = w.get();
  w->queued = true;
  w->timed = deadline_ns != 0;
  // Counted under lock_, so that whoever unlinks w, and so may let the
  // CondVar be destroyed, has seen it.
  if (w->timed) timers_.fetch_add(1, std::memory_order_relaxed);
  internal::UnlockWord(lock_);
  mu.Unlock();

  CondVarPark park{w.get(), w->timer};
  internal::Park(WaitReason::kCondVarWait, CommitCondVarPark, &park);
  // Whoever woke us removed the timer (and dropped its count), or it fired.
  // After DelTimer the timeout callback is not running either, so `w` may
  // safely go back to its pool, and `timer` away with this frame. (Were the timer still there, its count
  // would be ours to drop, and would keep this CondVar alive until then.)
  if (deadline_ns != 0 && internal::DelTimer(&timer)) timers_.fetch_sub(1, std::memory_order_release);
  mu.Lock();
  return w->signalled;
}

void CondVar::Signal() {
  internal::RuntimeScope scope;
  internal::G* g = nullptr;
  Waiter* w = nullptr;
  internal::LockWord(lock_);
  if (head_ != nullptr) {
    w = head_;
    g = CondVarAccess::WakeLocked(this, w, true);
  }
  if (auto hook = internal::condvar_signal_hook.load(std::memory_order_relaxed)) hook();
  internal::UnlockWord(lock_);
  if (g != nullptr) {
    CondVarAccess::DropTimerOfWoken(w);  // w is valid until g runs
    internal::Ready(g);
  }
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
    CondVarAccess::DropTimerOfWoken(parked);  // valid until g runs
    internal::Ready(g);
    parked = next;
  }
}

}  // namespace goro
