/* SPDX-License-Identifier: Apache-2.0 */
/*
 * interpose.c - the CUDA runtime symbols libcupool.so exports.
 *
 * Each one falls through to the real function when the shim is off
 * (CUPOOL_DISABLE=1, a forked child, the runtime not found) or when the
 * calling thread is already inside the shim. Everything else is served by
 * the current device's pool.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>

#include "control.h"
#include "cupti.h"
#include "cap.h"
#include "capture.h"
#include "cudagate.h"
#include "device.h"
#include "driver.h"
#include "fence.h"
#include "group.h"
#include "interpose.h"
#include "ipc.h"
#include "log.h"
#include "passed.h"
#include "real.h"

#define EXPORT __attribute__((visibility("default")))

#define inside shim_inside

/* True if this call must go straight to the real runtime. */
static bool pass(void)
{
    return inside || !shim_active() || shim_real_resolve() != 0;
}

/* Devices this process sees: fixed at start-up (CUDA_VISIBLE_DEVICES is
 * read once), so counted once. 0 = not known. */
static int device_count;
static pthread_once_t count_once = PTHREAD_ONCE_INIT;

static void count_devices(void)
{
    int n = 0;
    if (shim_real.cudaGetDeviceCount && shim_real.cudaGetDeviceCount(&n) == cudaSuccess)
        device_count = n;
    else if (shim_real.cudaGetDeviceCount)
        shim_real.cudaGetLastError();
}

/* The current device, or -1. With one device it can only be 0. Else the
 * device of the thread's current context, which is the runtime's current
 * device whenever a context is current: the driver answers in 15 ns from
 * each of 8 threads at once, where cudaGetDevice takes a lock of the
 * runtime's (40 ns from one thread, 750 ns each from 8 on an H200; it cut
 * 8 threads' allocations to 1.8x one thread's). cudaGetDevice only while
 * no context is current. */
static int current_device(void)
{
    pthread_once(&count_once, count_devices);
    if (device_count == 1)
        return 0;
    CUdevice d;
    if (shim_drv_resolve() == 0 && shim_drv.cuCtxGetDevice &&
        shim_drv.cuCtxGetDevice(&d) == CUDA_SUCCESS)
        return d >= 0 && d < SHIM_MAX_DEVICES ? d : -1;
    int dev = -1;
    if (shim_real.cudaGetDevice(&dev) != cudaSuccess) {
        shim_real.cudaGetLastError();
        return -1;
    }
    return dev >= 0 && dev < SHIM_MAX_DEVICES ? dev : -1;
}

/* Calls the real function (or yields fail if it is missing) with the
 * re-entry guard up, so that a runtime calling its own exported symbols
 * internally reaches itself, not the shim. */
static _Thread_local cudaError_t real_ret;
#define REAL_OR(name, fail, ...)                                              \
    (shim_real_resolve(), !shim_real.name ? (fail)                           \
     : (inside++, real_ret = shim_real.name(__VA_ARGS__), inside--, real_ret))

int shim_serve(int dev, size_t size, uintptr_t *a, const char *call)
{
    shim_work_start_due(); /* before any lock of cupool's is held */
    shim_cudagate_enter(); /* and not while the memory is moved */
    inside++;
    shim_group_try();
    int err = shim_device_alloc(dev, size, a);
    if (err) { /* a pool hit passes none of this */
        for (int round = 0; err && shim_cap_reclaim(dev, size, err, round); round++) {
            shim_group_try();
            err = shim_device_alloc(dev, size, a);
        }
        shim_group_turn_done(); /* a turn a reclaim gave, taken or not */
    }
    inside--;
    shim_cudagate_leave();
    if (err == -ENODEV)
        return err;
    if (err)
        shim_report_alloc_failure(dev, size, err, call);
    return err;
}

int shim_serve_error(int err)
{
    _Static_assert((int)cudaErrorMemoryAllocation == (int)CUDA_ERROR_OUT_OF_MEMORY &&
                   (int)cudaErrorUnknown == (int)CUDA_ERROR_UNKNOWN,
                   "the runtime's and the driver's codes agree");
    if (!err)
        return cudaSuccess;
    return err == -ENOMEM || err == -EDQUOT || err == -EOVERFLOW || err == -ENOBUFS
               ? cudaErrorMemoryAllocation : cudaErrorUnknown;
}

EXPORT cudaError_t cudaMalloc(void **ptr, size_t size)
{
    /* Forbidden by a capture: CUDA's own answer (it also invalidates the
     * capture, as it would without cupool). */
    if (pass() || shim_capture_refuses("cudaMalloc", false))
        return REAL_OR(cudaMalloc, cudaErrorInitializationError, ptr, size);
    if (!ptr)
        return cudaErrorInvalidValue;
    int dev = current_device();
    uintptr_t a;
    int err = dev >= 0 ? shim_serve(dev, size, &a, "cudaMalloc") : -ENODEV;
    if (err == -ENODEV)
        return REAL_OR(cudaMalloc, cudaErrorInitializationError, ptr, size);
    if (!err)
        *ptr = (void *)a;
    return (cudaError_t)shim_serve_error(err);
}

int shim_free_pooled(int dev, void *ptr)
{
    shim_cudagate_enter();
    inside++;
    int err = shim_device_free(dev, (uintptr_t)ptr);
    inside--;
    shim_cudagate_leave();
    if (err == -EINVAL || err == -EALREADY)
        shim_log(SHIM_LOG_WARN, "free of %p: %s; nothing was freed", ptr,
                 pool_strerror(err));
    return err;
}

/* A pointer freed that no pool owns: counted, and no longer passed on. */
static cudaError_t foreign_done(cudaError_t e, void *ptr)
{
    if (e == cudaSuccess)
        shim_passed_release(SHIM_PASSED_PTR, (uintptr_t)ptr);
    return e;
}

EXPORT cudaError_t cudaFree(void *ptr)
{
    if (!ptr || pass())
        return REAL_OR(cudaFree, cudaErrorInitializationError, ptr);
    /* A pooled block is not freed while a capture forbids it (CUDA's code);
     * any other pointer gets CUDA's own answer. */
    if (shim_capture_refuses("cudaFree", false))
        return shim_device_owns(ptr) ? cudaErrorStreamCaptureUnsupported
                                     : REAL_OR(cudaFree, cudaErrorInitializationError, ptr);
    int err = shim_free_pooled(current_device(), ptr);
    if (err == -ENOENT) {
        shim_count(SHIM_foreign_frees);
        return foreign_done(REAL_OR(cudaFree, cudaErrorInitializationError, ptr), ptr);
    }
    return err ? cudaErrorInvalidValue : cudaSuccess;
}

EXPORT cudaError_t cudaFreeAsync(void *ptr, cudaStream_t stream)
{
    if (!ptr || pass())
        return REAL_OR(cudaFreeAsync, cudaErrorInitializationError, ptr, stream);
    /* A pooled block freed in stream order: the fence orders its reuse. */
    int err = shim_free_pooled(current_device(), ptr);
    if (err == -ENOENT)
        return foreign_done(REAL_OR(cudaFreeAsync, cudaErrorInitializationError, ptr,
                                    stream), ptr);
    return err ? cudaErrorInvalidValue : cudaSuccess;
}

void shim_mem_info_adjust(int dev, size_t *free_b, size_t *total_b)
{
    pool_stats s;
    if (!shim_device_stats(dev, &s)) /* no pool yet: the cap holds already */
        memset(&s, 0, sizeof(s));
    size_t f = *free_b, t = *total_b;
    shim_cap_view cv;
    shim_cap_view_of(dev, &cv);
    uint64_t cap = shim_cap_limit(dev);
    /* Cached bytes are free to this process. Under a cap, free is what one
     * allocation can have now: the largest free block, or a new segment
     * (whole multiples of the large rounding) in the room the cap leaves
     * once the fully free segments go back; never more than the device
     * has. Free cached bytes in segments that also hold live blocks
     * cannot make a larger block, so a figure counting them would promise
     * what cudaMalloc then refuses. */
    uint64_t avail = (uint64_t)f + s.cached;
    uint64_t total = t;
    if (cap) {
        total = cap < total ? cap : total;
        uint64_t held = s.reserved - s.idle_bytes + cv.passed;
        uint64_t room = cap > held ? cap - held : 0;
        uint64_t grow = (uint64_t)f + s.idle_bytes;
        room = room < grow ? room : grow;
        room -= room % shim_cfg.pool.large_round;
        avail = room > s.largest_free ? room : s.largest_free;
    }
    if (avail > total)
        avail = total;
    *free_b = (size_t)avail;
    *total_b = (size_t)total;
}

EXPORT cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total_b)
{
    if (pass())
        return REAL_OR(cudaMemGetInfo, cudaErrorInitializationError, free_b, total_b);
    size_t f = 0, t = 0;
    cudaError_t e = REAL_OR(cudaMemGetInfo, cudaErrorInitializationError, &f, &t);
    int dev = current_device();
    if (e == cudaSuccess && dev >= 0)
        shim_mem_info_adjust(dev, &f, &t);
    if (e == cudaSuccess) {
        if (free_b) *free_b = f;
        if (total_b) *total_b = t;
    }
    return e;
}

EXPORT cudaError_t cudaDeviceReset(void)
{
    if (pass())
        return REAL_OR(cudaDeviceReset, cudaErrorInitializationError);
    int dev = current_device();
    cudaError_t e = REAL_OR(cudaDeviceReset, cudaErrorInitializationError);
    if (e == cudaSuccess && dev >= 0) {
        shim_device_abandon(dev);
        shim_passed_forget_device(dev);
    }
    return e;
}

static cudaError_t tracked(cudaError_t e, cudaStream_t *s, unsigned int flags)
{
    if (e == cudaSuccess && s && shim_active()) {
        int dev = current_device();
        if (dev >= 0) {
            inside++;
            shim_device_track_stream(dev, *s, flags);
            inside--;
        }
    }
    return e;
}

EXPORT cudaError_t cudaStreamCreate(cudaStream_t *s)
{
    cudaError_t e = REAL_OR(cudaStreamCreate, cudaErrorInitializationError, s);
    return inside ? e : tracked(e, s, cudaStreamDefault);
}

EXPORT cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags)
{
    cudaError_t e = REAL_OR(cudaStreamCreateWithFlags,
                            cudaErrorInitializationError, s, flags);
    return inside ? e : tracked(e, s, flags);
}

EXPORT cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s,
                                                unsigned int flags, int prio)
{
    cudaError_t e = REAL_OR(cudaStreamCreateWithPriority,
                            cudaErrorInitializationError, s, flags, prio);
    return inside ? e : tracked(e, s, flags);
}

EXPORT cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    if (!inside && shim_real_resolve() == 0) {
        inside++;
        shim_device_untrack_stream(s);
        inside--;
    }
    return REAL_OR(cudaStreamDestroy, cudaErrorInitializationError, s);
}

/* ---- graph captures: counted so the fence knows when to look ----------- */

/* A capture begun and ended through the runtime: see shim_capture_starts.
 * (Its mode enum is the driver's.) */
static cudaError_t capture_started(bool counted, cudaError_t e, cudaStream_t s,
                                   bool per_thread, enum cudaStreamCaptureMode mode)
{
    shim_capture_started(counted, e == cudaSuccess, s, per_thread, (int)mode);
    return e;
}

/* Counts the end of a capture only if the stream had one and has none
 * after the call (an invalidated capture ends with an error; a call from
 * the wrong thread ends nothing). */
static cudaError_t end_capture(cudaError_t (*real)(cudaStream_t, cudaGraph_t *),
                               cudaStream_t s, cudaGraph_t *g, bool per_thread)
{
    /* To the per-thread forms, stream 0 is the calling thread's stream. */
    cudaStream_t q = per_thread && !s ? cudaStreamPerThread : s;
    if (!real)
        return cudaErrorNotSupported;
    bool counted = !inside && shim_active() && shim_real.cudaStreamIsCapturing;
    enum cudaStreamCaptureStatus before = cudaStreamCaptureStatusNone, after = before;
    inside++;
    if (counted && shim_real.cudaStreamIsCapturing(q, &before) != cudaSuccess)
        before = cudaStreamCaptureStatusNone;
    cudaError_t e = real(s, g);
    if (counted && before != cudaStreamCaptureStatusNone) {
        if (shim_real.cudaStreamIsCapturing(q, &after) == cudaSuccess &&
            after == cudaStreamCaptureStatusNone)
            shim_capture_ended(q);
    }
    inside--;
    return e;
}

EXPORT cudaError_t cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode m)
{
    bool c = shim_capture_starts();
    return capture_started(c, REAL_OR(cudaStreamBeginCapture, cudaErrorNotSupported, s, m),
                           s, false, m);
}

EXPORT cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t s, enum cudaStreamCaptureMode m)
{
    bool c = shim_capture_starts();
    return capture_started(c, REAL_OR(cudaStreamBeginCapture_ptsz, cudaErrorNotSupported,
                                      s, m), s, true, m);
}

EXPORT cudaError_t cudaStreamBeginCaptureToGraph(cudaStream_t s, cudaGraph_t g,
                                                 const cudaGraphNode_t *deps,
                                                 const cudaGraphEdgeData *data,
                                                 size_t n, enum cudaStreamCaptureMode m)
{
    bool c = shim_capture_starts();
    return capture_started(c, REAL_OR(cudaStreamBeginCaptureToGraph, cudaErrorNotSupported,
                                      s, g, deps, data, n, m), s, false, m);
}

EXPORT cudaError_t cudaStreamBeginCaptureToGraph_ptsz(cudaStream_t s, cudaGraph_t g,
                                                      const cudaGraphNode_t *deps,
                                                      const cudaGraphEdgeData *data,
                                                      size_t n, enum cudaStreamCaptureMode m)
{
    bool c = shim_capture_starts();
    return capture_started(c, REAL_OR(cudaStreamBeginCaptureToGraph_ptsz,
                                      cudaErrorNotSupported, s, g, deps, data, n, m),
                           s, true, m);
}

EXPORT cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g)
{
    shim_real_resolve();
    return end_capture(shim_real.cudaStreamEndCapture, s, g, false);
}

EXPORT cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t s, cudaGraph_t *g)
{
    shim_real_resolve();
    return end_capture(shim_real.cudaStreamEndCapture_ptsz, s, g, true);
}

EXPORT cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *h, void *ptr)
{
    if (pass() || !h)
        return REAL_OR(cudaIpcGetMemHandle, cudaErrorInitializationError, h, ptr);
    return (cudaError_t)shim_ipc_get(&shim_ipc_runtime, h, ptr);
}

EXPORT cudaError_t cudaIpcOpenMemHandle(void **ptr, cudaIpcMemHandle_t h, unsigned int flags)
{
    if (pass())
        return REAL_OR(cudaIpcOpenMemHandle, cudaErrorInitializationError, ptr, h, flags);
    return (cudaError_t)shim_ipc_open(&shim_ipc_runtime, ptr, &h, flags);
}

EXPORT cudaError_t cudaIpcCloseMemHandle(void *ptr)
{
    if (pass())
        return REAL_OR(cudaIpcCloseMemHandle, cudaErrorInitializationError, ptr);
    return (cudaError_t)shim_ipc_close(&shim_ipc_runtime, ptr);
}

/* ---- allocations passed on: counted against the cap ------------------------ */

/* Takes size bytes of the current device's cap (passed.h): the device, -1
 * when there is nothing to count (the shim is off, no device), or -2 when
 * the cap refuses. */
static int take(size_t size, const char *call)
{
    if (pass())
        return -1;
    int dev = current_device();
    if (dev < 0)
        return -1;
    return shim_cap_take_passed(dev, size, call) ? -2 : dev;
}

/* Settles what take() took (shim_passed_settle). */
static cudaError_t taken(int dev, cudaError_t e, void *ptr, size_t took, size_t size)
{
    shim_passed_settle(dev, e == cudaSuccess, SHIM_PASSED_PTR, (uintptr_t)ptr, took, size);
    return e;
}

EXPORT cudaError_t cudaMallocPitch(void **ptr, size_t *pitch, size_t w, size_t h)
{
    shim_count(SHIM_passthrough_pitch);
    int dev = take(w * h, "cudaMallocPitch");
    if (dev == -2)
        return cudaErrorMemoryAllocation;
    cudaError_t e = REAL_OR(cudaMallocPitch, cudaErrorInitializationError, ptr, pitch, w, h);
    return taken(dev, e, e == cudaSuccess && ptr ? *ptr : NULL, w * h,
                 e == cudaSuccess && pitch ? *pitch * h : 0);
}

EXPORT cudaError_t cudaMalloc3D(struct cudaPitchedPtr *ptr, struct cudaExtent x)
{
    shim_count(SHIM_passthrough_3d);
    size_t depth = x.depth ? x.depth : 1, want = x.width * x.height * depth;
    int dev = take(want, "cudaMalloc3D");
    if (dev == -2)
        return cudaErrorMemoryAllocation;
    cudaError_t e = REAL_OR(cudaMalloc3D, cudaErrorInitializationError, ptr, x);
    bool ok = e == cudaSuccess && ptr;
    return taken(dev, e, ok ? ptr->ptr : NULL, want,
                 ok ? ptr->pitch * x.height * depth : 0);
}

EXPORT cudaError_t cudaMallocManaged(void **ptr, size_t size, unsigned int flags)
{
    shim_count(SHIM_passthrough_managed);
    int dev = take(size, "cudaMallocManaged");
    if (dev == -2)
        return cudaErrorMemoryAllocation;
    cudaError_t e = REAL_OR(cudaMallocManaged, cudaErrorInitializationError, ptr, size,
                            flags);
    return taken(dev, e, e == cudaSuccess && ptr ? *ptr : NULL, size, size);
}

EXPORT cudaError_t cudaMallocAsync(void **ptr, size_t size, cudaStream_t s)
{
    shim_count(SHIM_passthrough_async);
    int dev = take(size, "cudaMallocAsync");
    if (dev == -2)
        return cudaErrorMemoryAllocation;
    cudaError_t e = REAL_OR(cudaMallocAsync, cudaErrorInitializationError, ptr, size, s);
    return taken(dev, e, e == cudaSuccess && ptr ? *ptr : NULL, size, size);
}

/* ---- driver entry points handed out by the runtime ---------------------- */

static cudaError_t answered(cudaError_t e, const char *symbol, void **fn)
{
    if (e == cudaSuccess && fn && symbol)
        *fn = shim_drv_answer(symbol, *fn);
    return e;
}

EXPORT cudaError_t cudaGetDriverEntryPoint(const char *symbol, void **fn,
                                           unsigned long long flags,
                                           enum cudaDriverEntryPointQueryResult *st)
{
    return answered(REAL_OR(cudaGetDriverEntryPoint, cudaErrorNotSupported, symbol, fn,
                            flags, st), symbol, fn);
}

EXPORT cudaError_t cudaGetDriverEntryPoint_ptsz(const char *symbol, void **fn,
                                                unsigned long long flags,
                                                enum cudaDriverEntryPointQueryResult *st)
{
    return answered(REAL_OR(cudaGetDriverEntryPoint_ptsz, cudaErrorNotSupported, symbol,
                            fn, flags, st), symbol, fn);
}

EXPORT cudaError_t cudaGetDriverEntryPointByVersion(const char *symbol, void **fn,
                                                    unsigned int version,
                                                    unsigned long long flags,
                                                    enum cudaDriverEntryPointQueryResult *st)
{
    return answered(REAL_OR(cudaGetDriverEntryPointByVersion, cudaErrorNotSupported,
                            symbol, fn, version, flags, st), symbol, fn);
}

EXPORT cudaError_t cudaGetDriverEntryPointByVersion_ptsz(
    const char *symbol, void **fn, unsigned int version, unsigned long long flags,
    enum cudaDriverEntryPointQueryResult *st)
{
    return answered(REAL_OR(cudaGetDriverEntryPointByVersion_ptsz, cudaErrorNotSupported,
                            symbol, fn, version, flags, st), symbol, fn);
}
