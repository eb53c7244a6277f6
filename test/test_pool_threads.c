/*
 * test_pool_threads.c - eight threads allocate and free on one pool while a
 * ninth flushes, reads statistics and runs pool_check. Threads only count
 * errors; the main thread asserts (cmocka's asserts belong to it). Built with
 * ThreadSanitizer; the pool's lock is what keeps it race-free. At the end
 * every block has been freed exactly once and the counters add up.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "pool_test.h"

enum { THREADS = 8, OPS = 20000, LIVE = 256 };

typedef struct worker {
    pool *p;
    uint64_t rng;
    unsigned long allocs, frees, errors;
} worker;

static atomic_int running;

static void *work(void *arg)
{
    worker *w = arg;
    uintptr_t live[LIVE];
    int n = 0;
    for (int op = 0; op < OPS; op++) {
        if (n < LIVE && (n == 0 || rng_next(&w->rng) % 2)) {
            size_t size = 1 + rng_next(&w->rng) % (3 * MIB);
            if (pool_alloc(w->p, size, &live[n]) == 0) {
                n++;
                w->allocs++;
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
        w[i] = (worker){.p = fx.p, .rng = 0x7a11 + (uint64_t)i};
        assert_int_equal(pthread_create(&t[i], NULL, work, &w[i]), 0);
    }
    assert_int_equal(pthread_create(&m, NULL, meddle, fx.p), 0);
    unsigned long allocs = 0, frees = 0, errors = 0;
    for (int i = 0; i < THREADS; i++) {
        pthread_join(t[i], NULL);
        allocs += w[i].allocs;
        frees += w[i].frees;
        errors += w[i].errors;
    }
    void *bad_checks;
    pthread_join(m, &bad_checks);
    assert_int_equal(errors, 0);
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
        cmocka_unit_test(test_hold),
    };
    return cmocka_run_group_tests_name("pool_threads", tests, NULL, NULL);
}
