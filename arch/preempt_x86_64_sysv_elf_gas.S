/*
 * Asynchronous preemption trampoline for x86-64 SysV, ELF, GNU as.
 *
 * The SIGURG handler diverts a running goroutine here by editing the signal
 * context: it moves the stack pointer below the 128-byte red zone, pushes the
 * interrupted PC and sets the PC to goro_async_preempt. So on entry:
 *
 *   (%rsp)          the interrupted PC (our return address)
 *   8(%rsp)..135    the red zone of the interrupted code: not ours to touch
 *
 * The interrupted code expected no call here, so everything is saved: flags,
 * every general register, and the whole extended state (x87, MXCSR, XMM, YMM,
 * ZMM, opmask: whatever XCR0 enables) with XSAVE, sized at start-up from CPUID.
 * Then the state the ABI promises at a call is made true before calling into
 * the runtime: an empty x87 stack (FNINIT; the interrupted code may have been
 * in the middle of x87 work), DF clear, and AC clear: EFLAGS.AC (alignment
 * check, bit 18) is not the ABI's, but a goroutine may set it to find its
 * own misaligned accesses, and the runtime, libc and the goroutines that run
 * next on this thread (the context switch carries no flags) do make
 * misaligned accesses, which AC turns into SIGBUS.
 * The frame, as offsets from %rbp once it is set:
 *
 *   0x88  red zone of the interrupted code (128 bytes, untouched)
 *   0x80  interrupted PC (return address)
 *   0x78  rflags            0x38  r8
 *   0x70  rax               0x30  r9
 *   0x68  rbx               0x28  r10
 *   0x60  rcx               0x20  r11
 *   0x58  rdx               0x18  r12
 *   0x50  rsi               0x10  r13
 *   0x48  rbp               0x08  r14
 *   0x40  rdi               0x00  r15
 *   below: padding to a 64-byte boundary, then the XSAVE area (its 64-byte
 *          header zeroed before XSAVE, as XRSTOR requires)
 *
 * Then it clears DF and AC and calls goro_async_preempt_go, which parks the goroutine as runnable; when the
 * goroutine is resumed, perhaps on another thread, the call returns and
 * everything is restored. `ret $128` returns to the interrupted PC and skips
 * the red zone, so the stack pointer is exactly what it was.
 *
 * Unwind info is right at every instruction, since a profiler's signal may
 * land on any: CFA = rsp + 136 at entry and at the `ret`, 8 more per push,
 * 8 less per pop, and based on %rbp in between; every saved register is
 * described (the interrupted code's caller-saved registers matter too: this
 * is a signal frame, whose caller was stopped anywhere).
 */
        .text
        .globl  goro_async_preempt
        .type   goro_async_preempt, @function
        .align  16
goro_async_preempt:
        .cfi_startproc
        .cfi_signal_frame
        /* For unwinders: the caller's stack pointer is 8 + 128 bytes up, and
           the return address (the interrupted PC) is at the bottom of that. */
        .cfi_def_cfa rsp, 136
        .cfi_offset rip, -136
        pushfq                               /* flags, DF included */
        .cfi_adjust_cfa_offset 8
        pushq   %rax
        .cfi_adjust_cfa_offset 8
        .cfi_rel_offset rax, 0
        pushq   %rbx
        .cfi_adjust_cfa_offset 8
        .cfi_rel_offset rbx, 0
        pushq   %rcx
        .cfi_adjust_cfa_offset 8
        .cfi_rel_offset rcx, 0
        pushq   %rdx
        .cfi_adjust_cfa_offset 8
        .cfi_rel_offset rdx, 0
        pushq   %rsi
        .cfi_adjust_cfa_offset 8
        .cfi_rel_offset rsi, 0
        pushq   %rbp
        .cfi_adjust_cfa_offset 8
        .cfi_rel_offset rbp, 0
        pushq   %rdi
        .cfi_adjust_cfa_offset 8
        .cfi_rel_offset rdi, 0
        pushq   %r8
        .cfi_adjust_cfa_offset 8
        .cfi_rel_offset r8, 0
        pushq   %r9
        .cfi_adjust_cfa_offset 8
        .cfi_rel_offset r9, 0
        pushq   %r10
        .cfi_adjust_cfa_offset 8
        .cfi_rel_offset r10, 0
        pushq   %r11
        .cfi_adjust_cfa_offset 8
        .cfi_rel_offset r11, 0
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
        movq    %rsp, %rbp                   /* GPR frame base; callee-saved */
        .cfi_def_cfa_register rbp
        subq    goro_xsave_size(%rip), %rsp  /* room for the XSAVE area */
        andq    $-64, %rsp                   /* XSAVE needs 64-byte alignment */
        xorl    %eax, %eax                   /* zero the 64-byte XSAVE header */
        movq    %rax, 512(%rsp)
        movq    %rax, 520(%rsp)
        movq    %rax, 528(%rsp)
        movq    %rax, 536(%rsp)
        movq    %rax, 544(%rsp)
        movq    %rax, 552(%rsp)
        movq    %rax, 560(%rsp)
        movq    %rax, 568(%rsp)
        movl    goro_xsave_mask(%rip), %eax  /* requested-feature bitmap, low */
        movl    goro_xsave_mask+4(%rip), %edx /* and high half */
        xsave64 (%rsp)                       /* x87, SSE, AVX, AVX-512 state */
        fninit                               /* XSAVE leaves the x87 registers loaded: */
                                             /* the ABI wants the x87 stack empty at calls */
        cld                                  /* and DF clear */
        pushfq                               /* AC clear too: no CLAC in user mode, */
        andl    $~0x40000, (%rsp)            /* so through the flags on the stack */
        popfq                                /* (CFA is on %rbp: no CFI needed) */
        call    goro_async_preempt_go        /* park as runnable; returns on resume */
        movl    goro_xsave_mask(%rip), %eax
        movl    goro_xsave_mask+4(%rip), %edx
        xrstor64 (%rsp)                      /* the extended state */
        movq    %rbp, %rsp                   /* back to the GPR frame */
        .cfi_def_cfa_register rsp            /* CFA = rsp + 264, then 8 less per pop */
        popq    %r15
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
        popq    %r11
        .cfi_adjust_cfa_offset -8
        .cfi_restore r11
        popq    %r10
        .cfi_adjust_cfa_offset -8
        .cfi_restore r10
        popq    %r9
        .cfi_adjust_cfa_offset -8
        .cfi_restore r9
        popq    %r8
        .cfi_adjust_cfa_offset -8
        .cfi_restore r8
        popq    %rdi
        .cfi_adjust_cfa_offset -8
        .cfi_restore rdi
        popq    %rbp
        .cfi_adjust_cfa_offset -8
        .cfi_restore rbp
        popq    %rsi
        .cfi_adjust_cfa_offset -8
        .cfi_restore rsi
        popq    %rdx
        .cfi_adjust_cfa_offset -8
        .cfi_restore rdx
        popq    %rcx
        .cfi_adjust_cfa_offset -8
        .cfi_restore rcx
        popq    %rbx
        .cfi_adjust_cfa_offset -8
        .cfi_restore rbx
        popq    %rax
        .cfi_adjust_cfa_offset -8
        .cfi_restore rax
        popfq                                /* flags last (DF, AC): nothing after changes them */
        .cfi_adjust_cfa_offset -8            /* CFA = rsp + 136, as at entry */
        ret     $128                         /* to the interrupted PC, over the red zone */
        .cfi_endproc
        .size   goro_async_preempt, .-goro_async_preempt
        .globl  goro_async_preempt_end
        .type   goro_async_preempt_end, @function
goro_async_preempt_end:
        ud2                                  /* marks the end of the trampoline */
        .size   goro_async_preempt_end, .-goro_async_preempt_end


/*
 * void goro_clear_alignment_check(void)
 *
 * Clears EFLAGS.AC. The kernel keeps the interrupted code's AC when it runs a
 * signal handler (it clears only DF, TF and RF), so goro's handlers call this
 * first: their code and the libc and dynamic loader code they call make
 * misaligned accesses. Their sigreturn restores the interrupted flags. In
 * assembly, not inline asm, so that the unwind info is right at every
 * instruction and the compiler's red zone is never under the pushfq.
 */
        .text
        .globl  goro_clear_alignment_check
        .hidden goro_clear_alignment_check
        .type   goro_clear_alignment_check, @function
        .align  16
goro_clear_alignment_check:
        .cfi_startproc
        pushfq                               /* flags ... */
        .cfi_adjust_cfa_offset 8
        andl    $~0x40000, (%rsp)            /* ... less AC (bit 18) ... */
        popfq                                /* ... back */
        .cfi_adjust_cfa_offset -8
        ret
        .cfi_endproc
        .size   goro_clear_alignment_check, .-goro_clear_alignment_check

        .section .note.GNU-stack,"",%progbits
