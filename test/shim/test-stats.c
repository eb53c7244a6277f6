/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test-stats.c - statistics: the signals, the file at exit, the live page read
 * and flushed from outside, planted and stale pages, `cupool top`.
 */
#include "harness.h"

/* A statistics file that becomes a FIFO after start-up never blocks the
 * helper: the dump goes to stderr, and SIGTERM still ends a traced
 * program. */
static void test_stats_file_fifo(void **s)
{
    (void)s;
    char dirn[96];
    assert_non_null(mkdtemp(scratch_path(dirn, sizeof(dirn), "cupool-ff-XXXXXX")));
    char e4[192], fifo[128];
    snprintf(fifo, sizeof(fifo), "%s/stats", dirn);
    snprintf(e4, sizeof(e4), "CUPOOL_STATS_FILE=%s", fifo);
    child c;
    traceloop_start(&c, dirn, e4);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    kill(c.pid, SIGUSR2);
    /* The dump, once cupool's thread got to it (up to 60 s), then SIGTERM. */
    static char err[1 << 16];
    const char *says = "it is not a regular file (a device, FIFO or socket); writing to stderr";
    for (int i = 0; i < 6000 && (slurp(c.err, err, sizeof(err)), !strstr(err, says)); i++)
        usleep(10000);
    result *r = traceloop_end(&c, dirn);
    if (!strstr(r->err, says))
        fail_msg("no \"%s\" within 60 s of SIGUSR2:\n%s", says, r->err);
}

static void test_stats_signal(void **s)
{
    (void)s;
    char path[96];
    assert_non_null(mkdtemp(scratch_path(path, sizeof(path), "cupool-stats-XXXXXX")));
    char env[600], check[1200];
    snprintf(env, sizeof(env), "CUPOOL_STATS_FILE=%s/s.%%p", path);
    result *r = run("stats", env, "CUPOOL_STATS_FORMAT=json", NULL);
    assert_int_equal(r->status, 0);
    /* A real JSON parser reads the line and the figures match the program:
     * 1000 B and 3 MiB live, rounded to 1024 B and 4 MiB. */
    snprintf(check, sizeof(check),
             "python3 -c 'import glob,json; f=glob.glob(\"%s/s.*\"); "
             "assert len(f)==1, f; d=json.loads(open(f[0]).readline()); "
             "v=d[\"devices\"][0]; assert v[\"requested\"]==1000+3*2**20, v; "
             "assert v[\"allocated\"]==1024+4*2**20, v; "
             "assert v[\"allocs\"]==2 and v[\"segments\"]==2, v; "
             "assert d[\"pid\"]==d[\"process\"][\"pid\"]' && rm -r %s",
             path, path);
    assert_int_equal(system(check), 0);
}

static void test_stats_signal_table(void **s)
{
    (void)s;
    char path[96];
    assert_non_null(mkdtemp(scratch_path(path, sizeof(path), "cupool-stats-XXXXXX")));
    char env[600], cmd[700], out[8192];
    snprintf(env, sizeof(env), "CUPOOL_STATS_FILE=%s/s.%%p", path);
    assert_int_equal(run("stats", env, NULL)->status, 0);
    snprintf(cmd, sizeof(cmd), "cat %s/s.*; rm -r %s", path, path);
    assert_int_equal(shell(cmd, out, sizeof(out)), 0);
    /* The human table, then every field. */
    assert_non_null(strstr(out, " ALLOC RESERV"));
    assert_non_null(strstr(out, " 4.00M ")); /* 1024 B + 4 MiB allocated */
    assert_non_null(strstr(out, "device 0  requested"));
    assert_non_null(strstr(out, "process   foreign_frees"));
}

static void test_stats_at_exit(void **s)
{
    (void)s;
    result *r = run("zero", "CUPOOL_STATS_AT_EXIT=1", "CUPOOL_STATS_FORMAT=json", NULL);
    assert_int_equal(r->status, 0);
    assert_non_null(strstr(r->err, "{\"cupool\":1,\"version\":\""));
}

/* The path of pid's page in the test's page directory (the plain name). */
static void page_of(int pid, char *buf, size_t len)
{
    snprintf(buf, len, "%s/cupool-%u/%lu-%d", pages, (unsigned)geteuid(), pid_ns_ino(), pid);
}

/* cupool stat and flush from outside a running program. */
static void test_stat_and_flush_from_outside(void **s)
{
    (void)s;
    char cmd[512], out[8192];
    child c;
    serve_start(&c, "1", NULL, NULL);
    /* The numbers match what the program did: 1000 B and 3 MiB live
     * (1024 B and 4 MiB rounded), segments of 2, 4 and 6 MiB. */
    snprintf(cmd, sizeof(cmd), "CUPOOL_PAGE_DIR=%s " READER " stat --json %d | "
             "python3 -c 'import json,sys; d=json.loads(sys.stdin.read()); "
             "v=d[\"devices\"][0]; M=2**20; "
             "assert v[\"requested\"]==1000+3*M and v[\"allocated\"]==1024+4*M, v; "
             "assert v[\"reserved\"]==12*M and v[\"segments\"]==3, v; "
             "assert v[\"cached\"]==12*M-1024-4*M and v[\"largest_free\"]==6*M, v; "
             "print(\"ok\")'", pages, c.pid);
    assert_int_equal(shell(cmd, out, sizeof(out)), 0);
    assert_string_equal(out, "ok\n");
    snprintf(cmd, sizeof(cmd), "CUPOOL_PAGE_DIR=%s " READER " stat", pages);
    assert_int_equal(shell(cmd, out, sizeof(out)), 0);
    char pid[16];
    snprintf(pid, sizeof(pid), "%d ", c.pid);
    assert_non_null(strstr(out, pid));
    assert_non_null(strstr(out, "rt_prog"));
    snprintf(cmd, sizeof(cmd), "CUPOOL_PAGE_DIR=%s " READER " flush %d", pages, c.pid);
    assert_int_equal(shell(cmd, out, sizeof(out)), 0);
    assert_non_null(strstr(out, "returned 6.00 MiB (6291456 bytes) to the driver"));
    kill(c.pid, SIGTERM);
    result *r = finish(&c, "serve", 0);
    assert_int_equal(r->status, 0);
    assert_non_null(strstr(r->out, "driver frees: 1")); /* the simulated driver saw it */
    /* The page went away with the program. */
    page_of(c.pid, cmd, sizeof(cmd));
    assert_int_equal(access(cmd, F_OK), -1);
    snprintf(cmd, sizeof(cmd), "ls %s/cupool-%u | grep -c .", pages, (unsigned)geteuid());
    shell(cmd, out, sizeof(out));
    assert_string_equal(out, "0\n");
}

/* A program with its own SIGUSR1 handler: cupool flush sends no signal
 * (its handler is not called), kill -USR1 flushes and calls it once;
 * cupool dump writes the statistics where CUPOOL_STATS_FILE says. */
static void test_flush_without_signal(void **s)
{
    (void)s;
    char cmd[768], out[8192], stats[160], statsenv[200];
    snprintf(stats, sizeof(stats), "%s/dump.%%p", pages);
    snprintf(statsenv, sizeof(statsenv), "CUPOOL_STATS_FILE=%s", stats);
    child c;
    serve_start(&c, "own", "OWN_HANDLER=1", statsenv);
    snprintf(cmd, sizeof(cmd), "CUPOOL_PAGE_DIR=%s " READER " flush %d", pages, c.pid);
    assert_int_equal(shell(cmd, out, sizeof(out)), 0);
    assert_non_null(strstr(out, "returned 6.00 MiB (6291456 bytes) to the driver"));
    snprintf(cmd, sizeof(cmd), "CUPOOL_PAGE_DIR=%s " READER " dump %d", pages, c.pid);
    assert_int_equal(shell(cmd, out, sizeof(out)), 0);
    assert_non_null(strstr(out, "statistics written"));
    snprintf(cmd, sizeof(cmd), "grep -Ec '^process +requested_(flushes|dumps) +1$' "
             "%s/dump.%d", pages, c.pid);
    assert_int_equal(shell(cmd, out, sizeof(out)), 0);
    assert_string_equal(out, "2\n");
    kill(c.pid, SIGUSR1);
    assert_int_equal(wait_page(c.pid, "(d[\"process\"][\"requested_flushes\"], "
                               "d[\"process\"][\"signal_flushes\"], "
                               "d[\"process\"][\"requested_dumps\"]) == (1, 1, 1)"), 0);
    kill(c.pid, SIGTERM);
    result *r = finish(&c, "serve", 0);
    assert_int_equal(r->status, 0);
    assert_non_null(strstr(r->out, "own handler calls: 1")); /* kill -USR1 only */
}

/* Copies pid's live page to a file named for victim, its pid field (at
 * offset 16) and start time (24) rewritten: a page that claims victim. */
static void plant_copy(int pid, int victim, const char *name)
{
    char from[256], buf[1 << 16];
    page_of(pid, from, sizeof(from));
    int in = open(from, O_RDONLY);
    assert_true(in >= 0);
    ssize_t n = read(in, buf, sizeof(buf));
    close(in);
    assert_true(n > 32);
    int32_t v = victim;
    memcpy(buf + 16, &v, sizeof(v));
    memset(buf + 24, 0, 8);
    int fd = open(name, O_WRONLY | O_CREAT | O_EXCL, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, buf, (size_t)n), n);
    close(fd);
}

/* Pages nobody may trust: a copy claiming another process, the same owned
 * by another user, and a FIFO, each named like that process's page. Each
 * is refused: cupool flush signals nothing (the victim lives on), stat
 * neither hangs nor lists it. */
static void test_planted_pages_refused(void **s)
{
    (void)s;
    char cmd[512], out[8192], name[256];
    child c;
    serve_start(&c, "p", NULL, NULL);
    pid_t victim = fork();
    if (victim == 0) {
        execl("/bin/sleep", "sleep", "30", (char *)NULL);
        _exit(127);
    }
    page_of(victim, name, sizeof(name));
    plant_copy(c.pid, victim, name);
    snprintf(cmd, sizeof(cmd), "CUPOOL_PAGE_DIR=%s timeout 10 " READER " flush %d 2>&1",
             pages, victim);
    assert_int_equal(shell(cmd, out, sizeof(out)), 1);
    assert_non_null(strstr(out, "stale page"));
    usleep(100000);
    assert_int_equal(waitpid(victim, NULL, WNOHANG), 0); /* alive */
    unlink(name);
    if (geteuid() == 0) { /* root can make a file of another user */
        plant_copy(c.pid, victim, name);
        assert_int_equal(chown(name, 65534, 65534), 0);
        assert_int_equal(shell(cmd, out, sizeof(out)), 1);
        assert_non_null(strstr(out, "no trustworthy page"));
        unlink(name);
    }
    assert_int_equal(mkfifo(name, 0600), 0);
    snprintf(cmd, sizeof(cmd), "CUPOOL_PAGE_DIR=%s timeout 10 " READER " stat 2>&1",
             pages);
    assert_int_equal(shell(cmd, out, sizeof(out)), 0);
    snprintf(name, sizeof(name), "%d ", victim);
    assert_null(strstr(out, name));
    snprintf(name, sizeof(name), "%d ", c.pid);
    assert_non_null(strstr(out, name));
    kill(victim, SIGKILL);
    waitpid(victim, NULL, 0);
    kill(c.pid, SIGTERM);
    assert_int_equal(finish(&c, "serve", 0)->status, 0);
}

/* After exec the same pid runs another program: its old page is stale,
 * and cupool flush does nothing to it. */
static void test_exec_makes_page_stale(void **s)
{
    (void)s;
    char cmd[512], out[8192];
    child c;
    start_ready(&c, "execsleep", "exec", NULL, NULL);
    snprintf(cmd, sizeof(cmd), "CUPOOL_PAGE_DIR=%s " READER " flush %d 2>&1", pages, c.pid);
    assert_int_equal(shell(cmd, out, sizeof(out)), 1);
    assert_non_null(strstr(out, "exec'd"));
    assert_int_equal(waitpid(c.pid, NULL, WNOHANG), 0); /* sleep runs on */
    kill(c.pid, SIGKILL);
    finish(&c, "execsleep", 128 + SIGKILL);
}

static void test_killed_process_page_is_cleaned(void **s)
{
    (void)s;
    char cmd[512], out[8192];
    child c;
    serve_start(&c, "killed", NULL, NULL);
    kill(c.pid, SIGKILL);
    assert_int_equal(finish(&c, "serve", 128 + SIGKILL)->status, 128 + SIGKILL);
    page_of(c.pid, cmd, sizeof(cmd));
    assert_int_equal(access(cmd, F_OK), 0); /* left behind */
    snprintf(cmd, sizeof(cmd), "CUPOOL_PAGE_DIR=%s " READER " stat %d", pages, c.pid);
    assert_int_equal(shell(cmd, out, sizeof(out)), 1); /* named: an error */
    snprintf(cmd, sizeof(cmd), "CUPOOL_PAGE_DIR=%s " READER " stat 2>&1", pages);
    assert_int_equal(shell(cmd, out, sizeof(out)), 0);
    assert_non_null(strstr(out, "removed 1 stale page of exited processes"));
    page_of(c.pid, cmd, sizeof(cmd));
    assert_int_equal(access(cmd, F_OK), -1);
}

/* cupool top: a line per device with the processes' totals and the cap;
 * on a terminal, q quits, and a table longer than the terminal is cut
 * (the title and the largest stay in sight) saying how much more there is. */
static void test_top_on_a_terminal(void **s)
{
    (void)s;
    child a, b;
    serve_start(&a, "topa", "CUPOOL_MAX_RESERVED=1G", NULL);
    serve_start(&b, "topb", "CUPOOL_MAX_RESERVED=1G", NULL);
    char cmd[2048], out[8192];
    snprintf(cmd, sizeof(cmd), "CUPOOL_PAGE_DIR=%s " READER " top --count 1", pages);
    assert_int_equal(shell(cmd, out, sizeof(out)), 0);
    assert_non_null(strstr(out, "\ndev 0: 2 processes, reserved 24.00 MiB"));
    assert_non_null(strstr(out, "cap 1.00 GiB\n"));
    snprintf(cmd, sizeof(cmd), "CUPOOL_PAGE_DIR=%s python3 -c '\n"
             "import fcntl, os, pty, struct, sys, termios, time\n"
             "pid, fd = pty.fork()\n"
             "if pid == 0:\n"
             "    os.execv(sys.argv[1], [sys.argv[1], \"top\", \"--interval\", \"0.2\"])\n"
             "fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack(\"HHHH\", 5, 80, 0, 0))\n"
             "seen = b\"\"\n"
             "end = time.time() + 3\n"
             "while time.time() < end and b\"more line\" not in seen:\n"
             "    try: seen += os.read(fd, 4096)\n"
             "    except OSError: break\n"
             "os.write(fd, b\"q\")\n"
             "t0 = time.time()\n"
             "while time.time() - t0 < 3 and os.waitpid(pid, os.WNOHANG) == (0, 0):\n"
             "    time.sleep(0.01)\n"
             "gone = time.time() - t0 < 3\n"
             "print(\"quit\" if gone else \"still running\", b\"q quits\" in seen, "
             "b\"more line\" in seen)\n' %s", pages, READER);
    assert_int_equal(shell(cmd, out, sizeof(out)), 0);
    print_message("top on a 5-row terminal: %s", out);
    assert_string_equal(out, "quit True True\n");
    kill(a.pid, SIGTERM);
    kill(b.pid, SIGTERM);
    finish(&a, "serve", 0);
    finish(&b, "serve", 0);
}

/* docs/STATS.md is what the field list says, every field documented:
 * regenerate it with build/cupool-stat fields > docs/STATS.md. */
static void test_stats_fields_documented(void **s)
{
    (void)s;
    char out[256];
    int st = shell(READER " fields | cmp - docs/STATS.md 2>&1", out, sizeof(out));
    if (st != 0)
        fail_msg("docs/STATS.md differs from the field list (build/cupool-stat fields > "
                 "docs/STATS.md): %s", out);
}

/* cupool top and flush refuse intervals and counts they cannot honour
 * (1e19 seconds spun at 100% CPU; inf slept for ever), in one line, exit 2. */
static void test_reader_bad_numbers(void **s)
{
    (void)s;
    static const char *const bad[] = {"top --interval 1e19", "top --interval inf",
        "top --interval nan", "top --interval -1", "top --interval abc",
        "top --count abc", "top --count 0", "flush --timeout inf 1", "dump --timeout -1 1",
        "top --interval"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char cmd[256], out[512];
        snprintf(cmd, sizeof(cmd), "timeout 10 " READER " %s 2>&1", bad[i]);
        int st = shell(cmd, out, sizeof(out));
        if (st != 2 || strchr(out, '\n') != out + strlen(out) - 1)
            fail_msg("'%s' exited %d: %s", bad[i], st, out);
    }
}

const struct CMUnitTest shim_stats_tests[] = {
    cmocka_unit_test(test_stats_file_fifo),
    cmocka_unit_test(test_stats_signal),
    cmocka_unit_test(test_stats_signal_table),
    cmocka_unit_test(test_stats_at_exit),
    cmocka_unit_test_setup_teardown(test_stat_and_flush_from_outside,
                                    pages_setup, pages_teardown),
    cmocka_unit_test_setup_teardown(test_killed_process_page_is_cleaned,
                                    pages_setup, pages_teardown),
    cmocka_unit_test_setup_teardown(test_flush_without_signal,
                                    pages_setup, pages_teardown),
    cmocka_unit_test_setup_teardown(test_planted_pages_refused,
                                    pages_setup, pages_teardown),
    cmocka_unit_test_setup_teardown(test_exec_makes_page_stale,
                                    pages_setup, pages_teardown),
    cmocka_unit_test(test_reader_bad_numbers),
    cmocka_unit_test(test_stats_fields_documented),
    cmocka_unit_test_setup_teardown(test_top_on_a_terminal, pages_setup, pages_teardown),
};
const size_t shim_stats_count = sizeof(shim_stats_tests) / sizeof(shim_stats_tests[0]);
