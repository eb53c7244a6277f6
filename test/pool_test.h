/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pool_test.h - fixture and checked wrappers shared by the pool tests.
 * Every wrapper runs pool_check after the operation and fails the test
 * with the checker's message if an invariant broke.
 */
#ifndef CUPOOL_TEST_POOL_TEST_H
#define CUPOOL_TEST_POOL_TEST_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "pool.h"
#include "sim_backend.h"

#define KIB ((size_t)1 << 10)
#define MIB ((size_t)1 << 20)

typedef struct fixture {
    sim_backend sim;
    pool_backend be;
    pool_config cfg;
    pool *p;
} fixture;

static inline void checked(pool *p)
{
    char why[256];
    if (pool_check(p, why, sizeof(why)) != 0)
        fail_msg("pool_check: %s", why);
}

/* The defaults, but with 2 MiB small segments and a segment of its own
 * size for every large request (no mid segments): the tests' arithmetic
 * (how many blocks fill a segment, when a cap is reached) is written for
 * them. test_pool.c's mid tests use the default mid segments. */
static inline void test_config(pool_config *cfg)
{
    pool_config_default(cfg);
    cfg->small_segment = (size_t)2 << 20;
    cfg->mid_max = 0;
}

/* Creates fx->p from fx->cfg (defaults if cfg_set is 0) and fx->be. */
static inline void fx_open(fixture *fx, size_t capacity, const pool_config *cfg)
{
    sim_backend_init(&fx->sim, capacity, &fx->be);
    if (cfg)
        fx->cfg = *cfg;
    else
        test_config(&fx->cfg);
    assert_int_equal(pool_create(&fx->cfg, &fx->be, &fx->p), 0);
    checked(fx->p);
}

/* A pool whose backend has no fence: every free is clean at once, so tests
 * of placement (best fit, coalescing) see it without the fence policy. */
static inline void fx_open_nofence(fixture *fx)
{
    sim_backend_init(&fx->sim, 0, &fx->be);
    fx->be.fence = NULL;
    test_config(&fx->cfg);
    assert_int_equal(pool_create(&fx->cfg, &fx->be, &fx->p), 0);
}

static inline void fx_close(fixture *fx)
{
    pool_destroy(fx->p);
    assert_int_equal(fx->sim.bad_releases, 0);
    assert_int_equal(fx->sim.used, 0);
    sim_backend_fini(&fx->sim);
}

static inline uintptr_t xalloc(fixture *fx, size_t size)
{
    uintptr_t a = 1;
    int err = pool_alloc(fx->p, size, &a);
    if (err)
        fail_msg("pool_alloc(%zu) = %d (%s)", size, err, pool_strerror(err));
    assert_int_equal(a % POOL_ALIGN, 0);
    checked(fx->p);
    return a;
}

static inline void xfree(fixture *fx, uintptr_t a)
{
    int err = pool_free(fx->p, a);
    if (err)
        fail_msg("pool_free(%#lx) = %d (%s)", (unsigned long)a, err,
                 pool_strerror(err));
    checked(fx->p);
}

static inline pool_stats stats(fixture *fx)
{
    pool_stats s;
    pool_stats_get(fx->p, &s);
    return s;
}

/* xorshift64*: small, seeded, the same on every machine. */
static inline uint64_t rng_next(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1Dull;
}

#endif
