/* SPDX-License-Identifier: Apache-2.0 */
/*
 * cupti.c - CUPOOL_CUPTI: fences after work was submitted, CUPTI given up to
 * a program that subscribes.
 */
#include "prog.h"

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
void program_subscribes(void)
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
#endif /* SIMCUDA */

const prog_scenario prog_cupti_scenarios[] = {
#ifdef SIMCUDA
    {"cupti", cupti},
    {"cupti_yield", cupti_yield},
    {"cupti_yield_threads", cupti_yield_threads},
#endif
    {NULL, NULL},
};
