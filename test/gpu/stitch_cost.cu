/* SPDX-License-Identifier: Apache-2.0 */
/*
 * stitch_cost.cu - what one stitched allocation costs, run under cupool
 * (CUPOOL_STITCH=1), beside the same call under CUPOOL_VMM=1 (which grows
 * a fresh VMM segment instead) and without cupool (cudaMalloc).
 *
 * Each of REPS rounds frees a 3h segment, takes three h blocks from it,
 * frees the outer two and times cudaMalloc(2h): no free block fits it, so
 * cupool stitches the two holes (2h/2 MiB granules, two parts) or grows.
 * The new block is written whole by a kernel and read back at 64 places,
 * and the middle block must keep its bytes. Blocks stay live across rounds
 * and each round's h is 2 MiB larger than the last, so no earlier hole
 * serves a later round. Prints one JSON line: size (of round 0), median and
 * best microseconds.
 *
 *   nvcc -O2 -arch=sm_90 test/gpu/stitch_cost.cu -o stitch_cost
 *   stitch_cost SIZE_MIB [REPS]
 */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CK(x)                                                                 \
    do {                                                                      \
        cudaError_t e_ = (x);                                                 \
        if (e_) {                                                             \
            printf("%s: %s\n", #x, cudaGetErrorString(e_));                   \
            exit(1);                                                          \
        }                                                                     \
    } while (0)

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

__global__ void fill(unsigned *p, size_t n, unsigned v)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        p[i] = v ^ (unsigned)i;
}

static void expect(const unsigned *p, size_t n, unsigned v)
{
    for (int k = 0; k < 64; k++) {
        size_t i = n / 64 * k + (size_t)k * 977 % (n / 64);
        unsigned got;
        CK(cudaMemcpy(&got, p + i, sizeof(got), cudaMemcpyDeviceToHost));
        if (got != (v ^ (unsigned)i)) {
            printf("word %zu: %#x, not %#x\n", i, got, v ^ (unsigned)i);
            exit(1);
        }
    }
}

static int by_value(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    size_t mib = argc > 1 ? strtoul(argv[1], NULL, 0) : 64;
    int reps = argc > 2 ? atoi(argv[2]) : 5;
    double *t = (double *)calloc(reps, sizeof(*t));
    for (int r = 0; r < reps; r++) {
        size_t h = (mib / 2 << 20) + ((size_t)r << 21);
        void *big, *a, *b, *c, *d;
        CK(cudaMalloc(&big, 3 * h));
        CK(cudaFree(big));
        CK(cudaMalloc(&a, h));
        CK(cudaMalloc(&b, h));
        CK(cudaMalloc(&c, h));
        fill<<<1024, 256>>>((unsigned *)b, h / 4, 0xb0b0u + r);
        CK(cudaFree(a));
        CK(cudaFree(c));
        CK(cudaDeviceSynchronize());
        double t0 = now_us();
        CK(cudaMalloc(&d, 2 * h));
        t[r] = now_us() - t0;
        fill<<<1024, 256>>>((unsigned *)d, 2 * h / 4, 0xd0d0u + r);
        CK(cudaGetLastError());
        expect((const unsigned *)d, 2 * h / 4, 0xd0d0u + r);
        expect((const unsigned *)b, h / 4, 0xb0b0u + r);
    }
    qsort(t, reps, sizeof(*t), by_value);
    printf("{\"size_mib\": %zu, \"median_us\": %.1f, \"best_us\": %.1f}\n", mib,
           t[reps / 2], t[0]);
    return 0;
}
