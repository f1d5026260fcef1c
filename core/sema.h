// Semaphores for goroutines: the sleeping half of Mutex and WaitGroup
// (Go's runtime semaphores, sema.go).
//
// SemAcquire waits until *count > 0 and decrements it; SemRelease increments
// it and wakes one waiter. Waiters' records (core/wait_record.h) are queued on
// the SemaQueue that the Mutex or WaitGroup embeds next to its count. (Go
// keeps one global table of queues hashed by address, because its Mutex must
// stay 8 bytes; a C++ object can carry its own queue, which makes a wake-up
// O(1) no matter how many goroutines sleep on other objects.)
#ifndef GORO_CORE_SEMA_H_
#define GORO_CORE_SEMA_H_

#include <atomic>
#include <cstdint>

#include "core/runtime.h"
#include "goro/sync.h"

namespace goro::internal {

// With lifo, the waiter goes to the front of the queue (a Mutex waiter that
// already waited once).
void SemAcquire(std::atomic<uint32_t>* count, SemaQueue* q, bool lifo, WaitReason reason);
// The count goes to the first queued waiter, or to *count if none waits;
// returns whether a waiter got it. Once a SemAcquire has returned, the
// release that satisfied it no longer touches *count or *q: the object
// holding them may be destroyed.
bool SemRelease(std::atomic<uint32_t>* count, SemaQueue* q);
// n releases at once, with the same guarantee for every one of them.
bool SemReleaseN(std::atomic<uint32_t>* count, SemaQueue* q, uint32_t n);
// After a Mutex in starvation mode was handed to a waiter, and the lock
// that holds it (an RWMutex's too) is released: lets that waiter run now,
// on this P, rather than after the caller's time slice - unless the caller
// keeps other goroutines off its thread (a NoPreemptScope, dl_iterate_phdr's
// wrapper), as Go yields only when its M holds no locks.
void YieldToHandedOff();

// Test seam (tests/sync_test.cc): when set, Mutex::Unlock calls it after it
// has released the lock and before it wakes a waiter, the last point at
// which it touches the Mutex. Unset outside that test.
extern std::atomic<void (*)()> mutex_unlock_wake_hook;
// The same for CondVar::Signal and SignalAll: called once a waiter has been
// chosen, before the signaller's last touch of the CondVar.
extern std::atomic<void (*)()> condvar_signal_hook;
// And for ~CondVar with waiters still queued: called with the CondVar's lock
// held, once they are detached.
extern std::atomic<void (*)()> condvar_detach_hook;
// The same for RWMutex::Unlock (tests/rwmutex_test.cc), called with where it
// is: kGap between its unlock of the writers' Mutex and its return of the
// readers' count (the lock is still write-held), kWake just before it wakes
// the blocked readers or the waiting writer (its last touches).
enum class RWMutexUnlockPoint { kGap, kWake };
extern std::atomic<void (*)(RWMutexUnlockPoint)> rwmutex_unlock_hook;

}  // namespace goro::internal

#endif  // GORO_CORE_SEMA_H_
