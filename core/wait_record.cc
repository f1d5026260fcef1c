#include "core/wait_record.h"

#include <new>

#include "core/fatal.h"
#include "core/lock.h"
#include "core/runtime.h"
#include "goro/preempt.h"

namespace goro::internal {

namespace {

constexpr int kBatch = kWaitRecordBatch;

// Slots are made this many at a time, in one block: the records of
// goroutines that block together lie side by side. Blocks are never freed
// (nor are Go's sudogs, short of a GC): a program that once had 100,000
// goroutines blocked keeps 12.5 MiB of slots.
constexpr int kSlotsPerBlock = 2 * kBatch;

// A free slot on the shared list. The list holds whole batches, the half of
// a cache that Refill and Spill trade: kBatch slots chained by `next`, the
// first of which links the batch to the next one. Each trade is then one
// push or pop under the lock; the chaining, and any new block, are done
// outside it. Under ASan the link words are the only bytes of a free slot
// that are not poisoned.
struct FreeSlot {
  FreeSlot* next;
  FreeSlot* next_batch;
};
static_assert(sizeof(FreeSlot) <= kWaitRecordSize);

struct Shared {
  SpinLock lock;
  FreeSlot* batches = nullptr;  // guarded by lock
  int64_t nbatches = 0;         // guarded by lock
  int64_t made = 0;             // guarded by lock
};
// Constant-initialised and trivially destructible: goroutines may block
// from the program's static constructors and destructors.
constinit Shared shared;

// Chains slots[0..kBatch) into a batch (outside the lock).
FreeSlot* Chain(void* const* slots) {
  for (int i = 0; i < kBatch; ++i) {
#if defined(GORO_ASAN)
    ASAN_UNPOISON_MEMORY_REGION(slots[i], sizeof(FreeSlot));
#endif
    auto* f = static_cast<FreeSlot*>(slots[i]);
    f->next = i + 1 < kBatch ? static_cast<FreeSlot*>(slots[i + 1]) : nullptr;
    f->next_batch = nullptr;
  }
  return static_cast<FreeSlot*>(slots[0]);
}

// A new block, outside every lock: one batch for the caller; the other goes
// on the shared list.
FreeSlot* NewBlock() {
  void* block = ::operator new(kWaitRecordSize * kSlotsPerBlock, std::align_val_t{kWaitRecordAlign},
                               std::nothrow);
  if (block == nullptr) Fatal("WaitRecordAlloc: out of memory for wait records");
  void* slots[kSlotsPerBlock];
  for (int i = 0; i < kSlotsPerBlock; ++i) {
    slots[i] = static_cast<char*>(block) + i * kWaitRecordSize;
    PoisonWaitRecord(slots[i]);
  }
  FreeSlot* mine = Chain(slots);
  FreeSlot* spare = Chain(slots + kBatch);
  shared.lock.Lock();
  spare->next_batch = shared.batches;
  shared.batches = spare;
  shared.nbatches++;
  shared.made += kSlotsPerBlock;
  shared.lock.Unlock();
  return mine;
}

}  // namespace

void WaitRecordRefill(P* p) {
  int n = p->wait_records_n;
  if (n > kWaitRecordCacheSize - kBatch) Fatal("WaitRecordRefill: no room in the P's cache");
  shared.lock.Lock();
  FreeSlot* batch = shared.batches;
  if (batch != nullptr) {
    shared.batches = batch->next_batch;
    shared.nbatches--;
  }
  shared.lock.Unlock();
  if (batch == nullptr) batch = NewBlock();
  for (FreeSlot* f = batch; f != nullptr;) {
    FreeSlot* next = f->next;
    PoisonWaitRecord(f);
    p->wait_records[n++] = f;
    f = next;
  }
  SetWaitRecordCount(p, n);
}

void WaitRecordSpill(P* p) {
  FreeSlot* batch = Chain(p->wait_records);
  shared.lock.Lock();
  batch->next_batch = shared.batches;
  shared.batches = batch;
  shared.nbatches++;
  shared.lock.Unlock();
  for (int i = kBatch; i < p->wait_records_n; ++i) p->wait_records[i - kBatch] = p->wait_records[i];
  SetWaitRecordCount(p, p->wait_records_n - kBatch);
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
  shared.lock.Lock();
  const int64_t made = shared.made;
  idle += shared.nbatches * kBatch;
  shared.lock.Unlock();
  return made - idle;
}

}  // namespace goro::internal
