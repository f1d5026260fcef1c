/*
 * goro_fair_spin_asm: the `asm` workload's loop, written in assembly so that no
 * compiler can add a call or a safe point to it.
 *
 * uint64_t goro_fair_spin_asm(uint64_t* counter,      // %rdi
 *                             const uint8_t* stop);    // %rsi
 *
 * Increments *counter until *stop is non-zero; returns the final count.
 *
 *   rax  the running count (also stored to *counter each iteration)
 */
        .text
        .globl  goro_fair_spin_asm
        .type   goro_fair_spin_asm, @function
        .align  16
goro_fair_spin_asm:
        .cfi_startproc
        movq    (%rdi), %rax                 /* resume from the stored count */
1:      incq    %rax                         /* one iteration of work */
        movq    %rax, (%rdi)                 /* publish it (a plain store) */
        cmpb    $0, (%rsi)                   /* asked to stop? */
        je      1b                           /* no: loop; no call anywhere */
        ret
        .cfi_endproc
        .size   goro_fair_spin_asm, .-goro_fair_spin_asm

        .section .note.GNU-stack,"",%progbits
