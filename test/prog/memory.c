/* SPDX-License-Identifier: Apache-2.0 */
/*
 * memory.c - the cap, shards, flushes, foreign and bad frees, device reset, two
 * devices, zero bytes, a request beyond the device, the driver reached once.
 */
#include "prog.h"

#ifdef SIMCUDA
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
    for (int i = 0; i < 3000 && sim(0).used; i++)
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

/* A request far beyond the device fails, and the peak of reserved memory
 * counts only what the driver gave. */
static int bigfail(void)
{
    void *a, *b;
    OK(cudaMalloc(&a, MIB));
    CHECK(cudaMalloc(&b, (size_t)1 << 50) != cudaSuccess);
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
#ifdef SIMCUDA
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
#endif /* SIMCUDA */

const prog_scenario prog_memory_scenarios[] = {
#ifdef SIMCUDA
    {"flush", flush},
    {"foreign", foreign},
    {"reset", reset},
    {"multidev", multidev},
    {"shards", shards},
    {"shards_cap", shards_cap},
    {"entrypoint", entrypoint},
#endif
    {"cap", cap},
    {"capinfo", capinfo},
    {"badfree", badfree},
    {"zero", zero},
    {"bigfail", bigfail},
    {NULL, NULL},
};
