/* SPDX-License-Identifier: Apache-2.0 */
/*
 * driver.c - see driver.h: the real driver, and which entry points a
 * program is handed.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <string.h>

#include "process.h"
#include "driver.h"
#include "log.h"
#include "symbols.h"

shim_drv_table shim_drv;

#define EXPORT __attribute__((visibility("default")))
#define HIDDEN __attribute__((visibility("hidden")))

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
