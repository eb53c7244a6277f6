/* SPDX-License-Identifier: Apache-2.0 */
/*
 * pause_prog.c - a program cupool pause moves while it works, on the
 * simulated runtime (test_pause_move.c runs it under cupool with
 * CUPOOL_VMM=1). It fills four blocks with known bytes, then one thread
 * zeroes-and-refills its scratch block with cudaMemsetAsync in a loop and
 * another synchronizes the device in a loop, until the file DIR/go
 * appears; it then checks every block and prints "data ok" (exit 0) or
 * what differs (exit 1). The simulated device memory is host memory that a
 * pause unmaps: a memset while it is away faults, and the program dies.
 *   DIR=...        ready (written once the loops turned) and go live there
 *   CAPTURE=1      a graph capture stays open on a stream of its own
 *   SUBSCRIBE=1    the program subscribes to CUPTI itself at the start
 *   STITCH=1       one block is stitched (CUPOOL_STITCH=1): 32 MiB over
 *                  two 16 MiB holes of a segment, mapped again
 * A thread subscribes to CUPTI once DIR/sub appears, and writes
 * DIR/subscribed after.
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime_api.h>
#include <cupti_callbacks.h>
#include <cupti_result.h>

enum { MIB = 1 << 20 };

CUptiResult cuptiSubscribe(CUpti_SubscriberHandle *sub, CUpti_CallbackFunc cb, void *ud);

static const char *dir;
static atomic_bool stop;
static atomic_ulong loops;
static unsigned char *scratch;

static int exists(const char *name)
{
    char p[512];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    return access(p, F_OK) == 0;
}

static void touch(const char *name)
{
    char p[512];
    snprintf(p, sizeof(p), "%s/%s", dir, name);
    FILE *f = fopen(p, "w");
    if (f)
        fclose(f);
}

static void CUPTIAPI on_call(void *ud, CUpti_CallbackDomain d, CUpti_CallbackId id,
                             const void *data)
{
    (void)ud, (void)d, (void)id, (void)data;
}

static void subscribe(void)
{
    CUpti_SubscriberHandle sub;
    printf("subscribe: %d\n", (int)cuptiSubscribe(&sub, (CUpti_CallbackFunc)on_call, NULL));
}

static void *memset_loop(void *arg)
{
    (void)arg;
    while (!atomic_load(&stop)) {
        if (cudaMemsetAsync(scratch, 0x5a, MIB, 0) != cudaSuccess)
            printf("memset failed\n");
        atomic_fetch_add(&loops, 1);
        usleep(200);
    }
    return NULL;
}

static void *sync_loop(void *arg)
{
    (void)arg;
    while (!atomic_load(&stop)) {
        cudaDeviceSynchronize();
        usleep(200);
    }
    return NULL;
}

static void *subscribe_later(void *arg)
{
    (void)arg;
    while (!atomic_load(&stop) && !exists("sub"))
        usleep(2000);
    if (exists("sub")) {
        subscribe();
        touch("subscribed");
    }
    return NULL;
}

/* Whether the n bytes at p all hold v (the simulated device memory is the
 * host's). */
static int holds(const unsigned char *p, size_t n, unsigned char v)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != v) {
            printf("byte %zu is %#x, not %#x\n", i, p[i], v);
            return 0;
        }
    return 1;
}

/* STITCH=1 (with CUPOOL_STITCH=1): a 32 MiB block served from two 16 MiB
 * holes of one segment mapped again (a stitched range), filled with 0x66,
 * and the block between the holes with 0x44; *d and *b for the check. */
static int stitched(unsigned char **d, unsigned char **b)
{
    unsigned char *big, *a, *c;
    size_t h = 16 * MIB;
    if (cudaMalloc((void **)&big, 3 * h) || cudaFree(big) || cudaMalloc((void **)&a, h) ||
        cudaMalloc((void **)b, h) || cudaMalloc((void **)&c, h) || a != big ||
        cudaMemsetAsync(*b, 0x44, h, 0) || cudaFree(a) || cudaFree(c) ||
        cudaMalloc((void **)d, 2 * h) || (*d >= a && *d < a + 3 * h) ||
        cudaMemsetAsync(*d, 0x66, 2 * h, 0))
        return printf("no stitched block\n"), 1;
    return 0;
}

int main(void)
{
    dir = getenv("DIR");
    setvbuf(stdout, NULL, _IONBF, 0);
    static const size_t sizes[] = {8 * MIB, 20 * MIB, 3 * MIB};
    unsigned char *b[3];
    for (int i = 0; i < 3; i++)
        if (cudaMalloc((void **)&b[i], sizes[i]) != cudaSuccess ||
            cudaMemsetAsync(b[i], 0x11 * (i + 1), sizes[i], 0) != cudaSuccess)
            return printf("setup failed\n"), 2;
    if (cudaMalloc((void **)&scratch, MIB) != cudaSuccess)
        return 2;
    /* BIG=N: N MiB more, in one block (a move of many chunks). */
    size_t big = getenv("BIG") ? (size_t)atoi(getenv("BIG")) * MIB : 0;
    unsigned char *bb = NULL;
    if (big && (cudaMalloc((void **)&bb, big) != cudaSuccess ||
                cudaMemsetAsync(bb, 0x77, big, 0) != cudaSuccess))
        return printf("no big block\n"), 2;
    unsigned char *sd = NULL, *sb = NULL;
    const char *st = getenv("STITCH");
    if (st && *st == '1' && stitched(&sd, &sb))
        return 2;
    cudaStream_t cs = NULL;
    const char *e = getenv("CAPTURE");
    if (e && *e == '1' && (cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking) != cudaSuccess ||
                           cudaStreamBeginCapture(cs, cudaStreamCaptureModeRelaxed) != cudaSuccess))
        return printf("capture failed\n"), 2;
    if ((e = getenv("SUBSCRIBE")) && *e == '1')
        subscribe();
    pthread_t t[3];
    pthread_create(&t[0], NULL, memset_loop, NULL);
    pthread_create(&t[1], NULL, sync_loop, NULL);
    pthread_create(&t[2], NULL, subscribe_later, NULL);
    while (atomic_load(&loops) < 20)
        usleep(1000);
    touch("ready");
    while (!exists("go"))
        usleep(5000);
    atomic_store(&stop, true);
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
    if (cs) {
        cudaGraph_t g;
        cudaStreamEndCapture(cs, &g);
    }
    cudaDeviceSynchronize();
    int ok = holds(scratch, MIB, 0x5a);
    for (int i = 0; i < 3; i++)
        ok &= holds(b[i], sizes[i], (unsigned char)(0x11 * (i + 1)));
    if (sd)
        ok &= holds(sd, 32 * MIB, 0x66) && holds(sb, 16 * MIB, 0x44);
    if (bb)
        ok &= holds(bb, big, 0x77);
    printf(ok ? "data ok after %lu loops\n" : "data corrupt\n", atomic_load(&loops));
    return ok ? 0 : 1;
}
