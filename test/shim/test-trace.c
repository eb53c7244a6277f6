/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test-trace.c - CUPOOL_TRACE: recorded threads replay exactly, signals lose
 * nothing, refused paths; `cupool replay` and `cupool plot`.
 */
#include <sys/stat.h>

#include "harness.h"

/* A trace path with a quote and a backslash still gives valid JSON, which
 * names it exactly. */
static void test_replay_json_escapes_path(void **s)
{
    (void)s;
    char dirn[96], trace[160], env[192], cmd[512], out[256];
    assert_non_null(mkdtemp(scratch_path(dirn, sizeof(dirn), "cupool-tj-XXXXXX")));
    snprintf(trace, sizeof(trace), "%s/we\"ird\\name.trace", dirn);
    snprintf(env, sizeof(env), "CUPOOL_TRACE=%s", trace);
    assert_int_equal(run("pairs", env, NULL)->status, 0);
    snprintf(cmd, sizeof(cmd), TRACER " replay --json --policy best %s/we*.trace | "
             "python3 -c 'import json,sys; d=json.loads(sys.stdin.read()); "
             "assert d[\"trace\"].endswith(\"/we\\\"ird\\\\name.trace\"), d[\"trace\"]; "
             "print(\"ok\")'", dirn);
    int st = shell(cmd, out, sizeof(out));
    assert_int_equal(remove_tree(dirn), 0);
    assert_int_equal(st, 0);
    assert_string_equal(out, "ok\n");
}

/* A request that ran out of memory when recorded and would not be served
 * here either is in the table's OOM column, as the line under it says:
 * the two tell one story. */
static void test_replay_oom_one_story(void **s)
{
    (void)s;
    char out[8192];
    assert_int_equal(shell(TRACER " replay --max-reserved 10G --policy best "
                           "test/data/transformer-oom.trace.gz", out, sizeof(out)), 0);
    unsigned long own = 0, other = 0, col = 0;
    const char *line = strstr(out, "OOM counts the other ");
    assert_non_null(line);
    assert_int_equal(sscanf(line, "OOM counts the other %lu with the %lu", &other, &own), 2);
    const char *row = strstr(out, "\nbest ");
    assert_non_null(row);
    const char *end = strchr(row + 1, '\n');
    while (end > row && end[-1] != ' ')
        end--;
    col = strtoul(end, NULL, 10);
    print_message("OOM column %lu = %lu recorded + %lu own\n", col, other, own);
    assert_true(other > 0);
    assert_int_equal(col, other + own);
}

/* plot: -o - is stdout (no file named "-"), one policy only (a second is
 * refused, not dropped), the cap's line says its value, recorded
 * out-of-memory markers share one label, an imported snapshot (no
 * process) is not titled "pid 0". */
static void test_plot_conventions(void **s)
{
    (void)s;
    static char out[1 << 20];
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "cd %s && %s/" TRACER " plot --max-reserved 10G "
             "%s/test/data/transformer-oom.trace.gz -o - 2>/dev/null", pages, getenv("PWD"),
             getenv("PWD"));
    assert_int_equal(shell(cmd, out, sizeof(out)), 0);
    assert_non_null(strstr(out, "<svg"));
    assert_non_null(strstr(out, ">cap 10.00 GiB</text>"));
    assert_non_null(strstr(out, "fill-opacity=\"0.9\"")); /* the legend's background */
    const char *first = strstr(out, "OOM (recorded)</text>");
    assert_non_null(first);
    assert_null(strstr(first + 1, "OOM (recorded)</text>"));
    snprintf(cmd, sizeof(cmd), "test -e %s/-", pages);
    assert_int_not_equal(shell(cmd, out, sizeof(out)), 0);
    assert_int_equal(shell(TRACER " plot test/data/train.trace.gz -o /dev/null --policy "
                           "best,first 2>&1", out, sizeof(out)), 2);
    assert_non_null(strstr(out, "plot draws one policy"));
    snprintf(cmd, sizeof(cmd), "CUPOOL_TRACE_BIN=" TRACER " python3 scripts/cupool-import-torch "
             "test/data/torch_snapshot.pickle.gz -o %s/snap.trace >/dev/null && " TRACER
             " plot %s/snap.trace -o - 2>/dev/null | grep -o 'font-weight=\"bold\">[^<]*'",
             pages, pages);
    assert_int_equal(shell(cmd, out, sizeof(out)), 0);
    assert_null(strstr(out, "pid 0"));
    assert_non_null(strstr(out, "device 0: memory over time"));
}

/* --trim takes a power of two of at least 512 bytes, and says so. */
static void test_replay_trim_option(void **s)
{
    (void)s;
    char out[1024];
    shell(TRACER " replay --trim 3M test/data/train.trace.gz 2>&1; echo rc=$?", out,
          sizeof(out));
    assert_non_null(strstr(out, "power of two"));
    assert_non_null(strstr(out, "rc=2"));
    /* --fence-lag takes a duration with its unit; --mid-max a size. */
    static const char *const bad[] = {"--fence-lag 5", "--fence-lag 1h", "--fence-lag -1ms",
                                      "--mid-max 2G", "--mid-max x"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char cmd[256];
        snprintf(cmd, sizeof(cmd), TRACER " replay %s test/data/train.trace.gz 2>&1; echo rc=$?",
                 bad[i]);
        shell(cmd, out, sizeof(out));
        if (!strstr(out, "rc=2") || !strstr(out, "bad "))
            fail_msg("'replay %s': %s", bad[i], out);
    }
    /* A list naming no policy is refused, not replayed under none. */
    shell(TRACER " replay --policy , test/data/train.trace.gz 2>&1; echo rc=$?", out,
          sizeof(out));
    assert_non_null(strstr(out, "names no policy"));
    assert_non_null(strstr(out, "rc=2"));
    shell(TRACER " replay --fence-lag 1.5ms --mid-max 0 --policy best test/data/train.trace.gz "
          "2>&1; echo rc=$?", out, sizeof(out));
    assert_non_null(strstr(out, "each done 1.500 ms after it began unless forced"));
    assert_non_null(strstr(out, "rc=0"));
}

/* Every event of four threads swapping blocks, each pool's ring filling
 * many times over: the replay sees exactly what the program did, every
 * free matches an allocation (a cross-thread free recorded after the reuse
 * of its block would not), no free had to be moved before a reuse (the
 * rings keep each pool's lock order; the recorder that stamped each thread's
 * records with the clock needed that repair in 4 of 50 runs), and the
 * signal flush is there. */
static void test_trace_threads(void **s)
{
    (void)s;
    char trace[96], env[128], check[512];
    close(mkstemp(scratch_path(trace, sizeof(trace), "cupool-trace-XXXXXX")));
    snprintf(env, sizeof(env), "CUPOOL_TRACE=%s", trace);
    result *r = run("tracemix", env, NULL);
    assert_int_equal(r->status, 0);
    unsigned long allocs, frees, live, bytes;
    assert_int_equal(sscanf(r->out, "allocs %lu frees %lu live %lu bytes %lu",
                            &allocs, &frees, &live, &bytes), 4);
    snprintf(check, sizeof(check),
             "assert (v[\"allocs\"], v[\"frees\"], v[\"end_live_blocks\"], "
             "v[\"end_allocated\"], v[\"unmatched_frees\"], v[\"reordered\"]) == "
             "(%lu, %lu, %lu, %lu, 0, 0), v; "
             "assert dv[\"recorded_flushes\"] == 1 and dv[\"recorded_peak_reserved\"] > 0, dv",
             allocs, frees, live, bytes);
    assert_int_equal(replay_check(trace, check), 0);
    unlink(trace);
}

/* A program killed while it allocates: with SIGTERM every record up to the
 * signal is in the file (the program's own counters say how many calls
 * returned; each thread's call in flight may be recorded, not yet counted).
 * After SIGKILL the file still reads, up to its last whole record. With
 * four threads (and so four shards, each with its ring), the final drain
 * holds off several pools' producers. A final drain that did not hold them
 * off lost a record in 4 of about 140 SIGTERMs here; test_recorder
 * runs that schedule deterministically. */
static void trace_killed(int sig, int threads)
{
    char dirn[96];
    assert_non_null(mkdtemp(scratch_path(dirn, sizeof(dirn), "cupool-tl-XXXXXX")));
    char trace[128], counter[128], e4[32], check[512];
    snprintf(trace, sizeof(trace), "%s/t.trace", dirn);
    snprintf(counter, sizeof(counter), "%s/count", dirn);
    snprintf(e4, sizeof(e4), "TL_THREADS=%d", threads);
    child c;
    traceloop_start(&c, dirn, e4);
    /* The signal once the program made 1000 allocations (up to 60 s: a
     * sanitizer build on a loaded machine makes them slowly). */
    uint64_t n[2] = {0, 0};
    for (int i = 0; i < 6000 && n[0] <= 1000; i++) {
        FILE *f = fopen(counter, "rb");
        if (f && fread(n, sizeof(n[0]), 2, f) != 2)
            n[0] = 0;
        if (f)
            fclose(f);
        if (n[0] <= 1000)
            usleep(10000);
    }
    /* SIGKILL leaves what the recorder wrote by then: wait until it wrote
     * records (beyond the 64-byte header), up to 60 s; a loaded machine
     * can make 1000 allocations before the first write. */
    struct stat st = {0};
    for (int i = 0; i < 6000 && sig == SIGKILL && (stat(trace, &st) || st.st_size <= 64 + 1024);
         i++)
        usleep(10000);
    if (sig == SIGKILL && st.st_size <= 64 + 1024)
        fail_msg("the recorder wrote no records to %s within 60 s", trace);
    kill(c.pid, sig);
    wait_bounded(&c);
    assert_int_equal(finish(&c, "traceloop", 128 + sig)->status, 128 + sig);
    FILE *f = fopen(counter, "rb");
    assert_non_null(f);
    assert_int_equal(fread(n, sizeof(n[0]), 2, f), 2);
    fclose(f);
    assert_true(n[0] > 1000);
    if (sig != SIGKILL)
        snprintf(check, sizeof(check), "assert %lu <= v[\"allocs\"] <= %lu + %d and "
                 "%lu <= v[\"frees\"] <= %lu + %d, (v, %lu, %lu)",
                 (unsigned long)n[0], (unsigned long)n[0], threads, (unsigned long)n[1],
                 (unsigned long)n[1], threads, (unsigned long)n[0], (unsigned long)n[1]);
    else
        snprintf(check, sizeof(check), "assert 0 < v[\"allocs\"] <= %lu + %d, v",
                 (unsigned long)n[0], threads);
    assert_int_equal(replay_check(trace, check), 0);
    assert_int_equal(remove_tree(dirn), 0);
}

static void test_trace_sigterm_loses_nothing(void **s)
{
    (void)s;
    trace_killed(SIGTERM, 1);
    trace_killed(SIGTERM, 4);
}

static void test_trace_sigkill_still_reads(void **s) { (void)s; trace_killed(SIGKILL, 1); }

/* Every asynchronous signal whose default action ends the process leaves
 * the trace complete up to it, as SIGTERM does (before, SIGINT lost 4,600
 * to 24,000 records). */
static void test_trace_other_signals_lose_nothing(void **s)
{
    (void)s;
    trace_killed(SIGINT, 1);
    trace_killed(SIGHUP, 4);
    trace_killed(SIGQUIT, 1);
    trace_killed(SIGALRM, 1);
}

/* A child that inherits CUPOOL_TRACE leaves the parent's file alone: the
 * trace holds every pair the parent made, and the child says why it
 * records nothing. */
static void test_trace_child_leaves_parent_file(void **s)
{
    (void)s;
    for (int shell_child = 0; shell_child < 2; shell_child++) {
        if (shell_child && runtime)
            break; /* a sanitizer runtime cannot be preloaded into sh */
        char trace[96], env[128];
        close(mkstemp(scratch_path(trace, sizeof(trace), "cupool-trace-XXXXXX")));
        snprintf(env, sizeof(env), "CUPOOL_TRACE=%s", trace);
        result *r = run("tracechild", env, shell_child ? "TC_SHELL=1" : NULL, NULL);
        assert_int_equal(r->status, 0);
        assert_non_null(strstr(r->out, "pairs 2000"));
        assert_non_null(strstr(r->err, "another process writes to it"));
        assert_int_equal(replay_check(trace, "assert v[\"allocs\"] == 2000 and "
                                      "v[\"frees\"] == 2000, v"), 0);
        unlink(trace);
    }
}

/* CUPOOL_TRACE never follows a link: refused in one line, the link's
 * target untouched. */
static void test_trace_link_refused(void **s)
{
    (void)s;
    link_refused("CUPOOL_TRACE", "pairs", NULL, "it is a symbolic link; this process "
                 "records nothing");
}

/* CUPOOL_TRACE and CUPOOL_STATS_FILE through dir/traces (a link to the
 * directory mine) are refused with expect, in one line each; mine's
 * run.trace ("keep me\n") is left as it was and no statistics file is
 * made there. */
static void link_on_path_refused(const char *dirn, const char *mine, const char *expect)
{
    char env[300], want[600], file[300];
    struct stat st;
    snprintf(env, sizeof(env), "CUPOOL_TRACE=%s/traces/run.trace", dirn);
    result *r = run("pairs", env, NULL);
    assert_int_equal(r->status, 0);
    snprintf(want, sizeof(want), "CUPOOL_TRACE file %s/traces/run.trace: %s", dirn, expect);
    if (!strstr(r->err, want))
        fail_msg("no \"%s\" in: %s", want, r->err);
    snprintf(file, sizeof(file), "%s/run.trace", mine);
    assert_int_equal(stat(file, &st), 0);
    assert_int_equal(st.st_size, 8);
    snprintf(env, sizeof(env), "CUPOOL_STATS_FILE=%s/traces/stats", dirn);
    r = run("zero", env, "CUPOOL_STATS_AT_EXIT=1", NULL);
    assert_int_equal(r->status, 0);
    snprintf(want, sizeof(want), "CUPOOL_STATS_FILE=%s/traces/stats cannot be used: %s", dirn,
             expect);
    if (!strstr(r->err, want))
        fail_msg("no \"%s\" in: %s", want, r->err);
    snprintf(file, sizeof(file), "%s/stats", mine);
    assert_int_equal(access(file, F_OK), -1);
}

/* A link in the middle of the path: another user's directory t holding
 * traces -> a directory of the user's (where fs.protected_symlinks is
 * off, CUPOOL_TRACE=t/traces/run.trace overwrote the user's own
 * run.trace). Refused, and the user's files left alone; so is a link of
 * the user's in a directory others may write in without the sticky bit
 * (another user could swap it). A link of the user's in a directory of
 * its own is followed. Another user's link: root only (it makes one). */
static void test_link_on_path_refused(void **s)
{
    (void)s;
    char base[96], mine[128], open_dir[128], other[128], l[192];
    char env[192];
    assert_non_null(mkdtemp(scratch_path(base, sizeof(base), "cupool-mid-XXXXXX")));
    snprintf(mine, sizeof(mine), "%s/home", base);
    assert_int_equal(mkdir(mine, 0700), 0);
    snprintf(l, sizeof(l), "%s/run.trace", mine);
    FILE *f = fopen(l, "w");
    assert_non_null(f);
    fputs("keep me\n", f);
    fclose(f);
    snprintf(open_dir, sizeof(open_dir), "%s/open", base);
    assert_int_equal(mkdir(open_dir, 0777), 0);
    assert_int_equal(chmod(open_dir, 0777), 0);
    snprintf(l, sizeof(l), "%s/traces", open_dir);
    assert_int_equal(symlink(mine, l), 0);
    link_on_path_refused(open_dir, mine, "a symbolic link on its path is in a directory "
                         "another user may change");
    if (geteuid() == 0) {
        snprintf(other, sizeof(other), "%s/t", base);
        assert_int_equal(mkdir(other, 0755), 0);
        snprintf(l, sizeof(l), "%s/traces", other);
        assert_int_equal(symlink(mine, l), 0);
        assert_int_equal(lchown(l, 65534, 65534), 0);
        assert_int_equal(chown(other, 65534, 65534), 0);
        link_on_path_refused(other, mine, "a symbolic link on its path belongs to another "
                             "user");
    }
    snprintf(l, sizeof(l), "%s/mine", base);
    assert_int_equal(symlink("home", l), 0);
    snprintf(env, sizeof(env), "CUPOOL_TRACE=%s/mine/ok.trace", base);
    assert_int_equal(run("pairs", env, NULL)->status, 0);
    snprintf(l, sizeof(l), "%s/ok.trace", mine);
    struct stat st;
    assert_int_equal(stat(l, &st), 0);
    assert_true(st.st_size > 64); /* the header and records */
    assert_int_equal(remove_tree(base), 0);
}

/* Recording stopped on a write error (the file may not grow): SIGTERM
 * still ends the program, with its default action. */
static void test_trace_write_error_then_sigterm(void **s)
{
    (void)s;
    char dirn[96];
    assert_non_null(mkdtemp(scratch_path(dirn, sizeof(dirn), "cupool-tw-XXXXXX")));
    child c;
    traceloop_start(&c, dirn, "FSIZE_LIMIT=1");
    traceloop_end(&c, dirn);
}

static void test_trace_bad_path(void **s)
{
    (void)s;
    result *r = run("pairs", "CUPOOL_TRACE=/nonexistent/dir/t.trace", NULL);
    assert_int_equal(r->status, 0);
    assert_non_null(strstr(r->err, "CUPOOL_TRACE file /nonexistent/dir/t.trace: No such file"));
}

const struct CMUnitTest shim_trace_tests[] = {
    cmocka_unit_test(test_trace_threads),
    cmocka_unit_test(test_trace_sigterm_loses_nothing),
    cmocka_unit_test(test_trace_sigkill_still_reads),
    cmocka_unit_test(test_trace_other_signals_lose_nothing),
    cmocka_unit_test(test_trace_child_leaves_parent_file),
    cmocka_unit_test(test_trace_link_refused),
    cmocka_unit_test(test_link_on_path_refused),
    cmocka_unit_test(test_trace_write_error_then_sigterm),
    cmocka_unit_test(test_trace_bad_path),
    cmocka_unit_test(test_replay_trim_option),
    cmocka_unit_test(test_replay_oom_one_story),
    cmocka_unit_test_setup_teardown(test_plot_conventions, pages_setup, pages_teardown),
    cmocka_unit_test(test_replay_json_escapes_path),
};
const size_t shim_trace_count = sizeof(shim_trace_tests) / sizeof(shim_trace_tests[0]);
