/* SPDX-License-Identifier: Apache-2.0 */
/*
 * budget.h - the cap on reserved bytes: how many are taken, how many may
 * be. A pool takes from its budget before every segment it reserves and
 * gives back what it releases. A budget of its own (pool_config's
 * max_reserved) caps one pool; a shared one (pool_config's budget) caps
 * several pools and anything else charged to it, as the shim's device cap
 * spans the device's shards and the memory it passes on to CUDA.
 *
 * A budget may answer to an outer one (pool_budget_outer): every byte it
 * takes must be taken from the outer too, as a process's device cap
 * answers to a group of processes' budget (shim/device/group.c).
 *
 * Thread safety: lock-free; any number of threads and pools may use one
 * (the outer budget's calls are its own affair).
 */
#ifndef CUPOOL_POOL_BUDGET_H
#define CUPOOL_POOL_BUDGET_H

#include <errno.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/* An outer budget: take returns 0 or -EDQUOT (force: take whatever the
 * limit, for memory held already); give returns what was taken. */
typedef struct pool_budget_outer {
    int (*take)(void *ctx, uint64_t size, bool force);
    void (*give)(void *ctx, uint64_t size);
    void *ctx;
} pool_budget_outer;

typedef struct pool_budget {
    _Atomic uint64_t used;  /* bytes taken */
    _Atomic uint64_t limit; /* bytes that may be taken: 0 = no cap */
    const pool_budget_outer *outer; /* or NULL; set before first use */
} pool_budget;

static inline uint64_t pool_budget_limit(const pool_budget *b)
{
    return atomic_load_explicit(&b->limit, memory_order_relaxed);
}

static inline void pool_budget_set_limit(pool_budget *b, uint64_t limit)
{
    atomic_store_explicit(&b->limit, limit, memory_order_relaxed);
}

/* True if size more bytes fit this budget's own limit now (its outer one
 * not asked). */
static inline bool pool_budget_room(const pool_budget *b, uint64_t size)
{
    uint64_t lim = pool_budget_limit(b);
    uint64_t used = atomic_load_explicit(&b->used, memory_order_relaxed);
    return !lim || (size <= lim && used <= lim - size);
}

/* True if size bytes alone pass the limit: no release can make room. */
static inline bool pool_budget_never(const pool_budget *b, uint64_t size)
{
    uint64_t lim = pool_budget_limit(b);
    return lim && size > lim;
}

/* Takes size bytes: 0, or -EDQUOT with nothing taken if the bytes taken
 * would pass the limit. Two threads never both pass it. */
static inline int pool_budget_take(pool_budget *b, uint64_t size)
{
    uint64_t used = atomic_load_explicit(&b->used, memory_order_relaxed);
    do {
        uint64_t lim = pool_budget_limit(b);
        if (lim && (size > lim || used > lim - size))
            return -EDQUOT;
    } while (!atomic_compare_exchange_weak_explicit(&b->used, &used, used + size,
                                                    memory_order_relaxed,
                                                    memory_order_relaxed));
    if (b->outer && b->outer->take(b->outer->ctx, size, false) != 0) {
        atomic_fetch_sub_explicit(&b->used, size, memory_order_relaxed);
        return -EDQUOT;
    }
    return 0;
}

/* Takes size bytes whatever the limit: memory held already. */
static inline void pool_budget_charge(pool_budget *b, uint64_t size)
{
    atomic_fetch_add_explicit(&b->used, size, memory_order_relaxed);
    if (b->outer)
        b->outer->take(b->outer->ctx, size, true);
}

/* Gives back size bytes taken or charged. */
static inline void pool_budget_give(pool_budget *b, uint64_t size)
{
    atomic_fetch_sub_explicit(&b->used, size, memory_order_relaxed);
    if (b->outer)
        b->outer->give(b->outer->ctx, size);
}

#endif /* CUPOOL_POOL_BUDGET_H */
