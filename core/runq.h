// The per-P local run queue: a fixed ring of 256 goroutines plus a `runnext`
// slot, lock-free for one owner and any number of thieves.
//
// Synchronisation:
//   tail  - written only by the owner (release); read by thieves (acquire).
//   head  - advanced by CAS by whoever consumes: the owner's Get, a thief's
//           Grab, or the owner moving half the ring to the global queue.
//   slots - written only by the owner at tail, before tail is published; read
//           by consumers between head and tail, who claim what they read by
//           CASing head (a failed CAS discards the read).
//   runnext - swapped by the owner; CASed to null by consumers.
#ifndef GORO_CORE_RUNQ_H_
#define GORO_CORE_RUNQ_H_

#include <atomic>
#include <cstdint>

namespace goro::internal {

struct G;

class RunQueue {
 public:
  static constexpr uint32_t kSize = 256;

  // Owner: appends g. False if the ring is full.
  bool PutTail(G* g);
  // Owner: puts g in runnext; returns the goroutine it displaced, or nullptr.
  G* PutNext(G* g) { return runnext_.exchange(g, std::memory_order_acq_rel); }
  // Owner: when the ring is full, moves its older half plus `g` into batch
  // (room for kSize/2 + 1) and returns how many; 0 means the ring is no longer
  // full (thieves took some) and PutTail should be retried.
  uint32_t TakeHalf(G* g, G** batch);
  // Owner (or anyone): takes runnext if set (*inherit = true), else the head.
  G* Get(bool* inherit);
  // Owner of `this`: steals about half of victim's goroutines into this ring
  // and returns one of them to run, or nullptr. With steal_runnext, victim's
  // runnext may be taken when its ring is empty.
  G* StealFrom(RunQueue& victim, bool steal_runnext);

  uint32_t Size() const {
    uint32_t h = head_.load(std::memory_order_acquire);
    uint32_t t = tail_.load(std::memory_order_acquire);
    return t - h;
  }
  bool Empty() const {
    return Size() == 0 && runnext_.load(std::memory_order_acquire) == nullptr;
  }

 private:
  // Copies about half of this ring into dst's ring starting at dst_tail and
  // claims them; returns how many (0: nothing to steal).
  uint32_t GrabInto(RunQueue& dst, uint32_t dst_tail, bool steal_runnext);

  alignas(64) std::atomic<uint32_t> head_{0};
  alignas(64) std::atomic<uint32_t> tail_{0};
  std::atomic<G*> runnext_{nullptr};
  std::atomic<G*> slots_[kSize] = {};
};

}  // namespace goro::internal

#endif  // GORO_CORE_RUNQ_H_
