/*
 * replay.c - see replay.h.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "grow.h"
#include "replay.h"
#include "stats.h"

static const replay_policy policies[] = {
    {"best", "best fit, split; at most one fence per 64 small allocations "
             "to reach a better freed block (cupool's default)", POOL_FIT_BEST, 0},
    {"strict", "best fit, split; fence whenever a freed block fits better",
     POOL_FIT_BEST, 1},
    {"first", "first fit (lowest address), split", POOL_FIT_FIRST, 0},
    {"nosplit", "no splitting: one segment per request, reused whole",
     POOL_FIT_NOSPLIT, 0},
};
enum { NPOLICIES = sizeof(policies) / sizeof(policies[0]) };

const replay_policy *replay_policy_find(const char *name)
{
    for (int i = 0; i < NPOLICIES; i++)
        if (!strcmp(name, policies[i].name))
            return &policies[i];
    return NULL;
}

const replay_policy *replay_policy_at(int i)
{
    return i >= 0 && i < NPOLICIES ? &policies[i] : NULL;
}

void replay_devices(const trace *t, uint64_t set[4])
{
    memset(set, 0, 4 * sizeof(*set));
    for (size_t i = 0; i < t->n; i++) {
        unsigned d = trace_device(&t->rec[i]);
        set[d / 64] |= UINT64_C(1) << (d % 64);
    }
}

/* ---- the simulated device ----------------------------------------------- */

typedef struct room { uint64_t base, size; } room;

typedef struct device {
    uint64_t capacity, used, next, align;
    uint64_t fences;
    room *rooms;          /* addresses each stitch may extend into */
    size_t nrooms, rooms_cap;
} device;

/* The most a simulated device holds when no capacity is given, and the
 * most a trace may record as reserved: far beyond any device, and far
 * below where a 64-bit sum of it could wrap. */
#define REPLAY_SPACE ((uint64_t)1 << 62)

static int dev_reserve(void *ctx, size_t size, uintptr_t *base)
{
    device *d = ctx;
    uint64_t cap = d->capacity ? d->capacity : REPLAY_SPACE;
    uint64_t span = size > REPLAY_SPACE ? 0 : (size + d->align - 1) & ~(d->align - 1);
    if (!span || size > cap - d->used || span > UINT64_MAX - d->next)
        return -ENOMEM; /* addresses are never reused: they may run out too */
    d->used += size;
    *base = (uintptr_t)d->next; /* never reused: no stale address aliases */
    d->next += span;
    return 0;
}

static int dev_trim(void *ctx, uintptr_t addr, size_t size)
{
    device *d = ctx;
    (void)addr;
    d->used -= size;
    return 0;
}

static void dev_release(void *ctx, uintptr_t base, size_t size)
{
    device *d = ctx;
    (void)base;
    d->used -= size;
}

/* A stitch takes fresh addresses and no memory: its parts are held. Like
 * CUPOOL_STITCH's, it keeps twice its size of addresses to extend into. */
static int dev_stitch(void *ctx, const pool_span *parts, size_t n, uintptr_t *base)
{
    device *d = ctx;
    size_t size = pool_spans_size(parts, n);
    if (size > (UINT64_MAX - d->next - d->align) / 2)
        return -ENOMEM;
    if (!pool_grow((void **)&d->rooms, &d->rooms_cap, d->nrooms, sizeof(*d->rooms)))
        return -ENOMEM;
    uint64_t span = (2 * size + d->align - 1) & ~(d->align - 1);
    d->rooms[d->nrooms++] = (room){d->next, span};
    *base = (uintptr_t)d->next;
    d->next += span;
    return 0;
}

static int dev_extend(void *ctx, uintptr_t base, size_t size,
                      const pool_span *parts, size_t n)
{
    device *d = ctx;
    for (size_t i = d->nrooms; i-- > 0;)
        if (d->rooms[i].base == base)
            return pool_spans_size(parts, n) <= d->rooms[i].size - size ? 0 : -ENOSPC;
    return -EINVAL;
}

static void dev_unstitch(void *ctx, uintptr_t base, size_t size)
{
    device *d = ctx;
    (void)size;
    for (size_t i = d->nrooms; i-- > 0;)
        if (d->rooms[i].base == base) {
            d->rooms[i] = d->rooms[--d->nrooms];
            return;
        }
}

static int dev_fence(void *ctx)
{
    ((device *)ctx)->fences++;
    return 0;
}

/* ---- trace address -> replay address ------------------------------------ */

typedef struct amap {
    uint64_t *key, *val;   /* key 0 = empty */
    size_t mask, count;
} amap;

static size_t slot_of(const amap *m, uint64_t k)
{
    return (size_t)((k * 0x9E3779B97F4A7C15ull) >> 20) & m->mask;
}

static int amap_grow(amap *m)
{
    size_t cap = m->mask ? 2 * (m->mask + 1) : 1024;
    amap n = {calloc(cap, sizeof(uint64_t)), calloc(cap, sizeof(uint64_t)), cap - 1, 0};
    if (!n.key || !n.val) {
        free(n.key);
        free(n.val);
        return -ENOMEM;
    }
    for (size_t i = 0; m->mask && i <= m->mask; i++) {
        if (!m->key[i])
            continue;
        size_t s = slot_of(&n, m->key[i]);
        while (n.key[s])
            s = (s + 1) & n.mask;
        n.key[s] = m->key[i];
        n.val[s] = m->val[i];
        n.count++;
    }
    free(m->key);
    free(m->val);
    *m = n;
    return 0;
}

/* Index of k's slot, or of the empty slot where it would go. */
static size_t amap_find(const amap *m, uint64_t k)
{
    size_t s = slot_of(m, k);
    while (m->key[s] && m->key[s] != k)
        s = (s + 1) & m->mask;
    return s;
}

static int amap_put(amap *m, uint64_t k, uint64_t v)
{
    if ((m->count + 1) * 4 > (m->mask + 1) * 3 || !m->mask)
        if (amap_grow(m))
            return -ENOMEM;
    size_t s = amap_find(m, k);
    m->count += !m->key[s];
    m->key[s] = k;
    m->val[s] = v;
    return 0;
}

/* Removes k; returns its value, or 0 if absent. Backward-shift deletion. */
static uint64_t amap_take(amap *m, uint64_t k)
{
    if (!m->mask)
        return 0;
    size_t s = amap_find(m, k);
    if (!m->key[s])
        return 0;
    uint64_t v = m->val[s];
    m->key[s] = 0;
    m->count--;
    for (size_t j = (s + 1) & m->mask; m->key[j]; j = (j + 1) & m->mask) {
        size_t home = slot_of(m, m->key[j]);
        /* Move j into the hole s unless home lies cyclically in (s, j]. */
        bool stays = s <= j ? (home > s && home <= j) : (home > s || home <= j);
        if (stays)
            continue;
        m->key[s] = m->key[j];
        m->val[s] = m->val[j];
        m->key[j] = 0;
        s = j;
    }
    return v;
}

/* ---- the replay ----------------------------------------------------------- */

enum { REORDER_RECORDS = 256, REORDER_NS = 20000 };

/* Per-record marks of the reordering below. */
enum { M_APPLIED = 1, M_FREE_AFTER = 2 };

/* Stamps of two threads can be a few ns out of order (recorder.c), so a
 * block freed on one thread and reused on another can show its free just
 * after the reuse, and a block allocated on one thread and freed at once on
 * another can show its free just before the allocation. Finds the record
 * of op on addr among the next records within REORDER_NS of record i, or
 * returns SIZE_MAX. */
static size_t find_near(const trace *t, size_t i, unsigned dev, trace_op op,
                        uint64_t addr, const unsigned char *mark)
{
    for (size_t j = i + 1; j < t->n && j <= i + REORDER_RECORDS; j++) {
        const trace_record *e = &t->rec[j];
        if (e->time - t->rec[i].time > REORDER_NS)
            break;
        if (!mark[j] && trace_device(e) == dev && trace_op_of(e) == op &&
            e->addr == addr && trace_result_of(e) == TRACE_R_OK)
            return j;
    }
    return SIZE_MAX;
}

/* Makes the pool a replay runs: the policy's configuration on a simulated
 * device that can trim and stitch as the options say. */
static int replay_pool(const replay_opts *o, device *dev, pool **p)
{
    pool_config cfg;
    pool_config_default(&cfg);
    cfg.fit = o->policy->fit;
    if (o->policy->fence_interval)
        cfg.fence_interval = o->policy->fence_interval;
    cfg.max_reserved = o->max_reserved;
    if (o->small_segment)
        cfg.small_segment = o->small_segment;
    /* As CUPOOL_STITCH: large units without a cap, the granule under one. */
    size_t unit = o->trim_unit ? o->trim_unit
                  : !o->stitch ? 0 : o->max_reserved ? (size_t)2 << 20 : POOL_STITCH_UNIT;
    *dev = (device){.capacity = o->capacity, .next = UINT64_C(1) << 40,
                    .align = unit > (2u << 20) ? unit : 2u << 20};
    pool_backend be = {.reserve = dev_reserve, .release = dev_release,
                       .fence = dev_fence, .ctx = dev, .trim_unit = unit};
    if (o->trim_unit)
        be.trim = dev_trim;
    if (o->stitch) { /* as CUPOOL_STITCH: no trim unless asked for */
        be.stitch = dev_stitch;
        be.unstitch = dev_unstitch;
        be.extend = dev_extend;
    }
    return pool_create(&cfg, &be, p);
}

/* One replay in progress. */
typedef struct run {
    const trace *t;
    const replay_opts *o;
    replay_result *r;
    pool *p;
    device dev;
    amap map;            /* trace address -> replay address */
    unsigned char *mark; /* per record: M_APPLIED, M_FREE_AFTER */
    uint64_t rec_reserved, start;
} run;

/* Record i, an allocation the program got: served by the pool, or counted
 * as out of memory. Returns 0 or an error that ends the replay. */
static int replay_alloc(run *x, size_t i, const trace_record *e)
{
    replay_result *r = x->r;
    uint64_t size = trace_size(e);
    if (trace_result_of(e) != TRACE_R_OK || size == 0)
        return 0;
    uintptr_t a;
    int err = pool_alloc(x->p, size, &a);
    if (err == -ENOMEM || err == -EDQUOT) {
        pool_stats s;
        pool_stats_get(x->p, &s);
        if (r->ooms++ == 0) {
            r->first_oom.index = r->events - 1;
            r->first_oom.time = e->time - x->start;
            r->first_oom.size = size;
            r->first_oom.allocated = s.allocated;
            r->first_oom.reserved = s.reserved;
            r->first_oom.largest_free = s.largest_free;
            r->first_oom.fragmentation = stats_oom_is_fragmentation(
                size, s.allocated, s.cached,
                x->o->max_reserved ? x->o->max_reserved : x->o->capacity);
        }
        return 0;
    }
    if (err)
        return err;
    r->allocs++;
    uint64_t stale = amap_take(&x->map, e->addr);
    if (stale) {
        /* Its free comes a little later in the file, or was never
         * recorded: free it now. */
        size_t j = find_near(x->t, i, x->o->device, TRACE_FREE, e->addr, x->mark);
        if (j != SIZE_MAX) {
            x->mark[j] = M_APPLIED;
            r->reordered++;
            r->frees++;
        } else {
            r->unmatched_frees++;
        }
        pool_free(x->p, stale);
    }
    if (x->mark[i] == M_FREE_AFTER) { /* freed just "before" */
        pool_free(x->p, a);
        r->frees++;
        return 0;
    }
    return amap_put(&x->map, e->addr, a);
}

/* Record i, a free: of the block the address maps to, or, if its
 * allocation comes a little later in the file, right after it. */
static void replay_free(run *x, size_t i, const trace_record *e)
{
    replay_result *r = x->r;
    if (trace_result_of(e) != TRACE_R_OK || x->mark[i])
        return;
    uint64_t mine = amap_take(&x->map, e->addr);
    if (mine && pool_free(x->p, mine) == 0) {
        r->frees++;
        return;
    }
    size_t j = find_near(x->t, i, x->o->device, TRACE_ALLOC, e->addr, x->mark);
    if (j != SIZE_MAX) {
        x->mark[j] = M_FREE_AFTER;
        r->reordered++;
    } else {
        r->unmatched_frees++;
    }
}

/* Record e, anything else. Returns 0 or -EOVERFLOW (not a real trace). */
static int replay_other(run *x, const trace_record *e)
{
    replay_result *r = x->r;
    uint64_t size = trace_size(e);
    trace_result res = trace_result_of(e);
    uintptr_t a;
    switch (trace_op_of(e)) {
    case TRACE_OOM:
        r->recorded_ooms++;
        if (size && pool_alloc(x->p, size, &a) == 0) {
            r->recorded_ooms_served++;
            pool_free(x->p, a);
        }
        break;
    case TRACE_FLUSH:
        r->recorded_flushes++;
        pool_flush(x->p);
        break;
    case TRACE_FENCE:
        r->recorded_fences += res == TRACE_R_OK;
        break;
    case TRACE_RESERVE:
        if (res == TRACE_R_OK && size > REPLAY_SPACE - x->rec_reserved)
            return -EOVERFLOW; /* no device holds this */
        if (res == TRACE_R_OK)
            x->rec_reserved += size;
        if (x->rec_reserved > r->recorded_peak_reserved)
            r->recorded_peak_reserved = x->rec_reserved;
        break;
    case TRACE_RELEASE:
        x->rec_reserved -= size < x->rec_reserved ? size : x->rec_reserved;
        break;
    default:
        break;
    }
    return 0;
}

/* After an event: peaks, fragmentation now (returned), and the sample. */
static double replay_observe(run *x, const trace_record *e)
{
    replay_result *r = x->r;
    pool_stats s;
    pool_stats_get(x->p, &s);
    double frag = stats_frag(s.largest_free, s.cached);
    if (s.reserved > r->peak_reserved) {
        r->peak_reserved = s.reserved;
        r->frag_at_peak = frag;
    }
    /* A near-empty cache says nothing about fragmentation. */
    if (s.cached && s.cached * 100 >= r->peak_reserved && frag > r->frag_max)
        r->frag_max = frag;
    if (r->sample) {
        replay_sample *y = &r->sample[r->nsamples++];
        y->time = e->time - x->start;
        y->allocated = s.allocated;
        y->reserved = s.reserved;
        y->largest_free = s.largest_free;
        y->recorded_reserved = x->rec_reserved;
    }
    return frag;
}

int replay_run(const trace *t, const replay_opts *o, replay_result *r)
{
    memset(r, 0, sizeof(*r));
    if (!o->policy)
        return -EINVAL;
    run x = {.t = t, .o = o, .r = r};
    int err = replay_pool(o, &x.dev, &x.p);
    if (err)
        return err;
    uint64_t count = 0;
    for (size_t i = 0; i < t->n; i++)
        count += trace_device(&t->rec[i]) == o->device;
    x.mark = calloc(t->n ? t->n : 1, 1);
    if (!x.mark || (o->samples && count &&
                    !(r->sample = malloc(count * sizeof(*r->sample)))))
        err = -ENOMEM;
    uint64_t last_time = 0;
    double frag_area = 0, frag_now = 0;
    bool started = false;
    for (size_t i = 0; i < t->n && !err; i++) {
        const trace_record *e = &t->rec[i];
        if (trace_device(e) != o->device)
            continue;
        if (!started) {
            x.start = last_time = e->time;
            started = true;
        }
        frag_area += frag_now * (double)(e->time - last_time);
        last_time = e->time;
        r->events++;
        trace_op op = trace_op_of(e);
        if (op == TRACE_ALLOC)
            err = replay_alloc(&x, i, e);
        else if (op == TRACE_FREE)
            replay_free(&x, i, e);
        else
            err = replay_other(&x, e);
        if (!err)
            frag_now = replay_observe(&x, e);
    }
    pool_stats s;
    pool_stats_get(x.p, &s);
    r->peak_allocated = s.allocated_peak;
    r->end_allocated = s.allocated;
    r->end_live_blocks = x.map.count;
    r->fences = s.fences;
    r->seg_reserves = s.seg_reserves;
    r->stitches = s.stitches;
    r->stitched_bytes = s.stitched_bytes_total;
    r->frag_mean = last_time > x.start ? frag_area / (double)(last_time - x.start) : 0.0;
    pool_destroy(x.p);
    free(x.dev.rooms);
    free(x.map.key);
    free(x.map.val);
    free(x.mark);
    if (err) {
        replay_result_free(r);
        return err < 0 ? err : -EINVAL;
    }
    return 0;
}

void replay_result_free(replay_result *r)
{
    free(r->sample);
    r->sample = NULL;
    r->nsamples = 0;
}
