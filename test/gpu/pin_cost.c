/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pin_cost.c - what pinning host memory costs, the ways cupool pause could
 * get its staging memory: GIB GiB (argv[1], default 8) in CHUNK-byte
 * pieces, by cuMemHostAlloc or by cuMemHostRegister of memory mapped with
 * transparent huge pages and touched first, on 1 and on 8 threads. Prints
 * one line per way: seconds and GiB/s.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include <cuda.h>

static size_t chunk, n;
static int way;
static CUcontext ctx;
static void **bufs;
static int next_i;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void *worker(void *arg)
{
    (void)arg;
    cuCtxSetCurrent(ctx);
    for (;;) {
        pthread_mutex_lock(&lock);
        int i = next_i++;
        pthread_mutex_unlock(&lock);
        if ((size_t)i >= n)
            return NULL;
        if (way == 0) {
            if (cuMemHostAlloc(&bufs[i], chunk, CU_MEMHOSTALLOC_PORTABLE) != CUDA_SUCCESS)
                printf("alloc failed\n");
            continue;
        }
        void *p = mmap(NULL, chunk, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS |
                       (way == 2 ? MAP_POPULATE : 0), -1, 0);
        if (way == 1) {
            madvise(p, chunk, MADV_HUGEPAGE);
            memset(p, 0, chunk);
        }
        if (cuMemHostRegister(p, chunk, CU_MEMHOSTREGISTER_PORTABLE) != CUDA_SUCCESS)
            printf("register failed\n");
        bufs[i] = p;
    }
}

static void run(int w, int threads, size_t ch, size_t total)
{
    way = w;
    chunk = ch;
    n = total / ch;
    next_i = 0;
    bufs = calloc(n, sizeof(*bufs));
    double t0 = now();
    pthread_t t[64];
    for (int i = 0; i < threads; i++)
        pthread_create(&t[i], NULL, worker, NULL);
    for (int i = 0; i < threads; i++)
        pthread_join(t[i], NULL);
    double s = now() - t0;
    static const char *names[] = {"cuMemHostAlloc", "THP mmap+touch+cuMemHostRegister",
                                  "mmap MAP_POPULATE+cuMemHostRegister"};
    printf("%-38s %2d threads, %4zu MiB chunks: %.2f s, %.2f GiB/s\n", names[w], threads,
           ch >> 20, s, (double)total / (1 << 30) / s);
    for (size_t i = 0; i < n; i++) {
        if (w == 0)
            cuMemFreeHost(bufs[i]);
        else {
            cuMemHostUnregister(bufs[i]);
            munmap(bufs[i], chunk);
        }
    }
    free(bufs);
}

int main(int argc, char **argv)
{
    size_t total = (size_t)(argc > 1 ? atoi(argv[1]) : 8) << 30;
    CUdevice d;
    cuInit(0);
    cuDeviceGet(&d, 0);
    cuDevicePrimaryCtxRetain(&ctx, d);
    cuCtxSetCurrent(ctx);
    run(0, 1, 256 << 20, total);
    run(0, 8, 256 << 20, total);
    run(0, 16, 256 << 20, total);
    run(0, 8, 1024 << 20, total);
    run(1, 8, 256 << 20, total);
    run(1, 16, 256 << 20, total);
    run(2, 8, 256 << 20, total);
    return 0;
}
