/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fit.c - the fit policy: which clean block a request gets. Best fit (the
 * default) takes the smallest clean block that holds the request, from the
 * size bins (bins.c); first fit, the lowest-addressed one, exists for
 * replay, to compare. Either way a block far larger than an oversize
 * request is refused (max_split): splitting it would strand the rest.
 * fence.c, alloc.c and stitch.c, above this file, ask it.
 */
#include "pool_internal.h"

/* Lowest-addressed clean block of kind with at least size bytes (first fit
 * exists for replay, not for service). Segments, in address order, whose
 * bound says no block fits are skipped; a walk that finds none in a segment
 * makes its bound exact, so a stale bound costs one walk. Before the
 * bounds, every block of every segment was walked: 100 000 live blocks
 * took 12 s to replay. */
static pool_block *first_fit(pool *p, enum pool_kind kind, size_t size)
{
    for (size_t i = 0; i < p->nsegs; i++) {
        pool_segment *s = p->segs[i];
        if (s->kind != kind || s->max_clean < size)
            continue;
        size_t largest = 0;
        for (pool_block *b = s->first; b; b = b->next) {
            if (!b->free || b->dirty)
                continue;
            if (b->size >= size)
                return b;
            largest = b->size > largest ? b->size : largest;
        }
        s->max_clean = largest;
    }
    return NULL;
}

/* The clean block a rounded request gets under the pool's fit policy,
 * honouring max_split; NULL if none. */
pool_block *pool_find_fit(pool *p, enum pool_kind kind, size_t size)
{
    pool_block *b = p->cfg.fit == POOL_FIT_FIRST
                        ? first_fit(p, kind, size)
                        : pool_bins_lower_bound(&p->clean[kind], size);
    if (!b || !pool_oversize(p, b->size))
        return b;
    if (!pool_oversize(p, size))
        return NULL;
    return b->size - size <= p->cfg.oversize_slack ? b : NULL;
}
