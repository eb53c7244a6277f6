/* SPDX-License-Identifier: Apache-2.0 */
/*
 * callkind.c - see callkind.h.
 */
#include <stdbool.h>

#include <cuda.h>
#include <cupti_driver_cbid.h>
/* The driver calls' parameter structures, as CUPTI's own cupti.h includes
 * them (which -Ishim hides behind shim/watch/cupti.h): with the old 32-bit
 * types that cuda.h no longer declares, named only. */
typedef unsigned int CUdeviceptr_v1;
typedef struct CUDA_MEMCPY2D_v1_st { int dummy; } CUDA_MEMCPY2D_v1;
typedef struct CUDA_MEMCPY3D_v1_st { int dummy; } CUDA_MEMCPY3D_v1;
typedef struct CUDA_ARRAY_DESCRIPTOR_v1_st { int dummy; } CUDA_ARRAY_DESCRIPTOR_v1;
typedef struct CUDA_ARRAY3D_DESCRIPTOR_v1_st { int dummy; } CUDA_ARRAY3D_DESCRIPTOR_v1;
#include <generated_cuda_meta.h>

#include "callkind.h"

#define HSTREAM(name)                                                         \
    case CUPTI_DRIVER_TRACE_CBID_##name:                                      \
        if (!p)                                                               \
            return CALL_UNKNOWN;                                              \
        *s = ((const name##_params *)p)->hStream;                             \
        return CALL_STREAM;
#define NO_WORK(name) case CUPTI_DRIVER_TRACE_CBID_##name:

/* The calls that queue none on a non-default stream: they allocate, load,
 * create, synchronize or copy synchronously on a default stream, or, as
 * the fence's own calls, record, wait or ask. */
static bool no_work(unsigned cbid)
{
    switch (cbid) {
    NO_WORK(cuMemAlloc_v2) NO_WORK(cuMemFree_v2) NO_WORK(cuMemAllocPitch_v2)
    NO_WORK(cuMemAllocHost_v2) NO_WORK(cuMemFreeHost) NO_WORK(cuMemHostAlloc)
    NO_WORK(cuMemHostGetDevicePointer_v2) NO_WORK(cuMemHostRegister_v2)
    NO_WORK(cuMemHostUnregister) NO_WORK(cuMemAddressReserve)
    NO_WORK(cuMemAddressFree) NO_WORK(cuMemCreate) NO_WORK(cuMemRelease)
    NO_WORK(cuMemMap) NO_WORK(cuMemUnmap) NO_WORK(cuMemSetAccess)
    NO_WORK(cuMemGetAllocationGranularity) NO_WORK(cuModuleLoadData)
    NO_WORK(cuModuleLoadDataEx) NO_WORK(cuModuleLoadFatBinary)
    NO_WORK(cuModuleGetFunction) NO_WORK(cuModuleGetGlobal_v2)
    NO_WORK(cuModuleUnload) NO_WORK(cuLibraryLoadData) NO_WORK(cuLibraryUnload)
    NO_WORK(cuLibraryGetKernel) NO_WORK(cuLibraryGetModule)
    NO_WORK(cuLibraryGetGlobal) NO_WORK(cuFuncSetAttribute)
    NO_WORK(cuFuncSetCacheConfig) NO_WORK(cuFuncGetParamInfo)
    NO_WORK(cuKernelSetAttribute) NO_WORK(cuStreamCreate)
    NO_WORK(cuStreamCreateWithPriority) NO_WORK(cuStreamDestroy_v2)
    NO_WORK(cuStreamGetAttribute) NO_WORK(cuStreamSetAttribute)
    NO_WORK(cuDevicePrimaryCtxRetain) NO_WORK(cuDevicePrimaryCtxRelease_v2)
    NO_WORK(cuIpcGetMemHandle) NO_WORK(cuIpcOpenMemHandle_v2)
    NO_WORK(cuIpcCloseMemHandle) NO_WORK(cuPointerSetAttribute)
    NO_WORK(cuMemRetainAllocationHandle) NO_WORK(cuMemGetAllocationPropertiesFromHandle)
    NO_WORK(cuMemExportToShareableHandle) NO_WORK(cuMemImportFromShareableHandle)
    NO_WORK(cuMemGetAccess) NO_WORK(cuMemPoolCreate) NO_WORK(cuMemPoolDestroy)
    NO_WORK(cuMemPoolSetAttribute) NO_WORK(cuMemPoolGetAttribute) NO_WORK(cuInit)
    NO_WORK(cuModuleGetLoadingMode) NO_WORK(cuFuncGetName) NO_WORK(cuCtxGetApiVersion)
    NO_WORK(cuDeviceTotalMem_v2) NO_WORK(cuDeviceGetPCIBusId) NO_WORK(cuDeviceGetByPCIBusId)
    NO_WORK(cuDeviceCanAccessPeer) NO_WORK(cuDeviceGetP2PAttribute)
    NO_WORK(cuCtxEnablePeerAccess)
    NO_WORK(cuEventRecord) NO_WORK(cuEventRecord_ptsz) NO_WORK(cuEventRecordWithFlags)
    NO_WORK(cuEventRecordWithFlags_ptsz) NO_WORK(cuStreamWaitEvent)
    NO_WORK(cuStreamWaitEvent_ptsz) NO_WORK(cuEventQuery) NO_WORK(cuStreamQuery)
    NO_WORK(cuStreamQuery_ptsz) NO_WORK(cuStreamIsCapturing) NO_WORK(cuStreamIsCapturing_ptsz)
    NO_WORK(cuEventSynchronize) NO_WORK(cuStreamSynchronize) NO_WORK(cuStreamSynchronize_ptsz)
        return true;
    default:
        return false;
    }
}

/* The calls that queue work on a stream they name; those that queue none
 * (no_work); everything else unknown. */
enum call_kind shim_call_kind(unsigned cbid, const void *p, void **s)
{
    switch (cbid) {
    HSTREAM(cuLaunchKernel) HSTREAM(cuLaunchKernel_ptsz)
    HSTREAM(cuLaunchCooperativeKernel) HSTREAM(cuLaunchCooperativeKernel_ptsz)
    HSTREAM(cuLaunchHostFunc) HSTREAM(cuLaunchHostFunc_ptsz)
    HSTREAM(cuGraphLaunch) HSTREAM(cuGraphLaunch_ptsz)
    HSTREAM(cuMemcpyAsync) HSTREAM(cuMemcpyAsync_ptsz)
    HSTREAM(cuMemcpyPeerAsync) HSTREAM(cuMemcpyPeerAsync_ptsz)
    HSTREAM(cuMemcpyHtoDAsync_v2) HSTREAM(cuMemcpyHtoDAsync_v2_ptsz)
    HSTREAM(cuMemcpyDtoHAsync_v2) HSTREAM(cuMemcpyDtoHAsync_v2_ptsz)
    HSTREAM(cuMemcpyDtoDAsync_v2) HSTREAM(cuMemcpyDtoDAsync_v2_ptsz)
    HSTREAM(cuMemcpy2DAsync_v2) HSTREAM(cuMemcpy2DAsync_v2_ptsz)
    HSTREAM(cuMemcpy3DAsync_v2) HSTREAM(cuMemcpy3DAsync_v2_ptsz)
    HSTREAM(cuMemsetD8Async) HSTREAM(cuMemsetD8Async_ptsz)
    HSTREAM(cuMemsetD16Async) HSTREAM(cuMemsetD16Async_ptsz)
    HSTREAM(cuMemsetD32Async) HSTREAM(cuMemsetD32Async_ptsz)
    HSTREAM(cuMemsetD2D8Async) HSTREAM(cuMemsetD2D8Async_ptsz)
    HSTREAM(cuMemsetD2D16Async) HSTREAM(cuMemsetD2D16Async_ptsz)
    HSTREAM(cuMemsetD2D32Async) HSTREAM(cuMemsetD2D32Async_ptsz)
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx:
    case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz: {
        const CUlaunchConfig *c = p ? ((const cuLaunchKernelEx_params *)p)->config : NULL;
        if (!c)
            return CALL_UNKNOWN;
        *s = c->hStream;
        return CALL_STREAM;
    }
    default:
        return no_work(cbid) ? CALL_NO_WORK : CALL_UNKNOWN;
    }
}
#undef HSTREAM
#undef NO_WORK
