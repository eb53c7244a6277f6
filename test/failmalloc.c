/* SPDX-License-Identifier: Apache-2.0 */
/*
 * failmalloc.c - preloaded by test_safety.py: host memory that runs out.
 * With FAILMALLOC_AFTER=N, the first N calls to malloc, calloc, realloc
 * and the aligned allocators succeed and every later one fails with
 * ENOMEM, as on a machine whose memory is exhausted. Without it, nothing
 * changes.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);

static atomic_long left = -1; /* -1: never fail */

__attribute__((constructor)) static void failmalloc_init(void)
{
    const char *s = getenv("FAILMALLOC_AFTER");
    if (s)
        atomic_store(&left, atol(s));
}

/* Whether this call must fail. */
static int out(void)
{
    long n = atomic_load(&left);
    while (n > 0 && !atomic_compare_exchange_weak(&left, &n, n - 1))
        ;
    if (n == 0)
        errno = ENOMEM;
    return n == 0;
}

void *malloc(size_t n) { return out() ? NULL : __libc_malloc(n); }
void *calloc(size_t k, size_t n) { return out() ? NULL : __libc_calloc(k, n); }
void *realloc(void *p, size_t n) { return out() ? NULL : __libc_realloc(p, n); }

int posix_memalign(void **p, size_t a, size_t n)
{
    if (out())
        return ENOMEM;
    *p = __libc_memalign(a, n);
    return *p ? 0 : ENOMEM;
}

void *aligned_alloc(size_t a, size_t n) { return out() ? NULL : __libc_memalign(a, n); }
