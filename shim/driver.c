/*
 * driver.c - see driver.h: the real driver, and which entry points a
 * program is handed.
 *
 * dlsym is cupool's too (a preloaded definition interposes every caller's,
 * whichever glibc version node it bound to: an unversioned definition
 * satisfies both dlsym@GLIBC_2.2.5 and dlsym@GLIBC_2.34). Lookups on an
 * explicit handle go through shim_dlsym_handle, which answers the driver's
 * served names with cupool's functions. RTLD_DEFAULT and RTLD_NEXT depend
 * on who asks (glibc reads the caller's return address), so for them the
 * x86-64 entry jumps to glibc's dlsym with the caller's frame untouched:
 * dlsym(RTLD_NEXT, "malloc") from another interposer still finds the next
 * malloc after that interposer, not after cupool.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>

#include "process.h"
#include "cupti.h"
#include "driver.h"
#include "log.h"

shim_drv_table shim_drv;

#define EXPORT __attribute__((visibility("default")))
#define HIDDEN __attribute__((visibility("hidden")))

/* ---- glibc's dlsym -------------------------------------------------------- */

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
        "\n"
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

/* ---- the real driver -------------------------------------------------------- */

static pthread_mutex_t resolve_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_bool resolved;
static _Thread_local bool resolving; /* the driver's own dlsym calls */

int shim_drv_resolve(void)
{
    if (atomic_load_explicit(&resolved, memory_order_acquire))
        return 0;
    if (resolving)
        return -ENOENT;
    resolving = true;
    pthread_mutex_lock(&resolve_lock);
    if (!atomic_load_explicit(&resolved, memory_order_relaxed)) {
        /* Never load a driver the program did not. */
        void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
        if (h) {
#define SHIM_X_FIND(name, params) *(void **)&shim_drv.name = shim_dlsym(h, #name);
            SHIM_DRV_USED(SHIM_X_FIND)
            SHIM_DRV_SERVED(SHIM_X_FIND)
#undef SHIM_X_FIND
            /* Kept open: the driver stays for the process's life anyway. */
            atomic_store_explicit(&resolved, true, memory_order_release);
        }
    }
    pthread_mutex_unlock(&resolve_lock);
    resolving = false;
    return atomic_load_explicit(&resolved, memory_order_acquire) ? 0 : -ENOENT;
}

/* cupool's functions, by the exported name of the one each wraps. */
static const struct served {
    const char *name;
    void *hook;
    size_t slot; /* offset of the real one in shim_drv */
} served[] = {
#define SHIM_X_SERVED(name, params)                                           \
    {#name, (void *)shim_hook_##name, offsetof(shim_drv_table, name)},
    SHIM_DRV_SERVED(SHIM_X_SERVED)
#undef SHIM_X_SERVED
};

void *shim_drv_answer(const char *base, void *fn)
{
    /* Off (CUPOOL_DISABLE, a forked child): the driver's own, untouched. */
    if (!fn || !base || !shim_active() || shim_drv_resolve() != 0)
        return fn;
    size_t n = strlen(base);
    for (size_t i = 0; i < sizeof(served) / sizeof(served[0]); i++) {
        const struct served *s = &served[i];
        if (strncmp(s->name, base, n) != 0 || (s->name[n] != '\0' && s->name[n] != '_'))
            continue;
        void *real = *(void **)((char *)&shim_drv + s->slot);
        if (real == fn)
            return s->hook;
    }
    return fn;
}
