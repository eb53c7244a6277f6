/*
 * passed.c - see passed.h. One map per kind from key to (device, size)
 * (pool/addrmap.h), under one mutex: these calls are the slow ones (each
 * is a driver call of microseconds), never the pool's fast path.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

#include "addrmap.h"
#include "device.h"
#include "log.h"
#include "passed.h"
#include "stats.h"

typedef struct entry {
    uint64_t size;
    int dev;
} entry;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pool_addrmap maps[SHIM_PASSED_HANDLE + 1]; /* by kind: entry */

/* Counts size bytes passed on, taken from the budget already. */
static void passed_add(shim_device *d, uint64_t size)
{
    uint64_t now = atomic_fetch_add(&d->passed, size) + size;
    uint64_t peak = atomic_load(&d->passed_peak);
    while (now > peak && !atomic_compare_exchange_weak(&d->passed_peak, &peak, now))
        ;
}

/* Stops counting size bytes passed on, and gives them back to the budget. */
static void passed_sub(shim_device *d, uint64_t size)
{
    atomic_fetch_sub(&d->passed, size);
    pool_budget_give(&d->budget, size);
}

int shim_passed_take(int dev, size_t size, const char *call)
{
    shim_device *d = &shim_devices[dev];
    if (!call) {
        pool_budget_charge(&d->budget, size);
        passed_add(d, size);
        return 0;
    }
    /* Never makes the pool (its creation calls the runtime, which may be
     * the caller, holding its locks: NCCL's and the runtime's own
     * cuMemCreate come here); the cap is known without it. */
    uint64_t cap = shim_device_cap(dev);
    for (int attempt = 0;; attempt++) {
        if (pool_budget_take(&d->budget, size) == 0) {
            passed_add(d, size);
            return 0;
        }
        if (attempt == 1 || !shim_device_shard_if_any(dev, 0) || shim_device_flush(dev) == 0)
            break;
    }
    char rq[32], c[32], r[32], p[32];
    shim_log(SHIM_LOG_ERROR, "device %d: %s(%s) refused: the cap %s would be "
             "exceeded (pool reserved %s, passed on %s)", dev, call,
             stats_fmt_bytes(size, rq, sizeof(rq)), stats_fmt_bytes(cap, c, sizeof(c)),
             stats_fmt_bytes(atomic_load(&d->reserved), r, sizeof(r)),
             stats_fmt_bytes(atomic_load(&d->passed), p, sizeof(p)));
    return -EDQUOT;
}

void shim_passed_untake(int dev, size_t size)
{
    passed_sub(&shim_devices[dev], size);
}

void shim_passed_settle(int dev, bool ok, int kind, uintptr_t key, size_t took, size_t size)
{
    if (dev < 0)
        return;
    if (!ok || !key) {
        shim_passed_untake(dev, took);
        return;
    }
    /* A pitched allocation is larger than asked: made already, counted. */
    if (size > took)
        shim_passed_take(dev, size - took, NULL);
    else if (size < took)
        shim_passed_untake(dev, took - size);
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
        passed_sub(&shim_devices[e->dev], e->size);
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
    pool_budget_give(&shim_devices[dev].budget, atomic_exchange(&shim_devices[dev].passed, 0));
    pthread_mutex_unlock(&lock);
}
