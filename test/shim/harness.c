/* SPDX-License-Identifier: Apache-2.0 */
/*
 * harness.c - the spawning and collecting of scenario programs that every
 * feature's tests share, each with its contract above it.
 */
#include "harness.h"

/* Signals a test ignores on purpose, for its children to inherit. */
sigset_t keep_ignored;

/* The build variant under test (build, build/asan or build/tsan) and the
 * sanitizer runtime that must be preloaded ahead of it, if any. */
const char *dir = "build";
const char *runtime;
/* The scenario program start() runs: rt_prog (on the runtime) or drv_prog
 * (on the driver only). */
const char *program = "rt_prog";
/* Where the children's live pages go unless a test names its own: a
 * directory of this run, removed at the end, so nothing is left in
 * /dev/shm by children that end without their destructors. */
char run_pages[96];

void slurp(const char *path, char *buf, size_t len)
{
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (!f)
        return;
    size_t n = fread(buf, 1, len - 1, f);
    buf[n] = '\0';
    fclose(f);
}

/* Spawns argv (argv[0] searched in PATH when it has no '/') with this
 * process's environment less CUPOOL_*, LD_PRELOAD and PyTorch's
 * PYTORCH_NO_CUDA_MEMORY_CACHING (it turns stitching on), plus preload (the
 * LD_PRELOAD=... string), then extra (NULL terminated), then the run's page
 * directory unless extra names one; stdout and stderr go to temporary
 * files for finish(). Signals this process ignores start at their default
 * in the child (a shell ignores SIGINT and SIGQUIT in background jobs), so
 * that a scenario is never left running, writing its trace, after the
 * signal meant to end it; a test that wants one ignored lists it in
 * keep_ignored. */
void child_spawn(child *c, char *const argv[], const char *preload,
                        char *const *extra)
{
    c->reaped = false;
    char *env[256];
    int n = 0;
    for (char **e = environ; *e && n < 200; e++)
        if (strncmp(*e, "CUPOOL_", 7) && strncmp(*e, "LD_PRELOAD=", 11) &&
            strncmp(*e, "PYTORCH_NO_CUDA_MEMORY_CACHING=", 31))
            env[n++] = *e;
    env[n++] = (char *)preload;
    bool own_pages = false;
    for (; *extra && n < 253; extra++) {
        env[n++] = *extra;
        own_pages |= !strncmp(*extra, "CUPOOL_PAGE_DIR=", 16);
    }
    static char pagedir[128];
    snprintf(pagedir, sizeof(pagedir), "CUPOOL_PAGE_DIR=%s", run_pages);
    if (!own_pages)
        env[n++] = pagedir;
    env[n] = NULL;
    scratch_path(c->out, sizeof(c->out), "cupool-test-outXXXXXX");
    scratch_path(c->err, sizeof(c->err), "cupool-test-errXXXXXX");
    int fo = mkstemp(c->out), fe = mkstemp(c->err);
    assert_true(fo >= 0 && fe >= 0);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, fo, 1);
    posix_spawn_file_actions_adddup2(&fa, fe, 2);
    posix_spawnattr_t at;
    posix_spawnattr_init(&at);
    sigset_t dfl;
    sigemptyset(&dfl);
    for (int sig = 1; sig < SIGRTMIN; sig++) {
        struct sigaction cur;
        if (sig != SIGKILL && sig != SIGSTOP && sigaction(sig, NULL, &cur) == 0 &&
            cur.sa_handler == SIG_IGN && !sigismember(&keep_ignored, sig))
            sigaddset(&dfl, sig);
    }
    posix_spawnattr_setsigdefault(&at, &dfl);
    posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGDEF);
    assert_int_equal(posix_spawnp(&c->pid, argv[0], &fa, &at, argv, env), 0);
    posix_spawnattr_destroy(&at);
    close(fo);
    close(fe);
    posix_spawn_file_actions_destroy(&fa);
}

/* Starts rt_prog SCENARIO preloaded, with extra NAME=VALUE strings added to
 * the environment (ap, NULL terminated). */
void start(child *c, const char *scenario, va_list ap)
{
    static char preload[600];
    snprintf(preload, sizeof(preload), "LD_PRELOAD=%s%s%s/libcupool.so",
             runtime ? runtime : "", runtime ? ":" : "", dir);
    /* The scenarios' arithmetic (when a cap is reached, how many segments
     * a test makes) is written for 2 MiB small segments, and a segment of
     * its own size for each large request (no mid segments; test_demo runs
     * with them, under a cap), unless the caller names its own. */
    char *extra[64];
    int n = 0;
    bool small = false, mid = false;
    for (char *x; (x = va_arg(ap, char *)) && n < 61;) {
        small |= !strncmp(x, "CUPOOL_SMALL_SEGMENT=", 21);
        mid |= !strncmp(x, "CUPOOL_MID_MAX=", 15);
        extra[n++] = x;
    }
    if (!small)
        extra[n++] = "CUPOOL_SMALL_SEGMENT=2M";
    if (!mid)
        extra[n++] = "CUPOOL_MID_MAX=0";
    extra[n] = NULL;
    char prog[600];
    snprintf(prog, sizeof(prog), "%s/rt/%s", dir, program);
    char *argv[] = {prog, (char *)scenario, NULL};
    child_spawn(c, argv, preload, extra);
}

/* Waits for the child and collects its status and output; prints them
 * when the status is not the one the test expects, so that the log shows
 * only what went wrong. */
result *finish(child *c, const char *scenario, int expect)
{
    static result r;
    int st = c->st;
    if (!c->reaped)
        assert_int_equal(waitpid(c->pid, &st, 0), c->pid);
    r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    slurp(c->out, r.out, sizeof(r.out));
    slurp(c->err, r.err, sizeof(r.err));
    unlink(c->out);
    unlink(c->err);
    if (r.status != expect)
        print_message("%s exited %d\n--- stdout\n%s--- stderr\n%.4000s\n",
                      scenario, r.status, r.out, r.err);
    return &r;
}

/* finish(), the child given secs to end (generous for a loaded machine):
 * else it is killed and the test fails at once, saying what it waited for,
 * where a guard gone would have held it (and every later test) for
 * minutes. */
result *finish_within(child *c, const char *scenario, int expect, int secs,
                      const char *what)
{
    int gone = c->reaped;
    for (int i = 0; i < secs * 100 && !gone; i++)
        if (!(gone = waitpid(c->pid, &c->st, WNOHANG)))
            usleep(10000);
    if (!gone) {
        kill(c->pid, SIGKILL);
        waitpid(c->pid, &c->st, 0);
    }
    c->reaped = true;
    result *r = finish(c, scenario, gone ? expect : -1);
    if (!gone)
        fail_msg("%s did not end within %d s: it waited for %s", scenario, secs, what);
    return r;
}

/* Waits up to 60 s for the child to end; kills it if it did not (a
 * scenario left running may write its trace on without end). True if it
 * ended by itself. finish() then collects it. */
bool wait_bounded(child *c)
{
    int gone = 0;
    for (int i = 0; i < 6000 && !(gone = waitpid(c->pid, &c->st, WNOHANG)); i++)
        usleep(10000);
    if (!gone) {
        kill(c->pid, SIGKILL);
        waitpid(c->pid, &c->st, 0);
    }
    c->reaped = true;
    return gone == c->pid;
}

/* Runs rt_prog SCENARIO preloaded to the end, expecting exit status
 * expect; extra NAME=VALUE strings (NULL terminated) are added to the
 * environment. */
result *run_expecting(int expect, const char *scenario, ...)
{
    child c;
    va_list ap;
    va_start(ap, scenario);
    start(&c, scenario, ap);
    va_end(ap);
    /* Every scenario ends in seconds; one that hangs (a guard gone: a
     * fence inside a capture, a wait nobody ends) fails here, not after
     * the minutes of the program's own timeouts. */
    return finish_within(&c, scenario, expect, 180, "the scenario's end");
}

child *spawn(child *c, const char *scenario, ...)
{
    va_list ap;
    va_start(ap, scenario);
    start(c, scenario, ap);
    va_end(ap);
    return c;
}

/* Starts python3 SCRIPT preloaded (the plain library: a sanitizer runtime
 * cannot be preloaded into python3), with extra NAME=VALUE strings (NULL
 * terminated). */
void python_start(child *c, const char *script, const char *arg, char **extra)
{
    static char preload[600];
    snprintf(preload, sizeof(preload), "LD_PRELOAD=%s/libcupool.so", dir);
    char *argv[] = {"python3", (char *)script, (char *)arg, NULL};
    child_spawn(c, argv, preload, extra);
}

/* SIM_LIB=<the simulated runtime's full path> into buf, for Python
 * programs that load it themselves. */
char *sim_lib_env(char *buf, size_t len)
{
    char sim[600], full[PATH_MAX];
    snprintf(sim, sizeof(sim), "%s/sim/libcudart.so.13", dir);
    assert_non_null(realpath(sim, full));
    snprintf(buf, len, "SIM_LIB=%s", full);
    return buf;
}

/* Removes directory dir and everything in it; 0 on success. */
int remove_tree(const char *path)
{
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", path);
    return system(cmd);
}

/* Runs cmd under sh, its stdout into out: its exit status. Bounded at
 * 120 s (generous for a loaded machine: a command that waits on a guard
 * gone fails the test at once, not after its own timeout of minutes):
 * then said, and -1. */
int shell(const char *cmd, char *out, size_t len)
{
    setenv("TEST_SHELL_CMD", cmd, 1); /* one word to sh, however cmd is quoted */
    FILE *p = popen("exec timeout -k 5 120 sh -c \"$TEST_SHELL_CMD\"", "r");
    assert_non_null(p);
    size_t n = fread(out, 1, len - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    unsetenv("TEST_SHELL_CMD");
    if (WIFEXITED(st) && WEXITSTATUS(st) == 124) {
        print_message("did not end within 120 s, killed: %s\n", cmd);
        return -1;
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Waits up to 60 s for path to exist (fails the test naming it if it did
 * not), then settle_us more. */
void wait_for_file_then(const char *path, useconds_t settle_us)
{
    for (int i = 0; i < 6000 && access(path, F_OK); i++)
        usleep(10000);
    if (access(path, F_OK))
        fail_msg("%s did not appear within 60 s", path);
    usleep(settle_us);
}

void wait_for_file(const char *path)
{
    wait_for_file_then(path, 300000); /* the page is published every 100 ms */
}

/* CUPOOL_CUPTI_LIB=the simulated CUPTI (the driver's library carries it). */
const char *sim_cupti(void)
{
    static char lib[PATH_MAX + 32];
    char path[600], full[PATH_MAX];
    snprintf(path, sizeof(path), "%s/sim/libcuda.so.1", dir);
    assert_non_null(realpath(path, full));
    snprintf(lib, sizeof(lib), "CUPOOL_CUPTI_LIB=%s", full);
    return lib;
}

/* Runs SCENARIO with VAR naming a symbolic link to a file of the user
 * (and extra, if not NULL): stderr must hold expect, and the file must be
 * left as it was. */
void link_refused(const char *var, const char *scenario, const char *extra,
                         const char *expect)
{
    char dirn[96], target[128], link_[128], env[192];
    assert_non_null(mkdtemp(scratch_path(dirn, sizeof(dirn), "cupool-lnk-XXXXXX")));
    snprintf(target, sizeof(target), "%s/precious", dirn);
    snprintf(link_, sizeof(link_), "%s/link", dirn);
    FILE *f = fopen(target, "w");
    assert_non_null(f);
    fputs("keep me\n", f);
    fclose(f);
    assert_int_equal(symlink(target, link_), 0);
    snprintf(env, sizeof(env), "%s=%s", var, link_);
    result *r = run(scenario, env, extra, NULL);
    struct stat st;
    int gone = stat(target, &st);
    assert_int_equal(remove_tree(dirn), 0);
    assert_int_equal(r->status, 0);
    assert_non_null(strstr(r->err, expect));
    assert_int_equal(gone, 0);
    assert_int_equal(st.st_size, 8);
}

/* Starts rt_prog traceloop recording to DIR/t.trace, counting its calls in
 * DIR/count, with up to one extra NAME=VALUE (or NULL), and waits until it
 * runs. */
/* Starts rt_prog's traceloop in dirn (its trace, counter and ready file
 * there), and returns once it has run settle_us past ready: long enough
 * for the helper and a ring's first drains, short enough that the trace
 * stays small to replay. */
void traceloop_start(child *c, const char *dirn, const char *extra)
{
    static char e1[192], e2[192], e3[192];
    char ready[160];
    snprintf(e1, sizeof(e1), "CUPOOL_TRACE=%s/t.trace", dirn);
    snprintf(e2, sizeof(e2), "COUNTER=%s/count", dirn);
    snprintf(ready, sizeof(ready), "%s/ready", dirn);
    snprintf(e3, sizeof(e3), "READY=%s", ready);
    spawn(c, "traceloop", e1, e2, e3, extra, NULL);
    wait_for_file_then(ready, 150000);
}

/* Sends SIGTERM to a traceloop started in dirn and collects it: it must end
 * within 60 s, by that signal's default action. Removes dirn. */
result *traceloop_end(child *c, const char *dirn)
{
    kill(c->pid, SIGTERM);
    bool gone = wait_bounded(c);
    result *r = finish(c, "traceloop", 128 + SIGTERM);
    assert_int_equal(remove_tree(dirn), 0);
    assert_true(gone); /* not still running after 60 s */
    assert_int_equal(r->status, 128 + SIGTERM);
    return r;
}

char pages[96];

int pages_setup(void **s)
{
    (void)s;
    scratch_path(pages, sizeof(pages), "cupool-pages-XXXXXX");
    return mkdtemp(pages) ? 0 : -1;
}

int pages_teardown(void **s)
{
    (void)s;
    return remove_tree(pages);
}

/* This process's pid namespace, as pages and group segments name it. */
unsigned long pid_ns_ino(void)
{
    struct stat ns;
    return stat("/proc/self/ns/pid", &ns) == 0 ? (unsigned long)ns.st_ino : 0;
}

/* Starts rt_prog SCENARIO with its page in the test's directory and waits
 * until it touched $READY; extra environment strings (up to 2, NULL for
 * none) follow. */
void start_ready(child *c, const char *scenario, const char *tag, const char *e1,
                        const char *e2)
{
    static char direnv[128], readyenv[160];
    char ready[128];
    snprintf(direnv, sizeof(direnv), "CUPOOL_PAGE_DIR=%s", pages);
    snprintf(ready, sizeof(ready), "%s/ready-%s", pages, tag);
    snprintf(readyenv, sizeof(readyenv), "READY=%s", ready);
    spawn(c, scenario, direnv, readyenv, e1, e2, NULL);
    wait_for_file(ready);
}

/* rt_prog serve, holding its blocks. */
void serve_start(child *c, const char *tag, const char *e1, const char *e2)
{
    start_ready(c, "serve", tag, e1, e2);
}

/* Waits up to 60 s until pid's page, read by cupool stat --json as d,
 * satisfies the Python expression cond. 0 once it does; -1 after saying
 * what it waited for. */
int wait_page(int pid, const char *cond)
{
    char cmd[768], out[256];
    snprintf(cmd, sizeof(cmd), "CUPOOL_PAGE_DIR=%s " READER " stat --json %d | "
             "python3 -c 'import json,sys; d=json.loads(sys.stdin.read()); "
             "sys.exit(0 if %s else 1)'", pages, pid, cond);
    for (int i = 0; i < 600; i++) {
        if (shell(cmd, out, sizeof(out)) == 0)
            return 0;
        usleep(100000);
    }
    print_message("process %d's page did not come to %s within 60 s\n", pid, cond);
    return -1;
}

double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* ---- cupool pause and resume ------------------------------------------------- */

/* cupool pause or resume of pid (args: "pause 123") on the simulated
 * driver (the plain build's: cupool-pause is not a sanitizer build), its
 * checkpoint state files in pages/ckpt, failing the calls
 * fail names (SIMCUDA_CKPT_FAIL); its output in out, the driver's calls
 * (one "call pid -> result" line each) in calls. Returns the exit status. */
int pause_run(const char *args, const char *fail, char *out, size_t len, char *calls,
                     size_t clen)
{
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "mkdir -p %s/ckpt && rm -f %s/ckpt.log && CUPOOL_PAGE_DIR=%s "
             "LD_LIBRARY_PATH=" BUILT "/sim SIMCUDA_CKPT_DIR=%s/ckpt "
             "SIMCUDA_CKPT_LOG=%s/ckpt.log SIMCUDA_CKPT_FAIL=%s " BUILT "/cupool-pause %s 2>&1",
             pages, pages, pages, pages, pages, fail ? fail : "", args);
    int st = shell(cmd, out, len);
    snprintf(cmd, sizeof(cmd), "cat %s/ckpt.log 2>/dev/null | tr '\\n' ';'", pages);
    shell(cmd, calls, clen);
    return st;
}

/* The driver's state of pid as the simulated driver keeps it (0 running,
 * 1 locked, 2 checkpointed, 3 failed). */
int pause_state(int pid)
{
    char cmd[256], out[32];
    snprintf(cmd, sizeof(cmd), "cat %s/ckpt/%d 2>/dev/null || echo 0", pages, pid);
    shell(cmd, out, sizeof(out));
    return atoi(out);
}

/* ---- CUPOOL_TRACE ---------------------------------------------------------- */

/* Runs `cupool-trace replay --json --policy best TRACE` and a Python check
 * of its first device (as v) with the given assertion source. 0 = held. */
int replay_check(const char *trace, const char *asserts)
{
    char cmd[2048], out[8192];
    snprintf(cmd, sizeof(cmd), TRACER " replay --json --policy best %s | "
             "python3 -c 'import json,sys; d=json.loads(sys.stdin.read()); "
             "dv=d[\"devices\"][0]; v=dv[\"policies\"][0]; %s; print(\"ok\")'",
             trace, asserts);
    int st = shell(cmd, out, sizeof(out));
    if (st || strcmp(out, "ok\n"))
        print_message("replay check failed (%d): %s\n", st, out);
    return st || strcmp(out, "ok\n");
}
