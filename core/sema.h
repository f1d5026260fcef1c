// Semaphores for goroutines: the sleeping half of Mutex and WaitGroup
// (Go's runtime semaphores, sema.go).
//
// SemAcquire(addr) waits until *addr > 0 and decrements it; SemRelease(addr)
// increments it and wakes one waiter. Waiters live on their goroutines' stacks
// and are kept in one of a fixed number of buckets hashed by address, each
// with its own lock and a waiter count that releasers read without the lock.
#ifndef GORO_CORE_SEMA_H_
#define GORO_CORE_SEMA_H_

#include <atomic>
#include <cstdint>

#include "core/runtime.h"

namespace goro::internal {

// With lifo, the waiter goes to the front of the queue (a Mutex waiter that
// already waited once). Returns how long it waited in nanoseconds.
int64_t SemAcquire(std::atomic<uint32_t>* addr, bool lifo, WaitReason reason);
// With handoff, the released count goes straight to the first waiter, which
// runs next on this P (starvation mode).
void SemRelease(std::atomic<uint32_t>* addr, bool handoff);

}  // namespace goro::internal

#endif  // GORO_CORE_SEMA_H_
