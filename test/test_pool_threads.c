/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_pool_threads.c - eight threads allocate and free on one pool while a
 * ninth flushes, reads statistics and runs pool_check. Threads only count
 * errors; the main thread asserts (cmocka's asserts belong to it). Built with
 * ThreadSanitizer; the pool's lock is what keeps it race-free. At the end
 * every block has been freed exactly once and the counters add up. Then
 * eight pools on one shared budget, which the bytes they hold never pass
 * (a budget that checks and then adds, not at once, lets two threads pass
 * it together: this test fails on it).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "pool_test.h"

enum { THREADS = 8, OPS = 12000, LIVE = 256 };

typedef struct worker {
    pool *p;
    uint64_t rng;
    size_t min, span; /* request sizes: min + [0, span) */
    int most;         /* blocks live at once, at most LIVE */
    unsigned long allocs, frees, errors, refused;
} worker;

static atomic_int running;

/* Allocates and frees at random, then frees what is left. A refusal by
 * the cap (-EDQUOT) is counted apart from errors. */
static void *work(void *arg)
{
    worker *w = arg;
    uintptr_t live[LIVE];
    int n = 0;
    for (int op = 0; op < OPS; op++) {
        if (n < w->most && (n == 0 || rng_next(&w->rng) % 2)) {
            size_t size = w->min + rng_next(&w->rng) % w->span;
            int err = pool_alloc(w->p, size, &live[n]);
            if (!err) {
                n++;
                w->allocs++;
            } else {
                w->refused += err == -EDQUOT;
                w->errors += err != -EDQUOT;
            }
        } else {
            int i = (int)(rng_next(&w->rng) % (uint64_t)n);
            w->errors += pool_free(w->p, live[i]) != 0;
            live[i] = live[--n];
            w->frees++;
        }
    }
    while (n) {
        w->errors += pool_free(w->p, live[--n]) != 0;
        w->frees++;
    }
    atomic_fetch_sub(&running, 1);
    return NULL;
}

/* Waits for n workers and sums their counts into *sum. */
static void join_all(const pthread_t *t, const worker *w, int n, worker *sum)
{
    *sum = (worker){0};
    for (int i = 0; i < n; i++) {
        pthread_join(t[i], NULL);
        sum->allocs += w[i].allocs;
        sum->frees += w[i].frees;
        sum->errors += w[i].errors;
        sum->refused += w[i].refused;
    }
}

static void *meddle(void *arg)
{
    pool *p = arg;
    long bad = 0;
    while (atomic_load(&running) > 0) {
        pool_flush(p);
        pool_stats s;
        pool_stats_get(p, &s);
        bad += pool_check(p, NULL, 0) != 0;
    }
    return (void *)bad;
}

static void test_threads_share_a_pool(void **state)
{
    (void)state;
    fixture fx;
    fx_open(&fx, 0, NULL);
    worker w[THREADS];
    pthread_t t[THREADS], m;
    atomic_store(&running, THREADS);
    for (int i = 0; i < THREADS; i++) {
        w[i] = (worker){.p = fx.p, .rng = 0x7a11 + (uint64_t)i, .min = 1,
                        .span = 3 * MIB, .most = LIVE};
        assert_int_equal(pthread_create(&t[i], NULL, work, &w[i]), 0);
    }
    assert_int_equal(pthread_create(&m, NULL, meddle, fx.p), 0);
    worker sum;
    join_all(t, w, THREADS, &sum);
    unsigned long allocs = sum.allocs, frees = sum.frees;
    void *bad_checks;
    pthread_join(m, &bad_checks);
    assert_int_equal(sum.errors, 0);
    assert_null(bad_checks);
    checked(fx.p);
    pool_stats s = stats(&fx);
    assert_int_equal(s.allocs, allocs);
    assert_int_equal(s.frees, frees);
    assert_int_equal(allocs, frees);
    assert_int_equal(s.allocated, 0);
    assert_int_equal(s.fences, fx.sim.fences);
    fx_close(&fx);
}

/* Eight pools, one per thread, on one budget (as the shim's shards share
 * their device's cap): a backend wrapper counts the bytes all of them hold
 * from their devices at each instant, which must never pass the limit, and
 * at the end the budget holds exactly what the pools reserve, then
 * nothing. */
enum { BUDGET_MIB = 48 };

typedef struct counted {
    pool_backend inner;
    sim_backend sim;
} counted;

static _Atomic uint64_t held, held_max;

static int counted_reserve(void *ctx, size_t size, uintptr_t *base)
{
    counted *c = ctx;
    int err = c->inner.reserve(c->inner.ctx, size, base);
    if (!err) {
        uint64_t now = atomic_fetch_add(&held, size) + size;
        uint64_t max = atomic_load(&held_max);
        while (now > max && !atomic_compare_exchange_weak(&held_max, &max, now))
            ;
    }
    return err;
}

static void counted_release(void *ctx, uintptr_t base, size_t size)
{
    counted *c = ctx;
    atomic_fetch_sub(&held, size);
    c->inner.release(c->inner.ctx, base, size);
}

static void test_threads_share_a_budget(void **state)
{
    (void)state;
    static counted c[THREADS];
    pool_budget b = {0};
    pool_budget_set_limit(&b, BUDGET_MIB * MIB);
    pool_config cfg;
    test_config(&cfg);
    cfg.budget = &b;
    cfg.release_threshold = 0; /* segments come and go: the budget churns */
    pool *p[THREADS];
    worker w[THREADS];
    pthread_t t[THREADS];
    atomic_store(&held, 0);
    atomic_store(&held_max, 0);
    atomic_store(&running, THREADS);
    for (int i = 0; i < THREADS; i++) {
        sim_backend_init(&c[i].sim, 0, &c[i].inner);
        pool_backend be = {.reserve = counted_reserve, .release = counted_release,
                           .ctx = &c[i]}; /* no fence: blocks are reused at once */
        assert_int_equal(pool_create(&cfg, &be, &p[i]), 0);
        w[i] = (worker){.p = p[i], .rng = 0xb0d6e7 + (uint64_t)i, .min = MIB,
                        .span = 6 * MIB, .most = 8};
    }
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&t[i], NULL, work, &w[i]), 0);
    worker sum;
    join_all(t, w, THREADS, &sum);
    assert_int_equal(sum.errors, 0);
    assert_true(sum.allocs > THREADS * OPS / 8);
    assert_true(sum.refused > 0); /* the threads did run into the limit */
    assert_true(atomic_load(&held_max) <= BUDGET_MIB * MIB);
    uint64_t reserved = 0;
    for (int i = 0; i < THREADS; i++) {
        checked(p[i]);
        pool_stats st;
        pool_stats_get(p[i], &st);
        reserved += st.reserved;
    }
    assert_int_equal(atomic_load(&b.used), reserved);
    assert_int_equal(atomic_load(&held), reserved);
    for (int i = 0; i < THREADS; i++) {
        pool_destroy(p[i]);
        assert_int_equal(c[i].sim.bad_releases, 0);
        sim_backend_fini(&c[i].sim);
    }
    assert_int_equal(atomic_load(&b.used), 0);
}

/* pool_hold: calls wait while it is held; a second holder gives up after
 * its timeout; pool_let_go lets the waiting call through. */
typedef struct held_call {
    pool *p;
    atomic_int done;
    int err;
} held_call;

static void *alloc_one(void *arg)
{
    held_call *c = arg;
    uintptr_t a;
    c->err = pool_alloc(c->p, 4096, &a);
    if (!c->err)
        c->err = pool_free(c->p, a);
    atomic_store(&c->done, 1);
    return NULL;
}

static void *hold_briefly(void *arg)
{
    pool *p = arg;
    if (!pool_hold(p, 20))
        return (void *)0;
    pool_let_go(p);
    return (void *)1;
}

static void test_hold(void **state)
{
    (void)state;
    fixture fx;
    fx_open(&fx, 0, NULL);
    assert_true(pool_hold(fx.p, 20));
    held_call c = {.p = fx.p};
    pthread_t t, h;
    assert_int_equal(pthread_create(&t, NULL, alloc_one, &c), 0);
    assert_int_equal(pthread_create(&h, NULL, hold_briefly, fx.p), 0);
    void *got;
    pthread_join(h, &got);
    assert_ptr_equal(got, (void *)0); /* timed out */
    struct timespec ms50 = {0, 50 * 1000000L};
    nanosleep(&ms50, NULL);
    assert_int_equal(atomic_load(&c.done), 0); /* still waiting */
    pool_let_go(fx.p);
    pthread_join(t, NULL);
    assert_int_equal(atomic_load(&c.done), 1);
    assert_int_equal(c.err, 0);
    assert_int_equal(pthread_create(&h, NULL, hold_briefly, fx.p), 0);
    pthread_join(h, &got);
    assert_ptr_equal(got, (void *)1);
    checked(fx.p);
    fx_close(&fx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_threads_share_a_pool),
        cmocka_unit_test(test_threads_share_a_budget),
        cmocka_unit_test(test_hold),
    };
    return cmocka_run_group_tests_name("pool_threads", tests, NULL, NULL);
}
