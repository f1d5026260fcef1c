#include "core/wait_record.h"

#include <vector>

#include "core/fatal.h"
#include "core/lock.h"
#include "core/runtime.h"
#include "goro/preempt.h"

namespace goro::internal {

namespace {

// Slots are made this many at a time, in one block: the records of
// goroutines that block together lie side by side. Blocks are never freed
// (nor are Go's sudogs, short of a GC): a program that once had 100,000
// goroutines blocked keeps 12.5 MiB of slots.
constexpr int kSlotsPerBlock = 64;

struct Shared {
  SpinLock lock;
  std::vector<void*> slots;  // guarded by lock
  size_t made = 0;           // guarded by lock
};
// Constant-initialised: goroutines may block from the program's static
// constructors, before this file's own have run.
constinit Shared* shared_ptr = nullptr;
constinit SpinLock shared_init;

Shared& GetShared() {
  Shared* s = __atomic_load_n(&shared_ptr, __ATOMIC_ACQUIRE);
  if (s != nullptr) return *s;
  shared_init.Lock();
  if (shared_ptr == nullptr) __atomic_store_n(&shared_ptr, new Shared(), __ATOMIC_RELEASE);
  shared_init.Unlock();
  return *shared_ptr;
}

// Appends a new block's slots to s.slots (s.lock held).
void NewBlock(Shared& s) {
  void* block = ::operator new(kWaitRecordSize * kSlotsPerBlock, std::align_val_t{kWaitRecordAlign},
                               std::nothrow);
  if (block == nullptr) Fatal("WaitRecordAlloc: out of memory for wait records");
  for (int i = kSlotsPerBlock - 1; i >= 0; --i) {
    void* slot = static_cast<char*>(block) + i * kWaitRecordSize;
    PoisonWaitRecord(slot);
    s.slots.push_back(slot);
  }
  s.made += kSlotsPerBlock;
}

}  // namespace

void WaitRecordRefill(P* p) {
  Shared& s = GetShared();
  s.lock.Lock();
  if (s.slots.size() < static_cast<size_t>(kWaitRecordCacheSize / 2)) NewBlock(s);
  for (int i = 0; i < kWaitRecordCacheSize / 2; ++i) {
    p->wait_records[i] = s.slots.back();
    s.slots.pop_back();
  }
  s.lock.Unlock();
  SetWaitRecordCount(p, kWaitRecordCacheSize / 2);
}

void WaitRecordSpill(P* p) {
  Shared& s = GetShared();
  constexpr int kHalf = kWaitRecordCacheSize / 2;
  s.lock.Lock();
  s.slots.insert(s.slots.end(), p->wait_records, p->wait_records + kHalf);
  s.lock.Unlock();
  for (int i = kHalf; i < p->wait_records_n; ++i) p->wait_records[i - kHalf] = p->wait_records[i];
  SetWaitRecordCount(p, p->wait_records_n - kHalf);
}

// Only goroutines take slots, and they give them back inside a RuntimeScope,
// which holds a P; a plain thread's record lives in its WaitRecord.
void WaitRecordFreeWithoutP() { Fatal("WaitRecordFree: no P (a slot given back outside a RuntimeScope)"); }

int64_t WaitRecordsInUse() {
  // A goroutine preempted holding the shared lock would leave its P's next
  // Refill spinning on it for ever, with no preemption to let it go.
  goro::NoPreemptScope no_preempt;
  int64_t idle = 0;
  for (P* p : sched.allp) idle += __atomic_load_n(&p->wait_records_n, __ATOMIC_RELAXED);
  Shared& s = GetShared();
  s.lock.Lock();
  const int64_t made = static_cast<int64_t>(s.made);
  idle += static_cast<int64_t>(s.slots.size());
  s.lock.Unlock();
  return made - idle;
}

}  // namespace goro::internal
