/* SPDX-License-Identifier: Apache-2.0 */
/*
 * demo.c - what `make demo` runs, with and without cupool, linked against
 * the real CUDA runtime when a GPU is present and the simulated one
 * otherwise.
 *   demo pairs        times 5000 cudaMalloc+cudaFree pairs of 1 MiB
 *   demo serve READY  8 MiB blocks until cudaMalloc fails
 *                     (cupool's cap), frees them all (cupool caches them),
 *                     touches READY and waits (at most 20 s) for SIGTERM,
 *                     while scripts/demo looks at it from outside
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cuda_runtime_api.h>

static volatile sig_atomic_t stop;
static void on_term(int sig) { (void)sig; stop = 1; }

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static int pairs(void)
{
    enum { PAIRS = 5000 };
    void *p;
    double t0 = now_ms();
    for (int i = 0; i < PAIRS; i++) {
        if (cudaMalloc(&p, 1 << 20) != cudaSuccess) {
            fprintf(stderr, "demo: cudaMalloc failed\n");
            return 1;
        }
        cudaFree(p);
    }
    double ms = now_ms() - t0;
    printf("   %d pairs of 1 MiB in %.1f ms: %.2f us a pair\n", PAIRS, ms, ms * 1000 / PAIRS);
    return 0;
}

int main(int argc, char **argv)
{
    enum { MAX = 256 };
    setvbuf(stdout, NULL, _IOLBF, 0); /* interleave with cupool's stderr */
    if (argc < 2)
        return 2;
    if (strcmp(argv[1], "serve") || argc < 3)
        return pairs();
    void *held[MAX];
    int n = 0;
    cudaError_t e = cudaSuccess;
    while (n < MAX && (e = cudaMalloc(&held[n], 8 << 20)) == cudaSuccess)
        n++;
    printf("   %d blocks of 8 MiB, until cudaMalloc said: %s\n", n, cudaGetErrorString(e));
    for (int i = 0; i < n; i++)
        cudaFree(held[i]);
    printf("   freed them all: cupool keeps them cached for the next cudaMalloc\n");
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_term;
    sigaction(SIGTERM, &sa, NULL);
    FILE *f = fopen(argv[2], "w");
    if (f)
        fclose(f);
    for (int i = 0; i < 2000 && !stop; i++) {
        struct timespec t = {0, 10000000L};
        nanosleep(&t, NULL);
    }
    return 0;
}
