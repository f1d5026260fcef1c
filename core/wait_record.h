// Wait records: what a blocked goroutine leaves for the goroutine that will
// wake it (a semaphore's, a channel's or a CondVar's waiter). They come from
// per-P caches of fixed-size slots, as Go's sudogs do, not from the waiter's
// stack. A waker that wakes thousands of goroutines (SignalAll, Close, the
// end of a WaitGroup) walks their records; on the waiters' stacks, 1 MiB and
// a guard apart, each record was a TLB miss with its own page-table page,
// which doubled the cost of a wake on a VM. In slots they lie side by side.
//
// A record is taken and given back by its waiter: taken before it is
// queued, given back after the waiter has woken, when no waker touches it
// any more, which is the lifetime a record on the waiter's stack had. A
// plain thread, which has no P, uses the shared list.
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

// The caches' slow paths (an empty or full cache, or no P), in wait_record.cc.
void* WaitRecordAllocSlow();
void WaitRecordFreeSlow(void* slot);

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

// A slot of kWaitRecordSize bytes, aligned to kWaitRecordAlign. On a
// goroutine, only inside a RuntimeScope, which keeps the P the cache
// belongs to.
inline void* WaitRecordAlloc() {
  M* m = CurrentM();
  P* p = m != nullptr ? m->p : nullptr;
  if (p == nullptr || p->wait_records_n == 0) return WaitRecordAllocSlow();
  const int n = p->wait_records_n - 1;
  void* slot = p->wait_records[n];
  __atomic_store_n(&p->wait_records_n, n, __ATOMIC_RELAXED);  // WaitRecordsInUse reads it racily
  UnpoisonWaitRecord(slot);
  return slot;
}

// Gives back a slot of WaitRecordAlloc's, under the same rule.
inline void WaitRecordFree(void* slot) {
  M* m = CurrentM();
  P* p = m != nullptr ? m->p : nullptr;
  if (p == nullptr || p->wait_records_n == kWaitRecordCacheSize) return WaitRecordFreeSlow(slot);
  PoisonWaitRecord(slot);
  const int n = p->wait_records_n;
  p->wait_records[n] = slot;
  __atomic_store_n(&p->wait_records_n, n + 1, __ATOMIC_RELAXED);
}

// Slots taken and not given back: exact when every P is idle or its owner
// is the caller (for tests).
int64_t WaitRecordsInUse();

// One T in a slot for the lifetime of this object (a local of the waiting
// function, inside its RuntimeScope).
template <typename T>
class WaitRecord {
 public:
  static_assert(sizeof(T) <= kWaitRecordSize && alignof(T) <= kWaitRecordAlign);
  WaitRecord() : t_(new (WaitRecordAlloc()) T()) {}
  ~WaitRecord() {
    t_->~T();
    WaitRecordFree(t_);
  }
  WaitRecord(const WaitRecord&) = delete;
  WaitRecord& operator=(const WaitRecord&) = delete;
  T* get() const { return t_; }
  T* operator->() const { return t_; }
  T& operator*() const { return *t_; }

 private:
  T* const t_;
};

}  // namespace goro::internal

#endif  // GORO_CORE_WAIT_RECORD_H_
