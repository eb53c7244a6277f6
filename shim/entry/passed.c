/* SPDX-License-Identifier: Apache-2.0 */
/*
 * passed.c - see passed.h. One map per kind from key to (device, size)
 * (pool/addrmap.h), under one mutex: these calls are the slow ones (each
 * is a driver call of microseconds), never the pool's fast path.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "addrmap.h"
#include "cap.h"
#include "log.h"
#include "passed.h"
#include "stats.h"

typedef struct entry {
    uint64_t size;
    int dev;
} entry;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pool_addrmap maps[SHIM_PASSED_HANDLE + 1]; /* by kind: entry */

void shim_passed_settle(int dev, bool ok, int kind, uintptr_t key, size_t took, size_t size)
{
    if (dev < 0)
        return;
    if (!ok || !key) {
        shim_cap_give_passed(dev, took);
        return;
    }
    /* A pitched allocation is larger than asked: made already, counted. */
    if (size > took)
        shim_cap_take_passed(dev, size - took, NULL);
    else if (size < took)
        shim_cap_give_passed(dev, took - size);
    shim_passed_record(dev, kind, key, size);
}

void shim_passed_record(int dev, int kind, uintptr_t key, size_t size)
{
    entry *e = malloc(sizeof(*e));
    pthread_mutex_lock(&lock);
    bool ok = e && key && pool_addrmap_reserve(&maps[kind]) == 0;
    if (ok) {
        *e = (entry){size, dev};
        pool_addrmap_put(&maps[kind], key, e);
    }
    pthread_mutex_unlock(&lock);
    if (!ok) { /* never freed as far as the count knows: say so */
        free(e);
        shim_log(SHIM_LOG_WARN, "device %d: out of host memory; %zu bytes passed "
                 "on stay counted after they are freed", dev, size);
    }
}

bool shim_passed_release(int kind, uintptr_t key)
{
    pthread_mutex_lock(&lock);
    entry *e = pool_addrmap_take(&maps[kind], key);
    if (e)
        shim_cap_give_passed(e->dev, e->size);
    pthread_mutex_unlock(&lock);
    bool found = e != NULL; /* e is not to be read once freed */
    free(e);
    return found;
}

static bool on_device(uintptr_t key, void *val, void *dev)
{
    (void)key;
    entry *e = val;
    if (e->dev != *(int *)dev)
        return false;
    free(e);
    return true;
}

void shim_passed_forget_device(int dev)
{
    pthread_mutex_lock(&lock);
    for (size_t k = 0; k < sizeof(maps) / sizeof(maps[0]); k++)
        pool_addrmap_drop_if(&maps[k], on_device, &dev);
    shim_cap_forget_passed(dev);
    pthread_mutex_unlock(&lock);
}
