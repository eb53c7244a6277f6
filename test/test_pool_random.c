/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_pool_random.c - a seeded random walk of 600 000 mixed operations
 * against a reference model of the live blocks.
 *
 * The model keeps every live (address, size) pair. Periodically (and at the
 * end) it checks: no two live ranges overlap, every live range lies inside
 * one of the pool's segments at its full rounded size, the byte counters
 * match the model, the backend saw exactly what the pool says it reserved,
 * and pool_check passes. Stream safety is modelled too: the ranges freed
 * since the backend's last fence are "dirty", and no allocation may return
 * a block that overlaps one unless a fence came first. Flushes, changing caps, a finite device and
 * injected backend failures are mixed in; every failure must be one the
 * pool is allowed to return at that moment. The walk runs three times: with
 * whole segments only, with a backend that can trim (give back the
 * 2 MiB units under free blocks inside segments), whose held ranges must
 * match the pool's segments exactly after every cut, and with trimming
 * under first fit (a quarter of the operations), and with asynchronous
 * fences that the walk declares done at random (half the operations), and
 * with stitching over asynchronous fences (a quarter): there the backend
 * tells which memory each address reaches, and no two live blocks may
 * share memory, nor may a block reach memory freed and not yet fenced,
 * through whatever addresses. Then twice more with the pool's mid segments
 * (which test_config turns off): whole segments, and stitching (a quarter
 * each).
 *
 * Usage: test_pool_random [OPS [SEED]]  (default 600000, what make test
 * affords; seed 0x5eed)
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pool_test.h"

enum { MAX_LIVE = 4000, CHECK_EVERY = 1024 };

typedef struct live { uintptr_t addr; size_t size; } live;

/* A range freed and not yet known safe: safe once a full fence came after
 * its free (fences > full) or a fence begun after it is done (done >
 * ticket). */
typedef struct unsafe { uintptr_t addr; size_t size; unsigned long full; uint64_t ticket; } unsafe;

typedef struct walk {
    fixture fx;
    uint64_t rng;
    live *lv;
    size_t n;
    uint64_t requested;
    size_t cap;
    unsigned long failures, ops;
    unsafe *dirty;         /* ranges freed and not yet known safe */
    size_t ndirty, dirty_cap;
    bool trim;
    bool async;            /* asynchronous fences, done at random */
    bool first;            /* first fit (with trimming): its segment bounds
                              are checked by pool_check as the walk goes */
    bool stitch;           /* stitching (with trimming, async fences) */
    bool mid;              /* the pool's mid segments (test_config has none) */
    live *chunk;           /* scratch: memory ranges of blocks */
    size_t chunk_cap;
} walk;

static int by_addr(const void *a, const void *b)
{
    const live *x = a, *y = b;
    return (x->addr > y->addr) - (x->addr < y->addr);
}

static size_t rounded(size_t n) { return (n + POOL_ALIGN - 1) / POOL_ALIGN * POOL_ALIGN; }

/* Log-uniform in [1 B, 8 MiB], with 2% in [8 MiB, 128 MiB]. */
static size_t draw_size(walk *w)
{
    uint64_t r = rng_next(&w->rng);
    int hi = r % 100 < 2 ? 27 : 23;
    int lo = hi == 27 ? 23 : 0;
    int bits = lo + (int)(rng_next(&w->rng) % (uint64_t)(hi - lo + 1));
    size_t base = (size_t)1 << bits;
    return base + rng_next(&w->rng) % base / 2 + 1;
}

/* The memory [a, a + size) reaches, as ranges appended to w->chunk from
 * index at; returns the new count. Without stitching, the addresses. */
static size_t chunks(walk *w, uintptr_t a, size_t size, size_t at)
{
    while (size) {
        size_t len = size;
        uintptr_t ph = a;
        if (w->stitch) {
            ph = sim_backend_phys(&w->fx.sim, a, &len);
            if (!ph)
                fail_msg("block at %#lx reaches no memory", (unsigned long)a);
            len = len < size ? len : size;
        }
        if (at == w->chunk_cap) {
            w->chunk_cap = w->chunk_cap ? 2 * w->chunk_cap : 4096;
            w->chunk = realloc(w->chunk, w->chunk_cap * sizeof(*w->chunk));
            assert_non_null(w->chunk);
        }
        w->chunk[at++] = (live){ph, len};
        a += len;
        size -= len;
    }
    return at;
}

/* No two live blocks reach the same memory. */
static void check_memory(walk *w)
{
    size_t n = 0;
    for (size_t i = 0; i < w->n; i++)
        n = chunks(w, w->lv[i].addr, rounded(w->lv[i].size), n);
    qsort(w->chunk, n, sizeof(*w->chunk), by_addr);
    for (size_t i = 0; i + 1 < n; i++)
        if (w->chunk[i].addr + w->chunk[i].size > w->chunk[i + 1].addr)
            fail_msg("two live blocks reach the memory at %#lx",
                     (unsigned long)w->chunk[i + 1].addr);
}

static void verify(walk *w)
{
    fixture *fx = &w->fx;
    checked(fx->p);
    qsort(w->lv, w->n, sizeof(*w->lv), by_addr);
    for (size_t i = 0; i < w->n; i++) {
        live *l = &w->lv[i];
        if (i + 1 < w->n && l->addr + rounded(l->size) > w->lv[i + 1].addr)
            fail_msg("live blocks overlap: %#lx+%zu and %#lx",
                     (unsigned long)l->addr, l->size,
                     (unsigned long)w->lv[i + 1].addr);
        size_t bsize;
        uintptr_t base;
        size_t seg;
        assert_int_equal(pool_block_size(fx->p, l->addr, &bsize), 0);
        assert_true(bsize >= rounded(l->size));
        assert_int_equal(pool_segment_of(fx->p, l->addr, &base, &seg), 0);
        assert_true(l->addr + bsize <= base + seg);
    }
    if (w->stitch)
        check_memory(w);
    pool_stats s = stats(fx);
    assert_int_equal(s.requested, w->requested);
    assert_int_equal(s.reserved, fx->sim.used);
    assert_int_equal(s.segments, fx->sim.nsegs + fx->sim.nst);
    assert_int_equal(fx->sim.bad_stitches, 0);
    /* Extensions count as stitches. */
    assert_int_equal(s.stitches, fx->sim.stitches + fx->sim.extends);
    assert_int_equal(s.fences, fx->sim.fences + fx->sim.begins);
    assert_int_equal(fx->sim.bad_releases, 0);
    assert_int_equal(fx->sim.bad_trims, 0);
    assert_int_equal(s.trims, fx->sim.trims);
}

/* Fails if [a, a+size) reaches memory freed and not yet fenced. */
static void check_fenced(walk *w, uintptr_t va, size_t vsize)
{
    size_t nc = chunks(w, va, vsize, 0);
    for (size_t c = 0; c < nc; c++)
    for (size_t i = 0; i < w->ndirty;) {
        uintptr_t a = w->chunk[c].addr;
        size_t size = w->chunk[c].size;
        const unsafe *d = &w->dirty[i];
        if (w->fx.sim.fences > d->full || w->fx.sim.done > d->ticket) {
            w->dirty[i] = w->dirty[--w->ndirty];
            continue;
        }
        if (a < d->addr + d->size && d->addr < a + size)
            fail_msg("block %#lx handed out while %#lx, freed after the last "
                     "fence, may still be in use", (unsigned long)va,
                     (unsigned long)d->addr);
        i++;
    }
}

static void mark_dirty(walk *w, live l)
{
    size_t nc = chunks(w, l.addr, rounded(l.size), 0);
    for (size_t c = 0; c < nc; c++) {
    if (w->ndirty == w->dirty_cap) {
        w->dirty_cap = w->dirty_cap ? 2 * w->dirty_cap : 1024;
        w->dirty = realloc(w->dirty, w->dirty_cap * sizeof(*w->dirty));
        assert_non_null(w->dirty);
    }
    w->dirty[w->ndirty++] = (unsafe){w->chunk[c].addr, w->chunk[c].size,
                                    w->fx.sim.fences, w->fx.sim.tickets};
    }
}

static void step_alloc(walk *w)
{
    fixture *fx = &w->fx;
    size_t size = draw_size(w);
    pool_stats before = stats(fx);
    uintptr_t a = 0;
    int err = pool_alloc(fx->p, size, &a);
    if (err) {
        /* Allowed only under a cap or a full/failing device. */
        assert_true(err == -EDQUOT || err == -ENOMEM);
        if (err == -EDQUOT)
            assert_true(w->cap != 0);
        assert_int_equal(stats(fx).allocated, before.allocated);
        w->failures++;
        return;
    }
    assert_int_equal(a % POOL_ALIGN, 0);
    check_fenced(w, a, size);
    if (w->cap && before.reserved <= w->cap)
        assert_true(stats(fx).reserved <= w->cap);
    w->lv[w->n++] = (live){a, size};
    w->requested += size;
}

static void step_free(walk *w)
{
    size_t i = rng_next(&w->rng) % w->n;
    live l = w->lv[i];
    w->lv[i] = w->lv[--w->n];
    mark_dirty(w, l); /* the memory it reaches now */
    assert_int_equal(pool_free(w->fx.p, l.addr), 0);
    w->requested -= l.size;
}

static void step_control(walk *w, unsigned long op)
{
    fixture *fx = &w->fx;
    if (op % 50000 == 0) {
        pool_stats before = stats(fx);
        size_t freed = pool_flush(fx->p);
        pool_stats after = stats(fx);
        assert_int_equal(after.reserved, before.reserved - freed);
        assert_int_equal(after.idle_bytes, 0);
    }
    if (op % 100000 == 0) {
        static const size_t caps[] = {0, 256 * MIB, 1024 * MIB, 2048 * MIB};
        w->cap = caps[rng_next(&w->rng) % 4];
        pool_set_max_reserved(fx->p, w->cap);
    }
    if (rng_next(&w->rng) % 1000 == 0)
        fx->sim.fail_reserves = 1;
    /* The GPU catches up with the fences begun, now and then. */
    if (w->async && fx->sim.done < fx->sim.tickets && rng_next(&w->rng) % 8 == 0)
        fx->sim.done += 1 + rng_next(&w->rng) % (fx->sim.tickets - fx->sim.done);
    fx->sim.no_force = w->async && rng_next(&w->rng) % 4 != 0;
    fx->sim.stitch_error = w->stitch && rng_next(&w->rng) % 200 == 0 ? -ENOMEM : 0;
    /* Now and then the backend cannot trim. */
    fx->sim.trim_error = w->trim && rng_next(&w->rng) % 100 == 0 ? -EAGAIN : 0;
}

static void random_walk(void **state)
{
    walk *w = *state;
    for (unsigned long op = 1; op <= w->ops; op++) {
        step_control(w, op);
        bool alloc = w->n == 0 || (w->n < MAX_LIVE && rng_next(&w->rng) % 100 < 55);
        if (alloc)
            step_alloc(w);
        else
            step_free(w);
        if (op % CHECK_EVERY == 0)
            verify(w);
    }
    verify(w);
    pool_stats s = stats(&w->fx);
    printf("ops %lu: allocs %lu, failures %lu, fences %lu, segment reserves "
           "%lu, releases %lu, peak reserved %lu MiB, stitches %lu, "
           "extensions %lu\n", w->ops,
           (unsigned long)s.allocs, w->failures, (unsigned long)s.fences,
           (unsigned long)s.seg_reserves, (unsigned long)s.seg_releases,
           (unsigned long)(s.reserved_peak >> 20), w->fx.sim.stitches,
           w->fx.sim.extends);
    /* The walk must have exercised what it claims to. */
    assert_true(s.fences > 0 && s.seg_releases > 0 && s.retries > 0);
    assert_true(w->failures > 0 && s.hits > s.allocs / 2);
    assert_true(w->trim ? s.trims > 0 : s.trims == 0);
    assert_true(w->stitch ? s.stitches > 0 && w->fx.sim.unstitches > 0 &&
                                w->fx.sim.extends > 0 : s.stitches == 0);
    /* Now and then a stitch fails: plain growth serves the request. */
    while (w->n)
        step_free(w);
    verify(w);
    assert_int_equal(stats(&w->fx).allocated, 0);
}

/* The walk's pool configuration: the tests' (test_config), first fit or
 * the default mid segments where the walk asks. */
static void walk_config(const walk *w, pool_config *cfg)
{
    test_config(cfg);
    if (w->first)
        cfg->fit = POOL_FIT_FIRST;
    if (w->mid) {
        pool_config d;
        pool_config_default(&d);
        cfg->mid_max = d.mid_max;
        cfg->mid_segment = d.mid_segment;
    }
}

static int setup(void **state)
{
    walk *w = *state;
    w->lv = calloc(MAX_LIVE, sizeof(*w->lv));
    pool_config cfg;
    walk_config(w, &cfg);
    if (w->async) {
        sim_backend_init(&w->fx.sim, 4096 * MIB, &w->fx.be);
        sim_backend_enable_async(&w->fx.sim, &w->fx.be);
        if (w->stitch) {
            sim_backend_enable_trim(&w->fx.sim, &w->fx.be, 2 * MIB);
            sim_backend_enable_stitch(&w->fx.sim, &w->fx.be);
        }
        w->fx.cfg = cfg;
        assert_int_equal(pool_create(&w->fx.cfg, &w->fx.be, &w->fx.p), 0);
    } else if (!w->trim) {
        fx_open(&w->fx, 4096 * MIB, &cfg);
    } else {
        sim_backend_init(&w->fx.sim, 4096 * MIB, &w->fx.be);
        sim_backend_enable_trim(&w->fx.sim, &w->fx.be, 2 * MIB);
        w->fx.cfg = cfg;
        assert_int_equal(pool_create(&w->fx.cfg, &w->fx.be, &w->fx.p), 0);
    }
    return w->lv ? 0 : -1;
}

static int teardown(void **state)
{
    walk *w = *state;
    fx_close(&w->fx);
    free(w->lv);
    free(w->dirty);
    free(w->chunk);
    return 0;
}

int main(int argc, char **argv)
{
    static walk w, t, f, a, st, m, mst;
    w.ops = argc > 1 ? strtoul(argv[1], NULL, 0) : 600000;
    w.rng = argc > 2 ? strtoull(argv[2], NULL, 0) : 0x5eed;
    printf("seed %#lx\n", (unsigned long)w.rng);
    t = w;
    t.trim = true;
    f = t;
    f.first = true;
    f.ops = w.ops / 4;
    a = w;
    a.async = true;
    a.ops = w.ops / 2;
    st = a;
    st.stitch = st.trim = true;
    st.ops = w.ops / 4;
    m = w;
    m.mid = true;
    m.ops = w.ops / 4;
    mst = st;
    mst.mid = true;
    const struct CMUnitTest tests[] = {
        {"random_walk_whole_segments", random_walk, setup, teardown, &w},
        {"random_walk_trimming", random_walk, setup, teardown, &t},
        {"random_walk_first_fit_trimming", random_walk, setup, teardown, &f},
        {"random_walk_async_fences", random_walk, setup, teardown, &a},
        {"random_walk_stitching", random_walk, setup, teardown, &st},
        {"random_walk_mid_segments", random_walk, setup, teardown, &m},
        {"random_walk_mid_segments_stitching", random_walk, setup, teardown, &mst},
    };
    return cmocka_run_group_tests_name("pool_random", tests, NULL, NULL);
}
