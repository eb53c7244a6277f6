/* SPDX-License-Identifier: Apache-2.0 */
/*
 * simnccl.c - a simulated NCCL (libnccl.so.2) on the simulated driver, for
 * the fence's comm streams (shim/watch/comm.h) and the job's communicators
 * (shim/watch/job.h). A collective queues one kernel on its stream
 * (cuLaunchKernel, which CUPTI reports with the stream); inside a group, at
 * the group's end. A communicator holds 1 MiB of its own, allocated with
 * cudaMalloc when it is made and freed when it is destroyed, as NCCL's own
 * buffers are. Only what the scenarios call.
 *
 * A job: ncclGetUniqueId makes 128 bytes, 16 of them random, that the
 * program hands to its other ranks (a file, in the scenarios); each
 * process's ncclCommInitRank records its rank and size, and the device
 * current then. Nothing crosses between processes: there is no transport.
 * So ncclCommSplit cannot learn its child's size from the other ranks: the
 * child has SIMNCCL_SPLIT_NRANKS ranks (else the parent's), and the
 * rank's key is its rank in it (as NCCL orders a color's ranks by key).
 *
 * ncclCommMemStats, as NCCL 2.29.7's nccl.h declares it:
 *   ncclResult_t ncclCommMemStats(ncclComm_t comm, ncclCommMemStat_t stat,
 *                                 uint64_t *value);
 * with ncclStatGpuMemSuspend = 0 (bytes a suspend would free),
 * ncclStatGpuMemSuspended = 1 (1 while suspended), ncclStatGpuMemPersist
 * = 2 (bytes it keeps) and ncclStatGpuMemTotal = 3. It answers only under
 * SIMNCCL_MEMSTATS=1; else ncclInvalidUsage, as an NCCL that keeps no such
 * figures (RCCL with its memory manager off) answers: cupool reads a
 * refusal as it reads a missing function. Here a communicator's 1 MiB is
 * 768 KiB that a suspend would free and 256 KiB that stays.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#define EXPORT __attribute__((visibility("default")))

typedef int nccl_result;
enum { NCCL_INVALID_ARGUMENT = 4, NCCL_INVALID_USAGE = 5, SPLIT_NOCOLOR = -1 };
enum { OWN_BYTES = 1 << 20, SUSPENDABLE_BYTES = 3 << 18 };
typedef struct { char internal[128]; } nccl_unique_id;
typedef struct sim_comm {
    void *own;
    int rank, nranks, device;
} sim_comm;

static _Thread_local int group;
static _Thread_local void *queued[64];
static _Thread_local int nqueued;

static nccl_result launch(void *stream)
{
    if (group) {
        if (nqueued == 64)
            return NCCL_INVALID_USAGE;
        queued[nqueued++] = stream;
        return 0;
    }
    return cuLaunchKernel(NULL, 1, 1, 1, 1, 1, 1, 0, (CUstream)stream, NULL, NULL) ? 1 : 0;
}

/* A communicator of rank in nranks on the current device, its own memory
 * allocated; 0 or ncclSystemError. */
static nccl_result comm_make(void **comm, int rank, int nranks)
{
    if (nranks < 1 || rank < 0 || rank >= nranks)
        return NCCL_INVALID_ARGUMENT;
    sim_comm *c = calloc(1, sizeof(*c));
    if (!c || cudaGetDevice(&c->device) != cudaSuccess ||
        cudaMalloc(&c->own, OWN_BYTES) != cudaSuccess) {
        free(c);
        return 2;
    }
    c->rank = rank;
    c->nranks = nranks;
    *comm = c;
    return 0;
}

EXPORT nccl_result ncclGetUniqueId(nccl_unique_id *id)
{
    memset(id, 0, sizeof(*id));
    memcpy(id->internal, "simnccl", 8);
    return getrandom(id->internal + 8, 16, 0) == 16 ? 0 : 2;
}

EXPORT nccl_result ncclCommInitRank(void **comm, int n, nccl_unique_id id, int rank)
{
    (void)id;
    return comm_make(comm, rank, n);
}

EXPORT nccl_result ncclCommInitRankConfig(void **comm, int n, nccl_unique_id id, int rank,
                                          void *cfg)
{
    (void)cfg;
    return ncclCommInitRank(comm, n, id, rank);
}

EXPORT nccl_result ncclCommInitAll(void **comm, int n, const int *devs)
{
    (void)devs;
    if (n != 1)
        return NCCL_INVALID_ARGUMENT;
    return comm_make(comm, 0, 1);
}

EXPORT nccl_result ncclCommSplit(void *comm, int color, int key, void **out, void *cfg)
{
    (void)cfg;
    sim_comm *p = comm;
    *out = NULL;
    if (color == SPLIT_NOCOLOR)
        return 0;
    const char *n = getenv("SIMNCCL_SPLIT_NRANKS");
    return comm_make(out, key, n ? atoi(n) : p->nranks);
}

EXPORT nccl_result ncclCommDestroy(void *comm)
{
    sim_comm *c = comm;
    cudaFree(c->own);
    free(c);
    return 0;
}

EXPORT nccl_result ncclCommAbort(void *comm)
{
    return comm ? ncclCommDestroy(comm) : 0;
}

EXPORT nccl_result ncclCommCount(const void *comm, int *n)
{
    *n = ((const sim_comm *)comm)->nranks;
    return 0;
}

EXPORT nccl_result ncclCommUserRank(const void *comm, int *rank)
{
    *rank = ((const sim_comm *)comm)->rank;
    return 0;
}

EXPORT nccl_result ncclCommCuDevice(const void *comm, int *device)
{
    *device = ((const sim_comm *)comm)->device;
    return 0;
}

EXPORT nccl_result ncclCommMemStats(void *comm, int stat, uint64_t *value)
{
    const char *on = getenv("SIMNCCL_MEMSTATS");
    static const uint64_t figures[] = {SUSPENDABLE_BYTES, 0, OWN_BYTES - SUSPENDABLE_BYTES,
                                       OWN_BYTES};
    if (!on || strcmp(on, "1"))
        return NCCL_INVALID_USAGE;
    if (!comm || stat < 0 || stat > 3)
        return NCCL_INVALID_ARGUMENT;
    *value = figures[stat];
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
