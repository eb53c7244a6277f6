/*
 * demo.c - what `make demo` runs under cupool: allocate in a loop, hit the
 * cap, free everything, get flushed by SIGUSR1, dump statistics. Linked
 * against the real CUDA runtime when a GPU is present, the simulated one
 * otherwise. `demo loop` stops after the loop (for the run without cupool,
 * which has no signal handlers).
 */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <cuda_runtime_api.h>

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static void pause_ms(long ms)
{
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&t, &t))
        ;
}

static void show_free(const char *when)
{
    size_t f, t;
    if (cudaMemGetInfo(&f, &t) == cudaSuccess)
        printf("  cudaMemGetInfo %s: %zu MiB free of %zu MiB\n", when, f >> 20, t >> 20);
}

int main(int argc, char **argv)
{
    enum { PAIRS = 5000, MAX = 256 };
    setvbuf(stdout, NULL, _IOLBF, 0); /* interleave with cupool's stderr */
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
    printf("1. %d cudaMalloc+cudaFree pairs of 1 MiB: %.1f ms, %.2f us a pair\n",
           PAIRS, ms, ms * 1000 / PAIRS);
    if (argc > 1 && argv[1][0] == 'l') /* "loop": the comparison run */
        return 0;

    void *held[MAX];
    int n = 0;
    cudaError_t e = cudaSuccess;
    while (n < MAX && (e = cudaMalloc(&held[n], 8 << 20)) == cudaSuccess)
        n++;
    printf("2. allocated %d blocks of 8 MiB, then cudaMalloc said: %s\n", n,
           cudaGetErrorString(e));
    show_free("at the cap");
    for (int i = 0; i < n; i++)
        cudaFree(held[i]);
    printf("3. freed them all: cupool keeps the memory cached for reuse\n");
    show_free("after the frees");
    printf("4. SIGUSR1: cupool returns its cache to the driver\n");
    fflush(stdout);
    raise(SIGUSR1);
    pause_ms(300);
    printf("5. SIGUSR2: cupool writes its statistics (JSON) to stderr\n");
    fflush(stdout);
    raise(SIGUSR2);
    pause_ms(300);
    return 0;
}
