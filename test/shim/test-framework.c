/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test-framework.c - a framework's cache (test/fw_prog.py with a stand-in torch)
 * released by a flush, and Python's own signal handlers.
 */
#include "harness.h"

/* Python's signal.signal after start-up: kill -USR1 flushes and runs the
 * program's handler once; cupool flush flushes and runs it not at all. */
static void test_python_handler(void **s)
{
    (void)s;
    if (runtime)
        skip_because(SKIP_SANITIZER_PYTHON);
    char simenv[PATH_MAX + 16], readyenv[160], ready[128];
    char direnv[128], cmd[512], out[4096];
    sim_lib_env(simenv, sizeof(simenv));
    snprintf(ready, sizeof(ready), "%s/ready-py", pages);
    snprintf(readyenv, sizeof(readyenv), "READY=%s", ready);
    snprintf(direnv, sizeof(direnv), "CUPOOL_PAGE_DIR=%s", pages);
    for (int by_signal = 0; by_signal < 2; by_signal++) {
        unlink(ready);
        char *env[] = {simenv, readyenv, direnv, "CUPOOL_SMALL_SEGMENT=2M",
                       "CUPOOL_MID_MAX=0", NULL};
        child c;
        python_start(&c, "test/sig_prog.py", NULL, env);
        wait_for_file(ready);
        if (by_signal) {
            kill(c.pid, SIGUSR1);
            assert_int_equal(wait_page(c.pid, "d[\"process\"][\"signal_flushes\"] == 1"), 0);
            usleep(100000); /* Python runs its handler between bytecodes */
        } else {
            snprintf(cmd, sizeof(cmd), "CUPOOL_PAGE_DIR=%s " READER " flush %d", pages,
                     c.pid);
            assert_int_equal(shell(cmd, out, sizeof(out)), 0);
            assert_non_null(strstr(out, "returned 24.00 MiB"));
        }
        kill(c.pid, SIGTERM);
        result *r = finish(&c, "sig_prog.py", 0);
        assert_int_equal(r->status, 0);
        assert_non_null(strstr(r->out, by_signal ? "handler calls: 1, driver holds: 0"
                                                 : "handler calls: 0, driver holds: 0"));
    }
}

/* test/fw_prog.py MODE under cupool with its page in the test's
 * directory, started and ready; extra: one more NAME=VALUE or NULL. */
static void fw_start(child *c, const char *mode, const char *extra)
{
    static char simenv[PATH_MAX + 16], readyenv[160], ready[128], direnv[128];
    sim_lib_env(simenv, sizeof(simenv));
    snprintf(ready, sizeof(ready), "%s/ready-fw-%s", pages, mode);
    unlink(ready);
    snprintf(readyenv, sizeof(readyenv), "READY=%s", ready);
    snprintf(direnv, sizeof(direnv), "CUPOOL_PAGE_DIR=%s", pages);
    char *env[] = {simenv, readyenv, direnv, "CUPOOL_SMALL_SEGMENT=2M", "CUPOOL_MID_MAX=0",
                   (char *)extra, NULL};
    python_start(c, "test/fw_prog.py", mode, env);
    wait_for_file(ready);
}

/* cupool flush of c into out; its exit status. */
static int fw_flush(child *c, char *out, size_t len)
{
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "CUPOOL_PAGE_DIR=%s " READER " flush %d", pages, c->pid);
    return shell(cmd, out, len);
}

static result *fw_end(child *c)
{
    kill(c->pid, SIGTERM);
    result *r = finish_within(c, "fw_prog.py", 0, 30, "its end after SIGTERM (its "
                              "framework's release done)");
    assert_int_equal(r->status, 0);
    return r;
}

/* A flush releases the framework's cache from cupool's own thread (never
 * the program's main thread), once per request, then cupool returns it to
 * the driver; the answer names both parts. With CUPOOL_FRAMEWORK_FLUSH=0 (the behaviour before)
 * nothing comes back: the cache is the framework's. */
static void test_framework_flush(void **s)
{
    (void)s;
    if (runtime)
        skip_because(SKIP_SANITIZER_PYTHON);
    char out[4096];
    child c;
    fw_start(&c, "torch", NULL);
    assert_int_equal(fw_flush(&c, out, sizeof(out)), 0);
    assert_non_null(strstr(out, "returned 24.00 MiB"));
    assert_non_null(strstr(out, "torch.cuda.empty_cache 18.00 MiB"));
    assert_int_equal(fw_flush(&c, out, sizeof(out)), 0);
    assert_non_null(strstr(out, "returned 0 B"));
    result *r = fw_end(&c);
    assert_non_null(strstr(r->out, "empty_cache calls: 2, in the main thread: 0, "
                                   "driver holds: 2097152")); /* its live 1 MiB */
    fw_start(&c, "torch", "CUPOOL_FRAMEWORK_FLUSH=0");
    assert_int_equal(fw_flush(&c, out, sizeof(out)), 0);
    assert_non_null(strstr(out, "returned 0 B"));
    r = fw_end(&c);
    assert_non_null(strstr(r->out, "empty_cache calls: 0"));
}

/* cupool stat shows what sits in the framework's cache before anyone
 * flushes: PyTorch's own figures, read when stat asks; a program that
 * keeps the interpreter's lock in a long call delays stat by at most
 * about a second, and then there are none to show. */
static void test_framework_view(void **s)
{
    (void)s;
    if (runtime)
        skip_because(SKIP_SANITIZER_PYTHON);
    char cmd[256], out[4096];
    child c;
    fw_start(&c, "torch", NULL);
    snprintf(cmd, sizeof(cmd), "CUPOOL_PAGE_DIR=%s " READER " stat %d", pages, c.pid);
    assert_int_equal(shell(cmd, out, sizeof(out)), 0);
    assert_non_null(strstr(out, "PyTorch dev 0: alloc 1.00M reserved 19.0M cache 18.0M "
                                "inactive 512, "));
    fw_end(&c);
    fw_start(&c, "gilheld", NULL);
    snprintf(cmd, sizeof(cmd), "CUPOOL_PAGE_DIR=%s " READER " stat %d", pages, c.pid);
    double t0 = now_s();
    assert_int_equal(shell(cmd, out, sizeof(out)), 0);
    /* No framework figures: the answer did not wait for the lock (held
     * 8 s). The time is only a bound against hanging; how fast is not
     * this test's to say on a loaded machine. */
    assert_true(now_s() - t0 < 60);
    assert_null(strstr(out, "PyTorch"));
    usleep(2500000);
    fw_end(&c);
}

/* kill -USR1 releases the framework's cache too. */
static void test_framework_flush_by_signal(void **s)
{
    (void)s;
    if (runtime)
        skip_because(SKIP_SANITIZER_PYTHON);
    child c;
    fw_start(&c, "torch", NULL);
    kill(c.pid, SIGUSR1);
    assert_int_equal(wait_page(c.pid, "d[\"process\"][\"framework_torch\"] == 18 << 20 "
                               "and d[\"process\"][\"flushed\"] == 24 << 20"), 0);
    result *r = fw_end(&c);
    assert_non_null(strstr(r->out, "empty_cache calls: 1, in the main thread: 0, "
                                   "driver holds: 2097152"));
}

/* An idle program is flushed at once, whatever its main thread waits in
 * (sleep, select, poll, a socket, a lock, an Event, a Queue, a join,
 * input(), an asyncio loop), and so is one running pure Python that never
 * sleeps (on CPython 3.9 to 3.11, a pending call from a thread that is not
 * Python's did not reach it). Before, each answer came after the 2 s
 * bound, with nothing released. */
static void test_framework_flush_idle(void **s)
{
    (void)s;
    if (runtime)
        skip_because(SKIP_SANITIZER_PYTHON);
    static const char *const modes[] = {"sleep", "select", "poll", "socket", "lock", "event",
                                        "queue", "join", "input", "asyncio", "loop"};
    char out[4096];
    for (size_t i = 0; i < sizeof(modes) / sizeof(modes[0]); i++) {
        child c;
        fw_start(&c, modes[i], NULL);
        usleep(100000); /* into its blocking call */
        double t0 = now_s();
        assert_int_equal(fw_flush(&c, out, sizeof(out)), 0);
        double took = now_s() - t0;
        print_message("main thread in %s: flushed in %.0f ms\n", modes[i], took * 1000);
        if (!strstr(out, "torch.cuda.empty_cache 18.00 MiB"))
            fail_msg("%s: %s", modes[i], out);
        assert_non_null(strstr(out, "returned 24.00 MiB"));
        assert_true(took < 60); /* the release's line above says it did not wait */
        result *r = fw_end(&c);
        assert_non_null(strstr(r->out, "empty_cache calls: 1, in the main thread: 0, "
                                       "driver holds: 2097152"));
    }
}

/* A main thread that keeps the interpreter's lock in one long C call: the
 * answer comes within the bound and says why; cupool's own cache goes at
 * once, and the framework's release runs when the call ends, said in the
 * program's log then, and counted. */
static void test_framework_flush_gil_held(void **s)
{
    (void)s;
    if (runtime)
        skip_because(SKIP_SANITIZER_PYTHON);
    char out[4096];
    child c;
    fw_start(&c, "gilheld", NULL);
    double t0 = now_s();
    assert_int_equal(fw_flush(&c, out, sizeof(out)), 0);
    double took = now_s() - t0;
    print_message("lock held in a C call: answered in %.2f s\n", took);
    assert_true(took < 60); /* "late" below says it did not wait for the lock */
    assert_non_null(strstr(out, "its framework's release is late"));
    assert_int_equal(wait_page(c.pid, "d[\"process\"][\"flushes_landed\"] == 1 and "
                               "d[\"process\"][\"framework_torch\"] == 18 << 20"), 0);
    result *r = fw_end(&c);
    assert_non_null(strstr(r->err, "the program's Python lock (GIL) is held in a long call"));
    assert_non_null(strstr(r->err, "flush (landed late): returned 24.00 MiB"));
    assert_non_null(strstr(r->out, "empty_cache calls: 1, in the main thread: 0, "
                                   "driver holds: 2097152"));
}

/* A flush asked while a thread holds a CUDA graph capture open (global
 * mode, where a free or a synchronization from another thread would
 * invalidate it) waits for the capture to end, then runs: the capture
 * ends intact and every release came after it. */
static void test_framework_flush_capture(void **s)
{
    (void)s;
    if (runtime)
        skip_because(SKIP_SANITIZER_PYTHON);
    char out[4096];
    child c;
    fw_start(&c, "capture", NULL); /* ready once the capture is open */
    assert_int_equal(fw_flush(&c, out, sizeof(out)), 0);
    assert_int_equal(wait_page(c.pid, "d[\"process\"][\"framework_torch\"] == 18 << 20"), 0);
    result *r = fw_end(&c);
    if (!strstr(r->out, "capture ended: 0, every release after it: True (1)"))
        fail_msg("the capture, then the release, said:\n%s%s", r->out, r->err);
    assert_non_null(strstr(r->out, "driver holds: 2097152"));
    assert_non_null(strstr(r->err, "18.00 MiB (after the graph capture under way)"));
}

/* A program that never imported the framework does not get it imported;
 * a forked child never runs the release. */
static void test_framework_flush_leaves_alone(void **s)
{
    (void)s;
    if (runtime)
        skip_because(SKIP_SANITIZER_PYTHON);
    char out[4096];
    child c;
    fw_start(&c, "none", NULL);
    assert_int_equal(fw_flush(&c, out, sizeof(out)), 0);
    assert_non_null(strstr(out, "returned 4.00 MiB"));
    result *r = fw_end(&c);
    assert_non_null(strstr(r->out, "torch imported: False, driver holds: 0"));
    fw_start(&c, "fork", NULL);
    assert_int_equal(fw_flush(&c, out, sizeof(out)), 0);
    assert_non_null(strstr(out, "torch.cuda.empty_cache 18.00 MiB"));
    r = fw_end(&c);
    assert_non_null(strstr(r->out, "child empty_cache calls: 0"));
    assert_non_null(strstr(r->out, "\nempty_cache calls: 1, in the main thread: 0"));
}

const struct CMUnitTest shim_framework_tests[] = {
    cmocka_unit_test_setup_teardown(test_python_handler, pages_setup, pages_teardown),
    cmocka_unit_test_setup_teardown(test_framework_flush, pages_setup, pages_teardown),
    cmocka_unit_test_setup_teardown(test_framework_flush_by_signal, pages_setup,
                                    pages_teardown),
    cmocka_unit_test_setup_teardown(test_framework_view, pages_setup, pages_teardown),
    cmocka_unit_test_setup_teardown(test_framework_flush_idle, pages_setup,
                                    pages_teardown),
    cmocka_unit_test_setup_teardown(test_framework_flush_gil_held, pages_setup,
                                    pages_teardown),
    cmocka_unit_test_setup_teardown(test_framework_flush_capture, pages_setup,
                                    pages_teardown),
    cmocka_unit_test_setup_teardown(test_framework_flush_leaves_alone, pages_setup,
                                    pages_teardown),
};
const size_t shim_framework_count = sizeof(shim_framework_tests) / sizeof(shim_framework_tests[0]);
