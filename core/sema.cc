#include "core/sema.h"

#include "core/fatal.h"
#include "core/wait_record.h"

namespace goro::internal {

namespace {

struct SemaWaiter {
  G* g = nullptr;
  SemaWaiter* next = nullptr;
  bool ticket = false;  // the releaser handed the count over directly
};

bool CanAcquire(std::atomic<uint32_t>* count) {
  uint32_t v = count->load(std::memory_order_relaxed);
  while (v > 0) {
    if (count->compare_exchange_weak(v, v - 1, std::memory_order_acquire)) return true;
  }
  return false;
}

void Enqueue(SemaQueue* q, SemaWaiter* w, bool lifo) {
  auto* head = static_cast<SemaWaiter*>(q->head);
  auto* tail = static_cast<SemaWaiter*>(q->tail);
  w->next = nullptr;
  if (head == nullptr) {
    q->head = q->tail = w;
  } else if (lifo) {
    w->next = head;
    q->head = w;
  } else {
    tail->next = w;
    q->tail = w;
  }
}

SemaWaiter* Dequeue(SemaQueue* q) {
  auto* w = static_cast<SemaWaiter*>(q->head);
  if (w == nullptr) return nullptr;
  q->head = w->next;
  if (q->head == nullptr) q->tail = nullptr;
  w->next = nullptr;
  return w;
}

bool UnlockQueue(G*, void* arg) {
  UnlockWord(static_cast<SemaQueue*>(arg)->lock);
  return true;
}

}  // namespace

// The object that embeds the count and the queue (a WaitGroup, a Mutex) may
// be destroyed as soon as SemAcquire returns: Run's WaitGroup lives on its
// caller's stack, and C++ code frees a Mutex once it is unlocked. So a
// releaser touches the object only while it holds the queue's lock, and an
// acquirer returns only after the lock was free: one that finds a count
// without waiting still takes and drops the lock, to wait out a releaser
// that made the count and has not unlocked yet. A queued waiter is handed
// its count directly (a ticket), so that it never has to look at the object
// again either. (Go needs none of this: its garbage collector keeps the
// object alive while anyone still refers to it.)
void SemAcquire(std::atomic<uint32_t>* count, SemaQueue* q, bool lifo, WaitReason reason) {
  if (CanAcquire(count)) {
    LockWord(q->lock);
    UnlockWord(q->lock);
    return;
  }
  RuntimeScope scope;  // for the record's P cache: Run's wait comes without one
  WaitRecord<SemaWaiter> w;
  LockWord(q->lock);
  if (CanAcquire(count)) {
    UnlockWord(q->lock);
    return;
  }
  q->nwait.fetch_add(1, std::memory_order_relaxed);
  w->g = CurrentG();
  w->ticket = false;
  Enqueue(q, w.get(), lifo);
  Park(reason, UnlockQueue, q);
  if (!w->ticket) Fatal("SemAcquire: woken without a ticket");
}

// Releases n counts: to queued waiters first (tickets), the rest to *count.
// The waiters are made runnable after the lock is dropped, from their
// records; nothing of the object is touched after UnlockWord.
bool SemReleaseN(std::atomic<uint32_t>* count, SemaQueue* q, uint32_t n) {
  SemaWaiter* woken = nullptr;
  LockWord(q->lock);
  for (; n > 0; --n) {
    SemaWaiter* w = Dequeue(q);
    if (w == nullptr) break;
    q->nwait.fetch_sub(1, std::memory_order_relaxed);
    w->ticket = true;
    w->next = woken;
    woken = w;
  }
  if (n > 0) count->fetch_add(n, std::memory_order_release);
  UnlockWord(q->lock);
  bool any = woken != nullptr;
  while (woken != nullptr) {
    SemaWaiter* next = woken->next;
    G* g = woken->g;  // g gives the record back once it runs: not touched after
    Ready(g);
    woken = next;
  }
  return any;
}

bool SemRelease(std::atomic<uint32_t>* count, SemaQueue* q) { return SemReleaseN(count, q, 1); }

void YieldToHandedOff() {
  RuntimeScope scope;
  G* self = CurrentGoroutine();
  if (self == nullptr || !HoldsOffPreemption(self->preempt_off.load(std::memory_order_relaxed))) YieldNow();
}

}  // namespace goro::internal
