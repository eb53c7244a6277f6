/*
 * pool.c - allocation, free, growth, release and statistics.
 *
 * Every public function takes the pool's lock for its whole run. The
 * allocation path allocates host memory only when a node slab or the
 * address map must grow, and does that before changing anything, so an
 * allocation that fails leaves the pool as it was.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "grow.h"
#include "pool_internal.h"

enum { SLAB_BLOCKS = 256 };

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

/* ---- block nodes ------------------------------------------------------ */

/* Makes sure at least n spare nodes exist. 0 or -ENOBUFS (host memory). */
static int nodes_reserve(pool *p, int n)
{
    int have = 0;
    for (pool_block *b = p->spare; b && have < n; b = b->next)
        have++;
    if (have >= n)
        return 0;
    if (!pool_grow((void **)&p->slabs, &p->slabs_cap, p->nslabs, sizeof(*p->slabs)))
        return -ENOBUFS;
    pool_block *slab = calloc(SLAB_BLOCKS, sizeof(*slab));
    if (!slab)
        return -ENOBUFS;
    p->slabs[p->nslabs++] = slab;
    for (int i = 0; i < SLAB_BLOCKS; i++) {
        slab[i].next = p->spare;
        p->spare = &slab[i];
    }
    return 0;
}

static pool_block *node_take(pool *p)
{
    pool_block *b = p->spare;
    p->spare = b->next;
    memset(b, 0, sizeof(*b));
    return b;
}

static void node_give(pool *p, pool_block *b)
{
    b->next = p->spare;
    p->spare = b;
}

/* ---- gauges ------------------------------------------------------------ */

static void gauge_add(uint64_t *v, uint64_t *peak, uint64_t d)
{
    *v += d;
    if (*v > *peak)
        *peak = *v;
}

static void cached_update(pool *p)
{
    p->st.cached = p->st.reserved - p->st.allocated;
    if (p->st.cached > p->st.cached_peak)
        p->st.cached_peak = p->st.cached;
}

/* Bytes the backend took back: out of reserved, and back to the budget. */
static void reserved_drop(pool *p, size_t bytes)
{
    pool_budget_give(p->budget, bytes);
    p->st.reserved -= bytes;
    cached_update(p);
}

/* ---- free index ------------------------------------------------------- */

static enum pool_kind kind_of(const pool_block *b) { return b->seg->kind; }

/* The dirty blocks of kind freed in epoch e. */
static pool_dirty *gen_of(pool *p, uint64_t e, enum pool_kind kind)
{
    return &p->gens[e % p->ngens][kind];
}

/* Dirty blocks of kind, every epoch. */
static size_t dirty_count(const pool *p, enum pool_kind kind)
{
    size_t n = 0;
    for (unsigned g = 0; g < p->ngens; g++)
        n += p->gens[g][kind].count;
    return n;
}

static bool any_dirty(const pool *p)
{
    return dirty_count(p, POOL_SMALL) + dirty_count(p, POOL_LARGE) != 0;
}

/* Puts free block b into the index its dirty flag names. */
static void index_add(pool *p, pool_block *b)
{
    b->free = true;
    if (b->dirty) {
        pool_dirty_insert(gen_of(p, b->epoch, kind_of(b)), b);
    } else {
        pool_bins_insert(&p->clean[kind_of(b)], b);
        if (b->size > b->seg->max_clean)
            b->seg->max_clean = b->size;
    }
}

static void index_del(pool *p, pool_block *b)
{
    if (b->dirty)
        pool_dirty_remove(gen_of(p, b->epoch, kind_of(b)), b);
    else
        pool_bins_remove(&p->clean[kind_of(b)], b);
    b->free = false;
}

/* ---- segments --------------------------------------------------------- */

static bool stitched(const pool_segment *s) { return s->parts != NULL; }

/* A stitched segment all of whose memory is one clean free block: it may
 * be unstitched, or grown in place. */
static bool stitched_idle(const pool_segment *s)
{
    return stitched(s) && s->live == 0 && !s->first->next && !s->first->dirty;
}

/* Bytes segment s adds to idle_bytes while it holds no live block: a
 * stitched segment holds no memory of its own. */
static size_t idle_size(const pool_segment *s)
{
    return stitched(s) ? 0 : s->size;
}

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
static int segs_room(pool *p)
{
    return pool_grow((void **)&p->segs, &p->segs_cap, p->nsegs, sizeof(*p->segs))
               ? 0 : -ENOBUFS;
}

static int segs_insert(pool *p, pool_segment *s)
{
    if (segs_room(p))
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
static void segment_release(pool *p, size_t i)
{
    pool_segment *s = p->segs[i];
    for (pool_block *b = s->first, *next; b; b = next) {
        next = b->next;
        index_del(p, b);
        node_give(p, b);
    }
    p->idle_bytes -= s->size;
    memmove(&p->segs[i], &p->segs[i + 1],
            (p->nsegs - i - 1) * sizeof(*p->segs));
    p->nsegs--;
    p->be.release(p->be.ctx, s->base, s->size);
    reserved_drop(p, s->size);
    p->st.seg_releases++;
    p->st.released_bytes_total += s->size;
    free(s);
}

/* Unstitches every idle stitched segment, then releases segments with no
 * live block until idle bytes are at most keep. Returns the bytes
 * released. */
static size_t unstitch_idle(pool *p);

static size_t release_idle(pool *p, size_t keep)
{
    size_t released = 0;
    if (p->idle_bytes > keep || keep == 0)
        unstitch_idle(p); /* their parts may leave whole segments idle */
    for (size_t i = p->nsegs; i-- > 0 && p->idle_bytes > keep;) {
        pool_segment *s = p->segs[i];
        if (s->live == 0 && !stitched(s)) {
            released += s->size;
            segment_release(p, i);
        }
    }
    return released;
}

/* ---- trimming ------------------------------------------------------------ */

static int pool_fence(pool *p);

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

/* Gives back [lo, hi) (trim units inside clean free block b of segment i)
 * and holds what is left of the segment as up to two segments: the part
 * before lo and the part from hi, each keeping its blocks, b's remnants
 * included. Returns 0, or -ENOBUFS (host memory) or the backend's error with
 * nothing changed. */
static int segment_cut(pool *p, size_t i, pool_block *b, uintptr_t lo,
                       uintptr_t hi)
{
    pool_segment *s = p->segs[i];
    uintptr_t end = s->base + s->size, bend = b->addr + b->size;
    bool left = lo > s->base, right = hi < end, head = lo > b->addr;
    pool_segment *r = NULL;
    if (left && right) {
        r = malloc(sizeof(*r));
        if (!r || segs_room(p) || nodes_reserve(p, 1)) {
            free(r);
            return -ENOBUFS;
        }
    }
    int err = p->be.trim(p->be.ctx, lo, hi - lo);
    if (err) {
        free(r);
        return err;
    }
    index_del(p, b);
    if (s->live == 0)
        p->idle_bytes -= s->size;
    /* b's remnants: b itself keeps [b->addr, lo), a node takes [hi, bend). */
    pool_block *before = b->prev, *after = b->next, *rem = NULL;
    if (bend > hi) {
        rem = head ? node_take(p) : b;
        *rem = (pool_block){.addr = hi, .size = bend - hi, .epoch = b->epoch,
                            .free = true, .next = after};
        if (after)
            after->prev = rem;
        after = rem;
    }
    if (head) {
        b->size = lo - b->addr;
        b->next = NULL;
        before = b;
    } else if (rem != b) {
        node_give(p, b);
    }
    if (before)
        before->next = NULL;
    if (after)
        after->prev = NULL;
    /* The part from hi: a new segment, or s itself if nothing is left
     * before lo. */
    pool_segment *rs = left ? r : s;
    if (right) {
        size_t live = 0;
        *rs = (pool_segment){.base = hi, .size = end - hi, .kind = s->kind,
                             .first = after, .max_clean = s->max_clean};
        for (pool_block *x = after; x; x = x->next) {
            x->seg = rs;
            live += !x->free;
        }
        rs->live = live;
        if (left)
            s->live -= live;
    }
    if (left)
        s->size = lo - s->base;
    if (left && right) {
        memmove(&p->segs[i + 2], &p->segs[i + 1],
                (p->nsegs - i - 1) * sizeof(*p->segs));
        p->segs[i + 1] = r;
        p->nsegs++;
        p->trim_segs++;
    } else if (!left && !right) {
        memmove(&p->segs[i], &p->segs[i + 1],
                (p->nsegs - i - 1) * sizeof(*p->segs));
        p->nsegs--;
        p->trim_segs--;
        free(s);
    }
    if (left && s->live == 0)
        p->idle_bytes += s->size;
    if (right && rs->live == 0)
        p->idle_bytes += rs->size;
    if (head)
        index_add(p, b);
    if (rem)
        index_add(p, rem);
    reserved_drop(p, hi - lo);
    p->st.trims++;
    p->st.released_bytes_total += hi - lo;
    return 0;
}

/* Whole trim units under one clean free block: a candidate to trim, or a
 * part to stitch. addr is the block's address when collected (blocks move
 * while segments are cut, so a trim finds each again by it). */
typedef struct part { pool_block *b; uintptr_t addr, lo; size_t size; } part;

static int by_size(const void *x, const void *y)
{
    const part *a = x, *b = y;
    return (a->size > b->size) - (a->size < b->size);
}

/* Collects the whole trim units under the clean free blocks into *out
 * (malloc'd, smallest first): to trim, of plain segments (a stitched
 * segment's memory is its parts'); to stitch, of large segments, stitched
 * ones older than seq included (a stitch over a stitched segment maps the
 * same memory again). Returns how many, or -1 (host memory). */
static long units_collect(pool *p, bool to_stitch, uint64_t seq, part **out)
{
    size_t n = 0, cap = 0;
    part *c = NULL;
    for (size_t i = 0; i < p->nsegs; i++) {
        pool_segment *s = p->segs[i];
        if (to_stitch ? s->kind != POOL_LARGE || (stitched(s) && s->seq >= seq)
                      : stitched(s))
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
            c[n++] = (part){b, b->addr, lo, hi - lo};
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
static size_t trim_free(pool *p, size_t need)
{
    if (!p->be.trim)
        return 0;
    if (any_dirty(p))
        pool_fence(p);
    part *c = NULL;
    long n = units_collect(p, false, 0, &c);
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

/* Reserves a new segment of size bytes and kind, indexes its one free
 * block and stores that block in *out. Needs one spare node. Returns 0,
 * -EDQUOT, -ENOMEM (the device), -ENOBUFS (host memory) or a backend
 * error. */
static int segment_grow(pool *p, enum pool_kind kind, size_t size,
                        pool_block **out)
{
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
        err = segs_insert(p, s);
        if (err)
            p->be.release(p->be.ctx, base, size);
    }
    if (err) {
        pool_budget_give(p->budget, size);
        free(s);
        return err;
    }
    pool_block *b = node_take(p);
    *b = (pool_block){.addr = base, .size = size, .seg = s};
    s->first = b;
    gauge_add(&p->st.reserved, &p->st.reserved_peak, size);
    cached_update(p);
    p->st.seg_reserves++;
    p->st.reserved_bytes_total += size;
    p->idle_bytes += size;
    index_add(p, b);
    *out = b;
    return 0;
}

/* ---- allocation --------------------------------------------------------- */

/* Rounds up to a multiple of to (a power of two or not); 0 on overflow. */
static size_t round_up(size_t n, size_t to)
{
    size_t r = n % to;
    if (!r)
        return n;
    return n > SIZE_MAX - (to - r) ? 0 : n + (to - r);
}

static bool oversize(const pool *p, size_t size)
{
    return p->cfg.max_split && size >= p->cfg.max_split;
}

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
static pool_block *find_fit(pool *p, enum pool_kind kind, size_t size)
{
    pool_block *b = p->cfg.fit == POOL_FIT_FIRST
                        ? first_fit(p, kind, size)
                        : pool_bins_lower_bound(&p->clean[kind], size);
    if (!b || !oversize(p, b->size))
        return b;
    if (!oversize(p, size))
        return NULL;
    return b->size - size <= p->cfg.oversize_slack ? b : NULL;
}

static bool split_worth(const pool *p, const pool_block *b, size_t size)
{
    size_t rest = b->size - size;
    if (p->cfg.fit == POOL_FIT_NOSPLIT || oversize(p, b->size) || rest == 0)
        return false;
    return kind_of(b) == POOL_SMALL || rest > p->cfg.large_split_min;
}

/* Carves size bytes off the front of free block b (already out of the
 * index) and puts the remainder back. Needs one spare node. */
static void block_split(pool *p, pool_block *b, size_t size)
{
    pool_block *r = node_take(p);
    *r = (pool_block){.addr = b->addr + size, .size = b->size - size,
                      .epoch = b->epoch, .dirty = b->dirty, .seg = b->seg,
                      .prev = b, .next = b->next};
    if (b->next)
        b->next->prev = r;
    b->next = r;
    b->size = size;
    index_add(p, r);
}

/* The segment a large request of size bytes (rounded) would have alone;
 * 0 on overflow. */
static size_t own_segment(const pool *p, size_t size)
{
    return round_up(size, p->cfg.large_round);
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
    return round_up(p->cfg.mid_segment / size * size, p->cfg.large_round);
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
    if (size <= p->cfg.mid_max && !oversize(p, p->cfg.mid_segment))
        return mid_size(p, size);
    return own_segment(p, size);
}

static int stitch_grow(pool *p, size_t size, pool_block **out);

/* Serves the request from new memory: stitched from free memory where the
 * backend can, else a new segment of seg bytes. */
static int grow_once(pool *p, enum pool_kind kind, size_t size, size_t seg,
                     pool_block **out)
{
    if (kind == POOL_LARGE && p->be.stitch && p->cfg.fit != POOL_FIT_NOSPLIT) {
        int err = stitch_grow(p, size, out);
        if (err <= 0)
            return err;
    }
    return segment_grow(p, kind, seg, out);
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
    if ((err == -EDQUOT || err == -ENOMEM) && p->be.fence_begin && any_dirty(p)) {
        /* Asynchronous fences left blocks waiting: order them all now. */
        p->st.fence_forced++;
        if (pool_fence(p) == 0 && (*out = find_fit(p, kind, size)) != NULL)
            return 0;
    }
    if (err == -EDQUOT || err == -ENOMEM) {
        size_t back = release_idle(p, 0);
        if (back < seg)
            back += trim_free(p, seg - back);
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

/* Merges free block b into its free left neighbour a; returns a. */
static pool_block *block_merge(pool *p, pool_block *a, pool_block *b)
{
    a->size += b->size;
    a->next = b->next;
    if (b->next)
        b->next->prev = a;
    if (b->epoch > a->epoch)
        a->epoch = b->epoch;
    node_give(p, b);
    return a;
}

/* True if free blocks a and b may merge: both clean, or both dirty from
 * one epoch (a block freed later must not hold back an earlier one). */
static bool mergeable(const pool_block *a, const pool_block *b)
{
    return a->dirty == b->dirty && (!a->dirty || a->epoch == b->epoch);
}

/* Merges block b (free, in no index) with each free neighbour of its own
 * state; returns the merged block, in no index. */
static pool_block *block_coalesce(pool *p, pool_block *b)
{
    if (b->prev && b->prev->free && mergeable(b->prev, b)) {
        index_del(p, b->prev);
        b = block_merge(p, b->prev, b);
    }
    if (b->next && b->next->free && mergeable(b->next, b)) {
        index_del(p, b->next);
        b = block_merge(p, b, b->next);
    }
    return b;
}


/* ---- stitching ------------------------------------------------------------ */

/* Unstitches segment i (stitched, idle, one clean block): its parts become
 * free blocks of their own segments again, merged with their neighbours. */
static void segment_unstitch(pool *p, size_t i)
{
    pool_segment *s = p->segs[i];
    index_del(p, s->first);
    node_give(p, s->first);
    p->be.unstitch(p->be.ctx, s->base, s->size);
    for (size_t k = 0; k < s->nparts; k++) {
        pool_block *b = s->parts[k];
        b->lent = NULL;
        if (--b->seg->live == 0)
            p->idle_bytes += idle_size(b->seg);
        index_add(p, block_coalesce(p, b));
    }
    memmove(&p->segs[i], &p->segs[i + 1],
            (p->nsegs - i - 1) * sizeof(*p->segs));
    p->nsegs--;
    p->stitched_segs--;
    free(s->parts);
    free(s);
}

/* Unstitches every stitched segment whose blocks are all free and clean.
 * Returns how many. */
static size_t unstitch_idle(pool *p)
{
    size_t n = 0;
    for (size_t i = p->nsegs; p->stitched_segs && i-- > 0;) {
        pool_segment *s = p->segs[i];
        if (stitched_idle(s)) {
            segment_unstitch(p, i);
            n++;
        }
    }
    return n;
}

/* Takes [lo, lo + size) (inside clean free block b) out of use as a part
 * of stitched segment s, and returns the part's block. Needs two spare
 * nodes. */
static pool_block *part_carve(pool *p, pool_block *b, uintptr_t lo,
                              size_t size, pool_segment *s)
{
    index_del(p, b);
    if (lo > b->addr) { /* b keeps the head */
        block_split(p, b, lo - b->addr);
        pool_block *r = b->next;
        index_del(p, r);
        index_add(p, b);
        b = r;
    }
    if (b->size > size)
        block_split(p, b, size);
    b->lent = s;
    if (b->seg->live++ == 0)
        p->idle_bytes -= idle_size(b->seg);
    return b;
}

/* Takes collected units from the front of c (nc of them), the last one
 * cut short, until want bytes: returns the bytes taken (less than want if
 * c runs out) and in *n how many units. */
static size_t units_take(part *c, long nc, size_t want, size_t *n)
{
    size_t have = 0;
    for (*n = 0; *n < (size_t)nc && have < want; (*n)++) {
        if (c[*n].size > want - have)
            c[*n].size = want - have;
        have += c[*n].size;
    }
    return have;
}

/* Extends the largest idle stitched segment (one clean free block) that
 * is smaller than a large request of size bytes but at least half of it,
 * with the whole units under clean free blocks (no fresh memory; of
 * segments older than it), mapped at its end: its mapped part stays,
 * where unstitching and stitching anew would map all of it again.
 * Returns 0 with its block (the grown segment) in *out, 1 if no segment
 * qualifies or the free units or the backend cannot serve it, or -ENOBUFS. */
static int stitch_extend(pool *p, size_t size, pool_block **out)
{
    size_t u = p->be.trim_unit, want = round_up(size, u);
    pool_segment *t = NULL;
    for (size_t i = 0; p->be.extend && i < p->nsegs; i++) {
        pool_segment *s = p->segs[i];
        if (stitched_idle(s) && s->size < want && s->size >= want / 2 &&
            (!t || s->size > t->size))
            t = s;
    }
    if (!t)
        return 1;
    size_t extra = want - t->size, n;
    part *c = NULL;
    long nc = units_collect(p, true, t->seq, &c);
    if (nc < 0)
        return -ENOBUFS;
    size_t have = units_take(c, nc, extra, &n);
    pool_span *sp = have < extra ? NULL : malloc(n * sizeof(*sp));
    pool_block **parts = !sp ? NULL : realloc(t->parts, (t->nparts + n) * sizeof(*parts));
    int err = have < extra ? 1 : !sp || !parts ? -ENOBUFS : nodes_reserve(p, (int)(2 * n));
    if (parts)
        t->parts = parts;
    if (!err) {
        for (size_t k = 0; k < n; k++)
            sp[k] = (pool_span){c[k].lo, c[k].size};
        if (p->be.extend(p->be.ctx, t->base, t->size, sp, n) != 0)
            err = 1; /* a new stitch may still serve it */
    }
    free(sp);
    if (err) {
        free(c);
        return err;
    }
    for (size_t k = 0; k < n; k++)
        t->parts[t->nparts + k] = part_carve(p, c[k].b, c[k].lo, c[k].size, t);
    t->nparts += n;
    free(c);
    pool_block *b = t->first;
    index_del(p, b);
    b->size += extra;
    t->size += extra;
    index_add(p, b);
    p->st.stitches++;
    p->st.stitched_bytes_total += extra;
    *out = b;
    return 0;
}

/* Serves a large request of size bytes with a stitched segment, when no
 * free block fits it. First extends an idle stitched segment almost large
 * enough, if free units cover the rest. Else unstitches idle stitched
 * segments and looks again (a stitched segment that does not fit is
 * memory in the way). Then maps the whole trim units under clean free
 * blocks, the smallest first (fragments nothing else can use), with a
 * fresh segment for what they lack, into one new segment: the pool grows
 * by the shortfall only. Returns 0 with the new segment's block in *out,
 * 1 if there is nothing to stitch (or the backend could not; plain growth
 * follows), or a negative errno (the fresh segment's). */
static int stitch_grow(pool *p, size_t size, pool_block **out)
{
    int ext = stitch_extend(p, size, out);
    if (ext <= 0)
        return ext;
    if (unstitch_idle(p) && (*out = find_fit(p, POOL_LARGE, size)) != NULL)
        return 0;
    size_t u = p->be.trim_unit, want = round_up(size, u);
    part *c = NULL;
    long nc = want ? units_collect(p, true, UINT64_MAX, &c) : 0;
    if (nc <= 0)
        return 1;
    size_t n, have = units_take(c, nc, want, &n);
    size_t fresh = want - have, np = n + (fresh != 0);
    pool_span *sp = malloc(np * sizeof(*sp));
    pool_segment *s = calloc(1, sizeof(*s));
    pool_block **parts = malloc(np * sizeof(*parts));
    int err = !sp || !s || !parts ? -ENOBUFS : nodes_reserve(p, (int)(2 * np + 1));
    pool_block *fb = NULL;
    if (!err && fresh)
        err = segment_grow(p, POOL_LARGE, fresh, &fb);
    if (!err)
        err = segs_room(p);
    if (!err) {
        for (size_t k = 0; k < n; k++)
            sp[k] = (pool_span){c[k].lo, c[k].size};
        if (fb)
            sp[n] = (pool_span){fb->addr, fresh};
        *s = (pool_segment){.kind = POOL_LARGE, .size = want, .parts = parts,
                            .nparts = np, .seq = p->stitch_seq + 1};
        int e = p->be.stitch(p->be.ctx, sp, np, &s->base);
        if (!e && (!s->base || s->base % u)) {
            p->be.unstitch(p->be.ctx, s->base, want);
            e = -EFAULT; /* a broken backend: nothing is used */
        }
        if (e) { /* plain growth may still serve it */
            if (fb)
                segment_release(p, (size_t)pool_segment_find(p, fb->addr));
            err = 1;
        }
    }
    free(sp);
    if (err) { /* the fresh segment's error (the cap, the device) stands */
        free(c);
        free(parts);
        free(s);
        return err;
    }
    segs_insert(p, s); /* room was made */
    for (size_t k = 0; k < n; k++)
        s->parts[k] = part_carve(p, c[k].b, c[k].lo, c[k].size, s);
    if (fb)
        s->parts[n] = part_carve(p, fb, fb->addr, fresh, s);
    free(c);
    p->stitched_segs++;
    p->stitch_seq++;
    p->st.stitches++;
    p->st.stitched_bytes_total += have;
    pool_block *b = node_take(p);
    *b = (pool_block){.addr = s->base, .size = want, .seg = s};
    s->first = b;
    index_add(p, b);
    *out = b;
    return 0;
}

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
            while ((d = pool_dirty_any(gen_of(p, e, k)))) {
                index_del(p, d);
                d->dirty = false;
                index_add(p, block_coalesce(p, d));
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
static int pool_fence(pool *p)
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
    if (gen_of(p, p->epoch, POOL_SMALL)->count + gen_of(p, p->epoch, POOL_LARGE)->count == 0 ||
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
    *b = find_fit(p, kind, size);
    while (!err && p->ninflight &&
           (dirty_fits_before(p, kind, size, *b, *b ? entry : p->epoch + 1) ||
            (!*b && dirty_merged_fits(p, kind, size)))) {
        unsigned before = p->ninflight;
        if ((err = poll_async(p, true)) != 0 || p->ninflight == before)
            break; /* it could not force one now */
        p->st.fence_forced++;
        err = begin_async(p);
        *b = find_fit(p, kind, size);
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
    size_t dirty = dirty_count(p, kind);
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
static int block_find(pool *p, enum pool_kind kind, size_t size,
                      pool_block **b)
{
    *b = find_fit(p, kind, size);
    if (!fence_wanted(p, kind, size, *b))
        return 0;
    if (p->be.fence_begin)
        return find_async(p, kind, size, b);
    int err = pool_fence(p);
    if (err == -EAGAIN) /* no fence now: fresh memory is safe */
        return 0;
    if (!err)
        *b = find_fit(p, kind, size);
    return err;
}

static int alloc_locked(pool *p, size_t size, uintptr_t *addr)
{
    size_t rounded = round_up(size, POOL_ALIGN);
    if (!rounded)
        return -EOVERFLOW;
    int err = nodes_reserve(p, 2);
    if (!err)
        err = pool_addrmap_reserve(&p->live);
    if (err)
        return err;
    enum pool_kind kind = rounded <= p->cfg.small_max ? POOL_SMALL : POOL_LARGE;
    uint64_t grew = p->st.seg_reserves;
    pool_block *b;
    err = block_find(p, kind, rounded, &b);
    if (!err && !b)
        err = block_grow(p, kind, rounded, &b);
    if (err) {
        if (err == -EDQUOT || err == -ENOMEM)
            p->st.failures++;
        return err;
    }
    index_del(p, b);
    if (b->seg->live++ == 0)
        p->idle_bytes -= idle_size(b->seg);
    if (split_worth(p, b, rounded))
        block_split(p, b, rounded);
    b->requested = size;
    p->st.hits += grew == p->st.seg_reserves;
    p->allocs_since_fence++;
    pool_addrmap_put(&p->live, b->addr, b);
    gauge_add(&p->st.requested, &p->st.requested_peak, size);
    gauge_add(&p->st.allocated, &p->st.allocated_peak, b->size);
    cached_update(p);
    p->st.allocs++;
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

/* ---- free --------------------------------------------------------------- */

/* Why addr is not a live block's start: -ENOENT, -EINVAL or -EALREADY. */
static int diagnose(const pool *p, uintptr_t addr)
{
    long i = pool_segment_find(p, addr);
    if (i < 0)
        return -ENOENT;
    const pool_block *b = p->segs[i]->first;
    while (addr - b->addr >= b->size)
        b = b->next;
    return b->free || b->lent ? -EALREADY : -EINVAL; /* a part was freed */
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
    cached_update(p);
    p->st.frees++;
    b->requested = 0;
    b->epoch = p->epoch;
    b->dirty = p->be.fence != NULL;
    if (--b->seg->live == 0)
        p->idle_bytes += idle_size(b->seg);
    index_add(p, block_coalesce(p, b));
    if (p->idle_bytes > p->cfg.release_threshold)
        release_idle(p, p->cfg.release_threshold);
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
    pthread_mutex_lock(&p->lock);
    int err = -ENOENT;
    long i = pool_segment_find(p, addr);
    if (i >= 0) {
        const pool_block *b = p->segs[i]->first;
        while (addr - b->addr >= b->size)
            b = b->next;
        err = b->free || b->lent ? -EALREADY : 0;
        *base = p->segs[i]->base;
        *size = p->segs[i]->size;
    }
    pthread_mutex_unlock(&p->lock);
    return err;
}

size_t pool_flush(pool *p)
{
    pthread_mutex_lock(&p->lock);
    if (p->stitched_segs && any_dirty(p))
        pool_fence(p); /* a stitched segment unstitches only when clean */
    size_t released = release_idle(p, 0);
    released += trim_free(p, SIZE_MAX);
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
        out->free_blocks += p->clean[k].count + dirty_count(p, k);
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

