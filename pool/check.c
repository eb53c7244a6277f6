/* SPDX-License-Identifier: Apache-2.0 */
/*
 * check.c - pool_check: walks every structure and recomputes every counter
 * from scratch. O(blocks log blocks); for tests and debugging, never on a
 * hot path.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>

#include "pool_internal.h"

typedef struct totals {
    uint64_t requested, allocated, reserved, idle;
    size_t live, free[2][POOL_KINDS];   /* [dirty][kind] */
    size_t lent, parts, stitched;       /* blocks lent, parts named, stitched segments */
} totals;

static int fail(char *why, size_t len, const char *fmt, ...)
{
    if (why && len) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, len, fmt, ap);
        va_end(ap);
    }
    return -EFAULT;
}

static int check_block(const pool *p, const pool_segment *s,
                       const pool_block *b, totals *t, char *why, size_t len)
{
    unsigned long a = (unsigned long)b->addr;
    if (b->seg != s)
        return fail(why, len, "block %#lx points at the wrong segment", a);
    if (b->addr % POOL_ALIGN || b->size == 0 || b->size % POOL_ALIGN)
        return fail(why, len, "block %#lx misaligned or empty", a);
    if (b->next && b->next->prev != b)
        return fail(why, len, "block %#lx: broken back link", a);
    if (b->free) {
        if (b->next && b->next->free && b->next->dirty == b->dirty &&
            (!b->dirty || b->next->epoch == b->epoch))
            return fail(why, len, "free neighbours of one state at %#lx", a);
        if (b->requested)
            return fail(why, len, "free block %#lx has a requested size", a);
        if (b->epoch > p->epoch)
            return fail(why, len, "block %#lx from a future epoch", a);
        if (b->dirty ? !pool_dirty_contains(&p->gens[b->epoch % p->ngens][s->kind], b)
                     : !pool_bins_contains(&p->clean[s->kind], b))
            return fail(why, len, "free block %#lx not in its index", a);
        /* Dirty exactly when freed in an epoch not yet clean, fences on. */
        if (b->dirty != (p->be.fence && b->epoch > p->clean_upto))
            return fail(why, len, "block %#lx: dirty flag disagrees with its "
                        "epoch", a);
        t->free[b->dirty][s->kind]++;
        return 0;
    }
    if (b->lent) {
        if (!b->lent->parts || b->lent == s || b->requested ||
            pool_addrmap_get(&p->live, b->addr))
            return fail(why, len, "block %#lx: a bad stitched part", a);
        size_t k = 0;
        while (k < b->lent->nparts && b->lent->parts[k] != b)
            k++;
        if (k == b->lent->nparts)
            return fail(why, len, "part %#lx not named by its stitched segment", a);
        t->lent++;
        t->live++; /* its segment counts it as in use */
        return 0;
    }
    if (b->requested == 0 || b->requested > b->size)
        return fail(why, len, "live block %#lx: bad requested size", a);
    if (pool_addrmap_get(&p->live, b->addr) != b)
        return fail(why, len, "live block %#lx not in the address map", a);
    t->live++;
    t->requested += b->requested;
    t->allocated += b->size;
    return 0;
}

static int check_segment(const pool *p, size_t i, totals *t, char *why,
                         size_t len)
{
    const pool_segment *s = p->segs[i];
    unsigned long base = (unsigned long)s->base;
    if (i > 0 && p->segs[i - 1]->base + p->segs[i - 1]->size > s->base)
        return fail(why, len, "segment %#lx overlaps its predecessor", base);
    if (!s->first || s->first->addr != s->base || s->first->prev)
        return fail(why, len, "segment %#lx: bad first block", base);
    uintptr_t end = s->base;
    size_t live_before = t->live;
    for (const pool_block *b = s->first; b; b = b->next) {
        if (b->addr != end)
            return fail(why, len, "segment %#lx: gap or overlap at %#lx",
                        base, (unsigned long)b->addr);
        int err = check_block(p, s, b, t, why, len);
        if (err)
            return err;
        if (b->free && !b->dirty && b->size > s->max_clean)
            return fail(why, len, "segment %#lx: clean block %#lx of %zu bytes above "
                        "its bound %zu", base, (unsigned long)b->addr, b->size,
                        s->max_clean);
        end = b->addr + b->size;
    }
    if (end != s->base + s->size)
        return fail(why, len, "segment %#lx: blocks cover %lu of %zu bytes",
                    base, (unsigned long)(end - s->base), s->size);
    if (t->live - live_before != s->live)
        return fail(why, len, "segment %#lx counts %zu live blocks, holds %zu",
                    base, s->live, t->live - live_before);
    if (s->parts) { /* stitched: memory of its parts, none of its own */
        size_t sum = 0;
        for (size_t k = 0; k < s->nparts; k++) {
            if (s->parts[k]->lent != s)
                return fail(why, len, "stitched segment %#lx: part %zu not lent "
                            "to it", base, k);
            const pool_segment *o = s->parts[k]->seg;
            if (o->parts && o->seq >= s->seq)
                return fail(why, len, "stitched segment %#lx: part %zu is of a "
                            "segment stitched after it", base, k);
            sum += s->parts[k]->size;
        }
        if (sum != s->size || s->kind != POOL_LARGE)
            return fail(why, len, "stitched segment %#lx: parts cover %zu of %zu "
                        "bytes", base, sum, s->size);
        t->parts += s->nparts;
        t->stitched++;
        return 0;
    }
    t->reserved += s->size;
    if (s->live == 0)
        t->idle += s->size;
    return 0;
}

static int check_counters(const pool *p, const totals *t, char *why,
                          size_t len)
{
    const pool_stats *st = &p->st;
    if (t->requested != st->requested || t->allocated != st->allocated)
        return fail(why, len, "allocated bytes: counted %lu/%lu, walked %lu/%lu",
                    (unsigned long)st->requested, (unsigned long)st->allocated,
                    (unsigned long)t->requested, (unsigned long)t->allocated);
    if (t->reserved != st->reserved || st->cached != st->reserved - st->allocated)
        return fail(why, len, "reserved bytes: counted %lu, walked %lu",
                    (unsigned long)st->reserved, (unsigned long)t->reserved);
    uint64_t used = atomic_load(&p->own_budget.used);
    if (p->budget == &p->own_budget && used != st->reserved)
        return fail(why, len, "the budget holds %lu bytes, reserved %lu",
                    (unsigned long)used, (unsigned long)st->reserved);
    if (t->idle != p->idle_bytes)
        return fail(why, len, "idle bytes: counted %zu, walked %lu",
                    p->idle_bytes, (unsigned long)t->idle);
    if (t->live - t->lent != p->live.count)
        return fail(why, len, "address map holds %zu, walked %zu live",
                    p->live.count, t->live - t->lent);
    if (t->lent != t->parts || t->stitched != p->stitched_segs)
        return fail(why, len, "%zu blocks lent, %zu parts named, %zu of %zu "
                    "stitched segments", t->lent, t->parts, t->stitched,
                    p->stitched_segs);
    if (st->requested > st->requested_peak || st->allocated > st->allocated_peak ||
        st->reserved > st->reserved_peak || st->cached > st->cached_peak)
        return fail(why, len, "a gauge is above its peak");
    if ((long)(st->seg_reserves - st->seg_releases - p->forgotten_segs) +
            p->trim_segs + (long)p->stitched_segs != (long)p->nsegs)
        return fail(why, len, "segment counters disagree with %zu segments",
                    p->nsegs);
    return 0;
}

static int check_locked(const pool *p, char *why, size_t len)
{
    totals t = {0};
    for (size_t i = 0; i < p->nsegs; i++) {
        int err = check_segment(p, i, &t, why, len);
        if (err)
            return err;
    }
    for (int k = 0; k < POOL_KINDS; k++) {
        size_t n, dirty = 0;
        int err = pool_bins_check(&p->clean[k], &n, why, len);
        if (err)
            return err;
        if (n != t.free[0][k])
            return fail(why, len, "clean index %d holds %zu, walked %zu", k, n,
                        t.free[0][k]);
        for (unsigned g = 0; g < p->ngens; g++) {
            if ((err = pool_dirty_check(&p->gens[g][k], &n, why, len)) != 0)
                return err;
            dirty += n;
        }
        if (dirty != t.free[1][k])
            return fail(why, len, "dirty index %d holds %zu, walked %zu", k,
                        dirty, t.free[1][k]);
    }
    if (p->clean_upto >= p->epoch || p->epoch - p->clean_upto > p->ngens)
        return fail(why, len, "epochs %lu..%lu not yet clean: more than %u",
                    (unsigned long)p->clean_upto + 1, (unsigned long)p->epoch,
                    p->ngens);
    for (unsigned i = 0; i < p->ninflight; i++)
        if (p->inflight[i].epoch <= p->clean_upto || p->inflight[i].epoch >= p->epoch ||
            (i && (p->inflight[i].epoch <= p->inflight[i - 1].epoch ||
                   p->inflight[i].ticket < p->inflight[i - 1].ticket)))
            return fail(why, len, "fence in flight %u out of order", i);
    return check_counters(p, &t, why, len);
}

int pool_check(pool *p, char *why, size_t len)
{
    char scratch[8];
    if (!why) {
        why = scratch;
        len = sizeof(scratch);
    }
    pthread_mutex_lock(&p->lock);
    int err = check_locked(p, why, len);
    pthread_mutex_unlock(&p->lock);
    return err;
}
