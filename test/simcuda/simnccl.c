/* SPDX-License-Identifier: Apache-2.0 */
/*
 * simnccl.c - a simulated NCCL (libnccl.so.2) on the simulated driver, for
 * the fence's comm streams (shim/watch/comm.h): one rank. A collective queues one
 * kernel on its stream (cuLaunchKernel, which CUPTI reports with the
 * stream); inside a group, at the group's end. A communicator holds 1 MiB
 * of its own, allocated with cudaMalloc when it is made and freed when it
 * is destroyed, as NCCL's own buffers are. Only what the scenarios call.
 */
#include <stdlib.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#define EXPORT __attribute__((visibility("default")))

typedef int nccl_result;
typedef struct sim_comm { void *own; } sim_comm;

static _Thread_local int group;
static _Thread_local void *queued[64];
static _Thread_local int nqueued;

static nccl_result launch(void *stream)
{
    if (group) {
        if (nqueued == 64)
            return 5; /* ncclInvalidUsage */
        queued[nqueued++] = stream;
        return 0;
    }
    return cuLaunchKernel(NULL, 1, 1, 1, 1, 1, 1, 0, (CUstream)stream, NULL, NULL) ? 1 : 0;
}

EXPORT nccl_result ncclCommInitAll(void **comm, int n, const int *devs)
{
    (void)devs;
    if (n != 1)
        return 4; /* ncclInvalidArgument */
    sim_comm *c = calloc(1, sizeof(*c));
    if (!c || cudaMalloc(&c->own, 1 << 20) != cudaSuccess) {
        free(c);
        return 2;
    }
    *comm = c;
    return 0;
}

EXPORT nccl_result ncclCommDestroy(void *comm)
{
    sim_comm *c = comm;
    cudaFree(c->own);
    free(c);
    return 0;
}

EXPORT nccl_result ncclCommCount(const void *comm, int *n)
{
    (void)comm;
    *n = 1;
    return 0;
}

EXPORT nccl_result ncclAllReduce(const void *s, void *r, size_t n, int t, int op, void *c,
                                 void *stream)
{
    (void)s, (void)r, (void)n, (void)t, (void)op, (void)c;
    return launch(stream);
}

EXPORT nccl_result ncclAllGather(const void *s, void *r, size_t n, int t, void *c,
                                 void *stream)
{
    (void)s, (void)r, (void)n, (void)t, (void)c;
    return launch(stream);
}

EXPORT nccl_result ncclGroupStart(void)
{
    group++;
    return 0;
}

EXPORT nccl_result ncclGroupEnd(void)
{
    if (!group)
        return 5;
    if (--group)
        return 0;
    nccl_result r = 0;
    for (int i = 0; i < nqueued; i++)
        r |= launch(queued[i]);
    nqueued = 0;
    return r;
}
