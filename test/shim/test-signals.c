/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test-signals.c - signals: cupool's stay its own, the program's handlers still
 * run; threads under a storm of signals.
 */
#include "harness.h"

/* ---- signals: cupool's stay its own, the program's handlers still run ---- */

static void test_signal_chaining(void **s)
{
    (void)s;
    static const char *const api[] = {"SIG_API=sigaction", "SIG_API=siginfo",
        "SIG_API=signal", "SIG_API=bsd_signal", "SIG_API=sysv_signal", "SIG_API=sigset"};
    for (size_t i = 0; i < sizeof(api) / sizeof(api[0]); i++)
        PASSES("sig_chain", api[i]);
}

static void test_signal_ignored_or_default(void **s)
{
    (void)s;
    PASSES("sig_dispositions");
    /* Ignored by the parent before exec: the program's view stays SIG_IGN
     * and the flush still happens. */
    struct sigaction ign = {.sa_handler = SIG_IGN}, old;
    sigaction(SIGUSR1, &ign, &old);
    sigaddset(&keep_ignored, SIGUSR1);
    result *r = run("sig_dispositions", "INHERITED_IGN=1", NULL);
    sigdelset(&keep_ignored, SIGUSR1);
    sigaction(SIGUSR1, &old, NULL);
    assert_int_equal(r->status, 0);
}

static void test_signal_blocked_everywhere(void **s) { (void)s; PASSES("sig_blocked"); }
static void test_signal_program_flags(void **s) { (void)s; PASSES("sig_flags"); }

static void test_forked_child_signals(void **s)
{
    (void)s;
    char dirn[96], env[160];
    assert_non_null(mkdtemp(scratch_path(dirn, sizeof(dirn), "cupool-fork-XXXXXX")));
    snprintf(env, sizeof(env), "CUPOOL_STATS_FILE=%s/s.%%p", dirn);
    result *r = run("sig_fork", env, NULL);
    assert_int_equal(remove_tree(dirn), 0);
    assert_int_equal(r->status, 0);
}

static void test_threads_and_signal_storm(void **s)
{
    (void)s;
    PASSES("threads", "CUPOOL_STATS_FILE=/dev/null");
}

const struct CMUnitTest shim_signals_tests[] = {
    cmocka_unit_test(test_signal_chaining),
    cmocka_unit_test(test_signal_ignored_or_default),
    cmocka_unit_test(test_signal_blocked_everywhere),
    cmocka_unit_test(test_signal_program_flags),
    cmocka_unit_test(test_forked_child_signals),
    cmocka_unit_test(test_threads_and_signal_storm),
};
const size_t shim_signals_count = sizeof(shim_signals_tests) / sizeof(shim_signals_tests[0]);
