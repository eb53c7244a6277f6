/* SPDX-License-Identifier: Apache-2.0 */
/*
 * symbols.c - see symbols.h.
 */
#include <dlfcn.h>
#include <stddef.h>

#include "symbols.h"

#define HIDDEN __attribute__((visibility("hidden")))

HIDDEN void *(*shim_real_dlsym)(void *, const char *);

/* Fills shim_real_dlsym and returns it (NULL if glibc has none): written
 * in assembly below, because a sanitizer's runtime calls dlsym while it
 * starts, before instrumented code may run. Races store the same value. */
HIDDEN void *shim_dlsym_find_real(void);

/* Not instrumented: signals.c resolves libc through it while a sanitizer's
 * runtime starts. */
__attribute__((no_sanitize_thread)) void *shim_dlsym(void *handle, const char *name)
{
    void *(*real)(void *, const char *) = __atomic_load_n(&shim_real_dlsym, __ATOMIC_ACQUIRE);
    if (!real)
        real = (void *(*)(void *, const char *))shim_dlsym_find_real();
    return real ? real(handle, name) : NULL;
}

void *shim_dlsym_loaded(const char *name, const char *const *sonames)
{
    void *f = shim_dlsym(RTLD_NEXT, name);
    for (; !f && *sonames; sonames++) {
        void *h = dlopen(*sonames, RTLD_NOW | RTLD_NOLOAD);
        f = h ? shim_dlsym(h, name) : NULL;
    }
    return f;
}

#if defined(__x86_64__)
__asm__(".text\n"
        ".globl shim_dlsym_find_real\n"
        ".hidden shim_dlsym_find_real\n"
        ".type shim_dlsym_find_real, @function\n"
        "shim_dlsym_find_real:\n"
        "    subq $8, %rsp\n"
        "    movq $-1, %rdi\n"     /* the next dlsym after cupool: glibc's */
        "    leaq .Ldlsym_name(%rip), %rsi\n"
        "    leaq .Ldlsym_v234(%rip), %rdx\n"
        "    call dlvsym@PLT\n"
        "    testq %rax, %rax\n"
        "    jnz 4f\n"
        "    movq $-1, %rdi\n"
        "    leaq .Ldlsym_name(%rip), %rsi\n"
        "    leaq .Ldlsym_v225(%rip), %rdx\n"
        "    call dlvsym@PLT\n"
        "4:  movq %rax, shim_real_dlsym(%rip)\n"
        "    addq $8, %rsp\n"
        "    ret\n"
        ".size shim_dlsym_find_real, .-shim_dlsym_find_real\n"
        ".section .rodata\n"
        ".Ldlsym_name: .string \"dlsym\"\n"
        ".Ldlsym_v234: .string \"GLIBC_2.34\"\n"
        ".Ldlsym_v225: .string \"GLIBC_2.2.5\"\n"
        ".text\n");
#else
#error "cupool's dlsym entry is written for x86-64 only"
#endif

