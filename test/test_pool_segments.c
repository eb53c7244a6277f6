/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_pool_segments.c - the pool's rules for its segments: trimming,
 * asynchronous fences, the observer, stitching; run by test_pool.c's main
 * as a group of their own.
 */
#include <errno.h>
#include <string.h>

#include "test_pool.h"

/* ---- trimming ------------------------------------------------------------ */

/* A pool whose backend can give back 2 MiB units inside segments. */
static void fx_open_trim(fixture *fx, size_t cap)
{
    sim_backend_init(&fx->sim, 0, &fx->be);
    sim_backend_enable_trim(&fx->sim, &fx->be, 2 * MIB);
    test_config(&fx->cfg);
    fx->cfg.max_reserved = cap;
    assert_int_equal(pool_create(&fx->cfg, &fx->be, &fx->p), 0);
}

/* Under a cap, a request no hole fits gets memory back from a free block
 * inside a segment that still holds a live block: the units under it are
 * given back and the segment shrinks to its live part. Without trimming,
 * the same requests fail. */
static void test_trim_on_cap(void **state)
{
    fixture *fx = *state;
    for (int trim = 0; trim < 2; trim++) {
        pool_config cfg;
        test_config(&cfg);
        cfg.max_reserved = 48 * MIB;
        if (trim)
            fx_open_trim(fx, 48 * MIB);
        else
            fx_open(fx, 0, &cfg);
        xfree(fx, xalloc(fx, 40 * MIB));
        uintptr_t b = xalloc(fx, 10 * MIB); /* the front of that segment */
        uintptr_t c = 0;
        int err = pool_alloc(fx->p, 36 * MIB, &c);
        checked(fx->p);
        pool_stats s = stats(fx);
        if (!trim) {
            assert_int_equal(err, -EDQUOT);
            assert_int_equal(s.reserved, 40 * MIB);
        } else {
            assert_int_equal(err, 0);
            assert_int_equal(s.trims, 1);
            assert_int_equal(fx->sim.trims, 1);
            assert_int_equal(s.reserved, 46 * MIB);
            assert_int_equal(s.segments, 2);
            assert_int_equal(s.retries, 1);
            uintptr_t base;
            size_t size;
            assert_int_equal(pool_segment_of(fx->p, b, &base, &size), 0);
            assert_int_equal(base, b);
            assert_int_equal(size, 10 * MIB);
            xfree(fx, c);
        }
        xfree(fx, b);
        fx_close(fx);
        fx->p = NULL;
    }
}

/* A flush gives back every whole unit under free blocks, cutting segments
 * around the live blocks; what is left is released exactly, part by part. */
static void test_trim_splits_segments(void **state)
{
    fixture *fx = *state;
    fx_open_trim(fx, 0);
    xfree(fx, xalloc(fx, 64 * MIB));
    uintptr_t p1 = xalloc(fx, 3 * MIB);  /* [0, 3) MiB of the segment */
    uintptr_t p2 = xalloc(fx, 20 * MIB); /* [3, 23) */
    uintptr_t p3 = xalloc(fx, 5 * MIB);  /* [23, 28), then [28, 64) free */
    uintptr_t base = p1;
    assert_int_equal(p2, base + 3 * MIB);
    assert_int_equal(p3, base + 23 * MIB);
    xfree(fx, p2);
    /* [28, 64) whole, and [4, 22) of p2's [3, 23). */
    assert_int_equal(pool_flush(fx->p), 54 * MIB);
    checked(fx->p);
    pool_stats s = stats(fx);
    assert_int_equal(s.reserved, 10 * MIB);
    assert_int_equal(fx->sim.used, 10 * MIB);
    assert_int_equal(s.trims, 2);
    assert_int_equal(s.segments, 2);
    assert_int_equal(s.free_blocks, 2); /* [3, 4) and [22, 23) */
    assert_int_equal(s.released_bytes_total, 54 * MIB);
    assert_false(pool_owns(fx->p, base + 10 * MIB));
    assert_true(pool_owns(fx->p, base + 3 * MIB));
    assert_true(pool_owns(fx->p, base + 22 * MIB));
    assert_false(pool_owns(fx->p, base + 28 * MIB));
    /* A remnant merges with its freed neighbour (after a fence: until
     * then the neighbour is dirty) and serves requests. */
    xfree(fx, p1);
    assert_int_equal(stats(fx).free_blocks, 3);
    uintptr_t r = xalloc(fx, 4 * MIB);
    assert_int_equal(r, base);
    xfree(fx, r);
    /* Each part is released whole once idle (the backend checks that every
     * release is exactly one range it holds). */
    assert_int_equal(pool_flush(fx->p), 4 * MIB);
    xfree(fx, p3);
    assert_int_equal(pool_flush(fx->p), 6 * MIB);
    s = stats(fx);
    assert_int_equal(s.reserved, 0);
    assert_int_equal(s.segments, 0);
    assert_int_equal(fx->sim.bad_trims, 0);
}

/* Only blocks freed before the last fence are trimmed: with no fence
 * possible, a block freed since stays, units and all. A backend that
 * cannot trim now changes nothing. */
static void test_trim_needs_clean_blocks(void **state)
{
    fixture *fx = *state;
    fx_open_trim(fx, 0);
    xfree(fx, xalloc(fx, 64 * MIB));
    uintptr_t p1 = xalloc(fx, 3 * MIB);
    uintptr_t p2 = xalloc(fx, 20 * MIB);
    uintptr_t p3 = xalloc(fx, 5 * MIB);
    fx->sim.fence_error = -EAGAIN;
    xfree(fx, p2);
    assert_int_equal(pool_flush(fx->p), 36 * MIB); /* [28, 64) only */
    checked(fx->p);
    assert_int_equal(stats(fx).reserved, 28 * MIB);
    fx->sim.fence_error = 0;
    fx->sim.trim_error = -EAGAIN;
    assert_int_equal(pool_flush(fx->p), 0);
    checked(fx->p);
    pool_stats s = stats(fx);
    assert_int_equal(s.reserved, 28 * MIB);
    assert_int_equal(s.trims, 1);
    fx->sim.trim_error = 0;
    assert_int_equal(pool_flush(fx->p), 18 * MIB);
    xfree(fx, p1);
    xfree(fx, p3);
    pool_flush(fx->p);
    assert_int_equal(stats(fx).reserved, 0);
}

/* ---- asynchronous fences -------------------------------------------------- */

static void fx_open_async(fixture *fx, size_t capacity)
{
    sim_backend_init(&fx->sim, capacity, &fx->be);
    sim_backend_enable_async(&fx->sim, &fx->be);
    test_config(&fx->cfg);
    assert_int_equal(pool_create(&fx->cfg, &fx->be, &fx->p), 0);
    checked(fx->p);
}

/* Before the pool grows, the fence over the block freed is forced done. */
static void test_async_fence_forced_before_growth(void **state)
{
    fixture *fx = *state;
    fx_open_async(fx, 0);
    uintptr_t a = xalloc(fx, 4 * KIB);
    fill_small_tail(fx);
    xfree(fx, a);
    assert_int_equal(xalloc(fx, 4 * KIB), a);
    assert_int_equal(fx->sim.begins, 1);
    assert_int_equal(fx->sim.forces, 1);
    assert_int_equal(fx->sim.fences, 0);
    assert_int_equal(stats(fx).seg_reserves, 1);
    assert_int_equal(stats(fx).fence_forced, 1);
}

/* A block whose fence is not done, and cannot be forced now, is not handed
 * out: the pool grows, and takes the block once the fence is done. */
static void test_async_fence_not_done_grows(void **state)
{
    fixture *fx = *state;
    fx_open_async(fx, 0);
    fx->sim.no_force = true;
    uintptr_t a = xalloc(fx, 4 * KIB);
    fill_small_tail(fx);
    xfree(fx, a);
    uintptr_t b = xalloc(fx, 4 * KIB);
    assert_true(b != a);
    assert_int_equal(fx->sim.begins, 1);
    assert_int_equal(fx->sim.fences, 0);
    assert_int_equal(stats(fx).seg_reserves, 2);
    fx->sim.done = fx->sim.tickets;
    fill_small_tail(fx); /* the new segment's tail: clean, no fence needed */
    assert_int_equal(xalloc(fx, 4 * KIB), a);
    assert_int_equal(fx->sim.begins, 1);
    assert_int_equal(fx->sim.fences, 0);
    assert_int_equal(stats(fx).fence_forced, 0);
}

/* Before it grows, the pool forces the fence over a block that alone is
 * too small but that, merged with the clean free block beside it, fits:
 * a synchronous fence would have merged them. */
static void test_async_fence_forced_for_a_merged_fit(void **state)
{
    fixture *fx = *state;
    fx_open_async(fx, 0);
    uintptr_t big = xalloc(fx, 16 * MIB);
    xfree(fx, big);
    uintptr_t a = xalloc(fx, 8 * MIB), b = xalloc(fx, 8 * MIB);
    assert_int_equal(a, big);
    assert_int_equal(b, big + 8 * MIB);
    uintptr_t s = xalloc(fx, 4 * KIB);
    fill_small_tail(fx);
    xfree(fx, b);
    xfree(fx, s);
    assert_int_equal(xalloc(fx, 4 * KIB), s); /* a fence over s and b: b clean */
    xfree(fx, a); /* dirty, beside clean b: 8 + 8 MiB once a's fence is done */
    uint64_t forced = stats(fx).fence_forced;
    assert_int_equal(xalloc(fx, 12 * MIB), a);
    pool_stats st = stats(fx);
    assert_int_equal(st.fence_forced, forced + 1);
    assert_int_equal(st.reserved, 16 * MIB + 2 * MIB);
}

/* When the pool cannot grow and no fence can be forced, one full fence
 * makes every block clean. */
static void test_async_fence_full_when_full(void **state)
{
    fixture *fx = *state;
    fx_open_async(fx, 2 * MIB); /* one small segment */
    fx->sim.no_force = true;
    uintptr_t a = xalloc(fx, 4 * KIB);
    fill_small_tail(fx);
    xfree(fx, a);
    assert_int_equal(xalloc(fx, 4 * KIB), a);
    assert_int_equal(fx->sim.begins, 1);
    assert_int_equal(fx->sim.fences, 1);
    assert_int_equal(stats(fx).fence_forced, 1);
    assert_int_equal(stats(fx).failures, 0);
}

/* A fence covers the blocks freed before it began, not those freed after:
 * and those of two epochs do not merge until both are clean. */
static void test_async_fence_covers_only_earlier_frees(void **state)
{
    fixture *fx = *state;
    fx_open_async(fx, 0);
    fx->sim.no_force = true;
    uintptr_t a = xalloc(fx, 4 * KIB), b = xalloc(fx, 4 * KIB);
    fill_small_tail(fx);
    xfree(fx, a);
    uintptr_t g1 = xalloc(fx, 4 * KIB); /* begins fence 1 over a; grows */
    assert_int_equal(fx->sim.begins, 1);
    xfree(fx, b); /* after fence 1 began: not covered by it */
    assert_int_equal(stats(fx).free_blocks, 3); /* a, b apart; g1's tail */
    fx->sim.done = 1;
    fill_small_tail(fx);
    /* Fence 1 done: a is clean, b (its neighbour) is not. */
    assert_int_equal(xalloc(fx, 8 * KIB) == a, 0);
    assert_int_equal(fx->sim.begins, 2); /* the miss began fence 2 over b */
    assert_int_equal(xalloc(fx, 4 * KIB), a);
    fx->sim.done = 2;
    fill_small_tail(fx);
    assert_int_equal(xalloc(fx, 4 * KIB), b);
    xfree(fx, g1);
}

/* At most POOL_FENCES_MAX fences are in flight; a free in between still
 * waits for a fence begun after it. Forcing goes oldest first, one at a
 * time, only as far as the request needs. */
static void test_async_fences_in_flight_are_bounded(void **state)
{
    fixture *fx = *state;
    fx_open_async(fx, 0);
    fx->sim.no_force = true;
    uintptr_t held[8];
    for (int i = 0; i < 8; i++)
        held[i] = xalloc(fx, 4 * KIB);
    fill_small_tail(fx);
    for (int i = 0; i < 8; i++) {
        xfree(fx, held[i]);
        fill_small_tail(fx);
        uintptr_t x = xalloc(fx, 4 * KIB); /* a miss: begins a fence, grows */
        assert_true(x != held[i]);
    }
    assert_int_equal(fx->sim.begins, 3);
    assert_true(fx->sim.polls > 3);
    fx->sim.no_force = false;
    fill_small_tail(fx);
    assert_int_equal(xalloc(fx, 4 * KIB), held[0]); /* fence 1 forced */
    assert_int_equal(fx->sim.forces, 1);
    /* That request began a fourth fence over 3..7. All done: 1..7 are
     * clean and merged, the best fit for 28 KiB. */
    assert_int_equal(fx->sim.begins, 4);
    fx->sim.done = fx->sim.tickets;
    assert_int_equal(xalloc(fx, 28 * KIB), held[1]);
    assert_int_equal(fx->sim.begins, 4);
}

/* A clean block at most fence_slack percent larger than the request is
 * taken rather than forcing a fence for a better fit; a larger one is not. */
static void test_async_fence_slack(void **state)
{
    fixture *fx = *state;
    for (int slack = 49; slack <= 50; slack++) {
        sim_backend_init(&fx->sim, 0, &fx->be);
        sim_backend_enable_async(&fx->sim, &fx->be);
        test_config(&fx->cfg);
        fx->cfg.fence_slack = (size_t)slack;
        assert_int_equal(pool_create(&fx->cfg, &fx->be, &fx->p), 0);
        fx->sim.no_force = true;
        uintptr_t b = xalloc(fx, 4 * MIB), d = xalloc(fx, 6 * MIB);
        uintptr_t e = xalloc(fx, 10 * MIB);
        xfree(fx, d);
        xfree(fx, e);
        uintptr_t g1 = xalloc(fx, 20 * MIB); /* fence 1 over d and e; grows */
        fx->sim.done = 1;
        xfree(fx, b);
        uintptr_t g2 = xalloc(fx, 30 * MIB); /* d, e clean; fence 2 over b */
        assert_int_equal(fx->sim.begins, 2);
        fx->sim.no_force = false;
        /* 4 MiB: d is the best clean fit, 50% larger; b, pending, fits. */
        uintptr_t got = xalloc(fx, 4 * MIB);
        assert_int_equal(got, slack == 50 ? d : b);
        assert_int_equal(fx->sim.forces, slack == 50 ? 0 : 1);
        xfree(fx, got);
        xfree(fx, g1);
        xfree(fx, g2);
        if (slack == 49) {
            pool_destroy(fx->p);
            sim_backend_fini(&fx->sim);
        }
    }
}

/* A begin that fails other than -EAGAIN fails the allocation that needed
 * it, changing nothing; -EAGAIN (a capture) uses fresh memory. */
static void test_async_fence_errors(void **state)
{
    fixture *fx = *state;
    fx_open_async(fx, 0);
    uintptr_t a = xalloc(fx, 4 * KIB);
    fill_small_tail(fx);
    xfree(fx, a);
    fx->sim.fence_error = -EIO;
    uintptr_t got = 9;
    assert_int_equal(pool_alloc(fx->p, 4 * KIB, &got), -EIO);
    assert_int_equal(got, 9);
    checked(fx->p);
    assert_int_equal(stats(fx).fence_failures, 1);
    fx->sim.fence_error = -EAGAIN;
    assert_true(xalloc(fx, 4 * KIB) != a);
    assert_int_equal(stats(fx).fence_deferrals, 1);
    fx->sim.fence_error = 0;
}

/* A backend must give both asynchronous calls, and a full fence with them. */
static void test_async_needs_all_three(void **state)
{
    (void)state;
    sim_backend sim;
    pool_backend be;
    pool *p = NULL;
    sim_backend_init(&sim, 0, &be);
    sim_backend_enable_async(&sim, &be);
    be.fence_poll = NULL;
    assert_int_equal(pool_create(NULL, &be, &p), -EINVAL);
    sim_backend_enable_async(&sim, &be);
    be.fence = NULL;
    assert_int_equal(pool_create(NULL, &be, &p), -EINVAL);
    sim_backend_fini(&sim);
}

/* ---- observer ----------------------------------------------------------- */

/* Events as the observer and the backend's release saw them, in order. */
typedef struct seen {
    char kind[16];
    int err[16];
    uintptr_t addr[16];
    size_t size[16];
    int n;
    pool_backend inner;
} seen;

static void seen_add(seen *w, char kind, int err, uintptr_t addr, size_t size)
{
    assert_true(w->n < 16);
    w->kind[w->n] = kind;
    w->err[w->n] = err;
    w->addr[w->n] = addr;
    w->size[w->n++] = size;
}

static void seen_observe(void *ctx, int ev, int err, uintptr_t addr, size_t size)
{
    seen_add(ctx, ev == POOL_EV_ALLOC ? 'A' : 'F', err, addr, size);
}

static void seen_release(void *ctx, uintptr_t base, size_t size)
{
    seen *w = ctx;
    seen_add(w, 'R', 0, base, size);
    w->inner.release(w->inner.ctx, base, size);
}

static int seen_reserve(void *ctx, size_t size, uintptr_t *base)
{
    seen *w = ctx;
    return w->inner.reserve(w->inner.ctx, size, base);
}

static void test_observer_sees_lock_order(void **state)
{
    fixture *fx = *state;
    seen w = {0};
    test_config(&fx->cfg);
    fx->cfg.release_threshold = 0; /* a free that empties a segment releases it */
    sim_backend_init(&fx->sim, 0, &w.inner);
    fx->be = (pool_backend){.reserve = seen_reserve, .release = seen_release,
                            .observe = seen_observe, .ctx = &w};
    assert_int_equal(pool_create(&fx->cfg, &fx->be, &fx->p), 0);
    uintptr_t a = xalloc(fx, 1000), c = xalloc(fx, 700), b = xalloc(fx, 3 * MIB);
    assert_int_equal(pool_free(fx->p, 0x10), -ENOENT);   /* foreign: unseen */
    assert_int_equal(pool_free(fx->p, a + 512), -EINVAL);
    xfree(fx, a);
    assert_int_equal(pool_free(fx->p, a), -EALREADY);
    xfree(fx, c);
    xfree(fx, b);
    assert_int_equal(w.n, 10);
    assert_memory_equal(w.kind, "AAAFFFFRFR", 10);
    assert_true(w.addr[0] == a && w.size[0] == 1000 && w.err[0] == 0);
    assert_true(w.addr[1] == c && w.size[1] == 700);
    assert_true(w.addr[2] == b && w.size[2] == 3 * MIB);
    assert_true(w.addr[3] == a + 512 && w.err[3] == -EINVAL && w.size[3] == 0);
    assert_true(w.addr[4] == a && w.err[4] == 0 && w.size[4] == 1000);
    assert_true(w.addr[5] == a && w.err[5] == -EALREADY);
    /* The free comes before the release it leads to, with the bytes that
     * were asked for. */
    assert_true(w.addr[6] == c && w.err[6] == 0 && w.size[6] == 700);
    assert_true(w.addr[7] == a && w.size[7] == 2 * MIB);
    assert_true(w.addr[8] == b && w.err[8] == 0 && w.size[8] == 3 * MIB);
    assert_true(w.addr[9] == b && w.size[9] == 4 * MIB);
    assert_int_equal(stats(fx).bad_frees, 2);
}

/* ---- stitching ----------------------------------------------------------- */

static void fx_open_stitch(fixture *fx, size_t cap)
{
    sim_backend_init(&fx->sim, 0, &fx->be);
    sim_backend_enable_trim(&fx->sim, &fx->be, 2 * MIB);
    sim_backend_enable_stitch(&fx->sim, &fx->be);
    test_config(&fx->cfg);
    fx->cfg.max_reserved = cap;
    assert_int_equal(pool_create(&fx->cfg, &fx->be, &fx->p), 0);
}

/* One 24 MiB segment with [0, 8) and [16, 24) free around a live [8, 16):
 * returns the segment's base, the live block in *mid. */
static uintptr_t two_holes(fixture *fx, uintptr_t *mid)
{
    xfree(fx, xalloc(fx, 24 * MIB));
    uintptr_t a = xalloc(fx, 8 * MIB);
    *mid = xalloc(fx, 8 * MIB);
    uintptr_t c = xalloc(fx, 8 * MIB);
    assert_int_equal(*mid, a + 8 * MIB);
    assert_int_equal(c, a + 16 * MIB);
    xfree(fx, a);
    xfree(fx, c);
    return a;
}

/* A request no hole fits is served by mapping the holes' memory into a new
 * range: nothing new is reserved. The stitched segment stays cached for the
 * next such request; a request it does not fit unstitches it and stitches
 * anew, reserving only what the holes lack. */
static void test_stitch_from_holes(void **state)
{
    fixture *fx = *state;
    fx_open_stitch(fx, 0);
    uintptr_t mid, base = two_holes(fx, &mid);
    uintptr_t c = xalloc(fx, 12 * MIB);
    pool_stats s = stats(fx);
    assert_true(c < base || c >= base + 24 * MIB);
    assert_int_equal(s.stitches, 1);
    assert_int_equal(s.stitched_bytes_total, 12 * MIB);
    assert_int_equal(s.reserved, 24 * MIB);
    assert_int_equal(s.seg_reserves, 1);
    assert_int_equal(s.segments, 2);
    assert_int_equal(fx->sim.nst, 1);
    /* Smallest first, both 8 MiB: all of [0, 8) and [16, 20) of the base. */
    assert_int_equal(fx->sim.st[0].n, 2);
    assert_int_equal(fx->sim.st[0].parts[0].addr, base);
    assert_int_equal(fx->sim.st[0].parts[1].addr, base + 16 * MIB);
    assert_int_equal(fx->sim.st[0].parts[1].size, 4 * MIB);
    /* The lent memory was freed: freeing it again is a double free. */
    assert_int_equal(pool_free(fx->p, base), -EALREADY);
    assert_int_equal(pool_free(fx->p, base + 17 * MIB), -EALREADY);
    /* [20, 24) is still free in the segment. */
    uintptr_t d = xalloc(fx, 4 * MIB);
    assert_int_equal(d, base + 20 * MIB);
    xfree(fx, c);
    uintptr_t again = xalloc(fx, 12 * MIB);
    assert_int_equal(again, c);
    assert_int_equal(stats(fx).stitches, 1);
    xfree(fx, again);
    xfree(fx, d);
    /* 20 MiB: the cached 12 MiB is unstitched; [0, 8) and [16, 24) give
     * 16, and a fresh 4 MiB segment the rest. */
    uintptr_t e = xalloc(fx, 20 * MIB);
    s = stats(fx);
    assert_int_equal(fx->sim.unstitches, 1);
    assert_int_equal(s.stitches, 2);
    assert_int_equal(s.reserved, 28 * MIB);
    assert_int_equal(s.seg_reserves, 2);
    xfree(fx, e);
    xfree(fx, mid);
    /* A flush unstitches and gives everything back. */
    assert_int_equal(pool_flush(fx->p), 28 * MIB);
    s = stats(fx);
    assert_int_equal(s.reserved, 0);
    assert_int_equal(s.segments, 0);
    assert_int_equal(fx->sim.nst, 0);
    assert_int_equal(fx->sim.bad_stitches, 0);
}

/* For the spare-node tests: a pool whose backend trims unit-sized parts
 * (and stitches them, if stitch), under cap, holding j 512-byte blocks
 * (each split takes a node: j moves the count of spare nodes), then one
 * 48 MiB segment with the live blocks of sizes live[0], hole, live[1],
 * hole, live[2] (holes of 14 MiB) from its start, the holes freed.
 * Returns the segment's base. */
static uintptr_t open_holes(fixture *fx, size_t unit, bool stitch, size_t cap,
                            int j, const size_t live[3])
{
    sim_backend_init(&fx->sim, 0, &fx->be);
    sim_backend_enable_trim(&fx->sim, &fx->be, unit);
    if (stitch)
        sim_backend_enable_stitch(&fx->sim, &fx->be);
    test_config(&fx->cfg);
    fx->cfg.max_reserved = cap;
    assert_int_equal(pool_create(&fx->cfg, &fx->be, &fx->p), 0);
    for (int k = 0; k < j; k++)
        (void)xalloc(fx, 512);
    xfree(fx, xalloc(fx, 48 * MIB));
    uintptr_t a = xalloc(fx, live[0]), b = xalloc(fx, 14 * MIB);
    uintptr_t c = xalloc(fx, live[1]), d = xalloc(fx, 14 * MIB);
    uintptr_t e = xalloc(fx, live[2]);
    assert_int_equal(c, a + live[0] + 14 * MIB);
    assert_int_equal(e, c + live[1] + 14 * MIB);
    assert_int_equal(e + live[2], a + 48 * MIB);
    xfree(fx, b);
    xfree(fx, d);
    return a;
}

/* A stitch that carves each part out of the middle of a free block uses
 * two nodes a part and one for the stitched segment: if the spare nodes
 * were exactly as many, the request's own split found none left (a crash
 * on the GPU with 8 MiB units). Every count of spare nodes before the
 * request is tried: j small blocks before it move the count through a
 * whole slab. */
static void test_stitch_spare_nodes(void **state)
{
    fixture *fx = *state;
    /* Live [0, 4), [18, 28) and [42, 48); the 14 MiB holes [4, 18) and
     * [28, 42) each hold one whole 8 MiB unit. */
    static const size_t live[3] = {4 * MIB, 10 * MIB, 6 * MIB};
    for (int j = 0; j < 300; j++) {
        uintptr_t a = open_holes(fx, 8 * MIB, true, 0, j, live);
        uint64_t seg_reserves = stats(fx).seg_reserves;
        /* No hole fits 14.5 MiB: [8, 16) and [32, 40) are stitched, and
         * the request is split off the 16 MiB. */
        uintptr_t f = xalloc(fx, 14 * MIB + 512 * KIB);
        assert_int_equal(stats(fx).stitches, 1);
        assert_int_equal(stats(fx).seg_reserves, seg_reserves);
        assert_true(f < a || f >= a + 48 * MIB);
        uintptr_t g = xalloc(fx, 1 * MIB + 512 * KIB);
        assert_int_equal(g, f + 14 * MIB + 512 * KIB);
        xfree(fx, g);
        xfree(fx, f);
        assert_true(pool_flush(fx->p) > 0);
        fx_close(fx);
        fx->p = NULL;
    }
}

/* The same for trims: under a cap, a request the cap refuses is served
 * after cutting the free units out of two holes, each cut keeping a head
 * and a tail (a node each); the new segment then needs a node of its own,
 * which the request's reservation no longer held at one count of spares. */
static void test_trim_spare_nodes(void **state)
{
    fixture *fx = *state;
    /* Live [0, 3), [17, 27) and [41, 48); the holes [3, 17) and [27, 41)
     * hold the 2 MiB units of [4, 16) and [28, 40). */
    static const size_t live[3] = {3 * MIB, 10 * MIB, 7 * MIB};
    for (int j = 1; j < 300; j++) { /* a small segment: 2 MiB */
        uintptr_t a = open_holes(fx, 2 * MIB, false, 60 * MIB, j, live);
        /* 50 MiB reserved; 24 more pass the 60 MiB cap by 14, more than
         * one hole's 12 MiB of units: both are cut. */
        assert_int_equal(stats(fx).reserved, 50 * MIB);
        uintptr_t f = xalloc(fx, 24 * MIB);
        assert_true(f < a || f >= a + 48 * MIB);
        assert_int_equal(fx->sim.trims, 2);
        assert_true(stats(fx).reserved <= 60 * MIB);
        xfree(fx, f);
        fx_close(fx);
        fx->p = NULL;
    }
}

/* An idle stitched segment at least half as large as a request it does
 * not fit grows in place from free units: only they are mapped, at its
 * end, and it keeps its address. Where its range has no room left, it is
 * unstitched and stitched anew, as without extensions. */
static void test_stitch_extends(void **state)
{
    fixture *fx = *state;
    for (int room = 1; room >= 0; room--) {
        fx_open_stitch(fx, 0);
        uintptr_t mid, base = two_holes(fx, &mid);
        uintptr_t c = xalloc(fx, 12 * MIB); /* [0, 8) and [16, 20) */
        xfree(fx, c);
        assert_int_equal(fx->sim.nst, 1);
        if (!room)
            fx->sim.st[0].room = 12 * MIB;
        uintptr_t e = xalloc(fx, 16 * MIB);
        pool_stats s = stats(fx);
        assert_int_equal(s.stitches, 2);
        assert_int_equal(s.reserved, 24 * MIB);
        assert_int_equal(s.seg_reserves, 1);
        assert_int_equal(fx->sim.nst, 1);
        if (room) { /* [20, 24) mapped after the 12 MiB */
            assert_int_equal(e, c);
            assert_int_equal(fx->sim.extends, 1);
            assert_int_equal(fx->sim.unstitches, 0);
            assert_int_equal(s.stitched_bytes_total, 16 * MIB);
            assert_int_equal(fx->sim.st[0].n, 3);
            assert_int_equal(fx->sim.st[0].parts[2].addr, base + 20 * MIB);
            assert_int_equal(fx->sim.st[0].parts[2].size, 4 * MIB);
        } else { /* [0, 8) and [16, 24) anew */
            assert_int_equal(fx->sim.extends, 0);
            assert_int_equal(fx->sim.unstitches, 1);
            assert_int_equal(fx->sim.st[0].n, 2);
            assert_int_equal(fx->sim.st[0].parts[1].size, 8 * MIB);
        }
        assert_int_equal(fx->sim.st[0].size, 16 * MIB);
        assert_int_equal(pool_free(fx->p, base + 21 * MIB), -EALREADY);
        xfree(fx, e);
        xfree(fx, mid);
        assert_int_equal(pool_flush(fx->p), 24 * MIB);
        assert_int_equal(fx->sim.nst, 0);
        assert_int_equal(fx->sim.bad_stitches, 0);
        if (room)
            fx_close(fx); /* the teardown closes the last */
    }
}

/* A stitch the backend refuses leaves plain growth: a fresh part already
 * reserved for it goes back. Under a cap, the fresh part is what counts. */
static void test_stitch_refused_and_capped(void **state)
{
    fixture *fx = *state;
    fx_open_stitch(fx, 0);
    uintptr_t mid;
    two_holes(fx, &mid);
    fx->sim.stitch_error = -ENOMEM;
    uintptr_t e = xalloc(fx, 20 * MIB);
    pool_stats s = stats(fx);
    assert_int_equal(s.stitches, 0);
    assert_int_equal(s.reserved, 44 * MIB);
    assert_int_equal(s.seg_reserves, 3); /* 24, the 4 MiB part, 20 */
    assert_int_equal(s.seg_releases, 1);
    xfree(fx, e);
    xfree(fx, mid);
    fx_close(fx);
    /* Cap 28 MiB: the holes and 4 fresh MiB serve 20 MiB. */
    fx_open_stitch(fx, 28 * MIB);
    two_holes(fx, &mid);
    e = xalloc(fx, 20 * MIB);
    assert_int_equal(stats(fx).reserved, 28 * MIB);
    xfree(fx, e);
    xfree(fx, mid);
    fx_close(fx);
    /* Cap 26 MiB: 8 live and 20 more do not fit, stitched or not. */
    fx_open_stitch(fx, 26 * MIB);
    two_holes(fx, &mid);
    assert_int_equal(pool_alloc(fx->p, 20 * MIB, &e), -EDQUOT);
    checked(fx->p);
    assert_true(stats(fx).reserved <= 26 * MIB);
    xfree(fx, mid);
    fx_close(fx);
    fx->p = NULL;
}

/* Stitching needs a unit (trim need not be there) and both calls. */
static void test_stitch_needs_unit_and_both(void **state)
{
    (void)state;
    sim_backend sim;
    pool_backend be;
    pool *p;
    sim_backend_init(&sim, 0, &be);
    sim_backend_enable_stitch(&sim, &be);
    assert_int_equal(pool_create(NULL, &be, &p), -EINVAL);
    be.trim_unit = 3 * MIB;
    assert_int_equal(pool_create(NULL, &be, &p), -EINVAL);
    be.trim_unit = 2 * MIB;
    be.unstitch = NULL;
    assert_int_equal(pool_create(NULL, &be, &p), -EINVAL);
    sim_backend_enable_stitch(&sim, &be);
    assert_int_equal(pool_create(NULL, &be, &p), 0);
    pool_destroy(p);
    sim_backend_fini(&sim);
}

const struct CMUnitTest pool_segment_tests[] = {
    T(test_observer_sees_lock_order),
    T(test_trim_on_cap),
    T(test_trim_splits_segments),
    T(test_trim_needs_clean_blocks),
    T(test_async_fence_forced_before_growth),
    T(test_async_fence_not_done_grows),
    T(test_async_fence_forced_for_a_merged_fit),
    T(test_async_fence_full_when_full),
    T(test_async_fence_covers_only_earlier_frees),
    T(test_async_fences_in_flight_are_bounded),
    T(test_async_fence_errors),
    T(test_async_fence_slack),
    cmocka_unit_test(test_async_needs_all_three),
    T(test_stitch_from_holes),
    T(test_stitch_spare_nodes),
    T(test_trim_spare_nodes),
    T(test_stitch_refused_and_capped),
    T(test_stitch_extends),
    cmocka_unit_test(test_stitch_needs_unit_and_both),
};
const size_t pool_segment_count = sizeof(pool_segment_tests) / sizeof(pool_segment_tests[0]);
