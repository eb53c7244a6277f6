/* SPDX-License-Identifier: Apache-2.0 */
/*
 * rt_prog.c - scenarios run under LD_PRELOAD=libcupool.so, linked only
 * against a CUDA runtime: the simulated one (build/sim, -DSIMCUDA) on the
 * CPU, the real one on a GPU. `rt_prog NAME` runs one scenario and exits 0
 * if it held, 1 with a "FAIL:" line if not. test_shim.c runs them with the
 * environment each one needs.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>
#ifdef SIMCUDA
#include <cuda.h>
#include <cupti_callbacks.h>
#include <cupti_driver_cbid.h>
#include "simcuda.h"
#endif

#define MIB ((size_t)1 << 20)

/* Not declared by glibc's headers under _GNU_SOURCE, but exported. */
extern void (*bsd_signal(int sig, void (*h)(int)))(int);

#define CHECK(cond)                                                           \
    do {                                                                      \
        if (!(cond)) {                                                        \
            printf("FAIL: %s:%d: %s\n", __FILE__, __LINE__, #cond);           \
            exit(1);                                                          \
        }                                                                     \
    } while (0)

#define OK(call) CHECK((call) == cudaSuccess)

static void sleep_ms(int ms)
{
    struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

/* Two 1 MiB blocks fill one 2 MiB small segment, so a freed one can only
 * be reused through a fence. */
static void fill_segment(void **a, void **b)
{
    OK(cudaMalloc(a, MIB));
    OK(cudaMalloc(b, MIB));
    CHECK((char *)*b == (char *)*a + MIB);
}

/* Runs fn in a second thread (which gets its own shard) and waits. */
static void in_thread(void *(*fn)(void *), void *arg)
{
    pthread_t t;
    CHECK(pthread_create(&t, NULL, fn, arg) == 0);
    pthread_join(t, NULL);
}

#ifdef SIMCUDA
static simcuda_stats sim(int dev)
{
    simcuda_stats s;
    simcuda_get_stats(dev, &s);
    return s;
}

/* 10 000 pairs reach the driver a handful of times. */
static int pairs(void)
{
    unsigned long before = sim(0).mallocs;
    for (int i = 0; i < 10000; i++) {
        void *p;
        OK(cudaMalloc(&p, 4096 + (size_t)(i % 7) * 512));
        OK(cudaFree(p));
    }
    unsigned long calls = sim(0).mallocs - before;
    printf("driver mallocs for 10000 pairs: %lu\n", calls);
    CHECK(calls <= 4);
    return 0;
}

/* A fence exactly when a block freed after the last fence is reused. */
static int fence(void)
{
    cudaStream_t nb;
    OK(cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking));
    void *a, *b, *c, *d;
    fill_segment(&a, &b);
    simcuda_stats s0 = sim(0);
    OK(cudaFree(a));
    CHECK(sim(0).event_records == s0.event_records); /* free never fences */
    OK(cudaMalloc(&c, MIB));
    CHECK(c == a);
    simcuda_stats s1 = sim(0);
    /* One barrier: record on the non-blocking stream, legacy waits; record
     * on legacy, the non-blocking stream waits. */
    CHECK(s1.event_records - s0.event_records == 2);
    CHECK(s1.legacy_records - s0.legacy_records == 1);
    CHECK(s1.stream_waits - s0.stream_waits == 2);
    OK(cudaMalloc(&d, MIB)); /* nothing dirty: a new segment, no fence */
    CHECK(sim(0).event_records == s1.event_records);
    /* Destroyed, the stream's queued work goes on: an event recorded on it
     * now, which the next fence waits for. */
    OK(cudaStreamDestroy(nb));
    CHECK(sim(0).event_records == s1.event_records + 1);
    OK(cudaFree(c));
    void *e, *f;
    OK(cudaMalloc(&e, MIB)); /* the clean rest of d's segment: no fence */
    CHECK(sim(0).event_records == s1.event_records + 1);
    OK(cudaMalloc(&f, MIB)); /* only c's dirty block fits: fence */
    CHECK(f == c);
    simcuda_stats s2 = sim(0);
    /* The stream is gone: legacy waits for its last event, records one. */
    CHECK(s2.event_records - s1.event_records == 2);
    CHECK(s2.stream_waits == s1.stream_waits + 1);
    return 0;
}

/* CUPOOL_FENCE=poll: a block is reused with no stream waiting once the
 * work before its fence has completed; with only the legacy stream still
 * busy, by making the non-blocking streams wait for it; with a non-blocking
 * stream busy (an all-reduce in flight), rather than grow, by making the
 * legacy stream wait for that stream's work before the fence only. */
static int fence_poll(void)
{
    cudaStream_t nb, nb2;
    void *a, *b, *c, *d, *e;
    fill_segment(&a, &b);
    /* No non-blocking stream yet and the legacy stream busy: reused with
     * nothing to wait and no query (the fence is done as recorded); a
     * non-blocking stream made next waits for that work. */
    simcuda_set_busy(cudaStreamLegacy, 1);
    OK(cudaFree(a));
    simcuda_stats s00 = sim(0);
    OK(cudaMalloc(&c, MIB));
    CHECK(c == a);
    CHECK(sim(0).stream_waits == s00.stream_waits);
    CHECK(sim(0).event_records == s00.event_records + 1);
    CHECK(sim(0).event_queries == s00.event_queries);
    OK(cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking));
    CHECK(sim(0).stream_waits == s00.stream_waits + 1);
    simcuda_set_busy(cudaStreamLegacy, 0);
    simcuda_set_busy(nb, 1);
    OK(cudaFree(c));
    simcuda_set_busy(nb, 0); /* done before the pool looks */
    simcuda_stats s0 = sim(0);
    OK(cudaMalloc(&c, MIB));
    CHECK(c == a);
    CHECK(sim(0).stream_waits == s0.stream_waits);
    CHECK(sim(0).event_records - s0.event_records == 2); /* nb's and legacy's */
    CHECK(sim(0).mallocs == s0.mallocs);
    /* Only the legacy stream busy: the non-blocking stream waits for it. */
    simcuda_set_busy(cudaStreamLegacy, 1);
    OK(cudaFree(c));
    simcuda_stats s1 = sim(0);
    OK(cudaMalloc(&d, MIB));
    CHECK(d == a);
    CHECK(sim(0).stream_waits == s1.stream_waits + 1);
    CHECK(sim(0).mallocs == s1.mallocs);
    /* A non-blocking stream made now is ordered after that work too. */
    OK(cudaStreamCreateWithFlags(&nb2, cudaStreamNonBlocking));
    CHECK(sim(0).stream_waits == s1.stream_waits + 2);
    simcuda_set_busy(cudaStreamLegacy, 0);
    /* nb busy: forced. The legacy stream waits for nb's event (nb2's has
     * completed), records one, and both non-blocking streams wait for it. */
    simcuda_set_busy(nb, 1);
    OK(cudaFree(d));
    simcuda_stats s2 = sim(0);
    OK(cudaMalloc(&e, MIB));
    CHECK(e == a);
    CHECK(sim(0).stream_waits == s2.stream_waits + 3);
    CHECK(sim(0).mallocs == s2.mallocs);
    simcuda_set_busy(nb, 0);
    OK(cudaStreamDestroy(nb));
    OK(cudaStreamDestroy(nb2));
    return 0;
}

/* The simulated NCCL (build/sim/libnccl.so.2, beside this program's
 * rt/: by path, since a sanitizer's dlopen does not search this program's
 * run path), reached as a program linked against NCCL reaches it: through
 * the global scope, where the preloaded cupool comes first. */
typedef int (*nccl_allreduce_fn)(const void *, void *, size_t, int, int, void *, void *);
typedef int (*nccl_allgather_fn)(const void *, void *, size_t, int, void *, void *);
typedef int (*nccl_void_fn)(void);
/* dlopen of one of the simulated libraries, beside this program's rt/. */
static void *sim_lib(const char *name, int flags)
{
    char path[4096];
    ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 64);
    CHECK(n > 0);
    path[n] = '\0';
    snprintf(strrchr(path, '/'), 64, "/../sim/%s", name);
    void *lib = dlopen(path, flags);
    CHECK(lib != NULL);
    return lib;
}

static void *nccl(const char *name)
{
    static void *lib;
    if (!lib) /* SIMNCCL_LIB: another build of it (libnccl-nosuspend.so) */
        lib = sim_lib(getenv("SIMNCCL_LIB") ? getenv("SIMNCCL_LIB") : "libnccl.so.2",
                      RTLD_NOW | RTLD_GLOBAL);
    void *f = dlsym(RTLD_DEFAULT, name);
    CHECK(f != NULL);
    return f;
}

/* Frees p with nb busy, then asks for size bytes: the block comes back
 * with the given number of stream waits (0: nb was left out of the fence;
 * 2: the legacy stream waited for nb, and nb for it), or a new one if the
 * pool grew instead. Returns the block. */
static void *reuse(void *p, size_t size, cudaStream_t nb, unsigned long waits)
{
    simcuda_set_busy(nb, 1);
    OK(cudaFree(p));
    simcuda_stats s0 = sim(0);
    void *q;
    OK(cudaMalloc(&q, size));
    printf("reuse %zu: %s, %lu stream waits\n", size, q == p ? "same" : "other",
           sim(0).stream_waits - s0.stream_waits);
    CHECK(q == p);
    CHECK(sim(0).stream_waits - s0.stream_waits == waits);
    simcuda_set_busy(nb, 0);
    return q;
}

/* Queues work on s (a memset of p): it must make the given number of
 * stream waits, and follow the legacy stream's latest event (what a fence
 * that ordered the streams recorded last). */
static void paid_by_work(cudaStream_t s, void *p, unsigned long waits)
{
    simcuda_stats s0 = sim(0);
    OK(cudaMemsetAsync(p, 0, MIB, s));
    unsigned long legacy, seen = simcuda_work_order(s, &legacy);
    printf("work on %p: %lu stream waits, follows legacy record %lu of %lu\n", (void *)s,
           sim(0).stream_waits - s0.stream_waits, seen, legacy);
    CHECK(sim(0).stream_waits - s0.stream_waits == waits);
    CHECK(seen == legacy);
}

static void program_subscribes(void);

/* CUPOOL_FENCE=poll, CUPOOL_CUPTI=1: a device reset destroys its streams;
 * a stream marked before it is in no fence after it (a fence recording on
 * it would fail on real CUDA, and keep failing). */
static int fence_reset(void)
{
    cudaStream_t nb;
    void *a, *b;
    fill_segment(&a, &b);
    OK(cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking));
    OK(cudaMemsetAsync(a, 0, MIB, nb)); /* marked */
    OK(cudaDeviceReset());
    fill_segment(&a, &b);
    OK(cudaMemsetAsync(a, 0, MIB, cudaStreamLegacy));
    simcuda_stats s0 = sim(0);
    a = reuse(a, MIB, cudaStreamLegacy, 0);
    printf("after the reset: %lu event records\n", sim(0).event_records - s0.event_records);
    CHECK(sim(0).event_records - s0.event_records == 1); /* the legacy stream's */
    return 0;
}

/* CUPOOL_FENCE=poll, CUPOOL_CUPTI=1: a non-blocking stream with no work
 * queued since a fence covered it is left out of the next (as the idle
 * streams of PyTorch's stream pool), however busy it was before; work on
 * it, or a call CUPTI reports that cupool cannot place, brings it back. */
static int fence_idle(void)
{
    cudaStream_t early, nb;
    void *a, *b;
    /* Work queued before CUPTI watched went unseen: included. */
    OK(cudaStreamCreateWithFlags(&early, cudaStreamNonBlocking));
    CHECK(cuLaunchKernel(NULL, 1, 1, 1, 1, 1, 1, 0, (CUstream)early, NULL, NULL) == CUDA_SUCCESS);
    fill_segment(&a, &b); /* the first pool: CUPTI watches from here */
    a = reuse(a, MIB, early, 2);
    a = reuse(a, MIB, early, 0);
    OK(cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking));
    simcuda_stats s0 = sim(0);
    a = reuse(a, MIB, nb, 0); /* new and idle: only the legacy stream's event */
    CHECK(sim(0).event_records - s0.event_records == 1);
    /* Left out, but there: with the legacy stream's work running, both
     * non-blocking streams owe a wait for it as the block is reused; none
     * waits yet. */
    OK(cudaMemsetAsync(a, 0, MIB, cudaStreamLegacy));
    a = reuse(a, MIB, cudaStreamLegacy, 0);
    /* Work on one pays first, once: it follows the fence's event. */
    paid_by_work(nb, a, 1);
    paid_by_work(nb, a, 0);
    /* Forced from here: the legacy stream waits for nb, and both
     * non-blocking streams for the legacy stream. */
    OK(cudaMemsetAsync(a, 0, MIB, nb));
    a = reuse(a, MIB, nb, 3);
    a = reuse(a, MIB, nb, 0);
    /* cuStreamBatchMemOp, reported without its parameters: any stream. */
    simcuda_report_call(CUPTI_DRIVER_TRACE_CBID_cuStreamBatchMemOp);
    a = reuse(a, MIB, nb, 3);
    a = reuse(a, MIB, nb, 0);
    /* Both owe again; a call whose stream cannot be read makes both pay
     * (FENCE_IDLE_HANDOVER=1: the program takes CUPTI instead, and both
     * pay as cupool lets it go). */
    OK(cudaMemsetAsync(a, 0, MIB, cudaStreamLegacy));
    a = reuse(a, MIB, cudaStreamLegacy, 0);
    simcuda_stats s1 = sim(0);
    if (getenv("FENCE_IDLE_HANDOVER"))
        program_subscribes();
    else
        simcuda_report_call(CUPTI_DRIVER_TRACE_CBID_cuStreamBatchMemOp);
    CHECK(sim(0).stream_waits - s1.stream_waits == 2);
    paid_by_work(early, a, 0);
    paid_by_work(nb, a, 0);
    OK(cudaStreamDestroy(nb));
    OK(cudaStreamDestroy(early));
    return 0;
}

/* CUPOOL_FENCE=poll, CUPOOL_CUPTI=1: a stream whose queued work is only
 * collectives is left out of a fence unless a block freed since overlaps
 * their buffers, or other work came to it (comm.h). */
/* The simulated NCCL's calls the fence scenarios make. */
typedef struct nccl_calls {
    nccl_allreduce_fn allreduce;
    nccl_allgather_fn allgather;
    nccl_void_fn group_start, group_end;
    int (*init_all)(void **, int, const int *);
    int (*destroy)(void *);
} nccl_calls;

static nccl_calls nccl_lookup(void)
{
    return (nccl_calls){
        .allreduce = (nccl_allreduce_fn)nccl("ncclAllReduce"),
        .allgather = (nccl_allgather_fn)nccl("ncclAllGather"),
        .group_start = (nccl_void_fn)nccl("ncclGroupStart"),
        .group_end = (nccl_void_fn)nccl("ncclGroupEnd"),
        .init_all = (int (*)(void **, int, const int *))nccl("ncclCommInitAll"),
        .destroy = (int (*)(void *))nccl("ncclCommDestroy"),
    };
}

/* The CPU cost of NCCL's calls, with or without cupool's wrappers before
 * the simulated NCCL (scripts/bench-shim runs both): NCALLS (default
 * 200000) groups of two all-reduces on one stream, then as many lone
 * all-reduces. Prints "GROUP SINGLE", ns per group and per lone call, each
 * the best of 5 timed passes. */
static int ncclcalls(void)
{
    nccl_calls n = nccl_lookup();
    void *comm, *buf;
    cudaStream_t s;
    long calls = getenv("NCALLS") ? atol(getenv("NCALLS")) : 200000;
    CHECK(calls > 0);
    CHECK(n.init_all(&comm, 1, (int[]){0}) == 0);
    OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    OK(cudaMalloc(&buf, MIB));
    double best[2] = {1e30, 1e30};
    for (int pass = 0; pass < 5; pass++)
        for (int lone = 0; lone < 2; lone++) {
            struct timespec t0, t1;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            for (long i = 0; i < calls; i++) {
                if (!lone)
                    CHECK(n.group_start() == 0);
                CHECK(n.allreduce(buf, buf, 1, 7, 0, comm, s) == 0);
                if (!lone) {
                    CHECK(n.allreduce(buf, buf, 1, 7, 0, comm, s) == 0);
                    CHECK(n.group_end() == 0);
                }
            }
            clock_gettime(CLOCK_MONOTONIC, &t1);
            double ns = ((double)(t1.tv_sec - t0.tv_sec) * 1e9 +
                         (double)(t1.tv_nsec - t0.tv_nsec)) / (double)calls;
            best[lone] = ns < best[lone] ? ns : best[lone];
        }
    printf("%.1f %.1f\n", best[0], best[1]);
    OK(cudaFree(buf));
    OK(cudaStreamDestroy(s));
    CHECK(n.destroy(comm) == 0);
    return 0;
}

/* Reuses w (64 MiB) with work before, so that the reuse fences. */
static void *fenced_reuse(void *w)
{
    OK(cudaMemsetAsync(w, 0, MIB, 0));
    OK(cudaFree(w));
    OK(cudaMalloc(&w, 64 * MIB));
    return w;
}

static int fence_comm(void)
{
    nccl_calls n = nccl_lookup();
    nccl_allreduce_fn allreduce = n.allreduce;
    nccl_allgather_fn allgather = n.allgather;
    nccl_void_fn group_start = n.group_start, group_end = n.group_end;
    cudaStream_t nb;
    void *comm, *bucket, *out, *a, *b;
    OK(cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking));
    /* The communicator's own 1 MiB, and a block beside it that fills
     * their segment: no clean 1 MiB is left but those freed below. */
    CHECK(n.init_all(&comm, 1, (int[]){0}) == 0);
    /* WARM_FENCES=N: N reuses of a block of its own, with work in each, so
     * that each fences (CUPOOL_CUPTI=auto starts at the 8th). */
    void *w;
    OK(cudaMalloc(&w, 64 * MIB));
    for (int i = 0, k = getenv("WARM_FENCES") ? atoi(getenv("WARM_FENCES")) : 0; i < k; i++)
        w = fenced_reuse(w);
    void *pad;
    OK(cudaMalloc(&pad, MIB));
    fill_segment(&a, &b);
    OK(cudaMalloc(&bucket, 4 * MIB));
    OK(cudaMalloc(&out, 4 * MIB));
    /* Work on nb before its first collective: its past is unknown, so
     * the first fence includes it. */
    OK(cudaMemsetAsync(a, 0, MIB, nb));
    CHECK(allreduce(bucket, bucket, MIB, 7, 0, comm, nb) == 0);
    a = reuse(a, MIB, nb, 2);
    /* An all-reduce in flight on other memory: left out, no stream waits. */
    CHECK(allreduce(bucket, bucket, MIB, 7, 0, comm, nb) == 0);
    a = reuse(a, MIB, nb, 0);
    a = reuse(a, MIB, nb, 0);
    /* Other work on nb (a memset of the block): included again. */
    OK(cudaMemsetAsync(a, 0, MIB, nb));
    a = reuse(a, MIB, nb, 2);
    a = reuse(a, MIB, nb, 0);
    /* The all-reduce's own buffer, freed while it runs: included. */
    CHECK(allreduce(bucket, bucket, MIB, 7, 0, comm, nb) == 0);
    bucket = reuse(bucket, 4 * MIB, nb, 2);
    /* A grouped all-gather names its buffers at the group's end. */
    CHECK(group_start() == 0);
    CHECK(allgather(bucket, out, MIB, 7, comm, nb) == 0);
    CHECK(group_end() == 0);
    a = reuse(a, MIB, nb, 0);
    out = reuse(out, 4 * MIB, nb, 2);
    /* NCCL's own memory, freed inside ncclCommDestroy: every comm stream is
     * included in the next fence. */
    CHECK(allreduce(bucket, bucket, MIB, 7, 0, comm, nb) == 0);
    CHECK(n.destroy(comm) == 0);
    a = reuse(a, MIB, nb, 2);
    OK(cudaStreamDestroy(nb));
    return 0;
}

/* CUPOOL_VMM or CUPOOL_STITCH on two devices: a segment grants access to
 * its device, and to each device the program enabled peer access to it
 * from, through the runtime or the driver: segments mapped before the
 * enabling and after. Prints each block's devices (a bit each). */
static int vmm_peer(void)
{
    void *a, *b, *c;
    OK(cudaSetDevice(1));
    OK(cudaMalloc(&c, 8 * MIB));
    unsigned c0 = simcuda_vmm_access((uintptr_t)c);
    /* Device 1 reaches device 0, which has no pool yet. */
    OK(cudaDeviceEnablePeerAccess(0, 0));
    CHECK(cudaDeviceEnablePeerAccess(0, 0) == cudaErrorPeerAccessAlreadyEnabled);
    cudaGetLastError();
    OK(cudaSetDevice(0));
    OK(cudaMalloc(&a, 8 * MIB));
    OK(cudaMalloc(&b, 64 * MIB)); /* a segment of its own */
    unsigned a0 = simcuda_vmm_access((uintptr_t)a), b0 = simcuda_vmm_access((uintptr_t)b);
    /* Through the driver: device 0 reaches device 1, whose segment is
     * mapped already. */
    CUcontext ctx1;
    CHECK(cuDevicePrimaryCtxRetain(&ctx1, 1) == CUDA_SUCCESS);
    CHECK(cuCtxEnablePeerAccess(ctx1, 0) == CUDA_SUCCESS);
    unsigned c1 = simcuda_vmm_access((uintptr_t)c);
    printf("access: a %u, b %u, c %u then %u\n", a0, b0, c0, c1);
    CHECK(a0 == 3 && b0 == 3 && c0 == 2 && c1 == 3);
    OK(cudaFree(a));
    OK(cudaFree(b));
    OK(cudaSetDevice(1));
    OK(cudaFree(c));
    return 0;
}

/* Threads reusing small blocks in their own shards at once, each reuse
 * fencing (CUPOOL_FENCE_INTERVAL=1) while an event record takes long
 * (SIMCUDA_RECORD_US): a thread that finds another's fence begun after its
 * free shares it. Prints the fences the pools asked for and the records
 * that reached CUDA. */
enum { SHARE_THREADS = 4, SHARE_PAIRS = 100 };

static void *share_worker(void *arg)
{
    (void)arg;
    void *p, *keep;
    OK(cudaMalloc(&keep, 4096)); /* the segment stays */
    for (int i = 0; i < SHARE_PAIRS; i++) {
        OK(cudaMalloc(&p, 4096));
        OK(cudaFree(p));
    }
    OK(cudaFree(keep));
    return NULL;
}

static int fence_share(void)
{
    pthread_t t[SHARE_THREADS];
    unsigned long r0 = sim(0).legacy_records;
    for (int i = 0; i < SHARE_THREADS; i++)
        CHECK(pthread_create(&t[i], NULL, share_worker, NULL) == 0);
    for (int i = 0; i < SHARE_THREADS; i++)
        pthread_join(t[i], NULL);
    unsigned long records = sim(0).legacy_records - r0;
    /* Each thread's first pair takes fresh memory; every later reuse asks
     * for a fence. */
    int asked = SHARE_THREADS * (SHARE_PAIRS - 1);
    printf("fences asked %d, records %lu\n", asked, records);
    CHECK(records + 10 < (unsigned long)asked);
    return 0;
}

/* CUPOOL_CUPTI=auto: CUPTI starts in the middle of an NCCL group, whose
 * all-reduce named its buffer before anyone watched; a fence covers the
 * comm stream before the group ends and queues the all-reduce there. The
 * buffer, freed while that all-reduce runs, must not be reused without
 * the comm stream's work ordered first. */
static int comm_straddle(void)
{
    nccl_calls n = nccl_lookup();
    cudaStream_t nb;
    void *comm, *bucket, *w, *x;
    OK(cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking));
    CHECK(n.init_all(&comm, 1, (int[]){0}) == 0);
    OK(cudaMalloc(&bucket, 4 * MIB));
    OK(cudaMalloc(&w, 64 * MIB));
    for (int i = 0; i < 7; i++)
        w = fenced_reuse(w);
    CHECK(n.group_start() == 0);
    CHECK(n.allreduce(bucket, bucket, MIB, 7, 0, comm, nb) == 0); /* unwatched */
    w = fenced_reuse(w);      /* the 8th fence: CUPTI is due */
    OK(cudaMalloc(&x, 4096)); /* and starts here, marking every stream */
    w = fenced_reuse(w);      /* a fence covers nb again */
    CHECK(n.group_end() == 0);  /* the all-reduce's work goes to nb */
    bucket = reuse(bucket, 4 * MIB, nb, 2);
    CHECK(n.destroy(comm) == 0);
    OK(cudaFree(x));
    OK(cudaFree(w));
    OK(cudaFree(bucket));
    OK(cudaStreamDestroy(nb));
    return 0;
}

/* A non-blocking stream destroyed with its work still queued (it goes
 * on: CUDA frees the stream after it): real cudaFree would wait for that
 * work, so the next fence orders after it, whatever the mode. */
static int fence_destroyed(void)
{
    cudaStream_t nb;
    void *a, *b, *c;
    OK(cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking));
    fill_segment(&a, &b);
    simcuda_set_busy(nb, 1); /* its work on a still runs */
    OK(cudaStreamDestroy(nb));
    OK(cudaFree(a));
    simcuda_stats s0 = sim(0);
    OK(cudaMalloc(&c, MIB));
    printf("reused %s, %lu stream waits, %lu syncs\n", c == a ? "at once" : "not",
           sim(0).stream_waits - s0.stream_waits, sim(0).syncs - s0.syncs);
    CHECK(c != a || sim(0).stream_waits > s0.stream_waits || sim(0).syncs > s0.syncs);
    simcuda_set_busy(nb, 0);
    return 0;
}

/* CUPOOL_FENCE=poll under a cap of one segment: the pool cannot grow, and
 * the fence is forced: the legacy stream waits for the busy stream, the
 * busy stream for the legacy stream. */
static int fence_poll_cap(void)
{
    cudaStream_t nb;
    OK(cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking));
    void *a, *b, *c;
    fill_segment(&a, &b);
    simcuda_set_busy(nb, 1);
    OK(cudaFree(a));
    simcuda_stats s0 = sim(0);
    OK(cudaMalloc(&c, MIB));
    CHECK(c == a);
    CHECK(sim(0).mallocs == s0.mallocs);
    /* The barrier: legacy waits for nb, nb for legacy. */
    CHECK(sim(0).stream_waits == s0.stream_waits + 2);
    simcuda_set_busy(nb, 0);
    OK(cudaStreamDestroy(nb));
    return 0;
}

/* CUPOOL_FENCE=sync: a device synchronization instead of events. */
static int fence_sync(void)
{
    void *a, *b, *c;
    fill_segment(&a, &b);
    OK(cudaFree(a));
    simcuda_stats s0 = sim(0);
    OK(cudaMalloc(&c, MIB));
    CHECK(c == a);
    CHECK(sim(0).syncs - s0.syncs == 1);
    CHECK(sim(0).event_records == s0.event_records);
    return 0;
}

/* A capture in progress: no fence is issued, fresh memory is used. Once
 * it ended, fences come back, without the capture checks. */
static int capture(void)
{
    void *a, *b, *c, *d;
    cudaStream_t s;
    cudaGraph_t g;
    OK(cudaStreamCreate(&s));
    fill_segment(&a, &b);
    OK(cudaFree(a));
    OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    simcuda_stats s0 = sim(0);
    OK(cudaMalloc(&c, MIB));
    CHECK(c != a);
    CHECK(sim(0).event_records == s0.event_records);
    CHECK(sim(0).syncs == s0.syncs);
    CHECK(sim(0).mallocs == s0.mallocs + 1);
    CHECK(sim(0).capture_queries > s0.capture_queries); /* it looked */
    CHECK(cudaStreamEndCapture(s, &g) == cudaSuccess);
    CHECK(cudaStreamEndCapture(s, &g) != cudaSuccess); /* nothing to end */
    void *e;
    OK(cudaMalloc(&e, MIB)); /* the clean rest of c's segment */
    OK(cudaFree(c));
    s0 = sim(0);
    OK(cudaMalloc(&d, MIB)); /* only a and c, dirty, fit: fence */
    CHECK(d == a || d == c);
    CHECK(sim(0).legacy_records == s0.legacy_records + 1);
    CHECK(sim(0).capture_queries == s0.capture_queries);
    void *f;
    OK(cudaMalloc(&f, MIB)); /* the other of a and c, clean since the fence */
    /* A capture that failed to begin is not counted. */
    OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed) != cudaSuccess);
    OK(cudaStreamEndCapture(s, &g));
    OK(cudaFree(d));
    s0 = sim(0);
    OK(cudaMalloc(&d, MIB)); /* only d, dirty, fits: fence */
    CHECK(sim(0).legacy_records == s0.legacy_records + 1);
    CHECK(sim(0).capture_queries == s0.capture_queries);
    OK(cudaStreamDestroy(s));
    return 0;
}


typedef struct job { size_t size; void *p; cudaError_t err; } job;

static void *alloc_job(void *arg)
{
    job *j = arg;
    j->err = cudaMalloc(&j->p, j->size);
    return NULL;
}

static void *alloc_two_jobs(void *arg)
{
    job *j = arg;
    void *second;
    j->err = cudaMalloc(&j->p, j->size);
    if (j->err == cudaSuccess)
        j->err = cudaMalloc(&second, j->size);
    return NULL;
}

/* Small requests of different threads come from different shards (with
 * CUPOOL_SHARDS=1, from one pool), and a free from any thread finds the
 * block's shard. Prints how many segments the driver gave. */
static int shards(void)
{
    void *a;
    OK(cudaMalloc(&a, 4096)); /* this thread's shard: a 2 MiB segment */
    job j = {.size = 4096};
    in_thread(alloc_job, &j);  /* another thread: another shard */
    OK(j.err);
    printf("driver segments: %lu\n", sim(0).mallocs);
    OK(cudaFree(j.p));         /* its block, freed here */
    CHECK(cudaFree(j.p) == cudaErrorInvalidValue);
    OK(cudaFree(a));
    return 0;
}

/* Under CUPOOL_MAX_RESERVED=4M: two threads hold 2 MiB each (the cap), so
 * a fifth MiB fails; once this thread frees its blocks, the other thread's
 * request succeeds by taking back this thread's idle segment. */
static int shards_cap(void)
{
    void *mine[2];
    OK(cudaMalloc(&mine[0], MIB));
    OK(cudaMalloc(&mine[1], MIB));
    job two = {.size = MIB}, t3 = {.size = MIB};
    in_thread(alloc_two_jobs, &two); /* one thread, one shard, 2 MiB */
    OK(two.err);
    CHECK(sim(0).used == 4 * MIB);
    in_thread(alloc_job, &t3);
    CHECK(t3.err == cudaErrorMemoryAllocation);
    OK(cudaFree(mine[0]));
    OK(cudaFree(mine[1]));
    in_thread(alloc_job, &t3);
    OK(t3.err);
    CHECK(sim(0).used <= 4 * MIB);
    return 0;
}

/* SIGUSR1 returns idle segments: the driver sees the frees. */
static int flush(void)
{
    void *p[8];
    for (int i = 0; i < 8; i++)
        OK(cudaMalloc(&p[i], 3 * MIB));
    for (int i = 0; i < 8; i++)
        OK(cudaFree(p[i]));
    unsigned long frees = sim(0).frees;
    CHECK(sim(0).used >= 8 * 4 * MIB);
    raise(SIGUSR1);
    for (int i = 0; i < 200 && sim(0).used; i++)
        sleep_ms(10);
    printf("driver frees after SIGUSR1: %lu, still held %llu\n",
           sim(0).frees - frees, sim(0).used);
    CHECK(sim(0).frees - frees == 8);
    CHECK(sim(0).used == 0);
    return 0;
}

/* A pointer the pool does not own reaches the real cudaFree. */
static int foreign(void)
{
    void *m;
    OK(cudaMallocManaged(&m, 4096, cudaMemAttachGlobal));
    unsigned long frees = sim(0).frees;
    OK(cudaFree(m));
    CHECK(sim(0).frees == frees + 1);
    return 0;
}

/* cudaDeviceReset drops the pool without freeing; allocation goes on. */
static int reset(void)
{
    void *a;
    OK(cudaMalloc(&a, 4096));
    unsigned long frees = sim(0).frees;
    OK(cudaDeviceReset());
    CHECK(sim(0).frees == frees); /* the reset freed it, not the pool */
    CHECK(sim(0).used == 0);
    OK(cudaMalloc(&a, 4096));
    OK(cudaFree(a));
    return 0;
}

/* Two devices: each has its pool; a free finds the right one from any. */
static int multidev(void)
{
    void *a, *b;
    OK(cudaSetDevice(0));
    OK(cudaMalloc(&a, 4096));
    OK(cudaSetDevice(1));
    OK(cudaMalloc(&b, 4096));
    CHECK(sim(1).mallocs == 1);
    OK(cudaFree(a)); /* device 1 current, device 0's block */
    OK(cudaSetDevice(0));
    OK(cudaFree(b));
    CHECK(sim(0).bad_frees == 0 && sim(1).bad_frees == 0);
    CHECK(sim(0).frees == 0 && sim(1).frees == 0); /* both cached */
    return 0;
}
#endif /* SIMCUDA */

/* A cap: allocations fail cleanly past it, with the report. */
static int cap(void)
{
    void *p[64];
    int n = 0;
    cudaError_t e = cudaSuccess;
    while (n < 64 && (e = cudaMalloc(&p[n], 3 * MIB)) == cudaSuccess)
        n++;
    printf("allocated %d blocks of 3 MiB under the cap\n", n);
    CHECK(e == cudaErrorMemoryAllocation);
    CHECK(cudaGetLastError() == cudaSuccess || 1);
    size_t free_b, total;
    OK(cudaMemGetInfo(&free_b, &total));
    printf("cudaMemGetInfo under the cap: free %zu total %zu\n", free_b, total);
    CHECK(total == 16 * MIB);
    CHECK(free_b <= total - (size_t)n * 4 * MIB);
    for (int i = 0; i < n; i++)
        OK(cudaFree(p[i]));
    OK(cudaMemGetInfo(&free_b, &total));
    CHECK(free_b == total);
    return 0;
}

/* Waits up to 20 s for file path to exist: 0, or -1. */
static int wait_path(const char *path)
{
    for (int i = 0; i < 2000; i++) {
        if (access(path, F_OK) == 0)
            return 0;
        usleep(10000);
    }
    return -1;
}

/* Phases taken in turn with another process (test_shim's group tests):
 * PHASES phases of PHASE_MIB MiB each, in 4 MiB blocks allocated and
 * freed (the cache keeps them). After its phase n a process touches
 * $PHASE_DIR/<PHASE_ME>.<n>; the first (PHASE_FIRST=1) waits for the
 * other's n-1 before phase n, the second for the other's n. Prints what
 * each phase got; exit 0 if every phase got all of it. */
static int phases(void)
{
    const char *dir = getenv("PHASE_DIR"), *me = getenv("PHASE_ME"),
               *other = getenv("PHASE_OTHER");
    int n = atoi(getenv("PHASES") ? getenv("PHASES") : "4");
    int blocks = atoi(getenv("PHASE_MIB") ? getenv("PHASE_MIB") : "60") / 4;
    bool first = getenv("PHASE_FIRST") && atoi(getenv("PHASE_FIRST"));
    char path[512];
    void *p[256];
    int ok = 0;
    for (int k = 0; k < n; k++) {
        snprintf(path, sizeof(path), "%s/%s.%d", dir, other, first ? k - 1 : k);
        if ((k > 0 || !first) && wait_path(path)) {
            printf("phase %d: the other process never finished its phase\n", k);
            return 1;
        }
        int got = 0;
        while (got < blocks && got < 256 && cudaMalloc(&p[got], 4 * MIB) == cudaSuccess)
            got++;
        printf("phase %d: %d of %d blocks\n", k, got, blocks);
        ok += got == blocks;
        for (int i = 0; i < got; i++)
            cudaFree(p[i]);
        snprintf(path, sizeof(path), "%s/%s.%d", dir, me, k);
        close(open(path, O_WRONLY | O_CREAT, 0600));
    }
    fflush(stdout);
    return ok == n ? 0 : 1;
}

static uint64_t unix_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

/* Allocates mib MiB in one block into *p after touching
 * $TURN_DIR/<TURN_ME>.<tag>: 0, or -1 (said with the time it took). */
static int turn_take(void **p, int mib, const char *tag)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s.%s", getenv("TURN_DIR"), getenv("TURN_ME"), tag);
    close(open(path, O_WRONLY | O_CREAT, 0600));
    uint64_t t0 = unix_ns();
    if (cudaMalloc(p, (size_t)mib * MIB) == cudaSuccess)
        return 0;
    printf("refused after %lu ms\n", (unsigned long)((unix_ns() - t0) / 1000000u));
    fflush(stdout);
    return -1;
}

/* One turn on a group's budget (test_shim's waiting tests): touches
 * $TURN_DIR/<TURN_ME>.asking, allocates TURN_MIB MiB (default 60) in one
 * block, prints "got T" (CLOCK_REALTIME ns) and touches <TURN_ME>.got;
 * with TURN_MORE_MIB, once the file TURN_MORE_AFTER exists, touches
 * <TURN_ME>.more and allocates that much more; holds the blocks
 * TURN_HOLD_MS ms (default 500; or, with TURN_UNTIL, until that file
 * exists), prints "freeing T", frees them (to cupool's cache) and stays
 * TURN_LINGER_MS ms more. Exit 0 if it got every block; 1, with "refused
 * after N ms", if one was refused. */
static int turn(void)
{
    const char *dir = getenv("TURN_DIR"), *me = getenv("TURN_ME"), *until = getenv("TURN_UNTIL");
    int mib = atoi(getenv("TURN_MIB") ? getenv("TURN_MIB") : "60");
    int more = atoi(getenv("TURN_MORE_MIB") ? getenv("TURN_MORE_MIB") : "0");
    int hold_ms = atoi(getenv("TURN_HOLD_MS") ? getenv("TURN_HOLD_MS") : "500");
    int linger_ms = atoi(getenv("TURN_LINGER_MS") ? getenv("TURN_LINGER_MS") : "0");
    char path[512];
    void *p[2] = {NULL, NULL};
    if (turn_take(&p[0], mib, "asking"))
        return 1;
    printf("got %lu\n", (unsigned long)unix_ns());
    fflush(stdout);
    snprintf(path, sizeof(path), "%s/%s.got", dir, me);
    close(open(path, O_WRONLY | O_CREAT, 0600));
    if (more) {
        if (getenv("TURN_MORE_AFTER"))
            wait_path(getenv("TURN_MORE_AFTER"));
        if (turn_take(&p[1], more, "more")) {
            OK(cudaFree(p[0]));
            return 1;
        }
        printf("got more %lu\n", (unsigned long)unix_ns());
        fflush(stdout);
    }
    if (until)
        wait_path(until);
    else
        usleep((useconds_t)hold_ms * 1000);
    printf("freeing %lu\n", (unsigned long)unix_ns());
    fflush(stdout);
    for (int i = 0; i < 2; i++)
        if (p[i])
            OK(cudaFree(p[i]));
    usleep((useconds_t)linger_ms * 1000);
    return 0;
}

/* Races other processes on one group budget: RACE_ITERS times, allocates
 * a block of 1 to 6 MiB (keeping at most 3, freeing the oldest); a refusal
 * is counted, not a failure. Exit 0 once done. */
static int group_race(void)
{
    int iters = atoi(getenv("RACE_ITERS") ? getenv("RACE_ITERS") : "300");
    void *held[3] = {NULL, NULL, NULL};
    unsigned seed = (unsigned)getpid();
    int refused = 0;
    for (int i = 0; i < iters; i++) {
        int k = i % 3;
        if (held[k])
            OK(cudaFree(held[k]));
        held[k] = NULL;
        size_t size = (size_t)(1 + rand_r(&seed) % 6) * MIB;
        if (cudaMalloc(&held[k], size) != cudaSuccess)
            held[k] = NULL, refused++;
        usleep(200); /* the racers overlap the reader's readings */
    }
    for (int k = 0; k < 3; k++)
        if (held[k])
            OK(cudaFree(held[k]));
    printf("refused %d of %d\n", refused, iters);
    return 0;
}

/* Under a cap, what cudaMemGetInfo calls free one cudaMalloc gets: with
 * nothing live, with a small block live (its segment cannot go back) and
 * with a large one. */
static int free_is_allocatable(void)
{
    size_t free_b, total;
    void *q;
    OK(cudaMemGetInfo(&free_b, &total));
    printf("free %zu of %zu\n", free_b, total);
    CHECK(free_b > 0);
    OK(cudaMalloc(&q, free_b));
    OK(cudaFree(q));
    return 0;
}

static int capinfo(void)
{
    void *small, *large;
    if (free_is_allocatable())
        return 1;
    OK(cudaMalloc(&small, 512));
    if (free_is_allocatable())
        return 1;
    OK(cudaMalloc(&large, 3 * MIB));
    if (free_is_allocatable())
        return 1;
    OK(cudaFree(small));
    OK(cudaFree(large));
    return free_is_allocatable();
}

/* Double and interior frees fail and leave the pool intact. */
static int badfree(void)
{
    char *a, *b, *c, *d;
    OK(cudaMalloc((void **)&a, MIB)); /* a and b fill one segment */
    OK(cudaMalloc((void **)&b, MIB));
    CHECK(b == a + MIB);
    OK(cudaFree(a));
    CHECK(cudaFree(a) == cudaErrorInvalidValue);
    CHECK(cudaFree(b + 512) == cudaErrorInvalidValue);
    OK(cudaFree(b));
    /* Nothing was lost: both blocks come back, from the same segment. */
    OK(cudaMalloc((void **)&c, MIB));
    OK(cudaMalloc((void **)&d, MIB));
    CHECK((c == a && d == b) || (c == b && d == a));
    OK(cudaFree(c));
    OK(cudaFree(d));
    return 0;
}

/* Graph capture modes: what cudaMalloc and cudaFree answer while a
 * capture goes on, from the capturing thread and from another thread in
 * global and in relaxed mode, and how the capture ends. Prints one line of
 * CUDA's codes; test_shim and gpu-check compare it under cupool and with
 * CUPOOL_DISABLE=1 (CUDA alone): they must be the same. */
struct other_alloc { enum cudaStreamCaptureMode mode; cudaError_t got; void *p; };

static void *other_alloc_run(void *arg)
{
    struct other_alloc *o = arg;
    enum cudaStreamCaptureMode m = o->mode;
    cudaThreadExchangeStreamCaptureMode(&m);
    o->got = cudaMalloc(&o->p, MIB);
    cudaGetLastError();
    return NULL;
}

static cudaError_t alloc_on_other_thread(enum cudaStreamCaptureMode mode, void **p)
{
    struct other_alloc o = {mode, cudaSuccess, NULL};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, other_alloc_run, &o) == 0);
    pthread_join(t, NULL);
    *p = o.got == cudaSuccess ? o.p : NULL;
    return o.got;
}

static int capture_modes(void)
{
    cudaStream_t s;
    OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    void *held, *warm;
    OK(cudaMalloc(&warm, MIB));
    OK(cudaMalloc(&held, MIB));
    OK(cudaFree(warm)); /* a cached block the pool could hand out */
    static const struct { enum cudaStreamCaptureMode m; const char *name; } modes[] = {
        {cudaStreamCaptureModeGlobal, "global"},
        {cudaStreamCaptureModeThreadLocal, "thread-local"},
        {cudaStreamCaptureModeRelaxed, "relaxed"},
    };
    for (int i = 0; i < 3; i++) {
        void *q1, *q2, *p = NULL;
        cudaGraph_t g = NULL;
        OK(cudaStreamBeginCapture(s, modes[i].m));
        int r1 = alloc_on_other_thread(cudaStreamCaptureModeGlobal, &q1);
        int r2 = alloc_on_other_thread(cudaStreamCaptureModeRelaxed, &q2);
        int r3 = cudaMalloc(&p, MIB);
        cudaGetLastError();
        int r4 = cudaFree(held);
        cudaGetLastError();
        int r5 = cudaStreamEndCapture(s, &g);
        cudaGetLastError();
        printf("%s: other-global %d other-relaxed %d own-malloc %d own-free %d end %d%s",
               modes[i].name, r1, r2, r3, r4, r5, i < 2 ? " | " : "\n");
        if (g)
            cudaGraphDestroy(g);
        if (q1) OK(cudaFree(q1));
        if (q2) OK(cudaFree(q2));
        if (!r3 && p) OK(cudaFree(p));
        if (!r4)
            OK(cudaMalloc(&held, MIB));
    }
    OK(cudaFree(held));
    OK(cudaStreamDestroy(s));
    return 0;
}

#ifndef SIMCUDA
/* On a GPU: a reuse that needs a fence while a stream captures a graph
 * gets fresh memory, and the capture comes out whole and runs. */
static int capture_real(void)
{
    cudaStream_t s;
    OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    void *a, *b, *c;
    fill_segment(&a, &b);
    OK(cudaFree(a)); /* dirty: reusing it needs a fence */
    OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
    OK(cudaMemsetAsync(b, 1, MIB, s));
    OK(cudaMalloc(&c, MIB));
    CHECK(c != a);
    cudaGraph_t g;
    OK(cudaStreamEndCapture(s, &g));
    cudaGraphExec_t e;
    OK(cudaGraphInstantiate(&e, g, 0));
    OK(cudaGraphLaunch(e, s));
    OK(cudaStreamSynchronize(s));
    unsigned char h = 0;
    OK(cudaMemcpy(&h, b, 1, cudaMemcpyDeviceToHost));
    CHECK(h == 1);
    printf("capture intact; the fence waited, fresh memory served\n");
    return 0;
}
#endif

/* This process's CUPOOL_STATS_FILE (which must hold %p) into path. */
static void stats_path(char *path, size_t len)
{
    const char *pat = getenv("CUPOOL_STATS_FILE");
    CHECK(pat && strstr(pat, "%p"));
    size_t k = (size_t)(strstr(pat, "%p") - pat);
    snprintf(path, len, "%.*s%d%s", (int)k, pat, (int)getpid(), pat + k + 2);
}

/* SIGUSR2 writes one JSON line to CUPOOL_STATS_FILE (%p = pid). */
static int stats(void)
{
    void *a, *b;
    OK(cudaMalloc(&a, 1000));
    OK(cudaMalloc(&b, 3 * MIB));
    char path[512];
    stats_path(path, sizeof(path));
    raise(SIGUSR2);
    for (int i = 0; i < 200; i++) {
        FILE *f = fopen(path, "r");
        char line[16384];
        if (f && fgets(line, sizeof(line), f) && strchr(line, '\n')) {
            fclose(f);
            return 0;
        }
        if (f)
            fclose(f);
        sleep_ms(10);
    }
    CHECK(!"no statistics line within 2 s");
    return 1;
}

/* Under a cap, half-used small segments leave enough free bytes in total
 * but no block for a larger request: the report must say fragmentation. */
static int frag(void)
{
    void *p[8];
    for (int i = 0; i < 8; i++)
        OK(cudaMalloc(&p[i], 900 * 1024));
    for (int i = 0; i < 8; i += 2)
        OK(cudaFree(p[i]));
    void *big;
    CHECK(cudaMalloc(&big, 3 * MIB / 2) == cudaErrorMemoryAllocation);
    return 0;
}

static int prog_argc;
static char **prog_argv;

/* How many 10 ms ticks a scenario that waits for SIGTERM waits: `rt_prog
 * NAME SECONDS`, or seconds by default (the README's and the guide's
 * walk-throughs give a person time to type). */
static int hold_ticks(int seconds)
{
    return (prog_argc > 2 ? atoi(prog_argv[2]) : seconds) * 100;
}

/* Holds known amounts (1000 B and 3 MiB live, a 6 MiB segment cached),
 * touches $READY, and waits for SIGTERM up to 20 s (`serve SECONDS`: that
 * long); then prints how many segments
 * the driver saw freed. For cupool stat / flush from outside. */
static volatile sig_atomic_t stop;
static void on_term(int sig) { (void)sig; stop = 1; }
static atomic_int own_calls;
static void on_own(int sig) { (void)sig; atomic_fetch_add(&own_calls, 1); }

static int serve(void)
{
    struct sigaction sa = {.sa_handler = on_term};
    sigaction(SIGTERM, &sa, NULL);
    if (getenv("OWN_HANDLER")) /* the program's own SIGUSR1, after cupool's */
        signal(SIGUSR1, on_own);
    void *a, *b, *c;
    OK(cudaMalloc(&a, 1000));
    OK(cudaMalloc(&b, 3 * MIB));
    OK(cudaMalloc(&c, 5 * MIB));
    OK(cudaFree(c));
    void *comm = NULL;
#ifdef SIMCUDA
    if (getenv("SERVE_NCCL")) { /* a communicator, as a job using NCCL has */
        int dev = 0;
        CHECK(((int (*)(void **, int, const int *))nccl("ncclCommInitAll"))(&comm, 1, &dev) == 0);
    }
#endif
    const char *ready = getenv("READY");
    FILE *f = ready ? fopen(ready, "w") : NULL;
    if (f)
        fclose(f);
    for (int i = 0, n = hold_ticks(20); i < n && !stop; i++)
        sleep_ms(10);
#ifdef SIMCUDA
    if (comm)
        CHECK(((int (*)(void *))nccl("ncclCommDestroy"))(comm) == 0);
#else
    (void)comm;
#endif
#ifdef SIMCUDA
    printf("driver frees: %lu\n", sim(0).frees);
#endif
    printf("own handler calls: %d\n", atomic_load(&own_calls));
    return 0;
}

#ifdef SIMCUDA
/* ---- an NCCL job: ranks in separate processes ---- */

typedef struct { char internal[128]; } nccl_id;

/* The job's unique id: made by rank 0 and written to path (whole, by a
 * rename), read by the other ranks (waiting up to 5 s for it). */
static nccl_id job_unique_id(const char *path, int rank)
{
    nccl_id id;
    if (rank == 0) {
        char tmp[4096];
        snprintf(tmp, sizeof(tmp), "%s.tmp", path);
        CHECK(((int (*)(nccl_id *))nccl("ncclGetUniqueId"))(&id) == 0);
        FILE *f = fopen(tmp, "w");
        CHECK(f && fwrite(&id, sizeof(id), 1, f) == 1 && fclose(f) == 0);
        CHECK(rename(tmp, path) == 0);
        return id;
    }
    FILE *f = NULL;
    for (int i = 0; i < 500 && !(f = fopen(path, "r")); i++)
        sleep_ms(10);
    CHECK(f && fread(&id, sizeof(id), 1, f) == 1);
    fclose(f);
    return id;
}

static void touch(const char *path)
{
    FILE *f = path ? fopen(path, "w") : NULL;
    if (f)
        fclose(f);
}

/* One all-reduce on each of the n communicators of comm (in a group when
 * more than one: one thread drives them); its count written to the file
 * JOB_COUNT (by a rename). */
static void job_step(void *const *comm, int n, unsigned long *ops)
{
    nccl_allreduce_fn allreduce = (nccl_allreduce_fn)nccl("ncclAllReduce");
    int (*group_start)(void) = (int (*)(void))nccl("ncclGroupStart");
    int (*group_end)(void) = (int (*)(void))nccl("ncclGroupEnd");
    CHECK(n == 1 || group_start() == 0);
    for (int i = 0; i < n; i++)
        CHECK(allreduce(NULL, NULL, 0, 7, 0, comm[i], NULL) == 0);
    CHECK(n == 1 || group_end() == 0);
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s.tmp", getenv("JOB_COUNT"));
    FILE *f = fopen(tmp, "w");
    CHECK(f && fprintf(f, "%lu\n", ++*ops) > 0 && fclose(f) == 0);
    CHECK(rename(tmp, getenv("JOB_COUNT")) == 0); /* whole, for the reader */
}

/* Joins an NCCL job as rank JOB_RANK of JOB_NRANKS, its unique id in the
 * file JOB_ID (rank 0 makes it); with JOB_LOCAL=2, as ranks JOB_RANK and
 * JOB_RANK + 1 both (two GPUs' ranks in one process). With JOB_SPLIT=COLOR,
 * splits it (key: its rank); with JOB_SPLITS=N, N more splits (colors 100
 * on), kept to the end. Touches $READY, then waits up to 20 s (`job
 * SECONDS`: that long) for SIGTERM; once the file JOB_DESTROY names appears, destroys the split's
 * child (else the job's communicator) and touches JOB_DESTROY.done. With
 * JOB_EVERY=N, an all-reduce on each of the job's communicators every N
 * ticks of 10 ms (job_step). Aborts what is left at the end. */
static int nccl_job(void)
{
    struct sigaction sa = {.sa_handler = on_term};
    sigaction(SIGTERM, &sa, NULL);
    const char *idpath = getenv("JOB_ID"), *split = getenv("JOB_SPLIT");
    const char *destroy = getenv("JOB_DESTROY");
    CHECK(idpath && getenv("JOB_RANK") && getenv("JOB_NRANKS"));
    int rank = atoi(getenv("JOB_RANK")), nranks = atoi(getenv("JOB_NRANKS"));
    int local = getenv("JOB_LOCAL") ? atoi(getenv("JOB_LOCAL")) : 1;
    CHECK(local == 1 || local == 2);
    nccl_id id = job_unique_id(idpath, rank);
    void *comm[2] = {NULL, NULL}, *child = NULL;
    for (int i = 0; i < local; i++)
        CHECK(((int (*)(void **, int, nccl_id, int))nccl("ncclCommInitRank"))(
                  &comm[i], nranks, id, rank + i) == 0);
    int (*split_fn)(void *, int, int, void **, void *) =
        (int (*)(void *, int, int, void **, void *))nccl("ncclCommSplit");
    if (split)
        CHECK(split_fn(comm[0], atoi(split), rank, &child, NULL) == 0 && child);
    void *more[32] = {NULL};
    int nmore = getenv("JOB_SPLITS") ? atoi(getenv("JOB_SPLITS")) : 0;
    CHECK(nmore >= 0 && nmore <= 32);
    for (int i = 0; i < nmore; i++)
        CHECK(split_fn(comm[0], 100 + i, rank, &more[i], NULL) == 0 && more[i]);
    touch(getenv("READY"));
    int (*destroy_fn)(void *) = (int (*)(void *))nccl("ncclCommDestroy");
    int every = getenv("JOB_EVERY") ? atoi(getenv("JOB_EVERY")) : 0;
    unsigned long ops = 0;
    for (int i = 0, n = hold_ticks(20); i < n && !stop; i++) {
        if (every > 0 && i % every == 0)
            job_step(comm, local, &ops);
        if (destroy && access(destroy, F_OK) == 0) {
            CHECK(destroy_fn(child ? child : comm[0]) == 0);
            *(child ? &child : &comm[0]) = NULL;
            char done[4096];
            snprintf(done, sizeof(done), "%s.done", destroy);
            touch(done);
            destroy = NULL;
        }
        sleep_ms(10);
    }
    int (*abort_fn)(void *) = (int (*)(void *))nccl("ncclCommAbort");
    for (int i = 0; i < nmore; i++)
        CHECK(abort_fn(more[i]) == 0);
    CHECK(abort_fn(child) == 0 && abort_fn(comm[0]) == 0 && abort_fn(comm[1]) == 0);
    return 0;
}
#endif

/* ---- signals: cupool keeps its own, the program keeps its handlers ---- */

#ifdef SIMCUDA
/* Caches 8 segments, raises SIGUSR1 (process-directed: any thread that
 * does not block it takes it) and checks the driver got them all back. */
static void flushed_by_signal(void)
{
    void *p[8];
    for (int i = 0; i < 8; i++)
        OK(cudaMalloc(&p[i], 3 * MIB));
    for (int i = 0; i < 8; i++)
        OK(cudaFree(p[i]));
    CHECK(sim(0).used >= 8 * 4 * MIB);
    kill(getpid(), SIGUSR1);
    for (int i = 0; i < 300 && sim(0).used; i++)
        sleep_ms(10);
    CHECK(sim(0).used == 0);
}

static void on_info(int sig, siginfo_t *info, void *uc)
{
    (void)uc;
    if (sig == SIGUSR1 && info && info->si_signo == SIGUSR1)
        atomic_fetch_add(&own_calls, 1);
}

/* The program installs its own SIGUSR1 handler after cupool, through
 * SIG_API (sigaction, siginfo, signal, bsd_signal, sysv_signal, sigset):
 * both the flush and the handler happen, once each, and a query answers
 * with the program's handler. */
static int sig_chain(void)
{
    const char *api = getenv("SIG_API");
    CHECK(api);
    void (*want)(int) = on_own;
    if (!strcmp(api, "sigaction")) {
        struct sigaction sa = {.sa_handler = on_own};
        CHECK(sigaction(SIGUSR1, &sa, NULL) == 0);
    } else if (!strcmp(api, "siginfo")) {
        struct sigaction sa = {.sa_sigaction = on_info, .sa_flags = SA_SIGINFO};
        CHECK(sigaction(SIGUSR1, &sa, NULL) == 0);
        want = (void (*)(int))(void (*)(void))on_info;
    } else if (!strcmp(api, "signal")) {
        CHECK(signal(SIGUSR1, on_own) == SIG_DFL);
    } else if (!strcmp(api, "bsd_signal")) {
        CHECK(bsd_signal(SIGUSR1, on_own) == SIG_DFL);
    } else if (!strcmp(api, "sysv_signal")) {
        CHECK(sysv_signal(SIGUSR1, on_own) == SIG_DFL);
    } else if (!strcmp(api, "sigset")) {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
        CHECK(sigset(SIGUSR1, on_own) == SIG_DFL);
#pragma GCC diagnostic pop
    } else {
        CHECK(!"unknown SIG_API");
    }
    struct sigaction q;
    CHECK(sigaction(SIGUSR1, NULL, &q) == 0);
    CHECK(q.sa_handler == want);
    flushed_by_signal();
    for (int i = 0; i < 100 && atomic_load(&own_calls) == 0; i++)
        sleep_ms(10);
    printf("%s: flushed, own handler calls: %d\n", api, atomic_load(&own_calls));
    CHECK(atomic_load(&own_calls) == 1);
    return 0;
}

/* SIG_IGN and SIG_DFL set by the program: the flush happens and the
 * process lives on; a query answers with what the program set. Also
 * SIGUSR1 ignored by the parent before exec (INHERITED_IGN=1). */
static int sig_dispositions(void)
{
    struct sigaction q;
    if (getenv("INHERITED_IGN")) {
        CHECK(sigaction(SIGUSR1, NULL, &q) == 0);
        CHECK(q.sa_handler == SIG_IGN);
        flushed_by_signal();
    }
    void (*const disp[])(int) = {SIG_IGN, SIG_DFL};
    for (int k = 0; k < 2; k++) {
        CHECK(signal(SIGUSR1, disp[k]) != SIG_ERR);
        CHECK(sigaction(SIGUSR1, NULL, &q) == 0);
        CHECK(q.sa_handler == disp[k]);
        flushed_by_signal();
    }
    puts("flushed under SIG_IGN and SIG_DFL, still alive");
    return 0;
}

/* Every program thread blocks SIGUSR1: it still reaches cupool. */
static int sig_blocked(void)
{
    sigset_t m;
    sigemptyset(&m);
    sigaddset(&m, SIGUSR1);
    CHECK(pthread_sigmask(SIG_BLOCK, &m, NULL) == 0);
    flushed_by_signal();
    puts("flushed while every program thread blocks SIGUSR1");
    return 0;
}

static atomic_int usr2_masked;
static void on_flagged(int sig)
{
    (void)sig;
    sigset_t cur;
    pthread_sigmask(SIG_BLOCK, NULL, &cur);
    atomic_store(&usr2_masked, sigismember(&cur, SIGUSR2));
    atomic_fetch_add(&own_calls, 1);
}

static pthread_t main_thread;
static void *poke_main(void *arg)
{
    (void)arg;
    sleep_ms(200);
    pthread_kill(main_thread, SIGUSR1);
    return NULL;
}

/* Ends the read after 5 s if the signal did not (the test then fails
 * instead of hanging). */
static atomic_int read_over;
static void *unstick(void *arg)
{
    for (int i = 0; i < 500 && !atomic_load(&read_over); i++)
        sleep_ms(10);
    if (!atomic_load(&read_over)) {
        ssize_t w = write(*(int *)arg, "x", 1);
        (void)w;
    }
    return NULL;
}

/* The program's own flags and mask hold: without SA_RESTART a read()
 * ends with EINTR; its mask (SIGUSR2) is in force in its handler; with
 * SA_RESETHAND the handler runs once and the query then says SIG_DFL, yet
 * the next SIGUSR1 still flushes and does not end the process. */
static int sig_flags(void)
{
    struct sigaction sa = {.sa_handler = on_flagged, .sa_flags = 0};
    sigemptyset(&sa.sa_mask);
    sigaddset(&sa.sa_mask, SIGUSR2);
    CHECK(sigaction(SIGUSR1, &sa, NULL) == 0);
    void *p;
    OK(cudaMalloc(&p, MIB)); /* starts the helper */
    int fds[2];
    CHECK(pipe(fds) == 0);
    main_thread = pthread_self();
    pthread_t t1, t2;
    CHECK(pthread_create(&t1, NULL, poke_main, NULL) == 0);
    CHECK(pthread_create(&t2, NULL, unstick, &fds[1]) == 0);
    char c;
    ssize_t r = read(fds[0], &c, 1);
    int e = errno;
    atomic_store(&read_over, 1);
    printf("read: %zd (%s), handler calls %d, SIGUSR2 masked in it: %d\n", r,
           r < 0 ? strerror(e) : "data", atomic_load(&own_calls), atomic_load(&usr2_masked));
    CHECK(r == -1 && e == EINTR);
    CHECK(atomic_load(&own_calls) == 1 && atomic_load(&usr2_masked) == 1);
    pthread_join(t1, NULL);
    pthread_join(t2, NULL);
    OK(cudaFree(p));
    sa.sa_flags = SA_RESETHAND;
    CHECK(sigaction(SIGUSR1, &sa, NULL) == 0);
    flushed_by_signal();
    for (int i = 0; i < 100 && atomic_load(&own_calls) < 2; i++)
        sleep_ms(10);
    struct sigaction q;
    CHECK(sigaction(SIGUSR1, NULL, &q) == 0);
    CHECK(q.sa_handler == SIG_DFL);
    flushed_by_signal();
    sleep_ms(100);
    printf("SA_RESETHAND: handler calls %d, still alive\n", atomic_load(&own_calls));
    CHECK(atomic_load(&own_calls) == 2);
    return 0;
}

/* A forked child's signals stay its own: SIGUSR1 and SIGUSR2 sent to the
 * child neither flush the parent's pools nor dump its statistics (the
 * parent's stats file, CUPOOL_STATS_FILE with %p, stays absent). */
static int sig_fork(void)
{
    void *p[4];
    for (int i = 0; i < 4; i++)
        OK(cudaMalloc(&p[i], 3 * MIB));
    for (int i = 0; i < 4; i++)
        OK(cudaFree(p[i]));
    unsigned long long held = sim(0).used;
    CHECK(held >= 4 * 4 * MIB);
    pid_t c = fork();
    if (c == 0) {
        kill(getpid(), SIGUSR1);
        kill(getpid(), SIGUSR2);
        sleep_ms(300);
        _exit(0);
    }
    int st;
    CHECK(waitpid(c, &st, 0) == c && WIFEXITED(st) && WEXITSTATUS(st) == 0);
    sleep_ms(300);
    printf("after the child's signals the parent holds %llu of %llu\n", sim(0).used, held);
    CHECK(sim(0).used == held);
    char path[512];
    stats_path(path, sizeof(path));
    CHECK(access(path, F_OK) != 0);
    return 0;
}
#endif

/* CUPOOL_TRACE inherited by a child: 1000 pairs, a child run with the same
 * environment (rt_prog zero, or with TC_SHELL=1 a shell through system()),
 * 1000 pairs more. Prints the pairs made, for the replay to compare. */
extern char **environ;
static int tracechild(void)
{
    unsigned long n = 0;
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < 1000; i++, n++) {
            void *p;
            OK(cudaMalloc(&p, 4096 + (size_t)(i % 5) * 512));
            OK(cudaFree(p));
        }
        if (round)
            break;
        if (getenv("TC_SHELL")) {
            CHECK(system("echo hi >/dev/null") == 0);
        } else {
            char *argv[] = {"rt_prog", "zero", NULL};
            pid_t c;
            CHECK(posix_spawn(&c, "/proc/self/exe", NULL, NULL, argv, environ) == 0);
            int st;
            CHECK(waitpid(c, &st, 0) == c && WIFEXITED(st) && WEXITSTATUS(st) == 0);
        }
    }
    printf("pairs %lu\n", n);
    return 0;
}

/* Allocates, touches $READY, then becomes /bin/sleep 3 (the same pid, no
 * longer under cupool's control: its page is stale). */
static int execsleep(void)
{
    void *p;
    OK(cudaMalloc(&p, MIB));
    sleep_ms(300); /* the helper has made the page */
    const char *ready = getenv("READY");
    FILE *f = ready ? fopen(ready, "w") : NULL;
    if (f)
        fclose(f);
    execl("/bin/sleep", "sleep", "3", (char *)NULL);
    CHECK(!"exec failed");
    return 1;
}

/* A request far beyond the device fails, and the peak of reserved memory
 * counts only what the driver gave. */
static int bigfail(void)
{
    void *a, *b;
    OK(cudaMalloc(&a, MIB));
    CHECK(cudaMalloc(&b, (size_t)1 << 50) != cudaSuccess);
    return 0;
}

/* Median ns of a cudaMalloc+cudaFree pair of 4 KiB over 9 batches. */
static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}


static void *one_pair(void *arg)
{
    (void)arg;
    void *p;
    OK(cudaMalloc(&p, 4096));
    OK(cudaFree(p));
    return NULL;
}

/* The median cost of a cudaMalloc+cudaFree pair of PAIR_BYTES (4096), from
 * a thread that took its shard after PAIR_AFTER_THREADS (0) other threads
 * took theirs. */
/* PAIR_THREADS: each thread a mix of small blocks, as mix_bench's threads
 * on the GPU: 55% allocations of 512 B to 64 KiB, at most 256 live. */
static void *mix_thread(void *arg)
{
    uint64_t seed = (uintptr_t)arg * 0x9E3779B97F4A7C15ull + 1;
    void *live[256];
    int n = 0;
    for (int i = 0; i < 400000; i++) {
        seed ^= seed << 13, seed ^= seed >> 7, seed ^= seed << 17;
        if (n == 0 || (seed % 100 < 55 && n < 256)) {
            OK(cudaMalloc(&live[n++], (size_t)512 << (seed >> 32) % 8));
        } else {
            int k = (int)((seed >> 40) % (uint64_t)n);
            OK(cudaFree(live[k]));
            live[k] = live[--n];
        }
    }
    while (n)
        OK(cudaFree(live[--n]));
    return NULL;
}

/* PAIR_THREADS=N threads of mix_thread at once: CPU time per operation in
 * ns (user+system over all threads / operations), and the wall time. */
static int mixbench(int n)
{
    pthread_t t[64];
    struct timespec w0, w1, c0, c1;
    clock_gettime(CLOCK_MONOTONIC, &w0);
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0);
    for (uintptr_t i = 0; i < (uintptr_t)n; i++)
        CHECK(pthread_create(&t[i], NULL, mix_thread, (void *)(i + 1)) == 0);
    for (int i = 0; i < n; i++)
        pthread_join(t[i], NULL);
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1);
    clock_gettime(CLOCK_MONOTONIC, &w1);
    double ops = 400000.0 * n;
    printf("%.1f ns cpu/op, %.1f ns wall/op\n",
           ((double)(c1.tv_sec - c0.tv_sec) * 1e9 + (double)(c1.tv_nsec - c0.tv_nsec)) / ops,
           ((double)(w1.tv_sec - w0.tv_sec) * 1e9 + (double)(w1.tv_nsec - w0.tv_nsec)) / ops);
    return 0;
}

/* The median of 9 timed runs of N cudaMalloc+cudaFree pairs (PAIR_N,
 * default 200000) of PAIR_BYTES (default 4 KiB), in ns per pair; after
 * PAIR_AFTER_THREADS threads took a shard each; with PAIR_STREAMS idle
 * non-blocking streams made first, and with PAIR_WORK=1 a memset on the
 * legacy stream in each pair (then each large reuse fences). With
 * PAIR_THREADS=N, mixbench instead. */
static int pairbench(void)
{
    if (getenv("PAIR_THREADS"))
        return mixbench(atoi(getenv("PAIR_THREADS")) < 64 ? atoi(getenv("PAIR_THREADS")) : 64);
    const char *b = getenv("PAIR_BYTES"), *t = getenv("PAIR_AFTER_THREADS");
    const char *np = getenv("PAIR_N"), *ns = getenv("PAIR_STREAMS");
    bool work = getenv("PAIR_WORK") != NULL;
    int N = np ? atoi(np) : 200000;
    size_t bytes = b ? strtoul(b, NULL, 0) : 4096;
    for (int i = 0, n = t ? atoi(t) : 0; i < n; i++)
        in_thread(one_pair, NULL);
    for (int i = 0, n = ns ? atoi(ns) : 0; i < n; i++) {
        cudaStream_t s;
        OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    }
    double v[9];
    void *p;
    for (int r = -1; r < 9; r++) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        for (int i = 0; i < N; i++) {
            OK(cudaMalloc(&p, bytes));
            if (work)
                OK(cudaMemsetAsync(p, 0, 1, 0));
            OK(cudaFree(p));
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        if (r >= 0)
            v[r] = ((double)(t1.tv_sec - t0.tv_sec) * 1e9 +
                    (double)(t1.tv_nsec - t0.tv_nsec)) / N;
    }
    qsort(v, 9, sizeof(v[0]), cmp_double);
    printf("%.1f\n", v[4]);
    return 0;
}

static int zero(void)
{
    void *p = (void *)1;
    OK(cudaMalloc(&p, 0));
    CHECK(p == NULL);
    OK(cudaFree(NULL));
    return 0;
}

/* Device memory seen from the host: the simulated device's is host memory. */
static void dev_fill(void *p, int v, size_t n)
{
#ifdef SIMCUDA
    memset(p, v, n);
#else
    OK(cudaMemset(p, v, n));
    OK(cudaDeviceSynchronize());
#endif
}

static unsigned char dev_byte(const void *p)
{
    unsigned char b;
#ifdef SIMCUDA
    memcpy(&b, p, 1);
#else
    OK(cudaMemcpy(&b, p, 1, cudaMemcpyDeviceToHost));
#endif
    return b;
}


static void hex(const cudaIpcMemHandle_t *h, char *out)
{
    for (size_t i = 0; i < sizeof(h->reserved); i++)
        sprintf(out + 2 * i, "%02x", (unsigned char)h->reserved[i]);
}

static void unhex(const char *in, cudaIpcMemHandle_t *h)
{
    for (size_t i = 0; i < sizeof(h->reserved); i++) {
        unsigned v = 0;
        sscanf(in + 2 * i, "%2x", &v);
        h->reserved[i] = (char)v;
    }
}

/* Runs rt_prog ipc_import MODE HANDLE_A HANDLE_B in a new process (its
 * environment plus extra, if not NULL); returns its exit status. */
static int importer(const char *mode, const cudaIpcMemHandle_t *ha,
                    const cudaIpcMemHandle_t *hb, char *extra)
{
    extern char **environ;
    char a[160], b[160], *env[512];
    hex(ha, a);
    hex(hb, b);
    int n = 0;
    for (char **e = environ; *e && n < 510; e++)
        env[n++] = *e;
    if (extra)
        env[n++] = extra;
    env[n] = NULL;
    char *argv[] = {prog_argv[0], "ipc_import", (char *)mode, a, b, NULL};
    pid_t pid;
    CHECK(posix_spawn(&pid, prog_argv[0], NULL, NULL, argv, env) == 0);
    int st;
    CHECK(waitpid(pid, &st, 0) == pid);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Whether blocks live in VMM segments (CUPOOL_VMM or CUPOOL_STITCH),
 * which have no CUDA handle: every handle is cupool's. */
static bool vmm_blocks(void)
{
    const char *v = getenv("CUPOOL_VMM"), *st = getenv("CUPOOL_STITCH");
    return (v && *v == '1') || (st && *st == '1');
}

/* IPC of pooled blocks. a starts a fresh segment, b lies inside it. Another
 * process opens both handles, finds the bytes written here, opens b twice,
 * writes new bytes, closes everything and opens again; back here, its
 * bytes are in the blocks. An importer without cupool opens a's handle
 * (CUDA's own) and is refused b's (cupool's); so is a forged cupool handle:
 * never a wrong address. In VMM segments both handles are cupool's: the
 * importer without cupool is refused both. */
static int ipc(void)
{
    char *a, *b;
    OK(cudaMalloc((void **)&a, 4096)); /* starts a fresh segment */
    OK(cudaMalloc((void **)&b, 4096)); /* inside it */
    dev_fill(a, 0x11, 4096);
    dev_fill(b, 0x22, 4096);
    cudaIpcMemHandle_t ha, hb;
    OK(cudaIpcGetMemHandle(&ha, a));
    OK(cudaIpcGetMemHandle(&hb, b));
    CHECK(memcmp(&ha, &hb, sizeof(ha)) != 0);
    CHECK(importer("cupool", &ha, &hb, NULL) == 0);
    CHECK(dev_byte(a) == 0x44 && dev_byte(a + 4095) == 0x44);
    CHECK(dev_byte(b) == 0x33 && dev_byte(b + 4095) == 0x33);
    CHECK(importer("plain", &ha, &hb, "CUPOOL_DISABLE=1") == 0);
    /* Exported again, the same block has the same handle (as CUDA's). */
    cudaIpcMemHandle_t again;
    OK(cudaIpcGetMemHandle(&again, b));
    CHECK(memcmp(&again, &hb, sizeof(hb)) == 0);
    /* A handle whose nonce is not the slot's is refused. */
    hb.reserved[16] ^= 0x5a;
    CHECK(importer("forged", &ha, &hb, NULL) == 0);
    printf("ipc ok: blocks shared at their offsets, closed, opened again\n");
    OK(cudaFree(b));
    /* In VMM segments the exporter hands over only a block still live, and
     * only the allocation exported: not a new block at the same place. */
    hb.reserved[16] ^= 0x5a;
    CHECK(!vmm_blocks() || importer("forged", &ha, &hb, NULL) == 0);
    char *b2;
    OK(cudaDeviceSynchronize()); /* b's old work done: its place is free */
    OK(cudaMalloc((void **)&b2, 4096));
    cudaIpcMemHandle_t hb2;
    OK(cudaIpcGetMemHandle(&hb2, b2));
    bool same_handle = !memcmp(&hb2, &hb, sizeof(hb));
    printf("again: same place %d, same handle %d\n", b2 == b, same_handle);
    CHECK(!vmm_blocks() || !same_handle);
    CHECK(!vmm_blocks() || importer("forged", &ha, &hb, NULL) == 0);
    OK(cudaFree(b2));
    OK(cudaFree(a));
    return 0;
}

static int ipc_import_stitched(const cudaIpcMemHandle_t *hd, const cudaIpcMemHandle_t *hi);
static int ipc_import_large(const cudaIpcMemHandle_t *h);

static int ipc_import(void)
{
    CHECK(prog_argc == 5);
    const char *mode = prog_argv[2];
    cudaIpcMemHandle_t ha, hb;
    unhex(prog_argv[3], &ha);
    unhex(prog_argv[4], &hb);
    char *a, *b, *b2;
    unsigned fl = cudaIpcMemLazyEnablePeerAccess;
    if (!strcmp(mode, "plain") && vmm_blocks()) {
        CHECK(cudaIpcOpenMemHandle((void **)&a, ha, fl) != cudaSuccess);
        CHECK(cudaIpcOpenMemHandle((void **)&b, hb, fl) != cudaSuccess);
        return 0;
    }
    if (!strcmp(mode, "stitched"))
        return ipc_import_stitched(&ha, &hb);
    if (!strcmp(mode, "large"))
        return ipc_import_large(&ha);
    if (!strcmp(mode, "plain")) {
        OK(cudaIpcOpenMemHandle((void **)&a, ha, fl));
        CHECK(dev_byte(a) == 0x44);
        CHECK(cudaIpcOpenMemHandle((void **)&b, hb, fl) != cudaSuccess);
        OK(cudaIpcCloseMemHandle(a));
        return 0;
    }
    if (!strcmp(mode, "forged")) {
        CHECK(cudaIpcOpenMemHandle((void **)&b, hb, fl) == cudaErrorInvalidValue);
        return 0;
    }
    OK(cudaIpcOpenMemHandle((void **)&a, ha, fl));
    OK(cudaIpcOpenMemHandle((void **)&b, hb, fl));
    OK(cudaIpcOpenMemHandle((void **)&b2, hb, fl));
    CHECK(b2 == b && b != a);
    CHECK(dev_byte(a) == 0x11 && dev_byte(a + 4095) == 0x11);
    CHECK(dev_byte(b) == 0x22 && dev_byte(b + 4095) == 0x22);
    dev_fill(b, 0x33, 4096);
    OK(cudaIpcCloseMemHandle(b2));
    CHECK(dev_byte(b) == 0x33); /* still mapped: one user left */
    OK(cudaIpcCloseMemHandle(b));
    OK(cudaIpcCloseMemHandle(a));
    OK(cudaIpcOpenMemHandle((void **)&a, ha, fl));
    dev_fill(a, 0x44, 4096);
    OK(cudaIpcCloseMemHandle(a));
    return 0;
}

/* Eight threads allocate, stamp, check and free while another thread
 * sends flush and statistics signals by the thousand. A block handed out
 * twice shows up as a stamp overwritten by another thread. */
enum { THREADS = 8, ROUNDS = 3000, SIGNALS = 4000 };
static atomic_int failures, running;

static void *worker(void *arg)
{
    uint64_t id = (uint64_t)(uintptr_t)arg, rng = id * 7919 + 1;
    for (int r = 0; r < ROUNDS; r++) {
        uint64_t *p[4];
        size_t n[4];
        for (int k = 0; k < 4; k++) {
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            n[k] = 64 + (rng >> 33) % (64 * 1024);
            if (cudaMalloc((void **)&p[k], n[k] * 8) != cudaSuccess) {
                atomic_fetch_add(&failures, 1);
                n[k] = 0;
                continue;
            }
            for (size_t i = 0; i < n[k]; i += 97)
                p[k][i] = id << 32 | (uint64_t)r;
        }
        for (int k = 0; k < 4; k++) {
            for (size_t i = 0; i < n[k]; i += 97)
                if (p[k][i] != (id << 32 | (uint64_t)r))
                    atomic_fetch_add(&failures, 1);
            if (n[k] && cudaFree(p[k]) != cudaSuccess)
                atomic_fetch_add(&failures, 1);
        }
    }
    atomic_fetch_sub(&running, 1);
    return NULL;
}

static int threads(void)
{
#ifndef SIMCUDA
    puts("threads: host-writable memory needed; simulated runtime only");
    return 0;
#else
    pthread_t t[THREADS];
    atomic_store(&running, THREADS);
    for (uintptr_t i = 0; i < THREADS; i++)
        CHECK(pthread_create(&t[i], NULL, worker, (void *)(i + 1)) == 0);
    int sent = 0;
    while (atomic_load(&running) > 0 || sent < SIGNALS) {
        kill(getpid(), sent % 2 ? SIGUSR2 : SIGUSR1);
        sent++;
        if (sent % 64 == 0)
            sleep_ms(1);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    printf("signals sent: %d, failures: %d\n", sent, atomic_load(&failures));
    CHECK(atomic_load(&failures) == 0);
    return 0;
#endif
}


/* CUPOOL_TRACE: threads swap blocks through shared slots, so most frees
 * happen on another thread than the allocation, and each thread makes far
 * more records than its ring holds. Prints what the program did, for the
 * test to compare with the replayed trace. */
enum { TM_THREADS = 4, TM_ROUNDS = 20000, TM_SLOTS = 256 };
typedef struct tm_block { void *p; size_t size; } tm_block;
static _Atomic(tm_block *) tm_slot[TM_SLOTS];
static atomic_ulong tm_allocs, tm_frees, tm_fail;

static void *tm_worker(void *arg)
{
    uint64_t rng = (uint64_t)(uintptr_t)arg * 0x9E3779B97F4A7C15ull + 1;
    for (int r = 0; r < TM_ROUNDS; r++) {
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        tm_block *b = malloc(sizeof(*b));
        b->size = 1 + (rng >> 33) % (256 * 1024);
        if (cudaMalloc(&b->p, b->size) != cudaSuccess) {
            atomic_fetch_add(&tm_fail, 1);
            free(b);
            continue;
        }
        atomic_fetch_add(&tm_allocs, 1);
        tm_block *old = atomic_exchange(&tm_slot[(rng >> 13) % TM_SLOTS], b);
        if (old) {
            if (cudaFree(old->p) != cudaSuccess)
                atomic_fetch_add(&tm_fail, 1);
            atomic_fetch_add(&tm_frees, 1);
            free(old);
        }
    }
    return NULL;
}

static int tracemix(void)
{
    pthread_t t[TM_THREADS];
    for (uintptr_t i = 0; i < TM_THREADS; i++)
        CHECK(pthread_create(&t[i], NULL, tm_worker, (void *)(i + 1)) == 0);
    sleep_ms(5);
    kill(getpid(), SIGUSR1); /* one flush, recorded and replayed */
    for (int i = 0; i < TM_THREADS; i++)
        pthread_join(t[i], NULL);
    size_t live = 0, bytes = 0;
    for (int i = 0; i < TM_SLOTS; i++) {
        tm_block *b = atomic_load(&tm_slot[i]);
        if (b) {
            live++;
            bytes += (b->size + 511) / 512 * 512;
        }
    }
    printf("allocs %lu frees %lu live %zu bytes %zu\n", atomic_load(&tm_allocs),
           atomic_load(&tm_frees), live, bytes);
    CHECK(atomic_load(&tm_fail) == 0);
    return 0;
}

/* CUPOOL_TRACE and signals: TL_THREADS threads (default 1) allocate and
 * free without end, counting each successful call in the shared file
 * COUNTER (two words: allocs, frees) after it returns, until a signal ends
 * the program. Installs no handler of its own. FSIZE_LIMIT set: files may
 * not grow past 64 KiB, so the trace's writes fail. */
static _Atomic uint64_t *tl_count;

static void *tl_worker(void *arg)
{
    (void)arg;
    void *p[8] = {0};
    for (uint64_t i = 0;; i++) {
        void **slot = &p[i % 8];
        if (*slot) {
            OK(cudaFree(*slot));
            atomic_fetch_add(&tl_count[1], 1);
        }
        OK(cudaMalloc(slot, 512 * (1 + i % 64)));
        atomic_fetch_add(&tl_count[0], 1);
    }
    return NULL;
}

static int traceloop(void)
{
    const char *path = getenv("COUNTER"), *ready = getenv("READY");
    const char *nt = getenv("TL_THREADS");
    int threads = nt ? atoi(nt) : 1;
    CHECK(path && ready && threads >= 1 && threads <= 16);
    if (getenv("FSIZE_LIMIT")) { /* make the trace's writes fail */
        struct rlimit rl = {64 * 1024, 64 * 1024};
        signal(SIGXFSZ, SIG_IGN);
        CHECK(setrlimit(RLIMIT_FSIZE, &rl) == 0);
    }
    int fd = open(path, O_RDWR | O_CREAT, 0600);
    CHECK(fd >= 0 && ftruncate(fd, 16) == 0);
    tl_count = mmap(NULL, 16, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    CHECK(tl_count != MAP_FAILED);
    pthread_t t;
    for (int i = 1; i < threads; i++)
        CHECK(pthread_create(&t, NULL, tl_worker, NULL) == 0);
    FILE *f = fopen(ready, "w");
    CHECK(f);
    fclose(f);
    tl_worker(NULL);
    return 0;
}

/* Sets n bytes at p to v and checks what a later read sees. */
static void fill(void *p, int v, size_t n)
{
#ifdef SIMCUDA
    memset(p, v, n);
#else
    OK(cudaMemset(p, v, n));
#endif
}

static void expect(const void *p, int v, size_t n)
{
    static unsigned char host[4096];
    for (size_t off = 0; off < n; off += n / 8) {
#ifdef SIMCUDA
        memcpy(host, (const char *)p + off, sizeof(host));
#else
        OK(cudaMemcpy(host, (const char *)p + off, sizeof(host), cudaMemcpyDeviceToHost));
#endif
        for (size_t i = 0; i < sizeof(host); i++)
            CHECK(host[i] == v);
    }
}

/* Under CUPOOL_VMM=1 and a 48 MiB cap: a 40 MiB segment is freed, then
 * holds a 10 MiB block at its front; 36 MiB more fit only if the pool
 * gives back the 30 MiB free behind that block, which VMM segments allow.
 * The live block keeps its bytes; and the give-back waited for the device
 * (the fence had recorded work just before). Without VMM the 36 MiB fail. */
static int vmm(void)
{
    char *a, *b, *c;
    OK(cudaMalloc((void **)&a, 40 * MIB));
    fill(a, 1, 40 * MIB);
    OK(cudaFree(a));
    OK(cudaMalloc((void **)&b, 10 * MIB));
    CHECK(b == a);
    fill(b, 2, 10 * MIB);
#ifdef SIMCUDA
    simcuda_stats before = sim(0);
    CHECK(before.mallocs == 0 && before.vmm_mapped == 40 * MIB);
#endif
    OK(cudaMalloc((void **)&c, 36 * MIB));
    fill(c, 3, 36 * MIB);
    expect(b, 2, 10 * MIB);
    expect(c, 3, 36 * MIB);
#ifdef SIMCUDA
    simcuda_stats after = sim(0);
    printf("unmapped %lu granules, %lu before the device was waited for\n",
           after.vmm_unmaps - before.vmm_unmaps, after.unsynced_unmaps);
    CHECK(after.vmm_unmaps - before.vmm_unmaps == 15);
    CHECK(after.unsynced_unmaps == 0);
    CHECK(after.vmm_mapped == 46 * MIB);
#endif
    size_t free_b, total;
    OK(cudaMemGetInfo(&free_b, &total));
    CHECK(total == 48 * MIB);
    OK(cudaFree(b));
    OK(cudaFree(c));
    return 0;
}

/* A 3h segment holding h live (b, filled with 2s) between two free h
 * holes, the first at *a. */
static int two_holes(size_t h, char **a, char **b)
{
    char *big, *c;
    OK(cudaMalloc((void **)&big, 3 * h));
    OK(cudaFree(big));
    OK(cudaMalloc((void **)a, h));
    OK(cudaMalloc((void **)b, h));
    OK(cudaMalloc((void **)&c, h));
    CHECK(*a == big && *b == *a + h && c == *a + 2 * h);
    fill(*b, 2, h);
    OK(cudaFree(*a));
    OK(cudaFree(c));
    return 0;
}

/* After a SIGUSR1 flush with nothing live: nothing mapped, nothing in use,
 * and no range unmapped while work could still use it. */
static int flushed_all(void)
{
    raise(SIGUSR1);
#ifdef SIMCUDA
    /* The helper flushes: wait until it is done (mapped and in use both
     * down), then judge. */
    for (int i = 0; i < 200 && (sim(0).vmm_mapped || sim(0).used); i++)
        sleep_ms(10);
    simcuda_stats after = sim(0);
    printf("flushed: %llu bytes mapped, %llu in use, %lu unsynced unmaps, "
           "%lu device syncs\n", after.vmm_mapped, after.used, after.unsynced_unmaps,
           after.syncs);
    CHECK(after.vmm_mapped == 0 && after.used == 0 && after.unsynced_unmaps == 0);
#endif
    return 0;
}

/* Under CUPOOL_STITCH=1 with holes of h = RT_HOLE_MIB (8) and pieces of
 * RT_UNIT_MIB (2, CUPOOL_VMM_UNIT), under a cap of 3h + 4 MiB (rounded up
 * to a unit): a 3h segment holds h live between two h holes. 2h come from
 * the holes' pieces mapped again at new addresses (one mapping per unit;
 * the driver maps whole allocations only): nothing is reserved, created or
 * given back, and both blocks keep their bytes. Freed, that range is
 * unstitched for a request it does not fit (2h + 4 MiB, with fresh units
 * for the 4 MiB), and its addresses are unmapped only once the device was
 * waited for (the SIGUSR1 flush, here). */
static int stitch(void)
{
    const char *hv = getenv("RT_HOLE_MIB"), *uv = getenv("RT_UNIT_MIB");
    size_t h = (hv ? (size_t)atoi(hv) : 8) * MIB, u = (uv ? (size_t)atoi(uv) : 2) * MIB;
    CHECK(h && u && h % u == 0);
    char *a, *b, *d, *e;
    CHECK(two_holes(h, &a, &b) == 0);
#ifdef SIMCUDA
    simcuda_stats before = sim(0);
#endif
    OK(cudaMalloc((void **)&d, 2 * h));
    CHECK(d < a || d >= a + 3 * h);
    fill(d, 3, 2 * h);
    expect(b, 2, h);
    expect(d, 3, 2 * h);
#ifdef SIMCUDA
    simcuda_stats after = sim(0);
    printf("stitched: %lu mappings, %llu bytes more in use, %lu unmapped\n",
           after.vmm_maps - before.vmm_maps, after.used - before.used,
           after.vmm_unmaps - before.vmm_unmaps);
    /* One mapping per unit of the two holes. */
    CHECK(after.vmm_maps - before.vmm_maps == 2 * h / u && after.used == before.used);
    CHECK(after.vmm_unmaps == before.vmm_unmaps);
#endif
    OK(cudaFree(d));
    /* Larger than both holes: they and fresh units for the rest. */
    size_t esz = 2 * h + 4 * MIB, fresh = (esz + u - 1) / u * u - 2 * h;
    OK(cudaMalloc((void **)&e, esz));
    fill(e, 4, esz);
    expect(b, 2, h);
    expect(e, 4, esz);
#ifdef SIMCUDA
    after = sim(0);
    printf("restitched: %llu bytes more in use, %lu unmapped, %lu unsynced\n",
           after.used - before.used, after.vmm_unmaps - before.vmm_unmaps,
           after.unsynced_unmaps);
    CHECK(after.used - before.used == fresh);
    CHECK(after.vmm_unmaps == before.vmm_unmaps); /* d's range waits */
#else
    (void)fresh;
#endif
    OK(cudaFree(e));
    OK(cudaFree(b));
    return flushed_all();
}

/* Under CUPOOL_STITCH=1 and CUPOOL_VMM_UNIT=2M: a 24 MiB segment holds
 * 8 MiB live between two 8 MiB holes. 12 MiB are stitched from the first
 * hole and half the second; freed, they grow in place for 16 MiB: only
 * the second hole's other half is mapped (2 mappings, at the end of the
 * same addresses), nothing is unmapped or newly in use, and every byte
 * lands where it should. */
static int stitch_extend(void)
{
    size_t h = 8 * MIB;
    char *a, *b, *d, *e;
    CHECK(two_holes(h, &a, &b) == 0);
    OK(cudaMalloc((void **)&d, 12 * MIB));
    CHECK(d < a || d >= a + 24 * MIB);
    fill(d, 3, 12 * MIB);
    OK(cudaFree(d));
#ifdef SIMCUDA
    simcuda_stats before = sim(0);
#endif
    OK(cudaMalloc((void **)&e, 16 * MIB));
    fill(e, 4, 16 * MIB);
    expect(b, 2, 8 * MIB);
    expect(e, 4, 16 * MIB);
#ifdef SIMCUDA
    simcuda_stats after = sim(0);
    printf("extended: same address %d, %lu mappings, %llu bytes more in use, "
           "%lu unmapped\n", e == d, after.vmm_maps - before.vmm_maps,
           after.used - before.used, after.vmm_unmaps - before.vmm_unmaps);
    CHECK(e == d && after.vmm_maps - before.vmm_maps == 2);
    CHECK(after.used == before.used && after.vmm_unmaps == before.vmm_unmaps);
#else
    printf("extended: same address %d\n", e == d);
    CHECK(e == d);
#endif
    OK(cudaFree(e));
    OK(cudaFree(b));
    return flushed_all();
}

/* IPC of a stitched block (CUPOOL_STITCH=1, CUPOOL_VMM_UNIT=2M): d is
 * 16 MiB over two 8 MiB holes of one segment, first half 0x51, second
 * 0x52. Another process opens d's handle and one for an address inside
 * its second half, finds each half's bytes at both ends, and writes 0x53
 * over the first 4 KiB of the second half; back here, they are in d, and
 * the live block between the holes is untouched. */
static int ipc_stitched(void)
{
    size_t h = 8 * MIB;
    char *a, *b, *d;
    CHECK(two_holes(h, &a, &b) == 0);
    OK(cudaMalloc((void **)&d, 2 * h));
    CHECK(d < a || d >= a + 3 * h); /* stitched: new addresses */
    fill(d, 0x51, h);
    fill(d + h, 0x52, h);
    cudaIpcMemHandle_t hd, hi;
    OK(cudaIpcGetMemHandle(&hd, d));
    OK(cudaIpcGetMemHandle(&hi, d + h + 4096));
    CHECK(importer("stitched", &hd, &hi, NULL) == 0);
    CHECK(dev_byte(d + h) == 0x53 && dev_byte(d + h + 4095) == 0x53);
    CHECK(dev_byte(d + h + 4096) == 0x52 && dev_byte(d + 2 * h - 1) == 0x52);
    expect(d, 0x51, h);
    expect(b, 2, h);
    printf("ipc stitched ok: both holes shared at their offsets\n");
    OK(cudaFree(d));
    OK(cudaFree(b));
    return 0;
}

/* IPC of a 1 GiB block in VMM segments (512 pieces of 2 MiB) with at most
 * 1024 descriptors open in each process: the pieces travel and are mapped
 * a batch at a time (all at once, they would not fit). Another process
 * reads both ends and writes the middle. */
static int ipc_large(void)
{
    struct rlimit rl;
    CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0);
    rl.rlim_cur = rl.rlim_max < 1024 ? rl.rlim_max : 1024;
    CHECK(setrlimit(RLIMIT_NOFILE, &rl) == 0);
    size_t n = 1ull << 30;
    char *d;
    OK(cudaMalloc((void **)&d, n));
    dev_fill(d, 0x61, 4096);
    dev_fill(d + n - 4096, 0x62, 4096);
    cudaIpcMemHandle_t h;
    OK(cudaIpcGetMemHandle(&h, d));
    CHECK(importer("large", &h, &h, NULL) == 0);
    CHECK(dev_byte(d + n / 2) == 0x63 && dev_byte(d + n / 2 - 1) != 0x63);
    printf("ipc large ok: 1 GiB shared in 2 MiB pieces\n");
    OK(cudaFree(d));
    return 0;
}

static int ipc_import_large(const cudaIpcMemHandle_t *h)
{
    size_t n = 1ull << 30;
    char *d;
    OK(cudaIpcOpenMemHandle((void **)&d, *h, cudaIpcMemLazyEnablePeerAccess));
    CHECK(dev_byte(d) == 0x61 && dev_byte(d + n - 1) == 0x62);
    dev_fill(d + n / 2, 0x63, 4096);
    OK(cudaIpcCloseMemHandle(d));
    return 0;
}

static int ipc_import_stitched(const cudaIpcMemHandle_t *hd, const cudaIpcMemHandle_t *hi)
{
    size_t h = 8 * MIB;
    char *d, *in;
    unsigned fl = cudaIpcMemLazyEnablePeerAccess;
    OK(cudaIpcOpenMemHandle((void **)&d, *hd, fl));
    OK(cudaIpcOpenMemHandle((void **)&in, *hi, fl));
    CHECK(dev_byte(d) == 0x51 && dev_byte(d + h - 1) == 0x51);
    CHECK(dev_byte(d + h) == 0x52 && dev_byte(d + 2 * h - 1) == 0x52);
    CHECK(dev_byte(in) == 0x52 && dev_byte(in + h - 4096 - 1) == 0x52);
    dev_fill(d + h, 0x53, 4096);
    CHECK(dev_byte(in - 1) == 0x53); /* the same memory, mapped twice */
    OK(cudaIpcCloseMemHandle(in));
    OK(cudaIpcCloseMemHandle(d));
    return 0;
}

#ifdef SIMCUDA
/* The fences of n reuses of p's 64 MiB block, each with a memset in it if
 * busy (a legacy-stream event or a synchronization each). */
static unsigned long pairs_fenced(void *p, int n, bool busy)
{
    simcuda_stats s0 = sim(0);
    for (int i = 0; i < n; i++) {
        void *q;
        OK(cudaMalloc(&q, 64 * MIB));
        CHECK(q == p);
        if (busy)
            OK(cudaMemsetAsync(q, i, MIB, 0));
        OK(cudaFree(q));
    }
    simcuda_stats s1 = sim(0);
    return s1.legacy_records + s1.syncs - s0.legacy_records - s0.syncs;
}

/* Pairs of 64 MiB that reuse one block (a large block is always the best
 * fit, so each reuse asks for a fence): n pairs with nothing between them,
 * then n with work (a memset of the block) in each. Prints how many fences
 * reached CUDA for each; CUPOOL_CUPTI should skip a fence only when no work
 * came since the last one. */
static int cupti(void)
{
    enum { n = 50 };
    void *p;
    OK(cudaMalloc(&p, 64 * MIB));
    OK(cudaFree(p));
    unsigned long quiet = pairs_fenced(p, n, false);
    unsigned long busy = pairs_fenced(p, n, true);
    printf("quiet pairs: %lu fences; busy pairs: %lu fences\n", quiet, busy);
    return 0;
}

static atomic_int profiler_saw;

static void CUPTIAPI profiler_call(void *ud, CUpti_CallbackDomain domain, CUpti_CallbackId id,
                                   const void *data)
{
    (void)ud, (void)domain, (void)id;
    if (((const CUpti_CallbackData *)data)->callbackSite == CUPTI_API_EXIT)
        atomic_fetch_add(&profiler_saw, 1);
}

/* The program subscribes to CUPTI as a profiler does: by the name its
 * linker binds (the global scope), or through a handle to the library
 * (CUPTI_BY_HANDLE=1). It must get CUPTI (the simulated one takes one
 * subscriber) and see the driver's calls. */
static void program_subscribes(void)
{
    typedef CUptiResult (*subscribe_fn)(CUpti_SubscriberHandle *, CUpti_CallbackFunc, void *);
    typedef CUptiResult (*enable_fn)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain);
    void *lib = RTLD_DEFAULT;
    if (getenv("CUPTI_BY_HANDLE"))
        lib = sim_lib("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    subscribe_fn subscribe = (subscribe_fn)dlsym(lib, "cuptiSubscribe");
    enable_fn enable = (enable_fn)dlsym(lib, "cuptiEnableDomain");
    CHECK(subscribe && enable);
    CUpti_SubscriberHandle sub;
    CUptiResult r = subscribe(&sub, profiler_call, NULL);
    printf("the program's subscribe: %d\n", (int)r);
    CHECK(r == CUPTI_SUCCESS);
    CHECK(enable(1, sub, CUPTI_CB_DOMAIN_DRIVER_API) == CUPTI_SUCCESS);
}

/* The program subscribes midway (program_subscribes): cupool fences as
 * without CUPTI from then on, no quiet reuse skips its fence.
 * CUPTI_NCCL=N makes an NCCL call first, then N reuses with work in each
 * (CUPOOL_CUPTI=auto starts at the 8th fence after the call; it prints
 * how many of them fenced);
 * CUPTI_FIRST=1 subscribes before anything else instead (cupool must then
 * leave CUPTI to the program). */
static int cupti_yield(void)
{
    enum { n = 20 };
    bool first = getenv("CUPTI_FIRST") != NULL;
    if (first)
        program_subscribes();
    void *p;
    OK(cudaMalloc(&p, 64 * MIB));
    OK(cudaFree(p));
    if (getenv("CUPTI_NCCL")) {
        CHECK(((nccl_void_fn)nccl("ncclGroupStart"))() == 0);
        CHECK(((nccl_void_fn)nccl("ncclGroupEnd"))() == 0);
        printf("after the NCCL call: %lu fences\n",
               pairs_fenced(p, atoi(getenv("CUPTI_NCCL")), true));
    }
    unsigned long quiet_before = pairs_fenced(p, n, false);
    if (!first)
        program_subscribes();
    unsigned long busy_after = pairs_fenced(p, n, true);
    unsigned long quiet_after = pairs_fenced(p, n, false);
    printf("quiet before: %lu fences; after: busy %lu, quiet %lu fences; the program's "
           "subscriber saw %d calls\n", quiet_before, busy_after, quiet_after,
           atomic_load(&profiler_saw));
    CHECK(atomic_load(&profiler_saw) >= n);
    return 0;
}

/* CUPOOL_CUPTI=1: the program subscribes on one thread while another
 * reuses a block with a memset in each reuse: every reuse fences (work
 * came since the last), those begun after the subscribe returned too,
 * when CUPTI no longer reports the memsets to cupool. */
static atomic_int reuses_done;
static atomic_bool handed;

static void *subscribe_midway(void *arg)
{
    (void)arg;
    while (atomic_load(&reuses_done) < 50)
        sched_yield();
    typedef CUptiResult (*subscribe_fn)(CUpti_SubscriberHandle *, CUpti_CallbackFunc, void *);
    subscribe_fn subscribe = (subscribe_fn)dlsym(RTLD_DEFAULT, "cuptiSubscribe");
    CUpti_SubscriberHandle sub;
    CHECK(subscribe && subscribe(&sub, profiler_call, NULL) == CUPTI_SUCCESS);
    atomic_store(&handed, true);
    return NULL;
}

static int cupti_yield_threads(void)
{
    enum { n = 400 };
    void *p, *q;
    OK(cudaMalloc(&p, 64 * MIB));
    OK(cudaMemsetAsync(p, 0, MIB, 0));
    OK(cudaFree(p));
    pthread_t t;
    CHECK(pthread_create(&t, NULL, subscribe_midway, NULL) == 0);
    int after = 0, missed = 0;
    for (int i = 0; i < n; i++) {
        /* Half way, the subscriber has had its chance: wait for it (a
         * loaded machine may not have run its thread yet), so that some
         * reuses come after the handover. */
        for (int w = 0; i == n / 2 && !atomic_load(&handed) && w < 5000; w++)
            sleep_ms(1);
        bool late = atomic_load(&handed);
        simcuda_stats s0 = sim(0);
        OK(cudaMalloc(&q, 64 * MIB));
        CHECK(q == p);
        simcuda_stats s1 = sim(0);
        bool fenced = s1.legacy_records + s1.syncs > s0.legacy_records + s0.syncs;
        missed += !fenced;
        after += late;
        OK(cudaMemsetAsync(q, i, MIB, 0));
        OK(cudaFree(q));
        atomic_store(&reuses_done, i + 1);
    }
    CHECK(pthread_join(t, NULL) == 0);
    printf("%d reuses, %d after the program subscribed; %d not fenced\n", n, after, missed);
    CHECK(after > 0 && missed == 0);
    return 0;
}

/* The runtime hands out cupool's cuMemAlloc; allocations through it are
 * served; the runtime's own cudaMalloc, which reaches the driver through
 * the same entry point inside cupool, costs one driver allocation per
 * segment: served once, never twice. */
static int entrypoint(void)
{
    typedef int (*alloc_fn)(unsigned long long *, size_t);
    typedef int (*free_fn)(unsigned long long);
    void *fa = NULL, *ff = NULL;
    enum cudaDriverEntryPointQueryResult q;
    OK(cudaGetDriverEntryPointByVersion("cuMemAlloc", &fa, 13000, cudaEnableDefault, &q));
    OK(cudaGetDriverEntryPointByVersion("cuMemFree", &ff, 13000, cudaEnableDefault, &q));
    Dl_info info;
    CHECK(dladdr(fa, &info) && strstr(info.dli_fname, "libcupool"));
    alloc_fn a = (alloc_fn)fa;
    free_fn f = (free_fn)ff;
    unsigned long before = sim(0).mallocs;
    for (int i = 0; i < 32; i++) {
        unsigned long long p;
        CHECK(a(&p, MIB) == 0 && p);
        CHECK(f(p) == 0);
    }
    CHECK(sim(0).mallocs - before == 1);
    /* Three large blocks, three segments, three driver allocations. */
    void *p[3];
    for (int i = 0; i < 3; i++)
        OK(cudaMalloc(&p[i], 8 * MIB));
    printf("driver allocations: %lu\n", sim(0).mallocs - before);
    CHECK(sim(0).mallocs - before == 4);
    for (int i = 0; i < 3; i++)
        OK(cudaFree(p[i]));
    return 0;
}
#endif

static const struct { const char *name; int (*run)(void); } scenarios[] = {
#ifdef SIMCUDA
    {"pairs", pairs}, {"fence", fence}, {"fence_sync", fence_sync},
    {"fence_poll", fence_poll}, {"fence_share", fence_share}, {"comm_straddle", comm_straddle}, {"vmm_peer", vmm_peer}, {"fence_poll_cap", fence_poll_cap},
    {"fence_comm", fence_comm}, {"ncclcalls", ncclcalls}, {"fence_destroyed", fence_destroyed},
    {"fence_idle", fence_idle}, {"fence_reset", fence_reset},
    {"capture", capture}, {"flush", flush}, {"foreign", foreign},
    {"reset", reset}, {"multidev", multidev}, {"shards", shards},
    {"shards_cap", shards_cap}, {"cupti", cupti}, {"cupti_yield", cupti_yield},
    {"cupti_yield_threads", cupti_yield_threads},
    {"sig_chain", sig_chain},
    {"sig_dispositions", sig_dispositions}, {"sig_blocked", sig_blocked},
    {"sig_flags", sig_flags}, {"sig_fork", sig_fork}, {"entrypoint", entrypoint},
    {"job", nccl_job},
#endif
#ifndef SIMCUDA
    {"capture_real", capture_real},
#endif
    {"serve", serve}, {"pairbench", pairbench}, {"capture_modes", capture_modes},
    {"cap", cap}, {"capinfo", capinfo}, {"phases", phases}, {"turn", turn}, {"group_race", group_race}, {"stats", stats}, {"frag", frag}, {"badfree", badfree}, {"zero", zero}, {"ipc", ipc}, {"ipc_import", ipc_import}, {"ipc_stitched", ipc_stitched}, {"ipc_large", ipc_large},
    {"threads", threads}, {"tracemix", tracemix}, {"traceloop", traceloop},
    {"vmm", vmm}, {"stitch", stitch}, {"stitch_extend", stitch_extend}, {"execsleep", execsleep}, {"bigfail", bigfail},
    {"tracechild", tracechild},
};

int main(int argc, char **argv)
{
    prog_argc = argc;
    prog_argv = argv;
    /* RT_SETENV=NAME=VALUE: set once cupool has loaded, before the first
     * CUDA call, as a Python program sets os.environ. */
    static char set[256];
    const char *sv = getenv("RT_SETENV");
    if (sv && strlen(sv) < sizeof(set) && strchr(sv, '='))
        putenv(strcpy(set, sv));
    for (size_t i = 0; argc > 1 && i < sizeof(scenarios) / sizeof(scenarios[0]); i++)
        if (!strcmp(argv[1], scenarios[i].name))
            return scenarios[i].run();
    fprintf(stderr, "usage: rt_prog SCENARIO\n");
    return 2;
}
