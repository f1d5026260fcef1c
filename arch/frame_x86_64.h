// The frame that SwitchContext leaves on a stack it switches away from, on
// x86-64 SysV. Shared by the assembly (arch/switch_x86_64_sysv_elf_gas.S) and
// the C++ that builds first frames and reads parked goroutines' registers;
// static_asserts in arch/context.h keep the two from drifting.
//
//   offset  contents
//   0x00    MXCSR (4 bytes), x87 control word (2 bytes), padding (2 bytes)
//   0x08    r15
//   0x10    r14
//   0x18    r13
//   0x20    r12
//   0x28    rbx
//   0x30    rbp
//   0x38    return address (where the switched-to code resumes)
//   0x40    (end: the caller's stack before the call)
#ifndef GORO_ARCH_FRAME_X86_64_H_
#define GORO_ARCH_FRAME_X86_64_H_

#define GORO_FRAME_FPU 0x00
#define GORO_FRAME_R15 0x08
#define GORO_FRAME_R14 0x10
#define GORO_FRAME_R13 0x18
#define GORO_FRAME_R12 0x20
#define GORO_FRAME_RBX 0x28
#define GORO_FRAME_RBP 0x30
#define GORO_FRAME_RIP 0x38
#define GORO_FRAME_SIZE 0x40

#endif  // GORO_ARCH_FRAME_X86_64_H_
