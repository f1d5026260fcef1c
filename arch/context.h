// The architecture boundary for switching stacks. Everything above arch/ uses
// only Context, MakeContext and SwitchContext; a new architecture provides an
// assembly file with goro_switch_context / goro_start_context and a frame
// header, and nothing in core/ changes.
#ifndef GORO_ARCH_CONTEXT_H_
#define GORO_ARCH_CONTEXT_H_

#include <cstddef>
#include <cstdint>

#if defined(__x86_64__)
#include "arch/frame_x86_64.h"
#else
#error "goro: only x86-64 SysV is implemented (see arch/context.h)"
#endif

namespace goro::arch {

// A suspended execution context: the stack pointer of a SwitchFrame.
struct Context {
  void* sp = nullptr;
};

// The frame SwitchContext leaves on a suspended stack (layout in frame_x86_64.h).
struct SwitchFrame {
  uint32_t mxcsr;
  uint16_t x87_cw;
  uint16_t pad;
  uint64_t r15, r14, r13, r12, rbx, rbp;
  uint64_t rip;
};
static_assert(offsetof(SwitchFrame, mxcsr) == GORO_FRAME_FPU);
static_assert(offsetof(SwitchFrame, x87_cw) == GORO_FRAME_FPU + 4);
static_assert(offsetof(SwitchFrame, r15) == GORO_FRAME_R15);
static_assert(offsetof(SwitchFrame, r14) == GORO_FRAME_R14);
static_assert(offsetof(SwitchFrame, r13) == GORO_FRAME_R13);
static_assert(offsetof(SwitchFrame, r12) == GORO_FRAME_R12);
static_assert(offsetof(SwitchFrame, rbx) == GORO_FRAME_RBX);
static_assert(offsetof(SwitchFrame, rbp) == GORO_FRAME_RBP);
static_assert(offsetof(SwitchFrame, rip) == GORO_FRAME_RIP);
static_assert(sizeof(SwitchFrame) == GORO_FRAME_SIZE);

extern "C" void goro_switch_context(Context* from, Context* to);
extern "C" void goro_start_context();

// Prepares `ctx` so that switching to it calls entry(arg) on the stack whose
// highest address is `stack_hi`. `entry` must never return.
inline void MakeContext(Context* ctx, void* stack_hi, void (*entry)(void*), void* arg) {
  // The frame sits just below a 16-byte-aligned top, so that after its `ret`
  // the stack is 16-byte aligned at goro_start_context's call, as the ABI wants.
  uintptr_t top = reinterpret_cast<uintptr_t>(stack_hi) & ~uintptr_t{15};
  auto* f = reinterpret_cast<SwitchFrame*>(top - sizeof(SwitchFrame));
  f->mxcsr = 0x1F80;   // all exceptions masked, round to nearest
  f->x87_cw = 0x037F;  // the SysV default
  f->pad = 0;
  f->r15 = f->r14 = f->rbx = f->rbp = 0;
  f->r12 = reinterpret_cast<uint64_t>(entry);
  f->r13 = reinterpret_cast<uint64_t>(arg);
  f->rip = reinterpret_cast<uint64_t>(&goro_start_context);
  ctx->sp = f;
}

// Saves the current context in `from` and resumes `to`. Returns when something
// switches back to `from`, possibly on another thread.
inline void SwitchContext(Context* from, Context* to) { goro_switch_context(from, to); }

// Spin-wait hint for busy loops.
inline void CpuRelax() { __builtin_ia32_pause(); }

}  // namespace goro::arch

#endif  // GORO_ARCH_CONTEXT_H_
