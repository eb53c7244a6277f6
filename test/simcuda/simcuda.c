/*
 * simcuda.c - a simulated CUDA runtime for CPU tests; see simcuda.h.
 * Only what cupool calls (and what tests call around it) is implemented.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <cuda.h>
#include <cupti_callbacks.h>
#include <cupti_driver_cbid.h>
#include <cupti_result.h>

#include "simcuda.h"

#define EXPORT __attribute__((visibility("default")))
enum { MAX_DEV = 8, MAX_ALLOCS = 1 << 16, MAX_STREAMS = 256 };

typedef struct alloc { void *p; size_t size; int dev; } alloc;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static alloc allocs[MAX_ALLOCS];
static int nallocs;
static simcuda_stats st[MAX_DEV];
static int ndev = -1;
static cudaStream_t capturing_streams[MAX_STREAMS];
static _Thread_local int current;
static bool work_pending[MAX_DEV]; /* recorded since the last sync */
static _Thread_local cudaError_t last_error;

static void setup(void)
{
    if (ndev >= 0)
        return;
    const char *d = getenv("SIMCUDA_DEVICES"), *c = getenv("SIMCUDA_CAPACITY");
    ndev = d ? atoi(d) : 2;
    if (ndev < 1 || ndev > MAX_DEV)
        ndev = 2;
    unsigned long long cap = c ? strtoull(c, NULL, 0) : 16ull << 30;
    for (int i = 0; i < ndev; i++)
        st[i].capacity = cap;
}

static cudaError_t fail(cudaError_t e)
{
    last_error = e;
    return e;
}

/* ---- CUPTI, driver domain only -------------------------------------------
 * Every runtime call below that stands for a driver call reports it (entry,
 * then return) to the one subscriber, unless that call was turned off. */
static CUpti_CallbackFunc cupti_cb;
static atomic_bool cupti_off[CUPTI_DRIVER_TRACE_CBID_SIZE];
static atomic_bool cupti_domain_on;

static void drv_call(CUpti_CallbackId id)
{
    if (!atomic_load(&cupti_domain_on) || id >= CUPTI_DRIVER_TRACE_CBID_SIZE ||
        atomic_load(&cupti_off[id]))
        return;
    CUpti_CallbackData d = {.callbackSite = CUPTI_API_ENTER};
    cupti_cb(NULL, CUPTI_CB_DOMAIN_DRIVER_API, id, &d);
    d.callbackSite = CUPTI_API_EXIT;
    cupti_cb(NULL, CUPTI_CB_DOMAIN_DRIVER_API, id, &d);
}

/* SIMCUDA_CUPTI_TAKEN=1: another tool holds CUPTI already. */
EXPORT CUptiResult cuptiSubscribe(CUpti_SubscriberHandle *sub, CUpti_CallbackFunc cb,
                                  void *ud)
{
    (void)ud;
    const char *t = getenv("SIMCUDA_CUPTI_TAKEN");
    if (cupti_cb || (t && *t == '1'))
        return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
    cupti_cb = cb;
    *sub = (CUpti_SubscriberHandle)&cupti_cb;
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiUnsubscribe(CUpti_SubscriberHandle sub)
{
    (void)sub;
    atomic_store(&cupti_domain_on, false);
    cupti_cb = NULL;
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiEnableDomain(uint32_t on, CUpti_SubscriberHandle sub,
                                     CUpti_CallbackDomain domain)
{
    if (sub != (CUpti_SubscriberHandle)&cupti_cb || domain != CUPTI_CB_DOMAIN_DRIVER_API)
        return CUPTI_ERROR_INVALID_PARAMETER;
    for (int i = 0; i < CUPTI_DRIVER_TRACE_CBID_SIZE; i++)
        atomic_store(&cupti_off[i], !on);
    atomic_store(&cupti_domain_on, on != 0);
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiEnableCallback(uint32_t on, CUpti_SubscriberHandle sub,
                                       CUpti_CallbackDomain domain, CUpti_CallbackId id)
{
    if (sub != (CUpti_SubscriberHandle)&cupti_cb || domain != CUPTI_CB_DOMAIN_DRIVER_API ||
        id >= CUPTI_DRIVER_TRACE_CBID_SIZE)
        return CUPTI_ERROR_INVALID_PARAMETER;
    atomic_store(&cupti_off[id], !on);
    return CUPTI_SUCCESS;
}

EXPORT CUptiResult cuptiGetResultString(CUptiResult r, const char **s)
{
    *s = r == CUPTI_SUCCESS ? "CUPTI_SUCCESS"
         : r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
             ? "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED" : "CUPTI_ERROR";
    return CUPTI_SUCCESS;
}

void simcuda_get_stats(int dev, simcuda_stats *out) EXPORT;
void simcuda_get_stats(int dev, simcuda_stats *out)
{
    pthread_mutex_lock(&lock);
    setup();
    *out = st[dev];
    pthread_mutex_unlock(&lock);
}

void simcuda_set_capturing(cudaStream_t s, int on) EXPORT;
void simcuda_set_capturing(cudaStream_t s, int on)
{
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_STREAMS; i++) {
        if (on && !capturing_streams[i]) {
            capturing_streams[i] = s;
            break;
        }
        if (!on && capturing_streams[i] == s)
            capturing_streams[i] = NULL;
    }
    pthread_mutex_unlock(&lock);
}

static cudaError_t sim_alloc(void **ptr, size_t size, int dev)
{
    if (!ptr)
        return fail(cudaErrorInvalidValue);
    if (size == 0) {
        *ptr = NULL;
        return cudaSuccess;
    }
    pthread_mutex_lock(&lock);
    setup();
    cudaError_t e = cudaSuccess;
    void *p = MAP_FAILED;
    if (size > st[dev].capacity - st[dev].used || nallocs == MAX_ALLOCS)
        e = cudaErrorMemoryAllocation;
    else
        p = mmap(NULL, size, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (e == cudaSuccess && p == MAP_FAILED)
        e = cudaErrorMemoryAllocation;
    if (e == cudaSuccess) {
        allocs[nallocs++] = (alloc){p, size, dev};
        st[dev].used += size;
        st[dev].mallocs++;
        *ptr = p;
    }
    pthread_mutex_unlock(&lock);
    return e == cudaSuccess ? e : fail(e);
}

EXPORT cudaError_t cudaMalloc(void **ptr, size_t size)
{
    drv_call(CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2);
    return sim_alloc(ptr, size, current);
}

EXPORT cudaError_t cudaFree(void *ptr)
{
    drv_call(CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2);
    if (!ptr)
        return cudaSuccess;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < nallocs; i++) {
        if (allocs[i].p != ptr)
            continue;
        munmap(ptr, allocs[i].size);
        st[allocs[i].dev].used -= allocs[i].size;
        st[allocs[i].dev].frees++;
        st[allocs[i].dev].syncs++; /* the real cudaFree synchronizes */
        allocs[i] = allocs[--nallocs];
        pthread_mutex_unlock(&lock);
        return cudaSuccess;
    }
    st[current].bad_frees++;
    pthread_mutex_unlock(&lock);
    return fail(cudaErrorInvalidValue);
}

EXPORT cudaError_t cudaFreeAsync(void *ptr, cudaStream_t s)
{
    (void)s;
    return cudaFree(ptr);
}

EXPORT cudaError_t cudaMallocAsync(void **ptr, size_t size, cudaStream_t s)
{
    (void)s;
    return sim_alloc(ptr, size, current);
}

EXPORT cudaError_t cudaMallocManaged(void **ptr, size_t size, unsigned int f)
{
    (void)f;
    return sim_alloc(ptr, size, current);
}

EXPORT cudaError_t cudaMallocPitch(void **ptr, size_t *pitch, size_t w, size_t h)
{
    *pitch = (w + 511) / 512 * 512;
    return sim_alloc(ptr, *pitch * h, current);
}

EXPORT cudaError_t cudaMalloc3D(struct cudaPitchedPtr *pp, struct cudaExtent e)
{
    size_t pitch = (e.width + 511) / 512 * 512;
    pp->pitch = pitch;
    pp->xsize = e.width;
    pp->ysize = e.height;
    return sim_alloc(&pp->ptr, pitch * e.height * (e.depth ? e.depth : 1), current);
}

EXPORT cudaError_t cudaMemGetInfo(size_t *free_b, size_t *total)
{
    drv_call(CUPTI_DRIVER_TRACE_CBID_cuMemGetInfo_v2);
    pthread_mutex_lock(&lock);
    setup();
    *free_b = st[current].capacity - st[current].used;
    *total = st[current].capacity;
    pthread_mutex_unlock(&lock);
    return cudaSuccess;
}

EXPORT cudaError_t cudaDeviceReset(void)
{
    pthread_mutex_lock(&lock);
    for (int i = 0; i < nallocs;) {
        if (allocs[i].dev == current) {
            munmap(allocs[i].p, allocs[i].size);
            st[current].used -= allocs[i].size;
            allocs[i] = allocs[--nallocs];
        } else {
            i++;
        }
    }
    pthread_mutex_unlock(&lock);
    return cudaSuccess;
}

EXPORT cudaError_t cudaGetDeviceCount(int *n)
{
    pthread_mutex_lock(&lock);
    setup();
    *n = ndev;
    pthread_mutex_unlock(&lock);
    return cudaSuccess;
}

EXPORT cudaError_t cudaGetDevice(int *d)
{
    drv_call(CUPTI_DRIVER_TRACE_CBID_cuCtxGetDevice_v2);
    *d = current;
    return cudaSuccess;
}

EXPORT cudaError_t cudaSetDevice(int d)
{
    int n;
    cudaGetDeviceCount(&n);
    if (d < 0 || d >= n)
        return fail(cudaErrorInvalidDevice);
    current = d;
    return cudaSuccess;
}

EXPORT cudaError_t cudaGetLastError(void)
{
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}

EXPORT cudaError_t cudaDeviceSynchronize(void)
{
    drv_call(CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize);
    pthread_mutex_lock(&lock);
    st[current].syncs++;
    work_pending[current] = false;
    pthread_mutex_unlock(&lock);
    return cudaSuccess;
}

EXPORT cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int f)
{
    drv_call(CUPTI_DRIVER_TRACE_CBID_cuEventCreate);
    (void)f;
    *e = (cudaEvent_t)malloc(16);
    return cudaSuccess;
}

EXPORT cudaError_t cudaEventDestroy(cudaEvent_t e)
{
    free(e);
    return cudaSuccess;
}

EXPORT cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
    drv_call(CUPTI_DRIVER_TRACE_CBID_cuEventRecord);
    (void)e;
    pthread_mutex_lock(&lock);
    st[current].event_records++;
    st[current].legacy_records += s == cudaStreamLegacy;
    work_pending[current] = true;
    pthread_mutex_unlock(&lock);
    return cudaSuccess;
}

EXPORT cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int f)
{
    drv_call(CUPTI_DRIVER_TRACE_CBID_cuStreamWaitEvent);
    (void)s, (void)e, (void)f;
    pthread_mutex_lock(&lock);
    st[current].stream_waits++;
    work_pending[current] = true;
    pthread_mutex_unlock(&lock);
    return cudaSuccess;
}

/* Work: sets bytes of (simulated) device memory, at once. */
EXPORT cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s)
{
    (void)s;
    memset(p, v, n);
    pthread_mutex_lock(&lock);
    work_pending[current] = true;
    pthread_mutex_unlock(&lock);
    drv_call(CUPTI_DRIVER_TRACE_CBID_cuMemsetD8Async);
    return cudaSuccess;
}

EXPORT cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned int f, int p)
{
    drv_call(CUPTI_DRIVER_TRACE_CBID_cuStreamCreateWithPriority);
    (void)f, (void)p;
    *s = (cudaStream_t)malloc(16);
    return cudaSuccess;
}

EXPORT cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int f)
{
    return cudaStreamCreateWithPriority(s, f, 0);
}

EXPORT cudaError_t cudaStreamCreate(cudaStream_t *s)
{
    return cudaStreamCreateWithPriority(s, 0, 0);
}

EXPORT cudaError_t cudaStreamDestroy(cudaStream_t s)
{
    free(s);
    return cudaSuccess;
}

static bool is_capturing(cudaStream_t s)
{
    bool on = false;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_STREAMS; i++)
        on |= capturing_streams[i] && capturing_streams[i] == s;
    pthread_mutex_unlock(&lock);
    return on;
}

static cudaError_t begin_capture(cudaStream_t s)
{
    if (is_capturing(s))
        return fail(cudaErrorIllegalState);
    simcuda_set_capturing(s, 1);
    return cudaSuccess;
}

static cudaError_t end_capture(cudaStream_t s, cudaGraph_t *g)
{
    if (!is_capturing(s))
        return fail(cudaErrorIllegalState);
    simcuda_set_capturing(s, 0);
    *g = (cudaGraph_t)0x1000; /* never dereferenced */
    return cudaSuccess;
}

EXPORT cudaError_t cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode m)
{
    (void)m;
    return begin_capture(s);
}

EXPORT cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t s, enum cudaStreamCaptureMode m)
{
    (void)m;
    return begin_capture(s ? s : cudaStreamPerThread);
}

EXPORT cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g)
{
    return end_capture(s, g);
}

EXPORT cudaError_t cudaStreamEndCapture_ptsz(cudaStream_t s, cudaGraph_t *g)
{
    return end_capture(s ? s : cudaStreamPerThread, g);
}

EXPORT cudaError_t cudaStreamIsCapturing(cudaStream_t s, enum cudaStreamCaptureStatus *status)
{
    drv_call(CUPTI_DRIVER_TRACE_CBID_cuStreamIsCapturing);
    *status = cudaStreamCaptureStatusNone;
    pthread_mutex_lock(&lock);
    st[current].capture_queries++;
    for (int i = 0; i < MAX_STREAMS; i++)
        if (capturing_streams[i] && capturing_streams[i] == s)
            *status = cudaStreamCaptureStatusActive;
    pthread_mutex_unlock(&lock);
    return cudaSuccess;
}

EXPORT cudaError_t cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *m)
{
    static _Thread_local enum cudaStreamCaptureMode mode;
    enum cudaStreamCaptureMode old = mode;
    mode = *m;
    *m = old;
    return cudaSuccess;
}

EXPORT cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t *h, void *ptr)
{
    pthread_mutex_lock(&lock);
    for (int i = 0; i < nallocs; i++) {
        if (allocs[i].p == ptr) {
            pthread_mutex_unlock(&lock);
            memset(h, 0, sizeof(*h));
            memcpy(h->reserved, &ptr, sizeof(ptr));
            return cudaSuccess;
        }
    }
    pthread_mutex_unlock(&lock);
    return fail(cudaErrorInvalidValue);
}

EXPORT cudaError_t cudaDeviceGetPCIBusId(char *id, int len, int device)
{
    snprintf(id, (size_t)len, "0000:%02x:00.0", device + 1);
    return cudaSuccess;
}

EXPORT const char *cudaGetErrorString(cudaError_t e)
{
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidValue: return "invalid argument";
    default: return "simulated error";
    }
}

/* ---- the driver's virtual memory calls ------------------------------------
 * A reservation is an inaccessible mapping of host address space; a
 * physical allocation (handle) is counted against the device's capacity;
 * mapping one makes its range readable and writable (the real driver wants
 * cuMemSetAccess for that; the sim checks that it comes, see below). */

enum { GRANULE = 2 << 20, MAX_HANDLES = 1 << 16 };

typedef struct handle { size_t size; int dev, maps; bool released, used; } handle;
static handle handles[MAX_HANDLES];

static CUresult drv_device_get(CUdevice *d, int ordinal)
{
    setup();
    if (ordinal < 0 || ordinal >= ndev)
        return CUDA_ERROR_INVALID_DEVICE;
    *d = ordinal;
    return CUDA_SUCCESS;
}

static CUresult drv_device_attr(int *v, CUdevice_attribute a, CUdevice d)
{
    (void)d;
    *v = a == CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED &&
         !getenv("SIMCUDA_NO_VMM");
    return CUDA_SUCCESS;
}

static CUresult drv_granularity(size_t *g, const CUmemAllocationProp *p,
                                CUmemAllocationGranularity_flags f)
{
    (void)p, (void)f;
    *g = GRANULE;
    return CUDA_SUCCESS;
}

static CUresult drv_reserve(CUdeviceptr *ptr, size_t size, size_t align,
                            CUdeviceptr addr, unsigned long long flags)
{
    (void)addr, (void)flags;
    if (!size || size % GRANULE || (align && align % GRANULE))
        return CUDA_ERROR_INVALID_VALUE;
    /* Over-reserve to align the base. */
    size_t a = align ? align : GRANULE;
    char *p = mmap(NULL, size + a, PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
        return CUDA_ERROR_OUT_OF_MEMORY;
    uintptr_t b = ((uintptr_t)p + a - 1) & ~(uintptr_t)(a - 1);
    if (b > (uintptr_t)p)
        munmap(p, b - (uintptr_t)p);
    munmap((char *)b + size, (uintptr_t)p + a - b);
    *ptr = (CUdeviceptr)b;
    return CUDA_SUCCESS;
}

static CUresult drv_address_free(CUdeviceptr ptr, size_t size)
{
    return munmap((void *)ptr, size) ? CUDA_ERROR_INVALID_VALUE : CUDA_SUCCESS;
}

static void handle_drop(int i)
{
    handle *h = &handles[i];
    if (h->released && h->maps == 0) {
        st[h->dev].used -= h->size;
        h->used = false;
    }
}

static CUresult drv_create(CUmemGenericAllocationHandle *out, size_t size,
                           const CUmemAllocationProp *p, unsigned long long f)
{
    (void)f;
    if (!size || size % GRANULE || p->location.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    setup();
    int dev = p->location.id, i = 1;
    while (i < MAX_HANDLES && handles[i].used)
        i++;
    CUresult r = CUDA_SUCCESS;
    if (dev < 0 || dev >= ndev)
        r = CUDA_ERROR_INVALID_DEVICE;
    else if (i == MAX_HANDLES || size > st[dev].capacity - st[dev].used)
        r = CUDA_ERROR_OUT_OF_MEMORY;
    if (r == CUDA_SUCCESS) {
        handles[i] = (handle){.size = size, .dev = dev, .used = true};
        st[dev].used += size;
        *out = (CUmemGenericAllocationHandle)i;
    }
    pthread_mutex_unlock(&lock);
    return r;
}

static CUresult drv_release(CUmemGenericAllocationHandle hd)
{
    pthread_mutex_lock(&lock);
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    if (hd > 0 && hd < MAX_HANDLES && handles[hd].used && !handles[hd].released) {
        handles[hd].released = true;
        handle_drop((int)hd);
        r = CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&lock);
    return r;
}

/* Mapped ranges: address -> handle, to check unmaps. */
typedef struct mapping { uintptr_t addr; size_t size; int h; } mapping;
static mapping maps[MAX_HANDLES];
static int nmaps;

static CUresult drv_map(CUdeviceptr ptr, size_t size, size_t off,
                        CUmemGenericAllocationHandle hd, unsigned long long f)
{
    (void)f;
    pthread_mutex_lock(&lock);
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    if (hd > 0 && hd < MAX_HANDLES && handles[hd].used && !handles[hd].released &&
        off == 0 && size == handles[hd].size && nmaps < MAX_HANDLES &&
        mmap((void *)ptr, size, PROT_NONE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0) != MAP_FAILED) {
        maps[nmaps++] = (mapping){ptr, size, (int)hd};
        handles[hd].maps++;
        st[handles[hd].dev].vmm_maps++;
        st[handles[hd].dev].vmm_mapped += size;
        r = CUDA_SUCCESS;
    }
    pthread_mutex_unlock(&lock);
    return r;
}

static CUresult drv_unmap(CUdeviceptr ptr, size_t size)
{
    pthread_mutex_lock(&lock);
    CUresult r = CUDA_ERROR_INVALID_VALUE;
    for (int i = 0; i < nmaps; i++) {
        if (maps[i].addr != ptr || maps[i].size != size)
            continue;
        handle *h = &handles[maps[i].h];
        /* Back to an inaccessible reservation. */
        mmap((void *)ptr, size, PROT_NONE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
        st[h->dev].vmm_unmaps++;
        st[h->dev].unsynced_unmaps += work_pending[h->dev];
        st[h->dev].vmm_mapped -= size;
        h->maps--;
        handle_drop(maps[i].h);
        maps[i] = maps[--nmaps];
        r = CUDA_SUCCESS;
        break;
    }
    pthread_mutex_unlock(&lock);
    return r;
}

/* Read and write access to every mapping inside the range. */
static CUresult drv_set_access(CUdeviceptr ptr, size_t size,
                               const CUmemAccessDesc *d, size_t n)
{
    if (n != 1 || d->flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&lock);
    size_t covered = 0;
    for (int i = 0; i < nmaps; i++)
        if (maps[i].addr >= ptr && maps[i].addr + maps[i].size <= ptr + size)
            covered += maps[i].size;
    CUresult r = covered == size && !mprotect((void *)ptr, size, PROT_READ | PROT_WRITE)
                     ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_unlock(&lock);
    return r;
}

static CUresult drv_error_string(CUresult e, const char **s)
{
    *s = e == CUDA_SUCCESS ? "no error" : e == CUDA_ERROR_OUT_OF_MEMORY
                                             ? "out of memory" : "invalid argument";
    return CUDA_SUCCESS;
}

EXPORT cudaError_t cudaGetDriverEntryPointByVersion(const char *sym, void **fn,
                                                    unsigned int version,
                                                    unsigned long long flags,
                                                    enum cudaDriverEntryPointQueryResult *q)
{
    (void)version, (void)flags;
    static const struct { const char *name; void *fn; } table[] = {
        {"cuDeviceGet", (void *)drv_device_get},
        {"cuDeviceGetAttribute", (void *)drv_device_attr},
        {"cuMemGetAllocationGranularity", (void *)drv_granularity},
        {"cuMemAddressReserve", (void *)drv_reserve},
        {"cuMemAddressFree", (void *)drv_address_free},
        {"cuMemCreate", (void *)drv_create},
        {"cuMemRelease", (void *)drv_release},
        {"cuMemMap", (void *)drv_map},
        {"cuMemUnmap", (void *)drv_unmap},
        {"cuMemSetAccess", (void *)drv_set_access},
        {"cuGetErrorString", (void *)drv_error_string},
    };
    for (size_t i = 0; i < sizeof(table) / sizeof(table[0]); i++) {
        if (!strcmp(sym, table[i].name)) {
            *fn = table[i].fn;
            if (q)
                *q = cudaDriverEntryPointSuccess;
            return cudaSuccess;
        }
    }
    *fn = NULL;
    if (q)
        *q = cudaDriverEntryPointSymbolNotFound;
    return cudaSuccess;
}
