/* SPDX-License-Identifier: Apache-2.0 */
// trim_wait.cu - under CUPOOL_VMM=1 and CUPOOL_MAX_RESERVED=64M, does the
// pool wait for running work before it gives back memory a kernel still
// writes? A 30 MiB block shares a segment with a live 4 MiB block; a kernel
// writes the 30 MiB block for about 300 ms, and the block is freed at once
// (legal: the real cudaFree would wait). A 50 MiB request then fits under
// the cap only if the pool gives back the granules behind the live block,
// the kernel's included. Without a wait the kernel would write unmapped
// memory and the context would fail; with it, the request takes as long as
// the rest of the kernel. Prints one line:
//   trim_wait malloc_ms=M kernel_ms=K ok=1
// Built with -cudart shared so that LD_PRELOAD reaches its cudaMalloc.
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <cuda_runtime.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    printf("trim_wait %s:%d %s: %s ok=0\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); exit(1); } } while (0)

static double now_ms(void)
{
    timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

__global__ void slow_fill(int *buf, size_t n, long long spin)
{
    long long t0 = clock64();
    while (clock64() - t0 < spin) {}
    for (size_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
        buf[i] = 7;
}

int main()
{
    const size_t MIB = 1 << 20;
    int *big, *keep, *b, *c;
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudaMalloc(&big, 40 * MIB));
    CK(cudaFree(big));
    CK(cudaMalloc(&keep, 4 * MIB));  // the segment's front, live to the end
    CK(cudaMalloc(&b, 30 * MIB));    // behind it
    if ((char *)keep != (char *)big || (char *)b != (char *)big + 4 * MIB) {
        printf("trim_wait unexpected layout ok=0\n");
        return 1;
    }
    double t0 = now_ms();
    slow_fill<<<132, 256, 0, s>>>(b, 30 * MIB / sizeof(int), 600000000LL); // ~300 ms
    CK(cudaGetLastError());
    CK(cudaFree(b));
    double t1 = now_ms();
    CK(cudaMalloc(&c, 50 * MIB));    // only after a trim
    double t2 = now_ms();
    CK(cudaMemset(c, 0, 50 * MIB));
    CK(cudaDeviceSynchronize());
    double t3 = now_ms();
    printf("trim_wait malloc_ms=%.1f kernel_ms=%.1f ok=%d\n", t2 - t1, t3 - t0,
           t2 - t1 > 0.5 * (t3 - t0));
    CK(cudaFree(c));
    CK(cudaFree(keep));
    return 0;
}
