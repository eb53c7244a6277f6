/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test-cupti.c - CUPOOL_CUPTI: fences after work was submitted, and CUPTI given
 * up to a program that subscribes.
 */
#include "harness.h"

/* CUPOOL_CUPTI: fences that reach CUDA only after work was submitted; and
 * without CUPTI, a message and every fence, as without the option. */
static void test_cupti(void **s)
{
    (void)s;
    const char *lib = sim_cupti();
    result *r = run("cupti", NULL);
    assert_int_equal(r->status, 0);
    assert_non_null(strstr(r->out, "quiet pairs: 50 fences; busy pairs: 50 fences"));
    r = run("cupti", "CUPOOL_CUPTI=1", lib, NULL);
    assert_int_equal(r->status, 0);
    /* The first quiet reuse fences (nothing did yet); so does each busy one
     * but the first, which follows a quiet pair. */
    assert_non_null(strstr(r->out, "quiet pairs: 1 fences; busy pairs: 49 fences"));
    r = run("cupti", "CUPOOL_CUPTI=1", "CUPOOL_FENCE=sync", lib, NULL);
    assert_int_equal(r->status, 0);
    assert_non_null(strstr(r->out, "quiet pairs: 1 fences; busy pairs: 49 fences"));
    r = run("cupti", "CUPOOL_CUPTI=1", lib, "SIMCUDA_CUPTI_TAKEN=1", NULL);
    assert_int_equal(r->status, 0);
    assert_non_null(strstr(r->out, "quiet pairs: 50 fences; busy pairs: 50 fences"));
    assert_non_null(strstr(r->err, "CUPTI refused a subscriber "
                                   "(CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED): "
                                   "a profiler or another tool holds it"));
    r = run("cupti", "CUPOOL_CUPTI=1", "CUPOOL_CUPTI_LIB=/nonexistent/libcupti.so", NULL);
    assert_int_equal(r->status, 0);
    assert_non_null(strstr(r->out, "quiet pairs: 50 fences; busy pairs: 50 fences"));
    assert_non_null(strstr(r->err, "cannot load CUPTI (tried /nonexistent/libcupti.so)"));
    /* auto (the default) waits for an NCCL call: none here, no CUPTI. */
    r = run("cupti", lib, "CUPOOL_LOG=info", NULL);
    assert_int_equal(r->status, 0);
    assert_non_null(strstr(r->out, "quiet pairs: 50 fences; busy pairs: 50 fences"));
    assert_null(strstr(r->err, "watching GPU work"));
    /* Missing under auto: said only at info; every fence, as without it. */
    r = run("cupti_yield", "CUPTI_NCCL=1", "CUPOOL_CUPTI_LIB=/nonexistent/libcupti.so", NULL);
    assert_int_equal(r->status, 0);
    assert_non_null(strstr(r->out, "quiet before: 20 fences"));
    assert_null(strstr(r->err, "cannot load CUPTI"));
}

/* The program (a profiler) subscribes to CUPTI while cupool holds it: it
 * gets it, through the linker's name and through a handle, and cupool
 * fences every reuse from then on (20 quiet pairs, 20 fences); under auto
 * only once an NCCL call started it. */
static void test_cupti_given_to_the_program(void **s)
{
    (void)s;
    const char *lib = sim_cupti();
    const char *held = "quiet before: 1 fences; after: busy 20, quiet 20 fences";
    result *r = run("cupti_yield", "CUPOOL_CUPTI=1", lib, "CUPOOL_LOG=info",
                    "CUPOOL_STATS_AT_EXIT=1", "CUPOOL_STATS_FORMAT=json", NULL);
    assert_int_equal(r->status, 0);
    assert_non_null(strstr(r->out, held));
    assert_non_null(strstr(r->err, "the program asked for CUPTI (a profiler): cupool let it go"));
    assert_non_null(strstr(r->err, "\"cupti_starts\":1,\"cupti_handovers\":1"));
    r = run("cupti_yield", "CUPOOL_CUPTI=1", lib, "CUPTI_BY_HANDLE=1", NULL);
    assert_int_equal(r->status, 0);
    assert_non_null(strstr(r->out, held));
    /* auto: from the 8th fence after the first NCCL call; not before. */
    r = run("cupti_yield", lib, "CUPTI_NCCL=8", "CUPOOL_LOG=info", NULL);
    assert_int_equal(r->status, 0);
    assert_non_null(strstr(r->out, "after the NCCL call: 8 fences"));
    assert_non_null(strstr(r->out, held));
    assert_non_null(strstr(r->err, "fences came often after the program's first NCCL call"));
    /* One short: the first quiet reuse's fence is the 8th, and the next
     * fences too (the one before it was issued unwatched). */
    r = run("cupti_yield", lib, "CUPTI_NCCL=7", NULL);
    assert_int_equal(r->status, 0);
    assert_non_null(strstr(r->out, "quiet before: 2 fences; after: busy 20, quiet 20 fences"));
    r = run("cupti_yield", lib, "CUPOOL_LOG=info", "CUPOOL_STATS_AT_EXIT=1",
            "CUPOOL_STATS_FORMAT=json", NULL);
    assert_int_equal(r->status, 0);
    assert_non_null(strstr(r->out, "quiet before: 20 fences; after: busy 20, quiet 20 fences"));
    assert_null(strstr(r->err, "let it go"));
    assert_non_null(strstr(r->err, "\"cupti_starts\":0,\"cupti_handovers\":0"));
    /* The program took CUPTI before the NCCL call: cupool leaves it be. */
    r = run("cupti_yield", lib, "CUPTI_FIRST=1", "CUPTI_NCCL=8", "CUPOOL_LOG=info", NULL);
    assert_int_equal(r->status, 0);
    assert_non_null(strstr(r->out, "quiet before: 20 fences; after: busy 20, quiet 20 fences"));
    assert_non_null(strstr(r->err, "the program holds CUPTI (a profiler); fencing as without it"));
    /* From another thread, while reuses go on (TSan: the handover). */
    PASSES("cupti_yield_threads", "CUPOOL_CUPTI=1", lib);
}

const struct CMUnitTest shim_cupti_tests[] = {
    cmocka_unit_test(test_cupti),
    cmocka_unit_test(test_cupti_given_to_the_program),
};
const size_t shim_cupti_count = sizeof(shim_cupti_tests) / sizeof(shim_cupti_tests[0]);
