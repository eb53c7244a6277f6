/* SPDX-License-Identifier: Apache-2.0 */
// nccl_comm.cu - the fence's comm streams (shim/watch/comm.h) on real NCCL, one
// rank: an all-gather of one rank is a copy of its send buffer into its
// receive buffer, queued on the stream it is given, which keeps that
// stream busy as an all-reduce between GPUs would.
//
//   nccl_comm race [TRIALS]
//     The copy writes a 2 GiB receive buffer; the buffer is freed at once
//     (as real cudaFree allows: it waits for the device), allocated again
//     and zeroed on the legacy stream. If the zeroing is not ordered after
//     the copy, the copy's late writes survive: a corruption. Prints
//       race nccl trials=N reused=R corrupted=C
//   nccl_comm overlap [ITERS]
//     Each iteration queues a 1 GiB copy on the comm stream, then on the
//     legacy stream allocates, zeroes and frees a 64 MiB block 24 times,
//     and synchronizes. A fence that makes the legacy stream wait for the
//     copy serializes the two. Prints the median iteration:
//       overlap nccl iters=N median_us=T
//
// Linked against NCCL's libnccl.so.2 (NCCL_LIB) and the shared runtime, so
// that LD_PRELOAD reaches both.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <cuda_runtime.h>

typedef int nccl_result;
typedef void *nccl_comm;
extern "C" nccl_result ncclCommInitAll(nccl_comm *comm, int n, const int *devs);
extern "C" nccl_result ncclCommDestroy(nccl_comm comm);
extern "C" nccl_result ncclAllGather(const void *send, void *recv, size_t count, int type,
                                     nccl_comm comm, cudaStream_t stream);
enum { NCCL_INT8 = 0 };

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); exit(2); } } while (0)
#define NK(x) do { nccl_result r_ = (x); if (r_ != 0) { \
    fprintf(stderr, "%s:%d %s: NCCL error %d\n", __FILE__, __LINE__, #x, r_); exit(2); } } while (0)

__global__ void count_nonzero(const unsigned long long *p, size_t n, unsigned long long *bad)
{
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    for (; i < n; i += (size_t)gridDim.x * blockDim.x)
        if (p[i])
            atomicAdd(bad, 1ull);
}

static int race(nccl_comm comm, cudaStream_t nb, int trials)
{
    const size_t bytes = (size_t)2 << 30;
    void *src, *dst, *again;
    unsigned long long *bad, nbad;
    CK(cudaMalloc(&src, bytes));
    CK(cudaMemset(src, 0x5a, bytes));
    CK(cudaMalloc(&bad, sizeof(*bad)));
    CK(cudaDeviceSynchronize());
    int reused = 0, corrupted = 0;
    for (int t = 0; t < trials; t++) {
        CK(cudaMalloc(&dst, bytes));
        NK(ncclAllGather(src, dst, bytes, NCCL_INT8, comm, nb));
        CK(cudaFree(dst));
        CK(cudaMalloc(&again, bytes));
        reused += again == dst;
        CK(cudaMemsetAsync(again, 0, bytes, cudaStreamLegacy));
        CK(cudaStreamSynchronize(nb));
        CK(cudaDeviceSynchronize());
        CK(cudaMemset(bad, 0, sizeof(*bad)));
        count_nonzero<<<1024, 256>>>((const unsigned long long *)again, bytes / 8, bad);
        CK(cudaMemcpy(&nbad, bad, sizeof(nbad), cudaMemcpyDeviceToHost));
        corrupted += nbad != 0;
        CK(cudaFree(again));
    }
    printf("race nccl trials=%d reused=%d corrupted=%d\n", trials, reused, corrupted);
    CK(cudaFree(src));
    CK(cudaFree(bad));
    return 0;
}

static int overlap(nccl_comm comm, cudaStream_t nb, int iters)
{
    const size_t bytes = (size_t)1 << 30, block = (size_t)64 << 20;
    void *src, *dst;
    CK(cudaMalloc(&src, bytes));
    CK(cudaMalloc(&dst, bytes));
    std::vector<double> us;
    for (int i = 0; i < iters + 3; i++) {
        CK(cudaDeviceSynchronize());
        auto t0 = std::chrono::steady_clock::now();
        NK(ncclAllGather(src, dst, bytes, NCCL_INT8, comm, nb));
        for (int k = 0; k < 24; k++) {
            void *p;
            CK(cudaMalloc(&p, block));
            CK(cudaMemsetAsync(p, k, block, cudaStreamLegacy));
            CK(cudaFree(p));
        }
        CK(cudaDeviceSynchronize());
        auto t1 = std::chrono::steady_clock::now();
        if (i >= 3)
            us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
    std::sort(us.begin(), us.end());
    printf("overlap nccl iters=%d median_us=%.1f\n", iters, us[us.size() / 2]);
    CK(cudaFree(src));
    CK(cudaFree(dst));
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2 || (strcmp(argv[1], "race") && strcmp(argv[1], "overlap"))) {
        fprintf(stderr, "usage: nccl_comm race|overlap [N]\n");
        return 2;
    }
    int n = argc > 2 ? atoi(argv[2]) : 20;
    CK(cudaSetDevice(0));
    cudaStream_t nb;
    CK(cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking));
    nccl_comm comm;
    int dev = 0;
    NK(ncclCommInitAll(&comm, 1, &dev));
    int r = strcmp(argv[1], "race") == 0 ? race(comm, nb, n) : overlap(comm, nb, n);
    NK(ncclCommDestroy(comm));
    CK(cudaStreamDestroy(nb));
    return r;
}
