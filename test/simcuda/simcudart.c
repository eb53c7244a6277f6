/* SPDX-License-Identifier: Apache-2.0 */
/*
 * simcudart.c - the simulated runtime, libcudart.so.13: what a runtime
 * does, on the simulated driver (simcuda.c, libcuda.so.1), which holds the
 * state. As the real runtime does, it loads the driver with dlopen and
 * takes its entry points from cuGetProcAddress, found with dlsym: an
 * allocation reaches the driver through pointers a preloaded library may
 * have answered (cudaMalloc through cuMemAlloc_v2, cudaFree through
 * cuMemFree_v2). The other calls go to the driver's simrt_ functions.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#define EXPORT __attribute__((visibility("default")))

cudaError_t simrt_cudaFreeAsync(void *ptr, cudaStream_t s);
cudaError_t simrt_cudaMallocAsync(void **ptr, size_t size, cudaStream_t s);
cudaError_t simrt_cudaMallocManaged(void **ptr, size_t size, unsigned int f);
cudaError_t simrt_cudaMallocPitch(void **ptr, size_t *pitch, size_t w, size_t h);
cudaError_t simrt_cudaMalloc3D(struct cudaPitchedPtr *pp, struct cudaExtent e);
cudaError_t simrt_cudaMemGetInfo(size_t *free_b, size_t *total);
cudaError_t simrt_cudaDeviceReset(void);
cudaError_t simrt_cudaGetDeviceCount(int *n);
cudaError_t simrt_cudaGetDevice(int *d);
cudaError_t simrt_cudaSetDevice(int d);
cudaError_t simrt_cudaGetLastError(void);
cudaError_t simrt_cudaDeviceSynchronize(void);
cudaError_t simrt_cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int f);
cudaError_t simrt_cudaEventDestroy(cudaEvent_t e);
cudaError_t simrt_cudaEventQuery(cudaEvent_t e);
cudaError_t simrt_cudaEventRecord(cudaEvent_t e, cudaStream_t s);
cudaError_t simrt_cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int f);
cudaError_t simrt_cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s);
cudaError_t simrt_cudaStreamCreateWithPriority(cudaStream_t *s, unsigned int f, int p);
cudaError_t simrt_cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int f);
cudaError_t simrt_cudaStreamCreate(cudaStream_t *s);
cudaError_t simrt_cudaStreamDestroy(cudaStream_t s);
cudaError_t simrt_cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode m);
cudaError_t simrt_cudaStreamBeginCapture_ptsz(cudaStream_t s, enum cudaStreamCaptureMode m);
cudaError_t simrt_cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g);
cudaError_t simrt_cudaStreamEndCapture_ptsz(cudaStream_t s, cudaGraph_t *g);
cudaError_t simrt_cudaStreamIsCapturing(cudaStream_t s, enum cudaStreamCaptureStatus *status);
cudaError_t simrt_cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *m);
cudaError_t simrt_cudaIpcGetMemHandle(cudaIpcMemHandle_t *h, void *ptr);
cudaError_t simrt_cudaDeviceGetPCIBusId(char *id, int len, int device);
const char *simrt_cudaGetErrorString(cudaError_t e);
cudaError_t simrt_cudaGraphDestroy(cudaGraph_t g);
cudaError_t simrt_cudaIpcOpenMemHandle(void **p, cudaIpcMemHandle_t h, unsigned int f);
cudaError_t simrt_cudaIpcCloseMemHandle(void *p);
void simrt_set_error(cudaError_t e);

/* ---- the driver, as the runtime finds it -------------------------------- */

typedef CUresult (*gpa_fn)(const char *, void **, int, cuuint64_t,
                           CUdriverProcAddressQueryResult *);
static struct {
    gpa_fn gpa;
    CUresult (*alloc)(CUdeviceptr *, size_t);
    CUresult (*free)(CUdeviceptr);
} drv;
static pthread_once_t drv_once = PTHREAD_ONCE_INIT;

static void drv_load(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!h) {
        fprintf(stderr, "simcudart: no libcuda.so.1: %s\n", dlerror());
        abort();
    }
    drv.gpa = (gpa_fn)dlsym(h, "cuGetProcAddress_v2");
    CUdriverProcAddressQueryResult q;
    if (!drv.gpa || drv.gpa("cuMemAlloc", (void **)&drv.alloc, CUDART_VERSION, 0, &q) ||
        drv.gpa("cuMemFree", (void **)&drv.free, CUDART_VERSION, 0, &q)) {
        fprintf(stderr, "simcudart: the driver's entry points are missing\n");
        abort();
    }
}

static cudaError_t from_driver(CUresult r)
{
    cudaError_t e = r == CUDA_SUCCESS ? cudaSuccess
                    : r == CUDA_ERROR_OUT_OF_MEMORY ? cudaErrorMemoryAllocation
                    : r == CUDA_ERROR_INVALID_VALUE ? cudaErrorInvalidValue
                    : r == CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
                        ? cudaErrorStreamCaptureUnsupported
                    : r == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
                        ? cudaErrorStreamCaptureInvalidated
                    : r == CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED
                        ? cudaErrorPeerAccessAlreadyEnabled
                    : r == CUDA_ERROR_INVALID_DEVICE ? cudaErrorInvalidDevice
                    : cudaErrorUnknown;
    if (e != cudaSuccess)
        simrt_set_error(e);
    return e;
}

EXPORT cudaError_t cudaMalloc(void **ptr, size_t size)
{
    pthread_once(&drv_once, drv_load);
    if (!ptr)
        return from_driver(CUDA_ERROR_INVALID_VALUE);
    if (!size) {
        *ptr = NULL;
        return cudaSuccess;
    }
    CUdeviceptr p = 0;
    cudaError_t e = from_driver(drv.alloc(&p, size));
    if (e == cudaSuccess)
        *ptr = (void *)p;
    return e;
}

EXPORT cudaError_t cudaFree(void *ptr)
{
    pthread_once(&drv_once, drv_load);
    return ptr ? from_driver(drv.free((CUdeviceptr)ptr)) : cudaSuccess;
}

EXPORT cudaError_t cudaGetDriverEntryPointByVersion(const char *sym, void **fn,
                                                    unsigned int version,
                                                    unsigned long long flags,
                                                    enum cudaDriverEntryPointQueryResult *q)
{
    pthread_once(&drv_once, drv_load);
    CUdriverProcAddressQueryResult dq = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    CUresult r = drv.gpa(sym, fn, (int)version, flags, &dq);
    if (q)
        *q = dq == CU_GET_PROC_ADDRESS_SUCCESS ? cudaDriverEntryPointSuccess
             : dq == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                 ? cudaDriverEntryPointVersionNotSufficent
                 : cudaDriverEntryPointSymbolNotFound;
    return from_driver(r);
}

/* As the real runtime does it: the driver's cuCtxEnablePeerAccess on the
 * peer's primary context, reached through the driver's entry points. */
EXPORT cudaError_t cudaDeviceEnablePeerAccess(int peer, unsigned int flags)
{
    pthread_once(&drv_once, drv_load);
    CUresult (*retain)(CUcontext *, CUdevice) = NULL;
    CUresult (*enable)(CUcontext, unsigned int) = NULL;
    CUdriverProcAddressQueryResult q;
    CUcontext pc = NULL;
    CUresult r = drv.gpa("cuDevicePrimaryCtxRetain", (void **)&retain, CUDART_VERSION, 0, &q);
    if (r == CUDA_SUCCESS)
        r = drv.gpa("cuCtxEnablePeerAccess", (void **)&enable, CUDART_VERSION, 0, &q);
    if (r == CUDA_SUCCESS)
        r = retain(&pc, peer);
    if (r == CUDA_SUCCESS)
        r = enable(pc, flags);
    return from_driver(r);
}

EXPORT cudaError_t cudaGetDriverEntryPoint(const char *sym, void **fn,
                                           unsigned long long flags,
                                           enum cudaDriverEntryPointQueryResult *q)
{
    return cudaGetDriverEntryPointByVersion(sym, fn, CUDART_VERSION, flags, q);
}

/* ---- everything else: the driver's state -------------------------------- */

EXPORT cudaError_t cudaFreeAsync(void *ptr, cudaStream_t s)
{
    return simrt_cudaFreeAsync(ptr, s);
}

EXPORT cudaError_t cudaMallocAsync(void **ptr, size_t size, cudaStream_t s)
{
    return simrt_cudaMallocAsync(ptr, size, s);
}

EXPORT cudaError_t cudaMallocManaged(void **ptr, size_t size, unsigned int f)
{
    return simrt_cudaMallocManaged(ptr, size, f);
}

EXPORT cudaError_t cudaMallocPitch(void **ptr, size_t *pitch, size_t w, size_t h)
{
    return simrt_cudaMallocPitch(ptr, pitch, w, h);
}

EXPORT cudaError_t cudaMalloc3D(struct cudaPitchedPtr *pp, struct cudaExtent e)
{
    return simrt_cudaMalloc3D(pp, e);
}

EXPORT cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total)
{
    return simrt_cudaMemGetInfo(free_b, total);
}

EXPORT cudaError_t cudaDeviceReset(void)
{
    return simrt_cudaDeviceReset();
}

EXPORT cudaError_t cudaGetDeviceCount(int *n)
{
    return simrt_cudaGetDeviceCount(n);
}

EXPORT cudaError_t cudaGetDevice(int *d)
{
    return simrt_cudaGetDevice(d);
}

EXPORT cudaError_t cudaSetDevice(int d)
{
    return simrt_cudaSetDevice(d);
}

EXPORT cudaError_t cudaGetLastError(void)
{
    return simrt_cudaGetLastError();
}

EXPORT cudaError_t cudaDeviceSynchronize(void)
{
    return simrt_cudaDeviceSynchronize();
}

EXPORT cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int f)
{
    return simrt_cudaEventCreateWithFlags(e, f);
}

EXPORT cudaError_t cudaEventQuery(cudaEvent_t e)
{
    return simrt_cudaEventQuery(e);
}

EXPORT cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    return simrt_cudaEventDestroy(e);
}

EXPORT cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
    return simrt_cudaEventRecord(e, s);
}

EXPORT cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int f)
{
    return simrt_cudaStreamWaitEvent(s, e, f);
}

EXPORT cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s)
{
    return simrt_cudaMemsetAsync(p, v, n, s);
}

EXPORT cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned int f, int p)
{
    return simrt_cudaStreamCreateWithPriority(s, f, p);
}

EXPORT cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int f)
{
    return simrt_cudaStreamCreateWithFlags(s, f);
}

EXPORT cudaError_t cudaStreamCreate(cudaStream_t *s)
{
    return simrt_cudaStreamCreate(s);
}

EXPORT cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    return simrt_cudaStreamDestroy(s);
}

EXPORT cudaError_t cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode m)
{
    return simrt_cudaStreamBeginCapture(s, m);
}

EXPORT cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t s, enum cudaStreamCaptureMode m)
{
    return simrt_cudaStreamBeginCapture_ptsz(s, m);
}

EXPORT cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g)
{
    return simrt_cudaStreamEndCapture(s, g);
}

EXPORT cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t s, cudaGraph_t *g)
{
    return simrt_cudaStreamEndCapture_ptsz(s, g);
}

EXPORT cudaError_t cudaStreamIsCapturing(cudaStream_t s, enum cudaStreamCaptureStatus *status)
{
    return simrt_cudaStreamIsCapturing(s, status);
}

EXPORT cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *m)
{
    return simrt_cudaThreadExchangeStreamCaptureMode(m);
}

EXPORT cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *h, void *ptr)
{
    return simrt_cudaIpcGetMemHandle(h, ptr);
}

EXPORT cudaError_t cudaDeviceGetPCIBusId(char *id, int len, int device)
{
    return simrt_cudaDeviceGetPCIBusId(id, len, device);
}

EXPORT const char *cudaGetErrorString(cudaError_t e)
{
    return simrt_cudaGetErrorString(e);
}

EXPORT cudaError_t cudaGraphDestroy(cudaGraph_t g)
{
    return simrt_cudaGraphDestroy(g);
}

EXPORT cudaError_t cudaIpcOpenMemHandle(void **p, cudaIpcMemHandle_t h, unsigned int f)
{
    return simrt_cudaIpcOpenMemHandle(p, h, f);
}

EXPORT cudaError_t cudaIpcCloseMemHandle(void *p)
{
    return simrt_cudaIpcCloseMemHandle(p);
}
