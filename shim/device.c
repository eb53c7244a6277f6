/*
 * device.c - per-device pools and the CUDA backend.
 *
 * Backend: reserve is the real cudaMalloc, release the real cudaFree, and
 * the fence one of four modes (DESIGN.md, "Stream safety"):
 *   barrier  GPU-side, the host never waits: each tracked non-blocking
 *            stream records an event the legacy stream waits on; the legacy
 *            stream records one event every non-blocking stream waits on.
 *            Blocking streams and per-thread default streams are ordered by
 *            the legacy stream itself.
 *   poll     a fence records an event on the legacy stream and on each
 *            tracked non-blocking stream, and makes no stream wait: the
 *            blocks freed before it are reused once those have completed
 *            (event queries; the host never waits), or, when only the
 *            legacy event is still running, once the non-blocking streams
 *            were made to wait for it (ordered). Before the pool grows, the
 *            oldest fence is forced done: the legacy stream waits for that
 *            fence's events, not for work queued since, and the
 *            non-blocking streams for the legacy stream. When the pool
 *            cannot grow at all, a barrier.
 *   sync     cudaDeviceSynchronize, as the real cudaFree would have done,
 *            but only when a block freed since the last fence is reused.
 *   none     no fence (only for programs known to use one stream).
 * With CUPOOL_CUPTI, a fence is skipped when no GPU work was submitted
 * since the device's last one (cupti.h): that one orders every block freed
 * since.
 * With CUPOOL_VMM, segments come from the driver's virtual memory calls
 * (vmm.c) instead, and the pool may also give back parts of them (trim).
 * Like the real cudaFree, giving memory back first waits for the device;
 * while a capture is open it cannot, so a trim is refused and a release
 * waits for the next chance.
 * No fence is issued while a graph is being captured: the fence answers
 * -EAGAIN and the pool serves the request from a new segment instead. While
 * a capture begun through the interposed runtime is open, the fence checks
 * the legacy and every tracked stream, in relaxed capture mode so that it
 * can never break a capture on another thread; while none is, it skips those
 * checks (a capture begun through the driver API is not seen: DESIGN.md).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "comm.h"
#include "cupti.h"
#include "device.h"
#include "grow.h"
#include "log.h"
#include "owner.h"
#include "process.h"
#include "recorder.h"
#include "stats.h"

shim_device shim_devices[SHIM_MAX_DEVICES];

static pthread_mutex_t create_lock = PTHREAD_MUTEX_INITIALIZER;

void shim_devices_init(void)
{
    for (int i = 0; i < SHIM_MAX_DEVICES; i++) {
        shim_devices[i].id = i;
        shim_devices[i].fenced_work = SHIM_WORK_NEVER;
        pthread_mutex_init(&shim_devices[i].lock, NULL);
    }
}

/* ---- CUDA calls: through the program's runtime, or the driver ------------
 * A device whose pool was made while the process had a dynamic runtime
 * calls it (its calls make the primary context as cudaMalloc would); one
 * made without (a static runtime, a driver-API program, CuPy, XLA) calls the
 * driver in the context the pool serves. Each returns 0 or the runtime's or
 * the driver's error code (they agree on success, 1 invalid value and 2 out
 * of memory), leaving no error behind in the runtime. */

_Thread_local bool shim_via_driver;

/* Whether the shim's calls for d go to the driver: always for a device
 * without a dynamic runtime, and for a request that came through the
 * driver (shim_via_driver), which the runtime may have made while holding
 * its own locks: calling back into the runtime then could wait on them. */
static bool drv(const shim_device *d)
{
    return shim_via_driver ||
           atomic_load_explicit(&d->api, memory_order_relaxed) == SHIM_API_DRIVER;
}

int shim_device_api(int dev)
{
    shim_device *d = &shim_devices[dev];
    int a = atomic_load(&d->api);
    if (!a) {
        int want = shim_real_resolve() == 0 ? SHIM_API_RUNTIME : SHIM_API_DRIVER;
        atomic_compare_exchange_strong(&d->api, &a, want);
        a = atomic_load(&d->api);
    }
    return a;
}

static int rt_done(cudaError_t e)
{
    if (e != cudaSuccess)
        shim_real.cudaGetLastError();
    return (int)e;
}

/* A runtime call of the shim's own: the runtime's own driver calls inside
 * it reach the real driver, not the shim again (interpose.h). */
static _Thread_local cudaError_t rt_e;
#define RT(call) (shim_inside++, rt_e = (call), shim_inside--, rt_done(rt_e))

static int cu_malloc(const shim_device *d, size_t size, uintptr_t *base)
{
    if (drv(d)) {
        /* A thread with no context yet (one that only used a runtime the
         * process loaded after the pool was made): the pool's, as the
         * runtime would have made it current. */
        CUcontext c = NULL, own = atomic_load(&d->ctx);
        if (shim_drv.cuCtxGetCurrent(&c) == CUDA_SUCCESS && !c && own)
            shim_drv.cuCtxSetCurrent(own);
        CUdeviceptr p = 0;
        CUresult r = shim_drv.cuMemAlloc_v2(&p, size);
        *base = (uintptr_t)p;
        return (int)r;
    }
    void *p = NULL;
    int e = RT(shim_real.cudaMalloc(&p, size));
    *base = (uintptr_t)p;
    return e;
}

static int cu_free(const shim_device *d, uintptr_t p)
{
    return drv(d) ? (int)shim_drv.cuMemFree_v2((CUdeviceptr)p)
                     : RT(shim_real.cudaFree((void *)p));
}

static int cu_sync(const shim_device *d)
{
    return drv(d) ? (int)shim_drv.cuCtxSynchronize()
                     : RT(shim_real.cudaDeviceSynchronize());
}

static int cu_event_create(const shim_device *d, cudaEvent_t *e)
{
    return drv(d) ? (int)shim_drv.cuEventCreate((CUevent *)e, CU_EVENT_DISABLE_TIMING)
                     : RT(shim_real.cudaEventCreateWithFlags(e, cudaEventDisableTiming));
}

static void cu_event_destroy(const shim_device *d, cudaEvent_t e)
{
    if (drv(d))
        shim_drv.cuEventDestroy_v2((CUevent)e);
    else
        RT(shim_real.cudaEventDestroy(e));
}

static int cu_record(const shim_device *d, cudaEvent_t e, cudaStream_t s)
{
    return drv(d) ? (int)shim_drv.cuEventRecord((CUevent)e, (CUstream)s)
                     : RT(shim_real.cudaEventRecord(e, s));
}

/* 0 once the work before e's record has completed, cudaErrorNotReady
 * (the driver's CUDA_ERROR_NOT_READY, the same number) until then. The
 * driver's call when there is one: it leaves no error in the runtime, and
 * the runtime's events are the driver's. */
static int cu_query(const shim_device *d, cudaEvent_t e)
{
    if (shim_drv.cuEventQuery)
        return (int)shim_drv.cuEventQuery((CUevent)e);
    int r = drv(d) ? -1 : (int)shim_real.cudaEventQuery(e);
    return r < 0 ? cudaErrorNotReady : r;
}

static int cu_wait(const shim_device *d, cudaStream_t s, cudaEvent_t e)
{
    return drv(d) ? (int)shim_drv.cuStreamWaitEvent((CUstream)s, (CUevent)e, 0)
                     : RT(shim_real.cudaStreamWaitEvent(s, e, 0));
}

/* Whether s is capturing; true if that cannot be told. */
static bool capturing(const shim_device *d, cudaStream_t s)
{
    if (drv(d)) {
        CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
        return shim_drv.cuStreamIsCapturing((CUstream)s, &st) != CUDA_SUCCESS ||
               st != CU_STREAM_CAPTURE_STATUS_NONE;
    }
    enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    return RT(shim_real.cudaStreamIsCapturing(s, &st)) != 0 ||
           st != cudaStreamCaptureStatusNone;
}

/* Swaps the calling thread's capture mode with *mode (the runtime's and
 * the driver's enums agree). */
/* Swaps the calling thread's capture mode with *mode, through the driver
 * or the runtime (their enums agree); false, *mode untouched, if that API
 * has no such call. */
static bool exchange_mode(bool driver, int *mode)
{
    if (driver && shim_drv.cuThreadExchangeStreamCaptureMode) {
        CUstreamCaptureMode m = (CUstreamCaptureMode)*mode;
        shim_drv.cuThreadExchangeStreamCaptureMode(&m);
        *mode = (int)m;
        return true;
    }
    if (!driver && shim_real.cudaThreadExchangeStreamCaptureMode) {
        enum cudaStreamCaptureMode m = (enum cudaStreamCaptureMode)*mode;
        RT(shim_real.cudaThreadExchangeStreamCaptureMode(&m));
        *mode = (int)m;
        return true;
    }
    return false;
}

static void cu_exchange_mode(const shim_device *d, int *mode)
{
    exchange_mode(drv(d), mode);
}

static const char *cu_strerror(const shim_device *d, int e)
{
    const char *s = NULL;
    if (drv(d))
        return shim_drv.cuGetErrorString && shim_drv.cuGetErrorString((CUresult)e, &s) ==
               CUDA_SUCCESS && s ? s : "driver error";
    return shim_real.cudaGetErrorString((cudaError_t)e);
}

int shim_device_mem_info(int dev, size_t *free_b, size_t *total)
{
    const shim_device *d = &shim_devices[dev];
    *free_b = *total = 0;
    return drv(d) ? (int)shim_drv.cuMemGetInfo_v2(free_b, total)
                     : RT(shim_real.cudaMemGetInfo(free_b, total));
}

/* Makes the device's context current on the calling thread (the helper's,
 * for a flush); *saved is what to put back with leave(). */
static bool enter(const shim_device *d, shim_saved *saved)
{
    if (drv(d)) {
        CUcontext own = atomic_load(&d->ctx);
        if (!own || shim_drv.cuCtxGetCurrent(&saved->ctx) != CUDA_SUCCESS)
            return false;
        return shim_drv.cuCtxSetCurrent(own) == CUDA_SUCCESS;
    }
    if (RT(shim_real.cudaGetDevice(&saved->dev)) != 0)
        saved->dev = -1;
    return RT(shim_real.cudaSetDevice(d->id)) == 0;
}

static void leave(const shim_device *d, const shim_saved *saved)
{
    if (drv(d))
        shim_drv.cuCtxSetCurrent(saved->ctx);
    else if (saved->dev >= 0)
        RT(shim_real.cudaSetDevice(saved->dev));
}

/* ---- backend ------------------------------------------------------------ */

/* Captures begun and not ended (shim_capture_begin). */
static atomic_int captures;

/* A cudaMalloc'd (cuMemAlloc'd) segment: 0, -ENOMEM or -EIO. */
static int cuda_reserve(const shim_device *d, size_t size, uintptr_t *base)
{
    int e = cu_malloc(d, size, base);
    return !e ? 0 : e == cudaErrorMemoryAllocation ? -ENOMEM : -EIO;
}

/* The pool took size bytes from the device's budget (the cap) already. */
static int be_reserve(void *ctx, size_t size, uintptr_t *base)
{
    shim_shard *sh = ctx;
    shim_device *d = sh->dev;
    uint64_t now = atomic_fetch_add(&d->reserved, size) + size;
    int err = d->vmm ? shim_vmm_map(d->vmm, size, base) : cuda_reserve(d, size, base);
    if (!err) {
        /* The peak counts what the driver gave, never a failed request. */
        uint64_t peak = atomic_load(&d->reserved_peak);
        while (now > peak && !atomic_compare_exchange_weak(&d->reserved_peak, &peak, now))
            ;
        /* Stamped after the driver handed it out (see recorder.c). */
        shim_trace_put(sh->ring, true, TRACE_RESERVE, TRACE_R_OK, d->id, *base, size);
        shim_owner_set(*base, size, d->id, (int)(sh - d->shards));
        return 0;
    }
    atomic_fetch_sub(&d->reserved, size);
    shim_trace_put(sh->ring, true, TRACE_RESERVE,
                   err == -ENOMEM ? TRACE_R_NOMEM : TRACE_R_ERROR, d->id, 0, size);
    return err;
}

/* Waits for all work on the device, as the real cudaFree does, so that
 * VMM memory can be unmapped; then unmaps what waited for that. False
 * while a capture is open (waiting would break it) or if the wait failed. */
static bool vmm_settle(shim_device *d)
{
    if (atomic_load(&captures) != 0)
        return false;
    if (cu_sync(d) != 0)
        return false;
    shim_vmm_drain(d->vmm);
    return true;
}

/* Gives back [addr, addr + size) of a VMM segment, now or, while the
 * device cannot be waited for, at the next chance. */
static void vmm_give_back(shim_device *d, uintptr_t addr, size_t size)
{
    if (vmm_settle(d))
        shim_vmm_unmap(d->vmm, addr, size);
    else if (shim_vmm_defer(d->vmm, addr, size))
        shim_log(SHIM_LOG_ERROR, "device %d: out of host memory; %zu bytes "
                 "at %#lx stay mapped", d->id, size, (unsigned long)addr);
}

static void be_release(void *ctx, uintptr_t base, size_t size)
{
    shim_shard *sh = ctx;
    shim_device *d = sh->dev;
    atomic_fetch_sub(&d->reserved, size);
    shim_owner_clear(base, size, d->id, (int)(sh - d->shards));
    /* Stamped before the driver may hand the range out again. */
    shim_trace_put(sh->ring, true, TRACE_RELEASE, TRACE_R_OK, d->id, base, size);
    if (d->vmm) {
        vmm_give_back(d, base, size);
        return;
    }
    int e = cu_free(d, base);
    if (e)
        shim_log(SHIM_LOG_WARN, "device %d: %s of a %zu-byte segment "
                 "failed: %s", d->id, drv(d) ? "cuMemFree" : "cudaFree", size,
                 cu_strerror(d, e));
}

/* Part of a VMM segment, given back only when the device can be waited
 * for now: a trim is optional, and the pool keeps the range if it fails. */
static int be_trim(void *ctx, uintptr_t addr, size_t size)
{
    shim_shard *sh = ctx;
    shim_device *d = sh->dev;
    if (!vmm_settle(d))
        return -EAGAIN;
    atomic_fetch_sub(&d->reserved, size);
    shim_owner_clear(addr, size, d->id, (int)(sh - d->shards));
    shim_trace_put(sh->ring, true, TRACE_RELEASE, TRACE_R_OK, d->id, addr, size);
    shim_vmm_unmap(d->vmm, addr, size);
    return 0;
}

/* A stitched range: the granules behind parts, mapped again. No memory is
 * reserved, so neither the cap nor the trace sees it. */
static int be_stitch(void *ctx, const pool_span *parts, size_t n, uintptr_t *base)
{
    shim_shard *sh = ctx;
    shim_device *d = sh->dev;
    int err = shim_vmm_stitch(d->vmm, parts, n, base);
    if (!err)
        shim_owner_set(*base, pool_spans_size(parts, n), d->id, (int)(sh - d->shards));
    return err;
}

static int be_extend(void *ctx, uintptr_t base, size_t size,
                     const pool_span *parts, size_t n)
{
    shim_shard *sh = ctx;
    shim_device *d = sh->dev;
    int err = shim_vmm_extend(d->vmm, base, size, parts, n);
    if (!err)
        shim_owner_set(base + size, pool_spans_size(parts, n), d->id,
                       (int)(sh - d->shards));
    return err;
}

/* Stitched ranges whose unmapping waits for the device: past this many,
 * the next unstitch waits for it (the addresses, not memory, pile up). */
enum { STITCH_DEFERRED_MAX = 64 };

/* Work queued before the blocks of a stitched range were freed may still
 * use its addresses (a fence orders new work after it; it does not wait):
 * the range is unmapped once the device has been waited for. */
static void be_unstitch(void *ctx, uintptr_t base, size_t size)
{
    shim_shard *sh = ctx;
    shim_device *d = sh->dev;
    shim_owner_clear(base, size, d->id, (int)(sh - d->shards));
    if (shim_vmm_defer(d->vmm, base, size) != 0) {
        vmm_give_back(d, base, size);
        return;
    }
    if (shim_vmm_deferred(d->vmm) > STITCH_DEFERRED_MAX)
        vmm_settle(d);
}

/* True if the legacy stream or any tracked stream is capturing. Needs
 * d->lock. */
static bool any_capture(shim_device *d)
{
    if (capturing(d, cudaStreamLegacy))
        return true;
    for (size_t i = 0; i < d->nstreams; i++)
        if (capturing(d, d->streams[i].stream))
            return true;
    return false;
}

static void event_give(shim_device *d, cudaEvent_t e);

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
        e = cu_event_create(d, &d->legacy_event);
    for (size_t i = 0; !e && i < d->nstreams; i++) {
        shim_stream *s = &d->streams[i];
        if (!s->nonblocking)
            continue;
        e = cu_record(d, s->event, s->stream);
        if (!e)
            e = cu_wait(d, cudaStreamLegacy, s->event);
    }
    for (size_t i = 0; !e && i < d->norphans; i++)
        e = cu_wait(d, cudaStreamLegacy, d->orphans[i]);
    if (!e)
        e = cu_record(d, d->legacy_event, cudaStreamLegacy);
    for (size_t i = 0; !e && i < d->nstreams; i++)
        if (d->streams[i].nonblocking)
            e = cu_wait(d, d->streams[i].stream, d->legacy_event);
    if (!e)
        orphans_drop(d);
    if (e) {
        shim_log(SHIM_LOG_ERROR, "device %d: fence failed: %s", d->id,
                 cu_strerror(d, e));
        return -EIO;
    }
    return 0;
}


void shim_capture_begin(void)
{
    atomic_fetch_add(&captures, 1);
    /* A fence that read no capture holds its device's lock until its CUDA
     * calls are in: wait for any such fence before the capture begins. */
    for (int i = 0; i < SHIM_MAX_DEVICES; i++) {
        if (!shim_device_shard_if_any(i, 0))
            continue;
        pthread_mutex_lock(&shim_devices[i].lock);
        pthread_mutex_unlock(&shim_devices[i].lock);
    }
}

void shim_capture_end(void)
{
    atomic_fetch_sub(&captures, 1);
}

/* ---- capture modes ------------------------------------------------------------
 * The captures going on, with their mode and thread: what CUDA checks
 * before a potentially unsafe call (cudaMalloc, cudaFree). Looked at only
 * while a capture is counted. */

enum { MAX_CAPTURES = 64 };
static struct { void *stream; int mode; pthread_t thread; bool used; } open_captures[MAX_CAPTURES];
static pthread_mutex_t captures_lock = PTHREAD_MUTEX_INITIALIZER;

void shim_capture_note(void *stream, int mode)
{
    pthread_mutex_lock(&captures_lock);
    for (int i = 0; i < MAX_CAPTURES; i++) {
        if (!open_captures[i].used) {
            open_captures[i].stream = stream;
            open_captures[i].mode = mode;
            open_captures[i].thread = pthread_self();
            open_captures[i].used = true;
            break;
        }
    }
    pthread_mutex_unlock(&captures_lock);
}

void shim_capture_ended(void *stream)
{
    pthread_mutex_lock(&captures_lock);
    for (int i = 0; i < MAX_CAPTURES; i++) {
        if (open_captures[i].used && open_captures[i].stream == stream) {
            open_captures[i].used = false;
            break;
        }
    }
    pthread_mutex_unlock(&captures_lock);
    shim_capture_end();
}

bool shim_capture_forbids(int thread_mode)
{
    if (atomic_load(&captures) == 0 || thread_mode == cudaStreamCaptureModeRelaxed)
        return false;
    bool own = false, other_global = false;
    pthread_t me = pthread_self();
    pthread_mutex_lock(&captures_lock);
    for (int i = 0; i < MAX_CAPTURES; i++) {
        if (!open_captures[i].used || open_captures[i].mode == cudaStreamCaptureModeRelaxed)
            continue;
        if (pthread_equal(open_captures[i].thread, me))
            own = true;
        else if (open_captures[i].mode == cudaStreamCaptureModeGlobal)
            other_global = true;
    }
    pthread_mutex_unlock(&captures_lock);
    return own || (thread_mode == cudaStreamCaptureModeGlobal && other_global);
}

bool shim_captures_open(void)
{
    return atomic_load_explicit(&captures, memory_order_relaxed) != 0;
}

bool shim_capture_starts(void)
{
    bool counted = !shim_inside && shim_active();
    if (counted)
        shim_capture_begin();
    return counted;
}

void shim_capture_started(bool counted, bool begun, void *stream, bool per_thread, int mode)
{
    /* To the per-thread forms, stream 0 is the calling thread's stream (the
     * runtime's cudaStreamPerThread is the driver's CU_STREAM_PER_THREAD). */
    if (counted && begun)
        shim_capture_note(per_thread && !stream ? (void *)cudaStreamPerThread : stream, mode);
    else if (counted)
        shim_capture_end();
}

/* The calling thread's capture mode, read without changing it, through the
 * runtime or the driver; CUDA's default (global) if it cannot tell. */
static int thread_mode(bool driver)
{
    int m = cudaStreamCaptureModeRelaxed;
    if (!exchange_mode(driver, &m))
        return cudaStreamCaptureModeGlobal;
    int back = m;
    exchange_mode(driver, &back);
    return m;
}

bool shim_capture_refuses(const char *call, bool driver)
{
    if (!shim_captures_open() || !shim_capture_forbids(thread_mode(driver)))
        return false;
    shim_log(SHIM_LOG_ERROR, "%s during a graph capture that forbids it (a capture "
             "in global or thread-local mode): CUDA refuses it, as without cupool "
             "(operation not permitted when stream is capturing). PyTorch's CUDA "
             "graphs need its caching allocator: run them without --torch", call);
    return true;
}

/* ---- the poll fence ------------------------------------------------------ */

/* An event from the device's spare ones, or a new one. Needs d->lock. */
static int event_take(shim_device *d, cudaEvent_t *e)
{
    if (d->nspare) {
        *e = d->spare_events[--d->nspare];
        return 0;
    }
    return cu_event_create(d, e);
}

static void event_give(shim_device *d, cudaEvent_t e)
{
    if (!e)
        return;
    if (pool_grow((void **)&d->spare_events, &d->spare_cap, d->nspare, sizeof(e)))
        d->spare_events[d->nspare++] = e;
    else
        cu_event_destroy(d, e);
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

/* Begins a poll fence: events recorded, no stream made to wait. Needs
 * d->lock. 0, -ENOBUFS (host memory) or -EIO. */
static int poll_begin_locked(shim_device *d, uint64_t *ticket)
{
    if (!pool_grow((void **)&d->fences, &d->fences_cap, d->nfences, sizeof(*d->fences)))
        return -ENOBUFS;
    shim_fence f = {0};
    size_t nb = 0;
    for (size_t i = 0; i < d->nstreams; i++)
        nb += d->streams[i].nonblocking;
    if ((nb || d->norphans) && !(f.events = calloc(nb + d->norphans, sizeof(*f.events))))
        return -ENOBUFS;
    int e = 0;
    size_t left = 0;
    /* Left out: a stream with no work queued since a fence covered it, or
     * whose work since is only collectives on memory not freed since
     * (comm.h). Asked for all at once, before any CUDA call. */
    bool asking = shim_comm_begin();
    for (size_t i = 0; i < d->nstreams; i++) {
        shim_stream *st = &d->streams[i];
        if (!st->nonblocking)
            continue;
        st->comm_due = !asking || shim_comm_needs(st->stream, &st->comm_mark);
        left += !st->comm_due;
    }
    if (asking)
        shim_comm_end();
    for (size_t i = 0; !e && i < d->nstreams; i++) {
        shim_stream *st = &d->streams[i];
        if (!st->nonblocking || !st->comm_due)
            continue;
        e = event_take(d, &f.events[f.nevents]);
        if (!e && (e = cu_record(d, f.events[f.nevents], d->streams[i].stream)) != 0)
            event_give(d, f.events[f.nevents]);
        f.nevents += !e;
    }
    if (!e && (e = event_take(d, &f.legacy)) == 0 &&
        (e = cu_record(d, f.legacy, cudaStreamLegacy)) != 0) {
        event_give(d, f.legacy);
        f.legacy = NULL;
    }
    if (e) {
        for (size_t i = 0; i < f.nevents; i++)
            event_give(d, f.events[i]);
        free(f.events);
        shim_log(SHIM_LOG_ERROR, "device %d: fence failed: %s", d->id,
                 cu_strerror(d, e));
        return -EIO;
    }
    if (asking && shim_comm_begin()) {
        for (size_t i = 0; i < d->nstreams; i++)
            if (d->streams[i].nonblocking && d->streams[i].comm_due)
                shim_comm_covered(d->streams[i].stream, &d->streams[i].comm_mark);
        shim_comm_end();
    }
    if (d->norphans) {
        memcpy(f.events + f.nevents, d->orphans, d->norphans * sizeof(*f.events));
        f.nevents += d->norphans;
        d->norphans = 0;
    }
    if (left)
        atomic_fetch_add_explicit(&d->fence_streams_left, left, memory_order_relaxed);
    f.ticket = *ticket = ++d->tickets;
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
 * Needs d->lock. */
static int order_after(shim_device *d, cudaEvent_t e, size_t *waits)
{
    int err = 0;
    size_t n = 0;
    for (size_t i = 0; !err && i < d->nstreams; i++)
        if (d->streams[i].nonblocking && (err = cu_wait(d, d->streams[i].stream, e)) == 0)
            n++;
    if (waits)
        *waits = n;
    return err;
}

/* Forces fence f done: the legacy stream waits for its events still
 * running, then records an event every non-blocking stream waits for
 * (streams made later wait for it too: track_stream). Needs d->lock. */
static int force_locked(shim_device *d, shim_fence *f)
{
    int e = 0;
    if (!d->legacy_event)
        e = cu_event_create(d, &d->legacy_event);
    for (size_t i = f->ndone; !e && i < f->nevents; i++)
        if ((e = cu_query(d, f->events[i])) == cudaErrorNotReady)
            e = cu_wait(d, cudaStreamLegacy, f->events[i]);
    if (!e)
        e = cu_record(d, d->legacy_event, cudaStreamLegacy);
    return e ? e : order_after(d, d->legacy_event, NULL);
}

/* Retires the poll fences that are done, oldest first, going as far as
 * level allows. Needs d->lock. 0, or -EIO if a call failed. */
static int poll_locked(shim_device *d, enum poll_level level)
{
    bool forced = false;
    while (d->nfences) {
        shim_fence *f = &d->fences[0];
        int e = 0;
        while (f->ndone < f->nevents && (e = cu_query(d, f->events[f->ndone])) == 0)
            f->ndone++;
        if (!e)
            e = cu_query(d, f->legacy);
        if (e == cudaErrorNotReady && level >= POLL_ORDER && f->ndone == f->nevents) {
            size_t waits = 0;
            if ((e = order_after(d, f->legacy, &waits)) == 0) {
                /* Streams made later wait for it too (track_stream), even
                 * when there is none now. */
                event_give(d, d->order_event);
                d->order_event = f->legacy;
                f->legacy = NULL;
                if (waits)
                    atomic_fetch_add_explicit(&d->fence_orders, 1, memory_order_relaxed);
            }
        } else if (e == cudaErrorNotReady && level == POLL_FORCE && !forced) {
            forced = true;
            e = force_locked(d, f);
        }
        if (e == cudaErrorNotReady)
            return 0;
        if (e) {
            shim_log(SHIM_LOG_ERROR, "device %d: fence failed: %s", d->id,
                     cu_strerror(d, e));
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
        atomic_fetch_add(&d->syncs, 1);
        if (cu_sync(d) != 0)
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
    switch (op) {
    case FENCE_FULL:
        return fence_locked(d, work);
    case FENCE_BEGIN:
        if ((err = poll_begin_locked(d, ticket)) == 0)
            atomic_store_explicit(&d->fenced_work, work, memory_order_relaxed);
        return err;
    default:
        err = poll_locked(d, quiet ? POLL_QUERY
                             : op == FENCE_POLL_FORCE ? POLL_FORCE : POLL_ORDER);
        *ticket = d->tickets_done;
        return err;
    }
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
    pthread_mutex_lock(&d->lock);
    bool fast = atomic_load(&captures) == 0 || (op >= FENCE_POLL && !d->nfences);
    if (fast)
        err = fence_op_locked(d, op, false, work, ticket);
    pthread_mutex_unlock(&d->lock);
    if (!fast) {
        int mode = cudaStreamCaptureModeRelaxed;
        cu_exchange_mode(d, &mode);
        pthread_mutex_lock(&d->lock);
        bool quiet = any_capture(d);
        if (!quiet || op >= FENCE_POLL)
            err = fence_op_locked(d, op, quiet, work, ticket);
        pthread_mutex_unlock(&d->lock);
        cu_exchange_mode(d, &mode);
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
    atomic_fetch_add_explicit(&d->fences_skipped, 1, memory_order_relaxed);
}

static void trace_fence(shim_shard *sh, int err)
{
    shim_trace_put(sh->ring, false, TRACE_FENCE,
                   !err ? TRACE_R_OK : err == -EAGAIN ? TRACE_R_DEFERRED : TRACE_R_ERROR,
                   sh->id, 0, 0);
}

static int be_fence(void *ctx)
{
    shim_shard *sh = ctx;
    uint64_t work, none = 0;
    int err = 0;
    if (no_new_work(sh->dev, &work))
        count_skip(sh->dev);
    else
        err = fence_run(sh->dev, FENCE_FULL, work, &none);
    trace_fence(sh, err);
    return err;
}

static int be_fence_begin(void *ctx, uint64_t *ticket)
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
    if (err)
        err = fence_run(d, FENCE_BEGIN, work, ticket);
    trace_fence(sh, err);
    return err;
}

static int be_fence_poll(void *ctx, bool force, uint64_t *done)
{
    shim_shard *sh = ctx;
    return fence_run(sh->dev, force ? FENCE_POLL_FORCE : FENCE_POLL, 0, done);
}

/* The pool's observer: its allocations and frees, in lock order, for the
 * trace and for the streams fences may leave out (comm.h). */
static void be_observe(void *ctx, int ev, int err, uintptr_t addr, size_t size)
{
    shim_shard *sh = ctx;
    if (ev == POOL_EV_ALLOC) {
        shim_comm_allocated(addr);
        shim_trace_put(sh->ring, false, TRACE_ALLOC, TRACE_R_OK, sh->id, addr, size);
    } else if (ev == POOL_EV_CAP) {
        shim_trace_put(sh->ring, true, TRACE_RESERVE, TRACE_R_CAP, sh->id, 0, size);
    } else {
        if (!err)
            shim_comm_freed(addr, size);
        shim_trace_put(sh->ring, false, TRACE_FREE, err ? TRACE_R_BADFREE : TRACE_R_OK,
                       sh->id, addr, 0);
    }
}

/* ---- pools ----------------------------------------------------------------
 * Each device has up to CUPOOL_SHARDS pools. Shard 0 serves every large
 * request; small requests (CUPOOL_SMALL_MAX or less) go to the calling
 * thread's shard, assigned round robin at its first allocation, so threads
 * allocating small blocks do not queue on one lock. The cap is the
 * device's budget, which every shard's pool takes from (pool/budget.h).
 * Pools are never freed (a device reset empties them in place): other
 * threads may hold them. */

static _Thread_local int my_shard = -1;
static atomic_uint next_shard;

static const shim_cap *cap_option(int dev)
{
    return shim_cfg.has_dev_cap[dev] ? &shim_cfg.max_reserved_dev[dev]
                                     : &shim_cfg.max_reserved;
}

static uint64_t device_cap(int dev, uint64_t total)
{
    return shim_cap_bytes(cap_option(dev), total);
}

/* Sets the budget's limit from the options, given the device's size. */
static uint64_t cap_set(shim_device *d, uint64_t total)
{
    uint64_t cap = device_cap(d->id, total);
    pool_budget_set_limit(&d->budget, cap);
    atomic_store(&d->cap_known, true);
    return cap;
}

uint64_t shim_device_cap(int dev)
{
    shim_device *d = &shim_devices[dev];
    if (atomic_load(&d->cap_known))
        return pool_budget_limit(&d->budget);
    const shim_cap *cap = cap_option(dev);
    if (!cap->percent)
        return cap_set(d, 0);
    /* A share of the device: its size from the driver, which takes none
     * of the runtime's locks. Unknown while the driver cannot say. */
    size_t f = 0, t = 0;
    if (shim_drv_resolve() != 0 || shim_drv.cuMemGetInfo_v2(&f, &t) != CUDA_SUCCESS)
        return 0;
    return cap_set(d, t);
}

enum { HOLD_MS = 200 };

/* Runs the trace's final drain of a shard's ring (recorder.h) under the
 * lock its records are written under: the pool's, or, while the shard has
 * no pool yet, create_lock, which its creation holds. A lock held past
 * HOLD_MS (a thread waiting in the driver; exit called from a signal
 * handler that interrupted the pool) is not waited for. */
static void shard_hold(void *ctx, shim_trace_ring *r, void (*drain)(shim_trace_ring *))
{
    shim_shard *sh = ctx;
    _Atomic(pool *) *slot = &sh->dev->pools[sh - sh->dev->shards];
    pool *p = atomic_load_explicit(slot, memory_order_acquire);
    if (!p) {
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        t.tv_nsec += HOLD_MS * 1000000L;
        t.tv_sec += t.tv_nsec / 1000000000L;
        t.tv_nsec %= 1000000000L;
        if (pthread_mutex_timedlock(&create_lock, &t) == 0) {
            p = atomic_load_explicit(slot, memory_order_acquire);
            if (!p)
                drain(r);
            pthread_mutex_unlock(&create_lock);
            if (!p)
                return;
        }
    }
    bool held = p && pool_hold(p, HOLD_MS);
    drain(r);
    if (held)
        pool_let_go(p);
}

static pool *create_locked(shim_device *d, int shard)
{
    pool_config pc = shim_cfg.pool;
    if (shard == 0) {
        /* The runtime's calls if the process has one (they make its
         * context), else the driver's, in the caller's context. */
        shim_device_api(d->id);
        size_t free_b = 0, total = 0;
        shim_device_mem_info(d->id, &free_b, &total);
        cap_set(d, total);
        CUcontext c = NULL;
        if (shim_drv_resolve() == 0 && shim_drv.cuCtxGetCurrent(&c) == CUDA_SUCCESS && c)
            atomic_store(&d->ctx, c);
    }
    uint64_t cap = shim_device_cap(d->id); /* known: shard 0 set it */
    if ((shim_cfg.vmm || shim_cfg.stitch) && !d->vmm_tried) {
        d->vmm_tried = true;
        /* Stitching without a cap: large units, a fraction of the
         * mappings. Under a cap: the granule, so that trims and stitches
         * reach every free granule (memory is what runs out there). */
        size_t unit = shim_cfg.vmm_unit ? shim_cfg.vmm_unit
                      : shim_cfg.stitch && !cap ? POOL_STITCH_UNIT : 0;
        shim_vmm *v = shim_vmm_open(d->id, unit);
        size_t u = v ? shim_vmm_granule(v) : 0;
        if (v && (pc.small_segment % u || pc.large_round % u || pc.mid_segment % u))
            shim_log(SHIM_LOG_ERROR, "CUPOOL_VMM: CUPOOL_SMALL_SEGMENT, "
                     "CUPOOL_MID_SEGMENT and CUPOOL_LARGE_ROUND must be multiples of the device's "
                     "granularity (%zu bytes); using cudaMalloc'd segments", u);
        else
            d->vmm = v;
    }
    shim_work_watch(); /* before any block is handed out */
    /* The device's cap spans its shards and the memory passed on. */
    pc.max_reserved = 0;
    pc.budget = &d->budget;
    pc.release_threshold = shim_cfg.release_threshold;
    shim_shard *sh = &d->shards[shard];
    sh->dev = d;
    sh->id = d->id;
    bool tracing = shim_tracing();
    if (tracing && !sh->ring)
        sh->ring = shim_trace_ring_new(shard_hold, sh);
    bool poll = shim_cfg.fence == SHIM_FENCE_POLL;
    pool_backend be = {.reserve = be_reserve, .release = be_release,
                       .fence = shim_cfg.fence == SHIM_FENCE_NONE ? NULL : be_fence,
                       .fence_begin = poll ? be_fence_begin : NULL,
                       .fence_poll = poll ? be_fence_poll : NULL,
                       .observe = tracing || (poll && shim_cfg.cupti != SHIM_CUPTI_OFF)
                                      ? be_observe : NULL,
                       .trim = d->vmm ? be_trim : NULL,
                       .trim_unit = d->vmm ? shim_vmm_unit(d->vmm) : 0,
                       .stitch = d->vmm && shim_cfg.stitch ? be_stitch : NULL,
                       .unstitch = d->vmm && shim_cfg.stitch ? be_unstitch : NULL,
                       .extend = d->vmm && shim_cfg.stitch ? be_extend : NULL,
                       .ctx = sh};
    pool *p = NULL;
    int err = pool_create(&pc, &be, &p);
    if (err) {
        shim_log(SHIM_LOG_ERROR, "device %d: cannot create a pool (%s); "
                 "passing allocations through", d->id, pool_strerror(err));
        return NULL;
    }
    char c[32];
    if (shard == 0)
        shim_log(SHIM_LOG_INFO, "device %d: pool ready, cap %s, fence %s%s, "
                 "%zu shards, %s segments", d->id,
                 cap ? stats_fmt_bytes(cap, c, sizeof(c)) : "none",
                 shim_cfg.fence == SHIM_FENCE_BARRIER ? "barrier"
                 : shim_cfg.fence == SHIM_FENCE_POLL ? "poll"
                 : shim_cfg.fence == SHIM_FENCE_SYNC  ? "sync" : "none",
                 shim_work_watching() ? " (skipped while CUPTI sees no new work)"
                 : poll && shim_cfg.cupti == SHIM_CUPTI_AUTO ? " (CUPTI from the first NCCL call)"
                                                              : "",
                 shim_cfg.shards, d->vmm && shim_cfg.stitch ? "stitched VMM"
                 : d->vmm ? "VMM" : drv(d) ? "cuMemAlloc'd"
                                                                   : "cudaMalloc'd");
    return p;
}

pool *shim_device_shard(int dev, int shard)
{
    shim_device *d = &shim_devices[dev];
    pool *p = atomic_load_explicit(&d->pools[shard], memory_order_acquire);
    if (p)
        return p;
    if (shard != 0 && !shim_device_shard(dev, 0))
        return NULL; /* shard 0 first: it sets the device's cap */
    pthread_mutex_lock(&create_lock);
    p = atomic_load_explicit(&d->pools[shard], memory_order_acquire);
    if (!p) {
        p = create_locked(d, shard);
        atomic_store_explicit(&d->pools[shard], p, memory_order_release);
    }
    pthread_mutex_unlock(&create_lock);
    shim_first_pool(); /* starts the helper thread (control.c) */
    return p;
}

static int thread_shard(void)
{
    if (my_shard < 0)
        my_shard = (int)(atomic_fetch_add(&next_shard, 1) % shim_cfg.shards);
    return my_shard;
}

int shim_device_alloc(int dev, size_t size, uintptr_t *addr)
{
    pool *p = shim_device_shard(dev, size <= shim_cfg.pool.small_max ? thread_shard() : 0);
    if (!p)
        return -ENODEV;
    /* The pool retries once after releasing its own idle segments; the
     * device's cap covers every shard, so the other shards' go too. */
    int err = pool_alloc(p, size, addr);
    if ((err == -EDQUOT || err == -ENOMEM) && shim_cfg.shards > 1 &&
        shim_device_flush(dev) > 0)
        err = pool_alloc(p, size, addr);
    return err;
}

/* pool_free in the shard the owner hint names, if any: -ENOENT if there
 * is none or it does not own addr. */
static int free_hinted(uintptr_t addr, int *dev, int *shard)
{
    if (shim_owner_hint(addr, dev, shard) != 0)
        return -ENOENT;
    pool *p = shim_device_shard_if_any(*dev, *shard);
    return p ? pool_free(p, addr) : -ENOENT;
}

/* pool_free in each shard of dev but skip, the calling thread's first. */
static int free_probing(int dev, uintptr_t addr, int skip)
{
    int mine = thread_shard(), err = -ENOENT;
    for (size_t k = 0; err == -ENOENT && k < shim_cfg.shards; k++) {
        int s = k == 0 ? mine : (int)k == mine ? 0 : (int)k;
        pool *p = s == skip ? NULL : shim_device_shard_if_any(dev, s);
        if (p)
            err = pool_free(p, addr);
    }
    return err;
}

int shim_device_free(int guess, uintptr_t addr)
{
    int hd = -1, hs = -1;
    int err = free_hinted(addr, &hd, &hs);
    if (err == -ENOENT && guess >= 0)
        err = free_probing(guess, addr, hd == guess ? hs : -1);
    for (int i = 0; err == -ENOENT && i < SHIM_MAX_DEVICES; i++)
        if (i != guess && shim_device_shard_if_any(i, 0))
            err = free_probing(i, addr, hd == i ? hs : -1);
    return err;
}

int shim_device_segment_of(int dev, uintptr_t addr, uintptr_t *base, size_t *size)
{
    int err = -ENOENT;
    for (size_t s = 0; err == -ENOENT && s < shim_cfg.shards; s++) {
        pool *p = shim_device_shard_if_any(dev, (int)s);
        if (p)
            err = pool_segment_of(p, addr, base, size);
    }
    return err;
}

bool shim_device_stats(int dev, pool_stats *sum)
{
    bool any = false;
    memset(sum, 0, sizeof(*sum));
    for (size_t s = 0; s < shim_cfg.shards; s++) {
        pool *p = shim_device_shard_if_any(dev, (int)s);
        if (!p)
            continue;
        pool_stats one;
        pool_stats_get(p, &one);
#define X_GAUGE(name, doc) sum->name += one.name; sum->name##_peak += one.name##_peak;
#define X_COUNTER(name, doc) sum->name += one.name;
        POOL_GAUGES(X_GAUGE)
        POOL_COUNTERS(X_COUNTER)
#undef X_GAUGE
#undef X_COUNTER
        sum->free_blocks += one.free_blocks;
        sum->segments += one.segments;
        sum->idle_bytes += one.idle_bytes;
        sum->largest_free = one.largest_free > sum->largest_free ? one.largest_free
                                                                 : sum->largest_free;
        sum->epoch = one.epoch > sum->epoch ? one.epoch : sum->epoch;
        any = true;
    }
    /* The backend counts reserved bytes over all shards: its peak is exact. */
    if (any)
        sum->reserved_peak = atomic_load(&shim_devices[dev].reserved_peak);
    return any;
}

uint64_t shim_device_flush(int dev)
{
    uint64_t n = 0;
    for (size_t s = 0; s < shim_cfg.shards; s++) {
        pool *p = shim_device_shard_if_any(dev, (int)s);
        if (p)
            n += pool_flush(p);
    }
    return n;
}

void shim_device_abandon(int dev)
{
    shim_device *d = &shim_devices[dev];
    /* Emptied in place, never freed: the helper thread and other threads
     * may hold the pools. */
    for (size_t s = 0; s < shim_cfg.shards; s++) {
        pool *p = shim_device_shard_if_any(dev, (int)s);
        if (p)
            pool_forget(p);
    }
    atomic_store(&d->reserved, 0);
    atomic_store(&d->ctx, NULL); /* the next one to allocate says which */
    pthread_mutex_lock(&d->lock);
    /* The reset destroyed the device's streams and events too. */
    d->nstreams = 0;
    d->legacy_event = NULL;
    for (size_t i = 0; i < d->nfences; i++)
        free(d->fences[i].events);
    d->nfences = 0;
    d->nspare = 0;
    d->norphans = 0;
    d->order_event = NULL;
    d->tickets_done = d->tickets;
    pthread_mutex_unlock(&d->lock);
}

uint64_t shim_device_flush_all(void)
{
    uint64_t total = 0;
    for (int i = 0; i < SHIM_MAX_DEVICES; i++) {
        shim_device *d = &shim_devices[i];
        shim_saved saved;
        if (!shim_device_shard_if_any(i, 0) || !enter(d, &saved))
            continue;
        uint64_t n = shim_device_flush(i);
        leave(d, &saved);
        shim_trace_event(TRACE_FLUSH, TRACE_R_OK, i, 0, n);
        total += n;
    }
    return total;
}

/* ---- streams ------------------------------------------------------------ */

void shim_device_track_stream(int dev, cudaStream_t s, unsigned int flags)
{
    shim_device *d = &shim_devices[dev];
    shim_device_api(dev);
    bool nb = flags & cudaStreamNonBlocking;
    cudaEvent_t ev = NULL;
    if (nb && cu_event_create(d, &ev) != 0) {
        shim_log(SHIM_LOG_ERROR, "device %d: no event for a new stream; "
                 "reuse after free may not be ordered on it", dev);
        return;
    }
    if (nb)
        shim_comm_track(s);
    pthread_mutex_lock(&d->lock);
    if (pool_grow((void **)&d->streams, &d->streams_cap, d->nstreams, sizeof(*d->streams)))
        d->streams[d->nstreams++] = (shim_stream){.stream = s, .event = ev, .nonblocking = nb};
    /* A block a fence made clean by ordering the non-blocking streams after
     * the legacy stream's work may still be in use by that work: a new
     * non-blocking stream is ordered after it too. */
    if (nb && d->legacy_event)
        cu_wait(d, s, d->legacy_event);
    if (nb && d->order_event)
        cu_wait(d, s, d->order_event);
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
        if (d->norphans >= 64 && cu_query(d, d->orphans[i]) == 0)
            event_give(d, d->orphans[i]);
        else
            d->orphans[k++] = d->orphans[i];
    }
    d->norphans = k;
    cudaEvent_t e = NULL;
    if (!pool_grow((void **)&d->orphans, &d->orphans_cap, d->norphans, sizeof(e)) ||
        event_take(d, &e) != 0 || cu_record(d, e, s) != 0) {
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
                cu_event_destroy(d, d->streams[k].event);
            if (d->streams[k].nonblocking)
                orphan_locked(d, s);
            d->streams[k] = d->streams[--d->nstreams];
            shim_comm_forget(s);
            pthread_mutex_unlock(&d->lock);
            return;
        }
        pthread_mutex_unlock(&d->lock);
    }
}

bool shim_device_owns(void *ptr)
{
    int hd, hs;
    if (shim_owner_hint((uintptr_t)ptr, &hd, &hs) == 0) {
        pool *p = shim_device_shard_if_any(hd, hs);
        if (p && pool_owns(p, (uintptr_t)ptr) == 1)
            return true;
    }
    for (int i = 0; i < SHIM_MAX_DEVICES; i++) {
        if (!shim_device_shard_if_any(i, 0))
            continue;
        for (size_t s = 0; s < shim_cfg.shards; s++) {
            pool *p = shim_device_shard_if_any(i, (int)s);
            if (p && pool_owns(p, (uintptr_t)ptr) == 1)
                return true;
        }
    }
    return false;
}
