/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_addrmap.c - pool/addrmap.h against a plain array of what it should
 * hold: block addresses (512-aligned) and small handles (consecutive
 * integers), inserted, looked up, taken and dropped in bulk at random.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <cmocka.h>

#include "addrmap.h"

enum { KEYS = 4096 };

typedef struct model {
    uintptr_t key[KEYS];
    bool in[KEYS];
    int val[KEYS];
} model;

static uint64_t rng = 88172645463325252ull;

static uint64_t next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

/* Drops entries whose value is odd. */
static bool odd(uintptr_t key, void *val, void *seen)
{
    (void)key;
    (*(size_t *)seen)++;
    return *(int *)val % 2;
}

static void agree(const pool_addrmap *m, const model *w)
{
    size_t n = 0;
    for (size_t i = 0; i < KEYS; i++) {
        int *v = pool_addrmap_get(m, w->key[i]);
        if (w->in[i]) {
            assert_ptr_equal(v, &w->val[i]);
            n++;
        } else {
            assert_null(v);
        }
    }
    assert_int_equal(m->count, n);
}

static void walk(uintptr_t (*key_of)(size_t i))
{
    static model w;
    pool_addrmap m;
    assert_int_equal(pool_addrmap_init(&m), 0);
    for (size_t i = 0; i < KEYS; i++) {
        w.key[i] = key_of(i);
        w.in[i] = false;
        w.val[i] = (int)(next() % 1000);
    }
    for (int round = 0; round < 40; round++) {
        for (int op = 0; op < 4000; op++) {
            size_t i = next() % KEYS;
            if (w.in[i]) {
                assert_ptr_equal(pool_addrmap_take(&m, w.key[i]), &w.val[i]);
                w.in[i] = false;
            } else {
                assert_int_equal(pool_addrmap_reserve(&m), 0);
                pool_addrmap_put(&m, w.key[i], &w.val[i]);
                w.in[i] = true;
            }
        }
        agree(&m, &w);
        /* Every few rounds, drop the odd values in bulk: each entry asked
         * at least once, none missed, no even one lost. */
        if (round % 4 == 3) {
            size_t before = m.count, odd_in = 0, seen = 0;
            for (size_t i = 0; i < KEYS; i++)
                odd_in += w.in[i] && w.val[i] % 2;
            assert_int_equal(pool_addrmap_drop_if(&m, odd, &seen), odd_in);
            assert_true(seen >= before);
            for (size_t i = 0; i < KEYS; i++)
                if (w.val[i] % 2)
                    w.in[i] = false;
            agree(&m, &w);
            for (size_t i = 0; i < KEYS; i++) /* new values for the next drop */
                if (!w.in[i])
                    w.val[i] = (int)(next() % 1000);
        }
    }
    assert_null(pool_addrmap_take(&m, 0));
    pool_addrmap_clear(&m);
    assert_int_equal(m.count, 0);
    assert_null(pool_addrmap_get(&m, w.key[0]));
    pool_addrmap_fini(&m);
}

/* A map of zeroes is empty, and grows at its first reserve. */
static void test_zero_map(void **s)
{
    (void)s;
    pool_addrmap m = {0};
    int v = 1;
    assert_null(pool_addrmap_get(&m, 512));
    assert_null(pool_addrmap_take(&m, 512));
    pool_addrmap_clear(&m);
    assert_int_equal(pool_addrmap_reserve(&m), 0);
    pool_addrmap_put(&m, 512, &v);
    assert_ptr_equal(pool_addrmap_get(&m, 512), &v);
    pool_addrmap_fini(&m);
}

static uintptr_t address(size_t i) { return (uintptr_t)0x7f0000000000ull + i * 512 * 3; }
static uintptr_t handle(size_t i) { return i + 1; }

static void test_addresses(void **s) { (void)s; walk(address); }
static void test_handles(void **s) { (void)s; walk(handle); }

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_addresses),
        cmocka_unit_test(test_handles),
        cmocka_unit_test(test_zero_map),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
