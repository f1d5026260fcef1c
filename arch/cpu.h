// CPU facts the runtime needs, probed once at start-up.
#ifndef GORO_ARCH_CPU_H_
#define GORO_ARCH_CPU_H_

#include <cstdint>

extern "C" {
// Read by the async-preemption trampoline: the XSAVE area size (a multiple
// of 64) and the feature mask (XCR0) that XSAVE/XRSTOR use. Set once by
// ProbeCpu() before any goroutine can be preempted.
extern uint64_t goro_xsave_size __attribute__((visibility("hidden")));
extern uint64_t goro_xsave_mask __attribute__((visibility("hidden")));
// The trampoline a preempted goroutine is diverted into, and the end of its
// code (the handler never injects while the PC is inside it).
void goro_async_preempt();
void goro_async_preempt_end();
// Clears EFLAGS.AC (alignment check), which a signal handler inherits from
// the interrupted code: the first call of each of goro's signal handlers
// (arch/preempt_*.S).
void goro_clear_alignment_check() __attribute__((visibility("hidden")));
}

namespace goro::arch {

struct CpuInfo {
  bool xsave = false;         // XSAVE usable (CPUID.1:ECX.OSXSAVE)
  uint64_t xsave_size = 0;    // bytes for the features enabled in XCR0
  uint64_t xcr0 = 0;          // enabled state components
  bool avx512 = false;        // ZMM state enabled in XCR0
  bool avx = false;           // YMM state enabled in XCR0
  bool invariant_tsc = false;  // the TSC ticks at a constant rate
};

// Probes the CPU and sets goro_xsave_size/goro_xsave_mask.
const CpuInfo& ProbeCpu();

inline uint64_t ReadTsc() {
  uint32_t lo, hi;
  asm volatile("rdtsc" : "=a"(lo), "=d"(hi));
  return (uint64_t{hi} << 32) | lo;
}

}  // namespace goro::arch

#endif  // GORO_ARCH_CPU_H_
