#include "core/sema.h"

#include "core/fatal.h"

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

void SemAcquire(std::atomic<uint32_t>* count, SemaQueue* q, bool lifo, WaitReason reason) {
  if (CanAcquire(count)) return;
  SemaWaiter w;
  for (;;) {
    LockWord(q->lock);
    // Count ourselves before the last look, so that a releaser either sees us
    // waiting or we see its increment.
    q->nwait.fetch_add(1, std::memory_order_seq_cst);
    if (CanAcquire(count)) {
      q->nwait.fetch_sub(1, std::memory_order_relaxed);
      UnlockWord(q->lock);
      return;
    }
    w.g = CurrentG();
    w.ticket = false;
    Enqueue(q, &w, lifo);
    Park(reason, UnlockQueue, q);
    if (w.ticket || CanAcquire(count)) return;
    lifo = true;  // woken but beaten to it: wait at the front
  }
}

void SemRelease(std::atomic<uint32_t>* count, SemaQueue* q, bool handoff) {
  count->fetch_add(1, std::memory_order_seq_cst);
  if (q->nwait.load(std::memory_order_seq_cst) == 0) return;
  LockWord(q->lock);
  SemaWaiter* w = Dequeue(q);
  if (w != nullptr) q->nwait.fetch_sub(1, std::memory_order_relaxed);
  UnlockWord(q->lock);
  if (w == nullptr) return;
  bool handed = handoff && CanAcquire(count);
  w->ticket = handed;
  G* g = w->g;  // w lives on g's stack: do not touch it once g may run
  Ready(g);
  if (handed) {
    // Let the waiter run now, on this P, rather than after our time slice.
    YieldNow();
  }
}

}  // namespace goro::internal
