#include "core/sema.h"

#include "core/fatal.h"

namespace goro::internal {

namespace {

struct SemaWaiter {
  G* g = nullptr;
  std::atomic<uint32_t>* addr = nullptr;
  SemaWaiter* next = nullptr;
  SemaWaiter* prev = nullptr;
  bool ticket = false;  // the releaser handed the count over directly
};

constexpr int kBuckets = 251;

struct alignas(64) Bucket {
  SpinLock lock;
  std::atomic<uint32_t> nwait{0};
  SemaWaiter* head = nullptr;  // guarded by lock
  SemaWaiter* tail = nullptr;  // guarded by lock
};

Bucket buckets[kBuckets];

Bucket& BucketFor(const void* addr) {
  return buckets[(reinterpret_cast<uintptr_t>(addr) >> 3) % kBuckets];
}

bool CanAcquire(std::atomic<uint32_t>* addr) {
  uint32_t v = addr->load(std::memory_order_relaxed);
  while (v > 0) {
    if (addr->compare_exchange_weak(v, v - 1, std::memory_order_acquire)) return true;
  }
  return false;
}

void Enqueue(Bucket& b, SemaWaiter* w, bool lifo) {
  if (lifo) {
    // In front of the first waiter for the same address.
    SemaWaiter* at = b.head;
    while (at != nullptr && at->addr != w->addr) at = at->next;
    if (at != nullptr) {
      w->next = at;
      w->prev = at->prev;
      if (at->prev != nullptr) {
        at->prev->next = w;
      } else {
        b.head = w;
      }
      at->prev = w;
      return;
    }
  }
  w->prev = b.tail;
  w->next = nullptr;
  if (b.tail != nullptr) {
    b.tail->next = w;
  } else {
    b.head = w;
  }
  b.tail = w;
}

SemaWaiter* DequeueFor(Bucket& b, std::atomic<uint32_t>* addr) {
  SemaWaiter* w = b.head;
  while (w != nullptr && w->addr != addr) w = w->next;
  if (w == nullptr) return nullptr;
  if (w->prev != nullptr) {
    w->prev->next = w->next;
  } else {
    b.head = w->next;
  }
  if (w->next != nullptr) {
    w->next->prev = w->prev;
  } else {
    b.tail = w->prev;
  }
  w->next = w->prev = nullptr;
  return w;
}

bool UnlockBucket(G*, void* arg) {
  static_cast<Bucket*>(arg)->lock.Unlock();
  return true;
}

}  // namespace

int64_t SemAcquire(std::atomic<uint32_t>* addr, bool lifo, WaitReason reason) {
  if (CanAcquire(addr)) return 0;
  int64_t start = Nanotime();
  Bucket& b = BucketFor(addr);
  SemaWaiter w;
  w.addr = addr;
  for (;;) {
    b.lock.Lock();
    // Count ourselves before the last look, so a releaser either sees us
    // waiting or we see its increment.
    b.nwait.fetch_add(1, std::memory_order_seq_cst);
    if (CanAcquire(addr)) {
      b.nwait.fetch_sub(1, std::memory_order_relaxed);
      b.lock.Unlock();
      break;
    }
    w.g = CurrentG();
    w.ticket = false;
    Enqueue(b, &w, lifo);
    Park(reason, UnlockBucket, &b);
    if (w.ticket || CanAcquire(addr)) break;
    lifo = true;  // woken but beaten to it: wait at the front
  }
  return Nanotime() - start;
}

void SemRelease(std::atomic<uint32_t>* addr, bool handoff) {
  addr->fetch_add(1, std::memory_order_seq_cst);
  Bucket& b = BucketFor(addr);
  if (b.nwait.load(std::memory_order_seq_cst) == 0) return;
  b.lock.Lock();
  if (b.nwait.load(std::memory_order_relaxed) == 0) {
    b.lock.Unlock();
    return;
  }
  SemaWaiter* w = DequeueFor(b, addr);
  if (w != nullptr) b.nwait.fetch_sub(1, std::memory_order_relaxed);
  b.lock.Unlock();
  if (w == nullptr) return;
  bool handed = handoff && CanAcquire(addr);
  w->ticket = handed;
  G* g = w->g;  // w lives on g's stack: do not touch it once g may run
  Ready(g);
  if (handed) {
    // Let the waiter run now, on this P, rather than after our time slice.
    YieldNow();
  }
}

}  // namespace goro::internal
