/* SPDX-License-Identifier: Apache-2.0 */
/*
 * fence_parts.c - what each CUDA call in cupool's barrier fence costs on
 * the host (median of 9 batches of 20 000 calls), to decide what a cheaper
 * fence may drop. Raw runtime, no cupool.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <cuda.h>
#include <cuda_runtime_api.h>

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#define TIME(label, stmt)                                                     \
    do {                                                                      \
        double v[9];                                                          \
        for (int r = -1; r < 9; r++) {                                        \
            double t0 = now_ns();                                             \
            for (int i = 0; i < 20000; i++) { stmt; }                         \
            if (r >= 0) v[r] = (now_ns() - t0) / 20000;                       \
        }                                                                     \
        qsort(v, 9, sizeof(v[0]), cmp);                                       \
        printf("%-44s %8.1f ns\n", label, v[4]);                              \
    } while (0)

int main(void)
{
    cudaFree(0);
    cudaEvent_t ev;
    cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    cudaStream_t nb;
    cudaStreamCreateWithFlags(&nb, cudaStreamNonBlocking);
    enum cudaStreamCaptureStatus st;
    int dev;
    TIME("cudaGetDevice", cudaGetDevice(&dev));
    TIME("cudaThreadExchangeStreamCaptureMode x2", {
        enum cudaStreamCaptureMode m = cudaStreamCaptureModeRelaxed;
        cudaThreadExchangeStreamCaptureMode(&m);
        cudaThreadExchangeStreamCaptureMode(&m);
    });
    TIME("cudaStreamIsCapturing(legacy)", cudaStreamIsCapturing(cudaStreamLegacy, &st));
    TIME("cudaEventRecord(legacy)", cudaEventRecord(ev, cudaStreamLegacy));
    TIME("cudaEventRecord(non-blocking)", cudaEventRecord(ev, nb));
    TIME("cudaStreamWaitEvent(non-blocking)", cudaStreamWaitEvent(nb, ev, 0));
    /* Cheaper ways to put something on the legacy stream. */
    cudaDeviceSynchronize();
    TIME("cudaStreamWaitEvent(legacy, done event)",
         cudaStreamWaitEvent(cudaStreamLegacy, ev, 0));
    CUevent cev;
    cuEventCreate(&cev, CU_EVENT_DISABLE_TIMING);
    TIME("cuEventRecord(legacy) (driver API)", cuEventRecord(cev, CU_STREAM_LEGACY));
    CUdeviceptr word;
    cuMemAlloc(&word, 64);
    TIME("cuStreamWriteValue32(legacy)",
         cuStreamWriteValue32(CU_STREAM_LEGACY, word, 1, 0));
    cudaDeviceSynchronize();
    return 0;
}
