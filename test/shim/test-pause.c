/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test-pause.c - `cupool pause` and `cupool resume` of one process.
 */
#include "harness.h"

/* A process under cupool pauses after its caches are flushed, its page
 * says so (and what it needs back), and it resumes; a second pause, a
 * resume of a running process, a bad process id: clear errors, no call. */
static void test_pause_and_resume(void **s)
{
    (void)s;
    child c;
    serve_start(&c, "pause", NULL, NULL);
    char args[64], out[2048], calls[512], cmd[512];
    snprintf(args, sizeof(args), "pause %d", c.pid);
    int st = pause_run(args, NULL, out, sizeof(out), calls, sizeof(calls));
    print_message("%s%s\n", out, calls);
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, "flushed"));
    assert_non_null(strstr(out, "which it needs back to resume"));
    assert_int_equal(pause_state(c.pid), 2);
    snprintf(cmd, sizeof(cmd), "CUPOOL_PAGE_DIR=%s " READER " stat %d", pages, c.pid);
    assert_int_equal(shell(cmd, out, sizeof(out)), 0);
    assert_non_null(strstr(out, "paused (cupool pause) since"));
    st = pause_run(args, NULL, out, sizeof(out), calls, sizeof(calls));
    assert_int_equal(st, 1);
    assert_non_null(strstr(out, "already"));
    assert_null(strstr(calls, "lock")); /* refused before any call */
    snprintf(args, sizeof(args), "resume %d", c.pid);
    assert_int_equal(pause_run(args, NULL, out, sizeof(out), calls, sizeof(calls)), 0);
    assert_non_null(strstr(out, "resumed"));
    assert_int_equal(pause_state(c.pid), 0);
    snprintf(cmd, sizeof(cmd), "CUPOOL_PAGE_DIR=%s " READER " stat %d", pages, c.pid);
    assert_int_equal(shell(cmd, out, sizeof(out)), 0);
    assert_null(strstr(out, "paused"));
    assert_int_equal(pause_run(args, NULL, out, sizeof(out), calls, sizeof(calls)), 1);
    assert_non_null(strstr(out, "not paused"));
    assert_int_equal(pause_run("pause 999999999", NULL, out, sizeof(out), calls,
                               sizeof(calls)), 2);
    kill(c.pid, SIGTERM);
    assert_int_equal(finish(&c, "serve", 0)->status, 0);
    assert_int_equal(pause_run("pause 4000000", NULL, out, sizeof(out), calls, sizeof(calls)),
                     1);
    assert_non_null(strstr(out, "no process 4000000"));
}

/* Every failure leaves the process running or says how it is left: a
 * failed lock touches nothing, a failed checkpoint is unlocked (and if
 * that fails too, says it is locked and resume unlocks it, which then
 * does), a failed restore stays paused and a second resume restores. */
static void test_pause_failures(void **s)
{
    (void)s;
    child c;
    serve_start(&c, "pausefail", NULL, NULL);
    char args[64], out[2048], calls[512];
    static const struct { const char *fail; int state; const char *says; } cases[] = {
        {"lock", 0, "runs on, untouched"},
        {"checkpoint", 0, "unlocked, it runs on"},
        {"checkpoint,unlock", 1, "left locked: cupool resume tries to unlock it"},
        {"checkpoint=failed", 3, "the driver left it failed"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        snprintf(args, sizeof(args), "pause %d", c.pid);
        int st = pause_run(args, cases[i].fail, out, sizeof(out), calls, sizeof(calls));
        if (st != 1 || pause_state(c.pid) != cases[i].state || !strstr(out, cases[i].says))
            fail_msg("pause failing %s: exit %d, state %d: %s%s", cases[i].fail, st,
                     pause_state(c.pid), out, calls);
        if (cases[i].state == 1) { /* resume unlocks it */
            snprintf(args, sizeof(args), "resume %d", c.pid);
            assert_int_equal(pause_run(args, NULL, out, sizeof(out), calls, sizeof(calls)), 0);
        }
        char reset[256];
        snprintf(reset, sizeof(reset), "rm -f %s/ckpt/%d", pages, c.pid);
        assert_int_equal(shell(reset, out, sizeof(out)), 0);
    }
    snprintf(args, sizeof(args), "pause %d", c.pid);
    assert_int_equal(pause_run(args, NULL, out, sizeof(out), calls, sizeof(calls)), 0);
    snprintf(args, sizeof(args), "resume %d", c.pid);
    assert_int_equal(pause_run(args, "restore", out, sizeof(out), calls, sizeof(calls)), 1);
    assert_non_null(strstr(out, "stays paused"));
    assert_int_equal(pause_state(c.pid), 2);
    assert_int_equal(pause_run(args, "unlock", out, sizeof(out), calls, sizeof(calls)), 1);
    assert_non_null(strstr(out, "restored, locked"));
    assert_int_equal(pause_state(c.pid), 1);
    assert_int_equal(pause_run(args, NULL, out, sizeof(out), calls, sizeof(calls)), 0);
    /* A restore that leaves the process failed says so, not "paused". */
    snprintf(args, sizeof(args), "pause %d", c.pid);
    assert_int_equal(pause_run(args, NULL, out, sizeof(out), calls, sizeof(calls)), 0);
    snprintf(args, sizeof(args), "resume %d", c.pid);
    assert_int_equal(pause_run(args, "restore=failed", out, sizeof(out), calls,
                               sizeof(calls)), 1);
    assert_non_null(strstr(out, "the driver left it failed"));
    assert_int_equal(pause_state(c.pid), 3);
    char reset[256];
    snprintf(reset, sizeof(reset), "echo 1 > %s/ckpt/%d", pages, c.pid); /* locked again */
    assert_int_equal(shell(reset, out, sizeof(out)), 0);
    assert_int_equal(pause_state(c.pid), 1);
    assert_int_equal(pause_run(args, NULL, out, sizeof(out), calls, sizeof(calls)), 0);
    assert_int_equal(pause_state(c.pid), 0);
    kill(c.pid, SIGTERM);
    assert_int_equal(finish(&c, "serve", 0)->status, 0);
}

/* A single-rank NCCL program is paused as a job of one (its communicator
 * suspended first) and resumed; one not under cupool is paused without a
 * flush, and told its caches move. */
static void test_pause_refusals(void **s)
{
    (void)s;
    child c;
    start_ready(&c, "serve", "nccl", "SERVE_NCCL=1", NULL);
    char args[64], out[2048], calls[512];
    snprintf(args, sizeof(args), "pause %d", c.pid);
    assert_int_equal(pause_run(args, NULL, out, sizeof(out), calls, sizeof(calls)), 0);
    assert_non_null(strstr(out, "paused the NCCL job"));
    assert_int_equal(pause_state(c.pid), 2);
    snprintf(args, sizeof(args), "resume %d", c.pid);
    assert_int_equal(pause_run(args, NULL, out, sizeof(out), calls, sizeof(calls)), 0);
    assert_int_equal(pause_state(c.pid), 0);
    kill(c.pid, SIGTERM);
    assert_int_equal(finish(&c, "serve", 0)->status, 0);
    pid_t plain = fork();
    if (plain == 0) {
        execlp("sleep", "sleep", "20", (char *)NULL);
        _exit(127);
    }
    snprintf(args, sizeof(args), "pause %d", (int)plain);
    assert_int_equal(pause_run(args, NULL, out, sizeof(out), calls, sizeof(calls)), 0);
    assert_non_null(strstr(out, "not under cupool"));
    assert_non_null(strstr(out, "its caches too"));
    snprintf(args, sizeof(args), "resume %d", (int)plain);
    assert_int_equal(pause_run(args, NULL, out, sizeof(out), calls, sizeof(calls)), 0);
    kill(plain, SIGKILL);
    waitpid(plain, NULL, 0);
}

const struct CMUnitTest shim_pause_tests[] = {
    cmocka_unit_test_setup_teardown(test_pause_and_resume, pages_setup, pages_teardown),
    cmocka_unit_test_setup_teardown(test_pause_failures, pages_setup, pages_teardown),
    cmocka_unit_test_setup_teardown(test_pause_refusals, pages_setup, pages_teardown),
};
const size_t shim_pause_count = sizeof(shim_pause_tests) / sizeof(shim_pause_tests[0]);
