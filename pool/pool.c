/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pool.c - the pool's front: configuration, free, queries, flush,
 * statistics and life cycle. The rest of pool/, highest first: a file
 * calls only files below it (DESIGN.md, "The pool"):
 *   check.c    pool_check (reads every index; nothing calls it);
 *   alloc.c    pool_alloc: splitting, segment sizes, growth and retries;
 *   stitch.c   stitched segments: free units mapped into one range;
 *              releasing idle segments, unstitching first;
 *   trim.c     giving back whole trim units under free blocks;
 *   fence.c    fences, and the clean block a request gets (fit policy);
 *   segment.c  the segment array, reserving and releasing a segment;
 *   block.c    block nodes, the free indexes, split and merge;
 *   dirty.c, bins.c, tree.c  the free indexes; addrmap.c  the live blocks.
 *
 * Every public function takes the pool's lock for its whole run.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pool_internal.h"

#define MIB ((size_t)1 << 20)

void pool_config_default(pool_config *cfg)
{
    cfg->small_max = 1 * MIB;
    cfg->small_segment = 8 * MIB;
    cfg->large_round = 2 * MIB;
    cfg->mid_max = 10 * MIB;
    cfg->mid_segment = 20 * MIB;
    cfg->large_split_min = 1 * MIB;
    cfg->max_split = 0;
    cfg->oversize_slack = 20 * MIB;
    cfg->max_reserved = 0;
    cfg->budget = NULL;
    cfg->release_threshold = SIZE_MAX;
    cfg->fence_interval = 64;
    cfg->fence_slack = 0;
    cfg->fit = POOL_FIT_BEST;
}

int pool_config_validate(const pool_config *c)
{
    if (!c->small_segment || !c->large_round || !c->small_max)
        return -EINVAL;
    if (c->small_segment % POOL_ALIGN || c->large_round % POOL_ALIGN ||
        c->small_max % POOL_ALIGN || c->max_split % POOL_ALIGN)
        return -EINVAL;
    if (c->mid_segment % POOL_ALIGN || (c->mid_max && c->mid_segment < c->mid_max))
        return -EINVAL;
    if (c->small_max > c->small_segment || c->fence_interval == 0 ||
        c->fence_slack > 100000)
        return -EINVAL;
    if (c->budget && c->max_reserved) /* one cap: the budget's */
        return -EINVAL;
    if (c->fit != POOL_FIT_BEST && c->fit != POOL_FIT_FIRST &&
        c->fit != POOL_FIT_NOSPLIT)
        return -EINVAL;
    /* A fresh segment must always serve the request that made it. */
    if (c->max_split && (c->max_split <= c->small_segment ||
                         c->oversize_slack < c->large_round))
        return -EINVAL;
    return 0;
}

const char *pool_strerror(int err)
{
    switch (err) {
    case 0: return "success";
    case -EOVERFLOW: return "size too large";
    case -EDQUOT: return "reserved-memory cap reached";
    case -ENOMEM: return "out of device memory";
    case -ENOBUFS: return "out of host memory (for the pool's own records; the "
                          "device was not asked)";
    case -ENOENT: return "address not owned by the pool";
    case -EINVAL: return "address inside a block, not its start";
    case -EALREADY: return "block already free (double free)";
    case -EFAULT: return "pool invariant broken";
    default: return "backend error";
    }
}

/* ---- free --------------------------------------------------------------- */

/* The segment and the live block holding addr: 0, -EALREADY (a free
 * block) or -ENOENT. Needs p->lock. */
static int holding(const pool *p, uintptr_t addr, pool_span *seg, pool_span *block,
                   uint64_t *born)
{
    long i = pool_segment_find(p, addr);
    if (i < 0)
        return -ENOENT;
    const pool_block *b = p->segs[i]->first;
    while (addr - b->addr >= b->size)
        b = b->next;
    *seg = (pool_span){p->segs[i]->base, p->segs[i]->size};
    *block = (pool_span){b->addr, b->size};
    *born = b->born;
    return b->free || b->lent ? -EALREADY : 0;
}

/* Why addr is not a live block's start: -ENOENT, -EINVAL or -EALREADY. */
static int diagnose(const pool *p, uintptr_t addr)
{
    pool_span seg, block;
    uint64_t born;
    int err = holding(p, addr, &seg, &block, &born);
    return err ? err : -EINVAL; /* inside a live block: a part was freed */
}

static int free_locked(pool *p, uintptr_t addr)
{
    pool_block *b = pool_addrmap_take(&p->live, addr);
    if (!b) {
        int err = diagnose(p, addr);
        p->st.bad_frees += err != -ENOENT;
        if (err != -ENOENT && p->be.observe)
            p->be.observe(p->be.ctx, POOL_EV_FREE, err, addr, 0);
        return err;
    }
    if (p->be.observe) /* before any release it leads to */
        p->be.observe(p->be.ctx, POOL_EV_FREE, 0, addr, b->requested);
    p->st.requested -= b->requested;
    p->st.allocated -= b->size;
    pool_cached_update(p);
    p->st.frees++;
    b->requested = 0;
    b->epoch = p->epoch;
    b->dirty = p->be.fence != NULL;
    if (--b->seg->live == 0)
        p->idle_bytes += pool_segment_idle_size(b->seg);
    pool_index_add(p, pool_block_coalesce(p, b));
    if (p->idle_bytes > p->cfg.release_threshold)
        pool_release_idle(p, p->cfg.release_threshold);
    return 0;
}

int pool_free(pool *p, uintptr_t addr)
{
    pthread_mutex_lock(&p->lock);
    int err = free_locked(p, addr);
    pthread_mutex_unlock(&p->lock);
    return err;
}

/* ---- queries and control --------------------------------------------- */

int pool_owns(pool *p, uintptr_t addr)
{
    pthread_mutex_lock(&p->lock);
    int owns = pool_segment_find(p, addr) >= 0;
    pthread_mutex_unlock(&p->lock);
    return owns;
}

int pool_block_size(pool *p, uintptr_t addr, size_t *size)
{
    pthread_mutex_lock(&p->lock);
    pool_block *b = pool_addrmap_get(&p->live, addr);
    int err = b ? 0 : diagnose(p, addr);
    if (b)
        *size = b->size;
    pthread_mutex_unlock(&p->lock);
    return err;
}

int pool_segment_of(pool *p, uintptr_t addr, uintptr_t *base, size_t *size)
{
    pool_span seg, block;
    uint64_t born;
    pthread_mutex_lock(&p->lock);
    int err = holding(p, addr, &seg, &block, &born);
    pthread_mutex_unlock(&p->lock);
    if (err != -ENOENT)
        *base = seg.addr, *size = seg.size;
    return err;
}

int pool_block_of(pool *p, uintptr_t addr, pool_span *block, uint64_t *born)
{
    pool_span seg;
    pthread_mutex_lock(&p->lock);
    int err = holding(p, addr, &seg, block, born);
    pthread_mutex_unlock(&p->lock);
    return err;
}

size_t pool_flush(pool *p)
{
    pthread_mutex_lock(&p->lock);
    if (p->stitched_segs && pool_any_dirty(p))
        pool_fence(p); /* a stitched segment unstitches only when clean */
    size_t released = pool_release_idle(p, 0);
    released += pool_trim_free(p, SIZE_MAX);
    p->st.flushes++;
    pthread_mutex_unlock(&p->lock);
    return released;
}

void pool_set_max_reserved(pool *p, size_t max_reserved)
{
    pthread_mutex_lock(&p->lock);
    if (p->budget == &p->own_budget)
        p->cfg.max_reserved = max_reserved;
    pool_budget_set_limit(p->budget, max_reserved);
    pthread_mutex_unlock(&p->lock);
}

void pool_stats_get(pool *p, pool_stats *out)
{
    pthread_mutex_lock(&p->lock);
    *out = p->st;
    out->free_blocks = 0;
    out->segments = p->nsegs;
    out->idle_bytes = p->idle_bytes;
    out->epoch = p->epoch;
    out->largest_free = 0;
    for (int k = 0; k < POOL_KINDS; k++) {
        pool_block *m = pool_bins_max(&p->clean[k]);
        if (m && m->size > out->largest_free)
            out->largest_free = m->size;
        for (unsigned g = 0; g < p->ngens; g++) {
            size_t dm = pool_dirty_max(&p->gens[g][k]);
            if (dm > out->largest_free)
                out->largest_free = dm;
        }
        out->free_blocks += p->clean[k].count + pool_dirty_count(p, k);
    }
    pthread_mutex_unlock(&p->lock);
}

/* ---- life cycle ---------------------------------------------------------- */

int pool_create(const pool_config *cfg, const pool_backend *be, pool **out)
{
    pool_config def;
    if (!cfg) {
        pool_config_default(&def);
        cfg = &def;
    }
    if (!be || !be->reserve || !be->release || pool_config_validate(cfg))
        return -EINVAL;
    if ((be->fence_begin || be->fence_poll) &&
        !(be->fence && be->fence_begin && be->fence_poll))
        return -EINVAL;
    if ((be->trim || be->stitch) && (be->trim_unit < POOL_ALIGN ||
                                     (be->trim_unit & (be->trim_unit - 1))))
        return -EINVAL;
    if ((be->stitch || be->unstitch || be->extend) && !(be->stitch && be->unstitch))
        return -EINVAL;
    pool *p = calloc(1, sizeof(*p));
    if (!p)
        return -ENOBUFS;
    p->cfg = *cfg;
    p->be = *be;
    p->budget = cfg->budget ? cfg->budget : &p->own_budget;
    if (!cfg->budget)
        pool_budget_set_limit(&p->own_budget, cfg->max_reserved);
    p->epoch = 1;
    p->ngens = be->fence_begin ? POOL_FENCES_MAX + 1 : 1;
    p->gens = calloc(p->ngens, sizeof(*p->gens));
    /* Critical sections are short (tens of ns): spin briefly before
     * sleeping, where the C library offers it. */
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
#ifdef PTHREAD_MUTEX_ADAPTIVE_NP
    pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_ADAPTIVE_NP);
#endif
    int lock_err = pthread_mutex_init(&p->lock, &attr);
    pthread_mutexattr_destroy(&attr);
    if (!p->gens || pool_addrmap_init(&p->live) || lock_err) {
        pool_addrmap_fini(&p->live);
        free(p->gens);
        free(p);
        return -ENOBUFS;
    }
    *out = p;
    return 0;
}

void pool_destroy(pool *p)
{
    if (!p)
        return;
    /* Stitched segments first (they map the others' memory), each once no
     * other maps part of it: unstitching frees its parts. */
    for (size_t left = p->stitched_segs; left;) {
        for (size_t i = 0; i < p->nsegs; i++) {
            pool_segment *s = p->segs[i];
            bool lends = false;
            for (pool_block *b = s->first; s->parts && !lends && b; b = b->next)
                lends = b->lent != NULL;
            if (!s->parts || lends)
                continue;
            p->be.unstitch(p->be.ctx, s->base, s->size);
            for (size_t k = 0; k < s->nparts; k++)
                s->parts[k]->lent = NULL;
            free(s->parts);
            s->parts = NULL;
            s->size = 0; /* nothing to release below */
            left--;
        }
    }
    for (size_t i = 0; i < p->nsegs; i++) {
        if (p->segs[i]->size)
            p->be.release(p->be.ctx, p->segs[i]->base, p->segs[i]->size);
        free(p->segs[i]);
    }
    pool_budget_give(p->budget, p->st.reserved);
    for (size_t i = 0; i < p->nslabs; i++)
        free(p->slabs[i]);
    free(p->slabs);
    free(p->segs);
    pool_addrmap_fini(&p->live);
    pthread_mutex_destroy(&p->lock);
    free(p->gens);
    free(p);
}

bool pool_hold(pool *p, unsigned timeout_ms)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    t.tv_sec += timeout_ms / 1000;
    t.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (t.tv_nsec >= 1000000000L) {
        t.tv_sec++;
        t.tv_nsec -= 1000000000L;
    }
    return pthread_mutex_timedlock(&p->lock, &t) == 0;
}

void pool_let_go(pool *p) { pthread_mutex_unlock(&p->lock); }

void pool_forget(pool *p)
{
    pthread_mutex_lock(&p->lock);
    for (size_t i = 0; i < p->nsegs; i++) {
        free(p->segs[i]->parts);
        free(p->segs[i]);
    }
    p->forgotten_segs += p->nsegs - p->stitched_segs;
    p->nsegs = 0;
    p->stitched_segs = 0;
    for (size_t i = 0; i < p->nslabs; i++)
        free(p->slabs[i]);
    p->nslabs = 0;
    p->spare = NULL;
    memset(p->clean, 0, sizeof(p->clean));
    memset(p->gens, 0, p->ngens * sizeof(*p->gens));
    p->ninflight = 0;
    p->clean_upto = p->epoch++;
    pool_addrmap_clear(&p->live);
    pool_budget_give(p->budget, p->st.reserved); /* the device has none of it */
    p->st.requested = p->st.allocated = p->st.reserved = p->st.cached = 0;
    p->idle_bytes = 0;
    p->allocs_since_fence = 0;
    pthread_mutex_unlock(&p->lock);
}
