/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test-memory.c - the cap and its report, fragmentation, bad and foreign frees,
 * device reset, one and two devices, shards, zero bytes, a flush by signal.
 */
#include "harness.h"

static void test_flush_signal(void **s) { (void)s; PASSES("flush"); }
static void test_foreign_pointer(void **s) { (void)s; PASSES("foreign"); }
static void test_device_reset(void **s) { (void)s; PASSES("reset"); }
static void test_two_devices(void **s) { (void)s; PASSES("multidev"); }
static void test_zero_bytes(void **s) { (void)s; PASSES("zero"); }

static void test_shards(void **s)
{
    (void)s;
    /* Two threads, two shards: a segment each. */
    result *r = run("shards", NULL);
    assert_int_equal(r->status, 0);
    assert_non_null(strstr(r->out, "driver segments: 2"));
    /* One pool: the second thread's block fits in the first segment. */
    r = run("shards", "CUPOOL_SHARDS=1", NULL);
    assert_int_equal(r->status, 0);
    assert_non_null(strstr(r->out, "driver segments: 1"));
    result *c = run("shards_cap", "CUPOOL_MAX_RESERVED=4M", NULL);
    assert_int_equal(c->status, 0);
    assert_non_null(strstr(c->err, "cause: the cap"));
}

/* A request far beyond the device fails; the peak of reserved memory
 * counts only what the driver gave (one 2 MiB segment). */
static void test_failed_request_not_in_peak(void **s)
{
    (void)s;
    result *r = run("bigfail", "CUPOOL_STATS_AT_EXIT=1", "CUPOOL_STATS_FORMAT=json", NULL);
    assert_int_equal(r->status, 0);
    const char *j = strstr(r->err, "{\"cupool\":1");
    assert_non_null(j);
    char cmd[8192], out[256];
    snprintf(cmd, sizeof(cmd), "python3 -c 'import json,sys; v=json.loads(sys.argv[1])"
             "[\"devices\"][0]; assert v[\"reserved_peak\"]==2**21, v; print(\"ok\")' '%.*s'",
             (int)strcspn(j, "\n"), j);
    assert_int_equal(shell(cmd, out, sizeof(out)), 0);
    assert_string_equal(out, "ok\n");
}

static void test_one_device(void **s)
{
    (void)s;
    /* One device: the shim skips cudaGetDevice; device 0 is the only one. */
    PASSES("pairs", "SIMCUDA_DEVICES=1");
    PASSES("fence", "SIMCUDA_DEVICES=1", "CUPOOL_FENCE=barrier");
    PASSES("reset", "SIMCUDA_DEVICES=1");
    PASSES("badfree", "SIMCUDA_DEVICES=1");
}

static void test_cap_and_report(void **s)
{
    (void)s;
    result *r = run("cap", "CUPOOL_MAX_RESERVED=16M", NULL);
    assert_int_equal(r->status, 0);
    assert_non_null(strstr(r->err, "cupool: out of memory on device 0: cudaMalloc(3.00 MiB) failed"));
    assert_non_null(strstr(r->err, "cap 16.00 MiB, reserved 16.00 MiB, allocated 16.00 MiB"));
    assert_non_null(strstr(r->err, "cause: the cap"));
}

/* Under a cap, cudaMemGetInfo's free is what one cudaMalloc gets (it said
 * the cap less the bytes allocated, which a request could not have while
 * a segment with a live block stays reserved). */
static void test_cap_free_is_allocatable(void **s)
{
    (void)s;
    PASSES("capinfo", "CUPOOL_MAX_RESERVED=16M");
}

static void test_cap_percent(void **s)
{
    (void)s;
    /* 1% of 1600 MiB is 16 MiB: four 4 MiB segments fit, a fifth not. */
    result *r = run("cap", "CUPOOL_MAX_RESERVED=1%", "SIMCUDA_CAPACITY=1677721600", NULL);
    assert_int_equal(r->status, 0);
    assert_non_null(strstr(r->out, "allocated 4 blocks"));
}

static void test_fragmentation_named(void **s)
{
    (void)s;
    result *r = run("frag", "CUPOOL_MAX_RESERVED=8M", NULL);
    assert_int_equal(r->status, 0);
    assert_non_null(strstr(r->err, "cause: fragmentation"));
    assert_non_null(strstr(r->err, "largest free block"));
}

static void test_bad_frees(void **s)
{
    (void)s;
    result *r = run("badfree", NULL);
    assert_int_equal(r->status, 0);
    assert_non_null(strstr(r->err, "double free"));
    assert_non_null(strstr(r->err, "inside a block"));
}

const struct CMUnitTest shim_memory_tests[] = {
    cmocka_unit_test(test_failed_request_not_in_peak),
    cmocka_unit_test(test_flush_signal),
    cmocka_unit_test(test_cap_and_report),
    cmocka_unit_test(test_cap_percent),
    cmocka_unit_test(test_cap_free_is_allocatable),
    cmocka_unit_test(test_fragmentation_named),
    cmocka_unit_test(test_bad_frees),
    cmocka_unit_test(test_foreign_pointer),
    cmocka_unit_test(test_device_reset),
    cmocka_unit_test(test_two_devices),
    cmocka_unit_test(test_one_device),
    cmocka_unit_test(test_shards),
    cmocka_unit_test(test_zero_bytes),
};
const size_t shim_memory_count = sizeof(shim_memory_tests) / sizeof(shim_memory_tests[0]);
