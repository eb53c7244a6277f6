/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_owner.c - the owner hints (shim/device/owner.c): whole granules name their
 * pool, a granule two pools' segments share names none, a range given back
 * loses its hints (only to its own owner), and threads setting, clearing
 * and reading hints of their own segments at once never see another's.
 * Built with ThreadSanitizer.
 */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "owner.h"

#define MIB ((uintptr_t)1 << 20)
#define BASE ((uintptr_t)0x7f0000000000) /* a 2 MiB multiple, below 2^47 */

static int hint(uintptr_t addr, int *dev, int *shard)
{
    *dev = *shard = -1;
    return shim_owner_hint(addr, dev, shard);
}

static void test_whole_granules(void **state)
{
    (void)state;
    int d, s;
    shim_owner_set(BASE, 8 * MIB, 1, 3);
    assert_int_equal(hint(BASE, &d, &s), 0);
    assert_true(d == 1 && s == 3);
    assert_int_equal(hint(BASE + 8 * MIB - 1, &d, &s), 0);
    assert_true(d == 1 && s == 3);
    assert_int_equal(hint(BASE + 8 * MIB, &d, &s), -ENOENT);
    shim_owner_clear(BASE, 8 * MIB, 1, 2); /* not its owner: nothing */
    assert_int_equal(hint(BASE + 4 * MIB, &d, &s), 0);
    shim_owner_clear(BASE, 8 * MIB, 1, 3);
    assert_int_equal(hint(BASE + 4 * MIB, &d, &s), -ENOENT);
}

static void test_shared_granule(void **state)
{
    (void)state;
    int d, s;
    uintptr_t b = BASE + 64 * MIB;
    shim_owner_set(b, 3 * MIB, 0, 0);          /* [0, 3) MiB */
    shim_owner_set(b + 3 * MIB, 3 * MIB, 0, 1); /* [3, 6) MiB */
    assert_int_equal(hint(b + MIB, &d, &s), 0);
    assert_true(d == 0 && s == 0);
    assert_int_equal(hint(b + 5 * MIB, &d, &s), 0);
    assert_true(d == 0 && s == 1);
    /* The granule [2, 4) MiB holds both: no hint, for either address. */
    assert_int_equal(hint(b + 2 * MIB, &d, &s), -ENOENT);
    assert_int_equal(hint(b + 3 * MIB, &d, &s), -ENOENT);
    shim_owner_clear(b, 3 * MIB, 0, 0);
    assert_int_equal(hint(b + MIB, &d, &s), -ENOENT);
    assert_int_equal(hint(b + 5 * MIB, &d, &s), 0);
    /* One pool's two segments sharing a granule keep its hint. */
    uintptr_t c = BASE + 128 * MIB;
    shim_owner_set(c, 3 * MIB, 2, 5);
    shim_owner_set(c + 3 * MIB, MIB, 2, 5);
    assert_int_equal(hint(c + 3 * MIB, &d, &s), 0);
    assert_true(d == 2 && s == 5);
}

static void test_outside_the_map(void **state)
{
    (void)state;
    int d, s;
    uintptr_t high = (uintptr_t)1 << 47;
    shim_owner_set(high, 4 * MIB, 0, 0);
    assert_int_equal(hint(high, &d, &s), -ENOENT);
    shim_owner_set(high - 2 * MIB, 4 * MIB, 0, 0); /* straddles the end */
    assert_int_equal(hint(high - MIB, &d, &s), -ENOENT);
    shim_owner_set(0, 0, 0, 0);
    assert_int_equal(hint(0, &d, &s), -ENOENT);
}

enum { THREADS = 8, ROUNDS = 2000 };

static void *churn(void *arg)
{
    int t = (int)(intptr_t)arg;
    /* 5 MiB each, back to back: a granule at each end is shared with the
     * neighbour's segment, the inner ones are each thread's own. */
    uintptr_t b = BASE + (uintptr_t)(256 + 5 * t) * MIB;
    long wrong = 0;
    for (int r = 0; r < ROUNDS; r++) {
        shim_owner_set(b, 5 * MIB, t % 4, t);
        int d, s;
        if (shim_owner_hint(b + MIB, &d, &s) != 0 || d != t % 4 || s != t)
            wrong++;
        shim_owner_clear(b, 5 * MIB, t % 4, t);
    }
    return (void *)(intptr_t)wrong;
}

static void test_threads(void **state)
{
    (void)state;
    pthread_t th[THREADS];
    for (int t = 0; t < THREADS; t++)
        assert_int_equal(pthread_create(&th[t], NULL, churn, (void *)(intptr_t)t), 0);
    long wrong = 0;
    for (int t = 0; t < THREADS; t++) {
        void *r;
        pthread_join(th[t], &r);
        wrong += (long)(intptr_t)r;
    }
    assert_int_equal(wrong, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_whole_granules),
        cmocka_unit_test(test_shared_granule),
        cmocka_unit_test(test_outside_the_map),
        cmocka_unit_test(test_threads),
    };
    return cmocka_run_group_tests_name("owner", tests, NULL, NULL);
}
