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
 *
 * Unwind info is right at every instruction, since a profiler's signal (or
 * a SIGQUIT dump) may land on any: every push and pop is described, and
 * from the `subq` to the `addq` CFA = rsp + GORO_FRAME_SIZE. Both stay true
 * across the switch, as the frame switched to has the same layout: from
 * there on they describe the context switched to, whose return address is
 * in its frame. A fresh context's is goro_start_context, and unwinders look
 * a return address up one byte before it (at the call that pushed it), so
 * goro_start_context's unwind info begins with a `nop` that never runs.
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
        .cfi_rel_offset rbp, 0
        pushq   %rbx
        .cfi_adjust_cfa_offset 8
        .cfi_rel_offset rbx, 0
        pushq   %r12
        .cfi_adjust_cfa_offset 8
        .cfi_rel_offset r12, 0
        pushq   %r13
        .cfi_adjust_cfa_offset 8
        .cfi_rel_offset r13, 0
        pushq   %r14
        .cfi_adjust_cfa_offset 8
        .cfi_rel_offset r14, 0
        pushq   %r15
        .cfi_adjust_cfa_offset 8
        .cfi_rel_offset r15, 0
        subq    $8, %rsp                     /* room for the FPU control words */
        .cfi_adjust_cfa_offset 8             /* CFA = rsp + GORO_FRAME_SIZE, on either stack */
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
        .cfi_adjust_cfa_offset -8
        popq    %r15                         /* callee-saved GPRs */
        .cfi_adjust_cfa_offset -8
        .cfi_restore r15
        popq    %r14
        .cfi_adjust_cfa_offset -8
        .cfi_restore r14
        popq    %r13
        .cfi_adjust_cfa_offset -8
        .cfi_restore r13
        popq    %r12
        .cfi_adjust_cfa_offset -8
        .cfi_restore r12
        popq    %rbx
        .cfi_adjust_cfa_offset -8
        .cfi_restore rbx
        popq    %rbp
        .cfi_adjust_cfa_offset -8
        .cfi_restore rbp
        ret                                  /* resume at the saved address */
        .cfi_endproc
        .size   goro_switch_context, .-goro_switch_context

        .globl  goro_start_context
        .type   goro_start_context, @function
        .align  16
        .type   goro_start_context_unwind, @function  /* local: names the nop for debuggers */
goro_start_context_unwind:
        .cfi_startproc
        .cfi_undefined rip                   /* outermost frame: unwinders stop here */
        nop                                  /* never run: a return address of */
                                             /* goro_start_context is looked up here */
        .size   goro_start_context_unwind, .-goro_start_context_unwind
goro_start_context:
        movq    %r13, %rdi                   /* the entry argument */
        callq   *%r12                        /* entry(arg); must never return */
        ud2                                  /* trap if it does */
        .cfi_endproc
        .size   goro_start_context, .-goro_start_context

        .section .note.GNU-stack,"",%progbits
