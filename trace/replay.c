/* SPDX-License-Identifier: Apache-2.0 */
/*
 * replay.c - see replay.h.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "addrmap.h"
#include "grow.h"
#include "replay.h"
#include "sim_backend.h"
#include "stats.h"

static const replay_policy policies[] = {
    {"best", "best fit, split; at most one fence per 64 small allocations "
             "to reach a better freed block (cupool's default)", POOL_FIT_BEST, 0, false},
    {"strict", "best fit, split; fence whenever a freed block fits better",
     POOL_FIT_BEST, 1, false},
    {"first", "first fit (lowest address), split", POOL_FIT_FIRST, 0, false},
    {"nosplit", "no splitting: one segment per request, reused whole",
     POOL_FIT_NOSPLIT, 0, false},
    {"none", "best fit, split; a freed block is reused at once, as under "
             "CUPOOL_FENCE=none (unsafe; what stream safety is measured against)",
     POOL_FIT_BEST, 0, true},
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
static int replay_pool(const replay_opts *o, sim_backend *dev, pool **p)
{
    pool_config cfg;
    pool_config_default(&cfg);
    cfg.fit = o->policy->fit;
    if (o->policy->fence_interval)
        cfg.fence_interval = o->policy->fence_interval;
    cfg.max_reserved = o->max_reserved;
    if (o->small_segment)
        cfg.small_segment = o->small_segment;
    if (o->mid_set)
        cfg.mid_max = o->mid_max;
    /* As CUPOOL_STITCH: large units without a cap, the granule under one. */
    size_t unit = o->trim_unit ? o->trim_unit
                  : !o->stitch ? 0 : o->max_reserved ? (size_t)2 << 20 : POOL_STITCH_UNIT;
    pool_backend be;
    sim_backend_init(dev, (size_t)o->capacity, &be);
    if (o->trim_unit)
        sim_backend_enable_trim(dev, &be, unit);
    else if (unit)
        sim_backend_set_unit(dev, &be, unit);
    if (o->stitch) /* as CUPOOL_STITCH: no trim unless asked for */
        sim_backend_enable_stitch(dev, &be);
    if (o->fence_lag && !o->policy->no_fence)
        sim_backend_enable_async(dev, &be);
    if (o->policy->no_fence)
        be.fence = NULL;
    return pool_create(&cfg, &be, p);
}

/* One replay in progress. */
typedef struct run {
    const trace *t;
    const replay_opts *o;
    replay_result *r;
    pool *p;
    sim_backend dev;
    pool_addrmap map;    /* trace address -> replay address */
    unsigned char *mark; /* per record: M_APPLIED, M_FREE_AFTER */
    uint64_t rec_reserved, start;
    uint64_t *begun;     /* (fence_lag) when each fence began: ticket - 1 */
    size_t nbegun, begun_cap;
} run;

/* (fence_lag) Before an event at time now: the fences begun at least
 * fence_lag before it are done. */
static void fences_due(run *x, uint64_t now)
{
    while (x->dev.done < x->nbegun && x->begun[x->dev.done] + x->o->fence_lag <= now)
        x->dev.done++;
}

/* (fence_lag) After an event at time now: the fences it began began now. */
static int fences_begun(run *x, uint64_t now)
{
    while (x->nbegun < x->dev.tickets) {
        if (!pool_grow((void **)&x->begun, &x->begun_cap, x->nbegun, sizeof(*x->begun)))
            return -ENOBUFS;
        x->begun[x->nbegun++] = now;
    }
    return 0;
}

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
    uintptr_t stale = (uintptr_t)pool_addrmap_take(&x->map, e->addr);
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
    if (!e->addr || !a) /* a zero-byte block: nothing to free */
        return 0;
    if (pool_addrmap_reserve(&x->map) != 0)
        return -ENOBUFS;
    pool_addrmap_put(&x->map, e->addr, (void *)a);
    return 0;
}

/* Record i, a free: of the block the address maps to, or, if its
 * allocation comes a little later in the file, right after it. */
static void replay_free(run *x, size_t i, const trace_record *e)
{
    replay_result *r = x->r;
    if (trace_result_of(e) != TRACE_R_OK || x->mark[i])
        return;
    uintptr_t mine = (uintptr_t)pool_addrmap_take(&x->map, e->addr);
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
        if (res == TRACE_R_OK && size > SIM_SPACE - x->rec_reserved)
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
    double frag = stats_frag(s.largest_free, s.idle_bytes, s.cached);
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
        y->releasable = s.idle_bytes;
        y->recorded_reserved = x->rec_reserved;
    }
    return frag;
}

/* The run's per-record marks, its address map and, with opts.samples, room
 * for one sample per record of the device. 0 or -ENOBUFS. */
static int replay_prepare(run *x)
{
    const trace *t = x->t;
    uint64_t count = 0;
    for (size_t i = 0; i < t->n; i++)
        count += trace_device(&t->rec[i]) == x->o->device;
    x->mark = calloc(t->n ? t->n : 1, 1);
    if (!x->mark || pool_addrmap_init(&x->map) != 0 || (x->o->samples && count &&
                    !(x->r->sample = malloc(count * sizeof(*x->r->sample)))))
        return -ENOBUFS;
    return 0;
}

/* Record i of the device, at its time: the fences due by then are done,
 * the record is applied, the fences it began are stamped. Returns 0 or an
 * error that ends the replay. */
static int replay_record(run *x, size_t i, const trace_record *e)
{
    int err = 0;
    if (x->o->fence_lag)
        fences_due(x, e->time);
    trace_op op = trace_op_of(e);
    if (op == TRACE_ALLOC)
        err = replay_alloc(x, i, e);
    else if (op == TRACE_FREE)
        replay_free(x, i, e);
    else
        err = replay_other(x, e);
    if (!err && x->o->fence_lag)
        err = fences_begun(x, e->time);
    return err;
}

/* Replays the device's records in order, up to the first error, and sets
 * the time-weighted mean fragmentation. Returns 0 or that error. */
static int replay_events(run *x)
{
    const trace *t = x->t;
    replay_result *r = x->r;
    uint64_t last_time = 0;
    double frag_area = 0, frag_now = 0;
    bool started = false;
    int err = 0;
    for (size_t i = 0; i < t->n && !err; i++) {
        const trace_record *e = &t->rec[i];
        if (trace_device(e) != x->o->device)
            continue;
        if (!started) {
            x->start = last_time = e->time;
            started = true;
        }
        frag_area += frag_now * (double)(e->time - last_time);
        last_time = e->time;
        r->events++;
        err = replay_record(x, i, e);
        if (!err)
            frag_now = replay_observe(x, e);
    }
    r->frag_mean = last_time > x->start ? frag_area / (double)(last_time - x->start) : 0.0;
    return err;
}

/* The pool's figures at the end of the replay, into the result. */
static void replay_totals(run *x)
{
    replay_result *r = x->r;
    pool_stats s;
    pool_stats_get(x->p, &s);
    r->peak_allocated = s.allocated_peak;
    r->end_allocated = s.allocated;
    r->end_live_blocks = x->map.count;
    r->fences = s.fences;
    r->fences_forced = s.fence_forced;
    r->seg_reserves = s.seg_reserves;
    r->stitches = s.stitches;
    r->stitched_bytes = s.stitched_bytes_total;
}

/* Destroys the pool and frees what the run holds. Returns err, or, if the
 * run went well, -EPROTO where the device caught the pool releasing,
 * trimming or stitching memory it did not hand out. */
static int replay_teardown(run *x, int err)
{
    pool_destroy(x->p);
    if (!err && (x->dev.bad_releases || x->dev.bad_trims || x->dev.bad_stitches))
        err = -EPROTO;
    sim_backend_fini(&x->dev);
    pool_addrmap_fini(&x->map);
    free(x->mark);
    free(x->begun);
    return err;
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
    err = replay_prepare(&x);
    if (!err)
        err = replay_events(&x);
    replay_totals(&x);
    err = replay_teardown(&x, err);
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
