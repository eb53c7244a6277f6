/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pair_bench.c - host-side latency of cudaMalloc+cudaFree pairs at several
 * sizes, and of cudaMallocAsync+cudaFreeAsync pairs on the default memory
 * pool with its release threshold at the maximum. Run it twice in one GPU
 * session, with and without cupool (CUPOOL_DISABLE=1 gives the raw runtime),
 * and compare. Prints one JSON line.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <cuda_runtime_api.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_)); exit(2); } } while (0)

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median over 9 batches of the mean pair time in a batch of k pairs. */
static double pairs(size_t size, int k, int async)
{
    double v[9];
    void *p;
    for (int r = -1; r < 9; r++) {
        double t0 = now_us();
        for (int i = 0; i < k; i++) {
            if (async) {
                CK(cudaMallocAsync(&p, size, 0));
                CK(cudaFreeAsync(p, 0));
            } else {
                CK(cudaMalloc(&p, size));
                CK(cudaFree(p));
            }
        }
        if (r >= 0)
            v[r] = (now_us() - t0) / k;
    }
    qsort(v, 9, sizeof(v[0]), cmp);
    return v[4];
}

int main(void)
{
    static const size_t sizes[] = {512, 1 << 20, 64 << 20, 256 << 20, 1u << 30};
    CK(cudaFree(0));
    cudaMemPool_t mp;
    CK(cudaDeviceGetDefaultMemPool(&mp, 0));
    uint64_t max = UINT64_MAX;
    CK(cudaMemPoolSetAttribute(mp, cudaMemPoolAttrReleaseThreshold, &max));
    const char *mode = getenv("CUPOOL_DISABLE") ? "raw" : "cupool";
    printf("{\"mode\":\"%s\"", mode);
    for (int async = 0; async < 2; async++) {
        printf(",\"%s\":{", async ? "async_pair_us" : "pair_us");
        for (int i = 0; i < 5; i++) {
            int k = sizes[i] >= (256u << 20) ? 20 : 200;
            printf("%s\"%zu\":%.3f", i ? "," : "", sizes[i], pairs(sizes[i], k, async));
        }
        printf("}");
    }
    printf("}\n");
    return 0;
}
