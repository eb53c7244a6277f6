/* SPDX-License-Identifier: Apache-2.0 */
/*
 * devstate.c - see devstate.h.
 */
#include <string.h>

#include "cupti.h"
#include "devstate.h"
#include "process.h"
#include "real.h"

shim_device shim_devices[SHIM_MAX_DEVICES];

void shim_devices_init(void)
{
    for (int i = 0; i < SHIM_MAX_DEVICES; i++) {
        shim_devices[i].id = i;
        shim_devices[i].fenced_work = SHIM_WORK_NEVER;
        pthread_mutex_init(&shim_devices[i].lock, NULL);
        pthread_mutex_init(&shim_devices[i].order_lock, NULL);
    }
}

int shim_device_api(int dev)
{
    shim_device *d = &shim_devices[dev];
    int a = atomic_load(&d->api);
    if (!a) {
        int want = shim_real_resolve() == 0 ? SHIM_API_RUNTIME : SHIM_API_DRIVER;
        atomic_compare_exchange_strong(&d->api, &a, want);
        a = atomic_load(&d->api);
    }
    return a;
}

void shim_device_counts_fill(int dev, stats_device *out)
{
    const shim_device *d = &shim_devices[dev];
#define SHIM_DEV_FILL(name, unit, kind, help) \
    out->name = atomic_load_explicit(&d->count[SHIM_DEV_##name], memory_order_relaxed);
    STATS_DEVICE_COUNTS(SHIM_DEV_FILL)
#undef SHIM_DEV_FILL
}

int shim_device_mem_info(int dev, size_t *free_b, size_t *total)
{
    *free_b = *total = 0;
    return shim_device_cuda(&shim_devices[dev])->mem_info(free_b, total);
}

bool shim_device_stats(int dev, pool_stats *sum)
{
    bool any = false;
    memset(sum, 0, sizeof(*sum));
    for (size_t s = 0; s < shim_cfg.shards; s++) {
        pool *p = shim_device_shard_if_any(dev, (int)s);
        if (!p)
            continue;
        pool_stats one;
        pool_stats_get(p, &one);
#define X_GAUGE(name, doc) sum->name += one.name; sum->name##_peak += one.name##_peak;
#define X_COUNTER(name, doc) sum->name += one.name;
        POOL_GAUGES(X_GAUGE)
        POOL_COUNTERS(X_COUNTER)
#undef X_GAUGE
#undef X_COUNTER
        sum->free_blocks += one.free_blocks;
        sum->segments += one.segments;
        sum->idle_bytes += one.idle_bytes;
        sum->largest_free = one.largest_free > sum->largest_free ? one.largest_free
                                                                 : sum->largest_free;
        sum->epoch = one.epoch > sum->epoch ? one.epoch : sum->epoch;
        any = true;
    }
    /* The backend counts reserved bytes over all shards: its peak is exact. */
    if (any)
        sum->reserved_peak = atomic_load(&shim_devices[dev].reserved_peak);
    return any;
}

uint64_t shim_device_flush(int dev)
{
    uint64_t n = 0;
    for (size_t s = 0; s < shim_cfg.shards; s++) {
        pool *p = shim_device_shard_if_any(dev, (int)s);
        if (p)
            n += pool_flush(p);
    }
    return n;
}
