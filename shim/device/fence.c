/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fence.c - the fence: what makes a block freed by the program safe to
 * hand to new work (fence.h). The streams it must order are tracked here
 * too.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "capture.h"
#include "comm.h"
#include "cupti.h"
#include "devstate.h"
#include "driver.h"
#include "fence.h"
#include "grow.h"
#include "log.h"
#include "process.h"
#include "recorder.h"

/* True if the legacy stream or any tracked stream is capturing. Needs
 * d->lock. */
static bool any_capture(shim_device *d)
{
    if (shim_device_cuda(d)->capturing(cudaStreamLegacy))
        return true;
    for (size_t i = 0; i < d->nstreams; i++)
        if (shim_device_cuda(d)->capturing(d->streams[i].stream))
            return true;
    return false;
}

static void event_give(shim_device *d, cudaEvent_t e);
static void order_event_set(shim_device *d, shim_fence *f);

/* Makes stream s wait for event e, counted in fence_waits. Needs d->lock. */
static int wait_on(shim_device *d, cudaStream_t s, cudaEvent_t e)
{
    shim_device_count(d, SHIM_DEV_fence_waits, 1);
    return shim_device_cuda(d)->wait(s, e);
}

/* Gives back the destroyed streams' events: a fence covered them. Needs
 * d->lock. */
static void orphans_drop(shim_device *d)
{
    while (d->norphans)
        event_give(d, d->orphans[--d->norphans]);
}

static int barrier_locked(shim_device *d)
{
    int e = 0;
    if (!d->legacy_event)
        e = shim_device_cuda(d)->event_create(&d->legacy_event);
    for (size_t i = 0; !e && i < d->nstreams; i++) {
        shim_stream *s = &d->streams[i];
        if (!s->nonblocking)
            continue;
        e = shim_device_cuda(d)->record(s->event, s->stream);
        if (!e)
            e = wait_on(d, cudaStreamLegacy, s->event);
    }
    for (size_t i = 0; !e && i < d->norphans; i++)
        e = wait_on(d, cudaStreamLegacy, d->orphans[i]);
    if (!e)
        e = shim_device_cuda(d)->record(d->legacy_event, cudaStreamLegacy);
    for (size_t i = 0; !e && i < d->nstreams; i++)
        if (d->streams[i].nonblocking)
            e = wait_on(d, d->streams[i].stream, d->legacy_event);
    if (!e)
        orphans_drop(d);
    if (e) {
        shim_log(SHIM_LOG_ERROR, "device %d: fence failed: %s", d->id,
                 shim_device_cuda(d)->strerror(e));
        return -EIO;
    }
    return 0;
}


/* ---- the poll fence ------------------------------------------------------ */

/* An event from the device's spare ones, or a new one. Needs d->lock. */
static int event_take(shim_device *d, cudaEvent_t *e)
{
    if (d->nspare) {
        *e = d->spare_events[--d->nspare];
        return 0;
    }
    return shim_device_cuda(d)->event_create(e);
}

static void event_give(shim_device *d, cudaEvent_t e)
{
    if (!e)
        return;
    if (pool_grow((void **)&d->spare_events, &d->spare_cap, d->nspare, sizeof(e)))
        d->spare_events[d->nspare++] = e;
    else
        shim_device_cuda(d)->event_destroy(e);
}

/* Retires the oldest poll fence, done. Needs d->lock. */
static void fence_retire(shim_device *d)
{
    shim_fence *f = &d->fences[0];
    d->tickets_done = f->ticket;
    for (size_t i = 0; i < f->nevents; i++)
        event_give(d, f->events[i]);
    event_give(d, f->legacy);
    free(f->events);
    memmove(d->fences, d->fences + 1, --d->nfences * sizeof(*d->fences));
}

/* The non-blocking streams a poll fence must record on, into d->due, as
 * comm.h gives them: left out, a stream with no work queued since a fence
 * covered it, or whose work since is only collectives on memory not freed
 * since. Returns how many; SIZE_MAX for every one (CUPTI does not watch,
 * or a list could not grow). Asked before any CUDA call. Needs d->lock. */
static size_t streams_due(shim_device *d)
{
    if (!shim_comm_begin())
        return SIZE_MAX;
    size_t n = shim_comm_due(d->id, &d->due, &d->due_cap);
    shim_comm_end();
    return n;
}

/* Records one of f's events on stream s. 0 or the CUDA code. Needs
 * d->lock. */
static int record_on(shim_device *d, shim_fence *f, cudaStream_t s)
{
    int e = event_take(d, &f->events[f->nevents]);
    if (!e && (e = shim_device_cuda(d)->record(f->events[f->nevents], s)) != 0)
        event_give(d, f->events[f->nevents]);
    f->nevents += !e;
    return e;
}

/* Records f's events: on the ndue streams of d->due (all non-blocking
 * streams for SIZE_MAX), on those comm.h does not know, then on the
 * legacy stream. 0 or the CUDA code (f holds the events recorded so far).
 * Needs d->lock. */
static int record_due(shim_device *d, shim_fence *f, size_t ndue)
{
    int e = 0;
    bool all = ndue == SIZE_MAX;
    for (size_t i = 0; !e && !all && i < ndue; i++)
        e = record_on(d, f, d->due[i].stream);
    for (size_t i = 0; !e && (all || d->neager) && i < d->nstreams; i++) {
        const shim_stream *st = &d->streams[i];
        if (st->nonblocking && (all || !st->lazy))
            e = record_on(d, f, st->stream);
    }
    if (!e && (e = event_take(d, &f->legacy)) == 0 &&
        (e = shim_device_cuda(d)->record(f->legacy, cudaStreamLegacy)) != 0) {
        event_give(d, f->legacy);
        f->legacy = NULL;
    }
    return e;
}

/* Begins a poll fence: events recorded, no stream made to wait. Needs
 * d->lock. 0, -ENOBUFS (host memory) or -EIO. */
static int poll_begin_locked(shim_device *d, uint64_t *ticket)
{
    if (!pool_grow((void **)&d->fences, &d->fences_cap, d->nfences, sizeof(*d->fences)))
        return -ENOBUFS;
    shim_fence f = {0};
    size_t ndue = streams_due(d);
    size_t recorded = ndue == SIZE_MAX ? d->nnb : ndue + d->neager;
    if ((recorded || d->norphans) &&
        !(f.events = calloc(recorded + d->norphans, sizeof(*f.events))))
        return -ENOBUFS;
    int e = record_due(d, &f, ndue);
    if (e) {
        for (size_t i = 0; i < f.nevents; i++)
            event_give(d, f.events[i]);
        free(f.events);
        shim_log(SHIM_LOG_ERROR, "device %d: fence failed: %s", d->id,
                 shim_device_cuda(d)->strerror(e));
        return -EIO;
    }
    if (ndue != SIZE_MAX && ndue && shim_comm_begin()) {
        for (size_t i = 0; i < ndue; i++)
            shim_comm_covered(&d->due[i]);
        shim_comm_end();
    }
    if (d->norphans) {
        memcpy(f.events + f.nevents, d->orphans, d->norphans * sizeof(*f.events));
        f.nevents += d->norphans;
        d->norphans = 0;
    }
    if (recorded < d->nnb)
        shim_device_count(d, SHIM_DEV_fence_streams_left, d->nnb - recorded);
    f.ticket = *ticket = ++d->tickets;
    if (!d->nnb && !f.nevents && !d->nfences) {
        /* Done as recorded: every stream there is follows the legacy
         * stream (blocking and per-thread streams by CUDA's rules, and a
         * non-blocking stream made later waits for order_event when it is
         * made). Querying the event would cost more than the fence: it
         * sends the queued work to the GPU. */
        order_event_set(d, &f);
        d->tickets_done = f.ticket;
        free(f.events);
        return 0;
    }
    d->fences[d->nfences++] = f;
    return 0;
}

/* How far a poll may go to finish poll fences. */
enum poll_level {
    POLL_QUERY,  /* event queries only (a capture is going on) */
    POLL_ORDER,  /* also make the non-blocking streams wait for a fence's
                    legacy event once its own events have completed */
    POLL_FORCE   /* also make the oldest fence done: the legacy stream waits
                    for its events still running, and every non-blocking
                    stream for the legacy stream (a barrier on the events
                    of that fence, not on work queued since) */
};

/* Makes every non-blocking stream wait for e, a legacy-stream event; 0 or
 * the first error. *waits counts the streams made to wait (may be NULL).
 * With lazy, those comm.h knows owe it instead, while CUPTI watches: e is
 * then d->order_event (the event they pay on). Needs d->lock. */
static int order_after(shim_device *d, cudaEvent_t e, bool lazy, size_t *waits)
{
    int err = 0;
    size_t n = 0;
    /* Streams pay through the driver's own calls (shim_fence_pay). */
    lazy = lazy && shim_drv.cuStreamWaitEvent && shim_drv.cuStreamIsCapturing &&
           shim_comm_owe(d->id);
    for (size_t i = 0; !err && (!lazy || d->neager) && i < d->nstreams; i++) {
        const shim_stream *st = &d->streams[i];
        if (st->nonblocking && !(lazy && st->lazy) && (err = wait_on(d, st->stream, e)) == 0)
            n++;
    }
    if (waits)
        *waits = n;
    return err;
}

/* Makes f's legacy event the one non-blocking streams are ordered after
 * (made later, or owing). Needs d->lock. */
static void order_event_set(shim_device *d, shim_fence *f)
{
    pthread_mutex_lock(&d->order_lock);
    event_give(d, d->order_event);
    d->order_event = f->legacy;
    f->legacy = NULL;
    pthread_mutex_unlock(&d->order_lock);
}

bool shim_fence_pay(int dev, void *s)
{
    shim_device *d = &shim_devices[dev];
    /* The driver's calls (streams owe only where it has them: order_after):
     * this runs inside one of the driver's calls, on the thread making it.
     * A stream that says it is capturing pays later; one that cannot tell
     * pays now. */
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    if (shim_drv.cuStreamIsCapturing((CUstream)s, &st) == CUDA_SUCCESS &&
        st != CU_STREAM_CAPTURE_STATUS_NONE)
        return false;
    pthread_mutex_lock(&d->order_lock);
    if (d->order_event) {
        shim_device_count(d, SHIM_DEV_fence_waits, 1);
        if (shim_drv.cuStreamWaitEvent((CUstream)s, (CUevent)d->order_event, 0) != 0)
            shim_log(SHIM_LOG_ERROR, "device %d: a stream cannot wait for a fence it "
                     "owes: a block reused on it may still be in use", d->id);
    }
    pthread_mutex_unlock(&d->order_lock);
    return true;
}

/* Forces fence f done: the legacy stream waits for its events still
 * running, then records an event every non-blocking stream waits for
 * (streams made later wait for it too: track_stream). Needs d->lock. */
static int force_locked(shim_device *d, shim_fence *f)
{
    int e = 0;
    if (!d->legacy_event)
        e = shim_device_cuda(d)->event_create(&d->legacy_event);
    for (size_t i = f->ndone; !e && i < f->nevents; i++)
        if ((e = shim_cuda_query(shim_device_cuda(d), f->events[i])) == cudaErrorNotReady)
            e = wait_on(d, cudaStreamLegacy, f->events[i]);
    if (!e)
        e = shim_device_cuda(d)->record(d->legacy_event, cudaStreamLegacy);
    return e ? e : order_after(d, d->legacy_event, false, NULL);
}

/* Retires the poll fences that are done, oldest first, going as far as
 * level allows. Needs d->lock. 0, or -EIO if a call failed. */
static int poll_locked(shim_device *d, enum poll_level level)
{
    bool forced = false;
    while (d->nfences) {
        shim_fence *f = &d->fences[0];
        int e = 0;
        while (f->ndone < f->nevents && (e = shim_cuda_query(shim_device_cuda(d), f->events[f->ndone])) == 0)
            f->ndone++;
        /* No legacy event: it became order_event, and ordering after it
         * failed: it is ordered again. */
        if (!e)
            e = f->legacy ? shim_cuda_query(shim_device_cuda(d), f->legacy) : cudaErrorNotReady;
        if (e == cudaErrorNotReady && level >= POLL_ORDER && f->ndone == f->nevents) {
            /* Streams made later wait for it too (track_stream), even when
             * there is none now; those owing it pay on it. */
            size_t waits = 0;
            if (f->legacy)
                order_event_set(d, f);
            if ((e = order_after(d, d->order_event, true, &waits)) == 0 && d->nnb)
                shim_device_count(d, SHIM_DEV_fence_orders, 1);
        } else if (e == cudaErrorNotReady && level == POLL_FORCE && !forced) {
            forced = true;
            e = force_locked(d, f);
        }
        if (e == cudaErrorNotReady)
            return 0;
        if (e) {
            shim_log(SHIM_LOG_ERROR, "device %d: fence failed: %s", d->id,
                     shim_device_cuda(d)->strerror(e));
            return -EIO;
        }
        fence_retire(d);
    }
    return 0;
}

/* The fence proper, ordering all work counted up to work (CUPOOL_CUPTI).
 * Needs d->lock. */
static int fence_locked(shim_device *d, uint64_t work)
{
    int err = 0;
    if (shim_cfg.fence != SHIM_FENCE_SYNC) {
        err = barrier_locked(d);
    } else {
        shim_device_count(d, SHIM_DEV_syncs, 1);
        if (shim_device_cuda(d)->sync() != 0)
            err = -EIO;
        else
            orphans_drop(d);
    }
    if (!err)
        atomic_store_explicit(&d->fenced_work, work, memory_order_relaxed);
    return err;
}

enum fence_op { FENCE_FULL, FENCE_BEGIN, FENCE_POLL, FENCE_POLL_FORCE };

/* One fence operation, with d->lock held; quiet: no stream may be touched
 * (a capture is going on). FENCE_BEGIN stores the new fence's ticket in
 * *ticket, the polls the last ticket done. */
static int fence_op_locked(shim_device *d, enum fence_op op, bool quiet,
                           uint64_t work, uint64_t *ticket)
{
    int err;
    uint64_t seq = atomic_load_explicit(&d->fences_begun, memory_order_relaxed) + 1;
    switch (op) {
    case FENCE_FULL:
        atomic_store_explicit(&d->fences_begun, seq, memory_order_release);
        if ((err = fence_locked(d, work)) == 0)
            d->full_seq = seq;
        return err;
    case FENCE_BEGIN:
        atomic_store_explicit(&d->fences_begun, seq, memory_order_release);
        if ((err = poll_begin_locked(d, ticket)) == 0) {
            atomic_store_explicit(&d->fenced_work, work, memory_order_relaxed);
            d->begin_seq = seq;
            d->begin_ticket = *ticket;
        }
        return err;
    default:
        err = poll_locked(d, quiet ? POLL_QUERY
                             : op == FENCE_POLL_FORCE ? POLL_FORCE : POLL_ORDER);
        *ticket = d->tickets_done;
        return err;
    }
}

/* Whether a fence of op's kind that another thread began after seen (the
 * fences begun when the caller looked, after its blocks were freed) has
 * been issued: its calls came after those frees, so it orders all the
 * caller's would, and the caller answers its ticket (FENCE_BEGIN) instead
 * of making CUDA calls of its own. Threads that free and fence at once on
 * one device then share one fence, made by whoever holds the lock first.
 * Needs d->lock. */
static bool combined_locked(shim_device *d, enum fence_op op, uint64_t seen,
                            uint64_t *ticket)
{
    if (op == FENCE_FULL)
        return d->full_seq > seen;
    if (op != FENCE_BEGIN || d->begin_seq <= seen)
        return false;
    *ticket = d->begin_ticket;
    return true;
}

/* Runs a fence operation where it cannot break a graph capture: at once
 * while none is counted (holding d->lock until its calls are in, see
 * shim_capture_begin); else in relaxed capture mode, so that its calls
 * cannot break a capture on any thread, and, if one of the device's
 * streams is capturing, without touching any stream: a begin or a full
 * fence answers -EAGAIN, a poll only queries. */
static int fence_run(shim_device *d, enum fence_op op, uint64_t work, uint64_t *ticket)
{
    int err = -EAGAIN;
    /* Every block the caller's fence is for was freed before this load. */
    uint64_t seen = atomic_load_explicit(&d->fences_begun, memory_order_acquire);
    /* A poll that is not forced only looks: while another thread fences,
     * it answers what is known done rather than queue for the lock (its
     * own fence, next, may then share that thread's). */
    if (op == FENCE_POLL && pthread_mutex_trylock(&d->lock) != 0) {
        *ticket = atomic_load(&d->tickets_done);
        return 0;
    }
    if (op != FENCE_POLL)
        pthread_mutex_lock(&d->lock);
    if (combined_locked(d, op, seen, ticket)) {
        pthread_mutex_unlock(&d->lock);
        shim_device_count(d, SHIM_DEV_fences_skipped, 1);
        return 0;
    }
    bool fast = !shim_captures_counted() || (op >= FENCE_POLL && !d->nfences);
    if (fast)
        err = fence_op_locked(d, op, false, work, ticket);
    pthread_mutex_unlock(&d->lock);
    if (!fast) {
        int mode = cudaStreamCaptureModeRelaxed;
        shim_device_cuda(d)->exchange_mode(&mode);
        pthread_mutex_lock(&d->lock);
        bool quiet = any_capture(d);
        if (!quiet || op >= FENCE_POLL)
            err = fence_op_locked(d, op, quiet, work, ticket);
        pthread_mutex_unlock(&d->lock);
        shim_device_cuda(d)->exchange_mode(&mode);
    }
    return err;
}

/* The work count (CUPOOL_CUPTI) to read before a fence's calls: all work
 * counted so far is queued before them, so the fence orders it. True if
 * none came since the device's last fence: this one needs no CUDA call
 * (the caller counts it in fences_skipped if it skips). */
static bool no_new_work(shim_device *d, uint64_t *work)
{
    *work = SHIM_WORK_NEVER;
    /* With comm streams, the last fence may have left out a stream that a
     * free since has marked: it does not cover everything. */
    if (!shim_work_watching() || shim_comm_active())
        return false;
    *work = shim_work_count();
    return *work == atomic_load_explicit(&d->fenced_work, memory_order_relaxed);
}

static void count_skip(shim_device *d)
{
    shim_device_count(d, SHIM_DEV_fences_skipped, 1);
}

static void trace_fence(shim_shard *sh, int err)
{
    shim_trace_put(sh->ring, false, TRACE_FENCE,
                   !err ? TRACE_R_OK : err == -EAGAIN ? TRACE_R_DEFERRED : TRACE_R_ERROR,
                   sh->id, 0, 0);
}

int shim_fence_full(void *ctx)
{
    shim_shard *sh = ctx;
    uint64_t work, none = 0;
    int err = 0;
    if (no_new_work(sh->dev, &work)) {
        count_skip(sh->dev);
    } else {
        shim_work_fence_due();
        err = fence_run(sh->dev, FENCE_FULL, work, &none);
    }
    trace_fence(sh, err);
    return err;
}

int shim_fence_begin(void *ctx, uint64_t *ticket)
{
    shim_shard *sh = ctx;
    shim_device *d = sh->dev;
    uint64_t work;
    int err = -EAGAIN;
    if (no_new_work(d, &work)) {
        /* The last fence begun covers everything: answer its ticket. */
        pthread_mutex_lock(&d->lock);
        *ticket = d->tickets;
        pthread_mutex_unlock(&d->lock);
        if (*ticket) {
            count_skip(d);
            err = 0;
        }
    }
    if (err) {
        shim_work_fence_due();
        err = fence_run(d, FENCE_BEGIN, work, ticket);
    }
    trace_fence(sh, err);
    return err;
}

int shim_fence_poll(void *ctx, bool force, uint64_t *done)
{
    shim_shard *sh = ctx;
    return fence_run(sh->dev, force ? FENCE_POLL_FORCE : FENCE_POLL, 0, done);
}

/* ---- streams ------------------------------------------------------------ */

void shim_device_track_stream(int dev, cudaStream_t s, unsigned int flags)
{
    shim_device *d = &shim_devices[dev];
    shim_device_api(dev);
    bool nb = flags & cudaStreamNonBlocking;
    cudaEvent_t ev = NULL;
    if (nb && shim_device_cuda(d)->event_create(&ev) != 0) {
        shim_log(SHIM_LOG_ERROR, "device %d: no event for a new stream; "
                 "reuse after free may not be ordered on it", dev);
        return;
    }
    bool lazy = nb && shim_comm_track(s, dev);
    pthread_mutex_lock(&d->lock);
    if (pool_grow((void **)&d->streams, &d->streams_cap, d->nstreams, sizeof(*d->streams))) {
        d->streams[d->nstreams++] =
            (shim_stream){.stream = s, .event = ev, .nonblocking = nb, .lazy = lazy};
        d->nnb += nb;
        d->neager += nb && !lazy;
    } else if (nb) {
        /* Untracked, it must not owe its order to comm.h either. */
        shim_comm_forget(s);
        shim_log(SHIM_LOG_ERROR, "device %d: out of host memory tracking a new stream; "
                 "reuse after free may not be ordered on it", dev);
    }
    /* A block a fence made clean by ordering the non-blocking streams after
     * the legacy stream's work may still be in use by that work: a new
     * non-blocking stream is ordered after it too. */
    if (nb && d->legacy_event)
        wait_on(d, s, d->legacy_event);
    if (nb && d->order_event)
        wait_on(d, s, d->order_event);
    pthread_mutex_unlock(&d->lock);
}

/* Stream s is being destroyed, its queued work going on: no fence will
 * record on it again, so the next fence waits for an event recorded on it
 * now (real cudaFree would wait for that work). Completed ones are given
 * back as more come. Needs d->lock. */
static void orphan_locked(shim_device *d, cudaStream_t s)
{
    if (shim_cfg.fence == SHIM_FENCE_NONE)
        return;
    size_t k = 0;
    for (size_t i = 0; i < d->norphans; i++) {
        if (d->norphans >= 64 && shim_cuda_query(shim_device_cuda(d), d->orphans[i]) == 0)
            event_give(d, d->orphans[i]);
        else
            d->orphans[k++] = d->orphans[i];
    }
    d->norphans = k;
    cudaEvent_t e = NULL;
    if (!pool_grow((void **)&d->orphans, &d->orphans_cap, d->norphans, sizeof(e)) ||
        event_take(d, &e) != 0 || shim_device_cuda(d)->record(e, s) != 0) {
        event_give(d, e);
        shim_log(SHIM_LOG_ERROR, "device %d: cannot record an event on a stream "
                 "being destroyed; a block its work still uses may be reused early",
                 d->id);
        return;
    }
    d->orphans[d->norphans++] = e;
}

void shim_device_untrack_stream(cudaStream_t s)
{
    for (int i = 0; i < SHIM_MAX_DEVICES; i++) {
        shim_device *d = &shim_devices[i];
        pthread_mutex_lock(&d->lock);
        for (size_t k = 0; k < d->nstreams; k++) {
            if (d->streams[k].stream != s)
                continue;
            if (d->streams[k].event)
                shim_device_cuda(d)->event_destroy(d->streams[k].event);
            if (d->streams[k].nonblocking)
                orphan_locked(d, s);
            d->nnb -= d->streams[k].nonblocking;
            d->neager -= d->streams[k].nonblocking && !d->streams[k].lazy;
            d->streams[k] = d->streams[--d->nstreams];
            shim_comm_forget(s);
            pthread_mutex_unlock(&d->lock);
            return;
        }
        pthread_mutex_unlock(&d->lock);
    }
}
