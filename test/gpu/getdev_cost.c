/* SPDX-License-Identifier: Apache-2.0 */
/*
 * getdev_cost.c - what finding the current device costs, from one thread
 * and from 8 at once: cudaGetDevice, cuCtxGetCurrent and cuCtxGetDevice,
 * 2 000 000 calls per thread. Raw runtime, no cupool. One line per call
 * and thread count: ns per call seen by each thread, and calls per second
 * in all. (cupool asks for the current device on every cudaMalloc and
 * cudaFree of a process that sees more than one GPU.)
 */
#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <cuda.h>
#include <cuda_runtime_api.h>

enum { CALLS = 2000000 };
static int which;

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static void *calls(void *arg)
{
    (void)arg;
    int d;
    CUcontext c;
    CUdevice dv;
    cudaSetDevice(0);
    for (int i = 0; i < CALLS; i++) {
        if (which == 0)
            cudaGetDevice(&d);
        else if (which == 1)
            cuCtxGetCurrent(&c);
        else
            cuCtxGetDevice(&dv);
    }
    return NULL;
}

int main(void)
{
    static const char *const names[] = {"cudaGetDevice", "cuCtxGetCurrent", "cuCtxGetDevice"};
    cudaFree(0);
    for (which = 0; which < 3; which++) {
        for (int n = 1; n <= 8; n *= 8) {
            pthread_t t[8];
            double t0 = now_ns();
            for (int i = 0; i < n; i++)
                pthread_create(&t[i], NULL, calls, NULL);
            for (int i = 0; i < n; i++)
                pthread_join(t[i], NULL);
            double ns = now_ns() - t0;
            printf("%s threads %d: %.1f ns/call per thread, %.1f Mcalls/s in all\n",
                   names[which], n, ns / CALLS, n * CALLS / ns * 1e3);
        }
    }
    return 0;
}
