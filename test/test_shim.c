/* SPDX-License-Identifier: Apache-2.0 */
/*
 * test_shim.c - runs test/rt_prog scenarios as child processes with
 * LD_PRELOAD=build/libcupool.so over the simulated runtime, each with the
 * environment it needs, and checks exit status and what cupool printed.
 * Also checks that libcupool.so exports exactly the interposed symbols.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "comm.h"
#include "cupti.h"
#include "driver.h"
#include "real.h"
#include "signals.h"
#include "skip.h"

extern char **environ;

/* Signals a test ignores on purpose, for its children to inherit. */
static sigset_t keep_ignored;

/* The build variant under test (build, build/asan or build/tsan) and the
 * sanitizer runtime that must be preloaded ahead of it, if any. */
static const char *dir = "build";
static const char *runtime;
/* The scenario program start() runs: rt_prog (on the runtime) or drv_prog
 * (on the driver only). */
static const char *program = "rt_prog";
/* Where the children's live pages go unless a test names its own: a
 * directory of this run, removed at the end, so nothing is left in
 * /dev/shm by children that end without their destructors. */
static char run_pages[64];

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

#ifndef READER
#define READER "build/cupool-stat"
#endif
#ifndef TRACER
#define TRACER "build/cupool-trace"
#endif
#ifndef BUILT
#define BUILT "build" /* the plain build: cupool-pause, the simulated libraries */
#endif

typedef struct child {
    pid_t pid;
    char out[32], err[32];
    bool reaped;   /* already waited for (wait_bounded), status in st */
    int st;
} child;

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
static void child_spawn(child *c, char *const argv[], const char *preload,
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
    static char pagedir[96];
    snprintf(pagedir, sizeof(pagedir), "CUPOOL_PAGE_DIR=%s", run_pages);
    if (!own_pages)
        env[n++] = pagedir;
    env[n] = NULL;
    snprintf(c->out, sizeof(c->out), "/tmp/cupool-test-outXXXXXX");
    snprintf(c->err, sizeof(c->err), "/tmp/cupool-test-errXXXXXX");
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
static void start(child *c, const char *scenario, va_list ap)
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
static result *finish(child *c, const char *scenario, int expect)
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
static result *finish_within(child *c, const char *scenario, int expect, int secs,
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

/* Waits up to 10 s for the child to end; kills it if it did not (a
 * scenario left running may write its trace on without end). True if it
 * ended by itself. finish() then collects it. */
static bool wait_bounded(child *c)
{
    int gone = 0;
    for (int i = 0; i < 1000 && !(gone = waitpid(c->pid, &c->st, WNOHANG)); i++)
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
static result *run_expecting(int expect, const char *scenario, ...)
{
    child c;
    va_list ap;
    va_start(ap, scenario);
    start(&c, scenario, ap);
    va_end(ap);
    /* Every scenario ends in seconds; one that hangs (a guard gone: a
     * fence inside a capture, a wait nobody ends) fails here, not after
     * the minutes of the program's own timeouts. */
    return finish_within(&c, scenario, expect, 90, "the scenario's end");
}

#define run(...) run_expecting(0, __VA_ARGS__)

static child *spawn(child *c, const char *scenario, ...)
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
static void python_start(child *c, const char *script, const char *arg, char **extra)
{
    static char preload[600];
    snprintf(preload, sizeof(preload), "LD_PRELOAD=%s/libcupool.so", dir);
    char *argv[] = {"python3", (char *)script, (char *)arg, NULL};
    child_spawn(c, argv, preload, extra);
}

/* SIM_LIB=<the simulated runtime's full path> into buf, for Python
 * programs that load it themselves. */
static char *sim_lib_env(char *buf, size_t len)
{
    char sim[600], full[PATH_MAX];
    snprintf(sim, sizeof(sim), "%s/sim/libcudart.so.13", dir);
    assert_non_null(realpath(sim, full));
    snprintf(buf, len, "SIM_LIB=%s", full);
    return buf;
}

/* Removes directory dir and everything in it; 0 on success. */
static int remove_tree(const char *path)
{
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", path);
    return system(cmd);
}

/* Runs a shell command; returns its exit status and its stdout in out. */
/* Runs cmd under sh, its stdout into out: its exit status. Bounded at
 * 60 s (generous for a loaded machine: a command that waits on a guard
 * gone fails the test at once, not after its own timeout of minutes):
 * then said, and -1. */
static int shell(const char *cmd, char *out, size_t len)
{
    setenv("TEST_SHELL_CMD", cmd, 1); /* one word to sh, however cmd is quoted */
    FILE *p = popen("exec timeout -k 5 60 sh -c \"$TEST_SHELL_CMD\"", "r");
    assert_non_null(p);
    size_t n = fread(out, 1, len - 1, p);
    out[n] = '\0';
    int st = pclose(p);
    unsetenv("TEST_SHELL_CMD");
    if (WIFEXITED(st) && WEXITSTATUS(st) == 124) {
        print_message("did not end within 60 s, killed: %s\n", cmd);
        return -1;
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* Waits up to 5 s for path to exist, then settle_us more. */
static void wait_for_file_then(const char *path, useconds_t settle_us)
{
    for (int i = 0; i < 500 && access(path, F_OK); i++)
        usleep(10000);
    assert_int_equal(access(path, F_OK), 0);
    usleep(settle_us);
}

static void wait_for_file(const char *path)
{
    wait_for_file_then(path, 300000); /* the page is published every 100 ms */
}

#define PASSES(...) assert_int_equal(run(__VA_ARGS__, NULL)->status, 0)

static void test_pairs_hit_the_cache(void **s) { (void)s; PASSES("pairs"); }
static void test_fence_barrier(void **s) { (void)s; PASSES("fence", "CUPOOL_FENCE=barrier"); }
static void test_fence_sync(void **s) { (void)s; PASSES("fence_sync", "CUPOOL_FENCE=sync"); }
static void test_fence_poll(void **s) { (void)s; PASSES("fence_poll", "CUPOOL_FENCE=poll"); }
/* CUPOOL_CUPTI_LIB=the simulated CUPTI (the driver's library carries it). */
static const char *sim_cupti(void)
{
    static char lib[PATH_MAX + 32];
    char path[600], full[PATH_MAX];
    snprintf(path, sizeof(path), "%s/sim/libcuda.so.1", dir);
    assert_non_null(realpath(path, full));
    snprintf(lib, sizeof(lib), "CUPOOL_CUPTI_LIB=%s", full);
    return lib;
}

static void test_fence_destroyed(void **s)
{
    (void)s;
    PASSES("fence_destroyed", "CUPOOL_FENCE=poll");
    PASSES("fence_destroyed", "CUPOOL_FENCE=barrier");
    PASSES("fence_destroyed", "CUPOOL_FENCE=sync");
}

static void test_fence_comm(void **s)
{
    (void)s;
    PASSES("fence_comm", "CUPOOL_FENCE=poll", "CUPOOL_CUPTI=1", sim_cupti());
    /* auto: from the 8th fence after NCCL's first call */
    PASSES("fence_comm", "CUPOOL_FENCE=poll", sim_cupti(), "WARM_FENCES=8");
    /* CUPTI starting inside an NCCL group whose collective came before */
    PASSES("comm_straddle", "CUPOOL_FENCE=poll", sim_cupti());
    PASSES("fence_idle", "CUPOOL_FENCE=poll", "CUPOOL_CUPTI=1", sim_cupti());
    PASSES("fence_idle", "CUPOOL_FENCE=poll", "CUPOOL_CUPTI=1", sim_cupti(),
           "FENCE_IDLE_HANDOVER=1");
    /* A CUPTI that keeps reporting stream waits: a stream paying (a wait
     * inside the callback of another call) must not take comm.c's lock
     * again (it hung). */
    PASSES("fence_idle", "CUPOOL_FENCE=poll", "CUPOOL_CUPTI=1", sim_cupti(),
           "SIMCUDA_CUPTI_KEEP_WAITS=1");
    /* A reset forgets the device's streams (a marked one stayed in the
     * next fence). */
    PASSES("fence_reset", "CUPOOL_FENCE=poll", "CUPOOL_CUPTI=1", sim_cupti());
}
/* Threads fencing one device at once share fences (fence.c's
 * combined_locked): with each record taking 200 us, at least ten of 396
 * fences asked for never reach CUDA. */
static void test_fence_shared(void **s)
{
    (void)s;
    PASSES("fence_share", "SIMCUDA_RECORD_US=200", "CUPOOL_FENCE_INTERVAL=1");
    PASSES("fence_share", "SIMCUDA_RECORD_US=200", "CUPOOL_FENCE_INTERVAL=1",
           "CUPOOL_FENCE=barrier");
}

static void test_fence_poll_cap(void **s)
{
    (void)s;
    PASSES("fence_poll_cap", "CUPOOL_FENCE=poll", "CUPOOL_MAX_RESERVED=2M");
}
static void test_capture_defers_fence(void **s) { (void)s; PASSES("capture"); }
static void test_flush_signal(void **s) { (void)s; PASSES("flush"); }
static void test_foreign_pointer(void **s) { (void)s; PASSES("foreign"); }
static void test_device_reset(void **s) { (void)s; PASSES("reset"); }
static void test_two_devices(void **s) { (void)s; PASSES("multidev"); }
static void test_zero_bytes(void **s) { (void)s; PASSES("zero"); }
/* IPC of pooled blocks between two processes (rt_prog ipc spawns the
 * importer): the simulated memory is shared through files, as CUDA shares
 * device memory, so an importer given the segment's base instead of the
 * block's address reads the wrong bytes. */
static void test_ipc_handles(void **s)
{
    (void)s;
    result *r = run("ipc", "SIMCUDA_IPC=1", NULL);
    assert_int_equal(r->status, 0);
    assert_non_null(strstr(r->out, "ipc ok: blocks shared at their offsets"));
    assert_non_null(strstr(r->err, "a cupool handle from process"));
}

/* The same in VMM segments (stitched ones: below; on the GPU both run,
 * scripts/gpu-share): every handle is cupool's,
 * the importer maps the block's pieces (handed over by the exporter as
 * file descriptors) at the block's offset; an importer without cupool is
 * refused both. Then a block stitched from two holes, opened at its start
 * and inside its second half, reads and writes the exporter's bytes; and
 * a 1 GiB block with 1024 descriptors allowed (it failed when every piece
 * travelled at once). */
static void test_ipc_vmm(void **s)
{
    (void)s;
    result *r = run("ipc", "SIMCUDA_IPC=1", "CUPOOL_VMM=1", "CUPOOL_FENCE_INTERVAL=1", NULL);
    assert_int_equal(r->status, 0);
    assert_non_null(strstr(r->out, "ipc ok: blocks shared at their offsets"));
    /* A new block where a freed one was has a handle of its own; the old
     * handle is refused, not opened on the new block. */
    assert_non_null(strstr(r->out, "again: same place 1, same handle 0"));
    r = run("ipc_stitched", "SIMCUDA_IPC=1", "CUPOOL_STITCH=1",
                    "CUPOOL_VMM_UNIT=2M", NULL);
    assert_int_equal(r->status, 0);
    assert_non_null(strstr(r->out, "ipc stitched ok"));
    /* 512 pieces under a limit of 1024 descriptors: a batch at a time */
    r = run("ipc_large", "SIMCUDA_IPC=1", "CUPOOL_VMM=1", NULL);
    assert_int_equal(r->status, 0);
    assert_non_null(strstr(r->out, "ipc large ok"));
}

/* Graph capture modes: cudaMalloc and cudaFree answer, from the capturing
 * thread and from others, exactly what CUDA alone answers (the simulated
 * runtime applies CUDA's rule), and a forbidden call says why in one line.
 * Before this, a cached block was handed out during a global capture and
 * freed during a thread-local one: the lines differed. */
static void test_capture_modes_as_cuda(void **s)
{
    (void)s;
    result *r = run("capture_modes", "CUPOOL_DISABLE=1", NULL);
    assert_int_equal(r->status, 0);
    static char alone[sizeof(((result *)0)->out)];
    snprintf(alone, sizeof(alone), "%s", r->out);
    assert_non_null(strstr(alone, "global: other-global 900 other-relaxed 0 own-malloc 900"));
    r = run("capture_modes", NULL);
    assert_int_equal(r->status, 0);
    assert_string_equal(r->out, alone);
    assert_non_null(strstr(r->err, "cudaFree during a graph capture that forbids it"));
    assert_non_null(strstr(r->err, "run them without --torch"));
}

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

static void test_shards(void **s)
{
    (void)s;
    /* Two threads, two shards: a segment each. */
    result *r = run("shards", NULL);
    assert_int_equal(r->status, 0);
    assert_non_null(strstr(r->out, "driver segments: 2"));
    /* One pool: the second thread's block fits in the first segment. */
    r = run("shards", "CUPOOL_SHARDS=1", NULL);
    assert_int_equal(r->status, 0);
    assert_non_null(strstr(r->out, "driver segments: 1"));
    result *c = run("shards_cap", "CUPOOL_MAX_RESERVED=4M", NULL);
    assert_int_equal(c->status, 0);
    assert_non_null(strstr(c->err, "cause: the cap"));
}

/* CUPOOL_VMM: the pool gives back the granules behind a live block to
 * serve a request under the cap, after waiting for the device; without
 * driver support it says so and uses cudaMalloc'd segments (the scenario
 * then stops at its first check: the driver saw a cudaMalloc). */
static void test_vmm(void **s)
{
    (void)s;
    result *r = run("vmm", "CUPOOL_VMM=1", "CUPOOL_MAX_RESERVED=48M", NULL);
    assert_int_equal(r->status, 0);
    assert_non_null(strstr(r->out, "unmapped 15 granules, 0 before"));
    r = run_expecting(1, "vmm", "CUPOOL_VMM=1", "CUPOOL_MAX_RESERVED=48M",
                      "SIMCUDA_NO_VMM=1", NULL);
    assert_int_equal(r->status, 1);
    assert_non_null(strstr(r->err, "does not support virtual memory management"));
    assert_non_null(strstr(r->out, "mallocs == 0"));
}

/* VMM segments grant access to every device the program enabled peer
 * access from, mapped before the enabling or after, through the runtime
 * or the driver (rt_prog's vmm_peer). */
static void test_vmm_peer(void **s)
{
    (void)s;
    PASSES("vmm_peer", "CUPOOL_VMM=1");
    PASSES("vmm_peer", "CUPOOL_STITCH=1");
}

/* CUPOOL_STITCH: the holes' pieces mapped again serve a request with
 * nothing new in use; an unstitched range is unmapped only after the
 * device was waited for. Under a cap the pieces are 2 MiB granules: two
 * 8 MiB holes are 8 mappings; without one they are 8 MiB: two 16 MiB
 * holes are 4. Under CUPOOL_VMM alone the same 16 MiB come from a trim and
 * a new segment (the driver sees granules unmapped). */
static void test_stitch(void **s)
{
    (void)s;
    result *r = run("stitch", "CUPOOL_STITCH=1", "CUPOOL_MAX_RESERVED=28M",
                    "CUPOOL_STATS_AT_EXIT=1", "CUPOOL_STATS_FORMAT=json", NULL);
    assert_int_equal(r->status, 0);
    /* Two stitches, each of both 8 MiB holes: the statistics say so. */
    assert_non_null(strstr(r->err, "\"stitches\":2,\"stitched_bytes\":33554432,"));
    assert_non_null(strstr(r->out, "stitched: 8 mappings, 0 bytes more in use, 0 unmapped"));
    assert_non_null(strstr(r->out, "restitched: 4194304 bytes more in use, 0 unmapped"));
    assert_non_null(strstr(r->out, "flushed: 0 bytes mapped, 0 in use, 0 unsynced unmaps"));
    /* The default poll fence never synchronizes ("syncs":0): every device
     * synchronization the driver saw was one to unmap, and vmm_syncs
     * counts them all. */
    const char *at = strstr(r->out, "unsynced unmaps, ");
    assert_non_null(at);
    unsigned long syncs = strtoul(at + strlen("unsynced unmaps, "), NULL, 10);
    char want[64];
    snprintf(want, sizeof(want), "\"syncs\":0,\"vmm_syncs\":%lu,", syncs);
    assert_true(syncs > 0);
    assert_non_null(strstr(r->err, want));
    r = run("stitch", "CUPOOL_STITCH=1", "RT_HOLE_MIB=16", "RT_UNIT_MIB=8", NULL);
    assert_int_equal(r->status, 0);
    assert_non_null(strstr(r->out, "stitched: 4 mappings, 0 bytes more in use, 0 unmapped"));
    assert_non_null(strstr(r->out, "restitched: 8388608 bytes more in use, 0 unmapped"));
    assert_non_null(strstr(r->out, "flushed: 0 bytes mapped, 0 in use, 0 unsynced unmaps"));
    r = run("stitch_extend", "CUPOOL_STITCH=1", "CUPOOL_VMM_UNIT=2M", NULL);
    assert_int_equal(r->status, 0);
    assert_non_null(strstr(r->out, "extended: same address 1, 2 mappings, 0 bytes "
                                   "more in use, 0 unmapped"));
    assert_non_null(strstr(r->out, "flushed: 0 bytes mapped, 0 in use, 0 unsynced unmaps"));
    /* A unit the device cannot use: said, and the granule is used. */
    r = run("stitch", "CUPOOL_STITCH=1", "CUPOOL_VMM_UNIT=3M",
            "CUPOOL_MAX_RESERVED=28M", NULL);
    assert_int_equal(r->status, 0);
    assert_non_null(strstr(r->err, "CUPOOL_VMM_UNIT=3145728: not a power-of-two"));
    assert_non_null(strstr(r->out, "stitched: 8 mappings, 0 bytes more in use, 0 unmapped"));
    r = run_expecting(1, "stitch", "CUPOOL_VMM=1", "CUPOOL_MAX_RESERVED=28M", NULL);
    assert_int_equal(r->status, 1);
    assert_non_null(strstr(r->out, "stitched: 8 mappings, 0 bytes more in use, 8 unmapped"));
}

/* CUPOOL_STITCH=auto, the default: stitching while PyTorch's caching
 * allocator is off (PYTORCH_NO_CUDA_MEMORY_CACHING=1), also when the
 * program sets it after cupool loaded (before its first allocation, as
 * PyTorch reads it); not otherwise ("0" leaves PyTorch's cache on), nor
 * when CUPOOL_STITCH=0 says so. */
static void test_stitch_auto(void **s)
{
    (void)s;
    static const char on[] = "stitched: 4 mappings, 0 bytes more in use, 0 unmapped",
                      off[] = "stitched: 0 mappings";
    static const struct {
        const char *env[2]; /* NULL-terminated early where fewer */
        int status;
        const char *want;
    } cases[] = {
        {{"PYTORCH_NO_CUDA_MEMORY_CACHING=1"}, 0, on},
        {{"RT_SETENV=PYTORCH_NO_CUDA_MEMORY_CACHING=1"}, 0, on},
        {{NULL}, 1, off},
        {{"PYTORCH_NO_CUDA_MEMORY_CACHING=0"}, 1, off},
        {{"PYTORCH_NO_CUDA_MEMORY_CACHING=1", "CUPOOL_STITCH=0"}, 1, off},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        result *r = run_expecting(cases[i].status, "stitch", "RT_HOLE_MIB=16", "RT_UNIT_MIB=8",
                                  cases[i].env[0], cases[i].env[1], NULL);
        assert_int_equal(r->status, cases[i].status);
        assert_non_null(strstr(r->out, cases[i].want));
    }
}

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

/* `cupool run`: its options become the program's environment, beside the
 * preload; bad use exits 2 with a message. */
static void test_cupool_run(void **s)
{
    (void)s;
    if (runtime)
        skip_because(SKIP_SANITIZER_PYTHON);
    char out[16384], cmd[1024];
    snprintf(cmd, sizeof(cmd), "CUPOOL_LIB=%s/libcupool.so scripts/cupool run --cupti "
             "--vmm --fence sync --max-reserved 2G -- sh -c 'echo \"$CUPOOL_CUPTI "
             "$CUPOOL_VMM $CUPOOL_FENCE $CUPOOL_MAX_RESERVED $LD_PRELOAD\"' 2>/dev/null",
             dir);
    assert_int_equal(shell(cmd, out, sizeof(out)), 0);
    assert_non_null(strstr(out, "1 1 sync 2G /"));
    assert_non_null(strstr(out, "/libcupool.so"));
    /* Any option of the table, by the one rule: no list to keep. */
    snprintf(cmd, sizeof(cmd), "CUPOOL_LIB=%s/libcupool.so scripts/cupool run --vmm-unit 16M "
             "--fence-slack 10 --stats-at-exit --page-dir /tmp -- sh -c 'echo \"$CUPOOL_VMM_UNIT "
             "$CUPOOL_FENCE_SLACK $CUPOOL_STATS_AT_EXIT $CUPOOL_PAGE_DIR\"' 2>/dev/null", dir);
    assert_int_equal(shell(cmd, out, sizeof(out)), 0);
    assert_string_equal(out, "16M 10 1 /tmp\n");
    assert_int_equal(shell("scripts/cupool options", out, sizeof(out)), 0);
    assert_non_null(strstr(out, "CUPOOL_VMM_UNIT"));
    assert_int_equal(shell("scripts/cupool run --bogus -- true 2>&1", out, sizeof(out)), 2);
    assert_non_null(strstr(out, "run: unknown option '--bogus'"));
    assert_int_equal(shell("scripts/cupool run --cupti 2>&1", out, sizeof(out)), 2);
    assert_non_null(strstr(out, "run: no program given"));
    /* Every option is checked before anything starts: one line, exit 2. */
    snprintf(cmd, sizeof(cmd), "CUPOOL_LIB=%s/libcupool.so scripts/cupool run "
             "--max-reserved 12Q -- sh -c 'echo started' 2>&1", dir);
    assert_int_equal(shell(cmd, out, sizeof(out)), 2);
    assert_string_equal(out, "cupool: run: CUPOOL_MAX_RESERVED=12Q is invalid (expected "
                        "none, a size such as 20G or 512MiB, or a percentage of device "
                        "memory such as 50%)\n");
    snprintf(cmd, sizeof(cmd), "CUPOOL_SMALL_SEGMENT=2G CUPOOL_LIB=%s/libcupool.so "
             "scripts/cupool run true 2>&1", dir);
    assert_int_equal(shell(cmd, out, sizeof(out)), 2);
    assert_non_null(strstr(out, "CUPOOL_SMALL_SEGMENT is above 1 GiB"));
    assert_int_equal(shell("scripts/cupool run --max-reserved 2>&1", out, sizeof(out)), 2);
    assert_string_equal(out, "cupool: run: --max-reserved needs a value (see 'cupool --help')\n");
    snprintf(cmd, sizeof(cmd), "CUPOOL_LIB=%s/libcupool.so scripts/cupool run --log warn "
             "echo no-dashes 2>&1", dir);
    assert_int_equal(shell(cmd, out, sizeof(out)), 0);
    assert_string_equal(out, "no-dashes\n");
    /* A program on the driver only is reached: no warning. A statically
     * linked one cannot be: one line says so. */
    snprintf(cmd, sizeof(cmd), "CUPOOL_LIB=%s/libcupool.so scripts/cupool run --jax -- "
             "%s/rt/drv_prog versions 2>&1", dir, dir);
    assert_int_equal(shell(cmd, out, sizeof(out)), 0);
    assert_string_equal(out, "versions ok\n");
    snprintf(cmd, sizeof(cmd), "printf 'int main(void){return 0;}' | cc -static -x c - "
             "-o %s/static_prog && CUPOOL_LIB=%s/libcupool.so scripts/cupool run -- "
             "%s/static_prog 2>&1", dir, dir, dir);
    assert_int_equal(shell(cmd, out, sizeof(out)), 0);
    assert_non_null(strstr(out, "is linked statically (no dynamic loader), so LD_PRELOAD "
                                "cannot reach it"));
}

/* Runs SCENARIO with VAR naming a symbolic link to a file of the user
 * (and extra, if not NULL): stderr must hold expect, and the file must be
 * left as it was. */
static void link_refused(const char *var, const char *scenario, const char *extra,
                         const char *expect)
{
    char dirn[] = "/tmp/cupool-lnk-XXXXXX", target[64], link_[64], env[96];
    assert_non_null(mkdtemp(dirn));
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

/* Each command has its own help (exit 0); a usage mistake is one line
 * naming it, prefixed "cupool:", exit 2. */
static void test_cli_help_and_mistakes(void **s)
{
    (void)s;
    if (runtime)
        skip_because(SKIP_PLAIN_ONLY);
    static const char *const cmds[] = {"run", "stat", "top", "flush", "dump", "replay",
                                       "plot", "import-torch", "pause", "resume", "job"};
    char cmd[256], out[4096];
    for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
        snprintf(cmd, sizeof(cmd), "scripts/cupool %s --help 2>&1", cmds[i]);
        int st = shell(cmd, out, sizeof(out));
        char want[64];
        snprintf(want, sizeof(want), "cupool %s", cmds[i]);
        bool global = strstr(out, "cupool top [--interval") && strcmp(cmds[i], "top");
        if (st != 0 || !strstr(out, want) || global)
            fail_msg("'%s --help' exited %d: %.200s", cmds[i], st, out);
    }
    static const struct { const char *args, *line; } bad[] = {
        {"", "cupool: no command given (see 'cupool --help')\n"},
        {"replay x --trim", "cupool: --trim needs a value (see 'cupool --help')\n"},
        {"frobnicate", "cupool: unknown command 'frobnicate' (see 'cupool --help')\n"},
        {"options x", "cupool: options takes no arguments (see 'cupool options --help')\n"},
        {"stat abc", "cupool: 'abc' is not a process id\n"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        snprintf(cmd, sizeof(cmd), "scripts/cupool %s 2>&1", bad[i].args);
        int st = shell(cmd, out, sizeof(out));
        if (st != 2 || strcmp(out, bad[i].line))
            fail_msg("'cupool %s' exited %d: %s", bad[i].args, st, out);
    }
    /* A program that is not there: 127, as a shell says. */
    assert_int_equal(shell("scripts/cupool run -- cupool-no-such-program 2>&1", out,
                           sizeof(out)), 127);
    assert_non_null(strstr(out, "command not found"));
    assert_int_equal(shell("scripts/cupool --version", out, sizeof(out)), 0);
    assert_non_null(strstr(out, "cupool 0."));
    /* Nothing to show: the table's stdout stays empty, the word goes to
     * stderr. */
    shell("mkdir -p /tmp/cupool-empty-pages", out, sizeof(out));
    assert_int_equal(shell("CUPOOL_PAGE_DIR=/tmp/cupool-empty-pages scripts/cupool stat "
                           "2>/dev/null; echo rc=$?", out, sizeof(out)), 0);
    assert_string_equal(out, "rc=0\n");
}

/* Every cupool command the README's examples use exists (its --help
 * exits 0), and every option they give it is one the command takes: the
 * examples cannot go stale silently, those marked not run (sudo, a GPU)
 * too. test/test_docs_examples.py runs the others and compares their
 * output. */
static void test_readme_examples_are_commands(void **s)
{
    (void)s;
    if (runtime)
        skip_because(SKIP_SANITIZER_PYTHON);
    char out[8192];
    int st = shell("python3 - <<'PY'\n"
        "import re, subprocess\n"
        "text = open('README.md').read()\n"
        "blocks = re.findall(r'```sh\\n(.*?)```', text, re.S)\n"
        "bad, n = [], 0\n"
        "for line in (l for b in blocks for l in b.splitlines()):\n"
        "    for cmd in line.split('#')[0].split(';'):\n"
        "        w = cmd.split()\n"
        "        if len(w) < 2 or w[0] != 'scripts/cupool': continue\n"
        "        n += 1\n"
        "        h = subprocess.run(['scripts/cupool', w[1], '--help'], capture_output=True, text=True)\n"
        "        if h.returncode: bad.append(cmd.strip() + ': no such command'); continue\n"
        "        for o in (x for x in w[2:] if x.startswith('--') and x != '--'):\n"
        "            name = o.split('=')[0]\n"
        "            if w[1] == 'run':\n"
        "                k = subprocess.run(['build/cupool-options', 'kind', 'CUPOOL_' + name[2:].upper().replace('-', '_')], capture_output=True)\n"
        "                if k.returncode: bad.append(cmd.strip() + ': ' + name)\n"
        "            elif name not in h.stdout + h.stderr: bad.append(cmd.strip() + ': ' + name)\n"
        "print(n, 'commands;', bad or 'all real')\n"
        "PY", out, sizeof(out));
    print_message("README examples: %s", out);
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, "all real"));
}

/* make demo's tour runs to the end and tells its story: the cap's report,
 * the live table, a flush without a signal, a replay and a plot. */
static void test_demo(void **s)
{
    (void)s;
    if (runtime)
        skip_because(SKIP_PLAIN_ONLY);
    static char out[16384];
    assert_int_equal(shell("scripts/demo 2>&1", out, sizeof(out)), 0);
    static const char *const want[] = {
        "1. The same program, without and with cupool:",
        "cause: the cap: allocated memory plus this request exceeds CUPOOL_MAX_RESERVED",
        " ALLOC RESERV CACHED", "returned 256.00 MiB (268435456 bytes) to the driver",
        "build/demo/timeline.svg: device 0", "docs/BENCHMARKS.md"};
    for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
        if (!strstr(out, want[i]))
            fail_msg("the demo did not say '%s':\n%s", want[i], out);
    assert_null(strstr(out, "18446744073709551615"));
}

/* make install puts cupool on the PATH and what it runs beside it; the
 * installed cupool works; make uninstall removes exactly that. */
static void test_install_uninstall(void **s)
{
    (void)s;
    if (runtime)
        skip_because(SKIP_PLAIN_ONLY);
    char dirn[] = "/tmp/cupool-inst-XXXXXX", cmd[512], out[4096];
    assert_non_null(mkdtemp(dirn));
    snprintf(cmd, sizeof(cmd), "M='env -u MAKEFLAGS -u MAKELEVEL make -s'; $M install DESTDIR=%s PREFIX=/opt/c >/dev/null && "
             "%s/opt/c/bin/cupool replay test/data/train.trace.gz --policy best | head -1 && "
             "$M uninstall DESTDIR=%s PREFIX=/opt/c && find %s -type f | wc -l",
             dirn, dirn, dirn, dirn);
    int st = shell(cmd, out, sizeof(out));
    assert_int_equal(remove_tree(dirn), 0);
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, "test/data/train.trace.gz: 3818 records"));
    assert_non_null(strstr(out, "\n0\n"));
}

/* What cannot work is said at start-up, in one line each: a cap below one
 * segment, a segment above 1 GiB, a statistics file that is a device or a
 * link (the link's target is left alone). */
static void test_startup_refusals(void **s)
{
    (void)s;
    result *r = run("zero", "CUPOOL_MAX_RESERVED=1K", NULL);
    assert_int_equal(r->status, 0);
    assert_non_null(strstr(r->err, "cupool: CUPOOL_MAX_RESERVED=1024 bytes is below one "
                                   "small segment"));
    r = run("zero", "CUPOOL_LARGE_ROUND=4G", NULL);
    assert_int_equal(r->status, 0);
    assert_non_null(strstr(r->err, "cupool: CUPOOL_LARGE_ROUND is above 1 GiB"));
    r = run("zero", "CUPOOL_STATS_FILE=/dev/full", "CUPOOL_STATS_AT_EXIT=1", NULL);
    assert_int_equal(r->status, 0);
    assert_non_null(strstr(r->err, "cupool: CUPOOL_STATS_FILE=/dev/full cannot be used: "
                                   "it is not a regular file"));
    assert_non_null(strstr(r->err, "cupool statistics, pid")); /* on stderr instead */
    link_refused("CUPOOL_STATS_FILE", "zero", "CUPOOL_STATS_AT_EXIT=1",
                 "it is a symbolic link; statistics go to stderr");
}

/* Starts rt_prog traceloop recording to DIR/t.trace, counting its calls in
 * DIR/count, with up to one extra NAME=VALUE (or NULL), and waits until it
 * runs. */
/* Starts rt_prog's traceloop in dirn (its trace, counter and ready file
 * there), and returns once it has run settle_us past ready: long enough
 * for the helper and a ring's first drains, short enough that the trace
 * stays small to replay. */
static void traceloop_start(child *c, const char *dirn, const char *extra)
{
    static char e1[128], e2[128], e3[128];
    char ready[96];
    snprintf(e1, sizeof(e1), "CUPOOL_TRACE=%s/t.trace", dirn);
    snprintf(e2, sizeof(e2), "COUNTER=%s/count", dirn);
    snprintf(ready, sizeof(ready), "%s/ready", dirn);
    snprintf(e3, sizeof(e3), "READY=%s", ready);
    spawn(c, "traceloop", e1, e2, e3, extra, NULL);
    wait_for_file_then(ready, 150000);
}

/* Sends SIGTERM to a traceloop started in dirn and collects it: it must end
 * within 10 s, by that signal's default action. Removes dirn. */
static result *traceloop_end(child *c, const char *dirn)
{
    kill(c->pid, SIGTERM);
    bool gone = wait_bounded(c);
    result *r = finish(c, "traceloop", 128 + SIGTERM);
    assert_int_equal(remove_tree(dirn), 0);
    assert_true(gone); /* not still running after 10 s */
    assert_int_equal(r->status, 128 + SIGTERM);
    return r;
}

/* A statistics file that becomes a FIFO after start-up never blocks the
 * helper: the dump goes to stderr, and SIGTERM still ends a traced
 * program. */
static void test_stats_file_fifo(void **s)
{
    (void)s;
    char dirn[] = "/tmp/cupool-ff-XXXXXX";
    assert_non_null(mkdtemp(dirn));
    char e4[128], fifo[96];
    snprintf(fifo, sizeof(fifo), "%s/stats", dirn);
    snprintf(e4, sizeof(e4), "CUPOOL_STATS_FILE=%s", fifo);
    child c;
    traceloop_start(&c, dirn, e4);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    kill(c.pid, SIGUSR2);
    usleep(300000);
    result *r = traceloop_end(&c, dirn);
    assert_non_null(strstr(r->err, "it is not a regular file (a device, FIFO or socket); "
                                   "writing to stderr"));
}

/* A request far beyond the device fails; the peak of reserved memory
 * counts only what the driver gave (one 2 MiB segment). */
static void test_failed_request_not_in_peak(void **s)
{
    (void)s;
    result *r = run("bigfail", "CUPOOL_STATS_AT_EXIT=1", "CUPOOL_STATS_FORMAT=json", NULL);
    assert_int_equal(r->status, 0);
    const char *j = strstr(r->err, "{\"cupool\":1");
    assert_non_null(j);
    char cmd[8192], out[256];
    snprintf(cmd, sizeof(cmd), "python3 -c 'import json,sys; v=json.loads(sys.argv[1])"
             "[\"devices\"][0]; assert v[\"reserved_peak\"]==2**21, v; print(\"ok\")' '%.*s'",
             (int)strcspn(j, "\n"), j);
    assert_int_equal(shell(cmd, out, sizeof(out)), 0);
    assert_string_equal(out, "ok\n");
}

static void test_one_device(void **s)
{
    (void)s;
    /* One device: the shim skips cudaGetDevice; device 0 is the only one. */
    PASSES("pairs", "SIMCUDA_DEVICES=1");
    PASSES("fence", "SIMCUDA_DEVICES=1", "CUPOOL_FENCE=barrier");
    PASSES("reset", "SIMCUDA_DEVICES=1");
    PASSES("badfree", "SIMCUDA_DEVICES=1");
}

static void test_cap_and_report(void **s)
{
    (void)s;
    result *r = run("cap", "CUPOOL_MAX_RESERVED=16M", NULL);
    assert_int_equal(r->status, 0);
    assert_non_null(strstr(r->err, "cupool: out of memory on device 0: cudaMalloc(3.00 MiB) failed"));
    assert_non_null(strstr(r->err, "cap 16.00 MiB, reserved 16.00 MiB, allocated 16.00 MiB"));
    assert_non_null(strstr(r->err, "cause: the cap"));
}

/* Under a cap, cudaMemGetInfo's free is what one cudaMalloc gets (it said
 * the cap less the bytes allocated, which a request could not have while
 * a segment with a live block stays reserved). */
static void test_cap_free_is_allocatable(void **s)
{
    (void)s;
    PASSES("capinfo", "CUPOOL_MAX_RESERVED=16M");
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
    char path[] = "/tmp/cupool-stats-XXXXXX";
    assert_non_null(mkdtemp(path));
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

static char pages[64];

static int pages_setup(void **s)
{
    (void)s;
    snprintf(pages, sizeof(pages), "/tmp/cupool-pages-XXXXXX");
    return mkdtemp(pages) ? 0 : -1;
}

static int pages_teardown(void **s)
{
    (void)s;
    return remove_tree(pages);
}

/* This process's pid namespace, as pages and group segments name it. */
static unsigned long pid_ns_ino(void)
{
    struct stat ns;
    return stat("/proc/self/ns/pid", &ns) == 0 ? (unsigned long)ns.st_ino : 0;
}

/* The path of pid's page in the test's page directory (the plain name). */
static void page_of(int pid, char *buf, size_t len)
{
    snprintf(buf, len, "%s/cupool-%u/%lu-%d", pages, (unsigned)geteuid(), pid_ns_ino(), pid);
}

/* Starts rt_prog SCENARIO with its page in the test's directory and waits
 * until it touched $READY; extra environment strings (up to 2, NULL for
 * none) follow. */
static void start_ready(child *c, const char *scenario, const char *tag, const char *e1,
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
static void serve_start(child *c, const char *tag, const char *e1, const char *e2)
{
    start_ready(c, "serve", tag, e1, e2);
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

/* Waits up to 10 s until pid's page, read by cupool stat --json as d,
 * satisfies the Python expression cond. 0 once it does. */
static int wait_page(int pid, const char *cond)
{
    char cmd[768], out[256];
    snprintf(cmd, sizeof(cmd), "CUPOOL_PAGE_DIR=%s " READER " stat --json %d | "
             "python3 -c 'import json,sys; d=json.loads(sys.stdin.read()); "
             "sys.exit(0 if %s else 1)'", pages, pid, cond);
    for (int i = 0; i < 100; i++) {
        if (shell(cmd, out, sizeof(out)) == 0)
            return 0;
        usleep(100000);
    }
    return -1;
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

static void test_bad_config_keeps_default(void **s)
{
    (void)s;
    result *r = run("pairs", "CUPOOL_FENCE=bogus", "CUPOOL_MAX_RESERVED=lots", NULL);
    assert_int_equal(r->status, 0);
    assert_non_null(strstr(r->err, "cupool: CUPOOL_FENCE=bogus is invalid "
                                   "(expected barrier, poll, sync or none); using poll\n"));
    assert_non_null(strstr(r->err, "cupool: CUPOOL_MAX_RESERVED=lots is invalid"));
}

static void test_disable_passes_through(void **s)
{
    (void)s;
    /* With the pool off, every pair reaches the driver: the scenario's own
     * check (a handful of driver calls) must fail. */
    result *r = run_expecting(1, "pairs", "CUPOOL_DISABLE=1", NULL);
    assert_int_equal(r->status, 1);
    assert_non_null(strstr(r->out, "driver mallocs for 10000 pairs: 10000"));
}

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
    char dirn[] = "/tmp/cupool-fork-XXXXXX", env[96];
    assert_non_null(mkdtemp(dirn));
    snprintf(env, sizeof(env), "CUPOOL_STATS_FILE=%s/s.%%p", dirn);
    result *r = run("sig_fork", env, NULL);
    assert_int_equal(remove_tree(dirn), 0);
    assert_int_equal(r->status, 0);
}

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

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
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
    assert_true(now_s() - t0 < 1.8);
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
        assert_true(took < 1.5);
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
    assert_true(took < 3.0);
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
    assert_non_null(strstr(r->out, "capture ended: 0, every release after it: True (1)"));
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

/* ---- cupool pause and resume ------------------------------------------------- */

/* cupool pause or resume of pid (args: "pause 123") on the simulated
 * driver (the plain build's: cupool-pause is not a sanitizer build), its
 * checkpoint state files in pages/ckpt, failing the calls
 * fail names (SIMCUDA_CKPT_FAIL); its output in out, the driver's calls
 * (one "call pid -> result" line each) in calls. Returns the exit status. */
static int pause_run(const char *args, const char *fail, char *out, size_t len, char *calls,
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
static int pause_state(int pid)
{
    char cmd[256], out[32];
    snprintf(cmd, sizeof(cmd), "cat %s/ckpt/%d 2>/dev/null || echo 0", pages, pid);
    shell(cmd, out, sizeof(out));
    return atoi(out);
}

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

/* ---- an NCCL job: cupool job ------------------------------------------------- */

/* Starts rank of a 3-rank NCCL job (rt_prog job) with its page in the
 * test's directory, the job's unique id in pages/job-id, and waits until it
 * joined; extra environment strings (up to 3, NULL for none) follow. */
static void job_rank_start(child *c, int rank, const char *e1, const char *e2, const char *e3)
{
    static char direnv[128], readyenv[160], idenv[160], rankenv[32];
    char ready[128];
    snprintf(direnv, sizeof(direnv), "CUPOOL_PAGE_DIR=%s", pages);
    snprintf(ready, sizeof(ready), "%s/ready-rank%d", pages, rank);
    snprintf(readyenv, sizeof(readyenv), "READY=%s", ready);
    snprintf(idenv, sizeof(idenv), "JOB_ID=%s/job-id", pages);
    snprintf(rankenv, sizeof(rankenv), "JOB_RANK=%d", rank);
    spawn(c, "job", direnv, readyenv, idenv, rankenv, "JOB_NRANKS=3", e1, e2, e3, NULL);
    wait_for_file(ready);
}

/* Ranks 0 and 1 of the job; the third never starts. With split, each also
 * splits the job with color 5 into a communicator of 2 ranks. */
static void job_start(child c[2], bool split, const char *e0)
{
    const char *sp = split ? "JOB_SPLIT=5" : NULL, *sn = split ? "SIMNCCL_SPLIT_NRANKS=2" : NULL;
    job_rank_start(&c[0], 0, sp, sn, e0);
    job_rank_start(&c[1], 1, sp, sn, NULL);
}

static void job_end(child c[2])
{
    for (int i = 0; i < 2; i++) {
        kill(c[i].pid, SIGTERM);
        assert_int_equal(finish(&c[i], "job", 0)->status, 0);
    }
}

/* cupool job PID's output (text, or --json with json) into out; its exit
 * status. */
static int job_cli(int pid, bool json, char *out, size_t len)
{
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "CUPOOL_PAGE_DIR=%s " READER " job %s%d 2>&1", pages,
             json ? "--json " : "", pid);
    return shell(cmd, out, len);
}

/* Whether out has a row of the table for pid's rank (pid, comm, rank,
 * device 0). */
static bool job_row(const char *out, int pid, int rank)
{
    char row[96];
    snprintf(row, sizeof(row), "  %7d %-16s %4d %6d\n", pid, "rt_prog", rank, 0);
    return strstr(out, row) != NULL;
}

/* Two ranks of a 3-rank job on this node: cupool job of either names the
 * other with its rank, and says the third is elsewhere; --json the same. */
static void test_nccl_job_names_the_other_rank(void **s)
{
    (void)s;
    child c[2];
    job_start(c, false, NULL);
    static char out[16384];
    for (int i = 0; i < 2; i++) {
        assert_int_equal(job_cli(c[i].pid, false, out, sizeof(out)), 0);
        if (!job_row(out, c[1 - i].pid, 1 - i) || !strstr(out, "1 NCCL communicator\n") ||
            !strstr(out, "1 of 3 ranks on other nodes") || !strstr(out, " of 3, device 0"))
            fail_msg("cupool job %d said:\n%s", c[i].pid, out);
    }
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "CUPOOL_PAGE_DIR=%s " READER " job --json %d | python3 -c '"
             "import json,sys; d=json.loads(sys.stdin.read()); c=d[\"communicators\"]; "
             "assert d[\"nccl_comms\"]==1 and len(c)==1, d; c=c[0]; "
             "assert c[\"nranks\"]==3 and c[\"ranks\"]==[{\"rank\":0,\"device\":0,"
             "\"operations\":0,\"suspended\":False}], c; "
             "assert d[\"gate\"]==dict(closed=False,waiting=0,can_suspend=True), d; "
             "assert c[\"peers\"]==[{\"pid\":%d,\"comm\":\"rt_prog\",\"rank\":1,\"device\":0}], c; "
             "assert c[\"ranks_elsewhere\"]==1, c; print(\"ok\")'", pages, c[0].pid, c[1].pid);
    assert_int_equal(shell(cmd, out, sizeof(out)), 0);
    assert_string_equal(out, "ok\n");
    job_end(c);
}

/* A split's child: one id in both ranks (its parent's id and color), its
 * own size; cupool job lists it beside the parent. */
static void test_nccl_job_split(void **s)
{
    (void)s;
    child c[2];
    job_start(c, true, NULL);
    static char out[16384];
    assert_int_equal(job_cli(c[1].pid, false, out, sizeof(out)), 0);
    if (!strstr(out, "2 NCCL communicators\n") || !strstr(out, "rank 1 of 2, device 0") ||
        !strstr(out, "all 2 ranks on this node") || !strstr(out, "1 of 3 ranks on other nodes"))
        fail_msg("cupool job said:\n%s", out);
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "CUPOOL_PAGE_DIR=%s " READER " job --json %d | python3 -c '"
             "import json,sys; d=json.loads(sys.stdin.read()); c=d[\"communicators\"]; "
             "assert sorted(x[\"nranks\"] for x in c)==[2,3], c; "
             "assert all([p[\"pid\"] for p in x[\"peers\"]]==[%d] for x in c), c; "
             "assert len(set(x[\"id\"] for x in c))==2, c; print(\"ok\")'", pages, c[0].pid,
             c[1].pid);
    assert_int_equal(shell(cmd, out, sizeof(out)), 0);
    assert_string_equal(out, "ok\n");
    job_end(c);
}

/* A communicator destroyed leaves the page (and the other rank's cupool job
 * sees its partner gone); a process with none is told apart. */
static void test_nccl_job_destroy(void **s)
{
    (void)s;
    child c[2];
    char destroy[160], done[192];
    snprintf(destroy, sizeof(destroy), "JOB_DESTROY=%s/destroy", pages);
    job_start(c, true, destroy);
    static char out[16384];
    snprintf(done, sizeof(done), "%s/destroy", pages);
    FILE *f = fopen(done, "w");
    assert_non_null(f);
    fclose(f);
    snprintf(done, sizeof(done), "%s/destroy.done", pages);
    wait_for_file(done);
    assert_int_equal(wait_page(c[0].pid, "d[\"process\"][\"nccl_comms\"] == 1"), 0);
    assert_int_equal(job_cli(c[0].pid, false, out, sizeof(out)), 0);
    if (!strstr(out, "1 NCCL communicator\n") || strstr(out, " of 2,"))
        fail_msg("cupool job of the rank that destroyed the split said:\n%s", out);
    assert_int_equal(job_cli(c[1].pid, false, out, sizeof(out)), 0);
    if (!strstr(out, "rank 1 of 2, device 0; 0 operations issued here\n  no other process on "
                "this node holds a rank of it\n  1 of 2 ranks on other nodes"))
        fail_msg("cupool job of the other rank said:\n%s", out);
    job_end(c);
    child plain;
    serve_start(&plain, "plain", NULL, NULL);
    assert_int_equal(job_cli(plain.pid, false, out, sizeof(out)), 1);
    assert_non_null(strstr(out, "holds no NCCL communicator"));
    kill(plain.pid, SIGTERM);
    assert_int_equal(finish(&plain, "serve", 0)->status, 0);
}

/* cupool stat --json: the communicators alive, and per device what NCCL
 * holds and could suspend, where NCCL tells (ncclCommMemStats: rank 0
 * only), else null. */
static void test_nccl_stat_fields(void **s)
{
    (void)s;
    child c[2];
    job_start(c, true, "SIMNCCL_MEMSTATS=1");
    static const char *const cond[] = {
        "d[\"process\"][\"nccl_comms\"] == 2 and d[\"devices\"][0][\"nccl_held\"] == 2 * 2**20"
        " and d[\"devices\"][0][\"nccl_suspendable\"] == 3 * 2**19",
        "d[\"process\"][\"nccl_comms\"] == 2 and d[\"devices\"][0][\"nccl_held\"] is None"
        " and d[\"devices\"][0][\"nccl_suspendable\"] is None",
    };
    for (int i = 0; i < 2; i++)
        if (wait_page(c[i].pid, cond[i]))
            fail_msg("rank %d's page never had: %s", i, cond[i]);
    job_end(c);
}

/* ---- cupool pause of an NCCL job, cupool flush --nccl ------------------------- */

/* Starts both ranks of a 2-rank job (rt_prog job) that all-reduce every
 * every[rank] ticks of 10 ms, counting into pages/count-RANK; e0, e1: one
 * more environment string for each rank, or NULL. */
static void duo_start_with(child c[2], const int every[2], const char *both, const char *e0,
                           const char *e1)
{
    static char direnv[128], readyenv[2][160], idenv[160], rankenv[2][32], everyenv[2][32],
        countenv[2][160], simdir[160];
    snprintf(direnv, sizeof(direnv), "CUPOOL_PAGE_DIR=%s", pages);
    snprintf(idenv, sizeof(idenv), "JOB_ID=%s/duo-id", pages);
    snprintf(simdir, sizeof(simdir), "SIMNCCL_DIR=%s", pages);
    char cmd[256], out[64];
    snprintf(cmd, sizeof(cmd), "rm -f %s/duo-id %s/count-* %s/ready-duo*", pages, pages, pages);
    shell(cmd, out, sizeof(out));
    for (int r = 0; r < 2; r++) {
        snprintf(readyenv[r], sizeof(readyenv[r]), "READY=%s/ready-duo%d", pages, r);
        snprintf(rankenv[r], sizeof(rankenv[r]), "JOB_RANK=%d", r);
        snprintf(everyenv[r], sizeof(everyenv[r]), "JOB_EVERY=%d", every[r]);
        snprintf(countenv[r], sizeof(countenv[r]), "JOB_COUNT=%s/count-%d", pages, r);
        const char *own = r ? e1 : e0;
        spawn(&c[r], "job", direnv, readyenv[r], idenv, rankenv[r], "JOB_NRANKS=2",
              everyenv[r], countenv[r], simdir, "SIMNCCL_MEMSTATS=1", both ? both : own,
              both ? own : NULL, NULL);
    }
    for (int r = 0; r < 2; r++)
        wait_for_file(readyenv[r] + strlen("READY="));
}

static void duo_start(child c[2], const int every[2], const char *e0, const char *e1)
{
    duo_start_with(c, every, NULL, e0, e1);
}

/* The all-reduces rank has issued, as it counted them. */
static long duo_count(int rank)
{
    char path[160], buf[32];
    snprintf(path, sizeof(path), "%s/count-%d", pages, rank);
    slurp(path, buf, sizeof(buf));
    return atol(buf);
}

/* Whether both ranks go on issuing all-reduces (0.3 s). */
static bool duo_runs(void)
{
    long a = duo_count(0), b = duo_count(1);
    usleep(300000);
    return duo_count(0) > a && duo_count(1) > b;
}

/* Whether each rank's communicators (n each) were resumed by cupool's
 * RESUME, not at the rank's next call: none suspended (NCCL says each holds
 * its 1 MiB again), no resume at a call counted. */
static void duo_resumed_explicitly(const child c[2], int n)
{
    char cond[160];
    snprintf(cond, sizeof(cond), "d[\"process\"][\"nccl_lazy_resumes\"] == 0 and "
             "d[\"devices\"][0][\"nccl_held\"] == %d * 2**20", n);
    for (int r = 0; r < 2; r++)
        if (c[r].pid > 0 && wait_page(c[r].pid, cond))
            fail_msg("process %d after the resume: not %s", c[r].pid, cond);
}

/* A two-rank job, one rank three times slower: cupool pause of either
 * rank stops both at the same all-reduce, suspends their communicators
 * (NCCL gives back 768 KiB each), checkpoints both; a collective issued
 * meanwhile waits at the gate until cupool resume. A checkpoint failing on
 * the second rank brings the first back, named, and the job runs on. */
static void test_nccl_job_pause_and_resume(void **s)
{
    (void)s;
    child c[2];
    duo_start(c, (const int[]){1, 3}, NULL, NULL);
    char args[64], out[4096], calls[1024];
    usleep(100000);
    snprintf(args, sizeof(args), "pause %d", c[0].pid);
    int st = pause_run(args, NULL, out, sizeof(out), calls, sizeof(calls));
    print_message("%s%s\n", out, calls);
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, "paused the NCCL job"));
    assert_non_null(strstr(out, "NCCL gave back 1.50 MiB"));
    assert_int_equal(pause_state(c[0].pid), 2);
    assert_int_equal(pause_state(c[1].pid), 2);
    long n0 = duo_count(0), n1 = duo_count(1);
    if (n0 != n1) /* the slower rank caught up to the same all-reduce */
        fail_msg("paused at all-reduces %ld and %ld", n0, n1);
    usleep(300000); /* the next all-reduce waits at the gate */
    assert_int_equal(duo_count(0), n0);
    /* cupool job shows it: the gate closed, a call waiting, the
     * communicator suspended, the operations issued. */
    static char job[8192];
    assert_int_equal(job_cli(c[0].pid, false, job, sizeof(job)), 0);
    char ops[64];
    snprintf(ops, sizeof(ops), "; %ld operations issued here; suspended by cupool", n0);
    if (!strstr(job, "its NCCL gate is closed by cupool, 1 call waiting") || !strstr(job, ops))
        fail_msg("cupool job of a paused rank said:\n%s", job);
    /* A paused job is not flushed; a second controller of the job (here
     * one holding its lock: a rank's page, flock'd) is refused. */
    char cmd[1024];
    snprintf(cmd, sizeof(cmd), "CUPOOL_PAGE_DIR=%s " READER " flush --nccl %d 2>&1", pages,
             c[0].pid);
    assert_int_equal(shell(cmd, out, sizeof(out)), 1);
    assert_non_null(strstr(out, "is paused (cupool pause): cupool resume it first"));
    snprintf(cmd, sizeof(cmd), "flock -n %s/cupool-%d/$(stat -L -c %%i /proc/self/ns/pid)-%d "
             "-c 'CUPOOL_PAGE_DIR=%s " READER " flush --nccl %d' 2>&1", pages, (int)getuid(),
             c[1].pid, pages, c[0].pid);
    assert_int_equal(shell(cmd, out, sizeof(out)), 1);
    if (!strstr(out, "another cupool pause, resume or flush --nccl of this job is under way"))
        fail_msg("a second controller: %s", out);
    snprintf(args, sizeof(args), "resume %d", c[1].pid);
    st = pause_run(args, NULL, out, sizeof(out), calls, sizeof(calls));
    print_message("%s\n", out);
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, "communicators resumed"));
    assert_int_equal(pause_state(c[0].pid), 0);
    assert_true(duo_runs());
    duo_resumed_explicitly(c, 1);
    /* The second rank's checkpoint fails: the first is restored. */
    char fail[64], names[96];
    snprintf(fail, sizeof(fail), "checkpoint@%d", c[1].pid);
    snprintf(args, sizeof(args), "pause %d", c[0].pid);
    st = pause_run(args, fail, out, sizeof(out), calls, sizeof(calls));
    print_message("%s%s\n", out, calls);
    assert_int_equal(st, 1);
    snprintf(names, sizeof(names), "process %d (a rank of it) could not be checkpointed",
             c[1].pid);
    assert_non_null(strstr(out, names));
    snprintf(names, sizeof(names), "process %d restored and unlocked, process %d left running",
             c[0].pid, c[1].pid);
    assert_non_null(strstr(out, names));
    assert_non_null(strstr(out, "the communicators resumed and the gates open"));
    assert_null(strstr(out, "not paused, nothing to do"));
    assert_int_equal(pause_state(c[0].pid), 0);
    assert_int_equal(pause_state(c[1].pid), 0);
    assert_true(duo_runs());
    duo_resumed_explicitly(c, 1);
    job_end(c);
}

/* A suspend refused on one rank rolls the job back; an NCCL without
 * ncclCommSuspend is refused with nothing done; cupool flush --nccl
 * suspends the idle communicators and the next all-reduce resumes them. */
/* A two-rank job started with env in both ranks: cupool pause refuses it
 * before anything is done (no driver lock), saying says; it runs on. */
static void duo_refused(const char *env, const char *says)
{
    child c[2];
    char args[64], out[4096], calls[1024];
    duo_start(c, (const int[]){2, 2}, env, env);
    snprintf(args, sizeof(args), "pause %d", c[0].pid);
    int st = pause_run(args, NULL, out, sizeof(out), calls, sizeof(calls));
    print_message("%s%s\n", out, calls);
    assert_int_equal(st, 1);
    assert_non_null(strstr(out, says));
    assert_null(strstr(calls, "lock"));
    assert_true(duo_runs());
    job_end(c);
}

static void test_nccl_job_suspend_refusals_and_flush(void **s)
{
    (void)s;
    child c[2];
    char args[64], out[4096], calls[1024], cmd[512], names[96];
    duo_start(c, (const int[]){2, 2}, NULL, "SIMNCCL_SUSPEND_FAIL=1");
    snprintf(args, sizeof(args), "pause %d", c[0].pid);
    int st = pause_run(args, NULL, out, sizeof(out), calls, sizeof(calls));
    print_message("%s%s\n", out, calls);
    assert_int_equal(st, 1);
    snprintf(names, sizeof(names), "process %d could not suspend", c[1].pid);
    assert_non_null(strstr(out, names));
    assert_null(strstr(calls, "lock"));
    assert_true(duo_runs());
    duo_resumed_explicitly(c, 1);
    job_end(c);
    /* Two communicators a rank (a split), rank 2 refusing its second
     * suspend: its first stays suspended for the controller, which
     * resumes both ranks together (a rank resuming on its own waited for
     * the other until NCCL's timeout, 10 s here, which the test's 5 s
     * bound on the pause catches). */
    duo_start_with(c, (const int[]){2, 2}, "JOB_SPLIT=5", NULL, "SIMNCCL_SUSPEND_FAIL=after1");
    snprintf(args, sizeof(args), "pause %d", c[0].pid);
    double t0 = now_s();
    st = pause_run(args, NULL, out, sizeof(out), calls, sizeof(calls));
    double took = now_s() - t0;
    print_message("%s%s(%.2f s)\n", out, calls, took);
    assert_int_equal(st, 1);
    snprintf(names, sizeof(names), "process %d could not suspend", c[1].pid);
    assert_non_null(strstr(out, names));
    assert_null(strstr(calls, "lock"));
    assert_true(took < 5);
    assert_true(duo_runs());
    job_end(c);
    /* 17 communicators a rank: its page lists 16, the gate could set no
     * target for the 17th. */
    duo_refused("JOB_SPLITS=16", "holds 17 NCCL communicators, of which its page lists 16");
    duo_refused("SIMNCCL_LIB=libnccl-nosuspend.so", "has no ncclCommSuspend");
    duo_start(c, (const int[]){5, 5}, NULL, NULL);
    snprintf(cmd, sizeof(cmd), "CUPOOL_PAGE_DIR=%s " READER " flush --nccl %d 2>&1", pages,
             c[1].pid);
    st = shell(cmd, out, sizeof(out));
    print_message("%s\n", out);
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, "NCCL gave back 1.50 MiB"));
    assert_true(duo_runs()); /* each all-reduce resumed its communicator first */
    assert_int_equal(wait_page(c[0].pid, "d[\"process\"][\"nccl_lazy_resumes\"] == 1"), 0);
    job_end(c);
}

/* One process holding both ranks of a 2-rank job, one thread driving them
 * in a group: cupool resume resumes the two together (one waiting for the
 * other, which the same thread resumed next, deadlocked until NCCL's
 * timeout); after cupool flush --nccl, the next group's start resumes
 * both before the group. */
static void test_nccl_job_two_ranks_in_one_process(void **s)
{
    (void)s;
    child c[2];
    static char direnv[128], readyenv[160], idenv[160], countenv[160], simdir[160];
    snprintf(direnv, sizeof(direnv), "CUPOOL_PAGE_DIR=%s", pages);
    snprintf(readyenv, sizeof(readyenv), "READY=%s/ready-duo0", pages);
    snprintf(idenv, sizeof(idenv), "JOB_ID=%s/duo-id", pages);
    snprintf(countenv, sizeof(countenv), "JOB_COUNT=%s/count-0", pages);
    snprintf(simdir, sizeof(simdir), "SIMNCCL_DIR=%s", pages);
    spawn(&c[0], "job", direnv, readyenv, idenv, "JOB_RANK=0", "JOB_NRANKS=2", "JOB_LOCAL=2",
          "JOB_EVERY=2", countenv, simdir, "SIMNCCL_MEMSTATS=1", "SIMNCCL_RESUME_TIMEOUT=2",
          NULL);
    c[1].pid = 0;
    wait_for_file(readyenv + strlen("READY="));
    char args[64], out[4096], calls[1024], cmd[512];
    snprintf(args, sizeof(args), "pause %d", c[0].pid);
    int st = pause_run(args, NULL, out, sizeof(out), calls, sizeof(calls));
    print_message("%s%s\n", out, calls);
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, "NCCL gave back 1.50 MiB"));
    snprintf(args, sizeof(args), "resume %d", c[0].pid);
    st = pause_run(args, NULL, out, sizeof(out), calls, sizeof(calls));
    print_message("%s\n", out);
    assert_int_equal(st, 0);
    assert_non_null(strstr(out, "communicators resumed"));
    long n = duo_count(0);
    usleep(300000);
    assert_true(duo_count(0) > n);
    duo_resumed_explicitly(c, 2);
    snprintf(cmd, sizeof(cmd), "CUPOOL_PAGE_DIR=%s " READER " flush --nccl %d 2>&1", pages,
             c[0].pid);
    st = shell(cmd, out, sizeof(out));
    print_message("%s\n", out);
    assert_int_equal(st, 0);
    n = duo_count(0);
    usleep(300000);
    assert_true(duo_count(0) > n);
    assert_int_equal(wait_page(c[0].pid, "d[\"process\"][\"nccl_lazy_resumes\"] == 2 and "
                               "d[\"devices\"][0][\"nccl_held\"] == 2 * 2**20"), 0);
    kill(c[0].pid, SIGTERM);
    assert_int_equal(finish(&c[0], "job", 0)->status, 0);
}

/* ---- CUPOOL_GROUP ------------------------------------------------------------ */

/* Two processes take phases in turn on one simulated device of 100 MiB
 * (SIMCUDA_SHARED), each phase needing 60 MiB, which the phase before
 * leaves in its process's cache. extra: the group's settings, or NULL.
 * Returns how many of the two got every phase; their statistics (JSON at
 * exit) in pages/stats.a and stats.b. */
static int group_phases(const char *g1, const char *g2)
{
    static char dirv[128], shared[160], sa[160], sb[160];
    snprintf(dirv, sizeof(dirv), "PHASE_DIR=%s", pages);
    snprintf(shared, sizeof(shared), "SIMCUDA_SHARED=%s/device", pages);
    snprintf(sa, sizeof(sa), "CUPOOL_STATS_FILE=%s/stats.a", pages);
    snprintf(sb, sizeof(sb), "CUPOOL_STATS_FILE=%s/stats.b", pages);
    char cmd[1024], out[64];
    snprintf(cmd, sizeof(cmd), "rm -f %s/device %s/a.* %s/b.* %s/stats.*", pages, pages,
             pages, pages);
    assert_int_equal(shell(cmd, out, sizeof(out)), 0);
    child a, b;
    spawn(&a, "phases", dirv, shared, sa, "SIMCUDA_CAPACITY=104857600", "PHASE_ME=a",
          "PHASE_OTHER=b", "PHASE_FIRST=1", "CUPOOL_STATS_AT_EXIT=1",
          "CUPOOL_STATS_FORMAT=json", g1, g2, NULL);
    spawn(&b, "phases", dirv, shared, sb, "SIMCUDA_CAPACITY=104857600", "PHASE_ME=b",
          "PHASE_OTHER=a", "CUPOOL_STATS_AT_EXIT=1", "CUPOOL_STATS_FORMAT=json", g1, g2,
          NULL);
    int ok = finish(&a, "phases a", 0)->status == 0;
    return ok + (finish(&b, "phases b", 0)->status == 0);
}

/* Without a group the second process fails (the first holds its cache);
 * as a group both finish: each, refused by the group's budget, asked the
 * other to flush, and the other did. */
static void test_group_phases(void **s)
{
    (void)s;
    assert_int_equal(group_phases(NULL, NULL), 1);
    assert_int_equal(group_phases("CUPOOL_GROUP=phases", "CUPOOL_GROUP_MAX_RESERVED=100M"), 2);
    char cmd[512], out[256];
    snprintf(cmd, sizeof(cmd), "cat %s/stats.a %s/stats.b | python3 -c 'import json,sys; "
             "p=[json.loads(l)[\"process\"] for l in sys.stdin]; "
             "print(all(x[\"group_reclaims\"] >= 1 and x[\"group_flushes\"] >= 1 and "
             "x[\"flushed\"] >= 60 << 20 for x in p), p[0][\"group_reclaims\"] + "
             "p[1][\"group_reclaims\"])'", pages, pages);
    assert_int_equal(shell(cmd, out, sizeof(out)), 0);
    print_message("group phases: %s", out);
    assert_non_null(strstr(out, "True"));
}

/* Eight processes race on one budget of 64 MiB: a reader that sums what
 * every member holds, under the group's lock, never sees more. */
static void test_group_race(void **s)
{
    (void)s;
    child c[8];
    for (int i = 0; i < 8; i++)
        spawn(&c[i], "group_race", "CUPOOL_GROUP=race", "CUPOOL_GROUP_MAX_RESERVED=64M",
              "CUPOOL_LOG=off", "RACE_ITERS=300", NULL);
    char cmd[512], out[256];
    snprintf(cmd, sizeof(cmd), "for i in $(seq 200); do CUPOOL_PAGE_DIR=%s " READER
             " stat --group race --json 2>/dev/null; done | python3 -c 'import json,sys; "
             "r=[json.loads(l) for l in sys.stdin]; "
             "h=[sum(d[\"held\"] for m in g[\"members\"] for d in m[\"devices\"]) for g in r]; "
             "print(len(r), max(h), sum(x > 64 << 20 for x in h))'", run_pages);
    assert_int_equal(shell(cmd, out, sizeof(out)), 0);
    print_message("readings, most held, readings over the budget: %s", out);
    int n = 0;
    unsigned long most = 0, over = 1;
    assert_int_equal(sscanf(out, "%d %lu %lu", &n, &most, &over), 3);
    assert_true(n > 10 && most > 0);
    assert_int_equal(over, 0);
    for (int i = 0; i < 8; i++)
        assert_int_equal(finish(&c[i], "group_race", 0)->status, 0);
}

/* A member killed with SIGKILL holds nothing: readers no longer list it,
 * and a new member gets the room its share held. */
static void test_group_killed_member(void **s)
{
    (void)s;
    char cmd[512], out[1024];
    child a, b;
    serve_start(&a, "ga", "CUPOOL_GROUP=killed", "CUPOOL_GROUP_MAX_RESERVED=16M");
    kill(a.pid, SIGKILL);
    finish(&a, "serve", 128 + SIGKILL);
    double t0 = now_s();
    snprintf(cmd, sizeof(cmd), "CUPOOL_PAGE_DIR=%s " READER " stat --group killed", pages);
    assert_int_equal(shell(cmd, out, sizeof(out)), 0);
    assert_true(now_s() - t0 < 1.0);
    assert_non_null(strstr(out, "0 members"));
    serve_start(&b, "gb", "CUPOOL_GROUP=killed", "CUPOOL_GROUP_MAX_RESERVED=16M");
    kill(b.pid, SIGTERM);
    result *r = finish(&b, "serve", 0);
    assert_int_equal(r->status, 0);
    assert_null(strstr(r->err, "out of memory"));
}

/* A member whose program is done but whose process still holds its
 * framework's cache (PyTorch keeps it until the process goes; a flush
 * asked of a finalizing interpreter returns nothing) is marked ending, and
 * the member it refused waits for it to go instead of failing: python
 * caches 60 MiB of a 100 MiB device shared with phases, and ends slowly. */
static void test_group_ending_member(void **s)
{
    (void)s;
    if (runtime)
        skip_because(SKIP_SANITIZER_PYTHON);
    static char simenv[PATH_MAX + 16], ready[160], dirv[128], shared[160];
    sim_lib_env(simenv, sizeof(simenv));
    snprintf(ready, sizeof(ready), "READY=%s/a.0", pages);
    snprintf(dirv, sizeof(dirv), "PHASE_DIR=%s", pages);
    snprintf(shared, sizeof(shared), "SIMCUDA_SHARED=%s/device", pages);
    char *env[] = {simenv, ready, shared, "SIMCUDA_CAPACITY=104857600", "CUPOOL_GROUP=ending",
                   "CUPOOL_GROUP_MAX_RESERVED=100M", NULL};
    child a, b;
    python_start(&a, "test/fw_prog.py", "ending", env);
    spawn(&b, "phases", dirv, shared, "SIMCUDA_CAPACITY=104857600", "PHASES=1", "PHASE_ME=b",
          "PHASE_OTHER=a", "CUPOOL_GROUP=ending", "CUPOOL_GROUP_MAX_RESERVED=100M", NULL);
    assert_int_equal(finish(&a, "fw_prog.py ending", 0)->status, 0);
    result *r = finish(&b, "phases", 0);
    assert_int_equal(r->status, 0);
    assert_non_null(strstr(r->out, "phase 0: 15 of 15 blocks"));
}

/* ---- CUPOOL_GROUP: waiting for a turn ---------------------------------------- */

static char turn_dir[160];

/* rt_prog turn as member ME of group NAME (a budget of 100 MiB on a
 * simulated device of 200 MiB that the test's members share, so that the
 * budget is what refuses), with up to four more settings (NULL for none). */
static void turn_start(child *c, const char *name, const char *me, const char *e1,
                       const char *e2, const char *e3, const char *e4)
{
    char grp[96], dirv[200], mev[64], shared[200];
    snprintf(grp, sizeof(grp), "CUPOOL_GROUP=%s", name);
    snprintf(dirv, sizeof(dirv), "TURN_DIR=%s", turn_dir);
    snprintf(mev, sizeof(mev), "TURN_ME=%s", me);
    snprintf(shared, sizeof(shared), "SIMCUDA_SHARED=%s/device", turn_dir);
    spawn(c, "turn", grp, "CUPOOL_GROUP_MAX_RESERVED=100M", "SIMCUDA_CAPACITY=209715200",
          dirv, mev, shared, e1, e2, e3, e4, NULL);
}

/* A fresh directory for the turns of one test, named tag. */
static void turn_fresh(const char *tag)
{
    snprintf(turn_dir, sizeof(turn_dir), "%s/turn-%s", pages, tag);
    remove_tree(turn_dir);
    assert_int_equal(mkdir(turn_dir, 0700), 0);
}

/* Waits for the file <turn_dir>/<name>, then settle_ms more. */
static void turn_wait(const char *name, int settle_ms)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/%s", turn_dir, name);
    wait_for_file_then(path, (useconds_t)settle_ms * 1000);
}

/* Waits (up to 10 s) for `cupool stat --group group` to show pid waiting
 * in place (1 = next). */
static void turn_queued(const char *group, int pid, int place)
{
    char cmd[512], out[4096], want[96];
    snprintf(cmd, sizeof(cmd), "CUPOOL_PAGE_DIR=%s " READER " stat --group %s", run_pages,
             group);
    snprintf(want, sizeof(want), "waiting %d: pid %d ", place, pid);
    for (int i = 0; i < 100; i++) {
        if (shell(cmd, out, sizeof(out)) == 0 && strstr(out, want))
            return;
        usleep(100000);
    }
    fail_msg("no \"%s\" in:\n%s", want, out);
}

static void turn_touch(const char *name)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/%s", turn_dir, name);
    close(open(path, O_WRONLY | O_CREAT, 0600));
}

/* The time (CLOCK_REALTIME ns) on the line of out that starts with what. */
static uint64_t turn_time(const char *out, const char *what)
{
    const char *at = strstr(out, what);
    assert_non_null(at);
    unsigned long long t = 0;
    assert_int_equal(sscanf(at + strlen(what), " %llu", &t), 1);
    return t;
}

/* A member refused because another member's memory is in use waits for
 * its turn, shown by cupool stat --group, and gets the memory as the
 * holder frees it: at once when the holder exits, through an ask when it
 * stays on with the memory in its cache. With CUPOOL_GROUP_WAIT=0 (the
 * behaviour before) it fails; past a short CUPOOL_GROUP_WAIT it fails
 * and says why. */
static void test_group_turn_wait(void **s)
{
    (void)s;
    static const char *const linger[] = {"TURN_LINGER_MS=0", "TURN_LINGER_MS=1500"};
    static char aout[sizeof(((result *)0)->out)];
    char cmd[512], out[4096], want[128];
    for (int k = 0; k < 2; k++) {
        turn_fresh(k ? "linger" : "exit");
        child a, b;
        turn_start(&a, "tw", "a", "TURN_HOLD_MS=800", linger[k], NULL, NULL);
        turn_wait("a.got", 0);
        turn_start(&b, "tw", "b", "TURN_HOLD_MS=0", NULL, NULL, NULL);
        turn_wait("b.asking", 200);
        snprintf(cmd, sizeof(cmd), "CUPOOL_PAGE_DIR=%s " READER " stat --group tw", run_pages);
        assert_int_equal(shell(cmd, out, sizeof(out)), 0);
        snprintf(want, sizeof(want), "waiting 1: pid %d (rt_prog) for 60.0M on device 0, for ",
                 b.pid);
        if (!strstr(out, want))
            fail_msg("no \"%s\" in:\n%s", want, out);
        snprintf(aout, sizeof(aout), "%s", finish(&a, "turn a", 0)->out);
        result *r = finish(&b, "turn b", 0);
        assert_int_equal(r->status, 0);
        double ms = (double)(turn_time(r->out, "got") - turn_time(aout, "freeing")) / 1e6;
        print_message("the holder %s: the waiter got the memory %.1f ms after its free\n",
                      k ? "stays" : "exits", ms);
        assert_true(ms >= 0 && ms < (k ? 250 : 150));
    }
    turn_fresh("nowait");
    static const char *const waits[] = {"CUPOOL_GROUP_WAIT=0", "CUPOOL_GROUP_WAIT=300ms"};
    for (int k = 0; k < 2; k++) {
        child a, b;
        turn_start(&a, "tw", k ? "a1" : "a0", "TURN_HOLD_MS=2000", NULL, NULL, NULL);
        turn_wait(k ? "a1.got" : "a0.got", 0);
        turn_start(&b, "tw", k ? "b1" : "b0", waits[k], NULL, NULL, NULL);
        result *r = finish(&b, "turn b", 1);
        assert_int_equal(r->status, 1);
        unsigned long ms = 0;
        assert_int_equal(sscanf(strstr(r->out, "refused after"), "refused after %lu", &ms), 1);
        print_message("%s: refused after %lu ms\n", waits[k], ms);
        if (k) {
            assert_true(ms >= 300 && ms < 1500);
            assert_non_null(strstr(r->err, "stayed in use for all of CUPOOL_GROUP_WAIT"));
        }
        assert_int_equal(finish(&a, "turn a", 0)->status, 0);
    }
}

/* Waiters get their turns in the order they came: four members ask for
 * 60 MiB of a 100 MiB budget one after the other (each queued before the
 * next starts) while a fifth holds 60 MiB, each taking its turn for
 * 100 ms (in order by chance: 1 in 24). */
static void test_group_turn_fifo(void **s)
{
    (void)s;
    turn_fresh("fifo");
    char go[256];
    snprintf(go, sizeof(go), "TURN_UNTIL=%s/go", turn_dir);
    enum { N = 4 };
    child a, w[N];
    static const char *const names[N] = {"w0", "w1", "w2", "w3"};
    turn_start(&a, "tf", "a", go, NULL, NULL, NULL);
    turn_wait("a.got", 0);
    for (int i = 0; i < N; i++) {
        char asking[32];
        turn_start(&w[i], "tf", names[i], "TURN_HOLD_MS=100", NULL, NULL, NULL);
        snprintf(asking, sizeof(asking), "%s.asking", names[i]);
        turn_wait(asking, 0);
        /* Queued, not only asking: a start slower than the settle it
         * once had (TSan, a loaded machine) let a later one in first. */
        turn_queued("tf", w[i].pid, i + 1);
    }
    turn_touch("go");
    assert_int_equal(finish(&a, "turn a", 0)->status, 0);
    uint64_t got[N];
    for (int i = 0; i < N; i++) {
        result *r = finish(&w[i], "turn w", 0);
        assert_int_equal(r->status, 0);
        got[i] = turn_time(r->out, "got");
    }
    for (int i = 1; i < N; i++) {
        print_message("turn %d at %+.0f ms\n", i, ((double)got[i] - (double)got[i - 1]) / 1e6);
        assert_true(got[i - 1] < got[i]);
    }
}

/* Two members each hold memory and each wait for the other's: the last to
 * arrive fails at once, its report naming both and the deadlock; the
 * other then gets its turn. */
static void test_group_turn_deadlock(void **s)
{
    (void)s;
    turn_fresh("deadlock");
    char after_b[256], after_a[256];
    snprintf(after_b, sizeof(after_b), "TURN_MORE_AFTER=%s/b.got", turn_dir);
    snprintf(after_a, sizeof(after_a), "TURN_MORE_AFTER=%s/a.more", turn_dir);
    child a, b;
    turn_start(&a, "td", "a", "TURN_MORE_MIB=32", after_b, "TURN_HOLD_MS=100", NULL);
    turn_wait("a.got", 0);
    turn_start(&b, "td", "b", "TURN_MIB=32", "TURN_MORE_MIB=32", after_a, NULL);
    result *r = finish_within(&b, "turn b", 1, 30, "its refusal at once (the group's deadlock "
                              "check, group_wait_stuck)");
    assert_int_equal(r->status, 1);
    unsigned long ms = 0;
    assert_int_equal(sscanf(strstr(r->out, "refused after"), "refused after %lu", &ms), 1);
    print_message("the last to arrive failed after %lu ms\n", ms);
    assert_true(ms < 1000);
    assert_non_null(strstr(r->err, "(a deadlock)"));
    char pa[64], pb[64];
    snprintf(pa, sizeof(pa), "pid %d (rt_prog) holds 60.00 MiB", a.pid);
    snprintf(pb, sizeof(pb), "pid %d (rt_prog) holds 32.00 MiB", b.pid);
    if (!strstr(r->err, pa) || !strstr(r->err, pb))
        fail_msg("the report names not both:\n%s", r->err);
    r = finish_within(&a, "turn a", 0, 30, "its turn once the other member failed");
    assert_int_equal(r->status, 0);
    assert_non_null(strstr(r->out, "got more"));
}

/* A waiter killed at the head of the queue holds up nobody; a holder
 * killed gives its memory to the waiter at once. */
static void test_group_turn_killed(void **s)
{
    (void)s;
    turn_fresh("killed");
    char go[256];
    snprintf(go, sizeof(go), "TURN_UNTIL=%s/go", turn_dir);
    child a, b, c;
    turn_start(&a, "tk", "a", go, NULL, NULL, NULL);
    turn_wait("a.got", 0);
    turn_start(&b, "tk", "b", "TURN_HOLD_MS=0", NULL, NULL, NULL);
    turn_wait("b.asking", 100);
    turn_start(&c, "tk", "c", "TURN_HOLD_MS=0", NULL, NULL, NULL);
    turn_wait("c.asking", 100);
    kill(b.pid, SIGKILL);
    finish(&b, "turn b", 128 + SIGKILL);
    turn_touch("go");
    assert_int_equal(finish_within(&a, "turn a", 0, 30, "its end once told to")->status, 0);
    assert_int_equal(finish_within(&c, "turn c", 0, 30, "its turn past the killed waiter "
                                   "at the head of the queue")->status, 0);
    turn_fresh("killed-holder");
    snprintf(go, sizeof(go), "TURN_UNTIL=%s/never", turn_dir);
    turn_start(&a, "tk", "a", go, NULL, NULL, NULL);
    turn_wait("a.got", 0);
    turn_start(&b, "tk", "b", "TURN_HOLD_MS=0", NULL, NULL, NULL);
    turn_wait("b.asking", 200);
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    uint64_t killed = (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
    kill(a.pid, SIGKILL);
    finish(&a, "turn a", 128 + SIGKILL);
    result *r = finish_within(&b, "turn b", 0, 30, "the memory of the holder killed");
    assert_int_equal(r->status, 0);
    double ms = (double)(turn_time(r->out, "got") - killed) / 1e6;
    print_message("the holder killed: the waiter got the memory %.0f ms after\n", ms);
    assert_true(ms < 500);
}

/* One process alone in a group on a 100 MiB simulated device asks for
 * 60 MiB: what the group's budget lets it have, and `stat --group` after
 * (the segment outlives its members). */
static int group_budget_got(const char *name, const char *cap, const char *cap0, char *stat,
                            size_t len, int expect)
{
    static char group[96], shared[160], dirv[128];
    snprintf(group, sizeof(group), "CUPOOL_GROUP=%s", name);
    snprintf(shared, sizeof(shared), "SIMCUDA_SHARED=%s/device-%s", pages, name);
    snprintf(dirv, sizeof(dirv), "PHASE_DIR=%s", pages);
    child c;
    spawn(&c, "phases", dirv, shared, "SIMCUDA_CAPACITY=104857600", "PHASES=1",
          "PHASE_ME=x", "PHASE_OTHER=y", "PHASE_FIRST=1", group, cap, cap0, NULL);
    result *r = finish(&c, "phases", expect);
    assert_int_equal(r->status, expect);
    int got = -1;
    assert_int_equal(sscanf(r->out, "phase 0: %d of", &got), 1);
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "CUPOOL_PAGE_DIR=%s " READER " stat --group %s", run_pages, name);
    assert_int_equal(shell(cmd, stat, len), 0);
    return got;
}

/* A budget per device: a percentage of the device's memory, and a
 * device's own budget over the one for every device. */
static void test_group_budget_forms(void **s)
{
    (void)s;
    char out[1024];
    assert_int_equal(group_budget_got("pct", "CUPOOL_GROUP_MAX_RESERVED=50%", NULL, out,
                                      sizeof(out), 1), 12);
    assert_non_null(strstr(out, "budget 50% per device"));
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "CUPOOL_PAGE_DIR=%s " READER " top --count 1 --group pct",
             run_pages);
    assert_int_equal(shell(cmd, out, sizeof(out)), 0);
    assert_non_null(strstr(out, "cupool top"));
    assert_non_null(strstr(out, "\ngroup pct: budget 50% per device, 0 members"));
    snprintf(cmd, sizeof(cmd), "CUPOOL_PAGE_DIR=%s " READER " top --count 1 --group nosuch",
             run_pages);
    assert_int_equal(shell(cmd, out, sizeof(out)), 1);
    assert_int_equal(group_budget_got("dev0", "CUPOOL_GROUP_MAX_RESERVED=8M",
                                      "CUPOOL_GROUP_MAX_RESERVED_0=80%", out, sizeof(out), 0),
                     15);
    assert_non_null(strstr(out, "budget 80% per device"));
    assert_int_equal(group_budget_got("dev1", "CUPOOL_GROUP_MAX_RESERVED=40M",
                                      "CUPOOL_GROUP_MAX_RESERVED_1=80M", out, sizeof(out), 1),
                     10);
    assert_non_null(strstr(out, "budget 40.00 MiB per device, 80.00 MiB on device 1"));
}

/* A segment another version wrote, or garbage, is refused in one line and
 * the process runs on under its own cap. */
static void test_group_corrupt_segment(void **s)
{
    (void)s;
    char path[256], direnv[128];
    snprintf(path, sizeof(path), "%s/cupool-%u", pages, (unsigned)geteuid());
    mkdir(path, 0700);
    snprintf(path, sizeof(path), "%s/cupool-%u/group-%lu-bad", pages, (unsigned)geteuid(),
             pid_ns_ino());
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    char junk[4096];
    memset(junk, 0x5a, sizeof(junk));
    assert_int_equal(write(fd, junk, sizeof(junk)), (ssize_t)sizeof(junk));
    close(fd);
    snprintf(direnv, sizeof(direnv), "CUPOOL_PAGE_DIR=%s", pages);
    result *r = run("pairs", direnv, "CUPOOL_GROUP=bad", "CUPOOL_GROUP_MAX_RESERVED=1G", NULL);
    assert_int_equal(r->status, 0);
    assert_non_null(strstr(r->err, "CUPOOL_GROUP=bad: cannot join: a file there is not a "
                                   "group segment of this user"));
}

/* Three members of group name (a budget of 8 MiB) race, their pages in
 * the test's directory: how many requests they were refused together.
 * None may say it could not join. */
/* Memory passed on and refused says which budget refused: the cap and its
 * size, or the group's budget and who holds it (it said "the group's
 * budget (CUPOOL_GROUP); the cap 0 B would be exceeded"). */
static void test_driver_passed_refusal_names_its_budget(void **s)
{
    (void)s;
    program = "drv_prog";
    result *r = run("create_refused", "CUPOOL_MAX_RESERVED=8M", NULL);
    assert_int_equal(r->status, 0);
    assert_non_null(strstr(r->err, "cuMemCreate(10.00 MiB) refused: the cap 8.00 MiB would "
                                   "be exceeded"));
    static char direnv[128];
    snprintf(direnv, sizeof(direnv), "CUPOOL_PAGE_DIR=%s", pages);
    r = run("create_refused", direnv, "CUPOOL_GROUP=passed", "CUPOOL_GROUP_MAX_RESERVED=8M",
            NULL);
    program = "rt_prog";
    assert_int_equal(r->status, 0);
    assert_non_null(strstr(r->err, "cuMemCreate(10.00 MiB) refused: the group's budget "
                                   "(CUPOOL_GROUP) would be exceeded"));
    assert_non_null(strstr(r->err, "group passed: budget 8.00 MiB"));
    assert_null(strstr(r->err, "the cap"));
}

#define GROUP_CAUSE "  cause: the group's budget"

/* How many times needle occurs in hay. */
static int occurrences(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = hay; (p = strstr(p, needle)); p += strlen(needle))
        n++;
    return n;
}

/* members members of group name race on its budget (the size, as
 * CUPOOL_GROUP_MAX_RESERVED takes it), each under cap (its own
 * CUPOOL_MAX_RESERVED, or NULL), with the default segment sizes (larger
 * than most requests); the refusals. Every report gives cause (a line's
 * start), or, where cause is NULL, none names the group's budget; none
 * says never. Before, the report judged by the budgets as they were
 * by then (members' memory moves, a segment is larger than the request):
 * about 1 in 10 blamed CUPOOL_MAX_RESERVED, set or not, where the group's
 * budget refused. */
static int group_members_refused(const char *name, int members, const char *budget,
                                 const char *cap, const char *cause, const char *never)
{
    static char group[96], direnv[128], budget_env[96], cap_env[96];
    snprintf(group, sizeof(group), "CUPOOL_GROUP=%s", name);
    snprintf(direnv, sizeof(direnv), "CUPOOL_PAGE_DIR=%s", pages);
    snprintf(budget_env, sizeof(budget_env), "CUPOOL_GROUP_MAX_RESERVED=%s", budget);
    snprintf(cap_env, sizeof(cap_env), "CUPOOL_MAX_RESERVED=%s", cap ? cap : "");
    child c[3];
    assert_true(members >= 1 && members <= 3);
    for (int i = 0; i < members; i++)
        spawn(&c[i], "group_race", direnv, group, budget_env, "CUPOOL_GROUP_WAIT=0",
              "CUPOOL_LOG=error", "RACE_ITERS=50", "CUPOOL_SMALL_SEGMENT=8M",
              "CUPOOL_MID_MAX=10M", cap ? cap_env : NULL, NULL);
    int refused = 0, causes = 0;
    for (int i = 0; i < members; i++) {
        result *r = finish(&c[i], "group_race", 0);
        int got = -1;
        assert_int_equal(r->status, 0);
        if (strstr(r->err, "cannot join"))
            fail_msg("member %d: %s", i, r->err);
        assert_int_equal(sscanf(r->out, "refused %d of", &got), 1);
        refused += got;
        int n = occurrences(r->err, "  cause: ");
        int named = occurrences(r->err, cause ? cause : "  cause: the group's budget");
        causes += n;
        if (never && strstr(r->err, never))
            fail_msg("member %d (cap %s, group %s): a report says \"%s\":\n%s", i,
                     cap ? cap : "none", budget, never, r->err);
        if (named != (cause ? n : 0))
            fail_msg("member %d (cap %s, group %s): %d of %d reports say \"%s\":\n%s", i,
                     cap ? cap : "none", budget, named, n,
                     cause ? cause : "  cause: the group's budget", r->err);
    }
    /* The log's rate limit may suppress some reports, never add one. */
    assert_true(causes > 0 && causes <= refused);
    return refused;
}

/* Another user made the user's page directory first (as root: a directory
 * of uid 65534 open to all; else one of the user's open to all), which
 * lasts until root removes it. A group still meets, where no other user
 * can write: in $XDG_RUNTIME_DIR/cupool, or without it in
 * $HOME/.cache/cupool (the file named with the boot's id), where `cupool
 * stat --group` finds it too, and its budget holds: the three members are
 * refused requests as without the squat (each ran alone under its own cap
 * before: 0 refused). HOME and XDG_RUNTIME_DIR are the test's own for its
 * length: the children inherit them. */
static void test_group_squatted_directory(void **s)
{
    (void)s;
    char squat[128], rundir[128], home[128], cmd[1024], out[2048], want[128];
    char *was = getenv("HOME"), old_home[512], old_run[512];
    snprintf(old_home, sizeof(old_home), "%s", was ? was : "/");
    was = getenv("XDG_RUNTIME_DIR");
    snprintf(old_run, sizeof(old_run), "%s", was ? was : "");
    snprintf(squat, sizeof(squat), "%s/cupool-%u", pages, (unsigned)geteuid());
    assert_int_equal(mkdir(squat, 0777), 0);
    assert_int_equal(chmod(squat, 0777), 0);
    if (geteuid() == 0)
        assert_int_equal(chown(squat, 65534, 65534), 0);
    snprintf(rundir, sizeof(rundir), "%s/run", pages);
    snprintf(home, sizeof(home), "%s/home", pages);
    assert_int_equal(mkdir(rundir, 0700), 0);
    assert_int_equal(mkdir(home, 0755), 0);
    setenv("XDG_RUNTIME_DIR", rundir, 1);
    setenv("HOME", home, 1);
    int refused = group_members_refused("squat", 3, "8M", NULL, GROUP_CAUSE, NULL);
    print_message("page directory squatted: 3 members refused %d of 150 requests\n", refused);
    assert_true(refused > 0);
    snprintf(cmd, sizeof(cmd), "ls %s/cupool && CUPOOL_PAGE_DIR=%s " READER
             " stat --group squat", rundir, pages);
    assert_int_equal(shell(cmd, out, sizeof(out)), 0);
    snprintf(want, sizeof(want), "group-%lu-squat\n", pid_ns_ino());
    assert_non_null(strstr(out, want));
    assert_non_null(strstr(out, "group squat: budget 8.00 MiB per device"));
    unsetenv("XDG_RUNTIME_DIR");
    refused = group_members_refused("squath", 3, "8M", NULL, GROUP_CAUSE, NULL);
    print_message("the same without XDG_RUNTIME_DIR: %d refused\n", refused);
    assert_true(refused > 0);
    snprintf(cmd, sizeof(cmd), "ls %s/.cache/cupool && CUPOOL_PAGE_DIR=%s " READER
             " stat --group squath", home, pages);
    assert_int_equal(shell(cmd, out, sizeof(out)), 0);
    setenv("HOME", old_home, 1);
    if (*old_run)
        setenv("XDG_RUNTIME_DIR", old_run, 1);
    snprintf(want, sizeof(want), "-%lu-squath\n", pid_ns_ino());
    assert_non_null(strstr(out, want));
    assert_non_null(strstr(out, "group squath: budget 8.00 MiB per device"));
}

/* Each report names the budget that refused, whichever is the smaller:
 * the group's beside a larger cap of the member's own, the cap beside a
 * larger group's budget. */
static void test_group_report_names_the_budget_that_refused(void **s)
{
    (void)s;
    int refused = group_members_refused("causes", 3, "8M", "64M", GROUP_CAUSE, NULL);
    print_message("cap 64 MiB in a group of 8: 3 members refused %d of 150\n", refused);
    refused = group_members_refused("causes2", 1, "64M", "8M", NULL, NULL);
    print_message("cap 8 MiB in a group of 64: refused %d of 50\n", refused);
    /* Alone in its group: the reports speak of no other member (they said
     * "after its other members flushed" before). */
    refused = group_members_refused("causes3", 1, "8M", NULL, GROUP_CAUSE, "other members");
    print_message("alone in a group of 8 MiB: refused %d of 50\n", refused);
}

static void test_threads_and_signal_storm(void **s)
{
    (void)s;
    PASSES("threads", "CUPOOL_STATS_FILE=/dev/null");
}


/* ---- CUPOOL_TRACE ---------------------------------------------------------- */

/* Runs `cupool-trace replay --json --policy best TRACE` and a Python check
 * of its first device (as v) with the given assertion source. 0 = held. */
static int replay_check(const char *trace, const char *asserts)
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

/* A trace path with a quote and a backslash still gives valid JSON, which
 * names it exactly. */
static void test_replay_json_escapes_path(void **s)
{
    (void)s;
    char dirn[] = "/tmp/cupool-tj-XXXXXX", trace[96], env[128], cmd[512], out[256];
    assert_non_null(mkdtemp(dirn));
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
    char trace[] = "/tmp/cupool-trace-XXXXXX", env[64], check[512];
    close(mkstemp(trace));
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
    char dirn[] = "/tmp/cupool-tl-XXXXXX";
    assert_non_null(mkdtemp(dirn));
    char trace[96], counter[96], e4[32], check[512];
    snprintf(trace, sizeof(trace), "%s/t.trace", dirn);
    snprintf(counter, sizeof(counter), "%s/count", dirn);
    snprintf(e4, sizeof(e4), "TL_THREADS=%d", threads);
    child c;
    traceloop_start(&c, dirn, e4);
    kill(c.pid, sig);
    wait_bounded(&c);
    assert_int_equal(finish(&c, "traceloop", 128 + sig)->status, 128 + sig);
    uint64_t n[2] = {0, 0};
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
        char trace[] = "/tmp/cupool-trace-XXXXXX", env[64];
        close(mkstemp(trace));
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
    char base[] = "/tmp/cupool-mid-XXXXXX", mine[64], open_dir[64], other[64], l[96];
    char env[128];
    assert_non_null(mkdtemp(base));
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
    char dirn[] = "/tmp/cupool-tw-XXXXXX";
    assert_non_null(mkdtemp(dirn));
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
        SHIM_OPTIONAL(X_NAME)
#undef X_NAME
#define X_SIG(name) #name,
        SHIM_SIGNAL_EXPORTS(X_SIG)
#undef X_SIG
#define X_DRV(name, params) #name,
        SHIM_DRV_SERVED(X_DRV)
#undef X_DRV
#define X_NCCL(name) #name,
        SHIM_NCCL_EXPORTS(X_NCCL)
        SHIM_CUPTI_EXPORTS(X_NCCL)
#undef X_NCCL
        "dlsym", /* driver.c: answers lookups on the driver */
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

/* ---- every command's help and mistakes, as scripts/cupool runs them ----------- */

/* A copy of scripts/cupool and cupool-import-torch in a new directory
 * (its path into root), beside a link named build to the build under test
 * (READER's folder): the copy runs this build's programs, whatever the
 * build's folder is called. */
static void cli_copy_make(char *root, size_t len)
{
    char built[PATH_MAX], cmd[PATH_MAX + 256], out[256];
    snprintf(root, len, "/tmp/cupool-cli-XXXXXX");
    assert_non_null(mkdtemp(root));
    assert_non_null(realpath(READER, built));
    *strrchr(built, '/') = '\0';
    snprintf(cmd, sizeof(cmd), "mkdir %s/scripts && cp scripts/cupool scripts/cupool-import-torch "
             "%s/scripts/ && ln -s '%s' %s/build", root, root, built, root);
    assert_int_equal(shell(cmd, out, sizeof(out)), 0);
}

/* Every command scripts/cupool dispatches takes -h and --help: its usage
 * on stdout, exit 0. Given an option it does not take, it names it on its
 * first line, "cupool COMMAND: unknown option '--bogus'", then gives its
 * usage, all on stderr, exit 2. */
static void test_cli_every_command_help_and_unknown_option(void **s)
{
    (void)s;
    if (runtime)
        skip_because(SKIP_PLAIN_ONLY);
    static const char *const cmds[] = {"run", "stat", "top", "flush", "dump", "pause",
                                       "resume", "job", "exporter", "options", "replay", "plot",
                                       "import-torch", "version", "help"};
    static char out[16384];
    char root[64], cmd[512], want[96];
    cli_copy_make(root, sizeof(root));
    for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
        snprintf(want, sizeof(want), "cupool %s", cmds[i]);
        for (int h = 0; h < 2; h++) {
            snprintf(cmd, sizeof(cmd), "%s/scripts/cupool %s %s 2>/dev/null", root, cmds[i],
                     h ? "--help" : "-h");
            int st = shell(cmd, out, sizeof(out));
            if (st != 0 || !strstr(out, want))
                fail_msg("'cupool %s %s' exited %d: %.300s", cmds[i], h ? "--help" : "-h", st,
                         out);
        }
        snprintf(cmd, sizeof(cmd), "%s/scripts/cupool %s --bogus 2>/dev/null", root, cmds[i]);
        int st = shell(cmd, out, sizeof(out));
        if (st != 2 || out[0])
            fail_msg("'cupool %s --bogus' exited %d, its stdout: %.300s", cmds[i], st, out);
        snprintf(cmd, sizeof(cmd), "%s/scripts/cupool %s --bogus 2>&1 >/dev/null", root, cmds[i]);
        shell(cmd, out, sizeof(out));
        snprintf(want, sizeof(want), "cupool %s: unknown option '--bogus'\n", cmds[i]);
        if (strncmp(out, want, strlen(want)) || !strstr(out + strlen(want), "cupool"))
            fail_msg("'cupool %s --bogus' said: %.300s", cmds[i], out);
    }
    assert_int_equal(remove_tree(root), 0);
}

/* cupool pause (and resume) of a process that does not exist says so,
 * and loads no driver first: here the driver found is a library that
 * only leaves a mark when it is loaded. */
static void test_cli_pause_no_process_before_driver(void **s)
{
    (void)s;
    if (runtime)
        skip_because(SKIP_PLAIN_ONLY);
    int pid = 999999;
    while (kill(pid, 0) == 0 || errno != ESRCH)
        pid++;
    char root[64], cmd[1024], out[4096], want[96];
    cli_copy_make(root, sizeof(root));
    snprintf(cmd, sizeof(cmd), "printf '#include <fcntl.h>\\n#include <stdlib.h>\\n"
             "__attribute__((constructor)) static void loaded(void) "
             "{ creat(getenv(\"MARK\"), 0600); }\\n' | cc -shared -fPIC -x c - "
             "-o %s/libcuda.so.1", root);
    assert_int_equal(shell(cmd, out, sizeof(out)), 0);
    for (int k = 0; k < 2; k++) {
        snprintf(cmd, sizeof(cmd), "MARK=%s/loaded LD_LIBRARY_PATH=%s %s/scripts/cupool %s %d "
                 "2>&1", root, root, root, k ? "resume" : "pause", pid);
        int st = shell(cmd, out, sizeof(out));
        snprintf(want, sizeof(want), "cupool: no process %d (no such process): nothing done\n",
                 pid);
        snprintf(cmd, sizeof(cmd), "%s/loaded", root);
        if (st != 1 || strcmp(out, want) || access(cmd, F_OK) == 0)
            fail_msg("'cupool %s %d' exited %d, the driver %s: %s", k ? "resume" : "pause", pid,
                     st, access(cmd, F_OK) ? "not loaded" : "loaded", out);
    }
    assert_int_equal(remove_tree(root), 0);
}

int main(int argc, char **argv)
{
    if (argc > 1)
        dir = argv[1];
    if (argc > 2)
        runtime = argv[2];
    printf("variant: %s\n", dir);
    if (getenv("TEST_ONLY")) /* a glob of test names, to run a few */
        cmocka_set_test_filter(getenv("TEST_ONLY"));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exports_match_allowlist),
        cmocka_unit_test(test_cupti),
        cmocka_unit_test(test_cupti_given_to_the_program),
        cmocka_unit_test(test_cupool_run),
        cmocka_unit_test(test_startup_refusals),
        cmocka_unit_test(test_cli_help_and_mistakes),
        cmocka_unit_test(test_cli_every_command_help_and_unknown_option),
        cmocka_unit_test(test_cli_pause_no_process_before_driver),
        cmocka_unit_test(test_readme_examples_are_commands),
        cmocka_unit_test(test_demo),
        cmocka_unit_test(test_install_uninstall),
        cmocka_unit_test(test_stats_file_fifo),
        cmocka_unit_test(test_failed_request_not_in_peak),
        cmocka_unit_test(test_pairs_hit_the_cache),
        cmocka_unit_test(test_fence_barrier),
        cmocka_unit_test(test_fence_sync),
        cmocka_unit_test(test_fence_poll),
        cmocka_unit_test(test_fence_comm),
        cmocka_unit_test(test_fence_destroyed),
        cmocka_unit_test(test_fence_shared),
        cmocka_unit_test(test_fence_poll_cap),
        cmocka_unit_test(test_capture_defers_fence),
        cmocka_unit_test(test_flush_signal),
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
        cmocka_unit_test_setup_teardown(test_python_handler, pages_setup, pages_teardown),
        cmocka_unit_test_setup_teardown(test_framework_flush, pages_setup, pages_teardown),
        cmocka_unit_test_setup_teardown(test_framework_flush_by_signal, pages_setup,
                                        pages_teardown),
        cmocka_unit_test_setup_teardown(test_framework_view, pages_setup, pages_teardown),
        cmocka_unit_test_setup_teardown(test_pause_and_resume, pages_setup, pages_teardown),
        cmocka_unit_test_setup_teardown(test_pause_failures, pages_setup, pages_teardown),
        cmocka_unit_test_setup_teardown(test_pause_refusals, pages_setup, pages_teardown),
        cmocka_unit_test_setup_teardown(test_nccl_job_names_the_other_rank, pages_setup,
                                        pages_teardown),
        cmocka_unit_test_setup_teardown(test_nccl_job_split, pages_setup, pages_teardown),
        cmocka_unit_test_setup_teardown(test_nccl_job_destroy, pages_setup, pages_teardown),
        cmocka_unit_test_setup_teardown(test_nccl_stat_fields, pages_setup, pages_teardown),
        cmocka_unit_test_setup_teardown(test_nccl_job_pause_and_resume, pages_setup,
                                        pages_teardown),
        cmocka_unit_test_setup_teardown(test_nccl_job_suspend_refusals_and_flush, pages_setup,
                                        pages_teardown),
        cmocka_unit_test_setup_teardown(test_nccl_job_two_ranks_in_one_process, pages_setup,
                                        pages_teardown),
        cmocka_unit_test_setup_teardown(test_group_phases, pages_setup, pages_teardown),
        cmocka_unit_test_setup_teardown(test_group_race, pages_setup, pages_teardown),
        cmocka_unit_test_setup_teardown(test_group_killed_member, pages_setup, pages_teardown),
        cmocka_unit_test_setup_teardown(test_group_ending_member, pages_setup, pages_teardown),
        cmocka_unit_test_setup_teardown(test_group_turn_wait, pages_setup, pages_teardown),
        cmocka_unit_test_setup_teardown(test_group_turn_fifo, pages_setup, pages_teardown),
        cmocka_unit_test_setup_teardown(test_group_turn_deadlock, pages_setup, pages_teardown),
        cmocka_unit_test_setup_teardown(test_group_turn_killed, pages_setup, pages_teardown),
        cmocka_unit_test_setup_teardown(test_group_budget_forms, pages_setup, pages_teardown),
        cmocka_unit_test_setup_teardown(test_group_corrupt_segment, pages_setup,
                                        pages_teardown),
        cmocka_unit_test_setup_teardown(test_driver_passed_refusal_names_its_budget,
                                        pages_setup, pages_teardown),
        cmocka_unit_test_setup_teardown(test_group_report_names_the_budget_that_refused,
                                        pages_setup, pages_teardown),
        cmocka_unit_test_setup_teardown(test_group_squatted_directory, pages_setup,
                                        pages_teardown),
        cmocka_unit_test_setup_teardown(test_framework_flush_idle, pages_setup,
                                        pages_teardown),
        cmocka_unit_test_setup_teardown(test_framework_flush_gil_held, pages_setup,
                                        pages_teardown),
        cmocka_unit_test_setup_teardown(test_framework_flush_capture, pages_setup,
                                        pages_teardown),
        cmocka_unit_test_setup_teardown(test_framework_flush_leaves_alone, pages_setup,
                                        pages_teardown),
        cmocka_unit_test(test_signal_chaining),
        cmocka_unit_test(test_signal_ignored_or_default),
        cmocka_unit_test(test_signal_blocked_everywhere),
        cmocka_unit_test(test_signal_program_flags),
        cmocka_unit_test(test_forked_child_signals),
        cmocka_unit_test(test_cap_and_report),
        cmocka_unit_test(test_cap_percent),
        cmocka_unit_test(test_cap_free_is_allocatable),
        cmocka_unit_test(test_fragmentation_named),
        cmocka_unit_test(test_bad_frees),
        cmocka_unit_test(test_foreign_pointer),
        cmocka_unit_test(test_device_reset),
        cmocka_unit_test(test_two_devices),
        cmocka_unit_test(test_one_device),
        cmocka_unit_test(test_shards),
        cmocka_unit_test(test_vmm_peer),
        cmocka_unit_test(test_vmm),
        cmocka_unit_test(test_stitch),
        cmocka_unit_test(test_stitch_auto),
        cmocka_unit_test(test_zero_bytes),
        cmocka_unit_test(test_ipc_handles),
        cmocka_unit_test(test_ipc_vmm),
        cmocka_unit_test(test_capture_modes_as_cuda),
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
        cmocka_unit_test(test_bad_config_keeps_default),
        cmocka_unit_test(test_disable_passes_through),
        cmocka_unit_test(test_threads_and_signal_storm),
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
        cmocka_unit_test(test_reader_bad_numbers),
        cmocka_unit_test(test_stats_fields_documented),
        cmocka_unit_test_setup_teardown(test_top_on_a_terminal, pages_setup, pages_teardown),
    };
    struct rlimit nocore = {0, 0}; /* SIGQUIT's default action dumps core */
    setrlimit(RLIMIT_CORE, &nocore);
    snprintf(run_pages, sizeof(run_pages), "/tmp/cupool-run-pages-XXXXXX");
    if (!mkdtemp(run_pages))
        return 1;
    int failed = cmocka_run_group_tests_name("shim", tests, NULL, NULL);
    return remove_tree(run_pages) ? 1 : failed;
}
