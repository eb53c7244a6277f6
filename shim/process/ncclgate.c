/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ncclgate.c - see ncclgate.h.
 *
 * Suspending holds the gate first (it no longer opens by itself) and
 * checks under the gate's lock that no thread is inside NCCL; then waits
 * for every device that holds a communicator (a device synchronization,
 * through the seam the device's pools use): NCCL refuses a suspend while
 * an operation is outstanding, and with the gate closed at matching
 * counts on every rank, every collective queued has all its ranks' parts
 * queued too, so it completes. Where a rank was not stopped at the same
 * count (a communicator the controller could not name), it never does:
 * the wait runs on a thread of its own, and the helper gives up on it
 * after SYNC_DEADLINE_S, saying so. That thread ends when the devices do;
 * until then a suspend is refused.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "devstate.h"
#include "gate.h"
#include "job.h"
#include "log.h"
#include "ncclgate.h"

enum { SYNC_DEADLINE_S = 5 };

/* The last request's outcome: written by the helper thread alone, read
 * by it when it publishes. */
static int32_t last_error;
static uint64_t last_freed = STATS_UNKNOWN;
static char last_why[sizeof(((stats_gate *)0)->why)];

/* The wait for the devices: asked by the helper, done by sync_thread. */
static pthread_mutex_t sync_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t sync_done = PTHREAD_COND_INITIALIZER;
static bool sync_running;   /* a wait under way (perhaps given up on) */
static uint64_t sync_bits;  /* the devices to wait for */
static int sync_device, sync_result; /* the device that failed, CUDA's error */

/* Waits for the work of every device in sync_bits: 0, or the CUDA error
 * with sync_device the device. */
static int devices_sync(uint64_t bits)
{
    for (int d = 0; d < 63 && d < SHIM_MAX_DEVICES; d++) {
        if (!(bits >> d & 1))
            continue;
        const shim_cuda *c = shim_cuda_for(shim_device_api(d));
        shim_saved saved;
        int r = c->enter(d, shim_device_ctx(d), &saved) ? c->sync() : -1;
        c->leave(&saved);
        if (r) {
            sync_device = d;
            return r;
        }
    }
    return 0;
}

static void *sync_thread(void *arg)
{
    (void)arg;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL);
    int r = devices_sync(sync_bits);
    pthread_mutex_lock(&sync_lock);
    sync_result = r;
    sync_running = false;
    pthread_cond_broadcast(&sync_done);
    pthread_mutex_unlock(&sync_lock);
    return NULL;
}

/* Waits for the devices in bits, up to SYNC_DEADLINE_S: 0, or -errno with
 * why said. */
static int devices_wait(uint64_t bits)
{
    pthread_mutex_lock(&sync_lock);
    if (sync_running) {
        pthread_mutex_unlock(&sync_lock);
        snprintf(last_why, sizeof(last_why), "the devices' work an earlier suspend waited "
                 "for has still not ended");
        return -EBUSY;
    }
    pthread_t t;
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
    sync_bits = bits;
    sync_running = pthread_create(&t, &a, sync_thread, NULL) == 0;
    pthread_attr_destroy(&a);
    if (!sync_running) {
        pthread_mutex_unlock(&sync_lock);
        snprintf(last_why, sizeof(last_why), "no thread to wait for the devices");
        return -EAGAIN;
    }
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += SYNC_DEADLINE_S;
    while (sync_running && pthread_cond_timedwait(&sync_done, &sync_lock, &until) == 0)
        ;
    int err = sync_running ? -ETIMEDOUT : sync_result ? -EIO : 0;
    if (err == -ETIMEDOUT)
        snprintf(last_why, sizeof(last_why), "the devices' work did not end within %d s: a "
                 "collective waits for a rank that is not stopped at the same operation",
                 SYNC_DEADLINE_S);
    else if (err)
        snprintf(last_why, sizeof(last_why), "device %d: its work could not be waited for "
                 "(CUDA error %d)", sync_device, sync_result);
    pthread_mutex_unlock(&sync_lock);
    return err;
}

static int suspend(void)
{
    if (!shim_job_can_suspend()) {
        snprintf(last_why, sizeof(last_why), "this NCCL has no ncclCommSuspend (2.29.7 or "
                 "later)");
        return -ENOSYS;
    }
    if (!shim_gate_try_hold()) {
        snprintf(last_why, sizeof(last_why), "the gate is not closed with no thread inside "
                 "NCCL (it opened by itself, or a thread went past it)");
        return -EBUSY;
    }
    int err = devices_wait(shim_job_devices());
    if (!err)
        err = shim_job_suspend_all(&last_freed, last_why, sizeof(last_why));
    if (err)
        shim_gate_unhold();
    return err;
}

void shim_ncclgate_serve(const stats_nccl_ask *a)
{
    last_error = 0;
    last_why[0] = '\0';
    switch (a->want) {
    case STATS_NCCL_CLOSE:
        shim_gate_close(a->id, a->target, a->ntargets, a->hold_s);
        break;
    case STATS_NCCL_SUSPEND:
        last_error = suspend();
        break;
    case STATS_NCCL_RESUME:
        last_error = shim_job_resume_all(last_why, sizeof(last_why));
        break;
    case STATS_NCCL_OPEN:
        shim_gate_open();
        break;
    default:
        last_error = -EINVAL;
        snprintf(last_why, sizeof(last_why), "unknown request %u", a->want);
    }
    if (last_error)
        shim_log(SHIM_LOG_WARN, "NCCL gate: %s", last_why);
}

void shim_ncclgate_view(stats_gate *g)
{
    memset(g, 0, sizeof(*g));
    shim_gate_view(g);
    g->can_suspend = shim_job_devices() && shim_job_can_suspend();
    g->error = last_error;
    g->freed = last_freed;
    memcpy(g->why, last_why, sizeof(g->why));
}
