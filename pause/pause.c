/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pause.c - cupool-pause, behind `cupool pause PID` and `cupool resume PID`:
 * gives a process's whole GPU back from outside and takes it again,
 * through the driver's checkpoint calls (cuCheckpointProcess*).
 *
 *   pause   a process under cupool first flushes every cache (cupool's and
 *           its framework's: stats_page_ask), so that only live bytes move;
 *           then lock, checkpoint. Its page says paused, and what it needs.
 *   resume  restore (when checkpointed), unlock; the page says running.
 *
 * A process is never left stuck by a failure here: a failed checkpoint is
 * unlocked before cupool-pause exits, and every line that reports a failure
 * says the state the process is in and what brings it back. A process that
 * made NCCL calls is refused before anything is done (the driver cannot
 * checkpoint NCCL), as is another user's process: whose it is is told as
 * the initial user namespace sees it (root of a namespace of its own is
 * not root: stats/userns.h), before the driver is even loaded.
 */
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cuda.h>

#include "stats.h"
#include "userns.h"

static const char *me = "cupool";

/* The driver's calls cupool-pause makes, from libcuda.so.1. */
static struct {
    CUresult (*init)(unsigned int);
    CUresult (*state)(int, CUprocessState *);
    CUresult (*lock)(int, CUcheckpointLockArgs *);
    CUresult (*checkpoint)(int, CUcheckpointCheckpointArgs *);
    CUresult (*restore)(int, CUcheckpointRestoreArgs *);
    CUresult (*unlock)(int, CUcheckpointUnlockArgs *);
    CUresult (*error_string)(CUresult, const char **);
} drv;

static const char *const state_names[] = {"running", "locked", "checkpointed (paused)",
                                          "failed"};

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", me);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static const char *cu_text(CUresult r)
{
    const char *s = NULL;
    if (drv.error_string && drv.error_string(r, &s) == CUDA_SUCCESS && s)
        return s;
    static char buf[32];
    snprintf(buf, sizeof(buf), "CUDA error %d", (int)r);
    return buf;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Loads the driver's checkpoint calls: 0, or 1 with the reason said. */
static int driver_load(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        say("cannot load the CUDA driver (libcuda.so.1): %s", dlerror());
        return 1;
    }
    *(void **)&drv.init = dlsym(h, "cuInit");
    *(void **)&drv.state = dlsym(h, "cuCheckpointProcessGetState");
    *(void **)&drv.lock = dlsym(h, "cuCheckpointProcessLock");
    *(void **)&drv.checkpoint = dlsym(h, "cuCheckpointProcessCheckpoint");
    *(void **)&drv.restore = dlsym(h, "cuCheckpointProcessRestore");
    *(void **)&drv.unlock = dlsym(h, "cuCheckpointProcessUnlock");
    *(void **)&drv.error_string = dlsym(h, "cuGetErrorString");
    if (!drv.init || !drv.state || !drv.lock || !drv.checkpoint || !drv.restore ||
        !drv.unlock) {
        say("this CUDA driver has no checkpoint calls (cuCheckpointProcess*: driver 550 "
            "or later)");
        return 1;
    }
    CUresult r = drv.init(0);
    if (r != CUDA_SUCCESS) {
        say("the CUDA driver does not start here: %s", cu_text(r));
        return 1;
    }
    return 0;
}

/* The process must exist and be this user's, as the initial user
 * namespace sees both: root there may act on anyone's, root of a namespace
 * of its own (unshare -Ur) only on what the user it is outside owns, and
 * a process whose owner that namespace does not map is refused. Checked
 * before the driver is loaded: a refusal touches nothing. 0, or 1 with
 * the reason said. */
static int owner_check(int pid)
{
    uint32_t owner;
    userns_whose w = userns_process_whose(pid, &owner);
    if (w == USERNS_GONE) {
        say("no process %d (no such process): nothing done", pid);
        return 1;
    }
    if (w == USERNS_MINE || userns_caller_is_root())
        return 0;
    if (w == USERNS_UNMAPPED)
        say("process %d is another user's, one this user namespace does not map (it "
            "reads as uid %u here): refused", pid, owner);
    else
        say("process %d is another user's (uid %u): refused", pid, owner);
    return 1;
}

/* The driver's state of pid into *s: 0, or 1 with the reason said. */
static int state_of(int pid, CUprocessState *s)
{
    CUresult r = drv.state(pid, s);
    if (r != CUDA_SUCCESS) {
        say("the driver cannot tell the state of process %d (%s): it uses no CUDA, or "
            "this user may not checkpoint it (see docs/GUIDE.md, \"Pause and resume\")", pid,
            cu_text(r));
        return 1;
    }
    if ((unsigned)*s > CU_PROCESS_STATE_FAILED)
        *s = CU_PROCESS_STATE_FAILED;
    return 0;
}

/* What the process holds on its devices as its page says: cupool's pool,
 * and outside it what NVML told (memory passed on included; the context
 * and the libraries' own), else the memory passed on alone. */
static uint64_t held_of(const stats_view *v)
{
    uint64_t sum = 0;
    for (uint32_t k = 0; k < v->ndevices; k++) {
        const stats_device *d = &v->dev[k];
        sum += d->reserved + (d->outside_pool != STATS_UNKNOWN ? d->outside_pool : d->passed);
    }
    return sum;
}

/* Flushes a process under cupool through its page, waiting up to
 * timeout seconds: 0 (*v its view after), 1 with the reason said. */
static int flush(int pid, double timeout, stats_view *v)
{
    stats_view before;
    double t0 = now_s();
    int err = stats_page_request(pid, STATS_REQ_FLUSH, timeout, &before, v);
    if (err == -ETIMEDOUT) {
        say("process %d did not flush within %.0f s: nothing else done", pid, timeout);
        return 1;
    }
    if (err) {
        say("process %d could not be asked to flush, or ended during its flush "
            "(its page: %s): nothing else done", pid, strerror(-err));
        return 1;
    }
    stats_view now;
    for (int i = 0; i < 100 && v->updated_ns <= before.updated_ns &&
                    stats_page_read(pid, &now) == 0; i++) {
        *v = now; /* only a view read whole */
        if (now.updated_ns <= before.updated_ns)
            usleep(10000); /* the view published after the flush */
    }
    char r[32], fw[32];
    say("flushed %d in %.2f s: returned %s to the driver (of it, the framework's cache %s)",
        pid, now_s() - t0,
        stats_fmt_bytes(v->proc.flushed - before.proc.flushed, r, sizeof(r)),
        stats_fmt_bytes(v->proc.framework_flushed - before.proc.framework_flushed, fw,
                        sizeof(fw)));
    return 0;
}

/* After a failed checkpoint: unlocks the process unless the driver says
 * it is running already or failed for good (an unknown state is tried
 * too), then says how it is left. Returns 1. */
static int checkpoint_failed(int pid, CUresult why)
{
    CUprocessState st = CU_PROCESS_STATE_LOCKED;
    bool known = drv.state(pid, &st) == CUDA_SUCCESS && (unsigned)st <= CU_PROCESS_STATE_FAILED;
    if (known && st == CU_PROCESS_STATE_RUNNING) {
        say("cannot checkpoint process %d (%s): it runs on", pid, cu_text(why));
        return 1;
    }
    if (known && st == CU_PROCESS_STATE_FAILED) {
        say("cannot checkpoint process %d (%s), and the driver left it failed: it "
            "cannot bring it back", pid, cu_text(why));
        return 1;
    }
    if (known && st == CU_PROCESS_STATE_CHECKPOINTED) {
        say("the checkpoint of process %d reported %s, yet it is checkpointed: cupool "
            "resume restores it", pid, cu_text(why));
        return 1;
    }
    CUcheckpointUnlockArgs ua = {{0}};
    CUresult u = drv.unlock(pid, &ua);
    if (u == CUDA_SUCCESS)
        say("cannot checkpoint process %d (%s): unlocked, it runs on", pid, cu_text(why));
    else
        say("cannot checkpoint process %d (%s), and it is left %s: cupool resume tries to "
            "unlock it (the unlock said %s)", pid, cu_text(why),
            known ? "locked" : "in a state the driver does not tell", cu_text(u));
    return 1;
}

/* Lock and checkpoint; a failed checkpoint is unlocked. 0, or 1 with the
 * state the process is left in said. */
static int lock_and_checkpoint(int pid, double *t_lock, double *t_ckpt)
{
    CUcheckpointLockArgs la = {.timeoutMs = 30000};
    double t0 = now_s();
    CUresult r = drv.lock(pid, &la);
    *t_lock = now_s() - t0;
    if (r != CUDA_SUCCESS) {
        say("cannot lock process %d (%s): it runs on, untouched", pid, cu_text(r));
        return 1;
    }
    CUcheckpointCheckpointArgs ca = {{0}};
    t0 = now_s();
    r = drv.checkpoint(pid, &ca);
    *t_ckpt = now_s() - t0;
    if (r == CUDA_SUCCESS)
        return 0;
    return checkpoint_failed(pid, r);
}

/* Whether pid may be paused now: running, and no NCCL (*v, *paged: its
 * page's view, when it has one). 0, or 1 with the reason said. */
static int pause_check(int pid, stats_view *v, bool *paged)
{
    CUprocessState st;
    if (state_of(pid, &st))
        return 1;
    if (st != CU_PROCESS_STATE_RUNNING) {
        say("process %d is %s already: %s", pid, state_names[st],
            st == CU_PROCESS_STATE_FAILED ? "the driver cannot bring it back"
                                          : "cupool resume brings it back");
        return 1;
    }
    *paged = stats_page_read(pid, v) == 0;
    if (*paged && v->proc.nccl_calls) {
        say("process %d uses NCCL (%lu calls), which the driver's checkpoint does not "
            "support: refused, nothing done", pid, (unsigned long)v->proc.nccl_calls);
        return 1;
    }
    if (!*paged)
        say("process %d is not under cupool: nothing flushes its caches first, so "
            "they move with it (the NCCL check is not possible either)", pid);
    return 0;
}

static int cmd_pause(int pid, double timeout, bool no_flush)
{
    stats_view v;
    bool paged;
    if (pause_check(pid, &v, &paged) || (paged && !no_flush && flush(pid, timeout, &v)))
        return 1;
    /* From the lock until the page says paused, a Ctrl-C or a TERM must not
     * leave the process locked with nothing said: they wait to the end. */
    sigset_t stop, old;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGHUP);
    sigaddset(&stop, SIGQUIT);
    sigprocmask(SIG_BLOCK, &stop, &old);
    double t_lock = 0, t_ckpt = 0;
    if (lock_and_checkpoint(pid, &t_lock, &t_ckpt)) {
        sigprocmask(SIG_SETMASK, &old, NULL);
        return 1;
    }
    uint64_t needs = paged ? held_of(&v) : 0;
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    if (paged && stats_page_mark_paused(pid, (uint64_t)now.tv_sec * 1000000000u +
                                        (uint64_t)now.tv_nsec, needs ? needs : 1))
        say("process %d paused, but its page could not say so", pid);
    fflush(stderr);
    char b[32];
    if (paged)
        printf("paused %d: lock %.3f s, checkpoint %.3f s (%.2f GiB/s); it held %s on the "
               "device, which it needs back to resume\n", pid, t_lock, t_ckpt,
               t_ckpt > 0 ? (double)needs / 1073741824.0 / t_ckpt : 0.0,
               stats_fmt_bytes(needs, b, sizeof(b)));
    else
        printf("paused %d: lock %.3f s, checkpoint %.3f s; its device memory moved, its "
               "caches too\n", pid, t_lock, t_ckpt);
    fflush(stdout);
    sigprocmask(SIG_SETMASK, &old, NULL); /* a signal that came acts now */
    return 0;
}

static int cmd_resume(int pid)
{
    CUprocessState st;
    if (state_of(pid, &st))
        return 1;
    if (st == CU_PROCESS_STATE_RUNNING || st == CU_PROCESS_STATE_FAILED) {
        say("process %d is %s: %s", pid, state_names[st], st == CU_PROCESS_STATE_RUNNING
            ? "not paused, nothing to do" : "the driver cannot bring it back");
        return 1;
    }
    double t0 = now_s(), t_restore = 0;
    CUresult r = CUDA_SUCCESS;
    if (st == CU_PROCESS_STATE_CHECKPOINTED) {
        CUcheckpointRestoreArgs ra;
        memset(&ra, 0, sizeof(ra));
        r = drv.restore(pid, &ra);
        t_restore = now_s() - t0;
        if (r != CUDA_SUCCESS) {
            CUprocessState now = CU_PROCESS_STATE_CHECKPOINTED;
            drv.state(pid, &now);
            if (now == CU_PROCESS_STATE_FAILED)
                say("cannot restore process %d (%s): the driver left it failed, and "
                    "cannot bring it back", pid, cu_text(r));
            else
                say("cannot restore process %d (%s): it stays paused (is there room on "
                    "the device? cupool resume tries again)", pid, cu_text(r));
            return 1;
        }
    }
    CUcheckpointUnlockArgs ua = {{0}};
    t0 = now_s();
    r = drv.unlock(pid, &ua);
    if (r != CUDA_SUCCESS) {
        say("cannot unlock process %d (%s): it is %s, locked (cupool resume tries again)",
            pid, cu_text(r), t_restore > 0 ? "restored" : "still");
        return 1;
    }
    stats_page_mark_paused(pid, 0, 0); /* no page (not under cupool): nothing to say */
    printf("resumed %d: restore %.3f s, unlock %.3f s\n", pid, t_restore, now_s() - t0);
    return 0;
}

static const char help[] =
    "usage: cupool pause [--timeout SECONDS] [--no-flush] PID\n"
    "       cupool resume PID\n"
    "pause gives process PID's whole GPU back from outside: a process under cupool\n"
    "first returns every cache (cupool's, its framework's) within SECONDS (10), then\n"
    "the driver locks it and checkpoints its device memory to host memory, context\n"
    "included. resume restores it and lets it go on where it was, its addresses\n"
    "unchanged. A process that uses NCCL is refused (the driver cannot checkpoint\n"
    "NCCL); so is another user's. --no-flush moves the caches with the process (to\n"
    "keep them, or to compare). Needs the driver's checkpoint calls (550 or later).\n";

/* What the command line asks for. */
typedef struct pause_args {
    bool pause, no_flush;
    double timeout;
    int pid;
} pause_args;

static int usage(const char *why)
{
    say("%s (see 'cupool pause --help')", why);
    return 2;
}

/* An option cmd does not take: one line naming it, then the usage, on
 * stderr. Returns 2. */
static int unknown_option(const char *cmd, const char *opt)
{
    char shown[64];
    fprintf(stderr, "cupool %s: unknown option '%s'\n%s", cmd,
            stats_printable(opt, shown, sizeof(shown)), help);
    return 2;
}

/* Whether an argument after the command is -h or --help. */
static bool help_asked(int argc, char **argv)
{
    for (int i = 2; i < argc; i++)
        if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help"))
            return true;
    return false;
}

/* The options from argv[*i] on (pause's; resume has none) into *a, *i
 * moved past them. 0, or 2 with the mistake said. */
static int options_parse(int argc, char **argv, int *i, pause_args *a)
{
    for (; *i < argc && argv[*i][0] == '-' && argv[*i][1]; (*i)++) {
        const char *o = argv[*i];
        if (a->pause && !strcmp(o, "--no-flush")) {
            a->no_flush = true;
            continue;
        }
        if (!a->pause || strcmp(o, "--timeout"))
            return unknown_option(argv[1], o);
        if (*i + 1 >= argc)
            return usage("--timeout needs a value");
        char *end;
        a->timeout = strtod(argv[++*i], &end);
        if (*end || !(a->timeout > 0 && a->timeout <= 3600)) {
            char shown[64];
            say("--timeout takes seconds above 0, up to 3600, not '%s'",
                stats_printable(argv[*i], shown, sizeof(shown)));
            return 2;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2 || (strcmp(argv[1], "pause") && strcmp(argv[1], "resume")))
        return usage("the command is pause or resume");
    if (help_asked(argc, argv))
        return fputs(help, stdout) < 0;
    pause_args a = {.pause = !strcmp(argv[1], "pause"), .timeout = 10};
    int i = 2, rc = options_parse(argc, argv, &i, &a);
    if (rc)
        return rc;
    if (i + 1 != argc)
        return usage(i >= argc ? "no process id given" : "one process id, no more");
    char *end;
    long pid = strtol(argv[i], &end, 10);
    if (*end || end == argv[i] || pid <= 0 || pid > 4194304)
        return usage("not a process id");
    a.pid = (int)pid;
    /* Whose it is first: no driver is loaded for a process not to touch. */
    if (owner_check(a.pid) || driver_load())
        return 1;
    return a.pause ? cmd_pause(a.pid, a.timeout, a.no_flush) : cmd_resume(a.pid);
}
