/* SPDX-License-Identifier: Apache-2.0 */
/*
 * trim.c - trimming: giving back the whole trim units (the backend's
 * trim_unit, a power of two) under clean free blocks while their segments
 * stay, for a backend that can unmap part of a segment (CUPOOL_VMM).
 *
 * A trim cuts a segment in two, or shortens it, or (a segment all free)
 * removes it; the blocks on each side keep their state. The pool trims
 * when the cap or the device refuses growth and releasing idle segments
 * was not enough, and at pool_flush. Collecting the units is shared with
 * stitch.c, which maps the same units into a new segment instead.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "grow.h"
#include "pool_internal.h"

/* The trim units wholly inside free block b: [*lo, *hi), empty if none. */
static void trim_span(const pool *p, const pool_block *b, uintptr_t *lo,
                      uintptr_t *hi)
{
    uintptr_t u = p->be.trim_unit, end = b->addr + b->size;
    *lo = (b->addr + u - 1) & ~(u - 1);
    *hi = end & ~(u - 1);
    if (*hi < *lo)
        *hi = *lo;
}

/* Cuts [lo, hi) out of free block b (out of the index): b itself keeps
 * [b->addr, lo) if lo is past its start, and [hi, b's end), if any, goes to
 * a node (or to b, if it keeps nothing before lo), returned; NULL if none.
 * Unlinks the blocks before lo from those from hi; *after is the first from
 * hi (the returned block, b's old next, or NULL). Needs one spare node. */
static pool_block *cut_block(pool *p, pool_block *b, uintptr_t lo,
                             uintptr_t hi, pool_block **after)
{
    uintptr_t bend = b->addr + b->size;
    bool head = lo > b->addr;
    pool_block *before = b->prev, *rem = NULL;
    *after = b->next;
    if (bend > hi) {
        rem = head ? pool_node_take(p) : b;
        *rem = (pool_block){.addr = hi, .size = bend - hi, .epoch = b->epoch,
                            .free = true, .next = *after};
        if (*after)
            (*after)->prev = rem;
        *after = rem;
    }
    if (head) {
        b->size = lo - b->addr;
        b->next = NULL;
        before = b;
    } else if (rem != b) {
        pool_node_give(p, b);
    }
    if (before)
        before->next = NULL;
    if (*after)
        (*after)->prev = NULL;
    return rem;
}

/* Makes rs hold the part of segment s from hi to end, whose blocks start
 * at after: rs is a new segment, or s itself if nothing is left before the
 * cut. Returns how many live blocks rs holds. */
static size_t cut_right(pool_segment *s, pool_segment *rs, pool_block *after,
                        uintptr_t hi, uintptr_t end)
{
    size_t live = 0;
    *rs = (pool_segment){.base = hi, .size = end - hi, .kind = s->kind,
                         .first = after, .max_clean = s->max_clean};
    for (pool_block *x = after; x; x = x->next) {
        x->seg = rs;
        live += !x->free;
    }
    rs->live = live;
    return live;
}

/* Puts p->segs in step with a cut of segment i: new segment r goes after
 * it if parts are left on both sides; segment i goes if none is. */
static void cut_segs(pool *p, size_t i, pool_segment *r, bool left, bool right)
{
    if (left && right) {
        memmove(&p->segs[i + 2], &p->segs[i + 1],
                (p->nsegs - i - 1) * sizeof(*p->segs));
        p->segs[i + 1] = r;
        p->nsegs++;
        p->trim_segs++;
    } else if (!left && !right) {
        pool_segment *s = p->segs[i];
        memmove(&p->segs[i], &p->segs[i + 1],
                (p->nsegs - i - 1) * sizeof(*p->segs));
        p->nsegs--;
        p->trim_segs--;
        free(s);
    }
}

/* Gives back [lo, hi) (trim units inside clean free block b of segment i)
 * and holds what is left of the segment as up to two segments: the part
 * before lo and the part from hi, each keeping its blocks, b's remnants
 * included. Returns 0, or -ENOBUFS (host memory) or the backend's error with
 * nothing changed. */
static int segment_cut(pool *p, size_t i, pool_block *b, uintptr_t lo,
                       uintptr_t hi)
{
    pool_segment *s = p->segs[i];
    uintptr_t end = s->base + s->size;
    bool left = lo > s->base, right = hi < end, head = lo > b->addr;
    pool_segment *r = NULL;
    if (left && right) {
        r = malloc(sizeof(*r));
        if (!r || pool_segs_room(p) || pool_nodes_reserve(p, 1)) {
            free(r);
            return -ENOBUFS;
        }
    }
    int err = p->be.trim(p->be.ctx, lo, hi - lo);
    if (err) {
        free(r);
        return err;
    }
    pool_index_del(p, b);
    if (s->live == 0)
        p->idle_bytes -= s->size;
    pool_block *after, *rem = cut_block(p, b, lo, hi, &after);
    /* The part from hi: a new segment, or s itself if nothing is left
     * before lo. */
    pool_segment *rs = left ? r : s;
    if (right) {
        size_t live = cut_right(s, rs, after, hi, end);
        if (left)
            s->live -= live;
    }
    if (left)
        s->size = lo - s->base;
    cut_segs(p, i, r, left, right);
    if (left && s->live == 0)
        p->idle_bytes += s->size;
    if (right && rs->live == 0)
        p->idle_bytes += rs->size;
    if (head)
        pool_index_add(p, b);
    if (rem)
        pool_index_add(p, rem);
    pool_reserved_drop(p, hi - lo);
    p->st.trims++;
    p->st.released_bytes_total += hi - lo;
    return 0;
}

static int by_size(const void *x, const void *y)
{
    const pool_part *a = x, *b = y;
    return (a->size > b->size) - (a->size < b->size);
}

/* Collects the whole trim units under the clean free blocks into *out
 * (malloc'd, smallest first): to trim, of plain segments (a stitched
 * segment's memory is its parts'); to stitch, of large segments, stitched
 * ones older than seq included (a stitch over a stitched segment maps the
 * same memory again). Returns how many, or -1 (host memory). */
long pool_units_collect(pool *p, bool to_stitch, uint64_t seq, pool_part **out)
{
    size_t n = 0, cap = 0;
    pool_part *c = NULL;
    for (size_t i = 0; i < p->nsegs; i++) {
        pool_segment *s = p->segs[i];
        if (to_stitch ? s->kind != POOL_LARGE || (pool_segment_stitched(s) && s->seq >= seq)
                      : pool_segment_stitched(s))
            continue;
        for (pool_block *b = s->first; b; b = b->next) {
            uintptr_t lo, hi;
            if (!b->free || b->dirty)
                continue;
            trim_span(p, b, &lo, &hi);
            if (hi == lo)
                continue;
            if (!pool_grow((void **)&c, &cap, n, sizeof(*c))) {
                free(c);
                return -1;
            }
            c[n++] = (pool_part){b, b->addr, lo, hi - lo};
        }
    }
    if (n > 1)
        qsort(c, n, sizeof(*c), by_size);
    *out = c;
    return (long)n;
}

/* Gives back whole trim units under free blocks, those with the most first,
 * until at least need bytes are back (SIZE_MAX: all of them). Only clean
 * blocks are trimmed, so it fences first if any block is dirty (if that
 * fails, the dirty blocks stay). Returns the bytes given back. */
size_t pool_trim_free(pool *p, size_t need)
{
    if (!p->be.trim)
        return 0;
    if (pool_any_dirty(p))
        pool_fence(p);
    pool_part *c = NULL;
    long n = pool_units_collect(p, false, 0, &c);
    size_t got = 0;
    for (long k = n - 1; k >= 0 && got < need; k--) {
        long i = pool_segment_find(p, c[k].addr);
        pool_block *b = p->segs[i]->first;
        while (b->addr != c[k].addr)
            b = b->next;
        uintptr_t lo, hi;
        trim_span(p, b, &lo, &hi);
        if (segment_cut(p, (size_t)i, b, lo, hi) != 0)
            break;
        got += hi - lo;
    }
    free(c);
    return got;
}
