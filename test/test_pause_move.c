/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_pause_move.c - cupool pause's own move (shim/process/park.c), on the
 * simulated driver: test/pause_prog.c under cupool (CUPOOL_VMM=1) keeps a
 * thread launching memsets and one synchronizing while it is paused and
 * resumed from outside; the simulated device memory is unmapped while it is
 * away, so one memset that got through would kill it. A CUPTI subscriber
 * that arrives while it is paused waits for the resume; a capture under
 * way and a program holding CUPTI are refused (the driver moves it, as
 * before); host memory that cannot be had leaves it running with its
 * data; a device with room for only some of its pieces on resume leaves
 * it paused, what those took given back, until a resume finds room. Each test makes its own page and state directories.
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "skip.h"

static char dir[64];    /* the test's own: pages, ckpt, prog, fail */
static pid_t running;   /* its program, until finish() (a failed test's is killed) */
static char lib[1024], cupti[1024], prog[1024];
static const char *variant = BUILT; /* the build whose shim and program run */
static const char *runtime;         /* a sanitizer's runtime, preloaded first */

static void path(char *out, size_t len, const char *name)
{
    snprintf(out, len, "%s/%s", dir, name);
}

static int exists(const char *name)
{
    char p[256];
    path(p, sizeof(p), name);
    return access(p, F_OK) == 0;
}

static void put(const char *name, const char *text)
{
    char p[256];
    path(p, sizeof(p), name);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* Waits up to 60 s for dir/name (a sanitizer's build on a loaded machine
 * took more than 20 s to fill 600 MiB): whether it came. */
static int wait_for(const char *name)
{
    for (int i = 0; i < 6000; i++) {
        if (exists(name))
            return 1;
        usleep(10000);
    }
    return 0;
}

static int setup(void **s)
{
    (void)s;
    /* The run's own (run-tests), as it was before a setup set it for the
     * children below. */
    static const char *tmp;
    if (!tmp)
        tmp = getenv("TMPDIR") ? strdup(getenv("TMPDIR")) : "/tmp";
    if (!*tmp || strlen(tmp) + sizeof("/cupool-pm-XXXXXX") > sizeof(dir))
        tmp = "/tmp";
    snprintf(dir, sizeof(dir), "%s/cupool-pm-XXXXXX", tmp);
    assert_non_null(mkdtemp(dir));
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "mkdir -p %s/pages %s/ckpt %s/prog %s/home", dir, dir, dir, dir);
    assert_int_equal(system(cmd), 0);
    char p[1024];
    snprintf(p, sizeof(p), "%s/libcupool.so", variant);
    assert_non_null(realpath(p, lib));
    snprintf(p, sizeof(p), "%s/sim/libcuda.so.1", variant);
    assert_non_null(realpath(p, cupti));
    snprintf(p, sizeof(p), "%s/rt/pause_prog", variant);
    assert_non_null(realpath(p, prog));
    char v[256];
    path(v, sizeof(v), "pages");
    setenv("CUPOOL_PAGE_DIR", v, 1);
    path(v, sizeof(v), "ckpt");
    setenv("SIMCUDA_CKPT_DIR", v, 1);
    path(v, sizeof(v), "fail");
    setenv("SIMCUDA_FAIL_FILE", v, 1);
    /* Physical allocations as memfds: a stitched range and the range it
     * maps share their bytes, as on a GPU. */
    setenv("SIMCUDA_IPC", "1", 1);
    path(v, sizeof(v), "home");
    setenv("HOME", v, 1);
    setenv("TMPDIR", v, 1);
    return 0;
}

static int teardown(void **s)
{
    (void)s;
    if (running > 0) { /* a failed test's program waits for a go that never comes */
        kill(running, SIGKILL);
        waitpid(running, NULL, 0);
        running = 0;
    }
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    return system(cmd) != 0;
}

/* Starts pause_prog under cupool with the extra environment e and e2
 * (NULL: none) and waits until its loops turn. Its output goes to dir/out. */
static pid_t start2(const char *e, const char *e2)
{
    char out[256];
    path(out, sizeof(out), "out");
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char d[256], pre[2100];
        path(d, sizeof(d), "prog");
        snprintf(pre, sizeof(pre), "%s%s%s", runtime ? runtime : "", runtime ? ":" : "", lib);
        setenv("DIR", d, 1);
        setenv("CUPOOL_VMM", "1", 1);
        /* Room for a loaded machine, where a simulated call can take
         * seconds; the long-call test sets the default back. */
        setenv("CUPOOL_PAUSE_CALL_WAIT", "60s", 1);
        setenv("CUPOOL_CUPTI_LIB", cupti, 1);
        setenv("LD_PRELOAD", pre, 1);
        if (e)
            putenv((char *)e);
        if (e2)
            putenv((char *)e2);
        if (!freopen(out, "w", stdout) || !freopen(out, "a", stderr))
            _exit(126);
        execl(prog, "pause_prog", (char *)NULL);
        _exit(127);
    }
    running = pid;
    assert_true(wait_for("prog/ready"));
    return pid;
}

static pid_t start(const char *e)
{
    return start2(e, NULL);
}

/* cupool pause or resume (cmd) of pid, its output into out: the exit
 * status. */
static int tool(const char *cmd, pid_t pid, char *out, size_t len)
{
    char line[512];
    /* A loaded machine's answers come late: a pause waits 60 s for them. */
    snprintf(line, sizeof(line), "LD_LIBRARY_PATH=" BUILT "/sim " BUILT "/cupool-pause %s%s %d "
             "2>&1", cmd, strcmp(cmd, "pause") ? "" : " --timeout 60", (int)pid);
    FILE *p = popen(line, "r");
    assert_non_null(p);
    size_t n = fread(out, 1, len - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Lets the program end: whether it ended well with its data ("data ok"). */
static void finish(pid_t pid)
{
    put("prog/go", "");
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    running = 0;
    char p[256], text[4096] = "";
    path(p, sizeof(p), "out");
    FILE *f = fopen(p, "r");
    if (f) {
        text[fread(text, 1, sizeof(text) - 1, f)] = '\0';
        fclose(f);
    }
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0 || !strstr(text, "data ok"))
        fail_msg("the program %s %d: %s", WIFSIGNALED(st) ? "died of signal" : "exited",
                 WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st), text);
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "rm -f %s/prog/* %s/fail* %s/out", dir, dir, dir);
    assert_int_equal(system(cmd), 0);
}

/* Moved out and back, twice, while it launches and synchronizes; a
 * CUPTI subscriber arriving while it is paused waits for the resume. */
static void test_pause_move_round_trip(void **s)
{
    (void)s;
    char out[4096];
    pid_t pid = start(NULL);
    for (int round = 0; round < 2; round++) { /* the second finds its host memory kept */
        int rc = tool("pause", pid, out, sizeof(out));
        if (rc || !strstr(out, "cupool moved 34.00 MiB") || !strstr(out, "the device holds 0 B now")) {
            char cmd[300];
            snprintf(cmd, sizeof(cmd), "cat %s/out >&2", dir);
            (void)!system(cmd);
            fail_msg("pause (round %d, rc %d): %s", round, rc, out);
        }
        usleep(100000); /* its loops would have turned many times */
        if (round == 1) { /* a CUPTI subscriber now waits for the resume (and takes
                             CUPTI after it: the last round) */
            assert_false(exists("prog/subscribed"));
            put("prog/sub", "");
            usleep(300000);
            assert_false(exists("prog/subscribed"));
        }
        if (tool("resume", pid, out, sizeof(out)) != 0 || !strstr(out, "brought back"))
            fail_msg("resume: %s", out);
    }
    assert_true(wait_for("prog/subscribed"));
    finish(pid);
}

/* A stitched range (a block mapped again from two holes' pieces) goes
 * and comes back with the pieces it maps: its bytes, and those of the
 * block between the holes, intact. */
static void test_pause_move_stitched(void **s)
{
    (void)s;
    char out[4096];
    pid_t pid = start2("CUPOOL_STITCH=1", "STITCH=1");
    if (tool("pause", pid, out, sizeof(out)) != 0 || !strstr(out, "cupool moved") ||
        !strstr(out, "the device holds 0 B now"))
        fail_msg("pause: %s", out);
    usleep(100000);
    if (tool("resume", pid, out, sizeof(out)) != 0 || !strstr(out, "brought back"))
        fail_msg("resume: %s", out);
    finish(pid);
}

/* A device synchronize that spans CUPTI turning its callback off (the
 * domain on first, the quiet calls off after, as cupool starts CUPTI for
 * the pause) is reported entering and never returning: its thread was
 * counted inside a call for good, and the pause waited out
 * CUPOOL_PAUSE_CALL_WAIT and refused ("1 of its threads stayed inside a
 * CUDA call"), once in a loaded run of make test. */
static void test_pause_move_sync_straddles(void **s)
{
    (void)s;
    char out[4096];
    pid_t pid = start2("SIMCUDA_CUPTI_STRADDLE=1", "CUPOOL_PAUSE_CALL_WAIT=5s");
    if (tool("pause", pid, out, sizeof(out)) != 0 || !strstr(out, "cupool moved"))
        fail_msg("pause: %s", out);
    if (tool("resume", pid, out, sizeof(out)) != 0 || !strstr(out, "brought back"))
        fail_msg("resume: %s", out);
    finish(pid);
}

/* The driver's lock refuses a process CUPTI watches (the simulated
 * driver, as the real one): where the pause fails it, the reason is
 * said and the program runs on, untouched. */
static const char lock_refused[] = "the driver does not lock a process CUPTI watches";

/* Where cupool cannot stop the program's calls, the driver moves it all,
 * and the reason is said: a capture under way (refused before CUPTI
 * starts, so the driver can lock it); CUPTI the program's (the driver
 * refuses it too: it runs on). */
static void test_pause_move_refusals(void **s)
{
    (void)s;
    static const struct {
        const char *env, *says;
        int paused; /* what the driver then does */
    } cases[] = {
        {"CAPTURE=1", "a CUDA graph capture is under way", 1},
        {"SUBSCRIBE=1", "the program holds CUPTI", 0},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char out[4096];
        pid_t pid = start(cases[i].env);
        int rc = tool("pause", pid, out, sizeof(out));
        if (rc != !cases[i].paused || !strstr(out, cases[i].says) ||
            !strstr(out, "the driver moves everything") ||
            (!cases[i].paused && (!strstr(out, lock_refused) || !strstr(out, "it runs on"))))
            fail_msg("%s: %s", cases[i].env, out);
        if (cases[i].paused)
            assert_int_equal(tool("resume", pid, out, sizeof(out)), 0);
        finish(pid);
    }
}

/* No pinned host memory: nothing released; the driver, asked next,
 * refuses the lock (CUPTI, started for the move, watches it now): the
 * program runs on, untouched. Room for 5 of its pieces at the resume: it stays
 * paused, its bytes in host memory, those 5 given back (else the next
 * resume could not map them again) once the copies into them, begun as
 * each was made, have landed (a copy into memory given back faults), until
 * a resume finds room. */
static void test_pause_move_failures(void **s)
{
    (void)s;
    char out[4096];
    pid_t pid = start(NULL);
    put("fail", "hostalloc");
    if (tool("pause", pid, out, sizeof(out)) != 1 || !strstr(out, "no pinned host memory") ||
        !strstr(out, lock_refused) || !strstr(out, "it runs on, untouched"))
        fail_msg("pause without host memory: %s", out);
    usleep(100000); /* it runs: a memset would fault, had anything been released */
    put("fail", "");
    assert_int_equal(tool("pause", pid, out, sizeof(out)), 0);
    assert_non_null(strstr(out, "cupool moved"));
    /* Room for 5 of its pieces: what they took goes back, once the copies
     * into them begun meanwhile (each 0.3 s in flight) have landed. */
    put("fail", "create:5 slowcopy");
    if (tool("resume", pid, out, sizeof(out)) != 1 || !strstr(out, "stays paused"))
        fail_msg("resume without room: %s", out);
    usleep(100000); /* still held: a memset now would fault */
    put("fail", "");
    if (tool("resume", pid, out, sizeof(out)) != 0 || !strstr(out, "brought back"))
        fail_msg("resume with room: %s", out);
    finish(pid);
}

/* A copy out failing in the middle of a move of many chunks (300 MiB
 * more: 2 chunks), after copies that went well and pieces whose bytes they
 * copied were unmapped meanwhile (CUPTI watched before the pause, so no
 * call can be inside the driver unseen): those pieces are mapped again,
 * nothing is released, the program runs on with its data. Each count of
 * copies let through first. */
static void test_pause_move_copy_fails(void **s)
{
    (void)s;
    if (runtime)
        skip_because(SKIP_SANITIZER_MEMORY);
    for (int k = 1; k <= 4; k++) {
        char out[4096], f[32];
        pid_t pid = start2("BIG=300", "CUPOOL_CUPTI=1"); /* CUPTI from the start: a
                                                            pause unmaps as it copies */
        snprintf(f, sizeof(f), "copy:%d slowfail", k);
        put("fail", f);
        if (tool("pause", pid, out, sizeof(out)) != 1 ||
            !strstr(out, "a copy to host memory failed: nothing released"))
            fail_msg("pause with copy %d failing: %s", k + 1, out);
        put("fail", "");
        usleep(100000); /* it runs: a memset would fault on memory not mapped again */
        finish(pid);
    }
}

/* [BUILD [RUNTIME]]: the build whose shim and program run (default the
 * plain one; cupool-pause is always the plain build's), and a sanitizer's
 * runtime to preload before the shim. */
/* A thread inside a CUDA call for longer than the mover waits (5 s): the
 * move is refused, the driver refuses the lock (CUPTI watches), and the
 * call's work lands on its memory, which stayed (11 s later: a move that
 * had not waited for it would have let it fault on memory gone). CUPTI watches from the start
 * (CUPOOL_CUPTI=1): a call begun before it watched is not seen (DESIGN,
 * "cupool pause's own move"). */
static void test_pause_move_long_call(void **s)
{
    (void)s;
    char out[4096];
    pid_t pid = start2("CUPOOL_CUPTI=1", "CUPOOL_PAUSE_CALL_WAIT=5s");
    put("fail", "slowmemset");
    assert_true(wait_for("fail.inside")); /* its memset loop is inside one now */
    if (tool("pause", pid, out, sizeof(out)) != 1 || !strstr(out, "stayed inside a CUDA call") ||
        !strstr(out, lock_refused) || !strstr(out, "it runs on, untouched"))
        fail_msg("pause with a thread inside a long call: %s", out);
    put("fail", "");
    sleep(11); /* the long memset has done its work */
    finish(pid);
}

int main(int argc, char **argv)
{
    if (argc > 1)
        variant = argv[1];
    if (argc > 2)
        runtime = argv[2];
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_pause_move_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pause_move_stitched, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pause_move_sync_straddles, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pause_move_refusals, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pause_move_failures, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pause_move_long_call, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pause_move_copy_fails, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
