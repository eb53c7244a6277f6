/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test-driver.c - the driver API: programs with no dynamic runtime (drv_prog),
 * another interposer, the runtime reaching the driver through cupool.
 */
#include "harness.h"

/* ---- the driver API: programs with no dynamic runtime ----------------------- */

/* Runs drv_prog SCENARIO preloaded, expecting exit status 0. */
#define DRV_PASSES(...)                                                       \
    do {                                                                      \
        program = "drv_prog";                                                 \
        result *r_ = run(__VA_ARGS__, NULL);                                  \
        program = "rt_prog";                                                  \
        assert_int_equal(r_->status, 0);                                      \
    } while (0)

/* Served through the entry points a static runtime takes from
 * cuGetProcAddress (found with dlsym on the driver), and through the
 * driver's names linked directly. */
static void test_driver_served(void **s) { (void)s; DRV_PASSES("serve"); }
static void test_driver_linked(void **s) { (void)s; DRV_PASSES("plt"); }
/* The ABI asked for is the one given: version, per-thread stream. */
static void test_driver_versions(void **s) { (void)s; DRV_PASSES("versions"); }
/* The cap counts memory passed on (stream-ordered, cuMemCreate). */
static void test_driver_cap(void **s) { (void)s; DRV_PASSES("cap", "CUPOOL_MAX_RESERVED=8M"); }
/* An early probe for the runtime leaves nothing cached. */
static void test_driver_lazy_runtime(void **s)
{
    (void)s;
    DRV_PASSES("lazy");
    DRV_PASSES("lazy", "LAZY_LOCAL=1"); /* as Python loads it */
}
static void test_driver_streams(void **s) { (void)s; DRV_PASSES("streams"); }
static void test_driver_capture(void **s) { (void)s; DRV_PASSES("capture"); }
static void test_driver_reset(void **s) { (void)s; DRV_PASSES("reset"); }

/* Without the shim, drv_prog's serve fails: its check is what the pool
 * changes (each block is one driver allocation). */
static void test_driver_check_fails_without_pool(void **s)
{
    (void)s;
    program = "drv_prog";
    result *r = run_expecting(1, "serve", "CUPOOL_DISABLE=1", NULL);
    program = "rt_prog";
    assert_int_equal(r->status, 1);
    assert_non_null(strstr(r->out, "driver allocations for 192 blocks: 192"));
}

/* Another interposer preloaded after cupool looks up the next getpid with
 * dlsym(RTLD_NEXT): it must get glibc's, not its own (which recursed until
 * the stack ran out when cupool's dlsym resolved RTLD_NEXT from a frame of
 * its own, or hung). cupool calls getpid itself, so a whole scenario goes
 * through it. */
static void test_dlsym_next_from_another_interposer(void **s)
{
    (void)s;
    static char preload[900];
    snprintf(preload, sizeof(preload), "LD_PRELOAD=%s%s%s/libcupool.so:%s/rt/libnext.so",
             runtime ? runtime : "", runtime ? ":" : "", dir, dir);
    char prog[600];
    snprintf(prog, sizeof(prog), "%s/rt/rt_prog", dir);
    char *argv[] = {prog, "pairs", NULL};
    char *extra[] = {"CUPOOL_SMALL_SEGMENT=2M", "CUPOOL_MID_MAX=0", NULL};
    child c;
    child_spawn(&c, argv, preload, extra);
    wait_bounded(&c); /* the broken case may spin instead of crashing */
    result *r = finish(&c, "pairs", 0);
    assert_int_equal(r->status, 0);
}

/* CUPOOL_DISABLE=1 hands out the driver's own functions: the versions
 * check, which expects cupool's, fails. */
static void test_driver_disabled_hands_out_driver(void **s)
{
    (void)s;
    program = "drv_prog";
    result *r = run_expecting(1, "versions", "CUPOOL_DISABLE=1", NULL);
    program = "rt_prog";
    assert_int_equal(r->status, 1);
    assert_non_null(strstr(r->err, "driver:cuMemAlloc_v2, not cupool:cuMemAlloc_v2"));
}

/* The dynamic runtime's cudaMalloc reaches the driver through an entry
 * point cupool handed out, inside the shim: each segment is one driver
 * allocation, never a second pool entry. */
static void test_runtime_through_driver_once(void **s) { (void)s; PASSES("entrypoint"); }

/* A driver-API program is flushed from outside and recorded like any: 3
 * MiB live and 1 MiB cached after 192 pairs; cupool flush returns the idle
 * segments; the trace holds every allocation and free. */
static void test_driver_flush_and_trace(void **s)
{
    (void)s;
    char trace[160], traceenv[200], cmd[700], out[4096], check[256];
    snprintf(trace, sizeof(trace), "%s/drv.trace", pages);
    snprintf(traceenv, sizeof(traceenv), "CUPOOL_TRACE=%s", trace);
    child c;
    program = "drv_prog";
    start_ready(&c, "serve", "drv", traceenv, NULL);
    program = "rt_prog";
    snprintf(cmd, sizeof(cmd), "CUPOOL_PAGE_DIR=%s " READER " flush %d", pages, c.pid);
    assert_int_equal(shell(cmd, out, sizeof(out)), 0);
    /* Every 2 MiB segment of the churn is idle (the cached 1 MiB block is
     * in one of them); the 4 MiB segment holding the live 3 MiB is not. */
    assert_non_null(strstr(out, "returned 64.00 MiB (67108864 bytes) to the driver"));
    kill(c.pid, SIGTERM);
    result *r = finish(&c, "serve", 0);
    assert_int_equal(r->status, 0);
    assert_non_null(strstr(r->out, "driver frees: 32"));
    snprintf(check, sizeof(check),
             "assert (v[\"allocs\"], v[\"frees\"], v[\"end_live_blocks\"], "
             "v[\"unmatched_frees\"]) == (194, 193, 1, 0), v; "
             "assert dv[\"recorded_flushes\"] == 1, dv");
    assert_int_equal(replay_check(trace, check), 0);
}

const struct CMUnitTest shim_driver_tests[] = {
    cmocka_unit_test(test_driver_served),
    cmocka_unit_test(test_driver_linked),
    cmocka_unit_test(test_driver_versions),
    cmocka_unit_test(test_driver_cap),
    cmocka_unit_test(test_driver_lazy_runtime),
    cmocka_unit_test(test_driver_streams),
    cmocka_unit_test(test_driver_capture),
    cmocka_unit_test(test_driver_reset),
    cmocka_unit_test(test_driver_check_fails_without_pool),
    cmocka_unit_test(test_driver_disabled_hands_out_driver),
    cmocka_unit_test(test_dlsym_next_from_another_interposer),
    cmocka_unit_test_setup_teardown(test_driver_flush_and_trace, pages_setup,
                                    pages_teardown),
    cmocka_unit_test(test_runtime_through_driver_once),
};
const size_t shim_driver_count = sizeof(shim_driver_tests) / sizeof(shim_driver_tests[0]);
