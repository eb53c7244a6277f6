/* SPDX-License-Identifier: Apache-2.0 */
/*
 * alloc.c - the allocation path: whether the block a request gets is
 * split, how large a segment the pool grows by when none fits (small, mid
 * or the request's own), and what it tries when the cap or the device
 * refuses (forcing fences, releasing idle segments, trimming, a smaller
 * segment). Which clean block fits (best or first fit, max_split) and
 * fences are fence.c's; stitching and releasing idle segments stitch.c's;
 * trimming trim.c's: all below this file, which only calls down.
 *
 * The allocation path allocates host memory only when a node slab or the
 * address map must grow, and does that before changing anything, so an
 * allocation that fails leaves the pool as it was.
 */
#include <errno.h>

#include "pool_internal.h"

static bool split_worth(const pool *p, const pool_block *b, size_t size)
{
    size_t rest = b->size - size;
    if (p->cfg.fit == POOL_FIT_NOSPLIT || pool_oversize(p, b->size) || rest == 0)
        return false;
    return pool_block_kind(b) == POOL_SMALL || rest > p->cfg.large_split_min;
}

/* The segment a large request of size bytes (rounded) would have alone;
 * 0 on overflow. */
static size_t own_segment(const pool *p, size_t size)
{
    return pool_round_up(size, p->cfg.large_round);
}

/* The mid segment for a large request of size bytes, at most mid_max.
 * Without a cap, mid_segment. Under a cap, memory is what runs out, and a
 * tail that no request of this size can use may be what a later one lacks
 * (twelve 8 MiB pairs in 20 MiB segments leave 48 MiB in 4 MiB tails): the
 * largest multiple of the request that mid_segment holds, so that requests
 * of one size fill their segments. */
static size_t mid_size(const pool *p, size_t size)
{
    if (!pool_budget_limit(p->budget))
        return p->cfg.mid_segment;
    return pool_round_up(p->cfg.mid_segment / size * size, p->cfg.large_round);
}

/* Segment size for a rounded request of kind; 0 on overflow. A mid-sized
 * request gets a mid segment, which the requests of a few layers share and
 * which, once free, serves whatever large request it fits: with segments of
 * their own size, activations whose size changes from step to step (a
 * variable batch) each keep segments no other size can use. Not where
 * max_split would keep the mid segment whole. */
static size_t segment_size(const pool *p, enum pool_kind kind, size_t size)
{
    if (p->cfg.fit == POOL_FIT_NOSPLIT)
        return size;
    if (kind == POOL_SMALL)
        return p->cfg.small_segment;
    if (size <= p->cfg.mid_max && !pool_oversize(p, p->cfg.mid_segment))
        return mid_size(p, size);
    return own_segment(p, size);
}

/* Serves the request from new memory: stitched from free memory where the
 * backend can, else a new segment of seg bytes. */
static int grow_once(pool *p, enum pool_kind kind, size_t size, size_t seg,
                     pool_block **out)
{
    if (kind == POOL_LARGE && p->be.stitch && p->cfg.fit != POOL_FIT_NOSPLIT) {
        int err = pool_stitch_grow(p, size, out);
        if (err <= 0)
            return err;
    }
    return pool_segment_grow(p, kind, seg, out);
}

/* Reserves a segment of seg bytes for the request, releasing idle segments
 * and retrying once if the cap or the backend says no. The new block is in
 * *out. */
static int grow_sized(pool *p, enum pool_kind kind, size_t size, size_t seg,
                      pool_block **out)
{
    if (!seg)
        return -EOVERFLOW;
    if (pool_budget_never(p->budget, seg))
        return -EDQUOT;
    int err = grow_once(p, kind, size, seg, out);
    if ((err == -EDQUOT || err == -ENOMEM) && p->be.fence_begin && pool_any_dirty(p)) {
        /* Asynchronous fences left blocks waiting: order them all now. */
        p->st.fence_forced++;
        if (pool_fence(p) == 0 && (*out = pool_find_fit(p, kind, size)) != NULL)
            return 0;
    }
    if (err == -EDQUOT || err == -ENOMEM) {
        size_t back = pool_release_idle(p, 0);
        if (back < seg)
            back += pool_trim_free(p, seg - back);
        if (back == 0)
            return err;
        p->st.retries++;
        err = grow_once(p, kind, size, seg, out);
    }
    return err;
}

/* Grows the pool for the request: a segment of segment_size, or, where a
 * mid segment cannot be had (the cap, the device), one of the request's
 * own size. */
static int block_grow(pool *p, enum pool_kind kind, size_t size,
                      pool_block **out)
{
    size_t seg = segment_size(p, kind, size);
    int err = grow_sized(p, kind, size, seg, out);
    if ((err == -EDQUOT || err == -ENOMEM) && kind == POOL_LARGE &&
        own_segment(p, size) < seg)
        err = grow_sized(p, kind, size, own_segment(p, size), out);
    return err;
}

static int alloc_locked(pool *p, size_t size, uintptr_t *addr)
{
    size_t rounded = pool_round_up(size, POOL_ALIGN);
    if (!rounded)
        return -EOVERFLOW;
    int err = pool_nodes_reserve(p, 2);
    if (!err)
        err = pool_addrmap_reserve(&p->live);
    if (err)
        return err;
    enum pool_kind kind = rounded <= p->cfg.small_max ? POOL_SMALL : POOL_LARGE;
    uint64_t grew = p->st.seg_reserves;
    pool_block *b;
    err = pool_block_find(p, kind, rounded, &b);
    if (!err && !b)
        err = block_grow(p, kind, rounded, &b);
    /* The split's node: finding or growing b may have used the ones
     * reserved above (a stitch's carves, a trim's cuts). */
    if (!err)
        err = pool_nodes_reserve(p, 1);
    if (err) {
        if (err == -EDQUOT || err == -ENOMEM)
            p->st.failures++;
        return err;
    }
    pool_index_del(p, b);
    if (b->seg->live++ == 0)
        p->idle_bytes -= pool_segment_idle_size(b->seg);
    if (split_worth(p, b, rounded))
        pool_block_split(p, b, rounded);
    b->requested = size;
    p->st.hits += grew == p->st.seg_reserves;
    p->allocs_since_fence++;
    pool_addrmap_put(&p->live, b->addr, b);
    pool_gauge_add(&p->st.requested, &p->st.requested_peak, size);
    pool_gauge_add(&p->st.allocated, &p->st.allocated_peak, b->size);
    pool_cached_update(p);
    b->born = ++p->st.allocs;
    *addr = b->addr;
    if (p->be.observe)
        p->be.observe(p->be.ctx, POOL_EV_ALLOC, 0, b->addr, size);
    return 0;
}

int pool_alloc(pool *p, size_t size, uintptr_t *addr)
{
    if (size == 0) {
        *addr = 0;
        return 0;
    }
    pthread_mutex_lock(&p->lock);
    int err = alloc_locked(p, size, addr);
    pthread_mutex_unlock(&p->lock);
    return err;
}
