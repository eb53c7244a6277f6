/*
 * simcuda.c - a simulated CUDA runtime for CPU tests; see simcuda.h.
 * Only what cupool calls (and what tests call around it) is implemented.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

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
    return sim_alloc(ptr, size, current);
}

EXPORT cudaError_t cudaFree(void *ptr)
{
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
    pthread_mutex_lock(&lock);
    st[current].syncs++;
    pthread_mutex_unlock(&lock);
    return cudaSuccess;
}

EXPORT cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int f)
{
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
    (void)e;
    pthread_mutex_lock(&lock);
    st[current].event_records++;
    st[current].legacy_records += s == cudaStreamLegacy;
    pthread_mutex_unlock(&lock);
    return cudaSuccess;
}

EXPORT cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int f)
{
    (void)s, (void)e, (void)f;
    pthread_mutex_lock(&lock);
    st[current].stream_waits++;
    pthread_mutex_unlock(&lock);
    return cudaSuccess;
}

EXPORT cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned int f, int p)
{
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
