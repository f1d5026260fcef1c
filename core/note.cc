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
