/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fence.c - fences, and the clean block a request gets. A free makes its
 * block dirty: work queued before the free may still use the memory. A
 * fence (the backend makes every block freed so far safe to reuse) makes
 * them clean, to be handed out again. Fences are synchronous (the
 * backend's fence) or asynchronous (fence_begin, then fence_poll reports
 * them done; up to POOL_FENCES_MAX in flight, one generation of dirty
 * blocks per epoch).
 *
 * A fence costs time, a dirty block that cannot be handed out costs memory:
 * pool_block_find fences when a dirty block would serve a request better
 * than the clean choice, or when nothing clean fits. The clean choice is
 * pool_find_fit's (fit.c), under the pool's fit policy.
 */
#include <errno.h>
#include <string.h>

#include "pool_internal.h"

static int fence_failed(pool *p, int err)
{
    p->st.fence_failures += err != -EAGAIN;
    p->st.fence_deferrals += err == -EAGAIN;
    return err;
}

/* Makes the blocks freed in every epoch up to upto clean, merging each with
 * its clean neighbours. */
static void clean_upto(pool *p, uint64_t upto)
{
    for (uint64_t e = p->clean_upto + 1; e <= upto; e++) {
        for (int k = 0; k < POOL_KINDS; k++) {
            pool_block *d;
            while ((d = pool_dirty_any(pool_gen_of(p, e, k)))) {
                pool_index_del(p, d);
                d->dirty = false;
                pool_index_add(p, pool_block_coalesce(p, d));
            }
        }
    }
    if (upto > p->clean_upto)
        p->clean_upto = upto;
}

/* Issues the backend's fence, which orders everything at once. On success
 * every dirty block becomes clean and merges with its free neighbours;
 * returns 0, or the fence's error (-EAGAIN: no fence possible now) with
 * nothing changed. */
int pool_fence(pool *p)
{
    int err = p->be.fence(p->be.ctx);
    if (err)
        return fence_failed(p, err);
    p->st.fences++;
    p->ninflight = 0; /* this fence orders what theirs would */
    p->allocs_since_fence = 0;
    clean_upto(p, p->epoch++);
    return 0;
}

/* Asks the backend which asynchronous fences are done (with force, after
 * it made the oldest one done) and cleans their epochs. 0 or the backend's
 * error. */
static int poll_async(pool *p, bool force)
{
    uint64_t done = 0;
    int err = p->be.fence_poll(p->be.ctx, force, &done);
    if (err)
        return fence_failed(p, err);
    unsigned n = 0;
    while (n < p->ninflight && p->inflight[n].ticket <= done)
        n++;
    if (n) {
        clean_upto(p, p->inflight[n - 1].epoch);
        p->ninflight -= n;
        memmove(p->inflight, p->inflight + n, p->ninflight * sizeof(p->inflight[0]));
    }
    return 0;
}

/* Begins an asynchronous fence over the blocks freed since the last one,
 * if there are any and room for one, and polls again: a fence with nothing
 * to wait for is done at once. 0 or the backend's error (not -EAGAIN: no
 * fence now leaves the blocks dirty). */
static int begin_async(pool *p)
{
    if (pool_gen_of(p, p->epoch, POOL_SMALL)->count +
            pool_gen_of(p, p->epoch, POOL_LARGE)->count == 0 ||
        p->ninflight == POOL_FENCES_MAX)
        return 0;
    uint64_t ticket = 0;
    int err = p->be.fence_begin(p->be.ctx, &ticket);
    if (err) {
        fence_failed(p, err);
        return err == -EAGAIN ? 0 : err;
    }
    p->st.fences++;
    p->allocs_since_fence = 0;
    p->inflight[p->ninflight].epoch = p->epoch++;
    p->inflight[p->ninflight++].ticket = ticket;
    return poll_async(p, false);
}

/* True if a dirty block of kind freed in an epoch before upto fits a
 * request of size bytes in a size bin below limit (pool_dirty_fits_below). */
static bool dirty_fits(const pool *p, enum pool_kind kind, size_t size,
                       unsigned limit, uint64_t upto)
{
    for (uint64_t e = p->clean_upto + 1; e < upto; e++)
        if (pool_dirty_fits_below(&p->gens[e % p->ngens][kind], size, limit))
            return true;
    return false;
}

/* True if a dirty block freed before epoch upto fits a request of size
 * bytes better than c (in a smaller size bin) and c is more than
 * fence_slack percent larger than the request; or fits at all if c is
 * NULL. */
static bool dirty_fits_before(const pool *p, enum pool_kind kind, size_t size,
                              const pool_block *c, uint64_t upto)
{
    size_t slack = p->cfg.fence_slack;
    if (c && c->size - size <= size / 100 * slack + size % 100 * slack / 100)
        return false;
    return dirty_fits(p, kind, size, c ? pool_bin_of(c->size) : POOL_BINS, upto);
}

/* True if a dirty block of kind, merged with the free blocks beside it,
 * would fit size bytes once every fence is done. */
static bool dirty_merged_fits(const pool *p, enum pool_kind kind, size_t size)
{
    for (uint64_t e = p->clean_upto + 1; e <= p->epoch; e++)
        if (pool_dirty_merged_fits(&p->gens[e % p->ngens][kind], size))
            return true;
    return false;
}

/* Finds a clean block with asynchronous fences: retires those done, begins
 * one over the blocks freed since the last, and looks. Then, before it
 * grows or takes a worse fit than a block freed before this call would be
 * (a block freed since then waits for the next call instead), it forces
 * fences done, oldest first, one at a time: the backend orders the streams
 * on the GPU, which costs less than the memory the blocks would take.
 * Before it grows, that includes a dirty block too small alone that its
 * free neighbours would make large enough (a free beside a block that a
 * fence has already made clean: a synchronous fence merges them at once). */
static int find_async(pool *p, enum pool_kind kind, size_t size, pool_block **b)
{
    uint64_t entry = p->epoch;
    int err = poll_async(p, false);
    if (!err)
        err = begin_async(p);
    *b = pool_find_fit(p, kind, size);
    while (!err && p->ninflight &&
           (dirty_fits_before(p, kind, size, *b, *b ? entry : p->epoch + 1) ||
            (!*b && dirty_merged_fits(p, kind, size)))) {
        unsigned before = p->ninflight;
        if ((err = poll_async(p, true)) != 0 || p->ninflight == before)
            break; /* it could not force one now */
        p->st.fence_forced++;
        err = begin_async(p);
        *b = pool_find_fit(p, kind, size);
    }
    return err;
}

/* Whether to fence before serving a request whose best clean fit is c.
 * Always when nothing clean fits but dirty blocks exist (a fence is far
 * cheaper than a new segment, and merging may make a fit). Otherwise only
 * once fence_interval allocations (1 for large requests) have passed since
 * the last fence, and
 * then if a dirty block fits in a smaller size bin than c, or if the dirty
 * set has grown past 4 x fence_interval blocks. So a loop that frees and
 * reallocates the same block pays one fence per fence_interval pairs
 * instead of one per pair, and the blocks a fence moves to the clean index
 * stay few and recently touched. */
static bool fence_wanted(pool *p, enum pool_kind kind, size_t size,
                         const pool_block *c)
{
    size_t dirty = pool_dirty_count(p, kind);
    if (!dirty)
        return false;
    if (!c)
        return true;
    /* Large blocks keep strict best fit: their packing matters most, and a
     * fence is small next to what a large block is used for. */
    size_t interval = kind == POOL_LARGE ? 1 : p->cfg.fence_interval;
    if (p->allocs_since_fence < interval)
        return false;
    if (dirty > 4 * p->cfg.fence_interval)
        return true;
    return dirty_fits(p, kind, size, pool_bin_of(c->size), p->epoch + 1);
}

/* Finds a clean block for the request, fencing first when fence_wanted
 * says so. *b is NULL when nothing fits even then. */
int pool_block_find(pool *p, enum pool_kind kind, size_t size, pool_block **b)
{
    *b = pool_find_fit(p, kind, size);
    if (!fence_wanted(p, kind, size, *b))
        return 0;
    if (p->be.fence_begin)
        return find_async(p, kind, size, b);
    int err = pool_fence(p);
    if (err == -EAGAIN) /* no fence now: fresh memory is safe */
        return 0;
    if (!err)
        *b = pool_find_fit(p, kind, size);
    return err;
}
