/*
 * Call-free loops for the preemption tests, x86-64 SysV, ELF, GNU as.
 *
 * Written in assembly so that "this loop contains no call and no safe point"
 * is a fact of the source, not a hope about the compiler. Every function is a
 * leaf that touches no stack beyond what is listed, and spins until the byte
 * at `stop` becomes non-zero, storing its iteration count at `counter` after
 * every iteration so another thread can watch it make progress.
 *
 * C prototypes (tests/preempt_safety_test.cc, tests/lockosthread_test.cc):
 *
 *   uint64_t goro_test_spin_until(const volatile uint8_t* stop, uint64_t* counter);
 *       Returns the number of iterations. Frame: none.
 *
 *   uint64_t goro_test_spin_until_excluded(const volatile uint8_t* stop, uint64_t* counter);
 *       The same loop, in its own range [goro_test_spin_until_excluded,
 *       goro_test_spin_until_excluded_end) so a test can hand exactly this
 *       function to goro::ExcludeFromPreemption.
 *
 *   uint64_t goro_test_spin_with_df(const volatile uint8_t* stop, uint64_t* counter);
 *       Sets DF (std) and checks, every iteration, that it is still set.
 *       Returns how many iterations found it clear (0 when flags survive).
 *       Clears DF before returning, as the ABI requires.
 *       Frame: 8 bytes at -8(%rsp) for pushfq/popq, briefly.
 *
 *   uint64_t goro_test_spin_with_ac(const volatile uint8_t* stop, uint64_t* counter);
 *       Sets AC (alignment check, bit 18 of rflags) and checks, every
 *       iteration, that it is still set. Returns how many iterations found it
 *       clear. Clears AC before returning. Makes aligned accesses only.
 *       Frame: 8 bytes at -8(%rsp) for pushfq/popq, briefly.
 *
 *   uint64_t goro_test_spin_red_zone(const volatile uint8_t* stop, uint64_t* counter);
 *       Keeps 16 known quadwords in the 128-byte red zone below %rsp for the
 *       whole loop; every iteration checks all 16 and writes the next set.
 *       Returns how many quadwords did not hold what was written.
 *       Frame: -128(%rsp) .. -1(%rsp), the red zone:
 *         -128 + 8*i (i = 0..15): kRedZoneBase + 16*k + i in iteration k
 *
 *   uint64_t goro_test_spin_vector(const volatile uint8_t* stop, uint64_t* counter,
 *                                  uint64_t offset, uint64_t avx512);
 *       Loads ymm0..ymm14 with known values in both halves and, when avx512
 *       is non-zero, zmm16..zmm31 and k1..k7 too; checks every iteration
 *       that the upper half of each ymm register, the top quadword of each
 *       zmm register and each mask register still hold them. Returns how
 *       many checks failed. Needs AVX (and AVX-512F when asked). Spins with
 *       its stack pointer 8*offset bytes lower (offset 0..7), so that eight
 *       calls cover every stack pointer modulo 64. Clears the upper halves
 *       (vzeroupper) before returning.
 *       Frame: the saved rbp at 0(%rbp), then 8*offset bytes, unused.
 */
        .text

/* rdi = stop, rsi = counter; rax = iterations */
        .globl  goro_test_spin_until
        .type   goro_test_spin_until, @function
        .align  16
goro_test_spin_until:
        .cfi_startproc
        xorl    %eax, %eax                   /* iterations = 0 */
1:      incq    %rax                         /* one more iteration */
        movq    %rax, (%rsi)                 /* publish it */
        cmpb    $0, (%rdi)                   /* stop requested? */
        je      1b                           /* no: go on */
        ret                                  /* iterations in rax */
        .cfi_endproc
        .size   goro_test_spin_until, .-goro_test_spin_until

/* The same loop again, bracketed by its end label. */
        .globl  goro_test_spin_until_excluded
        .type   goro_test_spin_until_excluded, @function
        .align  16
goro_test_spin_until_excluded:
        .cfi_startproc
        xorl    %eax, %eax                   /* iterations = 0 */
1:      incq    %rax                         /* one more iteration */
        movq    %rax, (%rsi)                 /* publish it */
        cmpb    $0, (%rdi)                   /* stop requested? */
        je      1b                           /* no: go on */
        ret                                  /* iterations in rax */
        .cfi_endproc
        .size   goro_test_spin_until_excluded, .-goro_test_spin_until_excluded
        .globl  goro_test_spin_until_excluded_end
goro_test_spin_until_excluded_end:           /* first byte after the function */
        nop

/* rdi = stop, rsi = counter; rax = iterations, rdx = DF found clear, rcx scratch */
        .globl  goro_test_spin_with_df
        .type   goro_test_spin_with_df, @function
        .align  16
goro_test_spin_with_df:
        .cfi_startproc
        xorl    %eax, %eax                   /* iterations = 0 */
        xorl    %edx, %edx                   /* DF found clear = 0 */
        std                                  /* DF = 1 for the whole loop */
1:      incq    %rax                         /* one more iteration */
        movq    %rax, (%rsi)                 /* publish it */
        pushfq                               /* flags ... */
        .cfi_adjust_cfa_offset 8
        popq    %rcx                         /* ... into rcx */
        .cfi_adjust_cfa_offset -8
        btq     $10, %rcx                    /* CF = DF (bit 10 of rflags) */
        jc      2f                           /* still set: fine */
        incq    %rdx                         /* lost: count it ... */
        std                                  /* ... and set it again */
2:      cmpb    $0, (%rdi)                   /* stop requested? */
        je      1b                           /* no: go on */
        cld                                  /* the ABI wants DF clear on return */
        movq    %rdx, %rax                   /* return the losses */
        ret
        .cfi_endproc
        .size   goro_test_spin_with_df, .-goro_test_spin_with_df

/* rdi = stop, rsi = counter; rax = iterations, rdx = AC found clear, rcx scratch */
        .globl  goro_test_spin_with_ac
        .type   goro_test_spin_with_ac, @function
        .align  16
goro_test_spin_with_ac:
        .cfi_startproc
        xorl    %eax, %eax                   /* iterations = 0 */
        xorl    %edx, %edx                   /* AC found clear = 0 */
        pushfq                               /* AC = 1 for the whole loop */
        .cfi_adjust_cfa_offset 8
        orl     $0x40000, (%rsp)
        popfq
        .cfi_adjust_cfa_offset -8
1:      incq    %rax                         /* one more iteration */
        movq    %rax, (%rsi)                 /* publish it */
        pushfq                               /* flags ... */
        .cfi_adjust_cfa_offset 8
        popq    %rcx                         /* ... into rcx */
        .cfi_adjust_cfa_offset -8
        btq     $18, %rcx                    /* CF = AC */
        jc      2f                           /* still set: fine */
        incq    %rdx                         /* lost: count it ... */
        pushfq                               /* ... and set it again */
        .cfi_adjust_cfa_offset 8
        orl     $0x40000, (%rsp)
        popfq
        .cfi_adjust_cfa_offset -8
2:      cmpb    $0, (%rdi)                   /* stop requested? */
        je      1b                           /* no: go on */
        pushfq                               /* AC clear again for the caller */
        .cfi_adjust_cfa_offset 8
        andl    $~0x40000, (%rsp)
        popfq
        .cfi_adjust_cfa_offset -8
        movq    %rdx, %rax                   /* return the losses */
        ret
        .cfi_endproc
        .size   goro_test_spin_with_ac, .-goro_test_spin_with_ac

/* rdi = stop, rsi = counter; rax = k (iterations), rdx = mismatches,
   rcx = quadword index, r8 = expected/next value, r9 = kRedZoneBase */
        .globl  goro_test_spin_red_zone
        .type   goro_test_spin_red_zone, @function
        .align  16
goro_test_spin_red_zone:
        .cfi_startproc
        xorl    %eax, %eax                   /* k = 0 */
        xorl    %edx, %edx                   /* mismatches = 0 */
        movabsq $0x5ed20e0000000000, %r9     /* kRedZoneBase */
        movq    %r9, %r8                     /* values of iteration 0 */
        xorl    %ecx, %ecx                   /* i = 0 */
1:      movq    %r8, -128(%rsp,%rcx,8)       /* red zone[i] = base + i */
        incq    %r8
        incq    %rcx
        cmpq    $16, %rcx
        jne     1b
2:      movq    %rax, %r8                    /* expected: base + 16*k + i */
        shlq    $4, %r8
        addq    %r9, %r8
        xorl    %ecx, %ecx                   /* i = 0 */
3:      cmpq    %r8, -128(%rsp,%rcx,8)       /* still what we wrote? */
        je      4f
        incq    %rdx                         /* no: count it */
4:      incq    %r8
        incq    %rcx
        cmpq    $16, %rcx
        jne     3b
        xorl    %ecx, %ecx                   /* r8 = base + 16*(k+1): write iteration k+1 */
5:      movq    %r8, -128(%rsp,%rcx,8)
        incq    %r8
        incq    %rcx
        cmpq    $16, %rcx
        jne     5b
        incq    %rax                         /* k++ */
        movq    %rax, (%rsi)                 /* publish it */
        cmpb    $0, (%rdi)                   /* stop requested? */
        je      2b                           /* no: check and go on */
        movq    %rdx, %rax                   /* return the mismatches */
        ret
        .cfi_endproc
        .size   goro_test_spin_red_zone, .-goro_test_spin_red_zone


/* rdi = stop, rsi = counter, rdx = offset, rcx = avx512; rax = iterations,
   r8 = failed checks, r9 = expected value, r10 = scratch, r11 = avx512,
   ymm15 = scratch */
        .globl  goro_test_spin_vector
        .type   goro_test_spin_vector, @function
        .align  16
goro_test_spin_vector:
        .cfi_startproc
        pushq   %rbp                         /* a frame: rsp moves by offset */
        .cfi_adjust_cfa_offset 8
        .cfi_rel_offset %rbp, 0
        movq    %rsp, %rbp
        .cfi_def_cfa_register %rbp
        shlq    $3, %rdx                     /* 8*offset ... */
        subq    %rdx, %rsp                   /* ... below the saved rbp */
        movq    %rcx, %r11                   /* avx512 */
        xorl    %eax, %eax                   /* iterations = 0 */
        xorl    %r8d, %r8d                   /* failed checks = 0 */
        movabsq $0x7ec7012000000000, %r9     /* ymm i: kVectorBase + i */
        .irp    r,0,1,2,3,4,5,6,7,8,9,10,11,12,13,14
        vmovq   %r9, %xmm15                  /* value in the low quadword, */
        vpunpcklqdq %xmm15, %xmm15, %xmm15   /* in both of the low half, */
        vinsertf128 $1, %xmm15, %ymm15, %ymm\r /* in both halves of ymm r */
        incq    %r9
        .endr
        testq   %r11, %r11                   /* AVX-512 too? */
        jz      2f
        movabsq $0x7ec7012000000100, %r9     /* zmm i: kVectorBase + 0x100 + i */
        .irp    r,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
        vpbroadcastq %r9, %zmm\r             /* in all eight quadwords */
        incq    %r9
        .endr
        movl    $0x5a01, %r9d                /* k i: 0x5a00 + i */
        .irp    r,1,2,3,4,5,6,7
        kmovw   %r9d, %k\r
        incl    %r9d
        .endr
2:      incq    %rax                         /* one more iteration */
        movq    %rax, (%rsi)                 /* publish it */
        movabsq $0x7ec7012000000000, %r9
        .irp    r,0,1,2,3,4,5,6,7,8,9,10,11,12,13,14
        vextractf128 $1, %ymm\r, %xmm15      /* the upper half ... */
        vpextrq $1, %xmm15, %r10             /* ... its top quadword */
        cmpq    %r9, %r10
        setne   %r10b                        /* failed checks += (r10 != r9) */
        movzbq  %r10b, %r10
        addq    %r10, %r8
        incq    %r9
        .endr
        testq   %r11, %r11
        jz      3f
        movabsq $0x7ec7012000000100, %r9
        .irp    r,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31
        vextracti64x4 $1, %zmm\r, %ymm15     /* the upper 256 bits ... */
        vextractf128 $1, %ymm15, %xmm15      /* ... their upper half ... */
        vpextrq $1, %xmm15, %r10             /* ... its top quadword */
        cmpq    %r9, %r10
        setne   %r10b
        movzbq  %r10b, %r10
        addq    %r10, %r8
        incq    %r9
        .endr
        movl    $0x5a01, %r9d
        .irp    r,1,2,3,4,5,6,7
        kmovw   %k\r, %r10d
        cmpl    %r9d, %r10d
        setne   %r10b
        movzbq  %r10b, %r10
        addq    %r10, %r8
        incl    %r9d
        .endr
3:      cmpb    $0, (%rdi)                   /* stop requested? */
        je      2b                           /* no: go on */
        vzeroupper                           /* the ABI's state for the caller */
        movq    %r8, %rax                    /* return the failed checks */
        movq    %rbp, %rsp                   /* drop the offset */
        popq    %rbp
        .cfi_def_cfa %rsp, 8
        ret
        .cfi_endproc
        .size   goro_test_spin_vector, .-goro_test_spin_vector

        .section .note.GNU-stack,"",%progbits
