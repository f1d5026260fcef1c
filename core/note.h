// Note: a one-shot wake-up for an OS thread, on a futex (Go's note).
// Sleep blocks until Wakeup has been called since the last Clear. Used to park
// idle Ms and plain threads that block in goroutine primitives.
#ifndef GORO_CORE_NOTE_H_
#define GORO_CORE_NOTE_H_

#include <atomic>
#include <cstdint>

namespace goro::internal {

class Note {
 public:
  void Clear() { key_.store(0, std::memory_order_relaxed); }
  void Wakeup();
  void Sleep();
  // Sleeps until woken or until the monotonic clock reaches deadline_ns.
  // Returns true if woken.
  bool SleepUntil(int64_t deadline_ns);
  bool IsSet() const { return key_.load(std::memory_order_acquire) != 0; }

 private:
  std::atomic<uint32_t> key_{0};
};

}  // namespace goro::internal

#endif  // GORO_CORE_NOTE_H_
