/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test-fence.c - fences: exactly on reuse, under barrier, sync and poll, NCCL's
 * streams, destroyed and shared streams, graph captures.
 */
#include "harness.h"

static void test_pairs_hit_the_cache(void **s) { (void)s; PASSES("pairs"); }
static void test_fence_barrier(void **s) { (void)s; PASSES("fence", "CUPOOL_FENCE=barrier"); }
static void test_fence_sync(void **s) { (void)s; PASSES("fence_sync", "CUPOOL_FENCE=sync"); }
static void test_fence_poll(void **s) { (void)s; PASSES("fence_poll", "CUPOOL_FENCE=poll"); }

static void test_fence_destroyed(void **s)
{
    (void)s;
    PASSES("fence_destroyed", "CUPOOL_FENCE=poll");
    PASSES("fence_destroyed", "CUPOOL_FENCE=barrier");
    PASSES("fence_destroyed", "CUPOOL_FENCE=sync");
}

static void test_fence_comm(void **s)
{
    (void)s;
    PASSES("fence_comm", "CUPOOL_FENCE=poll", "CUPOOL_CUPTI=1", sim_cupti());
    /* auto: from the 8th fence after NCCL's first call */
    PASSES("fence_comm", "CUPOOL_FENCE=poll", sim_cupti(), "WARM_FENCES=8");
    /* CUPTI starting inside an NCCL group whose collective came before */
    PASSES("comm_straddle", "CUPOOL_FENCE=poll", sim_cupti());
    PASSES("fence_idle", "CUPOOL_FENCE=poll", "CUPOOL_CUPTI=1", sim_cupti());
    PASSES("fence_idle", "CUPOOL_FENCE=poll", "CUPOOL_CUPTI=1", sim_cupti(),
           "FENCE_IDLE_HANDOVER=1");
    /* A CUPTI that keeps reporting stream waits once hung (a stream paying,
     * its wait inside the callback of another call, took comm.c's lock
     * again): quiet calls, stream waits among them, no longer reach
     * comm.c wherever CUPTI reports them (cupti.c's quiet table). */
    /* A reset forgets the device's streams (a marked one stayed in the
     * next fence). */
    PASSES("fence_reset", "CUPOOL_FENCE=poll", "CUPOOL_CUPTI=1", sim_cupti());
}
/* Threads fencing one device at once share fences (fence.c's
 * combined_locked): with each record taking 200 us, at least ten of 396
 * fences asked for never reach CUDA. */
static void test_fence_shared(void **s)
{
    (void)s;
    PASSES("fence_share", "SIMCUDA_RECORD_US=200", "CUPOOL_FENCE_INTERVAL=1");
    PASSES("fence_share", "SIMCUDA_RECORD_US=200", "CUPOOL_FENCE_INTERVAL=1",
           "CUPOOL_FENCE=barrier");
}

static void test_fence_poll_cap(void **s)
{
    (void)s;
    PASSES("fence_poll_cap", "CUPOOL_FENCE=poll", "CUPOOL_MAX_RESERVED=2M");
}
static void test_capture_defers_fence(void **s) { (void)s; PASSES("capture"); }

/* Graph capture modes: cudaMalloc and cudaFree answer, from the capturing
 * thread and from others, exactly what CUDA alone answers (the simulated
 * runtime applies CUDA's rule), and a forbidden call says why in one line.
 * Before this, a cached block was handed out during a global capture and
 * freed during a thread-local one: the lines differed. */
static void test_capture_modes_as_cuda(void **s)
{
    (void)s;
    result *r = run("capture_modes", "CUPOOL_DISABLE=1", NULL);
    assert_int_equal(r->status, 0);
    static char alone[sizeof(((result *)0)->out)];
    snprintf(alone, sizeof(alone), "%s", r->out);
    assert_non_null(strstr(alone, "global: other-global 900 other-relaxed 0 own-malloc 900"));
    r = run("capture_modes", NULL);
    assert_int_equal(r->status, 0);
    assert_string_equal(r->out, alone);
    assert_non_null(strstr(r->err, "cudaFree during a graph capture that forbids it"));
    assert_non_null(strstr(r->err, "run them without --torch"));
}

const struct CMUnitTest shim_fence_tests[] = {
    cmocka_unit_test(test_pairs_hit_the_cache),
    cmocka_unit_test(test_fence_barrier),
    cmocka_unit_test(test_fence_sync),
    cmocka_unit_test(test_fence_poll),
    cmocka_unit_test(test_fence_comm),
    cmocka_unit_test(test_fence_destroyed),
    cmocka_unit_test(test_fence_shared),
    cmocka_unit_test(test_fence_poll_cap),
    cmocka_unit_test(test_capture_defers_fence),
    cmocka_unit_test(test_capture_modes_as_cuda),
};
const size_t shim_fence_count = sizeof(shim_fence_tests) / sizeof(shim_fence_tests[0]);
