/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fence.c - fences: exactly on reuse, barrier, sync and poll, idle, destroyed
 * and shared streams, NCCL's streams.
 */
#include "prog.h"

#ifdef SIMCUDA
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

/* dlopen of one of the simulated libraries, beside this program's rt/. */
void *sim_lib(const char *name, int flags)
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

void *nccl(const char *name)
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

/* Threads that ask for fences at once share them: fewer records than
 * asks. Sharing needs the threads to overlap, which a loaded machine may
 * not give in one round (each thread runs its pairs alone): up to 20
 * rounds, the first that shares ends it; without sharing none would. */
static int fence_share(void)
{
    /* Each thread's first pair takes fresh memory; every later reuse asks
     * for a fence. */
    int asked = SHARE_THREADS * (SHARE_PAIRS - 1);
    unsigned long records = 0;
    for (int round = 0; round < 20; round++) {
        pthread_t t[SHARE_THREADS];
        unsigned long r0 = sim(0).legacy_records;
        for (int i = 0; i < SHARE_THREADS; i++)
            CHECK(pthread_create(&t[i], NULL, share_worker, NULL) == 0);
        for (int i = 0; i < SHARE_THREADS; i++)
            pthread_join(t[i], NULL);
        records = sim(0).legacy_records - r0;
        printf("round %d: fences asked %d, records %lu\n", round, asked, records);
        if (records + 10 < (unsigned long)asked)
            return 0;
    }
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
#endif /* SIMCUDA */

const prog_scenario prog_fence_scenarios[] = {
#ifdef SIMCUDA
    {"pairs", pairs},
    {"fence", fence},
    {"fence_sync", fence_sync},
    {"fence_poll", fence_poll},
    {"fence_share", fence_share},
    {"comm_straddle", comm_straddle},
    {"fence_poll_cap", fence_poll_cap},
    {"fence_comm", fence_comm},
    {"ncclcalls", ncclcalls},
    {"fence_destroyed", fence_destroyed},
    {"fence_idle", fence_idle},
    {"fence_reset", fence_reset},
#endif
    {NULL, NULL},
};
