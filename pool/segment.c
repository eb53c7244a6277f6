/* SPDX-License-Identifier: Apache-2.0 */
/*
 * segment.c - segments: the array of them sorted by base (pool_owns, bad
 * frees and trims find a segment by address in it), reserving a new one
 * from the backend under the budget, and releasing one that holds no live
 * block.
 *
 * A segment is released whole; giving back part of one is trim.c's, and a
 * stitched segment (which holds no memory of its own) goes by stitch.c, as
 * does choosing the idle segments to release (pool_release_idle unstitches
 * first): this file calls only block.c.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "grow.h"
#include "pool_internal.h"

static pool_span segment_at(const void *p, size_t i)
{
    const pool_segment *s = ((const pool *)p)->segs[i];
    return (pool_span){s->base, s->size};
}

long pool_segment_find(const pool *p, uintptr_t addr)
{
    return pool_span_find(p, p->nsegs, segment_at, addr);
}

/* Makes room in p->segs for one more segment. 0 or -ENOBUFS. */
int pool_segs_room(pool *p)
{
    return pool_grow((void **)&p->segs, &p->segs_cap, p->nsegs, sizeof(*p->segs))
               ? 0 : -ENOBUFS;
}

int pool_segs_insert(pool *p, pool_segment *s)
{
    if (pool_segs_room(p))
        return -ENOBUFS;
    size_t i = p->nsegs;
    while (i > 0 && p->segs[i - 1]->base > s->base) {
        p->segs[i] = p->segs[i - 1];
        i--;
    }
    p->segs[i] = s;
    p->nsegs++;
    return 0;
}

/* Releases segment i, which must hold no live block. Its free blocks (clean
 * and dirty alternate at most) leave their indexes. */
void pool_segment_release(pool *p, size_t i)
{
    pool_segment *s = p->segs[i];
    for (pool_block *b = s->first, *next; b; b = next) {
        next = b->next;
        pool_index_del(p, b);
        pool_node_give(p, b);
    }
    p->idle_bytes -= s->size;
    memmove(&p->segs[i], &p->segs[i + 1],
            (p->nsegs - i - 1) * sizeof(*p->segs));
    p->nsegs--;
    p->be.release(p->be.ctx, s->base, s->size);
    pool_reserved_drop(p, s->size);
    p->st.seg_releases++;
    p->st.released_bytes_total += s->size;
    free(s);
}

/* Reserves a new segment of size bytes and kind, indexes its one free
 * block and stores that block in *out. Returns 0, -EDQUOT, -ENOMEM (the
 * device), -ENOBUFS (host memory) or a backend error. */
int pool_segment_grow(pool *p, enum pool_kind kind, size_t size,
                      pool_block **out)
{
    /* Its own node: a caller's reservation may have gone to a trim or a
     * stitch before. */
    if (pool_nodes_reserve(p, 1) != 0)
        return -ENOBUFS;
    if (pool_budget_take(p->budget, size) != 0) {
        if (p->be.observe)
            p->be.observe(p->be.ctx, POOL_EV_CAP, -EDQUOT, 0, size);
        return -EDQUOT;
    }
    pool_segment *s = malloc(sizeof(*s));
    if (!s) {
        pool_budget_give(p->budget, size);
        return -ENOBUFS;
    }
    uintptr_t base = 0;
    int err = p->be.reserve(p->be.ctx, size, &base);
    if (!err && (!base || base % POOL_ALIGN)) {
        p->be.release(p->be.ctx, base, size);
        err = -EFAULT;
    }
    if (!err) {
        *s = (pool_segment){.base = base, .size = size, .kind = kind};
        err = pool_segs_insert(p, s);
        if (err)
            p->be.release(p->be.ctx, base, size);
    }
    if (err) {
        pool_budget_give(p->budget, size);
        free(s);
        return err;
    }
    pool_block *b = pool_node_take(p);
    *b = (pool_block){.addr = base, .size = size, .seg = s};
    s->first = b;
    pool_gauge_add(&p->st.reserved, &p->st.reserved_peak, size);
    pool_cached_update(p);
    p->st.seg_reserves++;
    p->st.reserved_bytes_total += size;
    p->idle_bytes += size;
    pool_index_add(p, b);
    *out = b;
    return 0;
}
