/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pause.c - gives a process's whole GPU back from outside and takes it
 * again, through the driver's checkpoint calls (cuCheckpointProcess*);
 * main.c is the program, cupool-pause, behind `cupool pause PID` and
 * `cupool resume PID`.
 *
 *   pause   a process under cupool first flushes every cache (cupool's and
 *           its framework's: stats_page_ask), so that only live bytes move;
 *           then lock, checkpoint. Its page says paused, and what it needs.
 *   resume  restore (when checkpointed), unlock; the page says running.
 *
 * A process is never left stuck by a failure here: a failed checkpoint is
 * unlocked before cupool-pause exits, and every line that reports a failure
 * says the state the process is in and what brings it back. A process
 * holding NCCL communicators is paused with its whole job (job.c: the
 * communicators suspended first, which the driver's checkpoint needs).
 * Another user's process is refused: whose it is is told as the initial
 * user namespace sees it (root of a namespace of its own is not root:
 * node/userns.h), before the driver is even loaded.
 */
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda.h>

#include "clock.h"
#include "jobgate.h"
#include "move.h"
#include "pause.h"
#include "say.h"
#include "stats.h"
#include "userns.h"

/* How long cupool's own move may take (its first pause pins host memory). */
#define MOVE_S 600.0

pause_driver pause_drv;

static const char *const state_names[] = {"running", "locked", "checkpointed (paused)",
                                          "failed"};

const char *pause_cu_text(CUresult r)
{
    const char *s = NULL;
    if (pause_drv.error_string && pause_drv.error_string(r, &s) == CUDA_SUCCESS && s)
        return s;
    static char buf[32];
    snprintf(buf, sizeof(buf), "CUDA error %d", (int)r);
    return buf;
}

/* Loads the driver's checkpoint calls: 0, or 1 with the reason said. */
int pause_driver_load(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        pause_say("cannot load the CUDA driver (libcuda.so.1): %s", dlerror());
        return 1;
    }
    *(void **)&pause_drv.init = dlsym(h, "cuInit");
    *(void **)&pause_drv.state = dlsym(h, "cuCheckpointProcessGetState");
    *(void **)&pause_drv.lock = dlsym(h, "cuCheckpointProcessLock");
    *(void **)&pause_drv.checkpoint = dlsym(h, "cuCheckpointProcessCheckpoint");
    *(void **)&pause_drv.restore = dlsym(h, "cuCheckpointProcessRestore");
    *(void **)&pause_drv.unlock = dlsym(h, "cuCheckpointProcessUnlock");
    *(void **)&pause_drv.error_string = dlsym(h, "cuGetErrorString");
    if (!pause_drv.init || !pause_drv.state || !pause_drv.lock || !pause_drv.checkpoint ||
        !pause_drv.restore || !pause_drv.unlock) {
        pause_say("this CUDA driver has no checkpoint calls (cuCheckpointProcess*: driver 550 "
            "or later)");
        return 1;
    }
    CUresult r = pause_drv.init(0);
    if (r != CUDA_SUCCESS) {
        pause_say("the CUDA driver does not start here: %s", pause_cu_text(r));
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
int pause_owner_check(int pid)
{
    uint32_t owner;
    userns_whose w = userns_process_whose(pid, &owner);
    if (w == USERNS_GONE) {
        pause_say("no process %d (no such process): nothing done", pid);
        return 1;
    }
    if (w == USERNS_MINE || userns_caller_is_root())
        return 0;
    if (w == USERNS_UNMAPPED)
        pause_say("process %d is another user's, one this user namespace does not map (it "
            "reads as uid %u here): refused", pid, owner);
    else
        pause_say("process %d is another user's (uid %u): refused", pid, owner);
    return 1;
}

/* The driver's state of pid into *s: 0, or 1 with the reason said. */
int pause_state_of(int pid, CUprocessState *s)
{
    CUresult r = pause_drv.state(pid, s);
    if (r != CUDA_SUCCESS) {
        pause_say("the driver cannot tell the state of process %d (%s): it uses no CUDA, or "
            "this user may not checkpoint it (see docs/GUIDE.md, \"Pause and resume\")", pid,
            pause_cu_text(r));
        return 1;
    }
    if ((unsigned)*s > CU_PROCESS_STATE_FAILED)
        *s = CU_PROCESS_STATE_FAILED;
    return 0;
}

/* What the process holds on its devices as its page says: cupool's pool,
 * and outside it what NVML told (memory passed on included; the context
 * and the libraries' own), else the memory passed on alone. */
uint64_t pause_held_of(const stats_view *v)
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
int pause_flush(int pid, double timeout, stats_view *v)
{
    stats_view before;
    double t0 = clock_mono_s();
    int err = stats_page_request(pid, STATS_REQ_FLUSH, timeout, &before, v);
    if (err == -ETIMEDOUT) {
        pause_say("process %d did not flush within %.0f s: nothing else done", pid, timeout);
        return 1;
    }
    if (err) {
        pause_say("process %d could not be asked to flush, or ended during its flush "
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
    pause_say("flushed %d in %.2f s: returned %s to the driver (of it, the framework's cache %s)",
        pid, clock_mono_s() - t0,
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
    bool known = pause_drv.state(pid, &st) == CUDA_SUCCESS &&
                 (unsigned)st <= CU_PROCESS_STATE_FAILED;
    if (known && st == CU_PROCESS_STATE_RUNNING) {
        pause_say("cannot checkpoint process %d (%s): it runs on", pid, pause_cu_text(why));
        return 1;
    }
    if (known && st == CU_PROCESS_STATE_FAILED) {
        pause_say("cannot checkpoint process %d (%s), and the driver left it failed: it "
            "cannot bring it back", pid, pause_cu_text(why));
        return 1;
    }
    if (known && st == CU_PROCESS_STATE_CHECKPOINTED) {
        pause_say("the checkpoint of process %d reported %s, yet it is checkpointed: cupool "
            "resume restores it", pid, pause_cu_text(why));
        return 1;
    }
    CUcheckpointUnlockArgs ua = {{0}};
    CUresult u = pause_drv.unlock(pid, &ua);
    if (u == CUDA_SUCCESS)
        pause_say("cannot checkpoint process %d (%s): unlocked, it runs on", pid, pause_cu_text(why));
    else
        pause_say("cannot checkpoint process %d (%s), and it is left %s: cupool resume tries to "
            "unlock it (the unlock said %s)", pid, pause_cu_text(why),
            known ? "locked" : "in a state the driver does not tell", pause_cu_text(u));
    return 1;
}

/* The driver's lock of pid (waiting up to timeout_ms), then, if it took,
 * its checkpoint; each one's seconds into *t_lock and *t_ckpt. *locked
 * says whether the lock took; the result is the call that failed, or
 * CUDA_SUCCESS. */
static CUresult lock_then_checkpoint(int pid, unsigned timeout_ms, bool *locked,
                                     double *t_lock, double *t_ckpt)
{
    CUcheckpointLockArgs la = {.timeoutMs = timeout_ms};
    double t0 = clock_mono_s();
    CUresult r = pause_drv.lock(pid, &la);
    *t_lock = clock_mono_s() - t0;
    if ((*locked = r == CUDA_SUCCESS)) {
        CUcheckpointCheckpointArgs ca = {{0}};
        t0 = clock_mono_s();
        r = pause_drv.checkpoint(pid, &ca);
        *t_ckpt = clock_mono_s() - t0;
    }
    return r;
}

/* Lock and checkpoint; a failed checkpoint is unlocked. 0, or 1 with the
 * state the process is left in said. */
int pause_lock_and_checkpoint(int pid, double *t_lock, double *t_ckpt)
{
    bool locked;
    CUresult r = lock_then_checkpoint(pid, 30000, &locked, t_lock, t_ckpt);
    if (r == CUDA_SUCCESS)
        return 0;
    if (!locked) {
        pause_say("cannot lock process %d (%s%s): it runs on, untouched", pid, pause_cu_text(r),
                  r == CUDA_ERROR_NOT_SUPPORTED ? ": the driver does not lock a process CUPTI "
                  "watches, the program's own profiler or the CUPTI cupool started to stop "
                  "its calls" : "");
        return 1;
    }
    return checkpoint_failed(pid, r);
}

/* Whether pid may be paused now: running, and no NCCL (*v, *paged: its
 * page's view, when it has one). 0, or 1 with the reason said. */
static int pause_check(int pid, stats_view *v, bool *paged)
{
    CUprocessState st;
    if (pause_state_of(pid, &st))
        return 1;
    if (st != CU_PROCESS_STATE_RUNNING) {
        pause_say("process %d is %s already: %s", pid, state_names[st],
            st == CU_PROCESS_STATE_FAILED ? "the driver cannot bring it back"
                                          : "cupool resume brings it back");
        return 1;
    }
    *paged = stats_page_read(pid, v) == 0;
    if (*paged && v->proc.nccl_calls && !v->ncomms) {
        pause_say("process %d used NCCL (%lu calls) and holds no communicator now: the "
                  "driver's checkpoint may not support what NCCL left; refused, nothing "
                  "done", pid, (unsigned long)v->proc.nccl_calls);
        return 1;
    }
    if (!*paged)
        pause_say("process %d is not under cupool: nothing flushes its caches first, so "
            "they move with it (the NCCL check is not possible either)", pid);
    return 0;
}

/* Says that the process stays paused by cupool's move alone, the driver
 * having failed to checkpoint the rest. */
static void moved_alone(int pid, const stats_view *v)
{
    char b[32], l[32];
    printf("paused %d: cupool moved %s to host memory and holds its CUDA calls; the "
           "rest (its context) stays on the device, which holds %s now\n", pid,
           stats_fmt_bytes(v->park.moved, b, sizeof(b)),
           stats_fmt_bytes(v->park.left, l, sizeof(l)));
}

/* After cupool's move: the driver's lock and checkpoint of the rest. A
 * driver that refuses to lock (it does while CUPTI watches the process,
 * and cupool's gate needs CUPTI) leaves it running, its calls held by
 * cupool. 0, or 1 with why said. */
static int checkpoint_rest(int pid, double *t_lock, double *t_ckpt)
{
    bool locked;
    CUresult r = lock_then_checkpoint(pid, 5000, &locked, t_lock, t_ckpt);
    if (r == CUDA_SUCCESS)
        return 0;
    if (!locked) {
        pause_say("the driver does not lock process %d (%s%s): what cupool does not "
                  "serve stays on the device", pid, pause_cu_text(r),
                  r == CUDA_ERROR_NOT_SUPPORTED ? ": it does not while CUPTI watches the "
                  "process, which cupool's gate needs" : "");
        return 1;
    }
    CUcheckpointUnlockArgs ua = {{0}};
    CUresult u = pause_drv.unlock(pid, &ua);
    pause_say("the driver did not checkpoint the rest of process %d (%s)%s", pid,
              pause_cu_text(r), u == CUDA_SUCCESS ? "" : "; its unlock failed too");
    return 1;
}

/* Marks pid's page paused, needing what v says it held. */
static uint64_t mark_paused(int pid, const stats_view *v)
{
    uint64_t needs = pause_held_of(v);
    if (stats_page_mark_paused(pid, clock_unix_ns(), needs ? needs : 1))
        pause_say("process %d paused, but its page could not say so", pid);
    return needs;
}

int pause_away(int pid, stats_view *v, bool move, bool *moved, double *t_lock, double *t_ckpt)
{
    *t_lock = *t_ckpt = 0;
    *moved = move && pause_move_out(pid, MOVE_S, v) == 0;
    if (!*moved)
        return pause_lock_and_checkpoint(pid, t_lock, t_ckpt);
    mark_paused(pid, v);
    char b[32];
    if (checkpoint_rest(pid, t_lock, t_ckpt)) {
        moved_alone(pid, v);
    } else {
        printf("paused %d: cupool moved %s (%.2f GiB/s), then the driver checkpointed "
               "the rest: lock %.3f s, checkpoint %.3f s\n", pid,
               stats_fmt_bytes(v->park.moved, b, sizeof(b)), v->park.copy_us ?
               (double)v->park.moved / 1073741824.0 / (v->park.copy_us / 1e6) : 0.0,
               *t_lock, *t_ckpt);
    }
    fflush(stdout);
    return 0;
}

int pause_one(int pid, double timeout, bool no_flush, bool no_move)
{
    stats_view v;
    bool paged, moved;
    if (pause_check(pid, &v, &paged) || (paged && !no_flush && pause_flush(pid, timeout, &v)))
        return 1;
    /* From the move until the page says paused, a Ctrl-C or a TERM must not
     * leave the process locked with nothing said: they wait to the end. */
    sigset_t old;
    jobgate_signals_block(&old);
    double t_lock, t_ckpt;
    if (pause_away(pid, &v, paged && !no_flush && !no_move, &moved, &t_lock, &t_ckpt) ||
        moved) {
        sigprocmask(SIG_SETMASK, &old, NULL);
        return !moved;
    }
    uint64_t needs = paged ? mark_paused(pid, &v) : 0;
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

/* Brings back what cupool's move took from pid, if it did: 0, or 1 with
 * why said (it stays paused). */
static int move_back(int pid, bool parked)
{
    if (!parked)
        return 0;
    if (pause_move_back(pid, MOVE_S))
        return 1;
    stats_page_mark_paused(pid, 0, 0);
    return 0;
}

int pause_resume_one(int pid)
{
    CUprocessState st;
    if (pause_state_of(pid, &st))
        return 1;
    stats_view v;
    bool parked = stats_page_read(pid, &v) == 0 && v.park.state == STATS_PARK_PARKED;
    if (st == CU_PROCESS_STATE_RUNNING && parked) { /* the driver left it running */
        int rc = move_back(pid, true);
        if (!rc)
            printf("resumed %d\n", pid);
        return rc;
    }
    if (st == CU_PROCESS_STATE_RUNNING || st == CU_PROCESS_STATE_FAILED) {
        pause_say("process %d is %s: %s", pid, state_names[st], st == CU_PROCESS_STATE_RUNNING
            ? "not paused, nothing to do" : "the driver cannot bring it back");
        return 1;
    }
    double t0 = clock_mono_s(), t_restore = 0;
    CUresult r = CUDA_SUCCESS;
    if (st == CU_PROCESS_STATE_CHECKPOINTED) {
        CUcheckpointRestoreArgs ra;
        memset(&ra, 0, sizeof(ra));
        r = pause_drv.restore(pid, &ra);
        t_restore = clock_mono_s() - t0;
        if (r != CUDA_SUCCESS) {
            CUprocessState now = CU_PROCESS_STATE_CHECKPOINTED;
            pause_drv.state(pid, &now);
            if (now == CU_PROCESS_STATE_FAILED)
                pause_say("cannot restore process %d (%s): the driver left it failed, and "
                    "cannot bring it back", pid, pause_cu_text(r));
            else
                pause_say("cannot restore process %d (%s): it stays paused (is there room on "
                    "the device? cupool resume tries again)", pid, pause_cu_text(r));
            return 1;
        }
    }
    CUcheckpointUnlockArgs ua = {{0}};
    t0 = clock_mono_s();
    r = pause_drv.unlock(pid, &ua);
    if (r != CUDA_SUCCESS) {
        pause_say("cannot unlock process %d (%s): it is %s, locked (cupool resume tries again)",
            pid, pause_cu_text(r), t_restore > 0 ? "restored" : "still");
        return 1;
    }
    double t_unlock = clock_mono_s() - t0;
    if (move_back(pid, parked))
        return 1;
    stats_page_mark_paused(pid, 0, 0); /* no page (not under cupool): nothing to say */
    printf("resumed %d: restore %.3f s, unlock %.3f s\n", pid, t_restore, t_unlock);
    return 0;
}
