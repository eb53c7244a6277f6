/* SPDX-License-Identifier: Apache-2.0 */
/*
 * hold.c - holds GPU memory for the checks that look from outside.
 *   hold fill CHUNK_MIB READY   allocate chunks until cudaMalloc fails,
 *                               print the count, touch READY, sleep 20 s
 *   hold cache MIB READY        allocate MIB in 64 MiB chunks, free them all
 *                               (cupool keeps them cached), touch READY,
 *                               sleep 20 s (SIGUSR1 should return them)
 *   hold idle READY             a context and nothing else
 *   hold keep MIB READY GO      MIB live, filled with a pattern, and as much
 *                               again freed (cached under cupool); touch
 *                               READY, wait for GO (scripts/gpu-pause
 *                               pauses and resumes it meanwhile), check
 *                               the pattern: prints "kept ok" or "kept BAD"
 *   hold free                   print cudaMemGetInfo's free bytes
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cuda_runtime_api.h>

/* Touches path, then sleeps 20 s in all, whatever signals interrupt it. */
static void ready(const char *path)
{
    FILE *f = fopen(path, "w");
    if (f)
        fclose(f);
    fflush(stdout);
    struct timespec left = {20, 0};
    while (nanosleep(&left, &left) != 0)
        ;
}

/* hold keep: see above. */
static int keep(size_t mib, const char *ready_path, const char *go)
{
    void *live, *spare;
    size_t n = mib << 20;
    if (cudaMalloc(&live, n) != cudaSuccess || cudaMalloc(&spare, n) != cudaSuccess ||
        cudaMemset(live, 0x5a, n) != cudaSuccess || cudaFree(spare) != cudaSuccess ||
        cudaDeviceSynchronize() != cudaSuccess)
        return 1;
    FILE *f = fopen(ready_path, "w");
    if (f)
        fclose(f);
    while (access(go, F_OK) != 0)
        usleep(10000);
    unsigned char *host = malloc(n);
    if (!host || cudaMemcpy(host, live, n, cudaMemcpyDeviceToHost) != cudaSuccess)
        return 1;
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += host[i] != 0x5a;
    printf("kept %s\n", bad ? "BAD" : "ok");
    return bad != 0;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    cudaFree(0);
    if (!strcmp(argv[1], "free")) {
        size_t f, t;
        cudaMemGetInfo(&f, &t);
        printf("%zu\n", f);
        return 0;
    }
    if (!strcmp(argv[1], "idle") && argc > 2) {
        ready(argv[2]);
        return 0;
    }
    if (argc < 4)
        return 2;
    size_t mib = strtoull(argv[2], NULL, 0);
    if (!strcmp(argv[1], "fill")) {
        int n = 0;
        void *p;
        cudaError_t e;
        while ((e = cudaMalloc(&p, mib << 20)) == cudaSuccess)
            n++;
        printf("allocated %d chunks of %zu MiB, then: %s\n", n, mib,
               cudaGetErrorString(e));
        ready(argv[3]);
    } else if (!strcmp(argv[1], "keep") && argc > 4) {
        return keep(mib, argv[3], argv[4]);
    } else if (!strcmp(argv[1], "cache")) {
        int n = (int)(mib / 64);
        void **p = calloc((size_t)n, sizeof(*p));
        for (int i = 0; i < n; i++)
            if (cudaMalloc(&p[i], 64 << 20) != cudaSuccess)
                return 1;
        for (int i = 0; i < n; i++)
            cudaFree(p[i]);
        printf("cached %d MiB\n", n * 64);
        ready(argv[3]);
    }
    return 0;
}
