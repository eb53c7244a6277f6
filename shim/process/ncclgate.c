/* SPDX-License-Identifier: Apache-2.0 */
/*
 * ncclgate.c - see ncclgate.h.
 *
 * Suspending waits for every device that holds a communicator (a device
 * synchronization, through the seam the device's pools use): NCCL refuses
 * a suspend while an operation is outstanding, and with the gate closed at
 * matching counts on every rank, every collective queued has all its
 * ranks' parts queued too, so it completes.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "devstate.h"
#include "gate.h"
#include "job.h"
#include "log.h"
#include "ncclgate.h"

/* The last request's outcome: written by the helper thread alone, read
 * by it when it publishes. */
static int32_t last_error;
static uint64_t last_freed = STATS_UNKNOWN;
static char last_why[sizeof(((stats_gate *)0)->why)];

/* Waits for the work of every device in bits (job.h's): 0, or -EIO with
 * why said. */
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
            snprintf(last_why, sizeof(last_why), "device %d: its work could not be waited "
                     "for (CUDA error %d)", d, r);
            return -EIO;
        }
    }
    return 0;
}

static int suspend(void)
{
    if (!shim_job_can_suspend()) {
        snprintf(last_why, sizeof(last_why), "this NCCL has no ncclCommSuspend (2.29.7 or "
                 "later)");
        return -ENOSYS;
    }
    if (!shim_gate_stopped()) {
        snprintf(last_why, sizeof(last_why), "the gate is not closed with no thread inside "
                 "NCCL");
        return -EBUSY;
    }
    int err = devices_sync(shim_job_devices());
    if (err)
        return err;
    err = shim_job_suspend_all(&last_freed, last_why, sizeof(last_why));
    if (!err)
        shim_gate_hold();
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
