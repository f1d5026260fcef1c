// Goroutine stacks.
//
// Each stack is a reservation (mmap(MAP_NORESERVE)) of Options::stack_size
// plus a guard region of kStackGuardSize (64 KiB) at its low end; pages are
// committed by the kernel as the goroutine touches them, so a parked goroutine
// that used little stack costs a page or two. The guard is installed with
// madvise(MADV_GUARD_INSTALL) (Linux 6.13+), which marks page-table entries
// without splitting the mapping, so a million guarded stacks stay far below
// vm.max_map_count (adjacent stacks even merge into one mapping). Where the
// kernel refuses it, mprotect(PROT_NONE) is used, which splits mappings and so
// limits the number of live stacks.
//
// Why 64 KiB and not one page: stacks are mapped next to one another, so
// below each guard is the top of another goroutine's stack. A function whose
// frame is larger than the guard, built without -fstack-clash-protection
// (GCC's default on Debian), moves the stack pointer past the guard and
// writes into that stack without a fault. A one-page guard let any frame over
// 4 KiB do that; 64 KiB catches frames up to 64 KiB. The cost is address
// space (1 MiB + 64 KiB per default stack) and the page-table entries of the
// guard markers (measured on 100,000 stacks: 2.1 KiB of page tables per
// stack instead of 2.0); no RSS and no extra mappings.
//
// Freed stacks go to the P's cache (LIFO, so a hot stack is reused while its
// pages are still in cache), then to a global pool. Above a high-water mark
// the global pool gives a stack's pages back (MADV_DONTNEED) before keeping
// it, and above a larger mark it unmaps the stack altogether.
#include <errno.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <deque>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "core/fatal.h"
#include "core/runtime.h"

#ifndef MADV_GUARD_INSTALL
#define MADV_GUARD_INSTALL 102
#endif

namespace goro::internal {

namespace {

constexpr size_t kKeepDirty = 64;     // idle stacks kept with their pages
// Idle stacks kept reserved at all (their pages given back: no RSS, only
// address space and page-table pages). Generous where guards do not split
// mappings, since re-mapping costs three system calls and page faults per
// stack (fib(27) with a goroutine per call keeps ~10k live); with mprotect
// guards each stack is two mappings, and vm.max_map_count is 65530.
size_t KeepMapped();
constexpr size_t kScavengeBatch = 1024;  // stacks per StackScavenge call

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

GORO_EARLY_INIT EarlyGlobal<StackPool> pool_storage;  // never destroyed, like sched
constinit StackPool& pool = pool_storage.value;
size_t stack_size = 0;  // usable bytes, a multiple of the page size
size_t page_size = 4096;
std::atomic<bool> guard_by_madvise{true};
std::atomic<int64_t> stacks_mapped{0};  // reserved stacks: in use, cached or pooled

size_t KeepMapped() { return guard_by_madvise.load(std::memory_order_relaxed) ? 65536 : 8192; }

// Whether MAP_STACK already keeps huge pages away (Linux 6.7+ gives such
// mappings VM_NOHUGEPAGE); older kernels need an madvise per mapping.
bool MapStackImpliesNoHugePage() {
  static const bool yes = [] {
    utsname u;
    int major = 0, minor = 0;
    return uname(&u) == 0 && sscanf(u.release, "%d.%d", &major, &minor) == 2 &&
           (major > 6 || (major == 6 && minor >= 7));
  }();
  return yes;
}

// Maps kMapBatch stacks in one reservation (one system call instead of one
// each; a cold fib(27) with a goroutine per call maps ~23,000), installs their
// guards, and returns them through out[].
constexpr int kMapBatch = 16;

// Names what failed, the sizes and any address-space limit, without
// allocating (the failure may be the process running out of memory).
[[noreturn]] void FatalStackMap(int64_t goid, int err, size_t total) {
  char limit[96] = "";
  rlimit rl;
  if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    snprintf(limit, sizeof limit, "; the address-space limit (RLIMIT_AS, ulimit -v) is %llu bytes",
             static_cast<unsigned long long>(rl.rlim_cur));
  }
  FatalF("goroutine %lld: cannot allocate a goroutine stack: mmap: %s (errno %d; reserving %d stacks of "
         "%zu bytes plus a %zu-byte guard each, %zu bytes in all%s)",
         static_cast<long long>(goid), strerror(err), err, kMapBatch, stack_size, kStackGuardSize, total, limit);
}

// Fills out[] with kMapBatch new stacks; `goid` is the goroutine that needs
// one, named if the system refuses.
void StackMapBatch(Stack* out, int64_t goid) {
  size_t each = stack_size + kStackGuardSize;
  size_t total = each * kMapBatch;
  void* base = mmap(nullptr, total, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
  if (base == MAP_FAILED) FatalStackMap(goid, errno, total);
  stacks_mapped.fetch_add(kMapBatch, std::memory_order_relaxed);
  // Huge pages would turn a one-page stack into two megabytes.
  if (!MapStackImpliesNoHugePage()) madvise(base, total, MADV_NOHUGEPAGE);
  for (int i = 0; i < kMapBatch; ++i) {
    char* b = static_cast<char*>(base) + i * each;
    bool guarded = false;
    if (guard_by_madvise.load(std::memory_order_relaxed)) {
      guarded = madvise(b, kStackGuardSize, MADV_GUARD_INSTALL) == 0;
      if (!guarded && (errno == EINVAL || errno == ENOSYS)) {
        guard_by_madvise.store(false, std::memory_order_relaxed);
      }
    }
    if (!guarded && mprotect(b, kStackGuardSize, PROT_NONE) != 0) {
      int err = errno;
      FatalF("goroutine %lld: cannot install a goroutine stack's %zu-byte guard: mprotect: %s (errno %d%s)",
             static_cast<long long>(goid), kStackGuardSize, strerror(err), err,
             err == ENOMEM ? "; each guarded stack is two mappings: see vm.max_map_count" : "");
    }
    uintptr_t lo = reinterpret_cast<uintptr_t>(b) + kStackGuardSize;
    out[i] = Stack{lo, lo + stack_size};
  }
}

// Calls fn(base, length) for each run of address-adjacent stacks in v (whole
// reservations, guards included). Sorts v.
template <typename Fn>
void ForEachRun(std::vector<Stack>& v, Fn fn) {
  std::sort(v.begin(), v.end(), [](const Stack& a, const Stack& b) { return a.lo < b.lo; });
  size_t i = 0;
  while (i < v.size()) {
    uintptr_t base = v[i].lo - kStackGuardSize;
    uintptr_t end = v[i].hi;
    size_t j = i + 1;
    while (j < v.size() && v[j].lo - kStackGuardSize == end) end = v[j++].hi;
    fn(base, end - base);
    i = j;
  }
}

}  // namespace

// `size` is at most kMaxStackSize (core/env.h), so neither the rounding
// nor the size of a batch (StackMapBatch) overflows.
void StackInitGlobal(size_t size) {
  page_size = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  if (kStackGuardSize % page_size != 0) Fatal("StackInitGlobal: the stack guard is not a whole number of pages");
  stack_size = (size + page_size - 1) & ~(page_size - 1);
}

Stack StackAlloc(P* p, int64_t goid) {
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
  // Nothing to reuse: map a batch; keep all but one in the (empty) cache.
  Stack batch[kMapBatch];
  StackMapBatch(batch, goid);
  for (int i = 1; i < kMapBatch; ++i) p->stack_cache[p->stack_cache_n++] = batch[i];
  return batch[0];
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

int64_t StacksInUse() {
  int64_t idle = 0;
  // The P caches belong to their Ps: racy reads, exact when all are idle.
  for (P* p : sched.allp) idle += __atomic_load_n(&p->stack_cache_n, __ATOMIC_RELAXED);
  {
    absl::MutexLock lock(&pool.mu);
    idle += static_cast<int64_t>(pool.dirty.size() + pool.clean.size());
  }
  return stacks_mapped.load(std::memory_order_relaxed) - idle;
}

bool StackScavenge(bool all) {
  std::vector<Stack> release, unmap;
  bool more;
  {
    absl::MutexLock lock(&pool.mu);
    size_t unused = all ? pool.dirty.size() : pool.low_water;
    size_t idle = unused > kKeepDirty ? unused - kKeepDirty : 0;
    more = idle > kScavengeBatch;
    idle = std::min(idle, kScavengeBatch);
    size_t clean = pool.clean.size();
    for (size_t i = 0; i < idle && !pool.dirty.empty(); ++i) {
      Stack x = pool.dirty.front();  // the oldest
      pool.dirty.pop_front();
      // Keep up to KeepMapped() clean stacks reserved (pages given back);
      // unmap the rest, which gives their pages back too.
      if (clean + release.size() < KeepMapped()) {
        release.push_back(x);
      } else {
        unmap.push_back(x);
      }
    }
    // What was not looked at stays counted as idle; the rest is measured anew.
    pool.low_water = std::min(unused - idle, pool.dirty.size());
  }
  // Stacks were mostly mapped one after another: give back each contiguous
  // run (guards included) with one call, since every call costs a TLB
  // shoot-down on every CPU the process runs on.
  ForEachRun(release, [](uintptr_t b, size_t len) { madvise(reinterpret_cast<void*>(b), len, MADV_DONTNEED); });
  ForEachRun(unmap, [](uintptr_t b, size_t len) { munmap(reinterpret_cast<void*>(b), len); });
  stacks_mapped.fetch_sub(static_cast<int64_t>(unmap.size()), std::memory_order_relaxed);
  if (!release.empty()) {
    absl::MutexLock lock(&pool.mu);
    for (Stack x : release) pool.clean.push_back(x);
  }
  return more;
}

}  // namespace goro::internal
