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

#include <deque>
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

constexpr size_t kKeepDirty = 64;     // idle stacks kept with their pages
constexpr size_t kKeepMapped = 4096;  // idle stacks kept reserved at all

// Freed stacks beyond the P caches. `dirty` stacks still have their pages
// (the newest at the back, reused first); `clean` ones had them given back.
// `low_water` is the fewest dirty stacks seen since the last scavenge: that
// many sat unused for the whole interval, so giving back their pages costs
// nothing that was about to be used.
struct StackPool {
  absl::Mutex mu;
  std::deque<Stack> dirty ABSL_GUARDED_BY(mu);
  std::vector<Stack> clean ABSL_GUARDED_BY(mu);
  size_t low_water ABSL_GUARDED_BY(mu) = 0;
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
    // Refill half the cache in one go, so the lock is taken once per batch;
    // dirty stacks (pages still there) first.
    while (p->stack_cache_n < kStackCacheSize / 2) {
      if (!pool.dirty.empty()) {
        p->stack_cache[p->stack_cache_n++] = pool.dirty.back();
        pool.dirty.pop_back();
      } else if (!pool.clean.empty()) {
        p->stack_cache[p->stack_cache_n++] = pool.clean.back();
        pool.clean.pop_back();
      } else {
        break;
      }
    }
    pool.low_water = std::min(pool.low_water, pool.dirty.size());
  }
  if (p->stack_cache_n > 0) return p->stack_cache[--p->stack_cache_n];
  return StackMap();
}

void StackFree(P* p, Stack s) {
  if (p->stack_cache_n < kStackCacheSize) {
    p->stack_cache[p->stack_cache_n++] = s;
    return;
  }
  // The cache is full: move its older half, plus s, to the global pool. No
  // system call here: the scavenger gives pages back later.
  int keep = kStackCacheSize / 2;
  absl::MutexLock lock(&pool.mu);
  pool.dirty.push_back(s);
  for (int i = 0; i < kStackCacheSize - keep; ++i) pool.dirty.push_back(p->stack_cache[i]);
  for (int i = 0; i < keep; ++i) p->stack_cache[i] = p->stack_cache[kStackCacheSize - keep + i];
  p->stack_cache_n = keep;
}

void StackScavenge() {
  std::vector<Stack> release, unmap;
  {
    absl::MutexLock lock(&pool.mu);
    size_t idle = pool.low_water > kKeepDirty ? pool.low_water - kKeepDirty : 0;
    for (size_t i = 0; i < idle && !pool.dirty.empty(); ++i) {
      release.push_back(pool.dirty.front());  // the oldest
      pool.dirty.pop_front();
    }
    pool.low_water = pool.dirty.size();
  }
  if (release.empty()) return;
  for (Stack x : release) madvise(reinterpret_cast<void*>(x.lo), stack_size, MADV_DONTNEED);
  {
    absl::MutexLock lock(&pool.mu);
    for (Stack x : release) {
      if (pool.clean.size() < kKeepMapped) {
        pool.clean.push_back(x);
      } else {
        unmap.push_back(x);  // nobody can reach these: unmap after the lock
      }
    }
  }
  for (Stack x : unmap) StackUnmap(x);
}

}  // namespace goro::internal
