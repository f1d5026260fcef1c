#include <cpuid.h>

#include "arch/cpu.h"

uint64_t goro_xsave_size = 0;
uint64_t goro_xsave_mask = 0;

namespace goro::arch {

const CpuInfo& ProbeCpu() {
  static const CpuInfo info = [] {
    CpuInfo c;
    unsigned a, b, cx, d;
    if (__get_cpuid(1, &a, &b, &cx, &d) && (cx & (1u << 27)) != 0) {  // OSXSAVE
      uint32_t lo, hi;
      asm volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
      c.xcr0 = (uint64_t{hi} << 32) | lo;
      // CPUID.(EAX=0DH,ECX=0):EBX is the size of the XSAVE area for the
      // components currently enabled in XCR0: the size XSAVE will write.
      __cpuid_count(0xD, 0, a, b, cx, d);
      c.xsave = b >= 576;
      c.xsave_size = (uint64_t{b} + 63) & ~uint64_t{63};
      c.avx = (c.xcr0 & 0x4) != 0;
      c.avx512 = (c.xcr0 & 0xE0) == 0xE0;
    }
    if (__get_cpuid(0x80000007, &a, &b, &cx, &d)) c.invariant_tsc = (d & (1u << 8)) != 0;
    goro_xsave_size = c.xsave_size;
    goro_xsave_mask = c.xcr0;
    return c;
  }();
  return info;
}

}  // namespace goro::arch
