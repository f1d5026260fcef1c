// Where a goroutine may be interrupted: code ranges for the SIGURG handler.
//
// At start-up the executable segments of the main program are preemptible;
// everything else (shared libraries, the vDSO, the dynamic loader) is not. The
// trampoline is always excluded. The tables are fixed arrays written before
// any signal can read them (registration publishes with a release store of the
// count), so the handler reads them without locks.
#include <dlfcn.h>
#include <link.h>

#include <atomic>

#include "arch/cpu.h"
#include "core/runtime.h"
#include "goro/preempt.h"

namespace goro::internal {

namespace {

struct Range {
  uintptr_t begin;
  uintptr_t end;
};

constexpr int kMaxRanges = 64;

// Constant-initialised (constinit): a dynamic initialiser would reset `n`
// after a static constructor of the program had started the runtime and
// registered the ranges.
struct RangeTable {
  Range ranges[kMaxRanges] = {};
  std::atomic<int> n{0};

  bool Add(uintptr_t b, uintptr_t e) {
    int i = n.load(std::memory_order_relaxed);
    if (i >= kMaxRanges || b >= e) return false;
    ranges[i] = Range{b, e};
    n.store(i + 1, std::memory_order_release);
    return true;
  }
  bool Contains(uintptr_t pc) const {
    int count = n.load(std::memory_order_acquire);
    for (int i = 0; i < count; ++i) {
      if (pc >= ranges[i].begin && pc < ranges[i].end) return true;
    }
    return false;
  }
};

constinit RangeTable preemptible;
constinit RangeTable excluded;

int AddMainExecutable(dl_phdr_info* info, size_t, void*) {
  // The first object is the main program (its name is empty).
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type == PT_LOAD && (ph.p_flags & PF_X)) {
      uintptr_t b = info->dlpi_addr + ph.p_vaddr;
      preemptible.Add(b, b + ph.p_memsz);
    }
  }
  return 1;  // stop after the first object
}

}  // namespace

void InitPreemptibleRanges() {
  static bool done = false;
  if (done) return;
  done = true;
  excluded.Add(reinterpret_cast<uintptr_t>(&goro_async_preempt),
               reinterpret_cast<uintptr_t>(&goro_async_preempt_end) + 16);
  dl_iterate_phdr(AddMainExecutable, nullptr);
}

bool PreemptiblePc(uintptr_t pc) { return !excluded.Contains(pc) && preemptible.Contains(pc); }

}  // namespace goro::internal

namespace goro {

bool RegisterPreemptibleCode(const void* begin, const void* end) {
  return internal::preemptible.Add(reinterpret_cast<uintptr_t>(begin),
                                   reinterpret_cast<uintptr_t>(end));
}

bool ExcludeFromPreemption(const void* begin, const void* end) {
  return internal::excluded.Add(reinterpret_cast<uintptr_t>(begin),
                                reinterpret_cast<uintptr_t>(end));
}

NoPreemptScope::NoPreemptScope() {
  internal::G* g = internal::CurrentGoroutine();
  g_ = g;
  if (g == nullptr) return;
  int32_t n = g->preempt_off.load(std::memory_order_relaxed);
  g->preempt_off.store(n + 1, std::memory_order_relaxed);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  // As in RuntimeScope: runtime entries inside the scope see preempt_off
  // raised and do not check the P again, so check it here. The goroutine
  // may have blocked outside the runtime since its last entry, and sysmon
  // may have handed its P to another M.
  if (n == 0) internal::EnsurePAfterEntry(g);
}

NoPreemptScope::~NoPreemptScope() {
  if (g_ == nullptr) return;
  auto* g = static_cast<internal::G*>(g_);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  int32_t n = g->preempt_off.load(std::memory_order_relaxed) - 1;
  g->preempt_off.store(n, std::memory_order_relaxed);
  // A request that arrived inside the scope is honoured now.
  if (n == 0 && g->stackguard0.load(std::memory_order_relaxed) == internal::kStackPreempt) {
    internal::PreemptCooperative();
  }
}

}  // namespace goro

// dl_iterate_phdr calls back into the main executable while holding the
// loader's lock; a goroutine interrupted in the callback would park with that
// lock held and might resume on another thread, which cannot release it. goro
// interposes the function and runs the whole walk with preemption deferred:
// preempt_off raised, not a NoPreemptScope, because unwinders call it inside
// signal handlers (goro's own SIGQUIT and fault reports, a profiler's
// SIGPROF), where the scope's check of the P could wait for one and its end
// could switch goroutines. A request that arrives meanwhile waits for the
// next safe point, or the next signal.
// ASan's and TSan's runtimes call it while they initialise, before their
// shadow memory exists, so it is not instrumented (nor is anything it calls
// then: CurrentGoroutine is inlined by hand, since the compiler will not
// inline instrumented code here) and leaves plain threads alone.
#define GORO_NO_SANITIZE_MEMORY __attribute__((no_sanitize("address", "thread")))
extern "C" GORO_NO_SANITIZE_MEMORY
int dl_iterate_phdr(int (*callback)(dl_phdr_info*, size_t, void*), void* data) {
  using Fn = int (*)(int (*)(dl_phdr_info*, size_t, void*), void*);
  // Not a function-local static: TSan intercepts its guard.
  static Fn real_fn;  // the same value whoever stores it
  Fn real = __atomic_load_n(&real_fn, __ATOMIC_RELAXED);
  if (real == nullptr) {
    real = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "dl_iterate_phdr"));
    __atomic_store_n(&real_fn, real, __ATOMIC_RELAXED);
  }
  void* g = nullptr;
  if (intptr_t off = goro::internal::goro_tls_g_offset; off != 0) asm volatile("movq %%fs:(%1), %0" : "=r"(g) : "r"(off));
  if (g == nullptr) return real(callback, data);
  auto* gp = static_cast<goro::internal::G*>(g);
  int32_t n = gp->preempt_off.load(std::memory_order_relaxed);
  gp->preempt_off.store(n + 1, std::memory_order_relaxed);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  // The callbacks run with the loader's lock held, and may call goro, which
  // needs the goroutine's P: get it back now if sysmon took it during an
  // unmarked call, before the lock is taken. (Waiting for a P inside a
  // callback could wait for ever: the M holding the only P may be blocked on
  // that lock in this wrapper, with preemption deferred, so sysmon would not
  // take its P.) Not in a signal handler, which must not wait for a P.
  if (n == 0) goro::internal::EnsurePAfterEntryOutsideHandlers(gp);
  int r = real(callback, data);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  gp->preempt_off.store(gp->preempt_off.load(std::memory_order_relaxed) - 1, std::memory_order_relaxed);
  return r;
}
