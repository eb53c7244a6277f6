/*
 * device.c - per-device pools and the CUDA backend.
 *
 * Backend: reserve is the real cudaMalloc, release the real cudaFree, and
 * the fence one of three modes (DESIGN.md, "Stream safety"):
 *   barrier  GPU-side, the host never waits: each tracked non-blocking
 *            stream records an event the legacy stream waits on; the legacy
 *            stream records one event every non-blocking stream waits on.
 *            Blocking streams and per-thread default streams are ordered by
 *            the legacy stream itself.
 *   sync     cudaDeviceSynchronize, as the real cudaFree would have done,
 *            but only when a block freed since the last fence is reused.
 *   none     no fence (only for programs known to use one stream).
 * No fence is issued while a graph is being captured: the fence answers
 * -EAGAIN and the pool serves the request from a new segment instead. The
 * fence runs in relaxed capture mode so that it can never break a capture
 * on another thread.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "control.h"
#include "device.h"
#include "log.h"
#include "stats.h"

shim_device shim_devices[SHIM_MAX_DEVICES];
shim_config shim_cfg;

static pthread_mutex_t create_lock = PTHREAD_MUTEX_INITIALIZER;

__attribute__((constructor(101))) static void devices_init(void)
{
    for (int i = 0; i < SHIM_MAX_DEVICES; i++) {
        shim_devices[i].id = i;
        pthread_mutex_init(&shim_devices[i].lock, NULL);
    }
}

/* ---- backend ------------------------------------------------------------ */

static int be_reserve(void *ctx, size_t size, uintptr_t *base)
{
    (void)ctx;
    void *p = NULL;
    cudaError_t e = shim_real.cudaMalloc(&p, size);
    if (e == cudaSuccess) {
        *base = (uintptr_t)p;
        return 0;
    }
    shim_real.cudaGetLastError(); /* the pool may still succeed: no residue */
    return e == cudaErrorMemoryAllocation ? -ENOMEM : -EIO;
}

static void be_release(void *ctx, uintptr_t base, size_t size)
{
    shim_device *d = ctx;
    (void)size;
    cudaError_t e = shim_real.cudaFree((void *)base);
    if (e != cudaSuccess) {
        shim_real.cudaGetLastError();
        shim_log(SHIM_LOG_WARN, "device %d: cudaFree of a %zu-byte segment "
                 "failed: %s", d->id, size, shim_real.cudaGetErrorString(e));
    }
}

static bool capturing(cudaStream_t s)
{
    enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    cudaError_t e = shim_real.cudaStreamIsCapturing(s, &st);
    if (e != cudaSuccess)
        shim_real.cudaGetLastError();
    return e != cudaSuccess || st != cudaStreamCaptureStatusNone;
}

/* True if the legacy stream or any tracked stream is capturing. Needs
 * d->lock. */
static bool any_capture(shim_device *d)
{
    if (capturing(cudaStreamLegacy))
        return true;
    for (size_t i = 0; i < d->nstreams; i++)
        if (capturing(d->streams[i].stream))
            return true;
    return false;
}

static int barrier_locked(shim_device *d)
{
    cudaError_t e = cudaSuccess;
    if (!d->legacy_event)
        e = shim_real.cudaEventCreateWithFlags(&d->legacy_event,
                                               cudaEventDisableTiming);
    for (size_t i = 0; e == cudaSuccess && i < d->nstreams; i++) {
        shim_stream *s = &d->streams[i];
        if (!s->nonblocking)
            continue;
        e = shim_real.cudaEventRecord(s->event, s->stream);
        if (e == cudaSuccess)
            e = shim_real.cudaStreamWaitEvent(cudaStreamLegacy, s->event, 0);
    }
    if (e == cudaSuccess)
        e = shim_real.cudaEventRecord(d->legacy_event, cudaStreamLegacy);
    for (size_t i = 0; e == cudaSuccess && i < d->nstreams; i++)
        if (d->streams[i].nonblocking)
            e = shim_real.cudaStreamWaitEvent(d->streams[i].stream,
                                              d->legacy_event, 0);
    if (e != cudaSuccess) {
        shim_real.cudaGetLastError();
        shim_log(SHIM_LOG_ERROR, "device %d: fence failed: %s", d->id,
                 shim_real.cudaGetErrorString(e));
        return -EIO;
    }
    return 0;
}

static int be_fence(void *ctx)
{
    shim_device *d = ctx;
    enum cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    shim_real.cudaThreadExchangeStreamCaptureMode(&mode);
    pthread_mutex_lock(&d->lock);
    int err = -EAGAIN;
    if (!any_capture(d)) {
        if (shim_cfg.fence == SHIM_FENCE_SYNC) {
            cudaError_t e = shim_real.cudaDeviceSynchronize();
            atomic_fetch_add(&d->syncs, 1);
            err = e == cudaSuccess ? 0 : -EIO;
            if (err)
                shim_real.cudaGetLastError();
        } else {
            err = barrier_locked(d);
        }
    }
    pthread_mutex_unlock(&d->lock);
    shim_real.cudaThreadExchangeStreamCaptureMode(&mode);
    return err;
}

/* ---- pools -------------------------------------------------------------- */

static pool *create_locked(shim_device *d)
{
    pool_config pc = shim_cfg.pool;
    size_t free_b = 0, total = 0;
    if (shim_real.cudaMemGetInfo(&free_b, &total) != cudaSuccess)
        shim_real.cudaGetLastError();
    const shim_cap *cap = shim_cfg.has_dev_cap[d->id]
                              ? &shim_cfg.max_reserved_dev[d->id]
                              : &shim_cfg.max_reserved;
    d->cap = shim_cap_bytes(cap, total);
    pc.max_reserved = d->cap;
    pc.release_threshold = shim_cfg.release_threshold;
    pool_backend be = {.reserve = be_reserve, .release = be_release,
                       .fence = shim_cfg.fence == SHIM_FENCE_NONE ? NULL : be_fence,
                       .ctx = d};
    pool *p = NULL;
    int err = pool_create(&pc, &be, &p);
    if (err) {
        shim_log(SHIM_LOG_ERROR, "device %d: cannot create a pool (%s); "
                 "passing allocations through", d->id, pool_strerror(err));
        return NULL;
    }
    char c[32];
    shim_log(SHIM_LOG_INFO, "device %d: pool ready, cap %s, fence %s", d->id,
             d->cap ? stats_fmt_bytes(d->cap, c, sizeof(c)) : "none",
             shim_cfg.fence == SHIM_FENCE_BARRIER ? "barrier"
             : shim_cfg.fence == SHIM_FENCE_SYNC  ? "sync" : "none");
    return p;
}

pool *shim_device_pool(int dev)
{
    shim_device *d = &shim_devices[dev];
    pool *p = atomic_load_explicit(&d->pool, memory_order_acquire);
    if (p)
        return p;
    pthread_mutex_lock(&create_lock);
    p = atomic_load_explicit(&d->pool, memory_order_acquire);
    if (!p) {
        p = create_locked(d);
        atomic_store_explicit(&d->pool, p, memory_order_release);
    }
    pthread_mutex_unlock(&create_lock);
    shim_helper_start();
    return p;
}

void shim_device_abandon(int dev)
{
    shim_device *d = &shim_devices[dev];
    /* Emptied in place, never freed: the helper thread and other threads
     * may hold the pool. */
    pool *p = shim_device_pool_if_any(dev);
    if (p)
        pool_forget(p);
    pthread_mutex_lock(&d->lock);
    /* The reset destroyed the device's streams and events too. */
    d->nstreams = 0;
    d->legacy_event = NULL;
    pthread_mutex_unlock(&d->lock);
}

uint64_t shim_device_flush_all(void)
{
    uint64_t total = 0;
    int cur = -1;
    if (shim_real.cudaGetDevice(&cur) != cudaSuccess)
        shim_real.cudaGetLastError();
    for (int i = 0; i < SHIM_MAX_DEVICES; i++) {
        pool *p = shim_device_pool_if_any(i);
        if (!p || shim_real.cudaSetDevice(i) != cudaSuccess)
            continue;
        total += pool_flush(p);
    }
    if (cur >= 0)
        shim_real.cudaSetDevice(cur);
    return total;
}

/* ---- streams ------------------------------------------------------------ */

void shim_device_track_stream(int dev, cudaStream_t s, unsigned int flags)
{
    shim_device *d = &shim_devices[dev];
    bool nb = flags & cudaStreamNonBlocking;
    cudaEvent_t ev = NULL;
    if (nb && shim_real.cudaEventCreateWithFlags(&ev, cudaEventDisableTiming)
                  != cudaSuccess) {
        shim_real.cudaGetLastError();
        shim_log(SHIM_LOG_ERROR, "device %d: no event for a new stream; "
                 "reuse after free may not be ordered on it", dev);
        return;
    }
    pthread_mutex_lock(&d->lock);
    if (d->nstreams == d->streams_cap) {
        size_t cap = d->streams_cap ? 2 * d->streams_cap : 16;
        shim_stream *n = realloc(d->streams, cap * sizeof(*n));
        if (n) {
            d->streams = n;
            d->streams_cap = cap;
        }
    }
    if (d->nstreams < d->streams_cap)
        d->streams[d->nstreams++] = (shim_stream){s, ev, nb};
    pthread_mutex_unlock(&d->lock);
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
                shim_real.cudaEventDestroy(d->streams[k].event);
            d->streams[k] = d->streams[--d->nstreams];
            pthread_mutex_unlock(&d->lock);
            return;
        }
        pthread_mutex_unlock(&d->lock);
    }
}
