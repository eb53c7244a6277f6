/* SPDX-License-Identifier: Apache-2.0 */
// nccl_lat.cu - NCCL's latency between two GPUs, as nccl-tests measures it:
// one process drives both GPUs (ncclCommInitAll), each on its own
// non-blocking stream, buffers from cudaMalloc. For each size from 8 B to
// 128 MiB (x8 a step): a send/recv pair each way, and an all-reduce of
// floats; ITERS operations in a row (fewer for large sizes), then both
// streams synchronized; the median of 5 such batches, in microseconds per
// operation.
//
//   nccl_lat [LABEL]   prints one JSON line:
//     {"bench":"nccl","mode":LABEL,"sendrecv_us":{...},"allreduce_us":{...}}
//
// Built the nvcc default way (static runtime) against NCCL's libnccl.so.2
// (NCCL_LIB, by default the one PyTorch's wheels bring).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <cuda_runtime.h>

typedef int nccl_result;
typedef void *nccl_comm;
extern "C" nccl_result ncclCommInitAll(nccl_comm *comm, int n, const int *devs);
extern "C" nccl_result ncclCommDestroy(nccl_comm comm);
extern "C" nccl_result ncclAllReduce(const void *send, void *recv, size_t count, int type,
                                     int op, nccl_comm comm, cudaStream_t stream);
extern "C" nccl_result ncclSend(const void *buf, size_t count, int type, int peer,
                                nccl_comm comm, cudaStream_t stream);
extern "C" nccl_result ncclRecv(void *buf, size_t count, int type, int peer,
                                nccl_comm comm, cudaStream_t stream);
extern "C" nccl_result ncclGroupStart(void);
extern "C" nccl_result ncclGroupEnd(void);
enum { NCCL_INT8 = 0, NCCL_FLOAT32 = 7, NCCL_SUM = 0 };

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); exit(2); } } while (0)
#define NK(x) do { nccl_result r_ = (x); if (r_ != 0) { \
    fprintf(stderr, "%s:%d %s: NCCL error %d\n", __FILE__, __LINE__, #x, r_); exit(2); } } while (0)

static nccl_comm comms[2];
static cudaStream_t streams[2];
static void *sendbuf[2], *recvbuf[2];

static void one(bool allreduce, size_t bytes)
{
    NK(ncclGroupStart());
    for (int r = 0; r < 2; r++) {
        if (allreduce) {
            NK(ncclAllReduce(sendbuf[r], recvbuf[r], bytes / 4, NCCL_FLOAT32, NCCL_SUM,
                             comms[r], streams[r]));
        } else {
            NK(ncclSend(sendbuf[r], bytes, NCCL_INT8, 1 - r, comms[r], streams[r]));
            NK(ncclRecv(recvbuf[r], bytes, NCCL_INT8, 1 - r, comms[r], streams[r]));
        }
    }
    NK(ncclGroupEnd());
}

static void sync_both(void)
{
    for (int r = 0; r < 2; r++)
        CK(cudaStreamSynchronize(streams[r]));
}

static double median_us(bool allreduce, size_t bytes)
{
    int iters = bytes >= (8u << 20) ? 20 : 200;
    std::vector<double> v;
    for (int i = 0; i < 10; i++)
        one(allreduce, bytes);
    sync_both();
    for (int b = 0; b < 5; b++) {
        auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < iters; i++)
            one(allreduce, bytes);
        sync_both();
        auto t1 = std::chrono::steady_clock::now();
        v.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / iters);
    }
    std::sort(v.begin(), v.end());
    return v[2];
}

int main(int argc, char **argv)
{
    const size_t max = (size_t)128 << 20;
    int n = 0;
    CK(cudaGetDeviceCount(&n));
    if (n < 2) {
        fprintf(stderr, "nccl_lat: needs two GPUs, found %d\n", n);
        return 77;
    }
    int devs[2] = {0, 1};
    NK(ncclCommInitAll(comms, 2, devs));
    for (int r = 0; r < 2; r++) {
        CK(cudaSetDevice(r));
        CK(cudaStreamCreateWithFlags(&streams[r], cudaStreamNonBlocking));
        CK(cudaMalloc(&sendbuf[r], max));
        CK(cudaMalloc(&recvbuf[r], max));
        CK(cudaMemset(sendbuf[r], 0, max));
    }
    CK(cudaSetDevice(0));
    printf("{\"bench\":\"nccl\",\"mode\":\"%s\"", argc > 1 ? argv[1] : "plain");
    for (int ar = 0; ar < 2; ar++) {
        printf(",\"%s\":{", ar ? "allreduce_us" : "sendrecv_us");
        for (size_t b = 8, k = 0; b <= max; b *= 8, k++)
            printf("%s\"%zu\":%.2f", k ? "," : "", b, median_us(ar, b));
        printf("}");
    }
    printf("}\n");
    for (int r = 0; r < 2; r++) {
        CK(cudaSetDevice(r));
        CK(cudaFree(sendbuf[r]));
        CK(cudaFree(recvbuf[r]));
        NK(ncclCommDestroy(comms[r]));
    }
    return 0;
}
