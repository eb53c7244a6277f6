/* SPDX-License-Identifier: Apache-2.0 */
/*
 * real.h - the CUDA runtime functions cupool calls: one list, expanded into
 * the pointer table, the resolver and (for the interposed ones) the export
 * allowlist. The shim never calls a CUDA function by name: always through
 * shim_real, so its own calls can never loop back into itself.
 */
#ifndef CUPOOL_SHIM_REAL_H
#define CUPOOL_SHIM_REAL_H

#include <cuda_runtime_api.h>

/* Interposed: libcupool.so defines and exports exactly these. */
#define SHIM_INTERPOSED(X)                                                    \
    X(cudaError_t, cudaMalloc, (void **ptr, size_t size))                     \
    X(cudaError_t, cudaFree, (void *ptr))                                     \
    X(cudaError_t, cudaFreeAsync, (void *ptr, cudaStream_t stream))           \
    X(cudaError_t, cudaMemGetInfo, (size_t *free, size_t *total))             \
    X(cudaError_t, cudaDeviceReset, (void))                                   \
    X(cudaError_t, cudaStreamCreate, (cudaStream_t *stream))                  \
    X(cudaError_t, cudaStreamCreateWithFlags,                                 \
      (cudaStream_t *stream, unsigned int flags))                             \
    X(cudaError_t, cudaStreamCreateWithPriority,                              \
      (cudaStream_t *stream, unsigned int flags, int priority))               \
    X(cudaError_t, cudaStreamDestroy, (cudaStream_t stream))                  \
    X(cudaError_t, cudaIpcGetMemHandle, (cudaIpcMemHandle_t *h, void *ptr))   \
    X(cudaError_t, cudaIpcOpenMemHandle,                                      \
      (void **ptr, cudaIpcMemHandle_t h, unsigned int flags))                 \
    X(cudaError_t, cudaIpcCloseMemHandle, (void *ptr))                        \
    X(cudaError_t, cudaMallocPitch,                                           \
      (void **ptr, size_t *pitch, size_t width, size_t height))               \
    X(cudaError_t, cudaMalloc3D,                                              \
      (struct cudaPitchedPtr *ptr, struct cudaExtent extent))                 \
    X(cudaError_t, cudaMallocManaged,                                         \
      (void **ptr, size_t size, unsigned int flags))                          \
    X(cudaError_t, cudaMallocAsync,                                           \
      (void **ptr, size_t size, cudaStream_t stream))

/* Interposed when the runtime has them (CUDA 12.3 and later have all):
 * the shim counts graph captures begun and ended through them, so that the
 * fence checks streams for a capture only while one may be going on. A
 * missing one is no error; the per-thread-stream forms are what programs
 * built with --default-stream per-thread call. The driver entry points
 * cudaGetDriverEntryPoint* hand out are cupool's for the calls it serves
 * (driver.h). */
cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t stream,
                                        enum cudaStreamCaptureMode mode);
cudaError_t cudaStreamBeginCaptureToGraph_ptsz(cudaStream_t stream, cudaGraph_t graph,
                                               const cudaGraphNode_t *dependencies,
                                               const cudaGraphEdgeData *dependencyData,
                                               size_t numDependencies,
                                               enum cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t stream, cudaGraph_t *graph);
cudaError_t cudaGetDriverEntryPoint_ptsz(const char *symbol, void **fn,
                                         unsigned long long flags,
                                         enum cudaDriverEntryPointQueryResult *status);
cudaError_t cudaGetDriverEntryPointByVersion_ptsz(const char *symbol, void **fn,
                                                  unsigned int version,
                                                  unsigned long long flags,
                                                  enum cudaDriverEntryPointQueryResult *status);

#define SHIM_OPTIONAL(X)                                                      \
    X(cudaError_t, cudaStreamBeginCapture,                                    \
      (cudaStream_t stream, enum cudaStreamCaptureMode mode))                 \
    X(cudaError_t, cudaStreamBeginCapture_ptsz,                               \
      (cudaStream_t stream, enum cudaStreamCaptureMode mode))                 \
    X(cudaError_t, cudaStreamBeginCaptureToGraph,                             \
      (cudaStream_t stream, cudaGraph_t graph, const cudaGraphNode_t *deps,   \
       const cudaGraphEdgeData *data, size_t ndeps,                           \
       enum cudaStreamCaptureMode mode))                                      \
    X(cudaError_t, cudaStreamBeginCaptureToGraph_ptsz,                        \
      (cudaStream_t stream, cudaGraph_t graph, const cudaGraphNode_t *deps,   \
       const cudaGraphEdgeData *data, size_t ndeps,                           \
       enum cudaStreamCaptureMode mode))                                      \
    X(cudaError_t, cudaStreamEndCapture, (cudaStream_t stream, cudaGraph_t *graph)) \
    X(cudaError_t, cudaStreamEndCapture_ptsz,                                 \
      (cudaStream_t stream, cudaGraph_t *graph))                              \
    X(cudaError_t, cudaGetDriverEntryPoint,                                   \
      (const char *symbol, void **fn, unsigned long long flags,               \
       enum cudaDriverEntryPointQueryResult *status))                         \
    X(cudaError_t, cudaGetDriverEntryPoint_ptsz,                              \
      (const char *symbol, void **fn, unsigned long long flags,               \
       enum cudaDriverEntryPointQueryResult *status))                         \
    X(cudaError_t, cudaGetDriverEntryPointByVersion,                          \
      (const char *symbol, void **fn, unsigned int version,                   \
       unsigned long long flags, enum cudaDriverEntryPointQueryResult *status)) \
    X(cudaError_t, cudaGetDriverEntryPointByVersion_ptsz,                     \
      (const char *symbol, void **fn, unsigned int version,                   \
       unsigned long long flags, enum cudaDriverEntryPointQueryResult *status))

/* Called but not interposed. */
#define SHIM_USED(X)                                                          \
    X(cudaError_t, cudaGetDevice, (int *device))                              \
    X(cudaError_t, cudaGetDeviceCount, (int *count))                          \
    X(cudaError_t, cudaSetDevice, (int device))                               \
    X(cudaError_t, cudaGetLastError, (void))                                  \
    X(cudaError_t, cudaDeviceSynchronize, (void))                             \
    X(cudaError_t, cudaEventCreateWithFlags,                                  \
      (cudaEvent_t *event, unsigned int flags))                               \
    X(cudaError_t, cudaEventDestroy, (cudaEvent_t event))                     \
    X(cudaError_t, cudaEventRecord, (cudaEvent_t event, cudaStream_t stream)) \
    X(cudaError_t, cudaEventQuery, (cudaEvent_t event))                       \
    X(cudaError_t, cudaStreamWaitEvent,                                       \
      (cudaStream_t stream, cudaEvent_t event, unsigned int flags))           \
    X(cudaError_t, cudaStreamIsCapturing,                                     \
      (cudaStream_t stream, enum cudaStreamCaptureStatus *status))            \
    X(cudaError_t, cudaThreadExchangeStreamCaptureMode,                       \
      (enum cudaStreamCaptureMode *mode))                                     \
    X(cudaError_t, cudaDeviceGetPCIBusId, (char *id, int len, int device))   \
    X(const char *, cudaGetErrorString, (cudaError_t error))

typedef struct shim_real_table {
#define SHIM_X_PTR(ret, name, params) ret (*name) params;
    SHIM_INTERPOSED(SHIM_X_PTR)
    SHIM_OPTIONAL(SHIM_X_PTR)
    SHIM_USED(SHIM_X_PTR)
#undef SHIM_X_PTR
} shim_real_table;

extern shim_real_table shim_real;

/* Resolves the table (thread-safe). Returns 0 once every function was
 * found; else -ENOENT, and the next call tries again (a runtime loaded
 * late is found then). Missing entries are NULL and callers must check. */
int shim_real_resolve(void);

#endif
