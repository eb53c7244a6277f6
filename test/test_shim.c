/*
 * test_shim.c - runs test/rt_prog scenarios as child processes with
 * LD_PRELOAD=build/libcupool.so over the simulated runtime, each with the
 * environment it needs, and checks exit status and what cupool printed.
 * Also checks that libcupool.so exports exactly the interposed symbols.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <spawn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>

#include "real.h"

extern char **environ;

/* The build variant under test (build, build/asan or build/tsan) and the
 * sanitizer runtime that must be preloaded ahead of it, if any. */
static const char *dir = "build";
static const char *runtime;

typedef struct result {
    int status;          /* exit code, or 128 + signal */
    char out[1 << 16];
    char err[1 << 16];
} result;

static void slurp(const char *path, char *buf, size_t len)
{
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    size_t n = fread(buf, 1, len - 1, f);
    buf[n] = '\0';
    fclose(f);
}

/* Runs rt_prog SCENARIO preloaded, with extra NAME=VALUE strings (NULL
 * terminated) added to the environment. */
static result *run(const char *scenario, ...)
{
    static result r;
    char *env[256];
    int n = 0;
    for (char **e = environ; *e && n < 200; e++)
        if (strncmp(*e, "CUPOOL_", 7) && strncmp(*e, "LD_PRELOAD=", 11))
            env[n++] = *e;
    static char preload[600];
    snprintf(preload, sizeof(preload), "LD_PRELOAD=%s%s%s/libcupool.so",
             runtime ? runtime : "", runtime ? ":" : "", dir);
    env[n++] = preload;
    va_list ap;
    va_start(ap, scenario);
    for (char *x; (x = va_arg(ap, char *)) && n < 254;)
        env[n++] = x;
    va_end(ap);
    env[n] = NULL;
    char out[] = "/tmp/cupool-test-outXXXXXX", err[] = "/tmp/cupool-test-errXXXXXX";
    int fo = mkstemp(out), fe = mkstemp(err);
    assert_true(fo >= 0 && fe >= 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fo, 1);
    posix_spawn_file_actions_adddup2(&fa, fe, 2);
    char prog[600];
    snprintf(prog, sizeof(prog), "%s/rt/rt_prog", dir);
    char *argv[] = {prog, (char *)scenario, NULL};
    pid_t pid;
    assert_int_equal(posix_spawn(&pid, argv[0], &fa, NULL, argv, env), 0);
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    close(fo);
    close(fe);
    slurp(out, r.out, sizeof(r.out));
    slurp(err, r.err, sizeof(r.err));
    unlink(out);
    unlink(err);
    posix_spawn_file_actions_destroy(&fa);
    if (r.status)
        print_message("%s exited %d\n--- stdout\n%s--- stderr\n%.4000s\n",
                      scenario, r.status, r.out, r.err);
    return &r;
}

#define PASSES(...) assert_int_equal(run(__VA_ARGS__, NULL)->status, 0)

static void test_pairs_hit_the_cache(void **s) { (void)s; PASSES("pairs"); }
static void test_fence_barrier(void **s) { (void)s; PASSES("fence"); }
static void test_fence_sync(void **s) { (void)s; PASSES("fence_sync", "CUPOOL_FENCE=sync"); }
static void test_capture_defers_fence(void **s) { (void)s; PASSES("capture"); }
static void test_flush_signal(void **s) { (void)s; PASSES("flush"); }
static void test_foreign_pointer(void **s) { (void)s; PASSES("foreign"); }
static void test_device_reset(void **s) { (void)s; PASSES("reset"); }
static void test_two_devices(void **s) { (void)s; PASSES("multidev"); }
static void test_zero_bytes(void **s) { (void)s; PASSES("zero"); }
static void test_ipc_handles(void **s) { (void)s; PASSES("ipc"); }

static void test_cap_and_report(void **s)
{
    (void)s;
    result *r = run("cap", "CUPOOL_MAX_RESERVED=16M", NULL);
    assert_int_equal(r->status, 0);
    assert_non_null(strstr(r->err, "cupool: out of memory on device 0: cudaMalloc(3.00 MiB) failed"));
    assert_non_null(strstr(r->err, "cap 16.00 MiB, reserved 16.00 MiB, allocated 16.00 MiB"));
    assert_non_null(strstr(r->err, "cause: the cap"));
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

static void test_stats_signal(void **s)
{
    (void)s;
    char path[] = "/tmp/cupool-stats-XXXXXX";
    assert_non_null(mkdtemp(path));
    char env[600], check[1200];
    snprintf(env, sizeof(env), "CUPOOL_STATS_FILE=%s/s.%%p", path);
    result *r = run("stats", env, NULL);
    assert_int_equal(r->status, 0);
    /* A real JSON parser reads the line and the figures match the program:
     * 1000 B and 3 MiB live, rounded to 1024 B and 4 MiB. */
    snprintf(check, sizeof(check),
             "python3 -c 'import glob,json; f=glob.glob(\"%s/s.*\"); "
             "assert len(f)==1, f; d=json.loads(open(f[0]).readline()); "
             "v=d[\"devices\"][0]; assert v[\"requested\"]==1000+3*2**20, v; "
             "assert v[\"allocated\"]==1024+4*2**20, v; "
             "assert v[\"allocs\"]==2 and v[\"segments\"]==2, v' && rm -r %s",
             path, path);
    assert_int_equal(system(check), 0);
}

static void test_bad_config_keeps_default(void **s)
{
    (void)s;
    result *r = run("pairs", "CUPOOL_FENCE=bogus", "CUPOOL_MAX_RESERVED=lots", NULL);
    assert_int_equal(r->status, 0);
    assert_non_null(strstr(r->err, "cupool: CUPOOL_FENCE=bogus is invalid "
                                   "(expected barrier, sync or none); using barrier\n"));
    assert_non_null(strstr(r->err, "cupool: CUPOOL_MAX_RESERVED=lots is invalid"));
}

static void test_disable_passes_through(void **s)
{
    (void)s;
    /* With the pool off, every pair reaches the driver: the scenario's own
     * check (a handful of driver calls) must fail. */
    result *r = run("pairs", "CUPOOL_DISABLE=1", NULL);
    assert_int_equal(r->status, 1);
    assert_non_null(strstr(r->out, "driver mallocs for 10000 pairs: 10000"));
}

static void test_threads_and_signal_storm(void **s)
{
    (void)s;
    PASSES("threads", "CUPOOL_STATS_FILE=/dev/null");
}

static int by_name(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static void test_exports_match_allowlist(void **s)
{
    (void)s;
    const char *want[] = {
#define X_NAME(ret, name, params) #name,
        SHIM_INTERPOSED(X_NAME)
#undef X_NAME
    };
    size_t nwant = sizeof(want) / sizeof(want[0]);
    qsort(want, nwant, sizeof(want[0]), by_name);
    char cmd[700];
    snprintf(cmd, sizeof(cmd), "nm -D --defined-only %s/libcupool.so | "
             "awk '{print $3}' | sort", dir);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    char line[256];
    size_t i = 0;
    while (fgets(line, sizeof(line), p)) {
        line[strcspn(line, "\n")] = '\0';
        if (i >= nwant || strcmp(line, want[i]))
            fail_msg("unexpected export %s", line);
        i++;
    }
    assert_int_equal(pclose(p), 0);
    assert_int_equal(i, nwant);
}

int main(int argc, char **argv)
{
    if (argc > 1)
        dir = argv[1];
    if (argc > 2)
        runtime = argv[2];
    printf("variant: %s\n", dir);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exports_match_allowlist),
        cmocka_unit_test(test_pairs_hit_the_cache),
        cmocka_unit_test(test_fence_barrier),
        cmocka_unit_test(test_fence_sync),
        cmocka_unit_test(test_capture_defers_fence),
        cmocka_unit_test(test_flush_signal),
        cmocka_unit_test(test_stats_signal),
        cmocka_unit_test(test_cap_and_report),
        cmocka_unit_test(test_cap_percent),
        cmocka_unit_test(test_fragmentation_named),
        cmocka_unit_test(test_bad_frees),
        cmocka_unit_test(test_foreign_pointer),
        cmocka_unit_test(test_device_reset),
        cmocka_unit_test(test_two_devices),
        cmocka_unit_test(test_zero_bytes),
        cmocka_unit_test(test_ipc_handles),
        cmocka_unit_test(test_bad_config_keeps_default),
        cmocka_unit_test(test_disable_passes_through),
        cmocka_unit_test(test_threads_and_signal_storm),
    };
    return cmocka_run_group_tests_name("shim", tests, NULL, NULL);
}
