/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mix_bench.c - allocation benchmarks for scripts/bench-gpu.
 *
 *   mix_bench mix MODE        random mix: 55% allocations, sizes 512 B to
 *                             4 MiB log-uniform, at most 4000 live; ns/op
 *   mix_bench threads MODE N  N threads, each a random mix of small blocks
 *                             (512 B to 64 KiB, at most 256 live each;
 *                             1 000 000 operations a thread, 100 000 for
 *                             async): aggregate operations per second
 *   mix_bench watch GAIN_MIB  print free memory's start, then poll
 *                             cudaMemGetInfo until it rose by GAIN_MIB and
 *                             print CLOCK_REALTIME ns of that moment
 *
 * MODE is "malloc" (cudaMalloc/cudaFree: cupool when preloaded, else the
 * raw runtime) or "async" (cudaMallocAsync/cudaFreeAsync on the default
 * pool, release threshold at the maximum). One JSON line per run.
 */
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cuda_runtime_api.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_)); exit(2); } } while (0)

static int async_mode;

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static uint64_t rng_next(uint64_t *s)
{
    *s ^= *s >> 12;
    *s ^= *s << 25;
    *s ^= *s >> 27;
    return *s * 0x2545F4914F6CDD1Dull;
}

static void *alloc(size_t n)
{
    void *p;
    if (async_mode)
        CK(cudaMallocAsync(&p, n, 0));
    else
        CK(cudaMalloc(&p, n));
    return p;
}

static void release(void *p)
{
    if (async_mode)
        CK(cudaFreeAsync(p, 0));
    else
        CK(cudaFree(p));
}

/* ops operations of a 55% mix over sizes 2^lo .. 2^hi, at most live live
 * blocks; returns elapsed ns. The sizes and choices are drawn ahead. */
static double run_mix(uint64_t seed, int ops, int lo, int hi, int live)
{
    void **slot = calloc((size_t)live, sizeof(*slot));
    size_t *size = malloc((size_t)ops * sizeof(*size));
    uint8_t *coin = malloc((size_t)ops);
    for (int i = 0; i < ops; i++) {
        double u = (double)(rng_next(&seed) >> 11) / 9007199254740992.0;
        size[i] = (size_t)exp2(lo + (hi - lo) * u);
        coin[i] = rng_next(&seed) % 100 < 55;
    }
    int n = 0;
    double t0 = now_ns();
    for (int i = 0; i < ops; i++) {
        if (n == 0 || (coin[i] && n < live)) {
            slot[n++] = alloc(size[i]);
        } else {
            int k = (int)(size[i] % (size_t)n);
            release(slot[k]);
            slot[k] = slot[--n];
        }
    }
    double t = now_ns() - t0;
    while (n)
        release(slot[--n]);
    free(slot);
    free(size);
    free(coin);
    return t;
}

typedef struct job { uint64_t seed; int ops; double ns; } job;

static void *thread_main(void *arg)
{
    job *j = arg;
    run_mix(j->seed, 2000, 9, 16, 256); /* warm-up */
    j->ns = run_mix(j->seed + 1, j->ops, 9, 16, 256);
    return NULL;
}

static void setup(void)
{
    CK(cudaFree(0));
    cudaMemPool_t mp;
    CK(cudaDeviceGetDefaultMemPool(&mp, 0));
    uint64_t max = UINT64_MAX;
    CK(cudaMemPoolSetAttribute(mp, cudaMemPoolAttrReleaseThreshold, &max));
}

int main(int argc, char **argv)
{
    if (argc < 3)
        return 2;
    async_mode = argc > 2 && !strcmp(argv[2], "async");
    if (!strcmp(argv[1], "mix")) {
        setup();
        enum { OPS = 200000 };
        run_mix(7, OPS / 4, 9, 22, 4000); /* warm-up: fill the caches */
        double v[5];
        for (int r = 0; r < 5; r++)
            v[r] = run_mix(11 + (uint64_t)r, OPS, 9, 22, 4000) / OPS;
        for (int i = 0; i < 5; i++) /* median of five */
            for (int k = i + 1; k < 5; k++)
                if (v[k] < v[i]) { double t = v[i]; v[i] = v[k]; v[k] = t; }
        printf("{\"bench\":\"mix\",\"mode\":\"%s\",\"ns_per_op\":%.1f}\n", argv[2], v[2]);
    } else if (!strcmp(argv[1], "threads") && argc > 3) {
        setup();
        int n = atoi(argv[3]);
        /* Each thread's timed run long enough (about 0.2 s under cupool)
         * that a thread descheduled for a few ms does not decide the
         * figure; cudaMallocAsync's pool is 20 to 100 times slower. */
        const int OPS = async_mode ? 100000 : 1000000;
        pthread_t t[64];
        job j[64];
        double t0 = now_ns();
        for (int i = 0; i < n && i < 64; i++) {
            j[i] = (job){.seed = 1000 + (uint64_t)i * 77, .ops = OPS};
            pthread_create(&t[i], NULL, thread_main, &j[i]);
        }
        double worst = 0;
        for (int i = 0; i < n && i < 64; i++) {
            pthread_join(t[i], NULL);
            worst = j[i].ns > worst ? j[i].ns : worst;
        }
        (void)t0;
        printf("{\"bench\":\"threads\",\"mode\":\"%s\",\"threads\":%d,"
               "\"ops_per_s\":%.0f}\n", argv[2], n, (double)n * OPS / worst * 1e9);
    } else if (!strcmp(argv[1], "watch")) {
        CK(cudaFree(0));
        size_t f0, f, t;
        CK(cudaMemGetInfo(&f0, &t));
        size_t gain = strtoull(argv[2], NULL, 0) << 20;
        printf("ready %zu\n", f0);
        fflush(stdout);
        for (;;) {
            CK(cudaMemGetInfo(&f, &t));
            if (f >= f0 + gain)
                break;
        }
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        printf("seen %lld\n", (long long)now.tv_sec * 1000000000LL + now.tv_nsec);
    }
    return 0;
}
