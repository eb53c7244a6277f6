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
 *
 * ncclCommSuspend(comm, NCCL_SUSPEND_MEM) and ncclCommResume(comm), with
 * NCCL 2.29.7's rules: a suspend frees the 768 KiB (cudaFree, so the
 * driver's and cupool's figures see it go) and is refused
 * (ncclInvalidUsage) while an operation on comm is outstanding; here, a
 * collective is outstanding from its kernel's launch until the device
 * synchronizes (simcuda's syncs counter moves: cudaDeviceSynchronize, or a
 * cudaFree, which synchronizes). A collective on a suspended communicator
 * is ncclInvalidUsage. A resume allocates the memory again and meets the
 * communicator's other ranks: each rank keeps, in the file
 * SIMNCCL_DIR/simnccl-KEY-RANK (KEY: a hash every rank computes alike, as
 * cupool's job.c does), how many suspends and resumes it began; the k-th
 * resume waits until every other rank began its k-th resume too, or never
 * made a k-th suspend (a rank whose suspend failed: the others come back
 * without it), for up to SIMNCCL_RESUME_TIMEOUT seconds (10), else
 * ncclRemoteError, still suspended. A resume inside a group begins at once
 * (the other ranks see it) and waits at the group's end for all the
 * group's barriers together, so that one thread can resume two ranks of a
 * communicator; if one is not met in time, every resume of the group
 * fails (ncclRemoteError from ncclGroupEnd), all still suspended.
 * SIMNCCL_SUSPEND_FAIL=1 refuses every
 * suspend as if an operation were outstanding; =after1 every one after
 * the process's first, 300 ms late (a slow rank: the others have
 * suspended by then). Built with
 * -DSIMNCCL_NO_SUSPEND (libnccl-nosuspend.so), it has neither call, as
 * NCCL 2.28.9 has not.
 */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include <cuda.h>
#include <cuda_runtime_api.h>

#include "simcuda.h"

#define EXPORT __attribute__((visibility("default")))

typedef int nccl_result;
enum {
    NCCL_SYSTEM_ERROR = 2, NCCL_INVALID_ARGUMENT = 4, NCCL_INVALID_USAGE = 5,
    NCCL_REMOTE_ERROR = 6, SPLIT_NOCOLOR = -1, NCCL_SUSPEND_MEM = 1,
};
enum { OWN_BYTES = 1 << 20, SUSPENDABLE_BYTES = 3 << 18 };
typedef struct { char internal[128]; } nccl_unique_id;
typedef struct sim_comm {
    void *keep, *spare;       /* 256 KiB kept; 768 KiB a suspend frees */
    int rank, nranks, device;
    uint64_t key;             /* alike in every rank (the resume's files) */
    unsigned splits;          /* splits of it so far */
    unsigned suspends, resumes; /* begun (the resume's barrier) */
    bool suspended;
    bool launched;            /* a collective since ... */
    unsigned long launch_syncs; /* ... the device's syncs then */
} sim_comm;

static _Thread_local int group;
static _Thread_local struct { void *stream; sim_comm *comm; } queued[64];
static _Thread_local int nqueued;
#ifndef SIMNCCL_NO_SUSPEND
static _Thread_local sim_comm *resuming[64]; /* begun in the group */
static _Thread_local int nresuming;
#endif

static uint64_t hash(uint64_t h, const void *p, size_t n)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static unsigned long device_syncs(int dev)
{
    simcuda_stats st;
    simcuda_get_stats(dev, &st);
    return st.syncs;
}

static nccl_result launch(void *stream, sim_comm *c)
{
    if (c && c->suspended)
        return NCCL_INVALID_USAGE;
    if (group) {
        if (nqueued == 64)
            return NCCL_INVALID_USAGE;
        queued[nqueued].stream = stream;
        queued[nqueued++].comm = c;
        return 0;
    }
    if (c) {
        c->launched = true;
        c->launch_syncs = device_syncs(c->device);
    }
    return cuLaunchKernel(NULL, 1, 1, 1, 1, 1, 1, 0, (CUstream)stream, NULL, NULL) ? 1 : 0;
}

/* A communicator of rank in nranks on the current device, named key, its
 * own memory allocated; 0 or ncclSystemError. */
static nccl_result comm_make(void **comm, int rank, int nranks, uint64_t key)
{
    if (nranks < 1 || rank < 0 || rank >= nranks)
        return NCCL_INVALID_ARGUMENT;
    sim_comm *c = calloc(1, sizeof(*c));
    if (!c || cudaGetDevice(&c->device) != cudaSuccess ||
        cudaMalloc(&c->keep, OWN_BYTES - SUSPENDABLE_BYTES) != cudaSuccess ||
        cudaMalloc(&c->spare, SUSPENDABLE_BYTES) != cudaSuccess) {
        if (c && c->keep)
            cudaFree(c->keep);
        free(c);
        return NCCL_SYSTEM_ERROR;
    }
    c->rank = rank;
    c->nranks = nranks;
    c->key = key;
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
    return comm_make(comm, rank, n, hash(0xcbf29ce484222325ull, &id, sizeof(id)));
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
    uint64_t key = 0;
    return getrandom(&key, sizeof(key), 0) == sizeof(key) ? comm_make(comm, 0, 1, key)
                                                          : NCCL_SYSTEM_ERROR;
}

EXPORT nccl_result ncclCommSplit(void *comm, int color, int key, void **out, void *cfg)
{
    (void)cfg;
    sim_comm *p = comm;
    *out = NULL;
    struct { uint64_t parent; unsigned seq; int color; } k = {p->key, p->splits++, color};
    if (color == SPLIT_NOCOLOR)
        return 0;
    const char *n = getenv("SIMNCCL_SPLIT_NRANKS");
    return comm_make(out, key, n ? atoi(n) : p->nranks, hash(0xcbf29ce484222325ull, &k,
                                                                 sizeof(k)));
}

EXPORT nccl_result ncclCommDestroy(void *comm)
{
    sim_comm *c = comm;
    cudaFree(c->keep);
    if (!c->suspended)
        cudaFree(c->spare);
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
    if (!on || strcmp(on, "1"))
        return NCCL_INVALID_USAGE;
    if (!comm || stat < 0 || stat > 3)
        return NCCL_INVALID_ARGUMENT;
    bool s = ((const sim_comm *)comm)->suspended;
    const uint64_t figures[] = {s ? 0 : SUSPENDABLE_BYTES, s,
                                OWN_BYTES - SUSPENDABLE_BYTES,
                                s ? OWN_BYTES - SUSPENDABLE_BYTES : OWN_BYTES};
    *value = figures[stat];
    return 0;
}

#ifndef SIMNCCL_NO_SUSPEND
/* The file where rank keeps its suspends and resumes begun. */
static void barrier_path(const sim_comm *c, int rank, char *buf, size_t len)
{
    const char *d = getenv("SIMNCCL_DIR");
    if (!d) /* the run's scratch directory (scripts/run-tests), else /tmp */
        d = getenv("TMPDIR");
    snprintf(buf, len, "%s/simnccl-%016llx-%d", d ? d : "/tmp", (unsigned long long)c->key,
             rank);
}

/* Writes c's counts whole (a rename): 0 or ncclSystemError. */
static nccl_result barrier_write(const sim_comm *c)
{
    char path[4096], tmp[4160];
    barrier_path(c, c->rank, path, sizeof(path));
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return NCCL_SYSTEM_ERROR;
    bool ok = fprintf(f, "%u %u\n", c->suspends, c->resumes) > 0;
    if (fclose(f) || !ok || rename(tmp, path))
        return NCCL_SYSTEM_ERROR;
    return 0;
}

/* Whether rank has met c's resume: it began as many resumes, or never made
 * as many suspends (no file: none). */
static bool barrier_met(const sim_comm *c, int rank)
{
    char path[4096];
    barrier_path(c, rank, path, sizeof(path));
    unsigned s = 0, r = 0;
    FILE *f = fopen(path, "r");
    if (f) {
        if (fscanf(f, "%u %u", &s, &r) != 2)
            s = r = 0;
        fclose(f);
    }
    return r >= c->resumes || s < c->resumes;
}

/* Waits for every other rank of c to meet its resume: true, or false after
 * SIMNCCL_RESUME_TIMEOUT seconds. */
static bool barrier_wait(const sim_comm *c)
{
    const char *t = getenv("SIMNCCL_RESUME_TIMEOUT");
    long ticks = (t ? atol(t) : 10) * 100;
    for (long i = 0;; i++) {
        bool all = true;
        for (int q = 0; q < c->nranks && all; q++)
            all = q == c->rank || barrier_met(c, q);
        if (all)
            return true;
        if (i >= ticks)
            return false;
        nanosleep(&(struct timespec){0, 10000000L}, NULL);
    }
}

/* Whether an operation on c is outstanding: a collective whose device has
 * not synchronized since. */
static bool outstanding(const sim_comm *c)
{
    return c->launched && device_syncs(c->device) == c->launch_syncs;
}

EXPORT nccl_result ncclCommSuspend(void *comm, int flags)
{
    sim_comm *c = comm;
    const char *fail = getenv("SIMNCCL_SUSPEND_FAIL");
    if (!c || flags != NCCL_SUSPEND_MEM)
        return NCCL_INVALID_ARGUMENT;
    static atomic_int suspends; /* this process's, for "after1" */
    if (fail && !strcmp(fail, "after1") && atomic_load(&suspends) >= 1) {
        nanosleep(&(struct timespec){0, 300000000L}, NULL); /* the others are done */
        return NCCL_INVALID_USAGE;
    }
    if (c->suspended || outstanding(c) || (fail && !strcmp(fail, "1")))
        return NCCL_INVALID_USAGE;
    atomic_fetch_add(&suspends, 1);
    c->suspends++;
    if (barrier_write(c)) {
        c->suspends--;
        return NCCL_SYSTEM_ERROR;
    }
    cudaFree(c->spare);
    c->spare = NULL;
    c->suspended = true;
    return 0;
}

/* Takes back c's resume begun: still suspended. */
static void resume_undo(sim_comm *c)
{
    c->resumes--;
    barrier_write(c);
}

/* Ends c's resume, its barrier met: 0 or ncclSystemError. */
static nccl_result resume_end(sim_comm *c)
{
    if (cudaMalloc(&c->spare, SUSPENDABLE_BYTES) != cudaSuccess)
        return NCCL_SYSTEM_ERROR;
    c->suspended = false;
    c->launched = false;
    return 0;
}

EXPORT nccl_result ncclCommResume(void *comm)
{
    sim_comm *c = comm;
    if (!c)
        return NCCL_INVALID_ARGUMENT;
    if (!c->suspended)
        return NCCL_INVALID_USAGE;
    if (group && nresuming == 64)
        return NCCL_INVALID_USAGE;
    c->resumes++;
    if (barrier_write(c)) {
        resume_undo(c);
        return NCCL_SYSTEM_ERROR;
    }
    if (group) {
        resuming[nresuming++] = c;
        return 0;
    }
    if (!barrier_wait(c)) {
        resume_undo(c);
        return NCCL_REMOTE_ERROR;
    }
    return resume_end(c);
}

/* The group's resumes end: every barrier met, or every one taken back. */
static nccl_result group_resumes_end(void)
{
    bool met = true;
    for (int i = 0; i < nresuming && met; i++)
        met = barrier_wait(resuming[i]);
    nccl_result r = met ? 0 : NCCL_REMOTE_ERROR;
    for (int i = 0; i < nresuming; i++)
        if (!met)
            resume_undo(resuming[i]);
        else
            r |= resume_end(resuming[i]);
    nresuming = 0;
    return r;
}
#endif

EXPORT nccl_result ncclAllReduce(const void *s, void *r, size_t n, int t, int op, void *c,
                                 void *stream)
{
    (void)s, (void)r, (void)n, (void)t, (void)op;
    return launch(stream, c);
}

EXPORT nccl_result ncclAllGather(const void *s, void *r, size_t n, int t, void *c,
                                 void *stream)
{
    (void)s, (void)r, (void)n, (void)t;
    return launch(stream, c);
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
#ifndef SIMNCCL_NO_SUSPEND
    r = group_resumes_end();
#endif
    for (int i = 0; i < nqueued; i++)
        r |= launch(queued[i].stream, queued[i].comm);
    nqueued = 0;
    return r;
}
