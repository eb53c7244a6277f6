/*
 * simcuda.c - the simulated CUDA driver for CPU tests, libcuda.so.1; see
 * simcuda.h. It holds the state: the runtime's calls are here as simrt_
 * functions that the simulated libcudart.so.13 (simcudart.c) forwards to,
 * and the driver's under its own names. Only what cupool calls (and what
 * tests call around it) is implemented.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cuda.h>
#include <cupti_callbacks.h>
#include <cupti_driver_cbid.h>
#include <cupti_result.h>

#include "simcuda.h"

#define EXPORT __attribute__((visibility("default")))
enum { MAX_DEV = 8, MAX_ALLOCS = 1 << 16, MAX_STREAMS = 256 };

/* fd: the memory's file with SIMCUDA_IPC=1 (another process maps it through
 * /proc/PID/fd, as CUDA IPC maps device memory), else -1. */
typedef struct alloc { void *p; size_t size; int dev; int fd; } alloc;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static alloc allocs[MAX_ALLOCS];
static int nallocs;
static simcuda_stats st[MAX_DEV];
static int ndev = -1;
static cudaStream_t capturing_streams[MAX_STREAMS];
/* Each capture's mode, thread, and whether a forbidden call invalidated it. */
static enum cudaStreamCaptureMode capture_mode[MAX_STREAMS];
static pthread_t capture_thread[MAX_STREAMS];
static bool capture_invalid[MAX_STREAMS];
static _Thread_local enum cudaStreamCaptureMode thread_mode; /* global: 0 */
static _Thread_local int current;
static bool work_pending[MAX_DEV]; /* recorded since the last sync */
/* Streams running long work (simcuda_set_busy): an event recorded on one
 * is not ready until its work ends; gen counts the ends. */
static struct { cudaStream_t s; unsigned long gen; bool busy; } busy_streams[MAX_STREAMS];
typedef struct sim_event { cudaStream_t s; unsigned long gen; bool pending; } sim_event;

/* The stream's entry in busy_streams, made if missing; needs lock. */
static int busy_slot(cudaStream_t s)
{
    int free_slot = -1;
    for (int i = 0; i < MAX_STREAMS; i++) {
        if (busy_streams[i].s == s && (busy_streams[i].busy || busy_streams[i].gen))
            return i;
        if (free_slot < 0 && !busy_streams[i].busy && !busy_streams[i].gen)
            free_slot = i;
    }
    busy_streams[free_slot].s = s;
    return free_slot;
}
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

void simcuda_set_busy(cudaStream_t s, int on) EXPORT;
void simcuda_set_busy(cudaStream_t s, int on)
{
    pthread_mutex_lock(&lock);
    int i = busy_slot(s);
    if (busy_streams[i].busy && !on)
        busy_streams[i].gen++;
    busy_streams[i].busy = on;
    pthread_mutex_unlock(&lock);
}

void simcuda_set_capturing(cudaStream_t s, int on) EXPORT;
void simcuda_set_capturing(cudaStream_t s, int on)
{
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_STREAMS; i++) {
        if (on && !capturing_streams[i]) {
            capturing_streams[i] = s;
            /* Behind the runtime's back: forbids nothing (begin_capture
             * sets the mode asked for). */
            capture_mode[i] = cudaStreamCaptureModeRelaxed;
            capture_thread[i] = pthread_self();
            capture_invalid[i] = false;
            break;
        }
        if (!on && capturing_streams[i] == s)
            capturing_streams[i] = NULL;
    }
    pthread_mutex_unlock(&lock);
}

/* CUDA's rule for potentially unsafe calls during graph captures: a
 * thread not in relaxed mode may not make one while it has a capture of its
 * own not begun in relaxed mode, nor, in global mode, while another thread
 * has one begun in global mode. Each capture that forbids the call is
 * invalidated. True if the call is forbidden. */
static bool forbidden_by_capture(void)
{
    if (thread_mode == cudaStreamCaptureModeRelaxed)
        return false;
    bool no = false;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_STREAMS; i++) {
        if (!capturing_streams[i] || capture_mode[i] == cudaStreamCaptureModeRelaxed)
            continue;
        bool mine = pthread_equal(capture_thread[i], pthread_self());
        if (mine || (thread_mode == cudaStreamCaptureModeGlobal &&
                     capture_mode[i] == cudaStreamCaptureModeGlobal)) {
            capture_invalid[i] = true;
            no = true;
        }
    }
    pthread_mutex_unlock(&lock);
    return no;
}

static cudaError_t sim_alloc(void **ptr, size_t size, int dev)
{
    if (!ptr)
        return fail(cudaErrorInvalidValue);
    if (forbidden_by_capture())
        return fail(cudaErrorStreamCaptureUnsupported);
    if (size == 0) {
        *ptr = NULL;
        return cudaSuccess;
    }
    pthread_mutex_lock(&lock);
    setup();
    cudaError_t e = cudaSuccess;
    void *p = MAP_FAILED;
    int fd = -1;
    const char *ipc = getenv("SIMCUDA_IPC");
    if (size > st[dev].capacity - st[dev].used || nallocs == MAX_ALLOCS)
        e = cudaErrorMemoryAllocation;
    else if (ipc && *ipc == '1')
        p = (fd = memfd_create("simcuda", 0)) >= 0 && ftruncate(fd, (off_t)size) == 0
                ? mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
    else
        p = mmap(NULL, size, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (e == cudaSuccess && p == MAP_FAILED) {
        e = cudaErrorMemoryAllocation;
        if (fd >= 0)
            close(fd);
    }
    if (e == cudaSuccess) {
        allocs[nallocs++] = (alloc){p, size, dev, fd};
        st[dev].used += size;
        st[dev].mallocs++;
        *ptr = p;
    }
    pthread_mutex_unlock(&lock);
    return e == cudaSuccess ? e : fail(e);
}

EXPORT cudaError_t simrt_cudaMalloc(void **ptr, size_t size)
{
    drv_call(CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2);
    return sim_alloc(ptr, size, current);
}

EXPORT cudaError_t simrt_cudaFree(void *ptr)
{
    drv_call(CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2);
    if (!ptr)
        return cudaSuccess;
    if (forbidden_by_capture())
        return fail(cudaErrorStreamCaptureUnsupported);
    pthread_mutex_lock(&lock);
    for (int i = 0; i < nallocs; i++) {
        if (allocs[i].p != ptr)
            continue;
        munmap(ptr, allocs[i].size);
        if (allocs[i].fd >= 0)
            close(allocs[i].fd);
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

EXPORT cudaError_t simrt_cudaFreeAsync(void *ptr, cudaStream_t s)
{
    (void)s;
    return simrt_cudaFree(ptr);
}

EXPORT cudaError_t simrt_cudaMallocAsync(void **ptr, size_t size, cudaStream_t s)
{
    (void)s;
    return sim_alloc(ptr, size, current);
}

EXPORT cudaError_t simrt_cudaMallocManaged(void **ptr, size_t size, unsigned int f)
{
    (void)f;
    return sim_alloc(ptr, size, current);
}

EXPORT cudaError_t simrt_cudaMallocPitch(void **ptr, size_t *pitch, size_t w, size_t h)
{
    *pitch = (w + 511) / 512 * 512;
    return sim_alloc(ptr, *pitch * h, current);
}

EXPORT cudaError_t simrt_cudaMalloc3D(struct cudaPitchedPtr *pp, struct cudaExtent e)
{
    size_t pitch = (e.width + 511) / 512 * 512;
    pp->pitch = pitch;
    pp->xsize = e.width;
    pp->ysize = e.height;
    return sim_alloc(&pp->ptr, pitch * e.height * (e.depth ? e.depth : 1), current);
}

EXPORT cudaError_t simrt_cudaMemGetInfo(size_t *free_b, size_t *total)
{
    drv_call(CUPTI_DRIVER_TRACE_CBID_cuMemGetInfo_v2);
    pthread_mutex_lock(&lock);
    setup();
    *free_b = st[current].capacity - st[current].used;
    *total = st[current].capacity;
    pthread_mutex_unlock(&lock);
    return cudaSuccess;
}

EXPORT cudaError_t simrt_cudaDeviceReset(void)
{
    pthread_mutex_lock(&lock);
    for (int i = 0; i < nallocs;) {
        if (allocs[i].dev == current) {
            munmap(allocs[i].p, allocs[i].size);
            if (allocs[i].fd >= 0)
                close(allocs[i].fd);
            st[current].used -= allocs[i].size;
            allocs[i] = allocs[--nallocs];
        } else {
            i++;
        }
    }
    pthread_mutex_unlock(&lock);
    return cudaSuccess;
}

EXPORT cudaError_t simrt_cudaGetDeviceCount(int *n)
{
    pthread_mutex_lock(&lock);
    setup();
    *n = ndev;
    pthread_mutex_unlock(&lock);
    return cudaSuccess;
}

EXPORT cudaError_t simrt_cudaGetDevice(int *d)
{
    drv_call(CUPTI_DRIVER_TRACE_CBID_cuCtxGetDevice_v2);
    *d = current;
    return cudaSuccess;
}

EXPORT cudaError_t simrt_cudaSetDevice(int d)
{
    int n;
    simrt_cudaGetDeviceCount(&n);
    if (d < 0 || d >= n)
        return fail(cudaErrorInvalidDevice);
    current = d;
    return cudaSuccess;
}

EXPORT cudaError_t simrt_cudaGetLastError(void)
{
    cudaError_t e = last_error;
    last_error = cudaSuccess;
    return e;
}

EXPORT cudaError_t simrt_cudaDeviceSynchronize(void)
{
    drv_call(CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize);
    pthread_mutex_lock(&lock);
    st[current].syncs++;
    work_pending[current] = false;
    for (int i = 0; i < MAX_STREAMS; i++) {
        busy_streams[i].gen += busy_streams[i].busy;
        busy_streams[i].busy = false;
    }
    pthread_mutex_unlock(&lock);
    return cudaSuccess;
}

EXPORT cudaError_t simrt_cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int f)
{
    drv_call(CUPTI_DRIVER_TRACE_CBID_cuEventCreate);
    (void)f;
    *e = (cudaEvent_t)calloc(1, sizeof(sim_event));
    return cudaSuccess;
}

EXPORT cudaError_t simrt_cudaEventDestroy(cudaEvent_t e)
{
    free(e);
    return cudaSuccess;
}

EXPORT cudaError_t simrt_cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
    drv_call(CUPTI_DRIVER_TRACE_CBID_cuEventRecord);
    sim_event *ev = (sim_event *)e;
    pthread_mutex_lock(&lock);
    int b = busy_slot(s);
    *ev = (sim_event){s, busy_streams[b].gen, busy_streams[b].busy};
    st[current].event_records++;
    st[current].legacy_records += s == cudaStreamLegacy;
    work_pending[current] = true;
    pthread_mutex_unlock(&lock);
    return cudaSuccess;
}

/* Ready unless recorded on a stream whose long work has not ended. */
EXPORT cudaError_t simrt_cudaEventQuery(cudaEvent_t e)
{
    drv_call(CUPTI_DRIVER_TRACE_CBID_cuEventQuery);
    const sim_event *ev = (const sim_event *)e;
    pthread_mutex_lock(&lock);
    st[current].event_queries++;
    bool ready = true;
    if (ev->pending) {
        int b = busy_slot(ev->s);
        ready = busy_streams[b].gen != ev->gen;
    }
    pthread_mutex_unlock(&lock);
    return ready ? cudaSuccess : cudaErrorNotReady;
}

EXPORT cudaError_t simrt_cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int f)
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
EXPORT cudaError_t simrt_cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s)
{
    (void)s;
    memset(p, v, n);
    pthread_mutex_lock(&lock);
    work_pending[current] = true;
    pthread_mutex_unlock(&lock);
    drv_call(CUPTI_DRIVER_TRACE_CBID_cuMemsetD8Async);
    return cudaSuccess;
}

EXPORT cudaError_t simrt_cudaStreamCreateWithPriority(cudaStream_t *s, unsigned int f, int p)
{
    drv_call(CUPTI_DRIVER_TRACE_CBID_cuStreamCreateWithPriority);
    (void)f, (void)p;
    *s = (cudaStream_t)malloc(16);
    return cudaSuccess;
}

EXPORT cudaError_t simrt_cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int f)
{
    return simrt_cudaStreamCreateWithPriority(s, f, 0);
}

EXPORT cudaError_t simrt_cudaStreamCreate(cudaStream_t *s)
{
    return simrt_cudaStreamCreateWithPriority(s, 0, 0);
}

EXPORT cudaError_t simrt_cudaStreamDestroy(cudaStream_t s)
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

static cudaError_t begin_capture(cudaStream_t s, enum cudaStreamCaptureMode m)
{
    if (is_capturing(s))
        return fail(cudaErrorIllegalState);
    simcuda_set_capturing(s, 1);
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_STREAMS; i++)
        if (capturing_streams[i] == s)
            capture_mode[i] = m;
    pthread_mutex_unlock(&lock);
    return cudaSuccess;
}

static cudaError_t end_capture(cudaStream_t s, cudaGraph_t *g)
{
    if (!is_capturing(s))
        return fail(cudaErrorIllegalState);
    bool invalid = false;
    pthread_mutex_lock(&lock);
    for (int i = 0; i < MAX_STREAMS; i++)
        if (capturing_streams[i] == s)
            invalid = capture_invalid[i];
    pthread_mutex_unlock(&lock);
    simcuda_set_capturing(s, 0);
    if (invalid) {
        *g = NULL;
        return fail(cudaErrorStreamCaptureInvalidated);
    }
    *g = (cudaGraph_t)0x1000; /* never dereferenced */
    return cudaSuccess;
}

EXPORT cudaError_t simrt_cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode m)
{
    return begin_capture(s, m);
}

EXPORT cudaError_t simrt_cudaStreamBeginCapture_ptsz(cudaStream_t s, enum cudaStreamCaptureMode m)
{
    return begin_capture(s ? s : cudaStreamPerThread, m);
}

EXPORT cudaError_t simrt_cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g)
{
    return end_capture(s, g);
}

EXPORT cudaError_t simrt_cudaStreamEndCapture_ptsz(cudaStream_t s, cudaGraph_t *g)
{
    return end_capture(s ? s : cudaStreamPerThread, g);
}

EXPORT cudaError_t simrt_cudaGraphDestroy(cudaGraph_t g)
{
    (void)g;
    return cudaSuccess;
}

EXPORT cudaError_t simrt_cudaStreamIsCapturing(cudaStream_t s, enum cudaStreamCaptureStatus *status)
{
    drv_call(CUPTI_DRIVER_TRACE_CBID_cuStreamIsCapturing);
    *status = cudaStreamCaptureStatusNone;
    pthread_mutex_lock(&lock);
    st[current].capture_queries++;
    for (int i = 0; i < MAX_STREAMS; i++)
        if (capturing_streams[i] && capturing_streams[i] == s)
            *status = capture_invalid[i] ? cudaStreamCaptureStatusInvalidated
                                         : cudaStreamCaptureStatusActive;
    pthread_mutex_unlock(&lock);
    return cudaSuccess;
}

EXPORT cudaError_t simrt_cudaThreadExchangeStreamCaptureMode(enum cudaStreamCaptureMode *m)
{
    enum cudaStreamCaptureMode old = thread_mode;
    thread_mode = *m;
    *m = old;
    return cudaSuccess;
}

/* An IPC handle names the whole allocation ptr is in (as CUDA's does):
 * the exporter's pid and the memory's file (SIMCUDA_IPC=1). */
typedef struct sim_handle { char magic[8]; int32_t pid, fd; uint64_t size; } sim_handle;
#define SIM_HANDLE_MAGIC "SIMIPC1"

EXPORT cudaError_t simrt_cudaIpcGetMemHandle(cudaIpcMemHandle_t *h, void *ptr)
{
    pthread_mutex_lock(&lock);
    for (int i = 0; i < nallocs; i++) {
        char *b = allocs[i].p;
        if ((char *)ptr >= b && (char *)ptr < b + allocs[i].size) {
            sim_handle sh = {SIM_HANDLE_MAGIC, (int32_t)getpid(), allocs[i].fd,
                             allocs[i].size};
            pthread_mutex_unlock(&lock);
            memset(h, 0, sizeof(*h));
            memcpy(h->reserved, &sh, sizeof(sh));
            return cudaSuccess;
        }
    }
    pthread_mutex_unlock(&lock);
    return fail(cudaErrorInvalidValue);
}

/* Mappings opened from other processes' handles. */
static struct { void *p; size_t size; } imports[256];

EXPORT cudaError_t simrt_cudaIpcOpenMemHandle(void **p, cudaIpcMemHandle_t h, unsigned int f)
{
    (void)f;
    sim_handle sh;
    memcpy(&sh, h.reserved, sizeof(sh));
    if (memcmp(sh.magic, SIM_HANDLE_MAGIC, sizeof(sh.magic)) || sh.fd < 0 || !sh.size)
        return fail(cudaErrorInvalidValue);
    if (sh.pid == (int32_t)getpid())
        return fail(cudaErrorDeviceUninitialized); /* CUDA: not in the exporting process */
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)sh.pid, (int)sh.fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return fail(cudaErrorInvalidValue);
    void *m = mmap(NULL, sh.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED)
        return fail(cudaErrorMemoryAllocation);
    pthread_mutex_lock(&lock);
    bool kept = false;
    for (int i = 0; i < 256 && !kept; i++)
        if (!imports[i].p)
            imports[i].p = m, imports[i].size = sh.size, kept = true;
    pthread_mutex_unlock(&lock);
    if (!kept) {
        munmap(m, sh.size);
        return fail(cudaErrorMemoryAllocation);
    }
    *p = m;
    return cudaSuccess;
}

EXPORT cudaError_t simrt_cudaIpcCloseMemHandle(void *p)
{
    pthread_mutex_lock(&lock);
    for (int i = 0; i < 256; i++) {
        if (imports[i].p == p) {
            munmap(p, imports[i].size);
            imports[i].p = NULL;
            pthread_mutex_unlock(&lock);
            return cudaSuccess;
        }
    }
    pthread_mutex_unlock(&lock);
    return fail(cudaErrorInvalidValue);
}

EXPORT cudaError_t simrt_cudaDeviceGetPCIBusId(char *id, int len, int device)
{
    snprintf(id, (size_t)len, "0000:%02x:00.0", device + 1);
    return cudaSuccess;
}

EXPORT const char *simrt_cudaGetErrorString(cudaError_t e)
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


/* ---- the driver API ---------------------------------------------------------
 * What a static runtime, a driver-API program, CuPy or XLA call, by the
 * driver's exported names, on the same state as the runtime calls above.
 * One context per device, its primary; the calling thread's is the
 * runtime's current device. */

static char contexts[MAX_DEV];

void simrt_set_error(cudaError_t e) EXPORT;
void simrt_set_error(cudaError_t e) { last_error = e; }

static CUresult from_rt(cudaError_t e)
{
    last_error = cudaSuccess; /* the driver leaves the runtime's error alone */
    return e == cudaSuccess ? CUDA_SUCCESS
           : e == cudaErrorMemoryAllocation ? CUDA_ERROR_OUT_OF_MEMORY
           : e == cudaErrorInvalidValue ? CUDA_ERROR_INVALID_VALUE
           : e == cudaErrorIllegalState ? CUDA_ERROR_ILLEGAL_STATE
           : e == cudaErrorStreamCaptureUnsupported ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
           : e == cudaErrorStreamCaptureInvalidated ? CUDA_ERROR_STREAM_CAPTURE_INVALIDATED
           : e == cudaErrorNotReady ? CUDA_ERROR_NOT_READY
           : CUDA_ERROR_UNKNOWN;
}

static int ctx_device(CUcontext c)
{
    setup();
    char *p = (char *)c;
    return p >= contexts && p < contexts + ndev ? (int)(p - contexts) : -1;
}

/* The real driver looks itself up with dlsym while it starts: a preloaded
 * dlsym must not recurse or deadlock on that. */
EXPORT CUresult cuInit(unsigned int flags)
{
    (void)flags;
    void *self = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
    if (!self || !dlsym(self, "cuGetProcAddress_v2") || !dlsym(RTLD_DEFAULT, "cuMemAlloc_v2"))
        return CUDA_ERROR_NOT_INITIALIZED;
    dlclose(self);
    pthread_mutex_lock(&lock);
    setup();
    pthread_mutex_unlock(&lock);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuDriverGetVersion(int *v) { *v = 13000; return CUDA_SUCCESS; }
EXPORT CUresult cuDeviceGetCount(int *n) { return from_rt(simrt_cudaGetDeviceCount(n)); }
EXPORT CUresult cuDeviceGet(CUdevice *d, int ordinal) { return drv_device_get(d, ordinal); }
EXPORT CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d)
{
    return drv_device_attr(v, a, d);
}
EXPORT CUresult cuDeviceGetPCIBusId(char *id, int len, CUdevice d)
{
    return from_rt(simrt_cudaDeviceGetPCIBusId(id, len, d));
}

EXPORT CUresult cuCtxGetCurrent(CUcontext *c)
{
    setup();
    *c = (CUcontext)&contexts[current];
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxSetCurrent(CUcontext c)
{
    int d = ctx_device(c);
    if (d < 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    current = d;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxGetDevice(CUdevice *d)
{
    drv_call(CUPTI_DRIVER_TRACE_CBID_cuCtxGetDevice);
    *d = current;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxSynchronize(void) { return from_rt(simrt_cudaDeviceSynchronize()); }

EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d)
{
    setup();
    if (d < 0 || d >= ndev)
        return CUDA_ERROR_INVALID_DEVICE;
    *c = (CUcontext)&contexts[d];
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) { (void)d; return CUDA_SUCCESS; }

EXPORT CUresult cuDevicePrimaryCtxGetState(CUdevice d, unsigned int *flags, int *active)
{
    (void)d;
    *flags = 0;
    *active = 1;
    return CUDA_SUCCESS;
}

/* Frees every allocation of device d, as destroying its context does. */
static CUresult reset_device(int d)
{
    if (d < 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    int saved = current;
    current = d;
    simrt_cudaDeviceReset();
    current = saved;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuDevicePrimaryCtxReset_v2(CUdevice d)
{
    return reset_device(d >= 0 && d < ndev ? d : -1);
}

EXPORT CUresult cuCtxDestroy_v2(CUcontext c) { return reset_device(ctx_device(c)); }

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t size)
{
    drv_call(CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2);
    if (!p || !size)
        return CUDA_ERROR_INVALID_VALUE;
    return from_rt(sim_alloc((void **)p, size, current));
}

/* The 32-bit form of CUDA before 3.2: what cuGetProcAddress answers for
 * cuMemAlloc asked for with an older version. Never to be called. */
#undef cuMemAlloc
CUresult cuMemAlloc(unsigned int *p, unsigned int size) EXPORT;
CUresult cuMemAlloc(unsigned int *p, unsigned int size)
{
    (void)p, (void)size;
    fprintf(stderr, "simcuda: the pre-3.2 cuMemAlloc was called\n");
    abort();
}

EXPORT CUresult cuMemFree_v2(CUdeviceptr p)
{
    if (!p)
        return CUDA_ERROR_INVALID_VALUE;
    return from_rt(simrt_cudaFree((void *)p));
}

EXPORT CUresult cuMemGetInfo_v2(size_t *f, size_t *t) { return from_rt(simrt_cudaMemGetInfo(f, t)); }

EXPORT CUresult cuMemAllocPitch_v2(CUdeviceptr *p, size_t *pitch, size_t w, size_t h,
                                   unsigned int elem)
{
    (void)elem;
    return from_rt(simrt_cudaMallocPitch((void **)p, pitch, w, h));
}

EXPORT CUresult cuMemAllocManaged(CUdeviceptr *p, size_t size, unsigned int f)
{
    return from_rt(simrt_cudaMallocManaged((void **)p, size, f));
}

EXPORT CUresult cuMemAllocAsync(CUdeviceptr *p, size_t size, CUstream s)
{
    return from_rt(simrt_cudaMallocAsync((void **)p, size, (cudaStream_t)s));
}

CUresult cuMemAllocAsync_ptsz(CUdeviceptr *p, size_t size, CUstream s) EXPORT;
CUresult cuMemAllocAsync_ptsz(CUdeviceptr *p, size_t size, CUstream s)
{
    return cuMemAllocAsync(p, size, s);
}

EXPORT CUresult cuMemFreeAsync(CUdeviceptr p, CUstream s)
{
    return from_rt(simrt_cudaFreeAsync((void *)p, (cudaStream_t)s));
}

CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s) EXPORT;
CUresult cuMemFreeAsync_ptsz(CUdeviceptr p, CUstream s) { return cuMemFreeAsync(p, s); }

EXPORT CUresult cuMemsetD8Async(CUdeviceptr p, unsigned char v, size_t n, CUstream s)
{
    return from_rt(simrt_cudaMemsetAsync((void *)p, v, n, (cudaStream_t)s));
}

EXPORT CUresult cuMemGetAllocationGranularity(size_t *g, const CUmemAllocationProp *p,
                                              CUmemAllocationGranularity_flags f)
{
    return drv_granularity(g, p, f);
}
EXPORT CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t align,
                                    CUdeviceptr addr, unsigned long long flags)
{
    return drv_reserve(ptr, size, align, addr, flags);
}
EXPORT CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size) { return drv_address_free(ptr, size); }
EXPORT CUresult cuMemCreate(CUmemGenericAllocationHandle *h, size_t size,
                            const CUmemAllocationProp *p, unsigned long long f)
{
    return drv_create(h, size, p, f);
}
EXPORT CUresult cuMemRelease(CUmemGenericAllocationHandle h) { return drv_release(h); }
EXPORT CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t off,
                         CUmemGenericAllocationHandle h, unsigned long long f)
{
    return drv_map(ptr, size, off, h, f);
}
EXPORT CUresult cuMemUnmap(CUdeviceptr ptr, size_t size) { return drv_unmap(ptr, size); }
EXPORT CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *d,
                               size_t n)
{
    return drv_set_access(ptr, size, d, n);
}
EXPORT CUresult cuGetErrorString(CUresult e, const char **s) { return drv_error_string(e, s); }

EXPORT CUresult cuStreamCreate(CUstream *s, unsigned int f)
{
    return from_rt(simrt_cudaStreamCreateWithPriority((cudaStream_t *)s, f, 0));
}
EXPORT CUresult cuStreamCreateWithPriority(CUstream *s, unsigned int f, int p)
{
    return from_rt(simrt_cudaStreamCreateWithPriority((cudaStream_t *)s, f, p));
}
EXPORT CUresult cuStreamDestroy_v2(CUstream s) { return from_rt(simrt_cudaStreamDestroy((cudaStream_t)s)); }
EXPORT CUresult cuEventCreate(CUevent *e, unsigned int f)
{
    return from_rt(simrt_cudaEventCreateWithFlags((cudaEvent_t *)e, f));
}
EXPORT CUresult cuEventDestroy_v2(CUevent e) { return from_rt(simrt_cudaEventDestroy((cudaEvent_t)e)); }
EXPORT CUresult cuEventQuery(CUevent e) { return from_rt(simrt_cudaEventQuery((cudaEvent_t)e)); }
EXPORT CUresult cuEventRecord(CUevent e, CUstream s)
{
    return from_rt(simrt_cudaEventRecord((cudaEvent_t)e, (cudaStream_t)s));
}
EXPORT CUresult cuStreamWaitEvent(CUstream s, CUevent e, unsigned int f)
{
    return from_rt(simrt_cudaStreamWaitEvent((cudaStream_t)s, (cudaEvent_t)e, f));
}

/* The capture calls: v1 (CUDA 10.0, no mode), v2, and the per-thread
 * form of each (as the real driver names them). */
#undef cuStreamBeginCapture
CUresult cuStreamBeginCapture(CUstream s) EXPORT;
CUresult cuStreamBeginCapture(CUstream s)
{
    return from_rt(simrt_cudaStreamBeginCapture((cudaStream_t)s, cudaStreamCaptureModeGlobal));
}
EXPORT CUresult cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode m)
{
    return from_rt(simrt_cudaStreamBeginCapture((cudaStream_t)s, (enum cudaStreamCaptureMode)m));
}
CUresult cuStreamBeginCapture_ptsz(CUstream s) EXPORT;
CUresult cuStreamBeginCapture_ptsz(CUstream s)
{
    return from_rt(simrt_cudaStreamBeginCapture_ptsz((cudaStream_t)s,
                                                     cudaStreamCaptureModeGlobal));
}
CUresult cuStreamBeginCapture_v2_ptsz(CUstream s, CUstreamCaptureMode m) EXPORT;
CUresult cuStreamBeginCapture_v2_ptsz(CUstream s, CUstreamCaptureMode m)
{
    return from_rt(simrt_cudaStreamBeginCapture_ptsz((cudaStream_t)s,
                                                     (enum cudaStreamCaptureMode)m));
}
EXPORT CUresult cuStreamEndCapture(CUstream s, CUgraph *g)
{
    return from_rt(simrt_cudaStreamEndCapture((cudaStream_t)s, (cudaGraph_t *)g));
}
CUresult cuStreamEndCapture_ptsz(CUstream s, CUgraph *g) EXPORT;
CUresult cuStreamEndCapture_ptsz(CUstream s, CUgraph *g)
{
    return from_rt(simrt_cudaStreamEndCapture_ptsz((cudaStream_t)s, (cudaGraph_t *)g));
}
EXPORT CUresult cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus *status)
{
    enum cudaStreamCaptureStatus r;
    CUresult e = from_rt(simrt_cudaStreamIsCapturing((cudaStream_t)s, &r));
    *status = (CUstreamCaptureStatus)r;
    return e;
}
EXPORT CUresult cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode *m)
{
    return from_rt(simrt_cudaThreadExchangeStreamCaptureMode((enum cudaStreamCaptureMode *)m));
}
EXPORT CUresult cuIpcGetMemHandle(CUipcMemHandle *h, CUdeviceptr p)
{
    return from_rt(simrt_cudaIpcGetMemHandle((cudaIpcMemHandle_t *)h, (void *)p));
}
EXPORT CUresult cuIpcOpenMemHandle_v2(CUdeviceptr *p, CUipcMemHandle h, unsigned int f)
{
    cudaIpcMemHandle_t c;
    memcpy(&c, &h, sizeof(c));
    return from_rt(simrt_cudaIpcOpenMemHandle((void **)p, c, f));
}
EXPORT CUresult cuIpcCloseMemHandle(CUdeviceptr p)
{
    return from_rt(simrt_cudaIpcCloseMemHandle((void *)p));
}

/* ---- cuGetProcAddress: the function for a name, by version and stream
 * semantics, as the real driver answers: the newest version not newer than
 * the one asked for; the _ptsz form only when per-thread is asked for. */
static const struct entry {
    const char *base;
    int since;   /* CUDA version it appeared in */
    bool ptsz;
    void *fn;
} entries[] = {
    {"cuInit", 2000, false, (void *)cuInit},
    {"cuDriverGetVersion", 2020, false, (void *)cuDriverGetVersion},
    {"cuDeviceGetCount", 2000, false, (void *)cuDeviceGetCount},
    {"cuDeviceGet", 2000, false, (void *)cuDeviceGet},
    {"cuDeviceGetAttribute", 2000, false, (void *)cuDeviceGetAttribute},
    {"cuDeviceGetPCIBusId", 4010, false, (void *)cuDeviceGetPCIBusId},
    {"cuCtxGetCurrent", 4000, false, (void *)cuCtxGetCurrent},
    {"cuCtxSetCurrent", 4000, false, (void *)cuCtxSetCurrent},
    {"cuCtxGetDevice", 2000, false, (void *)cuCtxGetDevice},
    {"cuCtxSynchronize", 2000, false, (void *)cuCtxSynchronize},
    {"cuCtxDestroy", 4000, false, (void *)cuCtxDestroy_v2},
    {"cuDevicePrimaryCtxRetain", 7000, false, (void *)cuDevicePrimaryCtxRetain},
    {"cuDevicePrimaryCtxRelease", 11000, false, (void *)cuDevicePrimaryCtxRelease_v2},
    {"cuDevicePrimaryCtxReset", 11000, false, (void *)cuDevicePrimaryCtxReset_v2},
    {"cuDevicePrimaryCtxGetState", 7000, false, (void *)cuDevicePrimaryCtxGetState},
    {"cuMemAlloc", 2000, false, (void *)cuMemAlloc},
    {"cuMemAlloc", 3020, false, (void *)cuMemAlloc_v2},
    {"cuMemFree", 3020, false, (void *)cuMemFree_v2},
    {"cuMemGetInfo", 3020, false, (void *)cuMemGetInfo_v2},
    {"cuMemAllocPitch", 3020, false, (void *)cuMemAllocPitch_v2},
    {"cuMemAllocManaged", 6000, false, (void *)cuMemAllocManaged},
    {"cuMemAllocAsync", 11020, false, (void *)cuMemAllocAsync},
    {"cuMemAllocAsync", 11020, true, (void *)cuMemAllocAsync_ptsz},
    {"cuMemFreeAsync", 11020, false, (void *)cuMemFreeAsync},
    {"cuMemFreeAsync", 11020, true, (void *)cuMemFreeAsync_ptsz},
    {"cuMemsetD8Async", 3020, false, (void *)cuMemsetD8Async},
    {"cuMemGetAllocationGranularity", 10020, false, (void *)cuMemGetAllocationGranularity},
    {"cuMemAddressReserve", 10020, false, (void *)cuMemAddressReserve},
    {"cuMemAddressFree", 10020, false, (void *)cuMemAddressFree},
    {"cuMemCreate", 10020, false, (void *)cuMemCreate},
    {"cuMemRelease", 10020, false, (void *)cuMemRelease},
    {"cuMemMap", 10020, false, (void *)cuMemMap},
    {"cuMemUnmap", 10020, false, (void *)cuMemUnmap},
    {"cuMemSetAccess", 10020, false, (void *)cuMemSetAccess},
    {"cuGetErrorString", 6000, false, (void *)cuGetErrorString},
    {"cuStreamCreate", 2000, false, (void *)cuStreamCreate},
    {"cuStreamCreateWithPriority", 5050, false, (void *)cuStreamCreateWithPriority},
    {"cuStreamDestroy", 4000, false, (void *)cuStreamDestroy_v2},
    {"cuEventCreate", 2000, false, (void *)cuEventCreate},
    {"cuEventDestroy", 4000, false, (void *)cuEventDestroy_v2},
    {"cuEventQuery", 2000, false, (void *)cuEventQuery},
    {"cuEventRecord", 2000, false, (void *)cuEventRecord},
    {"cuStreamWaitEvent", 3020, false, (void *)cuStreamWaitEvent},
    {"cuStreamBeginCapture", 10000, false, (void *)cuStreamBeginCapture},
    {"cuStreamBeginCapture", 10010, false, (void *)cuStreamBeginCapture_v2},
    {"cuStreamBeginCapture", 10000, true, (void *)cuStreamBeginCapture_ptsz},
    {"cuStreamBeginCapture", 10010, true, (void *)cuStreamBeginCapture_v2_ptsz},
    {"cuStreamEndCapture", 10000, false, (void *)cuStreamEndCapture},
    {"cuStreamEndCapture", 10000, true, (void *)cuStreamEndCapture_ptsz},
    {"cuStreamIsCapturing", 10000, false, (void *)cuStreamIsCapturing},
    {"cuThreadExchangeStreamCaptureMode", 10010, false,
     (void *)cuThreadExchangeStreamCaptureMode},
    {"cuIpcGetMemHandle", 4010, false, (void *)cuIpcGetMemHandle},
    {"cuIpcOpenMemHandle", 11000, false, (void *)cuIpcOpenMemHandle_v2},
    {"cuIpcCloseMemHandle", 4010, false, (void *)cuIpcCloseMemHandle},
    {"cuGetProcAddress", 11030, false, NULL}, /* filled below */
    {"cuGetProcAddress", 12000, false, NULL},
};

#undef cuGetProcAddress
CUresult cuGetProcAddress(const char *sym, void **fn, int version, cuuint64_t flags) EXPORT;
EXPORT CUresult cuGetProcAddress_v2(const char *sym, void **fn, int version,
                                    cuuint64_t flags, CUdriverProcAddressQueryResult *q)
{
    const struct entry *best = NULL;
    bool found = false, ptsz = flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
    for (size_t i = 0; i < sizeof(entries) / sizeof(entries[0]); i++) {
        const struct entry *e = &entries[i];
        if (strcmp(e->base, sym) != 0)
            continue;
        found = true;
        if (e->since > version)
            continue;
        /* A per-thread form wins when asked for; else never. */
        if (e->ptsz && !ptsz)
            continue;
        if (!best || e->ptsz > best->ptsz || (e->ptsz == best->ptsz && e->since > best->since))
            best = e;
    }
    *fn = NULL;
    if (best) {
        *fn = best->fn ? best->fn
              : best->since == 12000 ? (void *)cuGetProcAddress_v2 : (void *)cuGetProcAddress;
    }
    if (q)
        *q = best ? CU_GET_PROC_ADDRESS_SUCCESS
             : found ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                     : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    return best ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND;
}

CUresult cuGetProcAddress(const char *sym, void **fn, int version, cuuint64_t flags)
{
    return cuGetProcAddress_v2(sym, fn, version, flags, NULL);
}
