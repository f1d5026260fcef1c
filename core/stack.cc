// Goroutine stacks.
//
// Each stack is one mmap(MAP_NORESERVE) reservation of Options::stack_size
// plus a guard page at its low end; pages are committed by the kernel as the
// goroutine touches them, so a parked goroutine that used little stack costs a
// page or two. The guard is installed with madvise(MADV_GUARD_INSTALL) (Linux
// 6.13+), which marks page-table entries without splitting the mapping, so a
// million guarded stacks stay far below vm.max_map_count (adjacent stacks even
// merge into one mapping). Where the kernel refuses it, mprotect(PROT_NONE)
// is used, which splits mappings and so limits the number of live stacks.
//
// Freed stacks go to the P's cache (LIFO, so a hot stack is reused while its
// pages are still in cache), then to a global pool. Above a high-water mark
// the global pool gives a stack's pages back (MADV_DONTNEED) before keeping
// it, and above a larger mark it unmaps the stack altogether.
#include <errno.h>
#include <sys/mman.h>
#include <unistd.h>

#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "core/fatal.h"
#include "core/runtime.h"

#ifndef MADV_GUARD_INSTALL
#define MADV_GUARD_INSTALL 102
#endif

namespace goro::internal {

namespace {

constexpr size_t kGlobalKeepDirty = 64;    // stacks kept with their pages
constexpr size_t kGlobalKeepMapped = 4096;  // stacks kept reserved at all

struct StackPool {
  absl::Mutex mu;
  std::vector<Stack> free ABSL_GUARDED_BY(mu);
};

StackPool& pool = *new StackPool();  // never destroyed, like sched
size_t stack_size = 0;  // usable bytes, a multiple of the page size
size_t page_size = 4096;
std::atomic<bool> guard_by_madvise{true};

Stack StackMap() {
  size_t total = stack_size + page_size;
  void* base = mmap(nullptr, total, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
  if (base == MAP_FAILED) {
    int err = errno;
    FatalG(absl::StrCat("cannot allocate a goroutine stack of ", stack_size,
                        " bytes: mmap failed with errno ", err, " (", strerror(err), ")"));
  }
  // Huge pages would turn a one-page stack into two megabytes.
  madvise(base, total, MADV_NOHUGEPAGE);
  bool guarded = false;
  if (guard_by_madvise.load(std::memory_order_relaxed)) {
    guarded = madvise(base, page_size, MADV_GUARD_INSTALL) == 0;
    if (!guarded && (errno == EINVAL || errno == ENOSYS)) {
      guard_by_madvise.store(false, std::memory_order_relaxed);
    }
  }
  if (!guarded && mprotect(base, page_size, PROT_NONE) != 0) {
    int err = errno;
    FatalG(absl::StrCat("cannot install a stack guard page: mprotect failed with errno ", err,
                        " (", strerror(err), ")"));
  }
  uintptr_t lo = reinterpret_cast<uintptr_t>(base) + page_size;
  return Stack{lo, lo + stack_size};
}

void StackUnmap(Stack s) { munmap(reinterpret_cast<void*>(s.lo - page_size), stack_size + page_size); }

}  // namespace

void StackInitGlobal(size_t size) {
  page_size = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  stack_size = (size + page_size - 1) & ~(page_size - 1);
}

const char* StackGuardKind() {
  return guard_by_madvise.load(std::memory_order_relaxed) ? "madvise-guard" : "mprotect";
}

Stack StackAlloc(P* p) {
  if (p->stack_cache_n > 0) return p->stack_cache[--p->stack_cache_n];
  {
    absl::MutexLock lock(&pool.mu);
    // Refill half the cache in one go, so the lock is taken once per batch.
    while (!pool.free.empty() && p->stack_cache_n < kStackCacheSize / 2) {
      p->stack_cache[p->stack_cache_n++] = pool.free.back();
      pool.free.pop_back();
    }
  }
  if (p->stack_cache_n > 0) return p->stack_cache[--p->stack_cache_n];
  return StackMap();
}

void StackFree(P* p, Stack s) {
  if (p->stack_cache_n < kStackCacheSize) {
    p->stack_cache[p->stack_cache_n++] = s;
    return;
  }
  // The cache is full: move its older half, plus s, to the global pool.
  std::vector<Stack> moving;
  moving.push_back(s);
  int keep = kStackCacheSize / 2;
  for (int i = 0; i < kStackCacheSize - keep; ++i) moving.push_back(p->stack_cache[i]);
  for (int i = 0; i < keep; ++i) p->stack_cache[i] = p->stack_cache[kStackCacheSize - keep + i];
  p->stack_cache_n = keep;
  std::vector<Stack> unmap;
  {
    absl::MutexLock lock(&pool.mu);
    for (Stack x : moving) {
      if (pool.free.size() >= kGlobalKeepMapped) {
        unmap.push_back(x);
        continue;
      }
      if (pool.free.size() >= kGlobalKeepDirty) {
        madvise(reinterpret_cast<void*>(x.lo), stack_size, MADV_DONTNEED);
      }
      pool.free.push_back(x);
    }
  }
  for (Stack x : unmap) StackUnmap(x);
}

}  // namespace goro::internal
