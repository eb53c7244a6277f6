/* SPDX-License-Identifier: Apache-2.0 */
/*
 * vmm_parts.cu - what CUPOOL_VMM's driver calls cost, beside cudaMalloc and
 * cudaFree of the same sizes, and whether cuMemUnmap waits for running work
 * (it does not: so cupool waits for the device itself before unmapping).
 * Segments of 2 MiB, 64 MiB and 1 GiB, built of 2 MiB granules (as cupool
 * builds them) and of one allocation; best of 5 runs, in microseconds.
 *
 *   nvcc -O2 -arch=sm_90 test/gpu/vmm_parts.cu -lcuda -o vmm_parts
 */
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double now_us(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

#define CK(x)                                                                 \
    do {                                                                      \
        CUresult r_ = (x);                                                    \
        if (r_) {                                                             \
            const char *s_;                                                   \
            cuGetErrorString(r_, &s_);                                        \
            printf("%s: %s\n", #x, s_);                                       \
            exit(1);                                                          \
        }                                                                     \
    } while (0)

__global__ void spin(long long cycles)
{
    long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
}

int main(void)
{
    cudaFree(0);
    CUdevice dev;
    CK(cuCtxGetDevice(&dev));
    CUmemAllocationProp prop = {};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    size_t g = 0;
    CK(cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
    printf("granularity %zu bytes\n", g);
    CUmemAccessDesc ad = {};
    ad.location = prop.location;
    ad.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    const size_t sizes[] = {g, 32 * g, 512 * g};
    for (int si = 0; si < 3; si++) {
        size_t S = sizes[si];
        for (size_t C = g;; C = S) {
            int n = (int)(S / C);
            CUmemGenericAllocationHandle *h =
                (CUmemGenericAllocationHandle *)malloc(n * sizeof(*h));
            double best[4] = {1e18, 1e18, 1e18, 1e18};
            for (int rep = 0; rep < 5; rep++) {
                CUdeviceptr va;
                double t0 = now_us();
                CK(cuMemAddressReserve(&va, S, C, 0, 0));
                for (int i = 0; i < n; i++)
                    CK(cuMemCreate(&h[i], C, &prop, 0));
                double t1 = now_us();
                for (int i = 0; i < n; i++)
                    CK(cuMemMap(va + i * C, C, 0, h[i], 0));
                double t2 = now_us();
                CK(cuMemSetAccess(va, S, &ad, 1));
                double t3 = now_us();
                for (int i = 0; i < n; i++) {
                    CK(cuMemUnmap(va + i * C, C));
                    CK(cuMemRelease(h[i]));
                }
                CK(cuMemAddressFree(va, S));
                double t4 = now_us();
                double d[4] = {t1 - t0, t2 - t1, t3 - t2, t4 - t3};
                for (int k = 0; k < 4; k++)
                    best[k] = d[k] < best[k] ? d[k] : best[k];
            }
            printf("%5zu MiB of %4zu MiB allocations (%3d): reserve+create %8.1f  map %7.1f  "
                   "access %7.1f  unmap+release+free %8.1f  total %8.1f us\n",
                   S >> 20, C >> 20, n, best[0], best[1], best[2], best[3],
                   best[0] + best[1] + best[2] + best[3]);
            free(h);
            if (C == S)
                break;
        }
        double bm = 1e18, bf = 1e18;
        for (int rep = 0; rep < 5; rep++) {
            void *p;
            double t0 = now_us();
            cudaMalloc(&p, S);
            double t1 = now_us();
            cudaFree(p);
            double t2 = now_us();
            bm = t1 - t0 < bm ? t1 - t0 : bm;
            bf = t2 - t1 < bf ? t2 - t1 : bf;
        }
        printf("%5zu MiB cudaMalloc %.1f  cudaFree %.1f us\n", S >> 20, bm, bf);
    }
    /* Unmapping while a kernel runs on another stream. */
    CUdeviceptr va;
    CUmemGenericAllocationHandle h;
    CK(cuMemAddressReserve(&va, g, 0, 0, 0));
    CK(cuMemCreate(&h, g, &prop, 0));
    CK(cuMemMap(va, g, 0, h, 0));
    CK(cuMemSetAccess(va, g, &ad, 1));
    cudaStream_t s;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    spin<<<1, 1, 0, s>>>(1000);
    cudaDeviceSynchronize();
    spin<<<1, 1, 0, s>>>(1500000000LL);
    double t0 = now_us();
    CK(cuMemUnmap(va, g));
    CK(cuMemRelease(h));
    double t1 = now_us();
    cudaDeviceSynchronize();
    double t2 = now_us();
    printf("unmap+release during a kernel: %.1f us; the kernel ran %.1f us more\n",
           t1 - t0, t2 - t1);
    CK(cuMemAddressFree(va, g));
    return 0;
}
