/* SPDX-License-Identifier: Apache-2.0 */
/*
 * owner.c - the owner hints of owner.h: one 16-bit entry per 2 MiB granule
 * of the 47-bit user address space (128 MiB of address space reserved
 * without backing; only the pages under the segments ever touched are
 * backed, 4 KiB per 4 GiB of segments). An entry is 0 (no hint), SHARED
 * (more than one pool's segment covers part of the granule), or 1 + the
 * device's index times SHIM_SHARDS_MAX + the shard.
 */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdatomic.h>
#include <sys/mman.h>

#include "config.h"
#include "owner.h"

enum { GRANULE_SHIFT = 21, ADDRESS_BITS = 47 };
#define GRANULES ((size_t)1 << (ADDRESS_BITS - GRANULE_SHIFT))
#define SHARED ((uint16_t)0xffff)

_Static_assert(SHIM_MAX_DEVICES * SHIM_SHARDS_MAX < 0xffff, "owner ids fit 16 bits");

static _Atomic uint16_t *map;
static pthread_once_t map_once = PTHREAD_ONCE_INIT;

static void map_make(void)
{
    void *m = mmap(NULL, GRANULES * sizeof(*map), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (m != MAP_FAILED)
        atomic_store_explicit(&map, m, memory_order_release);
}

static uint16_t owner_id(int dev, int shard)
{
    return (uint16_t)(1 + dev * SHIM_SHARDS_MAX + shard);
}

/* The map and the first and last granules of [base, base + size); NULL if
 * there is no map or the range lies outside it. */
static _Atomic uint16_t *granules(uintptr_t base, size_t size, size_t *first,
                                  size_t *last)
{
    _Atomic uint16_t *m = atomic_load_explicit(&map, memory_order_acquire);
    if (!m || !size || base + size < base || (base + size - 1) >> ADDRESS_BITS)
        return NULL;
    *first = base >> GRANULE_SHIFT;
    *last = (base + size - 1) >> GRANULE_SHIFT;
    return m;
}

static bool whole(uintptr_t base, size_t size, size_t g)
{
    uintptr_t lo = (uintptr_t)g << GRANULE_SHIFT, hi = lo + ((uintptr_t)1 << GRANULE_SHIFT);
    return base <= lo && hi <= base + size;
}

void shim_owner_set(uintptr_t base, size_t size, int dev, int shard)
{
    pthread_once(&map_once, map_make);
    size_t first, last;
    _Atomic uint16_t *m = granules(base, size, &first, &last);
    if (!m)
        return;
    uint16_t id = owner_id(dev, shard);
    for (size_t g = first; g <= last; g++) {
        if (whole(base, size, g)) {
            atomic_store_explicit(&m[g], id, memory_order_relaxed);
            continue;
        }
        /* A granule the segment shares with a neighbour: the neighbour's
         * pool may be another. */
        uint16_t old = atomic_load_explicit(&m[g], memory_order_relaxed);
        while (old != id && old != SHARED &&
               !atomic_compare_exchange_weak_explicit(&m[g], &old, old ? SHARED : id,
                                                      memory_order_relaxed,
                                                      memory_order_relaxed))
            ;
    }
}

void shim_owner_clear(uintptr_t base, size_t size, int dev, int shard)
{
    size_t first, last;
    _Atomic uint16_t *m = granules(base, size, &first, &last);
    if (!m)
        return;
    uint16_t id = owner_id(dev, shard);
    for (size_t g = first; g <= last; g++) {
        uint16_t old = id;
        if (whole(base, size, g))
            atomic_compare_exchange_strong_explicit(&m[g], &old, 0, memory_order_relaxed,
                                                    memory_order_relaxed);
    }
}

int shim_owner_hint(uintptr_t addr, int *dev, int *shard)
{
    _Atomic uint16_t *m = atomic_load_explicit(&map, memory_order_acquire);
    if (!m || addr >> ADDRESS_BITS)
        return -ENOENT;
    uint16_t id = atomic_load_explicit(&m[addr >> GRANULE_SHIFT], memory_order_relaxed);
    if (!id || id == SHARED)
        return -ENOENT;
    *dev = (id - 1) / SHIM_SHARDS_MAX;
    *shard = (id - 1) % SHIM_SHARDS_MAX;
    return 0;
}
