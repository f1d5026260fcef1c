/*
 * Context switch for x86-64 SysV, ELF, GNU as.
 *
 * void goro_switch_context(goro::arch::Context* from,   // %rdi
 *                          goro::arch::Context* to);    // %rsi
 *
 * Saves the callee-saved state of the caller on its own stack, stores the
 * stack pointer in from->sp, loads to->sp and restores the state found there.
 * Caller-saved registers need no saving: the C++ caller assumes a call
 * clobbers them (rax is used as scratch). Frame layout (see frame_x86_64.h):
 *
 *   0x00  MXCSR | x87 CW | pad     0x28  rbx
 *   0x08  r15                      0x30  rbp
 *   0x10  r14                      0x38  return address
 *   0x18  r13
 *   0x20  r12
 *
 * goro_start_context is where a fresh context begins: its first frame holds
 * the entry function in r12 and its argument in r13 (see MakeContext).
 */
#include "frame_x86_64.h"

        .text
        .globl  goro_switch_context
        .type   goro_switch_context, @function
        .align  16
goro_switch_context:
        .cfi_startproc
        pushq   %rbp                         /* callee-saved GPRs, in frame order */
        .cfi_adjust_cfa_offset 8
        pushq   %rbx
        .cfi_adjust_cfa_offset 8
        pushq   %r12
        .cfi_adjust_cfa_offset 8
        pushq   %r13
        .cfi_adjust_cfa_offset 8
        pushq   %r14
        .cfi_adjust_cfa_offset 8
        pushq   %r15
        .cfi_adjust_cfa_offset 8
        subq    $8, %rsp                     /* room for the FPU control words */
        .cfi_adjust_cfa_offset 8
        stmxcsr GORO_FRAME_FPU(%rsp)         /* SSE control/status */
        fnstcw  GORO_FRAME_FPU+4(%rsp)       /* x87 control word */
        movq    %rsp, (%rdi)                 /* from->sp = current frame */

        movq    (%rsi), %rsp                 /* switch stacks: to->sp */
        /* Loading MXCSR and the x87 control word is slow and they rarely
           differ, so load each only when its control bits differ. (The ABI
           makes the control bits callee-saved and the status bits
           caller-saved.) -8(%rsp) is scratch in this leaf's red zone. */
        stmxcsr -8(%rsp)                     /* current MXCSR */
        movl    -8(%rsp), %eax
        xorl    GORO_FRAME_FPU(%rsp), %eax   /* differences from the saved one */
        testl   $0xFFC0, %eax                /* in the control bits? */
        jz      1f
        ldmxcsr GORO_FRAME_FPU(%rsp)         /* restore SSE control/status */
1:      fnstcw  -8(%rsp)                     /* current x87 control word */
        movzwl  -8(%rsp), %eax
        cmpw    GORO_FRAME_FPU+4(%rsp), %ax
        je      2f
        fldcw   GORO_FRAME_FPU+4(%rsp)       /* restore x87 control word */
2:      addq    $8, %rsp
        popq    %r15                         /* callee-saved GPRs */
        popq    %r14
        popq    %r13
        popq    %r12
        popq    %rbx
        popq    %rbp
        ret                                  /* resume at the saved address */
        .cfi_endproc
        .size   goro_switch_context, .-goro_switch_context

        .globl  goro_start_context
        .type   goro_start_context, @function
        .align  16
goro_start_context:
        .cfi_startproc
        .cfi_undefined rip                   /* outermost frame: unwinders stop here */
        movq    %r13, %rdi                   /* the entry argument */
        callq   *%r12                        /* entry(arg); must never return */
        ud2                                  /* trap if it does */
        .cfi_endproc
        .size   goro_start_context, .-goro_start_context

        .section .note.GNU-stack,"",%progbits
