#include "core/runq.h"

#include "arch/context.h"
#include "core/fatal.h"
#include "core/runtime.h"

namespace goro::internal {

bool RunQueue::PutTail(G* g) {
  uint32_t h = head_.load(std::memory_order_acquire);
  uint32_t t = tail_.load(std::memory_order_relaxed);
  if (t - h >= kSize) return false;
  slots_[t % kSize].store(g, std::memory_order_relaxed);
  tail_.store(t + 1, std::memory_order_release);
  return true;
}

uint32_t RunQueue::TakeHalf(G* g, G** batch) {
  uint32_t h = head_.load(std::memory_order_acquire);
  uint32_t t = tail_.load(std::memory_order_relaxed);
  uint32_t n = (t - h) / 2;
  if (n != kSize / 2) return 0;
  for (uint32_t i = 0; i < n; ++i) batch[i] = slots_[(h + i) % kSize].load(std::memory_order_relaxed);
  if (!head_.compare_exchange_strong(h, h + n, std::memory_order_acq_rel)) return 0;
  batch[n] = g;
  return n + 1;
}

G* RunQueue::Get(bool* inherit) {
  G* next = runnext_.load(std::memory_order_relaxed);
  if (next != nullptr && runnext_.compare_exchange_strong(next, nullptr, std::memory_order_acq_rel)) {
    *inherit = true;
    return next;
  }
  *inherit = false;
  uint32_t h = head_.load(std::memory_order_acquire);
  for (;;) {
    uint32_t t = tail_.load(std::memory_order_acquire);
    if (t == h) return nullptr;
    G* g = slots_[h % kSize].load(std::memory_order_relaxed);
    if (head_.compare_exchange_weak(h, h + 1, std::memory_order_acq_rel)) {
      // The next one will run soon: start bringing its G into the cache.
      // (A stale pointer is harmless: prefetches do not fault.)
      if (h + 1 != t) __builtin_prefetch(slots_[(h + 1) % kSize].load(std::memory_order_relaxed));
      return g;
    }
  }
}

uint32_t RunQueue::GrabInto(RunQueue& dst, uint32_t dst_tail, bool steal_runnext) {
  for (;;) {
    uint32_t h = head_.load(std::memory_order_acquire);
    uint32_t t = tail_.load(std::memory_order_acquire);
    uint32_t n = t - h;
    n -= n / 2;
    if (n == 0) {
      if (!steal_runnext) return 0;
      G* next = runnext_.load(std::memory_order_acquire);
      if (next == nullptr) return 0;
      // The owner most likely readied `next` to run it as soon as its current
      // goroutine blocks; give it a few microseconds before taking it.
      int64_t until = Nanotime() + 3000;
      while (Nanotime() < until) arch::CpuRelax();
      if (!runnext_.compare_exchange_strong(next, nullptr, std::memory_order_acq_rel)) continue;
      dst.slots_[dst_tail % kSize].store(next, std::memory_order_relaxed);
      return 1;
    }
    if (n > kSize / 2) continue;  // head and tail were read at different moments
    for (uint32_t i = 0; i < n; ++i) {
      G* g = slots_[(h + i) % kSize].load(std::memory_order_relaxed);
      dst.slots_[(dst_tail + i) % kSize].store(g, std::memory_order_relaxed);
    }
    if (head_.compare_exchange_strong(h, h + n, std::memory_order_acq_rel)) return n;
  }
}

G* RunQueue::StealFrom(RunQueue& victim, bool steal_runnext) {
  uint32_t t = tail_.load(std::memory_order_relaxed);
  // Grabbing writes up to half a ring past our tail: there must be room.
  if (t - head_.load(std::memory_order_acquire) > kSize / 2) return nullptr;
  uint32_t n = victim.GrabInto(*this, t, steal_runnext);
  if (n == 0) return nullptr;
  n--;
  G* g = slots_[(t + n) % kSize].load(std::memory_order_relaxed);
  if (n == 0) return g;
  uint32_t h = head_.load(std::memory_order_acquire);
  if (t - h + n >= kSize) Fatal("RunqSteal: local run queue overflow");
  tail_.store(t + n, std::memory_order_release);
  return g;
}

}  // namespace goro::internal
