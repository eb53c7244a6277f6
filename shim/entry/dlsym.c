/* SPDX-License-Identifier: Apache-2.0 */
/*
 * dlsym.c - cupool's dlsym, the entry every caller's dlsym reaches (a
 * preloaded definition interposes every caller's, whichever glibc version
 * node it bound to: an unversioned definition satisfies both
 * dlsym@GLIBC_2.2.5 and dlsym@GLIBC_2.34). Lookups on an explicit handle go
 * through shim_dlsym_handle, which answers the driver's served names with
 * cupool's functions (driver.h) and CUPTI's subscribe calls with cupool's
 * hand-over (cupti.h). RTLD_DEFAULT and RTLD_NEXT depend on who asks
 * (glibc reads the caller's return address), so for them the x86-64 entry
 * jumps to glibc's dlsym with the caller's frame untouched:
 * dlsym(RTLD_NEXT, "malloc") from another interposer still finds the next
 * malloc after that interposer, not after cupool.
 */
#include <string.h>

#include "cupti.h"
#include "driver.h"
#include "symbols.h"

#define HIDDEN __attribute__((visibility("hidden")))

/* An explicit handle: the caller does not matter to glibc here. */
HIDDEN __attribute__((used)) void *shim_dlsym_handle(void *handle, const char *name)
{
    void *f = shim_dlsym(handle, name);
    if (!f || !name || name[0] != 'c' || name[1] != 'u')
        return f;
    if (!strncmp(name, "cupti", 5))
        return shim_cupti_answer(name, f);
    /* The exported name is also its own base name's answer only if the
     * driver's function for it is the one cupool wraps. */
    char base[64];
    size_t n = strcspn(name, "_");
    if (n >= sizeof(base))
        return f;
    memcpy(base, name, n);
    base[n] = '\0';
    return shim_drv_answer(base, f);
}

#if defined(__x86_64__)
__asm__(".text\n"
        ".globl dlsym\n"
        ".type dlsym, @function\n"
        "dlsym:\n"
        "    cmpq $0, %rdi\n"      /* RTLD_DEFAULT */
        "    je 1f\n"
        "    cmpq $-1, %rdi\n"     /* RTLD_NEXT */
        "    je 1f\n"
        "    jmp shim_dlsym_handle\n"
        "1:  movq shim_real_dlsym(%rip), %rax\n"
        "    testq %rax, %rax\n"
        "    jz 2f\n"
        "    jmp *%rax\n"          /* the caller's return address stays */
        "2:  pushq %rdi\n"
        "    pushq %rsi\n"
        "    subq $8, %rsp\n"
        "    call shim_dlsym_find_real\n"
        "    addq $8, %rsp\n"
        "    popq %rsi\n"
        "    popq %rdi\n"
        "    testq %rax, %rax\n"
        "    jz 3f\n"
        "    jmp *%rax\n"
        "3:  ret\n"
        ".size dlsym, .-dlsym\n"
        ".text\n");
#else
#error "cupool's dlsym entry is written for x86-64 only"
#endif
