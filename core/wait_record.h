// Wait records: what a blocked goroutine leaves for the goroutine that will
// wake it (a semaphore's, a channel's or a CondVar's waiter). They come from
// per-P caches of fixed-size slots, as Go's sudogs do, not from the waiter's
// stack. A waker that wakes thousands of goroutines (SignalAll, Close, the
// end of a WaitGroup) walks their records; on the waiters' stacks, 1 MiB and
// a guard apart, each record was a TLB miss with its own page-table page,
// which made a wake about a third dearer on a VM (docs/scheduler.md). In
// slots they lie side by side.
//
// A record is taken and given back by its waiter: taken before it is
// queued, given back after the waiter has woken, when no waker touches it
// any more, which is the lifetime a record on the waiter's stack had. A
// plain thread, which has no P, keeps its record on its stack as before: it
// takes no lock for it, so a signal handler may wait in goro on top of the
// thread's own wait.
#ifndef GORO_CORE_WAIT_RECORD_H_
#define GORO_CORE_WAIT_RECORD_H_

#include <cstddef>
#include <cstdint>
#include <new>

#include "core/runtime.h"
#include "core/sanitizer.h"

namespace goro::internal {

inline constexpr size_t kWaitRecordSize = 128;
inline constexpr size_t kWaitRecordAlign = 64;

// Slots a cache trades with the shared list at a time: half of it.
inline constexpr int kWaitRecordBatch = kWaitRecordCacheSize / 2;

// The caches' slow paths, in wait_record.cc: add a batch to p's cache, which
// holds at most kWaitRecordCacheSize - kWaitRecordBatch, from the shared
// list or a new block; move the older half of its full cache there. Neither
// allocates memory or waits with a lock held, but Refill takes the shared
// lock and may allocate: a caller must hold no runtime lock.
void WaitRecordRefill(P* p);
void WaitRecordSpill(P* p);
[[noreturn]] void WaitRecordFreeWithoutP();

// The owner's writes of p->wait_records_n; WaitRecordsInUse reads it racily.
inline void SetWaitRecordCount(P* p, int n) { __atomic_store_n(&p->wait_records_n, n, __ATOMIC_RELAXED); }

inline void PoisonWaitRecord(void* slot) {
#if defined(GORO_ASAN)
  ASAN_POISON_MEMORY_REGION(slot, kWaitRecordSize);
#else
  (void)slot;
#endif
}

inline void UnpoisonWaitRecord(void* slot) {
#if defined(GORO_ASAN)
  ASAN_UNPOISON_MEMORY_REGION(slot, kWaitRecordSize);
#else
  (void)slot;
#endif
}

// The P whose cache a goroutine takes records from (inside a RuntimeScope,
// which keeps it), or null on a plain thread.
inline P* WaitRecordP() {
  M* m = CurrentM();
  return m != nullptr ? m->p : nullptr;
}

// Makes sure that p's cache holds n <= kWaitRecordBatch slots, so that the
// next n WaitRecordAllocs on p take no lock and allocate nothing: a waiter
// calls it before it takes the lock under which it queues its records.
inline void WaitRecordReserve(P* p, int n) {
  if (p->wait_records_n < n) WaitRecordRefill(p);
}
// The same for the caller's P; nothing on a plain thread, whose record
// needs no slot.
inline void ReserveWaitRecords(int n) {
  if (P* p = WaitRecordP(); p != nullptr) WaitRecordReserve(p, n);
}

// A slot of kWaitRecordSize bytes, aligned to kWaitRecordAlign, from p's
// cache (p = WaitRecordP(), not null). Refills an empty cache, so a caller
// that holds a lock must have reserved the slot first.
inline void* WaitRecordAlloc(P* p) {
  if (p->wait_records_n == 0) WaitRecordRefill(p);
  const int n = p->wait_records_n - 1;
  void* slot = p->wait_records[n];
  SetWaitRecordCount(p, n);
  UnpoisonWaitRecord(slot);
  return slot;
}

// Gives back a slot of WaitRecordAlloc's, to the cache of the P the
// goroutine holds now (inside a RuntimeScope, so it has one).
inline void WaitRecordFree(void* slot) {
  P* p = WaitRecordP();
  if (p == nullptr) WaitRecordFreeWithoutP();
  if (p->wait_records_n == kWaitRecordCacheSize) WaitRecordSpill(p);
  PoisonWaitRecord(slot);
  const int n = p->wait_records_n;
  p->wait_records[n] = slot;
  SetWaitRecordCount(p, n + 1);
}

// Slots taken and not given back: exact when every P is idle or its owner
// is the caller (for tests).
int64_t WaitRecordsInUse();

// One T for the lifetime of this object (a local of the waiting function,
// inside its RuntimeScope): in a slot on a goroutine, in the object itself
// on a plain thread.
template <typename T>
class WaitRecord {
 public:
  static_assert(sizeof(T) <= kWaitRecordSize && alignof(T) <= kWaitRecordAlign);
  WaitRecord() {
    P* p = WaitRecordP();
    t_ = new (p != nullptr ? WaitRecordAlloc(p) : static_cast<void*>(local_)) T();
  }
  ~WaitRecord() {
    t_->~T();
    if (static_cast<void*>(t_) != static_cast<void*>(local_)) WaitRecordFree(t_);
  }
  WaitRecord(const WaitRecord&) = delete;
  WaitRecord& operator=(const WaitRecord&) = delete;
  T* get() const { return t_; }
  T* operator->() const { return t_; }
  T& operator*() const { return *t_; }

 private:
  alignas(T) unsigned char local_[sizeof(T)];
  T* t_;
};

}  // namespace goro::internal

#endif  // GORO_CORE_WAIT_RECORD_H_
