/* SPDX-License-Identifier: Apache-2.0 */
/*
 * driver.h - the CUDA driver (libcuda.so.1): the real functions cupool
 * calls, and the entry points a program is handed.
 *
 * Every CUDA runtime (the program's libcudart, a static one linked into the
 * binary, CuPy's, XLA's) and every driver-API program reaches the driver
 * through dlsym on libcuda, cuGetProcAddress or cudaGetDriverEntryPoint.
 * cupool answers those with its own function for the calls it serves,
 * counts or watches (SHIM_DRV_SERVED) and with the driver's for every other
 * name. It substitutes only where the driver answered with exactly the
 * exported function cupool wraps (same name, same ABI), so a program gets
 * the version and the default-stream semantics it asked for, never another.
 */
#ifndef CUPOOL_SHIM_DRIVER_H
#define CUPOOL_SHIM_DRIVER_H

#include <stdbool.h>

#include <cuda.h>

/* cuda.h maps these names to their newest version; cupool handles each
 * exported version by its own name. */
#undef cuGetProcAddress
#undef cuStreamBeginCapture

/* Called, never handed out in place of the driver's. */
#define SHIM_DRV_USED(X)                                                      \
    X(cuCtxGetCurrent, (CUcontext *))                                         \
    X(cuCtxSetCurrent, (CUcontext))                                           \
    X(cuCtxGetDevice, (CUdevice *))                                           \
    X(cuCtxSynchronize, (void))                                               \
    X(cuCtxPushCurrent_v2, (CUcontext))                                       \
    X(cuCtxPopCurrent_v2, (CUcontext *))                                      \
    X(cuDeviceGetCount, (int *))                                              \
    X(cuDeviceGet, (CUdevice *, int))                                         \
    X(cuDeviceGetAttribute, (int *, CUdevice_attribute, CUdevice))            \
    X(cuDeviceGetPCIBusId, (char *, int, CUdevice))                           \
    X(cuDevicePrimaryCtxRetain, (CUcontext *, CUdevice))                      \
    X(cuDevicePrimaryCtxRelease_v2, (CUdevice))                               \
    X(cuDevicePrimaryCtxGetState, (CUdevice, unsigned int *, int *))          \
    X(cuEventCreate, (CUevent *, unsigned int))                               \
    X(cuEventDestroy_v2, (CUevent))                                           \
    X(cuEventRecord, (CUevent, CUstream))                                     \
    X(cuEventQuery, (CUevent))                                                \
    X(cuStreamWaitEvent, (CUstream, CUevent, unsigned int))                   \
    X(cuStreamIsCapturing, (CUstream, CUstreamCaptureStatus *))               \
    X(cuThreadExchangeStreamCaptureMode, (CUstreamCaptureMode *))             \
    X(cuGetErrorString, (CUresult, const char **))                            \
    X(cuMemGetAllocationGranularity,                                          \
      (size_t *, const CUmemAllocationProp *, CUmemAllocationGranularity_flags)) \
    X(cuMemAddressReserve,                                                    \
      (CUdeviceptr *, size_t, size_t, CUdeviceptr, unsigned long long))       \
    X(cuMemAddressFree, (CUdeviceptr, size_t))                                \
    X(cuMemMap, (CUdeviceptr, size_t, size_t, CUmemGenericAllocationHandle,   \
                 unsigned long long))                                         \
    X(cuMemUnmap, (CUdeviceptr, size_t))                                      \
    X(cuMemSetAccess, (CUdeviceptr, size_t, const CUmemAccessDesc *, size_t)) \
    X(cuMemExportToShareableHandle, (void *, CUmemGenericAllocationHandle,    \
                                     CUmemAllocationHandleType, unsigned long long)) \
    X(cuMemImportFromShareableHandle, (CUmemGenericAllocationHandle *, void *, \
                                       CUmemAllocationHandleType))             \
    X(cuStreamSynchronize, (CUstream))                                        \
    X(cuMemHostRegister_v2, (void *, size_t, unsigned int))                   \
    X(cuMemHostUnregister, (void *))                                          \
    X(cuMemcpyDtoHAsync_v2, (void *, CUdeviceptr, size_t, CUstream))          \
    X(cuMemcpyHtoDAsync_v2, (CUdeviceptr, const void *, size_t, CUstream))

/* Handed out in place of the driver's, by the exported name of the
 * function wrapped; also called (the real one) by cupool. */
#define SHIM_DRV_SERVED(X)                                                    \
    X(cuGetProcAddress, (const char *, void **, int, cuuint64_t))             \
    X(cuGetProcAddress_v2, (const char *, void **, int, cuuint64_t,           \
                            CUdriverProcAddressQueryResult *))                \
    X(cuMemAlloc_v2, (CUdeviceptr *, size_t))                                 \
    X(cuMemFree_v2, (CUdeviceptr))                                            \
    X(cuMemGetInfo_v2, (size_t *, size_t *))                                  \
    X(cuMemAllocPitch_v2, (CUdeviceptr *, size_t *, size_t, size_t, unsigned int)) \
    X(cuMemAllocManaged, (CUdeviceptr *, size_t, unsigned int))               \
    X(cuMemAllocAsync, (CUdeviceptr *, size_t, CUstream))                     \
    X(cuMemAllocAsync_ptsz, (CUdeviceptr *, size_t, CUstream))                \
    X(cuMemFreeAsync, (CUdeviceptr, CUstream))                                \
    X(cuMemFreeAsync_ptsz, (CUdeviceptr, CUstream))                           \
    X(cuMemCreate, (CUmemGenericAllocationHandle *, size_t,                   \
                    const CUmemAllocationProp *, unsigned long long))         \
    X(cuMemRelease, (CUmemGenericAllocationHandle))                           \
    X(cuStreamCreate, (CUstream *, unsigned int))                             \
    X(cuStreamCreateWithPriority, (CUstream *, unsigned int, int))            \
    X(cuStreamDestroy_v2, (CUstream))                                         \
    X(cuStreamBeginCapture, (CUstream))                                       \
    X(cuStreamBeginCapture_ptsz, (CUstream))                                  \
    X(cuStreamBeginCapture_v2, (CUstream, CUstreamCaptureMode))               \
    X(cuStreamBeginCapture_v2_ptsz, (CUstream, CUstreamCaptureMode))          \
    X(cuStreamBeginCaptureToGraph, (CUstream, CUgraph, const CUgraphNode *,   \
                                    const CUgraphEdgeData *, size_t,          \
                                    CUstreamCaptureMode))                     \
    X(cuStreamBeginCaptureToGraph_ptsz, (CUstream, CUgraph, const CUgraphNode *, \
                                         const CUgraphEdgeData *, size_t,     \
                                         CUstreamCaptureMode))                \
    X(cuStreamEndCapture, (CUstream, CUgraph *))                              \
    X(cuStreamEndCapture_ptsz, (CUstream, CUgraph *))                         \
    X(cuCtxDestroy_v2, (CUcontext))                                           \
    X(cuCtxEnablePeerAccess, (CUcontext, unsigned int))                       \
    X(cuDevicePrimaryCtxReset_v2, (CUdevice))                                 \
    X(cuIpcGetMemHandle, (CUipcMemHandle *, CUdeviceptr))                     \
    X(cuIpcOpenMemHandle_v2, (CUdeviceptr *, CUipcMemHandle, unsigned int))   \
    X(cuIpcCloseMemHandle, (CUdeviceptr))

typedef struct shim_drv_table {
#define SHIM_X_DRV_PTR(name, params) CUresult(*name) params;
    SHIM_DRV_USED(SHIM_X_DRV_PTR)
    SHIM_DRV_SERVED(SHIM_X_DRV_PTR)
#undef SHIM_X_DRV_PTR
} shim_drv_table;

/* cupool's functions, exported under the names of the ones they wrap
 * (interpose_driver.c). */
#define SHIM_X_DRV_HOOK(name, params)                                         \
    CUresult shim_hook_##name params __asm__(#name)                           \
        __attribute__((visibility("default")));
SHIM_DRV_SERVED(SHIM_X_DRV_HOOK)
#undef SHIM_X_DRV_HOOK

/* The real driver's functions; an entry is NULL until shim_drv_resolve
 * found it. */
extern shim_drv_table shim_drv;

/* Finds the driver the process has loaded (never loads one) and resolves
 * shim_drv. Returns 0 once libcuda.so.1 is loaded and resolved, else
 * -ENOENT; tries again on the next call until then, so a program that
 * loads the driver late is served from then on. Thread-safe. */
int shim_drv_resolve(void);

/* The function to hand a program that asked for base (a driver name
 * without its _vN/_ptsz suffix, as cuGetProcAddress takes it) and that the
 * driver answered with fn: cupool's if fn is the real function cupool
 * wraps, else fn itself. */
void *shim_drv_answer(const char *base, void *fn);

#endif
