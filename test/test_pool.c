/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_pool.c - one cmocka test per rule of the pool (pool.h), each calling
 * pool_check after every operation through the x* wrappers.
 */
#include <errno.h>
#include <string.h>

#include "test_pool.h"

int setup(void **state)
{
    static fixture fx;
    memset(&fx, 0, sizeof(fx));
    *state = &fx;
    return 0;
}

int teardown(void **state)
{
    fixture *fx = *state;
    if (fx->p)
        fx_close(fx);
    fx->p = NULL;
    return 0;
}

static void test_round_and_align(void **state)
{
    fixture *fx = *state;
    fx_open(fx, 0, NULL);
    static const size_t sizes[] = {1, 511, 512, 513, 1000, 4096, MIB - 1, MIB};
    uint64_t rounded = 0, requested = 0;
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        uintptr_t a = xalloc(fx, sizes[i]);
        size_t got;
        assert_int_equal(pool_block_size(fx->p, a, &got), 0);
        size_t want = (sizes[i] + 511) / 512 * 512;
        assert_int_equal(got, want);
        rounded += want;
        requested += sizes[i];
    }
    assert_int_equal(stats(fx).allocated, rounded);
    assert_int_equal(stats(fx).requested, requested);
}

static void test_zero_bytes(void **state)
{
    fixture *fx = *state;
    fx_open(fx, 0, NULL);
    uintptr_t a = 123;
    assert_int_equal(pool_alloc(fx->p, 0, &a), 0);
    assert_int_equal(a, 0);
    assert_int_equal(stats(fx).allocs, 0);
    assert_int_equal(stats(fx).reserved, 0);
    assert_int_equal(pool_free(fx->p, 0), -ENOENT);
    checked(fx->p);
}

static void test_small_and_large_do_not_mix(void **state)
{
    fixture *fx = *state;
    fx_open(fx, 0, NULL);
    uintptr_t big = xalloc(fx, 3 * MIB);
    assert_int_equal(stats(fx).reserved, 4 * MIB);
    xfree(fx, big);
    /* 4 MiB of large cache sit free, yet a small request gets its own
     * 2 MiB segment. */
    uintptr_t s = xalloc(fx, 4 * KIB);
    assert_int_equal(stats(fx).seg_reserves, 2);
    assert_int_equal(stats(fx).reserved, 6 * MIB);
    assert_true(s < big || s >= big + 4 * MIB);
    /* And a large request does not come from the small segment's free
     * tail, though it has room. */
    uintptr_t l = xalloc(fx, MIB + 512);
    assert_true(l >= big && l < big + 4 * MIB);
    assert_int_equal(stats(fx).seg_reserves, 2);
}

static void test_large_segments_round_to_2mib(void **state)
{
    fixture *fx = *state;
    fx_open(fx, 0, NULL);
    xalloc(fx, 5 * MIB + 1);
    assert_int_equal(stats(fx).reserved, 6 * MIB);
    xalloc(fx, 64 * MIB);
    assert_int_equal(stats(fx).reserved, 70 * MIB);
}

/* Allocates blocks of the given sizes back to back with a 512-byte spacer
 * after each, so freeing them leaves separate holes. */
static void make_holes(fixture *fx, const size_t *sizes, int n, uintptr_t *at)
{
    for (int i = 0; i < n; i++) {
        at[i] = xalloc(fx, sizes[i]);
        xalloc(fx, 512);
    }
    for (int i = 0; i < n; i++)
        xfree(fx, at[i]);
}

static void test_best_fit(void **state)
{
    fixture *fx = *state;
    fx_open_nofence(fx);
    const size_t sizes[] = {4 * KIB, 16 * KIB, 8 * KIB, 8 * KIB};
    uintptr_t h[4];
    make_holes(fx, sizes, 4, h);
    assert_int_equal(stats(fx).free_blocks, 5); /* four holes and the tail */
    /* 6 KiB: the two 8 KiB holes tie, the lower address wins. */
    assert_int_equal(xalloc(fx, 6 * KIB), h[2]);
    assert_int_equal(xalloc(fx, 8 * KIB), h[3]);
    assert_int_equal(xalloc(fx, 3 * KIB), h[0]);
    assert_int_equal(xalloc(fx, 10 * KIB), h[1]);
    assert_int_equal(stats(fx).seg_reserves, 1);
}

static void test_ties_go_to_lowest_address(void **state)
{
    fixture *fx = *state;
    fx_open_nofence(fx);
    uintptr_t a = xalloc(fx, 8 * KIB), s1 = xalloc(fx, 512);
    uintptr_t b = xalloc(fx, 8 * KIB), s2 = xalloc(fx, 512);
    (void)s1;
    (void)s2;
    xfree(fx, b); /* freed first, but higher */
    xfree(fx, a);
    assert_int_equal(xalloc(fx, 8 * KIB), a);
    assert_int_equal(xalloc(fx, 8 * KIB), b);
}

static void test_small_split_keeps_remainder(void **state)
{
    fixture *fx = *state;
    fx_open(fx, 0, NULL);
    uintptr_t a = xalloc(fx, 512);
    pool_stats s = stats(fx);
    assert_int_equal(s.allocated, 512);
    assert_int_equal(s.free_blocks, 1);
    assert_int_equal(s.largest_free, 2 * MIB - 512);
    assert_int_equal(xalloc(fx, 512), a + 512);
}

static void test_large_split_only_when_useful(void **state)
{
    fixture *fx = *state;
    fx_open(fx, 0, NULL);
    /* 3.5 MiB in a 4 MiB segment: a 512 KiB remainder is not worth it. */
    xalloc(fx, 3 * MIB + 512 * KIB);
    assert_int_equal(stats(fx).allocated, 4 * MIB);
    assert_int_equal(stats(fx).free_blocks, 0);
    /* 2.5 MiB in a 4 MiB segment: 1.5 MiB is kept as a free block. */
    xalloc(fx, 2 * MIB + 512 * KIB);
    assert_int_equal(stats(fx).allocated, 4 * MIB + 2 * MIB + 512 * KIB);
    assert_int_equal(stats(fx).largest_free, MIB + 512 * KIB);
}

static void test_max_split(void **state)
{
    fixture *fx = *state;
    pool_config cfg;
    test_config(&cfg);
    cfg.max_split = 8 * MIB;
    fx_open(fx, 0, &cfg);
    uintptr_t big = xalloc(fx, 64 * MIB);
    xfree(fx, big);
    /* A small-ish large request never carves the oversize block. */
    uintptr_t m = xalloc(fx, 2 * MIB);
    assert_true(m < big || m >= big + 64 * MIB);
    assert_int_equal(stats(fx).seg_reserves, 2);
    /* An oversize request within the slack takes it whole. */
    uintptr_t o = xalloc(fx, 60 * MIB);
    assert_int_equal(o, big);
    assert_int_equal(stats(fx).allocated, 2 * MIB + 64 * MIB);
    xfree(fx, o);
    /* One beyond the slack (64 - 40 > 20 MiB) does not. */
    uintptr_t f = xalloc(fx, 40 * MIB);
    assert_true(f != big);
    assert_int_equal(stats(fx).seg_reserves, 3);
}

/* Large requests up to mid_max share segments of mid_segment bytes: two
 * 8 MiB activations fill one 20 MiB segment, which serves a 16 MiB request
 * once both are free (a batch that grew) with nothing more reserved. Each
 * in a segment of its own, the 16 MiB request needs one more. Past
 * mid_max, and where max_split would keep a mid segment whole, a request
 * has a segment of its own size. */
static void test_mid_requests_share_segments(void **state)
{
    fixture *fx = *state;
    for (int mid = 0; mid < 3; mid++) {
        pool_config cfg;
        test_config(&cfg);
        cfg.mid_max = mid ? 10 * MIB : 0;
        cfg.mid_segment = 20 * MIB;
        cfg.max_split = mid == 2 ? 16 * MIB : 0;
        fx_open(fx, 0, &cfg);
        uintptr_t a = xalloc(fx, 8 * MIB), b = xalloc(fx, 8 * MIB);
        uintptr_t c = xalloc(fx, 10 * MIB + 512);
        if (mid == 1) {
            assert_int_equal(b, a + 8 * MIB);
            assert_int_equal(stats(fx).reserved, 20 * MIB + 12 * MIB);
        } else {
            assert_int_equal(stats(fx).reserved, 8 * MIB + 8 * MIB + 12 * MIB);
        }
        xfree(fx, a);
        xfree(fx, b);
        uintptr_t d = xalloc(fx, 16 * MIB);
        pool_stats s = stats(fx);
        if (mid == 1) {
            assert_int_equal(d, a);
            assert_int_equal(s.reserved, 32 * MIB);
            assert_int_equal(s.seg_reserves, 2);
        } else {
            assert_int_equal(s.reserved, 44 * MIB);
            assert_int_equal(s.seg_reserves, 4);
        }
        xfree(fx, c);
        xfree(fx, d);
        if (mid < 2)
            fx_close(fx); /* the teardown closes the last */
    }
}

/* A mid segment the cap or the device cannot give does not fail the
 * request: it gets a segment of its own size. */
static void test_mid_falls_back_to_own_size(void **state)
{
    fixture *fx = *state;
    for (int by_cap = 0; by_cap < 2; by_cap++) {
        pool_config cfg;
        test_config(&cfg);
        cfg.mid_max = 10 * MIB;
        cfg.mid_segment = 20 * MIB;
        cfg.max_reserved = by_cap ? 12 * MIB : 0;
        fx_open(fx, by_cap ? 0 : 12 * MIB, &cfg);
        uintptr_t a = xalloc(fx, 8 * MIB);
        assert_int_equal(stats(fx).reserved, 8 * MIB);
        /* And the next: 2 MiB + 512 rounds to a segment of 4 MiB. */
        uintptr_t small = xalloc(fx, 2 * MIB + 512);
        assert_int_equal(stats(fx).reserved, 12 * MIB);
        xfree(fx, a);
        xfree(fx, small);
        if (!by_cap)
            fx_close(fx); /* the teardown closes the last */
    }
}

/* Under a cap, mid segments hold whole multiples of the request: eight
 * 8 MiB blocks fill a 64 MiB cap. In 20 MiB segments, three would leave
 * 12 MiB in tails and room for one more segment of 4 MiB: six blocks. */
static void test_mid_under_cap_leaves_no_tail(void **state)
{
    fixture *fx = *state;
    pool_config cfg;
    test_config(&cfg);
    cfg.mid_max = 10 * MIB;
    cfg.mid_segment = 20 * MIB;
    cfg.max_reserved = 64 * MIB;
    fx_open(fx, 0, &cfg);
    uintptr_t a[8];
    for (int i = 0; i < 8; i++)
        a[i] = xalloc(fx, 8 * MIB);
    pool_stats s = stats(fx);
    assert_int_equal(s.reserved, 64 * MIB);
    assert_int_equal(s.seg_reserves, 4);
    for (int i = 0; i < 8; i++)
        xfree(fx, a[i]);
}

static void test_coalesce_both_neighbours(void **state)
{
    fixture *fx = *state;
    fx_open_nofence(fx);
    uintptr_t a = xalloc(fx, 4 * KIB), b = xalloc(fx, 4 * KIB);
    uintptr_t c = xalloc(fx, 4 * KIB), d = xalloc(fx, 4 * KIB);
    xfree(fx, a);
    xfree(fx, c);
    assert_int_equal(stats(fx).free_blocks, 3);
    xfree(fx, b); /* joins a and c */
    assert_int_equal(stats(fx).free_blocks, 2);
    assert_int_equal(stats(fx).largest_free, 2 * MIB - 16 * KIB);
    xfree(fx, d); /* joins a..c and the tail: the segment is whole again */
    pool_stats s = stats(fx);
    assert_int_equal(s.free_blocks, 1);
    assert_int_equal(s.largest_free, 2 * MIB);
    assert_int_equal(s.idle_bytes, 2 * MIB);
}

static void test_grow_when_full(void **state)
{
    fixture *fx = *state;
    fx_open(fx, 0, NULL);
    for (int i = 0; i < 4; i++)
        xalloc(fx, 512 * KIB);
    assert_int_equal(stats(fx).seg_reserves, 1);
    assert_int_equal(stats(fx).free_blocks, 0);
    xalloc(fx, 512);
    assert_int_equal(stats(fx).seg_reserves, 2);
    assert_int_equal(stats(fx).hits, 3); /* the first alloc grew */
}

static void test_cap_fails_cleanly(void **state)
{
    fixture *fx = *state;
    pool_config cfg;
    test_config(&cfg);
    cfg.max_reserved = 4 * MIB;
    fx_open(fx, 0, &cfg);
    xalloc(fx, MIB);
    xalloc(fx, MIB);
    xalloc(fx, MIB);
    xalloc(fx, MIB);
    pool_stats before = stats(fx);
    uintptr_t a = 7;
    assert_int_equal(pool_alloc(fx->p, 512, &a), -EDQUOT);
    assert_int_equal(a, 7);
    checked(fx->p);
    pool_stats after = stats(fx);
    assert_int_equal(after.failures, 1);
    assert_int_equal(after.reserved, before.reserved);
    assert_int_equal(after.allocated, before.allocated);
    /* A request larger than the cap itself fails the same way. */
    assert_int_equal(pool_alloc(fx->p, 5 * MIB, &a), -EDQUOT);
    assert_true(stats(fx).reserved <= 4 * MIB);
}

static void test_cap_releases_idle_then_retries(void **state)
{
    fixture *fx = *state;
    pool_config cfg;
    test_config(&cfg);
    cfg.max_reserved = 4 * MIB;
    fx_open(fx, 0, &cfg);
    xfree(fx, xalloc(fx, 3 * MIB)); /* 4 MiB large segment, now idle */
    xalloc(fx, 4 * KIB);            /* needs 2 MiB more: over the cap */
    pool_stats s = stats(fx);
    assert_int_equal(s.retries, 1);
    assert_int_equal(s.seg_releases, 1);
    assert_int_equal(s.reserved, 2 * MIB);
    assert_int_equal(s.failures, 0);
}

/* Two pools and memory reserved beside them under one budget: every
 * segment either pool holds is taken from it, every release, trim and
 * forget gives back, and whoever would pass the limit is refused. */
static void test_shared_budget(void **state)
{
    fixture *fx = *state, other;
    memset(&other, 0, sizeof(other));
    pool_budget b = {0};
    pool_budget_set_limit(&b, 10 * MIB);
    test_config(&fx->cfg);
    fx->cfg.budget = &b;
    sim_backend_init(&fx->sim, 0, &fx->be);
    sim_backend_enable_trim(&fx->sim, &fx->be, 2 * MIB);
    assert_int_equal(pool_create(&fx->cfg, &fx->be, &fx->p), 0);
    fx_open(&other, 0, &fx->cfg);
    uintptr_t a = xalloc(fx, 5 * MIB);        /* 6 MiB taken */
    uintptr_t c = xalloc(&other, 3 * MIB);    /* 4 MiB more: the limit */
    assert_int_equal(atomic_load(&b.used), 10 * MIB);
    uintptr_t x = 7;
    assert_int_equal(pool_alloc(other.p, 512, &x), -EDQUOT); /* not its cap */
    assert_int_equal(x, 7);
    assert_int_equal(stats(&other).reserved, 4 * MIB);
    /* Memory held beside the pools counts too. */
    xfree(&other, c);
    assert_int_equal(pool_budget_take(&b, 4 * MIB), -EDQUOT); /* other's idle */
    assert_int_equal(pool_flush(other.p), 4 * MIB);
    assert_int_equal(atomic_load(&b.used), 6 * MIB);
    assert_int_equal(pool_budget_take(&b, 4 * MIB), 0);
    assert_int_equal(pool_alloc(other.p, 512, &x), -EDQUOT);
    pool_budget_give(&b, 4 * MIB);
    /* A release gives back; the other pool may then grow. */
    xfree(fx, a);
    assert_int_equal(pool_flush(fx->p), 6 * MIB);
    assert_int_equal(atomic_load(&b.used), 0);
    xfree(&other, xalloc(&other, 9 * MIB));
    assert_int_equal(pool_flush(other.p), 10 * MIB);
    /* One cap: a budget and max_reserved together are refused. */
    pool_config bad = fx->cfg;
    bad.max_reserved = MIB;
    pool *q = NULL;
    assert_int_equal(pool_create(&bad, &fx->be, &q), -EINVAL);
    /* Memory a device reset took leaves the budget; so does a destroyed
     * pool's. */
    xalloc(fx, 3 * MIB);
    xalloc(&other, 512);
    assert_int_equal(atomic_load(&b.used), 6 * MIB);
    pool_forget(fx->p);
    fx->sim.used = 0; /* the reset freed it */
    assert_int_equal(atomic_load(&b.used), 2 * MIB);
    fx_close(&other);
    assert_int_equal(atomic_load(&b.used), 0);
}

static void test_backend_failure_retry_and_error(void **state)
{
    fixture *fx = *state;
    fx_open(fx, 0, NULL);
    xfree(fx, xalloc(fx, 3 * MIB));
    fx->sim.fail_reserves = 1; /* first reserve fails; idle 4 MiB exists */
    xalloc(fx, 4 * KIB);
    assert_int_equal(stats(fx).retries, 1);
    assert_int_equal(stats(fx).seg_releases, 1);
    /* Nothing idle to release: the driver's failure is final, and it is
     * not the cap's error. */
    fx->sim.fail_reserves = 2;
    uintptr_t a;
    assert_int_equal(pool_alloc(fx->p, 8 * MIB, &a), -ENOMEM);
    checked(fx->p);
    assert_int_equal(stats(fx).failures, 1);
    fx->sim.fail_reserves = 0;
}

static void test_device_capacity(void **state)
{
    fixture *fx = *state;
    fx_open(fx, 8 * MIB, NULL);
    uintptr_t a = xalloc(fx, 6 * MIB);
    uintptr_t b;
    assert_int_equal(pool_alloc(fx->p, 4 * MIB, &b), -ENOMEM);
    checked(fx->p);
    xfree(fx, a);
    xfree(fx, xalloc(fx, 4 * MIB)); /* served from the idle 6 MiB block */
    assert_int_equal(fx->sim.reserves, 1);
    /* 7 MiB needs an 8 MiB segment: the device is full until the idle
     * 6 MiB segment goes back, then the retry fits. */
    xalloc(fx, 7 * MIB);
    assert_int_equal(stats(fx).retries, 1);
    assert_int_equal(fx->sim.used, 8 * MIB);
}

static void test_flush(void **state)
{
    fixture *fx = *state;
    fx_open(fx, 0, NULL);
    uintptr_t keep = xalloc(fx, 4 * KIB);
    uintptr_t l1 = xalloc(fx, 3 * MIB), l2 = xalloc(fx, 5 * MIB);
    xfree(fx, l1);
    xfree(fx, l2);
    assert_int_equal(pool_flush(fx->p), 4 * MIB + 6 * MIB);
    checked(fx->p);
    pool_stats s = stats(fx);
    assert_int_equal(s.reserved, 2 * MIB); /* the live small segment stays */
    assert_int_equal(s.flushes, 1);
    assert_int_equal(fx->sim.releases, 2);
    assert_int_equal(pool_flush(fx->p), 0);
    xfree(fx, keep);
    assert_int_equal(pool_flush(fx->p), 2 * MIB);
    assert_int_equal(stats(fx).reserved, 0);
}

static void test_release_threshold(void **state)
{
    fixture *fx = *state;
    pool_config cfg;
    test_config(&cfg);
    cfg.release_threshold = 4 * MIB;
    fx_open(fx, 0, &cfg);
    uintptr_t a = xalloc(fx, 3 * MIB), b = xalloc(fx, 3 * MIB);
    uintptr_t c = xalloc(fx, 3 * MIB);
    xfree(fx, a);
    assert_int_equal(stats(fx).idle_bytes, 4 * MIB);
    assert_int_equal(fx->sim.releases, 0);
    xfree(fx, b); /* 8 MiB idle: one segment goes */
    assert_int_equal(stats(fx).idle_bytes, 4 * MIB);
    assert_int_equal(fx->sim.releases, 1);
    xfree(fx, c);
    assert_int_equal(stats(fx).idle_bytes, 4 * MIB);
    assert_int_equal(stats(fx).reserved, 4 * MIB);
}

/* Fills the rest of the current small segment (whose free tail is the
 * largest clean small block) so that no clean small block remains. */
void fill_small_tail(fixture *fx)
{
    size_t left = stats(fx).largest_free;
    while (left) {
        size_t chunk = left < fx->cfg.small_max ? left : fx->cfg.small_max;
        xalloc(fx, chunk);
        left -= chunk;
    }
}

static void test_fence_when_only_dirty_fits(void **state)
{
    fixture *fx = *state;
    fx_open(fx, 0, NULL);
    uintptr_t a = xalloc(fx, 512 * KIB);
    for (int i = 0; i < 3; i++)
        xalloc(fx, 512 * KIB); /* the segment is full */
    xfree(fx, a);
    assert_int_equal(fx->sim.fences, 0); /* free itself never fences */
    assert_int_equal(xalloc(fx, 512 * KIB), a);
    assert_int_equal(fx->sim.fences, 1);
    xalloc(fx, 512); /* nothing dirty left: grows, no fence */
    assert_int_equal(fx->sim.fences, 1);
    assert_int_equal(stats(fx).seg_reserves, 2);
    assert_int_equal(stats(fx).fences, 1);
}

static void test_clean_first_defers_fence(void **state)
{
    fixture *fx = *state;
    fx_open(fx, 0, NULL);
    uintptr_t a = xalloc(fx, 4 * KIB), b = xalloc(fx, 4 * KIB);
    xfree(fx, a);
    /* The clean tail serves the request; a waits for a later fence. */
    assert_int_equal(xalloc(fx, 4 * KIB), b + 4 * KIB);
    assert_int_equal(fx->sim.fences, 0);
    assert_int_equal(stats(fx).free_blocks, 2); /* a (dirty) and the tail */
    /* Once fence_interval allocations have passed, a dirty block that fits
     * better than any clean one is worth a fence. */
    for (size_t i = 3; i < fx->cfg.fence_interval; i++)
        xalloc(fx, 512);
    assert_int_equal(fx->sim.fences, 0);
    assert_int_equal(xalloc(fx, 4 * KIB), a);
    assert_int_equal(fx->sim.fences, 1);
}

static void test_large_requests_keep_strict_best_fit(void **state)
{
    fixture *fx = *state;
    fx_open(fx, 0, NULL);
    uintptr_t a = xalloc(fx, 4 * MIB), b = xalloc(fx, 12 * MIB);
    xfree(fx, a);
    xfree(fx, b);
    /* The clean tail of b's segment is gone with b; a (dirty, 4 MiB) fits
     * 4 MiB exactly, b (dirty, 12 MiB) too: no clean block, so a fence. */
    assert_int_equal(xalloc(fx, 4 * MIB), a);
    assert_int_equal(fx->sim.fences, 1);
    uintptr_t c = xalloc(fx, 4 * MIB); /* from b's clean 12 MiB block */
    xfree(fx, c);
    /* A dirty exact fit (c) beats the clean 8 MiB rest of b's block: large
     * requests fence for it at once, whatever fence_interval says. */
    assert_int_equal(xalloc(fx, 4 * MIB), c);
    assert_int_equal(fx->sim.fences, 2);
}

static void test_fence_interval_one_is_strict(void **state)
{
    fixture *fx = *state;
    pool_config cfg;
    test_config(&cfg);
    cfg.fence_interval = 1;
    fx_open(fx, 0, &cfg);
    uintptr_t a = xalloc(fx, 4 * KIB);
    xalloc(fx, 4 * KIB);
    xfree(fx, a);
    assert_int_equal(xalloc(fx, 4 * KIB), a); /* best fit, fenced */
    assert_int_equal(fx->sim.fences, 1);
}

static void test_dirty_set_is_bounded(void **state)
{
    fixture *fx = *state;
    pool_config cfg;
    test_config(&cfg);
    cfg.fence_interval = 2; /* at most 8 dirty blocks before a fence */
    fx_open(fx, 0, &cfg);
    /* Clean 512-byte holes: freed, then made clean by a forced fence. */
    uintptr_t p[4];
    for (int i = 0; i < 4; i++) {
        p[i] = xalloc(fx, 512);
        xalloc(fx, 4 * KIB);
    }
    for (int i = 0; i < 4; i++)
        xfree(fx, p[i]);
    fill_small_tail(fx);
    assert_int_equal(xalloc(fx, 512), p[0]);
    assert_int_equal(fx->sim.fences, 1);
    /* Nine dirty 64 KiB holes in a second segment: none fits a 512-byte
     * request better than the clean holes do, but there are too many. */
    uintptr_t h[9];
    for (int i = 0; i < 9; i++) {
        h[i] = xalloc(fx, 64 * KIB);
        xalloc(fx, KIB); /* not 512: that would take the clean holes */
    }
    for (int i = 0; i < 9; i++)
        xfree(fx, h[i]);
    assert_int_equal(xalloc(fx, 512), p[1]);
    assert_int_equal(fx->sim.fences, 2);
}

static void test_one_fence_covers_earlier_frees(void **state)
{
    fixture *fx = *state;
    fx_open(fx, 0, NULL);
    const size_t sizes[] = {4 * KIB, 8 * KIB, 16 * KIB};
    uintptr_t h[3];
    make_holes(fx, sizes, 3, h);
    fill_small_tail(fx);
    assert_int_equal(xalloc(fx, 4 * KIB), h[0]);
    assert_int_equal(xalloc(fx, 8 * KIB), h[1]);
    assert_int_equal(xalloc(fx, 16 * KIB), h[2]);
    assert_int_equal(fx->sim.fences, 1);
    assert_int_equal(stats(fx).epoch, 2);
}

static void test_dirty_merges_only_with_dirty(void **state)
{
    fixture *fx = *state;
    fx_open(fx, 0, NULL);
    uintptr_t a = xalloc(fx, 4 * KIB), b = xalloc(fx, 4 * KIB);
    uintptr_t c = xalloc(fx, 4 * KIB);
    size_t tail = stats(fx).largest_free;
    xfree(fx, a);
    xfree(fx, c);
    xfree(fx, b); /* joins a and c: all dirty */
    /* The dirty run does not join the clean tail before a fence. */
    assert_int_equal(stats(fx).free_blocks, 2);
    assert_int_equal(stats(fx).largest_free, tail);
    uintptr_t t1 = xalloc(fx, tail / 2), t2 = xalloc(fx, tail - tail / 2);
    assert_int_equal(fx->sim.fences, 0); /* the clean tail, no fence */
    assert_int_equal(xalloc(fx, 12 * KIB), a); /* only dirty fits: fence */
    assert_int_equal(fx->sim.fences, 1);
    xfree(fx, t1);
    xfree(fx, t2);
    xfree(fx, a);
    /* Both dirty now, so they merge into the whole segment: idle. */
    assert_int_equal(stats(fx).free_blocks, 1);
    assert_int_equal(stats(fx).idle_bytes, 2 * MIB);
}

static void test_idle_segment_with_dirty_and_clean_blocks(void **state)
{
    fixture *fx = *state;
    fx_open(fx, 0, NULL);
    uintptr_t a = xalloc(fx, 4 * KIB);
    xfree(fx, a); /* dirty a beside the clean tail: no live block */
    assert_int_equal(stats(fx).free_blocks, 2);
    assert_int_equal(stats(fx).idle_bytes, 2 * MIB);
    assert_int_equal(pool_flush(fx->p), 2 * MIB);
    assert_int_equal(stats(fx).reserved, 0);
}

static void test_fence_error(void **state)
{
    fixture *fx = *state;
    fx_open(fx, 0, NULL);
    uintptr_t a = xalloc(fx, 4 * KIB);
    fill_small_tail(fx);
    xfree(fx, a);
    fx->sim.fence_error = -EIO;
    pool_stats before = stats(fx);
    uintptr_t got = 9;
    assert_int_equal(pool_alloc(fx->p, 4 * KIB, &got), -EIO);
    assert_int_equal(got, 9);
    checked(fx->p);
    assert_int_equal(stats(fx).allocated, before.allocated);
    assert_int_equal(stats(fx).fence_failures, 1);
    fx->sim.fence_error = 0;
    assert_int_equal(xalloc(fx, 4 * KIB), a);
    assert_int_equal(fx->sim.fences, 1);
}

static void test_fence_impossible_uses_fresh_memory(void **state)
{
    fixture *fx = *state;
    fx_open(fx, 0, NULL);
    uintptr_t a = xalloc(fx, 4 * KIB);
    fill_small_tail(fx);
    xfree(fx, a);
    fx->sim.fence_error = -EAGAIN; /* e.g. a graph is being captured */
    uintptr_t b = xalloc(fx, 4 * KIB);
    assert_true(b != a);
    assert_int_equal(fx->sim.fences, 0);
    assert_int_equal(stats(fx).seg_reserves, 2); /* a fresh segment */
    assert_int_equal(stats(fx).fence_deferrals, 1);
    assert_int_equal(stats(fx).fence_failures, 0);
    fx->sim.fence_error = 0;
    fill_small_tail(fx);
    assert_int_equal(xalloc(fx, 4 * KIB), a); /* fenced reuse once possible */
    assert_int_equal(fx->sim.fences, 1);
}

static void test_no_fence_backend(void **state)
{
    fixture *fx = *state;
    sim_backend_init(&fx->sim, 0, &fx->be);
    fx->be.fence = NULL;
    assert_int_equal(pool_create(NULL, &fx->be, &fx->p), 0);
    uintptr_t a = xalloc(fx, 4 * KIB);
    xfree(fx, a);
    assert_int_equal(xalloc(fx, 4 * KIB), a);
    assert_int_equal(stats(fx).fences, 0);
}

static void test_bad_frees_change_nothing(void **state)
{
    fixture *fx = *state;
    fx_open(fx, 0, NULL);
    uintptr_t a = xalloc(fx, 4 * KIB), b = xalloc(fx, 4 * KIB);
    xalloc(fx, 4 * KIB);
    xfree(fx, a);
    pool_stats before = stats(fx);
    assert_int_equal(pool_free(fx->p, 0x1000), -ENOENT);         /* foreign */
    assert_int_equal(pool_free(fx->p, b + 512), -EINVAL);        /* interior */
    assert_int_equal(pool_free(fx->p, b + 4 * KIB - 512), -EINVAL);
    assert_int_equal(pool_free(fx->p, a), -EALREADY);            /* double */
    assert_int_equal(pool_free(fx->p, a + 1024), -EALREADY);     /* in a hole */
    checked(fx->p);
    xfree(fx, b);
    /* b has merged into a's hole: its address is now inside a free block. */
    assert_int_equal(pool_free(fx->p, b), -EALREADY);
    checked(fx->p);
    pool_stats after = stats(fx);
    assert_int_equal(after.bad_frees, 5); /* a foreign address is not the
                                             pool's to judge: the shim passes it on */
    assert_int_equal(after.frees, before.frees + 1);
    assert_int_equal(after.allocated, before.allocated - 4 * KIB);
}

static void test_size_overflow(void **state)
{
    fixture *fx = *state;
    fx_open(fx, 0, NULL);
    uintptr_t a = 5;
    assert_int_equal(pool_alloc(fx->p, SIZE_MAX, &a), -EOVERFLOW);
    assert_int_equal(pool_alloc(fx->p, SIZE_MAX - 100, &a), -EOVERFLOW);
    /* Rounds to 512 fine, but not to a 2 MiB segment. */
    assert_int_equal(pool_alloc(fx->p, SIZE_MAX - 511, &a), -EOVERFLOW);
    assert_int_equal(a, 5);
    checked(fx->p);
    assert_int_equal(stats(fx).reserved, 0);
}

static void test_counters_and_peaks(void **state)
{
    fixture *fx = *state;
    fx_open(fx, 0, NULL);
    uintptr_t a = xalloc(fx, 1000), b = xalloc(fx, 3 * MIB);
    xfree(fx, a);
    xfree(fx, b);
    xalloc(fx, 100);
    pool_stats s = stats(fx);
    assert_int_equal(s.allocs, 3);
    assert_int_equal(s.frees, 2);
    assert_int_equal(s.hits, 1);
    assert_int_equal(s.seg_reserves, 2);
    assert_int_equal(s.requested, 100);
    assert_int_equal(s.requested_peak, 1000 + 3 * MIB);
    assert_int_equal(s.allocated_peak, 1024 + 4 * MIB);
    assert_int_equal(s.reserved_peak, 6 * MIB);
    assert_int_equal(s.cached, 6 * MIB - 512);
    assert_int_equal(s.cached_peak, 6 * MIB);
    assert_int_equal(s.segments, 2);
}

static void test_config_validation(void **state)
{
    (void)state;
    pool_config c;
    pool_config_default(&c);
    assert_int_equal(pool_config_validate(&c), 0);
    c.small_max = c.small_segment + POOL_ALIGN;
    assert_int_equal(pool_config_validate(&c), -EINVAL);
    test_config(&c);
    c.fence_slack = 100001;
    assert_int_equal(pool_config_validate(&c), -EINVAL);
    test_config(&c);
    c.large_round = 1000;
    assert_int_equal(pool_config_validate(&c), -EINVAL);
    test_config(&c);
    c.max_split = MIB; /* would refuse its own fresh small segments */
    assert_int_equal(pool_config_validate(&c), -EINVAL);
    test_config(&c);
    c.fence_interval = 0;
    assert_int_equal(pool_config_validate(&c), -EINVAL);
    pool_config_default(&c);
    c.mid_segment = 8 * MIB; /* below mid_max: could not serve its request */
    assert_int_equal(pool_config_validate(&c), -EINVAL);
    c.mid_max = 0; /* no mid segments: mid_segment is not used */
    assert_int_equal(pool_config_validate(&c), 0);
    c.mid_segment = 8 * MIB + 1;
    assert_int_equal(pool_config_validate(&c), -EINVAL);
    test_config(&c);
    c.fit = (pool_fit)7;
    assert_int_equal(pool_config_validate(&c), -EINVAL);
    test_config(&c);
    c.small_segment = 0;
    assert_int_equal(pool_config_validate(&c), -EINVAL);
    sim_backend sim;
    pool_backend be;
    pool *p = NULL;
    sim_backend_init(&sim, 0, &be);
    assert_int_equal(pool_create(&c, &be, &p), -EINVAL);
    be.reserve = NULL;
    assert_int_equal(pool_create(NULL, &be, &p), -EINVAL);
    assert_null(p);
    sim_backend_fini(&sim);
}

static void test_destroy_releases_everything(void **state)
{
    (void)state;
    sim_backend sim;
    pool_backend be;
    pool *p;
    sim_backend_init(&sim, 0, &be);
    assert_int_equal(pool_create(NULL, &be, &p), 0);
    uintptr_t a;
    assert_int_equal(pool_alloc(p, 3 * MIB, &a), 0);
    assert_int_equal(pool_alloc(p, 512, &a), 0);
    pool_destroy(p);
    assert_int_equal(sim.releases, 2);
    assert_int_equal(sim.used, 0);
    sim_backend_fini(&sim);
}

static void test_forget_after_device_reset(void **state)
{
    fixture *fx = *state;
    fx_open(fx, 0, NULL);
    uintptr_t a = xalloc(fx, 4 * KIB);
    xalloc(fx, 3 * MIB);
    xfree(fx, a);
    uint64_t allocs = stats(fx).allocs;
    pool_forget(fx->p);
    checked(fx->p);
    pool_stats s = stats(fx);
    assert_int_equal(s.reserved, 0);
    assert_int_equal(s.allocated, 0);
    assert_int_equal(s.segments, 0);
    assert_int_equal(s.allocs, allocs); /* counters go on */
    assert_int_equal(fx->sim.releases, 0); /* the reset freed it, not us */
    assert_int_equal(pool_free(fx->p, a), -ENOENT);
    xalloc(fx, 4 * KIB); /* and the pool serves again */
    assert_int_equal(stats(fx).segments, 1);
    /* The backend still counts the forgotten segments: drop them there
     * too, as the device reset did, before fx_close checks the books. */
    fx->sim.used = 2 * MIB;
}

static void test_owns_and_segment_of(void **state)
{
    fixture *fx = *state;
    fx_open(fx, 0, NULL);
    uintptr_t a = xalloc(fx, 8 * KIB);
    xalloc(fx, 512);
    uintptr_t base;
    size_t size;
    assert_true(pool_owns(fx->p, a + 100));
    assert_false(pool_owns(fx->p, a - 1));
    assert_int_equal(pool_segment_of(fx->p, a + 4096, &base, &size), 0);
    assert_int_equal(base, a);
    assert_int_equal(size, 2 * MIB);
    assert_int_equal(pool_segment_of(fx->p, a + MIB, &base, &size), -EALREADY);
    assert_int_equal(pool_segment_of(fx->p, 42, &base, &size), -ENOENT);
    /* The block holding an address, from any byte of it, and which
     * allocation it is: another one at the same place is another. */
    uintptr_t b = a + 8 * KIB;
    pool_span blk;
    uint64_t born, born_a, born_b;
    assert_int_equal(pool_block_of(fx->p, b + 511, &blk, &born_b), 0);
    assert_int_equal(blk.addr, b);
    assert_int_equal(blk.size, 512);
    assert_int_equal(pool_block_of(fx->p, a + 4096, &blk, &born_a), 0);
    assert_int_equal(blk.addr, a);
    assert_int_equal(blk.size, 8 * KIB);
    assert_true(born_a != born_b);
    assert_int_equal(pool_block_of(fx->p, a + MIB, &blk, &born), -EALREADY);
    assert_int_equal(pool_block_of(fx->p, 42, &blk, &born), -ENOENT);
    assert_int_equal(pool_free(fx->p, a), 0);
    uintptr_t c = xalloc(fx, 8 * KIB); /* wherever it lands (test_shim's
                                          ipc shows the same place) */
    uint64_t born_c;
    assert_int_equal(pool_block_of(fx->p, c, &blk, &born_c), 0);
    assert_true(born_c != born_a && born_c != born_b);
}

/* A placement-only pool (no fence) with the given fit policy. */
static void open_fit(fixture *fx, pool_fit fit)
{
    sim_backend_init(&fx->sim, 0, &fx->be);
    fx->be.fence = NULL;
    test_config(&fx->cfg);
    fx->cfg.fit = fit;
    assert_int_equal(pool_create(&fx->cfg, &fx->be, &fx->p), 0);
}

/* Free holes of 64, 16 and 32 KiB, in that address order. */
static const size_t fit_holes[] = {64 * KIB, 16 * KIB, 32 * KIB};

static void test_fit_best_vs_first(void **state)
{
    fixture *fx = *state;
    uintptr_t hole[3];
    open_fit(fx, POOL_FIT_BEST);
    make_holes(fx, fit_holes, 3, hole);
    assert_int_equal(xalloc(fx, 20 * KIB), hole[2]); /* the 32 KiB hole */
    fx_close(fx);

    open_fit(fx, POOL_FIT_FIRST);
    make_holes(fx, fit_holes, 3, hole);
    assert_int_equal(xalloc(fx, 20 * KIB), hole[0]); /* the lowest one */
    /* Split like best fit: the rest of the 64 KiB hole serves next. */
    assert_int_equal(xalloc(fx, 40 * KIB), hole[0] + 20 * KIB);
    assert_int_equal(xalloc(fx, 16 * KIB), hole[1]);
    assert_int_equal(stats(fx).seg_reserves, 1);
}

static void test_fit_nosplit(void **state)
{
    fixture *fx = *state;
    open_fit(fx, POOL_FIT_NOSPLIT);
    /* Each block is its own segment, of the request's rounded size. */
    uintptr_t a = xalloc(fx, 1000);
    uintptr_t b = xalloc(fx, 3 * MIB + 1);
    assert_int_equal(stats(fx).reserved, 1024 + 3 * MIB + 512);
    assert_int_equal(stats(fx).seg_reserves, 2);
    xfree(fx, b);
    /* A smaller request takes the cached block whole. */
    uintptr_t c = xalloc(fx, 2 * MIB);
    assert_int_equal(c, b);
    size_t got;
    assert_int_equal(pool_block_size(fx->p, c, &got), 0);
    assert_int_equal(got, 3 * MIB + 512);
    assert_int_equal(stats(fx).allocated, 1024 + 3 * MIB + 512);
    /* Nothing cached fits: a new exact segment. */
    xalloc(fx, 512);
    assert_int_equal(stats(fx).seg_reserves, 3);
    xfree(fx, a);
    assert_int_equal(stats(fx).free_blocks, 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        T(test_round_and_align),
        T(test_zero_bytes),
        T(test_small_and_large_do_not_mix),
        T(test_large_segments_round_to_2mib),
        T(test_best_fit),
        T(test_ties_go_to_lowest_address),
        T(test_small_split_keeps_remainder),
        T(test_large_split_only_when_useful),
        T(test_max_split),
        T(test_mid_requests_share_segments),
        T(test_mid_falls_back_to_own_size),
        T(test_mid_under_cap_leaves_no_tail),
        T(test_coalesce_both_neighbours),
        T(test_grow_when_full),
        T(test_cap_fails_cleanly),
        T(test_cap_releases_idle_then_retries),
        T(test_shared_budget),
        T(test_backend_failure_retry_and_error),
        T(test_device_capacity),
        T(test_flush),
        T(test_release_threshold),
        T(test_fence_when_only_dirty_fits),
        T(test_clean_first_defers_fence),
        T(test_fence_interval_one_is_strict),
        T(test_large_requests_keep_strict_best_fit),
        T(test_dirty_set_is_bounded),
        T(test_one_fence_covers_earlier_frees),
        T(test_dirty_merges_only_with_dirty),
        T(test_idle_segment_with_dirty_and_clean_blocks),
        T(test_fence_error),
        T(test_fence_impossible_uses_fresh_memory),
        T(test_no_fence_backend),
        T(test_bad_frees_change_nothing),
        T(test_size_overflow),
        T(test_counters_and_peaks),
        cmocka_unit_test(test_config_validation),
        cmocka_unit_test(test_destroy_releases_everything),
        T(test_owns_and_segment_of),
        T(test_forget_after_device_reset),
        T(test_fit_best_vs_first),
        T(test_fit_nosplit),
    };
    int failed = cmocka_run_group_tests_name("pool", tests, NULL, NULL);
    return failed + _cmocka_run_group_tests("pool segments", pool_segment_tests,
                                            pool_segment_count, NULL, NULL);
}
