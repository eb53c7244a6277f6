/* SPDX-License-Identifier: Apache-2.0 */
/*
 * real.c - finds the real CUDA runtime functions.
 *
 * dlsym(RTLD_NEXT) finds the runtime the program linked against. When a
 * plugin loaded it with RTLD_LOCAL (Python extensions do), RTLD_NEXT cannot
 * see it, so fall back to the already-loaded libcudart.so.13 or .12
 * (RTLD_NOLOAD: never load a runtime the program did not). Tried again on
 * each call until found.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include "log.h"
#include "symbols.h"
#include "real.h"

shim_real_table shim_real;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_bool resolved;

static const char *const runtimes[] = {"libcudart.so.13", "libcudart.so.12", NULL};

/* One try: true if every function that must be there was found. */
static bool resolve(void)
{
    int missing = 0;
    const char *first = NULL;
#define SHIM_X_FIND(ret, name, params)                                        \
    *(void **)&shim_real.name = shim_dlsym_loaded(#name, runtimes);           \
    if (!shim_real.name && !missing++)                                        \
        first = #name;
    SHIM_INTERPOSED(SHIM_X_FIND)
    SHIM_USED(SHIM_X_FIND)
#undef SHIM_X_FIND
#define SHIM_X_TRY(ret, name, params)                                         \
    *(void **)&shim_real.name = shim_dlsym_loaded(#name, runtimes);
    SHIM_OPTIONAL(SHIM_X_TRY)
#undef SHIM_X_TRY
    /* No runtime at all is the usual case of a program that reaches the
     * driver another way (driver.h); a runtime without a function cupool
     * needs is worth a line, once. */
    static bool told;
    if (missing && shim_real.cudaMalloc && !told) {
        told = true;
        shim_log(SHIM_LOG_ERROR, "the CUDA runtime's %s was not found; "
                 "calls that need it pass through", first);
    }
    return missing == 0;
}

int shim_real_resolve(void)
{
    if (atomic_load_explicit(&resolved, memory_order_acquire))
        return 0;
    /* Until the runtime is found, every call tries again: a program that
     * probed for it before loading it is served once it has. */
    pthread_mutex_lock(&lock);
    if (!atomic_load_explicit(&resolved, memory_order_relaxed) && resolve())
        atomic_store_explicit(&resolved, true, memory_order_release);
    pthread_mutex_unlock(&lock);
    return atomic_load_explicit(&resolved, memory_order_acquire) ? 0 : -ENOENT;
}
