/* SPDX-License-Identifier: Apache-2.0 */
/*
 * simcuda.c - the simulated CUDA driver for CPU tests, libcuda.so.1; see
 * simcuda.h. It holds the state: the runtime's calls are here as simrt_
 * functions that the simulated libcudart.so.13 (simcudart.c) forwards to,
 * and the driver's under its own names; its virtual memory calls are in
 * simvmm.c and CUPTI in simcupti.c. Only what cupool calls (and what
 * tests call around it) is implemented.
 */
#include <dlfcn.h>
#include <errno.h>
#include <signal.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cuda.h>
#include <cupti_callbacks.h>
#include <cupti_driver_cbid.h>
#include <cupti_result.h>
#include <cupti.h> /* the driver calls' parameter structures */

#include "simcuda.h"
#include "simcuda_internal.h"

enum { MAX_ALLOCS = 1 << 16, MAX_STREAMS = 256 };

/* fd: the memory's file with SIMCUDA_IPC=1 (another process maps it through
 * /proc/PID/fd, as CUDA IPC maps device memory), else -1. */
typedef struct alloc { void *p; size_t size; int dev; int fd; } alloc;

pthread_mutex_t sim_lock = PTHREAD_MUTEX_INITIALIZER;
static alloc allocs[MAX_ALLOCS];
static int nallocs;
simcuda_stats sim_st[SIM_MAX_DEV];
int sim_ndev = -1;
static cudaStream_t capturing_streams[MAX_STREAMS];
/* Each capture's mode, thread, and whether a forbidden call invalidated it. */
static enum cudaStreamCaptureMode capture_mode[MAX_STREAMS];
static pthread_t capture_thread[MAX_STREAMS];
static bool capture_invalid[MAX_STREAMS];
static _Thread_local enum cudaStreamCaptureMode thread_mode; /* global: 0 */
static _Thread_local int current;
bool sim_work_pending[SIM_MAX_DEV]; /* recorded since the last sync */
/* Streams running long work (simcuda_set_busy): an event recorded on one
 * is not ready until its work ends; gen counts the ends. And the order of
 * work: records on the legacy stream are numbered; seen is the latest a
 * stream's work queued from now on follows (through waits on events, whose
 * order carries over), work_seen what its last work followed. */
static struct {
    cudaStream_t s;
    unsigned long gen;
    bool busy;
    unsigned long seen, work_seen;
} busy_streams[MAX_STREAMS];
static unsigned long legacy_seq;
typedef struct sim_event {
    cudaStream_t s;
    unsigned long gen;
    bool pending;
    unsigned long seq; /* the legacy record its work follows */
} sim_event;

/* The stream's entry in busy_streams, made if missing; needs lock. */
static int busy_slot(cudaStream_t s)
{
    int free_slot = -1;
    for (int i = 0; i < MAX_STREAMS; i++) {
        bool used = busy_streams[i].busy || busy_streams[i].gen || busy_streams[i].seen ||
                    busy_streams[i].work_seen;
        if (busy_streams[i].s == s && used)
            return i;
        if (free_slot < 0 && !used)
            free_slot = i;
    }
    busy_streams[free_slot].s = s;
    return free_slot;
}
static _Thread_local cudaError_t last_error;

/* SIMCUDA_SHARED=FILE: the devices' memory is shared by every process
 * that names the same file, as one GPU is by the processes on it:
 * SIMCUDA_CAPACITY bounds what the live ones hold together, and a process
 * that ended (even by SIGKILL) holds nothing, as the real driver frees a
 * process's memory when it ends. The file holds a slot per process. */
enum { SHARED_PROCS = 64 };
typedef struct shared_slot {
    _Atomic int pid;
    _Atomic uint64_t used[SIM_MAX_DEV];
} shared_slot;
typedef struct shared_mem {
    atomic_flag lock;
    shared_slot slots[SHARED_PROCS];
} shared_mem;
static shared_mem *shared;
static shared_slot *shared_me;

static void shared_lock(void)
{
    while (atomic_flag_test_and_set(&shared->lock))
        ;
}

static void shared_setup(void)
{
    const char *path = getenv("SIMCUDA_SHARED");
    int fd = path ? open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600) : -1;
    struct stat st;
    if (fd < 0 || fstat(fd, &st) ||
        ((size_t)st.st_size < sizeof(shared_mem) && ftruncate(fd, sizeof(shared_mem)))) {
        if (fd >= 0)
            close(fd);
        return;
    }
    void *m = mmap(NULL, sizeof(shared_mem), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED)
        return;
    shared = m;
    shared_lock();
    for (int i = 0; i < SHARED_PROCS && !shared_me; i++) {
        shared_slot *s = &shared->slots[i];
        int pid = atomic_load(&s->pid);
        if (!pid || (kill(pid, 0) && errno == ESRCH)) {
            memset((void *)s->used, 0, sizeof(s->used));
            atomic_store(&s->pid, (int)getpid());
            shared_me = s;
        }
    }
    atomic_flag_clear(&shared->lock);
}

/* A process that ends holds nothing (the real driver frees its memory
 * then; a killed one's once it is reaped here). SIMCUDA_EXIT_HOLD_MS=N: it
 * holds its memory N ms more as it ends, as one tearing down a large
 * context does, after its libraries' destructors (cupool's among them)
 * ran. */
__attribute__((destructor)) static void shared_exit(void)
{
    const char *hold = getenv("SIMCUDA_EXIT_HOLD_MS");
    if (shared_me && hold)
        usleep((useconds_t)atoi(hold) * 1000);
    if (shared_me)
        atomic_store(&shared_me->pid, 0);
}

/* Bytes of dev's memory in use: this process's, or every live process's. */
static uint64_t mem_used(int dev)
{
    if (!shared_me)
        return sim_st[dev].used;
    uint64_t sum = 0;
    for (int i = 0; i < SHARED_PROCS; i++) {
        shared_slot *s = &shared->slots[i];
        int pid = atomic_load(&s->pid);
        if (pid && (pid == getpid() || !kill(pid, 0) || errno != ESRCH))
            sum += atomic_load(&s->used[dev]);
    }
    return sum;
}

/* Takes size bytes of dev's memory: true, or false if they are not free. */
static bool mem_take(int dev, size_t size)
{
    uint64_t cap = sim_st[dev].capacity;
    if (shared_me)
        shared_lock();
    uint64_t used = mem_used(dev);
    bool ok = size <= cap && used <= cap - size;
    if (ok && shared_me)
        atomic_fetch_add(&shared_me->used[dev], size);
    if (shared_me)
        atomic_flag_clear(&shared->lock);
    if (ok)
        sim_st[dev].used += size;
    return ok;
}

static void mem_give(int dev, size_t size)
{
    sim_st[dev].used -= size;
    if (shared_me)
        atomic_fetch_sub(&shared_me->used[dev], size);
}

/* SIMCUDA_RECORD_US: how long an event record takes, in microseconds. */
static unsigned record_us;

void sim_setup(void)
{
    if (sim_ndev >= 0)
        return;
    shared_setup();
    const char *r = getenv("SIMCUDA_RECORD_US");
    record_us = r ? (unsigned)atoi(r) : 0;
    const char *d = getenv("SIMCUDA_DEVICES"), *c = getenv("SIMCUDA_CAPACITY");
    sim_ndev = d ? atoi(d) : 2;
    if (sim_ndev < 1 || sim_ndev > SIM_MAX_DEV)
        sim_ndev = 2;
    unsigned long long cap = c ? strtoull(c, NULL, 0) : 16ull << 30;
    for (int i = 0; i < sim_ndev; i++)
        sim_st[i].capacity = cap;
}

static cudaError_t fail(cudaError_t e)
{
    last_error = e;
    return e;
}

void simcuda_get_stats(int dev, simcuda_stats *out) EXPORT;
void simcuda_get_stats(int dev, simcuda_stats *out)
{
    pthread_mutex_lock(&sim_lock);
    sim_setup();
    *out = sim_st[dev];
    pthread_mutex_unlock(&sim_lock);
}

void simcuda_set_busy(cudaStream_t s, int on) EXPORT;
void simcuda_set_busy(cudaStream_t s, int on)
{
    pthread_mutex_lock(&sim_lock);
    int i = busy_slot(s);
    if (busy_streams[i].busy && !on)
        busy_streams[i].gen++;
    busy_streams[i].busy = on;
    pthread_mutex_unlock(&sim_lock);
}

void simcuda_set_capturing(cudaStream_t s, int on) EXPORT;
void simcuda_set_capturing(cudaStream_t s, int on)
{
    pthread_mutex_lock(&sim_lock);
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
    pthread_mutex_unlock(&sim_lock);
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
    pthread_mutex_lock(&sim_lock);
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
    pthread_mutex_unlock(&sim_lock);
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
    pthread_mutex_lock(&sim_lock);
    sim_setup();
    cudaError_t e = cudaSuccess;
    void *p = MAP_FAILED;
    int fd = -1;
    const char *ipc = getenv("SIMCUDA_IPC");
    if (nallocs == MAX_ALLOCS || !mem_take(dev, size))
        e = cudaErrorMemoryAllocation;
    else if (ipc && *ipc == '1')
        p = (fd = memfd_create("simcuda", 0)) >= 0 && ftruncate(fd, (off_t)size) == 0
                ? mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) : MAP_FAILED;
    else
        p = mmap(NULL, size, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (e == cudaSuccess && p == MAP_FAILED) {
        e = cudaErrorMemoryAllocation;
        mem_give(dev, size);
        if (fd >= 0)
            close(fd);
    }
    if (e == cudaSuccess) {
        allocs[nallocs++] = (alloc){p, size, dev, fd};
        sim_st[dev].mallocs++;
        *ptr = p;
    }
    pthread_mutex_unlock(&sim_lock);
    return e == cudaSuccess ? e : fail(e);
}

EXPORT cudaError_t simrt_cudaMalloc(void **ptr, size_t size)
{
    sim_drv_call(CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2);
    return sim_alloc(ptr, size, current);
}

EXPORT cudaError_t simrt_cudaFree(void *ptr)
{
    sim_drv_call(CUPTI_DRIVER_TRACE_CBID_cuMemFree_v2);
    if (!ptr)
        return cudaSuccess;
    if (forbidden_by_capture())
        return fail(cudaErrorStreamCaptureUnsupported);
    pthread_mutex_lock(&sim_lock);
    for (int i = 0; i < nallocs; i++) {
        if (allocs[i].p != ptr)
            continue;
        munmap(ptr, allocs[i].size);
        if (allocs[i].fd >= 0)
            close(allocs[i].fd);
        mem_give(allocs[i].dev, allocs[i].size);
        sim_st[allocs[i].dev].frees++;
        sim_st[allocs[i].dev].syncs++; /* the real cudaFree synchronizes */
        allocs[i] = allocs[--nallocs];
        pthread_mutex_unlock(&sim_lock);
        return cudaSuccess;
    }
    sim_st[current].bad_frees++;
    pthread_mutex_unlock(&sim_lock);
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
    sim_drv_call(CUPTI_DRIVER_TRACE_CBID_cuMemGetInfo_v2);
    pthread_mutex_lock(&sim_lock);
    sim_setup();
    *free_b = sim_st[current].capacity - mem_used(current);
    *total = sim_st[current].capacity;
    pthread_mutex_unlock(&sim_lock);
    return cudaSuccess;
}

EXPORT cudaError_t simrt_cudaDeviceReset(void)
{
    pthread_mutex_lock(&sim_lock);
    for (int i = 0; i < nallocs;) {
        if (allocs[i].dev == current) {
            munmap(allocs[i].p, allocs[i].size);
            if (allocs[i].fd >= 0)
                close(allocs[i].fd);
            mem_give(current, allocs[i].size);
            allocs[i] = allocs[--nallocs];
        } else {
            i++;
        }
    }
    pthread_mutex_unlock(&sim_lock);
    return cudaSuccess;
}

EXPORT cudaError_t simrt_cudaGetDeviceCount(int *n)
{
    pthread_mutex_lock(&sim_lock);
    sim_setup();
    *n = sim_ndev;
    pthread_mutex_unlock(&sim_lock);
    return cudaSuccess;
}

EXPORT cudaError_t simrt_cudaGetDevice(int *d)
{
    sim_drv_call(CUPTI_DRIVER_TRACE_CBID_cuCtxGetDevice_v2);
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

/* Its entry reported before the wait, its return after (simcupti.c's
 * SIMCUDA_CUPTI_STRADDLE holds one between them). */
EXPORT cudaError_t simrt_cudaDeviceSynchronize(void)
{
    sim_sync_site(CUPTI_API_ENTER);
    pthread_mutex_lock(&sim_lock);
    sim_st[current].syncs++;
    sim_work_pending[current] = false;
    for (int i = 0; i < MAX_STREAMS; i++) {
        busy_streams[i].gen += busy_streams[i].busy;
        busy_streams[i].busy = false;
    }
    pthread_mutex_unlock(&sim_lock);
    sim_sync_site(CUPTI_API_EXIT);
    return cudaSuccess;
}

EXPORT cudaError_t simrt_cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int f)
{
    sim_drv_call(CUPTI_DRIVER_TRACE_CBID_cuEventCreate);
    (void)f;
    *e = (cudaEvent_t)calloc(1, sizeof(sim_event));
    return *e ? cudaSuccess : cudaErrorMemoryAllocation;
}

EXPORT cudaError_t simrt_cudaEventDestroy(cudaEvent_t e)
{
    free(e);
    return cudaSuccess;
}

EXPORT cudaError_t simrt_cudaEventRecord(cudaEvent_t e, cudaStream_t s)
{
    sim_drv_call(CUPTI_DRIVER_TRACE_CBID_cuEventRecord);
    sim_event *ev = (sim_event *)e;
    pthread_mutex_lock(&sim_lock);
    int b = busy_slot(s);
    bool legacy = s == cudaStreamLegacy || !s;
    *ev = (sim_event){s, busy_streams[b].gen, busy_streams[b].busy,
                      legacy ? ++legacy_seq : busy_streams[b].seen};
    sim_st[current].event_records++;
    sim_st[current].legacy_records += s == cudaStreamLegacy;
    sim_work_pending[current] = true;
    pthread_mutex_unlock(&sim_lock);
    if (record_us)
        usleep(record_us);
    return cudaSuccess;
}

/* Ready unless recorded on a stream whose long work has not ended. */
EXPORT cudaError_t simrt_cudaEventQuery(cudaEvent_t e)
{
    sim_drv_call(CUPTI_DRIVER_TRACE_CBID_cuEventQuery);
    const sim_event *ev = (const sim_event *)e;
    pthread_mutex_lock(&sim_lock);
    sim_st[current].event_queries++;
    bool ready = true;
    if (ev->pending) {
        int b = busy_slot(ev->s);
        ready = busy_streams[b].gen != ev->gen;
    }
    pthread_mutex_unlock(&sim_lock);
    return ready ? cudaSuccess : cudaErrorNotReady;
}

EXPORT cudaError_t simrt_cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned int f)
{
    sim_drv_call(CUPTI_DRIVER_TRACE_CBID_cuStreamWaitEvent);
    (void)f;
    const sim_event *ev = (const sim_event *)e;
    pthread_mutex_lock(&sim_lock);
    int b = busy_slot(s);
    if (ev->seq > busy_streams[b].seen)
        busy_streams[b].seen = ev->seq;
    sim_st[current].stream_waits++;
    sim_work_pending[current] = true;
    pthread_mutex_unlock(&sim_lock);
    return cudaSuccess;
}

/* Work queued on s: what it follows is noted. */
static void work_on(cudaStream_t s)
{
    pthread_mutex_lock(&sim_lock);
    sim_work_pending[current] = true;
    int b = busy_slot(s);
    busy_streams[b].work_seen = busy_streams[b].seen;
    pthread_mutex_unlock(&sim_lock);
}

unsigned long simcuda_work_order(cudaStream_t s, unsigned long *legacy) EXPORT;
unsigned long simcuda_work_order(cudaStream_t s, unsigned long *legacy)
{
    pthread_mutex_lock(&sim_lock);
    unsigned long seen = busy_streams[busy_slot(s)].work_seen;
    *legacy = legacy_seq;
    pthread_mutex_unlock(&sim_lock);
    return seen;
}

/* Work: sets bytes of (simulated) device memory, at once; reported to
 * CUPTI with its stream (its entry before the work, its return after). */
EXPORT cudaError_t simrt_cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s)
{
    cuMemsetD8Async_params params = {.dstDevice = (CUdeviceptr)p, .uc = (unsigned char)v,
                                     .N = n, .hStream = (CUstream)s};
    sim_drv_site(CUPTI_DRIVER_TRACE_CBID_cuMemsetD8Async, &params, CUPTI_API_ENTER);
    if (sim_fails("slowmemset")) /* a long call: inside the driver for 10 s */
        sim_slow_call(10);
    memset(p, v, n);
    work_on(s);
    sim_drv_site(CUPTI_DRIVER_TRACE_CBID_cuMemsetD8Async, &params, CUPTI_API_EXIT);
    return cudaSuccess;
}

/* A kernel launch: work on the stream, touching nothing the simulation
 * keeps; reported to CUPTI with its stream. */
EXPORT CUresult cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz,
                               unsigned bx, unsigned by, unsigned bz, unsigned shmem,
                               CUstream s, void **args, void **extra)
{
    cuLaunchKernel_params params = {f, gx, gy, gz, bx, by, bz, shmem, s, args, extra};
    sim_drv_site(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, &params, CUPTI_API_ENTER);
    work_on((cudaStream_t)s);
    sim_drv_site(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, &params, CUPTI_API_EXIT);
    return CUDA_SUCCESS;
}

EXPORT cudaError_t simrt_cudaStreamCreateWithPriority(cudaStream_t *s, unsigned int f, int p)
{
    sim_drv_call(CUPTI_DRIVER_TRACE_CBID_cuStreamCreateWithPriority);
    (void)f, (void)p;
    *s = (cudaStream_t)malloc(16);
    return *s ? cudaSuccess : cudaErrorMemoryAllocation;
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
    pthread_mutex_lock(&sim_lock);
    for (int i = 0; i < MAX_STREAMS; i++)
        on |= capturing_streams[i] && capturing_streams[i] == s;
    pthread_mutex_unlock(&sim_lock);
    return on;
}

static cudaError_t begin_capture(cudaStream_t s, enum cudaStreamCaptureMode m)
{
    if (is_capturing(s))
        return fail(cudaErrorIllegalState);
    simcuda_set_capturing(s, 1);
    pthread_mutex_lock(&sim_lock);
    for (int i = 0; i < MAX_STREAMS; i++)
        if (capturing_streams[i] == s)
            capture_mode[i] = m;
    pthread_mutex_unlock(&sim_lock);
    return cudaSuccess;
}

static cudaError_t end_capture(cudaStream_t s, cudaGraph_t *g)
{
    if (!is_capturing(s))
        return fail(cudaErrorIllegalState);
    bool invalid = false;
    pthread_mutex_lock(&sim_lock);
    for (int i = 0; i < MAX_STREAMS; i++)
        if (capturing_streams[i] == s)
            invalid = capture_invalid[i];
    pthread_mutex_unlock(&sim_lock);
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
    sim_drv_call(CUPTI_DRIVER_TRACE_CBID_cuStreamIsCapturing);
    *status = cudaStreamCaptureStatusNone;
    pthread_mutex_lock(&sim_lock);
    sim_st[current].capture_queries++;
    for (int i = 0; i < MAX_STREAMS; i++)
        if (capturing_streams[i] && capturing_streams[i] == s)
            *status = capture_invalid[i] ? cudaStreamCaptureStatusInvalidated
                                         : cudaStreamCaptureStatusActive;
    pthread_mutex_unlock(&sim_lock);
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
    pthread_mutex_lock(&sim_lock);
    for (int i = 0; i < nallocs; i++) {
        char *b = allocs[i].p;
        if ((char *)ptr >= b && (char *)ptr < b + allocs[i].size) {
            sim_handle sh = {SIM_HANDLE_MAGIC, (int32_t)getpid(), allocs[i].fd,
                             allocs[i].size};
            pthread_mutex_unlock(&sim_lock);
            memset(h, 0, sizeof(*h));
            memcpy(h->reserved, &sh, sizeof(sh));
            return cudaSuccess;
        }
    }
    pthread_mutex_unlock(&sim_lock);
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
    pthread_mutex_lock(&sim_lock);
    bool kept = false;
    for (int i = 0; i < 256 && !kept; i++)
        if (!imports[i].p)
            imports[i].p = m, imports[i].size = sh.size, kept = true;
    pthread_mutex_unlock(&sim_lock);
    if (!kept) {
        munmap(m, sh.size);
        return fail(cudaErrorMemoryAllocation);
    }
    *p = m;
    return cudaSuccess;
}

EXPORT cudaError_t simrt_cudaIpcCloseMemHandle(void *p)
{
    pthread_mutex_lock(&sim_lock);
    for (int i = 0; i < 256; i++) {
        if (imports[i].p == p) {
            munmap(p, imports[i].size);
            imports[i].p = NULL;
            pthread_mutex_unlock(&sim_lock);
            return cudaSuccess;
        }
    }
    pthread_mutex_unlock(&sim_lock);
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

/* ---- the driver API ---------------------------------------------------------
 * What a static runtime, a driver-API program, CuPy or XLA call, by the
 * driver's exported names, on the same state as the runtime calls above.
 * One context per device, its primary; the calling thread's is the
 * runtime's current device. */

static char contexts[SIM_MAX_DEV];

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
    sim_setup();
    char *p = (char *)c;
    return p >= contexts && p < contexts + sim_ndev ? (int)(p - contexts) : -1;
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
    pthread_mutex_lock(&sim_lock);
    sim_setup();
    pthread_mutex_unlock(&sim_lock);
    return CUDA_SUCCESS;
}
EXPORT CUresult cuDriverGetVersion(int *v) { *v = 13000; return CUDA_SUCCESS; }
EXPORT CUresult cuDeviceGetCount(int *n) { return from_rt(simrt_cudaGetDeviceCount(n)); }
EXPORT CUresult cuDeviceGet(CUdevice *d, int ordinal)
{
    sim_setup();
    if (ordinal < 0 || ordinal >= sim_ndev)
        return CUDA_ERROR_INVALID_DEVICE;
    *d = ordinal;
    return CUDA_SUCCESS;
}
EXPORT CUresult cuDeviceGetAttribute(int *v, CUdevice_attribute a, CUdevice d)
{
    (void)d;
    *v = (a == CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED &&
          !getenv("SIMCUDA_NO_VMM")) ||
         (a == CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED &&
          !getenv("SIMCUDA_NO_FD_HANDLES"));
    return CUDA_SUCCESS;
}
EXPORT CUresult cuDeviceGetPCIBusId(char *id, int len, CUdevice d)
{
    return from_rt(simrt_cudaDeviceGetPCIBusId(id, len, d));
}

EXPORT CUresult cuCtxGetCurrent(CUcontext *c)
{
    sim_setup();
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
    sim_drv_call(CUPTI_DRIVER_TRACE_CBID_cuCtxGetDevice);
    *d = current;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxSynchronize(void) { return from_rt(simrt_cudaDeviceSynchronize()); }

/* A context pushed: the one it replaced comes back at the pop (one deep,
 * as cupool uses it). */
static _Thread_local int pushed = -1;

EXPORT CUresult cuCtxPushCurrent_v2(CUcontext c)
{
    int d = ctx_device(c);
    if (d < 0 || pushed >= 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    pushed = current;
    current = d;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxPopCurrent_v2(CUcontext *c)
{
    if (pushed < 0)
        return CUDA_ERROR_INVALID_CONTEXT;
    if (c)
        *c = (CUcontext)&contexts[current];
    current = pushed;
    pushed = -1;
    return CUDA_SUCCESS;
}

/* Peer access: which device's memory each device may reach. */
static bool peer_on[SIM_MAX_DEV][SIM_MAX_DEV];

EXPORT CUresult cuDeviceCanAccessPeer(int *can, CUdevice d, CUdevice peer)
{
    sim_setup();
    *can = d != peer && d >= 0 && d < sim_ndev && peer >= 0 && peer < sim_ndev;
    return CUDA_SUCCESS;
}

EXPORT CUresult cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags)
{
    int owner = ctx_device(peer);
    if (owner < 0 || flags)
        return CUDA_ERROR_INVALID_VALUE;
    pthread_mutex_lock(&sim_lock);
    CUresult r = owner == current ? CUDA_ERROR_INVALID_DEVICE
                 : peer_on[current][owner] ? CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED
                                           : CUDA_SUCCESS;
    peer_on[current][owner] = true;
    pthread_mutex_unlock(&sim_lock);
    return r;
}

EXPORT CUresult cuDevicePrimaryCtxRetain(CUcontext *c, CUdevice d)
{
    sim_setup();
    if (d < 0 || d >= sim_ndev)
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
    return reset_device(d >= 0 && d < sim_ndev ? d : -1);
}

EXPORT CUresult cuCtxDestroy_v2(CUcontext c) { return reset_device(ctx_device(c)); }

EXPORT CUresult cuMemAlloc_v2(CUdeviceptr *p, size_t size)
{
    sim_drv_call(CUPTI_DRIVER_TRACE_CBID_cuMemAlloc_v2);
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

EXPORT CUresult cuGetErrorString(CUresult e, const char **s)
{
    *s = e == CUDA_SUCCESS               ? "no error"
         : e == CUDA_ERROR_OUT_OF_MEMORY ? "out of memory"
         : e == CUDA_ERROR_NOT_SUPPORTED ? "operation not supported"
                                         : "invalid argument";
    return CUDA_SUCCESS;
}

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
    {"cuCtxEnablePeerAccess", 4000, false, (void *)cuCtxEnablePeerAccess},
    {"cuCtxPushCurrent", 4000, false, (void *)cuCtxPushCurrent_v2},
    {"cuCtxPopCurrent", 4000, false, (void *)cuCtxPopCurrent_v2},
    {"cuDeviceCanAccessPeer", 4000, false, (void *)cuDeviceCanAccessPeer},
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
    {"cuMemExportToShareableHandle", 10020, false, (void *)cuMemExportToShareableHandle},
    {"cuMemImportFromShareableHandle", 10020, false, (void *)cuMemImportFromShareableHandle},
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
