/* SPDX-License-Identifier: Apache-2.0 */
/*
 * seam.c - see seam.h: the runtime's instance, then the driver's.
 */
#include <errno.h>

#include "seam.h"
#include "driver.h"
#include "process.h"
#include "real.h"

_Static_assert((int)cudaErrorMemoryAllocation == (int)CUDA_ERROR_OUT_OF_MEMORY &&
               (int)cudaErrorInvalidValue == (int)CUDA_ERROR_INVALID_VALUE &&
               (int)cudaErrorNotReady == (int)CUDA_ERROR_NOT_READY,
               "the runtime's and the driver's codes agree");

_Thread_local bool shim_via_driver;

int shim_cuda_errno(int code)
{
    return !code ? 0 : code == cudaErrorMemoryAllocation ? -ENOMEM : -EIO;
}

/* ---- the program's runtime ---------------------------------------------- */

static int rt_done(cudaError_t e)
{
    if (e != cudaSuccess)
        shim_real.cudaGetLastError();
    return (int)e;
}

/* A runtime call of the shim's own, under the re-entry guard. */
static _Thread_local cudaError_t rt_e;
#define RT(call) (shim_inside++, rt_e = (call), shim_inside--, rt_done(rt_e))

static int rt_alloc(CUcontext own, size_t size, uintptr_t *base)
{
    (void)own;
    void *p = NULL;
    int e = RT(shim_real.cudaMalloc(&p, size));
    *base = (uintptr_t)p;
    return e;
}

static int rt_free(uintptr_t p) { return RT(shim_real.cudaFree((void *)p)); }

static int rt_info(size_t *free_b, size_t *total)
{
    return RT(shim_real.cudaMemGetInfo(free_b, total));
}

static int rt_sync(void) { return RT(shim_real.cudaDeviceSynchronize()); }

static int rt_event_create(cudaEvent_t *e)
{
    return RT(shim_real.cudaEventCreateWithFlags(e, cudaEventDisableTiming));
}

static void rt_event_destroy(cudaEvent_t e) { RT(shim_real.cudaEventDestroy(e)); }

static int rt_record(cudaEvent_t e, cudaStream_t s) { return RT(shim_real.cudaEventRecord(e, s)); }

static int rt_wait(cudaStream_t s, cudaEvent_t e)
{
    return RT(shim_real.cudaStreamWaitEvent(s, e, 0));
}

static bool rt_capturing(cudaStream_t s)
{
    enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    return RT(shim_real.cudaStreamIsCapturing(s, &st)) != 0 ||
           st != cudaStreamCaptureStatusNone;
}

static bool rt_exchange_mode(int *mode)
{
    if (!shim_real.cudaThreadExchangeStreamCaptureMode)
        return false;
    enum cudaStreamCaptureMode m = (enum cudaStreamCaptureMode)*mode;
    RT(shim_real.cudaThreadExchangeStreamCaptureMode(&m));
    *mode = (int)m;
    return true;
}

static bool rt_enter(int dev, CUcontext own, shim_saved *saved)
{
    (void)own;
    if (RT(shim_real.cudaGetDevice(&saved->dev)) != 0)
        saved->dev = -1;
    return RT(shim_real.cudaSetDevice(dev)) == 0;
}

static void rt_leave(const shim_saved *saved)
{
    if (saved->dev >= 0)
        RT(shim_real.cudaSetDevice(saved->dev));
}

static const char *rt_strerror(int e) { return shim_real.cudaGetErrorString((cudaError_t)e); }

const shim_cuda shim_cuda_runtime = {
    rt_alloc, rt_free, rt_info, rt_sync, rt_event_create, rt_event_destroy, rt_record,
    rt_wait, rt_capturing, rt_exchange_mode, rt_enter, rt_leave, rt_strerror,
};

/* ---- the driver ------------------------------------------------------------ */

static int drv_alloc(CUcontext own, size_t size, uintptr_t *base)
{
    /* A thread with no context yet (one that only used a runtime the
     * process loaded after the pool was made): the pool's, as the runtime
     * would have made it current. */
    CUcontext c = NULL;
    if (shim_drv.cuCtxGetCurrent(&c) == CUDA_SUCCESS && !c && own)
        shim_drv.cuCtxSetCurrent(own);
    CUdeviceptr p = 0;
    CUresult r = shim_drv.cuMemAlloc_v2(&p, size);
    *base = (uintptr_t)p;
    return (int)r;
}

static int drv_free(uintptr_t p) { return (int)shim_drv.cuMemFree_v2((CUdeviceptr)p); }

static int drv_info(size_t *free_b, size_t *total)
{
    return (int)shim_drv.cuMemGetInfo_v2(free_b, total);
}

static int drv_sync(void) { return (int)shim_drv.cuCtxSynchronize(); }

static int drv_event_create(cudaEvent_t *e)
{
    return (int)shim_drv.cuEventCreate((CUevent *)e, CU_EVENT_DISABLE_TIMING);
}

static void drv_event_destroy(cudaEvent_t e) { shim_drv.cuEventDestroy_v2((CUevent)e); }

static int drv_record(cudaEvent_t e, cudaStream_t s)
{
    return (int)shim_drv.cuEventRecord((CUevent)e, (CUstream)s);
}

static int drv_wait(cudaStream_t s, cudaEvent_t e)
{
    return (int)shim_drv.cuStreamWaitEvent((CUstream)s, (CUevent)e, 0);
}

static bool drv_capturing(cudaStream_t s)
{
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
    return shim_drv.cuStreamIsCapturing((CUstream)s, &st) != CUDA_SUCCESS ||
           st != CU_STREAM_CAPTURE_STATUS_NONE;
}

static bool drv_exchange_mode(int *mode)
{
    if (!shim_drv.cuThreadExchangeStreamCaptureMode)
        return false;
    CUstreamCaptureMode m = (CUstreamCaptureMode)*mode;
    shim_drv.cuThreadExchangeStreamCaptureMode(&m);
    *mode = (int)m;
    return true;
}

static bool drv_enter(int dev, CUcontext own, shim_saved *saved)
{
    (void)dev;
    if (!own || shim_drv.cuCtxGetCurrent(&saved->ctx) != CUDA_SUCCESS)
        return false;
    return shim_drv.cuCtxSetCurrent(own) == CUDA_SUCCESS;
}

static void drv_leave(const shim_saved *saved) { shim_drv.cuCtxSetCurrent(saved->ctx); }

static const char *drv_strerror(int e)
{
    const char *s = NULL;
    return shim_drv.cuGetErrorString && shim_drv.cuGetErrorString((CUresult)e, &s) ==
           CUDA_SUCCESS && s ? s : "driver error";
}

const shim_cuda shim_cuda_driver = {
    drv_alloc, drv_free, drv_info, drv_sync, drv_event_create, drv_event_destroy, drv_record,
    drv_wait, drv_capturing, drv_exchange_mode, drv_enter, drv_leave, drv_strerror,
};

int shim_cuda_query(const shim_cuda *c, cudaEvent_t e)
{
    if (shim_drv.cuEventQuery)
        return (int)shim_drv.cuEventQuery((CUevent)e);
    int r = c == &shim_cuda_driver ? -1 : (int)shim_real.cudaEventQuery(e);
    return r < 0 ? cudaErrorNotReady : r;
}
