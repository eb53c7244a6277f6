/* SPDX-License-Identifier: Apache-2.0 */
/*
 * bench.c - pairbench: the cost of an allocation and free pair, one thread
 * and many.
 */
#include "prog.h"

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

const prog_scenario prog_bench_scenarios[] = {
    {"pairbench", pairbench},
    {NULL, NULL},
};
