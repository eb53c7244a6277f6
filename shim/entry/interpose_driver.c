/* SPDX-License-Identifier: Apache-2.0 */
/*
 * interpose_driver.c - the driver entry points cupool hands out in place of
 * the driver's (driver.h): exported under the driver's own names, so a
 * program linked against libcuda reaches them too.
 *
 * Each goes straight to the real driver while the shim is off or the
 * calling thread is inside it (the dynamic runtime's cudaMalloc, interposed,
 * calls cuMemAlloc inside: served once, by the runtime's entry). Otherwise
 * cuMemAlloc/cuMemFree are served by the pool of the device whose context
 * is current; what cannot be pooled is passed on and counted (passed.h);
 * streams and captures are tracked for the fence, as the runtime's are.
 * Errors are the driver's codes.
 */
#include <errno.h>
#include <stdatomic.h>

#include "process.h"
#include "cap.h"
#include "capture.h"
#include "device.h"
#include "fence.h"
#include "driver.h"
#include "interpose.h"
#include "ipc.h"
#include "log.h"
#include "passed.h"

static _Thread_local CUresult real_r;

/* The real function with the re-entry guard up, or CUDA_ERROR_NOT_FOUND
 * if the driver has none. */
#define REAL(name, ...)                                                       \
    (shim_drv_resolve() != 0 || !shim_drv.name ? CUDA_ERROR_NOT_FOUND         \
     : (shim_inside++, real_r = shim_drv.name(__VA_ARGS__), shim_inside--, real_r))

static bool pass(void)
{
    return shim_inside || !shim_active() || shim_drv_resolve() != 0;
}

/* ---- the calling thread's context ------------------------------------------ */

/* Bumped when a context is destroyed: a new one may get the same address. */
static atomic_uint ctx_generation;
static _Thread_local struct { CUcontext ctx; int dev; unsigned gen; } last;

/* The device of the current context, or -1 (none, or beyond the shim's). */
static int context_device(CUcontext *out)
{
    CUcontext c = NULL;
    if (shim_drv.cuCtxGetCurrent(&c) != CUDA_SUCCESS || !c)
        return -1;
    *out = c;
    unsigned gen = atomic_load_explicit(&ctx_generation, memory_order_acquire);
    if (c == last.ctx && gen == last.gen)
        return last.dev;
    CUdevice d;
    if (shim_drv.cuCtxGetDevice(&d) != CUDA_SUCCESS || d < 0 || d >= SHIM_MAX_DEVICES)
        return -1;
    last.ctx = c;
    last.dev = d;
    last.gen = gen;
    return d;
}

/* The device whose pools serve the current context, or -1: a context the
 * device's pools were not made in (a second context on the device) is
 * passed on. The first context to allocate on a device is the one. */
static int served_device(void)
{
    CUcontext c;
    int dev = context_device(&c);
    if (dev < 0)
        return -1;
    CUcontext own = shim_device_ctx(dev);
    if (!own && shim_device_shard_if_any(dev, 0))
        own = shim_device_ctx_adopt(dev, c); /* after a reset */
    return !own || own == c ? dev : -1;
}

/* ---- memory the pool serves --------------------------------------------------- */

/* An allocation passed on, counted against the cap of the current
 * context's device. */
#define PASSED_ALLOC(call, dptr, size, ...)                                   \
    do {                                                                      \
        CUcontext c_;                                                         \
        int dev_ = context_device(&c_);                                       \
        if (dev_ >= 0 && shim_cap_take_passed(dev_, (size), #call))               \
            return CUDA_ERROR_OUT_OF_MEMORY;                                  \
        CUresult r_ = REAL(call, __VA_ARGS__);                                \
        shim_passed_settle(dev_, r_ == CUDA_SUCCESS, SHIM_PASSED_PTR,         \
                           r_ == CUDA_SUCCESS ? (uintptr_t) * (dptr) : 0, (size), (size)); \
        return r_;                                                            \
    } while (0)

CUresult shim_hook_cuMemAlloc_v2(CUdeviceptr *dptr, size_t size)
{
    /* Forbidden by a capture: the driver's own answer (it also invalidates
     * the capture, as without cupool). */
    if (pass() || !dptr || !size || shim_capture_refuses("cuMemAlloc", true))
        return REAL(cuMemAlloc_v2, dptr, size);
    int dev = served_device();
    uintptr_t a;
    shim_via_driver = true;
    int err = dev >= 0 ? shim_serve(dev, size, &a, "cuMemAlloc") : -ENODEV;
    shim_via_driver = false;
    if (err == -ENODEV)
        PASSED_ALLOC(cuMemAlloc_v2, dptr, size, dptr, size);
    if (!err)
        *dptr = (CUdeviceptr)a;
    return (CUresult)shim_serve_error(err);
}

/* A free no pool owned: no longer counted if it was passed on. */
static CUresult freed(CUresult r, CUdeviceptr dptr)
{
    if (r == CUDA_SUCCESS)
        shim_passed_release(SHIM_PASSED_PTR, (uintptr_t)dptr);
    return r;
}

CUresult shim_hook_cuMemFree_v2(CUdeviceptr dptr)
{
    if (pass() || !dptr)
        return REAL(cuMemFree_v2, dptr);
    if (shim_capture_refuses("cuMemFree", true))
        return shim_device_owns((void *)dptr) ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
                                              : REAL(cuMemFree_v2, dptr);
    CUcontext c;
    shim_via_driver = true;
    int err = shim_free_pooled(context_device(&c), (void *)dptr);
    shim_via_driver = false;
    if (err == -ENOENT) {
        shim_count(SHIM_foreign_frees);
        return freed(REAL(cuMemFree_v2, dptr), dptr);
    }
    return err ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

CUresult shim_hook_cuMemGetInfo_v2(size_t *free_b, size_t *total_b)
{
    if (!free_b || !total_b)
        return REAL(cuMemGetInfo_v2, free_b, total_b);
    size_t f = 0, t = 0;
    bool passing = pass();
    CUresult r = REAL(cuMemGetInfo_v2, &f, &t);
    int dev = passing || r != CUDA_SUCCESS ? -1 : served_device();
    if (dev >= 0)
        shim_mem_info_adjust(dev, &f, &t);
    if (r == CUDA_SUCCESS) {
        *free_b = f;
        *total_b = t;
    }
    return r;
}

/* ---- memory passed on, counted --------------------------------------------- */

CUresult shim_hook_cuMemAllocPitch_v2(CUdeviceptr *dptr, size_t *pitch, size_t w,
                                      size_t h, unsigned int elem)
{
    if (pass())
        return REAL(cuMemAllocPitch_v2, dptr, pitch, w, h, elem);
    shim_count(SHIM_passthrough_pitch);
    CUcontext c;
    int dev = context_device(&c);
    if (dev >= 0 && shim_cap_take_passed(dev, w * h, "cuMemAllocPitch"))
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = REAL(cuMemAllocPitch_v2, dptr, pitch, w, h, elem);
    bool ok = r == CUDA_SUCCESS && dptr && pitch;
    shim_passed_settle(dev, ok, SHIM_PASSED_PTR, ok ? (uintptr_t)*dptr : 0, w * h,
                       ok ? *pitch * h : 0);
    return r;
}

CUresult shim_hook_cuMemAllocManaged(CUdeviceptr *dptr, size_t size, unsigned int flags)
{
    if (pass())
        return REAL(cuMemAllocManaged, dptr, size, flags);
    shim_count(SHIM_passthrough_managed);
    PASSED_ALLOC(cuMemAllocManaged, dptr, size, dptr, size, flags);
}

CUresult shim_hook_cuMemAllocAsync(CUdeviceptr *dptr, size_t size, CUstream s)
{
    if (pass())
        return REAL(cuMemAllocAsync, dptr, size, s);
    shim_count(SHIM_passthrough_async);
    PASSED_ALLOC(cuMemAllocAsync, dptr, size, dptr, size, s);
}

CUresult shim_hook_cuMemAllocAsync_ptsz(CUdeviceptr *dptr, size_t size, CUstream s)
{
    if (pass())
        return REAL(cuMemAllocAsync_ptsz, dptr, size, s);
    shim_count(SHIM_passthrough_async);
    PASSED_ALLOC(cuMemAllocAsync_ptsz, dptr, size, dptr, size, s);
}

/* A stream-ordered free: a pooled block (handed out by cuMemAlloc) is freed
 * in the pool, whose fence orders its reuse. */
static CUresult free_async(CUresult (*real)(CUdeviceptr, CUstream), CUdeviceptr dptr,
                           CUstream s)
{
    if (!pass() && dptr) {
        CUcontext c;
        shim_via_driver = true;
        int err = shim_free_pooled(context_device(&c), (void *)dptr);
        shim_via_driver = false;
        if (err != -ENOENT)
            return err ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
    }
    if (!real)
        return CUDA_ERROR_NOT_FOUND;
    shim_inside++;
    CUresult r = real(dptr, s);
    shim_inside--;
    return freed(r, dptr);
}

CUresult shim_hook_cuMemFreeAsync(CUdeviceptr dptr, CUstream s)
{
    shim_drv_resolve();
    return free_async(shim_drv.cuMemFreeAsync, dptr, s);
}

CUresult shim_hook_cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream s)
{
    shim_drv_resolve();
    return free_async(shim_drv.cuMemFreeAsync_ptsz, dptr, s);
}

/* Physical memory for the driver's virtual memory calls (XLA's allocator,
 * PyTorch's expandable segments, NCCL): counted when created, on the device
 * it is created on, until released. Mapping it adds nothing. */
CUresult shim_hook_cuMemCreate(CUmemGenericAllocationHandle *h, size_t size,
                               const CUmemAllocationProp *prop, unsigned long long flags)
{
    if (pass() || !h || !prop)
        return REAL(cuMemCreate, h, size, prop, flags);
    shim_count(SHIM_passthrough_create);
    int dev = prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE &&
              prop->location.id >= 0 && prop->location.id < SHIM_MAX_DEVICES
                  ? prop->location.id : -1;
    if (dev >= 0 && shim_cap_take_passed(dev, size, "cuMemCreate"))
        return CUDA_ERROR_OUT_OF_MEMORY;
    CUresult r = REAL(cuMemCreate, h, size, prop, flags);
    shim_passed_settle(dev, r == CUDA_SUCCESS, SHIM_PASSED_HANDLE,
                       r == CUDA_SUCCESS ? (uintptr_t)*h : 0, size, size);
    return r;
}

CUresult shim_hook_cuMemRelease(CUmemGenericAllocationHandle h)
{
    CUresult r = REAL(cuMemRelease, h);
    if (r == CUDA_SUCCESS && !shim_inside)
        shim_passed_release(SHIM_PASSED_HANDLE, (uintptr_t)h);
    return r;
}

/* ---- streams and captures, for the fence ------------------------------------ */

static CUresult tracked(CUresult r, CUstream *s, unsigned int flags)
{
    if (r == CUDA_SUCCESS && s && !shim_inside && shim_active()) {
        int dev = served_device();
        if (dev >= 0) {
            shim_inside++;
            shim_device_track_stream(dev, (cudaStream_t)*s, flags);
            shim_inside--;
        }
    }
    return r;
}

CUresult shim_hook_cuStreamCreate(CUstream *s, unsigned int flags)
{
    return tracked(REAL(cuStreamCreate, s, flags), s, flags);
}

CUresult shim_hook_cuStreamCreateWithPriority(CUstream *s, unsigned int flags, int prio)
{
    return tracked(REAL(cuStreamCreateWithPriority, s, flags, prio), s, flags);
}

CUresult shim_hook_cuStreamDestroy_v2(CUstream s)
{
    if (!shim_inside && shim_active()) {
        shim_inside++;
        shim_device_untrack_stream((cudaStream_t)s);
        shim_inside--;
    }
    return REAL(cuStreamDestroy_v2, s);
}

/* A capture begun through the driver: see shim_capture_starts. */
static CUresult capture_started(bool counted, CUresult r, CUstream s, bool per_thread,
                                CUstreamCaptureMode mode)
{
    shim_capture_started(counted, r == CUDA_SUCCESS, s, per_thread, (int)mode);
    return r;
}

/* CUDA 10.0's form, without a mode (global), and its per-thread form. */
CUresult shim_hook_cuStreamBeginCapture(CUstream s)
{
    bool c = shim_capture_starts();
    return capture_started(c, REAL(cuStreamBeginCapture, s), s, false,
                           CU_STREAM_CAPTURE_MODE_GLOBAL);
}

CUresult shim_hook_cuStreamBeginCapture_ptsz(CUstream s)
{
    bool c = shim_capture_starts();
    return capture_started(c, REAL(cuStreamBeginCapture_ptsz, s), s, true,
                           CU_STREAM_CAPTURE_MODE_GLOBAL);
}

CUresult shim_hook_cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode m)
{
    bool c = shim_capture_starts();
    return capture_started(c, REAL(cuStreamBeginCapture_v2, s, m), s, false, m);
}

CUresult shim_hook_cuStreamBeginCapture_v2_ptsz(CUstream s, CUstreamCaptureMode m)
{
    bool c = shim_capture_starts();
    return capture_started(c, REAL(cuStreamBeginCapture_v2_ptsz, s, m), s, true, m);
}

CUresult shim_hook_cuStreamBeginCaptureToGraph(CUstream s, CUgraph g, const CUgraphNode *d,
                                               const CUgraphEdgeData *e, size_t n,
                                               CUstreamCaptureMode m)
{
    bool c = shim_capture_starts();
    return capture_started(c, REAL(cuStreamBeginCaptureToGraph, s, g, d, e, n, m), s,
                           false, m);
}

CUresult shim_hook_cuStreamBeginCaptureToGraph_ptsz(CUstream s, CUgraph g,
                                                    const CUgraphNode *d,
                                                    const CUgraphEdgeData *e, size_t n,
                                                    CUstreamCaptureMode m)
{
    bool c = shim_capture_starts();
    return capture_started(c, REAL(cuStreamBeginCaptureToGraph_ptsz, s, g, d, e, n, m), s,
                           true, m);
}

/* Counts the end of a capture only if the stream had one and has none
 * after the call. */
static CUresult end_capture(CUresult (*real)(CUstream, CUgraph *), CUstream s, CUgraph *g,
                            bool per_thread)
{
    if (!real)
        return CUDA_ERROR_NOT_FOUND;
    CUstream q = per_thread && !s ? CU_STREAM_PER_THREAD : s;
    bool counted = !shim_inside && shim_active() && shim_drv.cuStreamIsCapturing;
    CUstreamCaptureStatus before = CU_STREAM_CAPTURE_STATUS_NONE, after = before;
    shim_inside++;
    if (counted && shim_drv.cuStreamIsCapturing(q, &before) != CUDA_SUCCESS)
        before = CU_STREAM_CAPTURE_STATUS_NONE;
    CUresult r = real(s, g);
    if (counted && before != CU_STREAM_CAPTURE_STATUS_NONE &&
        shim_drv.cuStreamIsCapturing(q, &after) == CUDA_SUCCESS &&
        after == CU_STREAM_CAPTURE_STATUS_NONE)
        shim_capture_ended(q);
    shim_inside--;
    return r;
}

CUresult shim_hook_cuStreamEndCapture(CUstream s, CUgraph *g)
{
    shim_drv_resolve();
    return end_capture(shim_drv.cuStreamEndCapture, s, g, false);
}

CUresult shim_hook_cuStreamEndCapture_ptsz(CUstream s, CUgraph *g)
{
    shim_drv_resolve();
    return end_capture(shim_drv.cuStreamEndCapture_ptsz, s, g, true);
}

/* ---- contexts ------------------------------------------------------------------ */

/* The device's pools and counts, after the context they served was
 * destroyed with all its memory. */
static void context_gone(int dev)
{
    atomic_fetch_add_explicit(&ctx_generation, 1, memory_order_release);
    if (!shim_device_shard_if_any(dev, 0))
        return;
    shim_log(SHIM_LOG_INFO, "device %d: its context was destroyed; the pool "
             "starts again empty", dev);
    shim_device_abandon(dev);
    shim_passed_forget_device(dev);
}

CUresult shim_hook_cuCtxDestroy_v2(CUcontext ctx)
{
    CUresult r = REAL(cuCtxDestroy_v2, ctx);
    if (r != CUDA_SUCCESS || shim_inside || !shim_active())
        return r;
    for (int i = 0; i < SHIM_MAX_DEVICES; i++)
        if (ctx && shim_device_ctx(i) == ctx)
            context_gone(i);
    return r;
}

/* The primary context, which every runtime uses (cudaDeviceReset of a
 * static runtime comes here): its pools go with it. A pool made in a
 * context of the program's own is kept. */
CUresult shim_hook_cuDevicePrimaryCtxReset_v2(CUdevice dev)
{
    CUcontext own = NULL;
    bool primary = false;
    if (!shim_inside && shim_active() && dev >= 0 && dev < SHIM_MAX_DEVICES &&
        shim_drv_resolve() == 0 && (own = shim_device_ctx(dev))) {
        unsigned int flags = 0;
        int active = 0;
        CUcontext pc = NULL;
        /* Retaining an active primary context only counts a reference. */
        if (shim_drv.cuDevicePrimaryCtxGetState &&
            shim_drv.cuDevicePrimaryCtxGetState(dev, &flags, &active) == CUDA_SUCCESS &&
            active && shim_drv.cuDevicePrimaryCtxRetain(&pc, dev) == CUDA_SUCCESS) {
            primary = pc == own;
            shim_drv.cuDevicePrimaryCtxRelease_v2(dev);
        }
    }
    CUresult r = REAL(cuDevicePrimaryCtxReset_v2, dev);
    if (r == CUDA_SUCCESS && primary)
        context_gone(dev);
    return r;
}

/* The device of context c, or -1: made current for the asking, then the
 * caller's again. */
static int device_of(CUcontext c)
{
    CUdevice d = -1;
    CUcontext back = NULL;
    if (!c || !shim_drv.cuCtxPushCurrent_v2 || !shim_drv.cuCtxPopCurrent_v2 ||
        !shim_drv.cuCtxGetDevice || shim_drv.cuCtxPushCurrent_v2(c) != CUDA_SUCCESS)
        return -1;
    if (shim_drv.cuCtxGetDevice(&d) != CUDA_SUCCESS)
        d = -1;
    shim_drv.cuCtxPopCurrent_v2(&back);
    return d >= 0 && d < SHIM_MAX_DEVICES ? d : -1;
}

/* Peer access, enabled by the program through the driver or the runtime
 * (cudaDeviceEnablePeerAccess comes here): the current context's device
 * may now reach peer's memory, and cupool's VMM segments of peer's device
 * must let it (device.h). */
CUresult shim_hook_cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags)
{
    CUresult r = REAL(cuCtxEnablePeerAccess, peer, flags);
    if ((r != CUDA_SUCCESS && r != CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED) || pass())
        return r;
    CUcontext c;
    int me = context_device(&c), owner = device_of(peer);
    if (me >= 0 && owner >= 0 && me != owner)
        shim_device_peer_access(owner, me);
    return r;
}

/* ---- IPC and entry points ------------------------------------------------------- */

CUresult shim_hook_cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr dptr)
{
    if (pass() || !h)
        return REAL(cuIpcGetMemHandle, h, dptr);
    return (CUresult)shim_ipc_get(&shim_ipc_driver, h, (void *)dptr);
}

CUresult shim_hook_cuIpcOpenMemHandle_v2(CUdeviceptr *dptr, CUipcMemHandle h,
                                         unsigned int flags)
{
    if (pass() || !dptr)
        return REAL(cuIpcOpenMemHandle_v2, dptr, h, flags);
    void *p = NULL;
    CUresult r = (CUresult)shim_ipc_open(&shim_ipc_driver, &p, &h, flags);
    if (r == CUDA_SUCCESS)
        *dptr = (CUdeviceptr)p;
    return r;
}

CUresult shim_hook_cuIpcCloseMemHandle(CUdeviceptr dptr)
{
    if (pass())
        return REAL(cuIpcCloseMemHandle, dptr);
    return (CUresult)shim_ipc_close(&shim_ipc_driver, (void *)dptr);
}

CUresult shim_hook_cuGetProcAddress(const char *symbol, void **fn, int version,
                                    cuuint64_t flags)
{
    CUresult r = shim_drv_resolve() != 0 || !shim_drv.cuGetProcAddress
                     ? CUDA_ERROR_NOT_FOUND
                     : shim_drv.cuGetProcAddress(symbol, fn, version, flags);
    if (r == CUDA_SUCCESS && fn && symbol)
        *fn = shim_drv_answer(symbol, *fn);
    return r;
}

CUresult shim_hook_cuGetProcAddress_v2(const char *symbol, void **fn, int version,
                                       cuuint64_t flags,
                                       CUdriverProcAddressQueryResult *status)
{
    CUresult r = shim_drv_resolve() != 0 || !shim_drv.cuGetProcAddress_v2
                     ? CUDA_ERROR_NOT_FOUND
                     : shim_drv.cuGetProcAddress_v2(symbol, fn, version, flags, status);
    if (r == CUDA_SUCCESS && fn && symbol)
        *fn = shim_drv_answer(symbol, *fn);
    return r;
}
