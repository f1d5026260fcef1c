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
// limits the number of live stacks. Unmapping splits a mapping too: see the
// end of this comment.
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
// pages are still in cache), then to a global pool; sysmon moves the caches
// of idle Ps to the pool (StackFlushIdleCaches), and asks busy Ps to move the
// stacks of theirs that sat unused since the last scavenge (StackTrimCache),
// so that no idle stack keeps its pages for ever (a P's cache holds up to 64). Above a high-water mark
// the global pool gives a stack's pages back (MADV_DONTNEED) before keeping
// it, and above a larger mark it unmaps reservations of kMapBatch stacks none
// of which is in use, whole. Never one stack out of a reservation: the
// reservations merge into one mapping, and a hole between two live stacks
// splits it in two. Stacks freed between live ones (any churn) once made one
// hole each, until the process reached vm.max_map_count (65530 mappings) and
// could map nothing more - no stack, no thread, no large malloc - with
// gigabytes free. Holes now come only between whole reservations, so there
// are at most as many as reservations still mapped (one per kMapBatch stacks
// in use or kept), and a new reservation, being the same size, fills one.
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <deque>
#include <iterator>
#include <map>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "core/fatal.h"
#include "core/runtime.h"
#include "goro/preempt.h"

#ifndef MADV_GUARD_INSTALL
#define MADV_GUARD_INSTALL 102
#endif

namespace goro::internal {

namespace {

// Idle stacks kept with their pages (StackScavenge): at most 64, and at most
// 16 MiB of reservation, since a stack's touched pages are not known and may
// be all of it (64 deep 8 MiB stacks were half a gigabyte kept for ever).
// Set by StackInitGlobal.
constexpr size_t kKeepDirtyMax = 64;
constexpr size_t kKeepDirtyBytes = size_t{16} << 20;
size_t keep_dirty = kKeepDirtyMax;
// Idle stacks kept reserved at all (their pages given back: no RSS, only
// address space and page-table pages). Generous where guards do not split
// mappings, since re-mapping costs three system calls and page faults per
// stack (fib(27) with a goroutine per call keeps ~10k live); with mprotect
// guards each stack is two mappings, and vm.max_map_count is 65530.
size_t KeepMapped();
constexpr size_t kScavengeBatch = 1024;  // stacks per StackScavenge call

// Stacks are mapped kMapBatch at a time (one system call instead of one each;
// a cold fib(27) with a goroutine per call maps ~23,000), and unmapped only a
// whole batch at a time (see the opening comment).
constexpr int kMapBatch = 16;
static_assert(kMapBatch >= 2 && kMapBatch < 32, "a StackBatch's clean mask is a uint32_t");
constexpr uint32_t kWholeBatch = (uint32_t{1} << kMapBatch) - 1;

// One reservation of kMapBatch stacks (StackMapBatch), in pool.batches from
// its mapping until it is unmapped, which happens only while every one of
// its stacks is in the pool's clean set.
struct StackBatch {
  uintptr_t base = 0;  // the low end of its first stack's guard; constant
  // Guarded by pool.mu. Bit i: stack i is in the pool's clean set.
  uint32_t clean = 0;
  // Guarded by pool.mu. Its index in pool.whole if clean == kWholeBatch,
  // else in pool.partial if clean != 0; -1 if it is in neither.
  int32_t slot = -1;
};

// Freed stacks beyond the P caches. `dirty` stacks still have their pages
// (the newest at the back, reused first); clean ones had them given back,
// and are kept by batch: `partial` lists the batches some of whose stacks
// are clean, `whole` those all of whose stacks are. Clean stacks are reused
// from partial batches first, so that wholly idle ones stay whole and can be
// unmapped. `batches` has every mapped batch by address, to find a stack's
// (kept here, not in Stack, since a G's first cache line has no room for it;
// only the scavenger looks one up). `low_water` is the fewest dirty stacks
// seen since the last scavenge: that many sat unused for the whole interval,
// so giving back their pages costs nothing that was about to be used.
struct StackPool {
  // Taken on g0 when a P's cache runs dry, by several Ps at once in a burst
  // of spawns: a RuntimeMutex, like sched.mu. (An absl::Mutex also made the
  // scheduler create Abseil's per-thread identity on a new M's first stack,
  // which blocks every signal for a moment; PreemptTest's single-stepped
  // thread died of its own SIGTRAP there.)
  RuntimeMutex mu;
  std::deque<Stack> dirty ABSL_GUARDED_BY(mu);
  std::vector<StackBatch*> partial ABSL_GUARDED_BY(mu);
  std::vector<StackBatch*> whole ABSL_GUARDED_BY(mu);
  std::map<uintptr_t, StackBatch> batches ABSL_GUARDED_BY(mu);
  size_t clean ABSL_GUARDED_BY(mu) = 0;  // clean stacks, in both lists
  size_t low_water ABSL_GUARDED_BY(mu) = 0;
};

GORO_EARLY_INIT EarlyGlobal<StackPool> pool_storage;  // never destroyed, like sched
constinit StackPool& pool = pool_storage.value;
size_t stack_size = 0;  // usable bytes, a multiple of the page size
size_t page_size = 4096;
std::atomic<bool> guard_by_madvise{true};
std::atomic<int64_t> stacks_mapped{0};  // reserved stacks: in use, cached or pooled

size_t KeepMapped() { return guard_by_madvise.load(std::memory_order_relaxed) ? 65536 : 8192; }

// Whether MAP_STACK already keeps huge pages away (recent kernels give such
// mappings VM_NOHUGEPAGE; older ones need an madvise per mapping). The
// change is dated 6.7 in some accounts and 6.8 in others: trust it from 6.8,
// since on a kernel without it the madvise only costs a system call.
bool MapStackImpliesNoHugePage() {
  static const bool yes = [] {
    utsname u;
    int major = 0, minor = 0;
    return uname(&u) == 0 && sscanf(u.release, "%d.%d", &major, &minor) == 2 &&
           (major > 6 || (major == 6 && minor >= 8));
  }();
  return yes;
}

// The number of lines in a file under /proc, read through a buffer on the
// stack (no allocation: the caller may be out of memory); -1 if unreadable.
long CountProcLines(const char* path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char buf[4096];
  long n = 0;
  ssize_t r;
  while ((r = read(fd, buf, sizeof buf)) > 0) n += std::count(buf, buf + r, '\n');
  close(fd);
  return r < 0 ? -1 : n;
}

// The number a /proc file holds, or -1.
long ReadProcLong(const char* path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char buf[32];
  ssize_t r = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (r <= 0) return -1;
  buf[r] = '\0';
  return strtol(buf, nullptr, 10);
}

// Names what failed, the sizes and any address-space limit, without
// allocating (the failure may be the process running out of memory). mmap
// also says ENOMEM when the process has as many mappings as
// vm.max_map_count allows, with any amount of memory free: that is named
// when the count of mappings is at the limit.
[[noreturn]] void FatalStackMap(int64_t goid, int err, size_t total) {
  char limit[96] = "";
  rlimit rl;
  if (getrlimit(RLIMIT_AS, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    snprintf(limit, sizeof limit, "; the address-space limit (RLIMIT_AS, ulimit -v) is %llu bytes",
             static_cast<unsigned long long>(rl.rlim_cur));
  }
  char maps[128] = "";
  if (err == ENOMEM) {
    long max = ReadProcLong("/proc/sys/vm/max_map_count");
    long n = CountProcLines("/proc/self/maps");
    // Close to it, not at it: other threads map and unmap meanwhile.
    if (max > 0 && n >= max - 64) {
      snprintf(maps, sizeof maps, "; the process has %ld mappings, the limit vm.max_map_count is %ld", n, max);
    }
  }
  FatalF("goroutine %lld: cannot allocate a goroutine stack: mmap: %s (errno %d; reserving %d stacks of "
         "%zu bytes plus a %zu-byte guard each, %zu bytes in all%s%s)",
         static_cast<long long>(goid), strerror(err), err, kMapBatch, stack_size, kStackGuardSize, total, limit,
         maps);
}

// Fills out[] with kMapBatch new stacks; `goid` is the goroutine that needs
// one, named if the system refuses.
void StackMapBatch(Stack* out, int64_t goid) {
  size_t each = stack_size + kStackGuardSize;
  size_t total = each * kMapBatch;
  void* base = mmap(nullptr, total, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
  if (base == MAP_FAILED) FatalStackMap(goid, errno, total);
  {
    RuntimeMutexLock lock(&pool.mu);
    uintptr_t b = reinterpret_cast<uintptr_t>(base);
    pool.batches.emplace(b, StackBatch{b});
  }
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

// Stack i of batch b.
Stack StackOfBatch(const StackBatch* b, int i) {
  uintptr_t lo = b->base + static_cast<uintptr_t>(i) * (stack_size + kStackGuardSize) + kStackGuardSize;
  return Stack{lo, lo + stack_size};
}

// Adds b to, or removes it from, pool.partial or pool.whole (O(1): a
// removed batch's slot is taken by the list's last).
void SlotAdd(std::vector<StackBatch*>& list, StackBatch* b) {
  b->slot = static_cast<int32_t>(list.size());
  list.push_back(b);
}
void SlotRemove(std::vector<StackBatch*>& list, StackBatch* b) {
  StackBatch* last = list.back();
  list[b->slot] = last;
  last->slot = b->slot;
  list.pop_back();
  b->slot = -1;
}

// Adds s, whose pages were given back, to the clean set.
void CleanPutLocked(Stack s) ABSL_EXCLUSIVE_LOCKS_REQUIRED(pool.mu) {
  auto it = pool.batches.upper_bound(s.lo);
  if (it == pool.batches.begin()) Fatal("CleanPutLocked: a stack of no batch");
  StackBatch* b = &std::prev(it)->second;
  uint32_t bit = uint32_t{1} << ((s.lo - kStackGuardSize - b->base) / (stack_size + kStackGuardSize));
  if ((b->clean & bit) != 0) Fatal("CleanPutLocked: the stack is in the pool twice");
  if (b->clean == 0) SlotAdd(pool.partial, b);
  b->clean |= bit;
  if (b->clean == kWholeBatch) {
    SlotRemove(pool.partial, b);
    SlotAdd(pool.whole, b);
  }
  ++pool.clean;
}

// Takes a clean stack (pool.clean > 0): from a batch partly in use if there
// is one, so that wholly idle batches stay whole.
Stack CleanGetLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(pool.mu) {
  StackBatch* b = !pool.partial.empty() ? pool.partial.back() : pool.whole.back();
  if (b->clean == kWholeBatch) {
    SlotRemove(pool.whole, b);
    SlotAdd(pool.partial, b);  // it keeps kMapBatch - 1 >= 1 clean stacks
  }
  int i = __builtin_ctz(b->clean);
  b->clean &= ~(uint32_t{1} << i);
  if (b->clean == 0) SlotRemove(pool.partial, b);
  --pool.clean;
  return StackOfBatch(b, i);
}

// Unmaps wholly idle batches, taken out of the pool, with one call per run of
// address-adjacent ones. A run the kernel refuses to unmap (ENOMEM: the hole
// would split a mapping past vm.max_map_count) goes back to the pool whole,
// still reserved, its pages given back already.
void UnmapBatches(std::vector<StackBatch*>& v) {
  std::sort(v.begin(), v.end(), [](const StackBatch* a, const StackBatch* b) { return a->base < b->base; });
  const size_t each = (stack_size + kStackGuardSize) * kMapBatch;
  size_t refused = 0;  // v[0, refused): batches to give back to the pool
  size_t i = 0;
  while (i < v.size()) {
    size_t j = i + 1;
    while (j < v.size() && v[j]->base == v[j - 1]->base + each) ++j;
    // Out of pool.batches before the munmap: once it returns, a new batch
    // may be mapped at the same address and recorded under it, and an erase
    // after that would drop the live batch's record.
    const uintptr_t base = v[i]->base;
    {
      RuntimeMutexLock lock(&pool.mu);
      for (size_t k = i; k < j; ++k) pool.batches.erase(v[k]->base);  // v[i, j) dangle from here
    }
    if (munmap(reinterpret_cast<void*>(base), (j - i) * each) == 0) {
      stacks_mapped.fetch_sub(static_cast<int64_t>((j - i) * kMapBatch), std::memory_order_relaxed);
    } else if (errno == ENOMEM) {
      RuntimeMutexLock lock(&pool.mu);  // still mapped: recorded again
      for (size_t k = i; k < j; ++k) {
        const uintptr_t b = base + (k - i) * each;
        v[refused++] = &pool.batches.emplace(b, StackBatch{b}).first->second;
      }
    } else {
      int err = errno;
      FatalF("StackScavenge: munmap of %zu idle stack batches: %s (errno %d)", j - i, strerror(err), err);
    }
    i = j;
  }
  if (refused == 0) return;
  RuntimeMutexLock lock(&pool.mu);
  for (size_t k = 0; k < refused; ++k) {
    v[k]->clean = kWholeBatch;
    SlotAdd(pool.whole, v[k]);
    pool.clean += kMapBatch;
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
size_t StackInitGlobal(size_t size) {
  page_size = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  if (kStackGuardSize % page_size != 0) Fatal("StackInitGlobal: the stack guard is not a whole number of pages");
  stack_size = (size + page_size - 1) & ~(page_size - 1);
  keep_dirty = std::min(kKeepDirtyMax, kKeepDirtyBytes / stack_size);
  return stack_size;
}

Stack StackAlloc(P* p, int64_t goid) {
  if (p->stack_cache_n > 0) {
    Stack s = p->stack_cache[--p->stack_cache_n];
    p->stack_cache_low = std::min(p->stack_cache_low, p->stack_cache_n);
    return s;
  }
  {
    RuntimeMutexLock lock(&pool.mu);
    // Refill half the cache in one go, so the lock is taken once per batch;
    // dirty stacks (pages still there) first.
    while (p->stack_cache_n < kStackCacheSize / 2) {
      if (!pool.dirty.empty()) {
        p->stack_cache[p->stack_cache_n++] = pool.dirty.back();
        pool.dirty.pop_back();
      } else if (pool.clean > 0) {
        p->stack_cache[p->stack_cache_n++] = CleanGetLocked();
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
  RuntimeMutexLock lock(&pool.mu);
  pool.dirty.push_back(s);
  for (int i = 0; i < kStackCacheSize - keep; ++i) pool.dirty.push_back(p->stack_cache[i]);
  for (int i = 0; i < keep; ++i) p->stack_cache[i] = p->stack_cache[kStackCacheSize - keep + i];
  p->stack_cache_n = keep;
  p->stack_cache_low = 0;  // those left are not the ones that sat unused
}

void StackTrimCache(P* p) {
  p->stack_cache_trim.store(false, std::memory_order_relaxed);
  const int unused = std::min(p->stack_cache_low, p->stack_cache_n);
  if (unused > 0) {
    RuntimeMutexLock lock(&pool.mu);
    // Oldest first, as StackFree spills them.
    for (int i = 0; i < unused; ++i) pool.dirty.push_back(p->stack_cache[i]);
  }
  for (int i = unused; i < p->stack_cache_n; ++i) p->stack_cache[i - unused] = p->stack_cache[i];
  __atomic_store_n(&p->stack_cache_n, p->stack_cache_n - unused, __ATOMIC_RELAXED);  // StacksInUse reads it racily
  p->stack_cache_low = p->stack_cache_n;
}

void StackFlushIdleCaches() {
  // A P on the idle list has no owner, and only PidleGetLocked, under
  // sched.mu, gives it one. The owner's last writes to its cache came before
  // PidlePutLocked (under sched.mu); the next owner's first come after.
  RuntimeMutexLock lock(&sched.mu);
  if (sched.pidle == nullptr) return;
  RuntimeMutexLock pool_lock(&pool.mu);
  for (P* p = sched.pidle; p != nullptr; p = p->link) {
    // Oldest first: the cache's top (its hottest) ends up the pool's newest.
    for (int i = 0; i < p->stack_cache_n; ++i) pool.dirty.push_back(p->stack_cache[i]);
    __atomic_store_n(&p->stack_cache_n, 0, __ATOMIC_RELAXED);  // StacksInUse reads it racily
    p->stack_cache_low = 0;
  }
}

int64_t StacksInUse() {
  NoPreemptScope no_preempt;  // see StackScavenge
  int64_t idle = 0;
  // The P caches belong to their Ps: racy reads, exact when all are idle.
  for (P* p : sched.allp) idle += __atomic_load_n(&p->stack_cache_n, __ATOMIC_RELAXED);
  {
    RuntimeMutexLock lock(&pool.mu);
    idle += static_cast<int64_t>(pool.dirty.size() + pool.clean);
  }
  return stacks_mapped.load(std::memory_order_relaxed) - idle;
}

bool StackScavenge(bool all) {
  // Sysmon calls it, and tests from goroutines: a goroutine preempted while
  // it holds pool.mu would park with it held, and g0 on its thread, which
  // takes pool.mu for a stack, would wait for it for ever. (Not a RuntimeScope: on sysmon's thread, which has no M, that
  // would make it a plain thread's stand-in G.)
  NoPreemptScope no_preempt;
  std::vector<Stack> release;
  std::vector<StackBatch*> unmap;
  bool more;
  {
    RuntimeMutexLock lock(&pool.mu);
    size_t unused = all ? pool.dirty.size() : pool.low_water;
    size_t idle = unused > keep_dirty ? unused - keep_dirty : 0;
    more = idle > kScavengeBatch;
    idle = std::min(idle, kScavengeBatch);
    for (size_t i = 0; i < idle && !pool.dirty.empty(); ++i) {
      release.push_back(pool.dirty.front());  // the oldest
      pool.dirty.pop_front();
    }
    // A new interval starts, measured from every dirty stack there is now.
    // Those left idle because of the batch limit sat unused for all of this
    // one, and stay counted (the next call comes soon: `more`). Starting
    // from what was left of the low-water mark instead, it could only fall:
    // it began at 0, and no stack was ever given back while a P stayed busy.
    pool.low_water = more ? std::min(unused - idle, pool.dirty.size()) : pool.dirty.size();
  }
  // Stacks were mostly mapped one after another: give back each contiguous
  // run (guards included) with one call, since every call costs a TLB
  // shoot-down on every CPU the process runs on.
  ForEachRun(release, [](uintptr_t b, size_t len) { madvise(reinterpret_cast<void*>(b), len, MADV_DONTNEED); });
  {
    RuntimeMutexLock lock(&pool.mu);
    for (Stack x : release) CleanPutLocked(x);
    // Keep up to KeepMapped() clean stacks reserved; above that, unmap
    // batches none of whose stacks is in use, a bounded number per call.
    while (pool.clean > KeepMapped() && !pool.whole.empty() && unmap.size() < kScavengeBatch / kMapBatch) {
      StackBatch* b = pool.whole.back();
      SlotRemove(pool.whole, b);
      b->clean = 0;
      pool.clean -= kMapBatch;
      unmap.push_back(b);
    }
    more = more || (pool.clean > KeepMapped() && !pool.whole.empty());
  }
  if (!unmap.empty()) UnmapBatches(unmap);
  return more;
}

}  // namespace goro::internal
