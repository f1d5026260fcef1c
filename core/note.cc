#include "core/note.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>

#include "core/runtime.h"

namespace goro::internal {

namespace {

long Futex(std::atomic<uint32_t>* addr, int op, uint32_t val, const timespec* ts) {
  return ::syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), op | FUTEX_PRIVATE_FLAG, val, ts,
                   nullptr, 0);
}

}  // namespace

void RuntimeMutex::LockSlow() {
  // Once this thread has slept here it takes the lock as kSleepers: others
  // may still sleep behind it, and the unlock must wake one of them.
  uint32_t take = kHeld;
  for (;;) {
    for (int round = 0; round < 5; ++round) {
      for (uint32_t v = word_.load(std::memory_order_relaxed); v == kFree;
           v = word_.load(std::memory_order_relaxed)) {
        if (word_.compare_exchange_weak(v, take, std::memory_order_acquire, std::memory_order_relaxed)) return;
      }
      if (round < 4) {
        for (int i = 0; i < 30; ++i) arch::CpuRelax();
      } else {
        sched_yield();
      }
    }
    if (word_.exchange(kSleepers, std::memory_order_acquire) == kFree) return;
    take = kSleepers;
    Futex(&word_, FUTEX_WAIT, kSleepers, nullptr);
  }
}

void RuntimeMutex::WakeOne() { Futex(&word_, FUTEX_WAKE, 1, nullptr); }

void Note::Wakeup() {
  key_.store(1, std::memory_order_release);
  Futex(&key_, FUTEX_WAKE, 1, nullptr);
}

void Note::Sleep() {
  while (key_.load(std::memory_order_acquire) == 0) {
    Futex(&key_, FUTEX_WAIT, 0, nullptr);
  }
}

bool Note::SleepUntil(int64_t deadline_ns) {
  while (key_.load(std::memory_order_acquire) == 0) {
    int64_t left = deadline_ns - Nanotime();
    if (left <= 0) return false;
    timespec ts{static_cast<time_t>(left / 1000000000), static_cast<long>(left % 1000000000)};
    Futex(&key_, FUTEX_WAIT, 0, &ts);
  }
  return true;
}

}  // namespace goro::internal
