/* SPDX-License-Identifier: Apache-2.0 */
// race.cu - does a reused block ever receive late writes from old work?
//
// Kernel A, on stream A, spins (about 2 ms a wave) and then writes 1 into every
// element of a block. The block is freed at once, allocated again (the
// pool hands back the same address) and kernel B writes 2 into it on stream
// B. If B's work is not ordered after A's, A's late writes leave 1s behind:
// a corruption. Real cudaFree would have waited for A; cupool's fence must
// order B after A without the host waiting.
//
// In the pairs marked busy, a third (non-blocking) stream runs a long
// kernel through the whole trial, as an all-reduce in flight would: a fence
// must still order B after A, whether it waits for the busy stream or not.
// In the pair marked destroyed, stream A is made for the trial and
// destroyed right after kernel A is queued (the kernel runs on; real
// cudaFree would wait for it): a fence must order B after it all the same.
//
// Usage: race [TRIALS]. Prints one line per (A, B) stream pair:
//   race A=<kind> B=<kind>[ busy][ destroyed] trials=N reused=R corrupted=C
// Built with -cudart shared so that LD_PRELOAD reaches its cudaMalloc.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <cuda_runtime.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); exit(2); } } while (0)

__global__ void slow_write(int *buf, int n, int val, long long spin)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    long long t0 = clock64();
    while (clock64() - t0 < spin) {}
    if (i < n) buf[i] = val;
}

__global__ void fast_write(int *buf, int n, int val)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) buf[i] = val;
}

enum kind { LEGACY, BLOCKING, NONBLOCKING, PER_THREAD };
static const char *kind_name[] = {"legacy", "blocking", "nonblocking", "per-thread"};

static cudaStream_t make(kind k)
{
    cudaStream_t s = 0;
    if (k == BLOCKING) CK(cudaStreamCreate(&s));
    if (k == NONBLOCKING) CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    if (k == PER_THREAD) s = cudaStreamPerThread;
    if (k == LEGACY) s = cudaStreamLegacy;
    return s;
}

int main(int argc, char **argv)
{
    int trials = argc > 1 ? atoi(argv[1]) : 20;
    // 4 MiB: exactly one large segment, so the block freed is the only
    // free block and reusing it must go through the fence.
    const int n = 1024 * 1024;
    const long long spin = 4000000; // about 2 ms at 1.98 GHz
    std::vector<int> host(n);
    struct { kind a, b; bool busy, destroyed; } pairs[] = {
        {NONBLOCKING, BLOCKING, false, false}, {NONBLOCKING, NONBLOCKING, false, false},
        {NONBLOCKING, PER_THREAD, false, false}, {NONBLOCKING, LEGACY, false, false},
        {BLOCKING, NONBLOCKING, false, false}, {BLOCKING, BLOCKING, false, false},
        {LEGACY, NONBLOCKING, false, false}, {PER_THREAD, NONBLOCKING, false, false},
        {LEGACY, NONBLOCKING, true, false}, {NONBLOCKING, LEGACY, true, false},
        {NONBLOCKING, NONBLOCKING, true, false}, {NONBLOCKING, LEGACY, false, true},
    };
    cudaStream_t busy;
    CK(cudaStreamCreateWithFlags(&busy, cudaStreamNonBlocking));
    int *scratch;
    CK(cudaMalloc(&scratch, 256 * sizeof(int)));
    for (auto &pr : pairs) {
        cudaStream_t a = pr.destroyed ? 0 : make(pr.a), b = make(pr.b);
        int reused = 0, corrupted = 0;
        for (int t = 0; t < trials; t++) {
            int *p, *q;
            if (pr.busy) // one wave, three times as long as A's kernel
                slow_write<<<1, 256, 0, busy>>>(scratch, 256, 3, 3 * spin);
            CK(cudaMalloc(&p, n * sizeof(int)));
            if (pr.destroyed)
                a = make(pr.a);
            slow_write<<<(n + 255) / 256, 256, 0, a>>>(p, n, 1, spin);
            CK(cudaGetLastError());
            if (pr.destroyed)
                CK(cudaStreamDestroy(a));
            CK(cudaFree(p));
            CK(cudaMalloc(&q, n * sizeof(int)));
            reused += p == q;
            fast_write<<<(n + 255) / 256, 256, 0, b>>>(q, n, 2);
            CK(cudaGetLastError());
            CK(cudaDeviceSynchronize());
            CK(cudaMemcpy(host.data(), q, n * sizeof(int), cudaMemcpyDeviceToHost));
            int bad = 0;
            for (int i = 0; i < n; i++) bad += host[i] != 2;
            corrupted += bad > 0;
            CK(cudaFree(q));
        }
        printf("race A=%s B=%s%s%s trials=%d reused=%d corrupted=%d\n",
               kind_name[pr.a], kind_name[pr.b], pr.busy ? " busy" : "",
               pr.destroyed ? " destroyed" : "", trials, reused, corrupted);
        if (!pr.destroyed && (pr.a == BLOCKING || pr.a == NONBLOCKING)) CK(cudaStreamDestroy(a));
        if (pr.b == BLOCKING || pr.b == NONBLOCKING) CK(cudaStreamDestroy(b));
    }
    CK(cudaFree(scratch));
    CK(cudaStreamDestroy(busy));
    return 0;
}
